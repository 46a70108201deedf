"""verify's op checks, driven by the kernel's benchmark declarations (benchmarks/benchmark*.py, see
hubkernels.author.bench): every op traces under `torch.compile(fullgraph=True)`, and every op is at least as fast as
`torch.compile` of its own formula on the declared shapes, in every dtype asked for.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

from ...errors import UsageError
from ..bench import Benchmark, discover
from . import Check

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: The gate compares the fastest fifth of each function's calls: on a shared machine the median measures the
#: other jobs' load as much as the code (runs of one tie swung from 0.6x to 2.5x), the fast calls much less.
FAST_QUANTILE = 0.2


def benchmarks(root: Path) -> list[type[Benchmark]]:
    """The kernel's benchmark declarations; none is not an error here (`undeclared` reports it)."""
    try:
        return discover(root)
    except UsageError:
        return []


def workloads(benches: Sequence[type[Benchmark]], ops: Sequence[str] | None = None) -> dict[str, type[Benchmark]]:
    """{workload: the class declaring it}, first declaration wins; only `ops` when given (a name no benchmark
    declares is a usage error that lists the declared ones)."""
    owners: dict[str, type[Benchmark]] = {}
    for cls in benches:
        for w in cls.workloads():
            owners.setdefault(w, cls)
    if ops:
        unknown = [op for op in ops if op not in owners]
        if unknown:
            raise UsageError(
                f"--ops: {', '.join(unknown)} not declared; the benchmarks declare {', '.join(owners) or 'none'}"
            )
        owners = {op: owners[op] for op in ops}
    return owners


def check_shape(benches: Sequence[type[Benchmark]], shape: dict[str, int]) -> None:
    """A usage error for a `--shape` size that no benchmark declares, naming the declared ones."""
    declared = sorted({k for cls in benches for k in (*cls.shape, *cls.cpu_shape)})
    unknown = [k for k in shape if k not in declared]
    if unknown:
        raise UsageError(
            f"--shape: no benchmark declares {', '.join(unknown)}; the declared sizes are "
            f"{', '.join(declared) or 'none'}"
        )


def undeclared(kernel: ModuleType, benches: Sequence[type[Benchmark]]) -> list[Check]:
    """A failure for every public op of the kernel that no benchmark declares: it would go untimed."""
    owners = workloads(benches)
    covered = set(owners) | {cls.kernel_ops.get(w, w) for w, cls in owners.items()}
    public = [
        n
        for n in getattr(kernel, "__all__", [])
        if callable(getattr(kernel, n, None)) and not isinstance(getattr(kernel, n), type)
    ]
    missing = [n for n in public if n not in covered]
    if not owners:
        return [
            Check(
                "declare",
                "benchmarks/",
                "fail",
                "no benchmarks/benchmark*.py declares the ops: verify "
                "cannot trace or time them (see `hubkernels init`)",
            )
        ]
    return [
        Check(
            "declare",
            op,
            "fail",
            "no benchmark declares this op (setup_/benchmark_/verify_ in "
            "benchmarks/benchmark*.py): it is neither traced nor timed",
        )
        for op in missing
    ]


def check_compile(
    kernel: ModuleType, benches: Sequence[type[Benchmark]], ops: Sequence[str] | None = None
) -> list[Check]:
    """Each declared op under `torch.compile(fullgraph=True)` on its declared CPU inputs; a graph break fails."""
    import torch

    found = []
    for op, cls in workloads(benches, ops).items():
        bench = _instance(cls, kernel, torch.float32)
        if bench is None:
            continue
        inputs = getattr(bench, f"setup_{op}")()
        fn = getattr(bench, f"benchmark_{op}")
        torch._dynamo.reset()
        try:
            got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*inputs)
        except Exception as e:  # noqa: BLE001 - a graph break or tracing error is the finding
            found.append(Check("compile", op, "fail", f"torch.compile(fullgraph=True) breaks: {_first(e)}"))
            continue
        try:
            torch.testing.assert_close(got, fn(*inputs), rtol=1e-5, atol=1e-5)
        except AssertionError as e:
            found.append(Check("compile", op, "fail", f"compiled result differs from the op's: {_first(e)}"))
            continue
        found.append(Check("compile", op, "pass", "fullgraph, fake implementation traced"))
    torch._dynamo.reset()
    return found


def check_speed(
    kernel: ModuleType,
    benches: Sequence[type[Benchmark]],
    *,
    dtypes: Sequence[str] = tuple(_DTYPES),
    threads: int | None = 1,
    tolerance: float = 0.05,
    iters: int = 30,
    ops: Sequence[str] | None = None,
    shape: dict[str, int] | None = None,
) -> list[Check]:
    """Each declared op beside eager and `torch.compile` of its formula, interleaved in one run, per dtype; the
    gate compares the fastest fifth of the calls (FAST_QUANTILE)."""
    import torch

    unknown = [d for d in dtypes if d not in _DTYPES]
    if unknown:
        raise UsageError(f"--dtypes takes {', '.join(_DTYPES)}; got {', '.join(unknown)}")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    found = []
    try:
        for op, cls in workloads(benches, ops).items():
            for name in dtypes:
                found.append(_time_op(kernel, cls, op, name, iters, tolerance, shape or {}))
    finally:
        torch.set_num_threads(before)
    return found


def _time_op(
    kernel: ModuleType,
    cls: type[Benchmark],
    op: str,
    dtype_name: str,
    iters: int,
    tolerance: float,
    shape: dict[str, int],
) -> Check:
    import torch

    subject = f"{op} {dtype_name}"
    bench = _instance(cls, kernel, getattr(torch, _DTYPES[dtype_name]), shape)
    if bench is None:
        return Check("speed", subject, "skip", "the benchmark cannot make inputs here")
    inputs = [getattr(bench, f"setup_{op}")() for _ in range(2)]  # two sets, alternated
    ours = getattr(bench, f"benchmark_{op}")
    eager = getattr(bench, f"verify_{op}")
    try:
        ours(*inputs[0])
    except Exception as e:  # noqa: BLE001 - an op may support fewer dtypes; say so and go on
        return Check("speed", subject, "skip", f"the op refused {dtype_name}: {_first(e)}")
    torch._dynamo.reset()
    compiled = torch.compile(eager, dynamic=False)
    loaded = loaded_modules()
    compiled(*inputs[0])  # compiles: the modules Inductor loads now hold its kernel for this formula
    inductor = sorted(m for m in loaded_modules() - loaded if "inductor" in m)
    fns: dict[str, Callable[..., Any]] = {"ours": ours, "eager": eager, "torch.compile": compiled}
    faults: dict[str, list[int]] = {}
    samples = interleaved_samples(fns, inputs, iters, faults)
    fast = {name: quantile(s, FAST_QUANTILE) for name, s in samples.items()}
    t_ours, t_eager, t_comp = fast["ours"], fast["eager"], fast["torch.compile"]
    faulted = {k: int(statistics.median(v)) for k, v in faults.items()}
    data = {
        "dtype": dtype_name,
        "shape": dict(bench.shape),
        "fast_us": {k: round(v, 2) for k, v in fast.items()},
        "median_us": {k: round(statistics.median(s), 2) for k, s in samples.items()},
        "vs_compile": round(t_comp / t_ours, 3),
        "vs_eager": round(t_eager / t_ours, 3),
        "threads": torch.get_num_threads(),
        "page_faults_per_call": faulted,
        "inductor_modules": inductor,
        "kernel_op": cls.kernel_ops.get(op, op),
    }
    detail = (
        f"ours {t_ours:.1f} us, {t_comp / t_ours:.2f}x torch.compile ({t_comp:.1f} us), "
        f"{t_eager / t_ours:.2f}x eager ({t_eager:.1f} us); fastest fifth of {iters} calls each"
    )
    if t_ours > t_comp * (1 + tolerance):
        if faulted.get("ours", 0) > 2 * faulted.get("torch.compile", 0) + 16:
            detail += (
                f"; ours took {faulted['ours']} page faults a call against torch.compile's "
                f"{faulted['torch.compile']}: its outputs landed on memory faulted in afresh"
            )
        return Check("speed", subject, "fail", f"slower than torch.compile of its formula: {detail}", data)
    return Check("speed", subject, "pass", detail, data)


def interleaved_samples(
    fns: dict[str, Callable[..., Any]], inputs: Sequence[tuple], iters: int, faults: dict[str, list[int]] | None = None
) -> dict[str, list[float]]:
    """µs per call of each function, timed in turns (ours, eager, compile, ours, ...) so that load from
    elsewhere on the machine hits them alike; each warms up first (the compile happens there). `faults`, if
    given, receives each call's minor page faults (the process's, all threads)."""
    for fn in fns.values():
        for i in range(3):
            fn(*inputs[i % len(inputs)])
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(iters):
        args = inputs[i % len(inputs)]
        for name, fn in fns.items():
            f0 = _minor_faults()
            t0 = time.perf_counter()
            fn(*args)
            samples[name].append((time.perf_counter() - t0) * 1e6)
            if faults is not None:
                faults.setdefault(name, []).append(_minor_faults() - f0)
    return samples


def loaded_modules() -> set[str]:
    """The shared objects mapped into this process (Linux; empty elsewhere)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            return {line.split()[-1] for line in f if line.rstrip().endswith(".so")}
    except OSError:
        return set()


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource is not None else 0


def quantile(samples: Sequence[float], q: float) -> float:
    """The `q` quantile of `samples` (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _instance(
    cls: type[Benchmark], kernel: ModuleType, dtype: Any, shape: dict[str, int] | None = None
) -> Benchmark | None:
    import torch

    sizes = {**cls.shape, **cls.cpu_shape, **(shape or {})}
    return cls(kernel, torch.device("cpu"), dtype, sizes, torch.Generator().manual_seed(0))


def _first(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:240] if lines else ''}"
