"""`hubkernels build --matrix`: every variant build.toml allows, each in its own isolated toolchain.

The default set is what kernel-builder publishes (torch 2.12 and 2.13, CPU and CUDA 12.6 / 13.0 / 13.2) and every
newer torch the package index serves (2.14, 2.15), plus the torch stable-ABI variants of backends that ask for them
(one per backend and CUDA version, built with the newest torch). Each variant is built by
`python -m hubkernels build` running in its toolchain (`hubkernels.builder.toolchain`); one failing variant does
not stop the others, and the run ends with a table.
A variant whose inputs (build.toml, sources, package files, builder, toolchain) are unchanged since its last
build is reported up to date without starting a toolchain, so a re-run with nothing changed takes seconds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform as _stdlib_platform
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ..config import BuildConfig, load_config
from ..digest import violations
from ..errors import UsageError
from ..layout import variant_dir
from ..metadata import Metadata
from .toolchain import ToolchainError, ToolchainUnavailable, toolchain

__all__ = ["DEFAULT_TORCH", "DEFAULT_CUDA", "Job", "Outcome", "plan", "run_matrix", "format_table"]

#: The torch releases kernel-builder publishes builds for today, then every newer one the package index serves (the
#: load check's symbol tables, `builder.symbols`, reach the newest); the CUDA versions kernel-builder builds.
DEFAULT_TORCH = ("2.12", "2.13", "2.14", "2.15")
DEFAULT_CUDA = ("12.6", "13.0", "13.2")

Say = Callable[[str], None]
#: Where progress goes unless the caller passes `say` (the CLI prints it).
_log: Say = logging.getLogger("hubkernels.builder.matrix").info


@dataclass(frozen=True)
class Job:
    """One variant to build: its expected name, the backend, and the toolchain it needs."""

    variant: str
    backend: str
    torch: str | None  # None: a noarch variant (no compiler, built with the newest torch)
    cuda: str | None
    stable: bool = False


@dataclass(frozen=True)
class Outcome:
    """What happened to one job."""

    job: Job
    status: str  # built | up to date | failed | unavailable
    seconds: float
    size: int = 0
    detail: str = ""


def plan(
    config: BuildConfig,
    torch_versions: Sequence[str] = DEFAULT_TORCH,
    cuda_versions: Sequence[str] = DEFAULT_CUDA,
    backends: Sequence[str] | None = None,
) -> list[Job]:
    """The variants to build for these torch and CUDA versions, within build.toml's bounds."""
    arch, os_ = _cpu_os()
    torches = sorted({_mm(v) for v in torch_versions if _within(v, *_torch_bounds(config))}, key=_key)
    cudas = sorted(
        {_mm(v) for v in cuda_versions if _within(v, config.general.cuda.minver, config.general.cuda.maxver)}, key=_key
    )
    if not torches:
        raise UsageError(
            f"no torch version in {', '.join(torch_versions)} is within build.toml's bounds "
            f"({_torch_bounds(config)[0] or 'any'}..{_torch_bounds(config)[1] or 'any'})"
        )
    jobs: list[Job] = []
    for backend in backends or config.general.backends:
        if backend not in config.general.backends:
            raise UsageError(
                f"{config.name} does not list backend {backend!r} (it lists {', '.join(config.general.backends)})"
            )
        if config.is_noarch(backend):
            jobs.append(Job(f"torch-{backend}", backend, None, None))
            continue
        computes: list[str | None] = [None] if backend == "cpu" else list(cudas) if backend == "cuda" else []
        if not computes:
            jobs.append(Job(f"{backend} (any)", backend, torches[-1], None))  # reported as unavailable
            continue
        stable = config.torch.stable_abi_for(backend) if config.torch else None
        for cuda in computes:
            compute = "cpu" if cuda is None else "cu" + cuda.replace(".", "")
            if stable:
                tag = "torch-stable-abi" + _mm(stable).replace(".", "")
                jobs.append(Job(f"{tag}-{compute}-{arch}-{os_}", backend, torches[-1], cuda, stable=True))
                continue
            for t in torches:
                jobs.append(Job(f"torch{t.replace('.', '')}-cxx11-{compute}-{arch}-{os_}", backend, t, cuda))
    return jobs


def run_matrix(
    path: str | Path, jobs: Sequence[Job], *, say: Say = _log, jobs_per_build: int | None = None
) -> list[Outcome]:
    """Build every job into `<path>/build/<variant>/`; never stops at a failure."""
    config = load_config(path)
    outcomes = []
    for i, job in enumerate(jobs, 1):
        say(f"[{i}/{len(jobs)}] {job.variant}")
        outcome = _run_job(config, job, say, jobs_per_build)
        mark = {"built": "built", "up to date": "up to date", "failed": "FAILED", "unavailable": "unavailable"}
        say(
            f"[{i}/{len(jobs)}] {job.variant}: {mark[outcome.status]} ({outcome.seconds:.1f} s)"
            + (f": {outcome.detail.splitlines()[0]}" if outcome.detail and outcome.status != "built" else "")
        )
        outcomes.append(outcome)
    return outcomes


def format_table(outcomes: Sequence[Outcome]) -> str:
    """The end-of-run table: variant, status, time, size."""
    rows = [("variant", "status", "time", "size")]
    for o in outcomes:
        rows.append((o.job.variant, o.status, f"{o.seconds:.1f} s", _size(o.size) if o.size else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    notes = [
        f"{o.job.variant}: {o.detail.splitlines()[0]}"
        for o in outcomes
        if o.detail and o.status in ("failed", "unavailable")
    ]
    return "\n".join(lines + ([""] + notes if notes else []))


# -- one job -----------------------------------------------------------------------------------------------------


def _run_job(config: BuildConfig, job: Job, say: Say, jobs_per_build: int | None) -> Outcome:
    start = time.monotonic()
    if job.backend not in ("cpu", "cuda") and job.torch is not None:
        return Outcome(
            job,
            "unavailable",
            0.0,
            detail=f"{job.backend} builds need that vendor's toolkit and torch, "
            "which the package index does not serve for this machine",
        )
    dest = variant_dir(config.root, job.variant)
    stamp_file = config.root / "_build" / "matrix" / f"{job.variant}.stamp"
    stamp = _stamp(config, job)
    if stamp_file.is_file() and stamp_file.read_text() == stamp and _intact(dest):
        return Outcome(job, "up to date", time.monotonic() - start, _dir_size(dest))
    if job.torch is None:  # noarch: nothing to compile, so the running torch builds it
        return _run_noarch(config, job, stamp, stamp_file, start)
    try:
        tc = toolchain(job.torch, job.cuda, say=say)
    except ToolchainUnavailable as e:
        return Outcome(job, "unavailable", time.monotonic() - start, detail=str(e))
    except ToolchainError as e:
        return Outcome(job, "failed", time.monotonic() - start, detail=str(e))
    if job.cuda and not job.stable and (tc.torch_cuda or "") != job.cuda:
        built_with = f"CUDA {tc.torch_cuda}" if tc.torch_cuda else "no CUDA (a CPU build)"
        return Outcome(
            job,
            "unavailable",
            time.monotonic() - start,
            detail=f"torch {job.torch} from the package index is built with {built_with}; an exact-torch "
            f"CUDA {job.cuda} variant needs a torch built with CUDA {job.cuda}",
        )
    cmd = [str(tc.python), "-m", "hubkernels", "build", str(config.root), "--backend", job.backend]
    if jobs_per_build:
        cmd += ["--jobs", str(jobs_per_build)]
    log_file = stamp_file.with_suffix(".log")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    say(f"  compiling in the toolchain (log: {log_file})")
    proc = subprocess.run(cmd, env=tc.env(), capture_output=True, text=True)
    log_file.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        lines = [line for line in (proc.stdout + proc.stderr).strip().splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower() and "Warning" not in line]
        detail = "\n".join((errors[-1:] if errors else []) + lines[-15:]) or f"exit {proc.returncode}"
        return Outcome(job, "failed", time.monotonic() - start, detail=detail)
    produced = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if Path(produced).name != job.variant:
        return Outcome(
            job,
            "failed",
            time.monotonic() - start,
            detail=f"the toolchain built {Path(produced).name or 'nothing'}, not {job.variant}",
        )
    stamp_file.write_text(stamp)
    return Outcome(job, "built", time.monotonic() - start, _dir_size(dest))


def _run_noarch(config: BuildConfig, job: Job, stamp: str, stamp_file: Path, start: float) -> Outcome:
    from ..errors import HubkernelsError
    from .kernel import build

    try:
        result = build(config.root, backend=job.backend, quiet=True)
    except HubkernelsError as e:
        return Outcome(job, "failed", time.monotonic() - start, detail=str(e))
    stamp_file.parent.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    return Outcome(job, "built", time.monotonic() - start, _dir_size(result.path))


def _stamp(config: BuildConfig, job: Job) -> str:
    """Everything a variant's bytes depend on: build.toml, every source and package file, the builder, the job."""
    h = hashlib.sha256(json.dumps([__version__, job.variant, job.torch, job.cuda, job.stable]).encode())
    files = [
        config.file,
        *sorted(
            p
            for p in config.package_dir.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.name != "_ops.py"
        ),
    ]
    for k in config.kernels.values():
        files += [config.root / s for s in k.src]
    if config.torch:
        files += [config.root / s for s in config.torch.src]
    builder = Path(__file__).resolve().parent
    files += sorted(builder.glob("*.py"))
    for f in files:
        if f.is_file():
            h.update(str(f.relative_to(config.root) if f.is_relative_to(config.root) else f.name).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _intact(dest: Path) -> bool:
    try:
        return not violations(dest, Metadata.read(dest).digest)
    except (OSError, ValueError):
        return False


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _cpu_os() -> tuple[str, str]:
    from ..system import normalize_cpu

    return normalize_cpu(_stdlib_platform.machine()), _stdlib_platform.system().lower()


def _mm(version: str) -> str:
    parts = str(version).split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise UsageError(f"version {version!r}: write major.minor, e.g. 2.12 or 13.0")
    return f"{int(parts[0])}.{int(parts[1])}"


def _key(version: str) -> tuple[int, int]:
    a, b = _mm(version).split(".")
    return int(a), int(b)


def _torch_bounds(config: BuildConfig) -> tuple[str | None, str | None]:
    return (config.torch.minver, config.torch.maxver) if config.torch else (None, None)


def _within(version: str, low: str | None, high: str | None) -> bool:
    v = _key(version)
    return (low is None or v >= _key(low)) and (high is None or v <= _key(high))
