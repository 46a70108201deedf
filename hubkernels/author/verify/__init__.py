"""`hubkernels verify [PATH]`: is this kernel shippable here, and if not, why not.

One command, one verdict, one line per finding. In order: build every backend this machine can compile (CUDA
compiles without a GPU where a CUDA torch and nvcc exist; otherwise it is skipped with the reason), the ABI of each
build (kernel-abi-check), the kernel's own tests (pytest on tests/ with LOCAL_KERNELS pointing at the build),
`torch.compile(fullgraph=True)` through every declared op, vectorisation of each ISA clone of the CPU code (counted
per clone from the disassembly, never as a total), and the time of every op beside eager and `torch.compile` of
its own formula on the shapes `benchmarks/benchmark*.py` declares. An op slower than `torch.compile` of its formula
fails, and the failure says where to look: the instruction mix of the compilation this CPU runs against Inductor's
kernel for the formula, and the likely cause with the skill's fix. A backend build.toml lists that cannot be built here
is named in the verdict as unverified, with how to verify it. The command prints progress lines to stderr
and the table to stdout (hubkernels/cli/verify.py); when both go to one file, the findings are written once. Exit
status: 0 nothing failed, 1 not shippable, 2 usage error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CHECKS", "Check", "Verdict", "format_table", "verify"]

#: Every check, in the order verify runs them (`--skip` takes these names).
CHECKS = ("build", "abi", "tests", "compile", "vector", "speed")


@dataclass
class Check:
    """One finding: which check, about what (a backend, an op, a clone), pass / fail / skip, and why."""

    check: str
    subject: str
    status: str
    detail: str = ""
    data: dict = field(default_factory=dict)

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
    on_check: Callable[[Check], None] | None = None,
    ops: Sequence[str] | None = None,
    shape: dict[str, int] | None = None,
) -> Verdict:
    """Run every check not in `skip` on the kernel at `path` and return the findings.

    `threads` fixes torch's CPU threads while ops are timed (1: stable numbers on a shared machine; None: as is).
    An op fails when its time (the fastest fifth of its calls) exceeds `torch.compile`'s by more than `tolerance`.
    `ops` limits the compile and speed checks to those declared ops; `shape` overrides declared sizes for timing.
    `on_check` sees each finding as it is made (the CLI prints it to stderr).
    """
    from ...config import load_config
    from . import op_checks, steps, vector

    skip = set(skip)
    unknown = skip - set(CHECKS)
    if unknown:
        from ...errors import UsageError

        raise UsageError(f"--skip takes {', '.join(CHECKS)}; got {', '.join(sorted(unknown))}")
    config = load_config(path)  # a build.toml mistake is a usage error (exit 2)
    benches = op_checks.benchmarks(config.root)
    op_checks.workloads(benches, ops)  # --ops and --shape names the benchmarks do not declare: exit 2, before any work
    op_checks.check_shape(benches, shape or {})
    verdict = Verdict(str(config.root))

    def add(found: Iterable[Check]) -> None:
        for c in found:
            verdict.checks.append(c)
            if on_check is not None:
                on_check(c)

    builds: dict[str, Any] = {}
    add(steps.build_all(config, builds, skip="build" in skip))
    cpu = builds.get("cpu")
    if "abi" not in skip:
        add(steps.check_abi(builds))
    if "tests" not in skip:
        add(steps.run_tests(config, builds))
    kernel = steps.load(cpu) if cpu is not None else None
    if cpu is None or kernel is None:
        for name in ("compile", "vector", "speed"):
            if name not in skip:
                add([Check(name, "cpu", "skip", "no CPU build to load")])
        return verdict
    add(op_checks.undeclared(kernel, benches))
    if "compile" not in skip:
        add(op_checks.check_compile(kernel, benches, ops))
    if "vector" not in skip:
        add(vector.check_vectorised(cpu.path, [k.name for k in config.kernels_for("cpu")]))
    if "speed" not in skip:
        from . import diagnose

        namespaces = [k.name for k in config.kernels_for("cpu")]
        add(
            diagnose.explain(c, cpu.path, namespaces, [c.subject.split()[0], c.data.get("kernel_op", "")])
            if c.status == "fail"
            else c
            for c in op_checks.check_speed(
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
