"""`hubkernels verify [PATH]`: is this kernel shippable here, and if not, why not.

One command, one verdict, one line per finding. In order: build every backend this machine can compile (CUDA
compiles without a GPU where a CUDA torch and nvcc exist; otherwise it is skipped with the reason), the ABI of each
build (kernel-abi-check), the kernel's own tests (pytest on tests/ with LOCAL_KERNELS pointing at the build),
`torch.compile(fullgraph=True)` through every declared op, vectorisation of each ISA clone of the CPU code (counted
per clone from the disassembly, never as a total), and the time of every op beside eager and `torch.compile` of
its own formula on the shapes `benchmarks/benchmark*.py` declares. An op slower than `torch.compile` of its formula
fails, and the failure says where to look: the instruction mix of the compilation this CPU runs against Inductor's
kernel for the formula, and the likely cause with the skill's fix. A backend build.toml lists that cannot be built here
is named in the verdict as unverified, with how to verify it. Progress lines go to stderr and the table to stdout;
when both go to one file, the findings are written once. Exit status: 0 nothing failed, 1 not shippable, 2 usage
error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["CHECKS", "Check", "Verdict", "format_table", "register_cli", "verify"]

#: Every check, in the order verify runs them (`--skip` takes these names).
CHECKS = ("build", "abi", "tests", "compile", "vector", "speed")


@dataclass
class Check:
    """One finding: which check, about what (a backend, an op, a clone), pass / fail / skip, and why."""

    check: str
    subject: str
    status: str
    detail: str = ""
    data: dict = field(default_factory=dict)  # type: ignore[type-arg]

    def line(self) -> str:
        return f"{self.status.upper():4}  {self.check:8} {self.subject:28} {self.detail}"


@dataclass
class Verdict:
    """Every finding of one `verify` run; the kernel is shippable when nothing failed."""

    path: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def unverified(self) -> list[Check]:
        """The build.toml backends not built here: nothing says they compile."""
        return [c for c in self.checks if c.check == "build" and c.status == "skip" and not c.data.get("unlisted")]


def verify(
    path: str | Path = ".",
    *,
    skip: Iterable[str] = (),
    threads: int | None = 1,
    tolerance: float = 0.05,
    dtypes: Iterable[str] = ("fp32", "bf16", "fp16"),
    iters: int = 30,
    progress: bool = False,
    ops: Sequence[str] | None = None,
    shape: dict[str, int] | None = None,
) -> Verdict:
    """Run every check not in `skip` on the kernel at `path` and return the findings.

    `threads` fixes torch's CPU threads while ops are timed (1: stable numbers on a shared machine; None: as is).
    An op fails when its time (the fastest fifth of its calls) exceeds `torch.compile`'s by more than `tolerance`.
    `ops` limits the compile and speed checks to those declared ops; `shape` overrides declared sizes for timing.
    """
    from ...config import load_config
    from . import _ops, _steps, _vector

    skip = set(skip)
    unknown = skip - set(CHECKS)
    if unknown:
        from ...errors import UsageError

        raise UsageError(f"--skip takes {', '.join(CHECKS)}; got {', '.join(sorted(unknown))}")
    config = load_config(path)  # a build.toml mistake is a usage error (exit 2)
    benches = _ops.benchmarks(config.root)
    _ops.workloads(benches, ops)  # --ops and --shape names the benchmarks do not declare: exit 2, before any work
    _ops.check_shape(benches, shape or {})
    verdict = Verdict(str(config.root))

    def add(found: Iterable[Check]) -> None:
        for c in found:
            verdict.checks.append(c)
            if progress:
                print(c.line(), file=sys.stderr, flush=True)

    builds: dict = {}  # type: ignore[type-arg]
    add(_steps.build_all(config, builds, skip="build" in skip))
    cpu = builds.get("cpu")
    if "abi" not in skip:
        add(_steps.check_abi(builds))
    if "tests" not in skip:
        add(_steps.run_tests(config, builds))
    kernel = _steps.load(cpu) if cpu is not None else None
    if kernel is None:
        for name in ("compile", "vector", "speed"):
            if name not in skip:
                add([Check(name, "cpu", "skip", "no CPU build to load")])
        return verdict
    add(_ops.undeclared(kernel, benches))
    if "compile" not in skip:
        add(_ops.check_compile(kernel, benches, ops))
    if "vector" not in skip:
        add(_vector.check_vectorised(cpu.path, [k.name for k in config.kernels_for("cpu")]))
    if "speed" not in skip:
        from . import _diagnose

        namespaces = [k.name for k in config.kernels_for("cpu")]
        add(
            _diagnose.explain(c, cpu.path, namespaces, [c.subject.split()[0], c.data.get("kernel_op", "")])
            if c.status == "fail"
            else c
            for c in _ops.check_speed(
                kernel,
                benches,
                dtypes=tuple(dtypes),
                threads=threads,
                tolerance=tolerance,
                iters=iters,
                ops=ops,
                shape=shape,
            )
        )
    return verdict


def format_table(verdict: Verdict) -> str:
    """The findings as aligned lines, then the verdict."""
    lines = [f"hubkernels verify {verdict.path}", f"{'':4}  {'check':8} {'subject':28} detail"]
    lines += [c.line() for c in verdict.checks]
    if verdict.ok and not verdict.unverified:
        lines.append("shippable: every check passed or was skipped for the reason given")
    elif verdict.ok:
        built = sorted({c.subject for c in verdict.checks if c.check == "build" and c.status == "pass"})
        lines.append(
            f"shippable on {', '.join(built) or 'no backend'} only, not yet as build.toml lists it: "
            + "; ".join(f"{c.subject} unverified ({c.detail})" for c in verdict.unverified)
            + "; run `hubkernels verify` where that backend builds, or remove it from build.toml"
        )
    else:
        lines.append(
            f"not shippable: {len(verdict.failures)} failed: "
            + "; ".join(f"{c.check} {c.subject}" for c in verdict.failures)
        )
    return "\n".join(lines)


# ---- command line -------------------------------------------------------------------------------


def _cmd_verify(args: argparse.Namespace) -> int:
    skip = [s.strip() for s in (args.skip or "").split(",") if s.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    from ..bench import parse_size

    shape = dict(parse_size(s) for s in args.shape or [])
    verdict = verify(
        args.path,
        skip=skip,
        threads=args.threads or None,
        tolerance=args.tolerance,
        dtypes=dtypes,
        iters=args.iters,
        progress=not args.json,
        ops=args.ops or None,
        shape=shape,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "path": verdict.path,
                    "ok": verdict.ok,
                    "unverified": [c.subject for c in verdict.unverified],
                    "checks": [asdict(c) for c in verdict.checks],
                },
                indent=2,
            )
        )
    elif _same_file(sys.stdout, sys.stderr):  # one log: the findings are in it already, as they came
        print(format_table(verdict).splitlines()[-1])
    else:
        print(format_table(verdict))
    return 0 if verdict.ok else 1


def _same_file(a: object, b: object) -> bool:
    """Whether two streams write to one file (`verify > log 2>&1`, or one terminal)."""
    import os

    try:
        x, y = os.fstat(a.fileno()), os.fstat(b.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
    return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


def register_cli(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "verify",
        help="say whether the kernel is shippable: build, ABI, tests, compile, "
        "vectorisation, speed against torch.compile",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("path", nargs="?", default=".", help="kernel root (holds build.toml)")
    p.add_argument("--json", action="store_true", help="machine-readable findings on stdout")
    p.add_argument("--skip", help=f"comma-separated checks to leave out: {','.join(CHECKS)}")
    p.add_argument("--dtypes", default="fp32,bf16,fp16", help="dtypes to time (default: fp32,bf16,fp16)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads while timing (default 1: stable on a shared machine; 0: torch's default)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="allowed excess over torch.compile's time, as a fraction (default 0.05: the "
        "run-to-run noise of a shared machine)",
    )
    p.add_argument("--iters", type=int, default=30, help="timed rounds per op and dtype")
    p.add_argument("--ops", nargs="*", metavar="OP", help="trace and time only these declared ops")
    p.add_argument(
        "--shape",
        nargs="*",
        metavar="NAME=N",
        help="time at these sizes instead of the declared CPU ones (e.g. tokens=6144)",
    )
    p.set_defaults(func=_cmd_verify)
