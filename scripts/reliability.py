#!/usr/bin/env python
"""Run the reliability suite and print what it tried: `python scripts/reliability.py [pytest args...]`.

Runs `pytest tests/reliability` with HUBKERNELS_RELIABILITY_LOG pointing at a temporary file (each test's
`record` fixture appends one JSON line there), then prints a Markdown table (test, cases tried, failures,
seed and figures, the command that re-runs it) and writes it, with how to re-run everything, to RELIABILITY.md.
Exit status: pytest's.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python scripts/reliability.py"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="hubkernels-reliability-") as tmp:
        log = Path(tmp) / "records.jsonl"
        env = {**os.environ, "HUBKERNELS_RELIABILITY_LOG": str(log)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        status = subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/reliability", *argv],
            cwd=ROOT,
            env=env,
        )
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    table = render(records)
    print(table)
    (ROOT / "RELIABILITY.md").write_text(
        "# Reliability suite\n\n"
        "What `tests/reliability/` tried on its last recorded run, one row per test (figures are that run's).\n\n"
        f"Run with `{COMMAND}` at commit {_commit()} on {_machine()}.\n\n"
        + table
        + f"\n\nRe-run everything and rewrite this file with `{COMMAND}`; one row with the command in its "
        "last column.\n"
    )
    return status


def _commit() -> str:
    """The checkout's short commit, with ``+changes`` when tracked files differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    return (head.stdout.strip() or "unknown") + (" (+ uncommitted changes)" if dirty else "")


def _machine() -> str:
    info = Path("/proc/cpuinfo")
    models = [
        line.split(":", 1)[1].strip()
        for line in (info.read_text().splitlines() if info.exists() else [])
        if line.startswith("model name")
    ]
    cpu = models[0] if models else platform.processor()
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"
    )


def render(records: list[dict]) -> str:
    """The Markdown table of the records, in the order the tests ran."""
    rows = ["| test | cases | failures | seed / figures | command |", "|---|---:|---:|---|---|"]
    for r in records:
        figures = {k: v for k, v in r.items() if k not in ("test", "cases", "failures", "seed")}
        shown = ([f"seed {r['seed']}"] if r.get("seed") is not None else []) + [
            f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in figures.items()
        ]
        name = r["test"].split("::", 1)[1] if "::" in r["test"] else r["test"]
        rows.append(
            f"| {name} | {r['cases']} | {r['failures']} | {'; '.join(shown).replace('|', '/') or '-'} "
            f"| `pytest '{r['test']}'` |"
        )
    total_cases = sum(r["cases"] for r in records)
    total_failures = sum(r["failures"] for r in records)
    rows.append(f"| **all {len(records)} records** | **{total_cases}** | **{total_failures}** | | `{COMMAND}` |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
