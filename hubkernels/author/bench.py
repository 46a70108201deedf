"""`hubkernels bench [PATH]`: time the ops a kernel declares against their reference formula, in one run.

A kernel declares its benchmarks as kernel-builder does: `benchmarks/benchmark*.py` at the kernel root, with
`Benchmark` subclasses whose workloads are methods (`setup_<w>`, `benchmark_<w>`, `verify_<w>`; see
`Benchmark`). Each op is timed beside the eager formula its `verify_<w>` gives, `torch.compile` of that
formula and any named peers.

GPU: CUDA events around back-to-back calls queued behind a device-side sleep (GPU time, not launch time);
CPU: a monotonic clock. Warm-up first, then the median of many samples, with inputs rotated among several
buffers (`rotate` input sets, each past the L2 at the shapes declared) so the cache cannot serve repeats.
The copy bandwidth is measured in the same run, and every op reports the percent of it that it reaches.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import UsageError

if TYPE_CHECKING:  # torch is imported when a benchmark runs
    import torch


@dataclass
class Row:
    op: str
    impl: str
    median_us: float
    bytes: int
    pct_copy_bw: float
    max_rel_err: float | None = None
    samples: int = 0


@dataclass
class Report:
    device: str
    torch: str
    dtype: str
    shape: list[int]
    copy_gbps: float
    rows: list[Row] = field(default_factory=list)
    shape_names: list[str] = field(default_factory=list)


class Benchmark:
    """Base class of a kernel's op benchmarks. For a workload `w`:

    - `setup_<w>(self) -> tuple`: one input set (called once per rotated buffer), made with `self.randn`
      from the sizes in `self.shape`;
    - `benchmark_<w>(self, *inputs)`: the kernel's op (`self.kernel`);
    - `verify_<w>(self, *inputs)`: the reference formula, timed as "eager" (or `eager_name[w]`), compiled
      as "torch.compile" and, on float64 inputs, the truth the error column compares with;
    - `reference_<w>(self, *inputs)` (optional): the float64 truth where `verify_<w>` on float64 is not.

    Class attributes: `shape` (default sizes), `cpu_shape` (their overrides on a CPU), `report_shape`
    (the sizes the report names), `peers` ({w: {name: fn(*inputs)}} timed too, fn a function or the name of a
    method of the benchmark; a peer returns NotImplemented for inputs it does not take, such as another device
    or dtype, and is left out), `eager_name`, and
    `kernel_ops` ({w: kernel function it needs}, default w itself).
    """

    seed: ClassVar[int | None] = None
    shape: dict[str, int] = {}  # the default shape per name; an instance holds the one it runs
    cpu_shape: ClassVar[dict[str, int]] = {}
    report_shape: ClassVar[tuple[str, ...]] = ()
    peers: ClassVar[dict[str, dict[str, Callable[..., Any] | str]]] = {}
    eager_name: ClassVar[dict[str, str]] = {}
    kernel_ops: ClassVar[dict[str, str]] = {}

    def __init__(self, kernel: Any, device: Any, dtype: Any, shape: dict[str, int], generator: Any) -> None:
        self.kernel, self.device, self.dtype, self.shape, self.generator = kernel, device, dtype, shape, generator

    def randn(self, *size: int, dtype: Any = None) -> torch.Tensor:
        import torch

        return torch.randn(*size, device=self.device, dtype=dtype or self.dtype, generator=self.generator)

    @classmethod
    def workloads(cls) -> list[str]:
        """The workload names, in the order the class defines them."""
        names = [n[len("benchmark_") :] for n, _ in _ordered_members(cls) if n.startswith("benchmark_")]
        return [n for n in names if hasattr(cls, f"verify_{n}") and hasattr(cls, f"setup_{n}")]


def discover(path: str | Path) -> list[type[Benchmark]]:
    """The `Benchmark` subclasses defined in `<path>/benchmarks/benchmark*.py`, script by script."""
    scripts = sorted((Path(path) / "benchmarks").glob("benchmark*.py"))
    if not scripts:
        raise UsageError(
            f"no benchmarks/benchmark*.py under {Path(path).resolve()}; a kernel declares its "
            "benchmarks there (see hubkernels.author.bench.Benchmark)"
        )
    found: list[type[Benchmark]] = []
    for script in scripts:
        # one module per file: another kernel's benchmark_ops.py is another module
        digest = hashlib.sha1(str(script.resolve()).encode()).hexdigest()[:12]
        module = load_script(script, f"_hubkernels_bench_{script.stem}_{digest}")
        found += [
            v
            for v in vars(module).values()
            if isinstance(v, type)
            and issubclass(v, Benchmark)
            and v is not Benchmark
            and v.__module__ == module.__name__
        ]
    return found


def parse_size(text: str) -> tuple[str, int]:
    """`NAME=N` (a `--shape` argument) as (name, N); anything else is a usage error."""
    name, _, value = text.partition("=")
    if not name or not value.isdigit():
        raise UsageError(f"--shape takes NAME=N (e.g. tokens=1024), got {text!r}")
    return name, int(value)


def load_script(path: str | Path, name: str) -> ModuleType:
    """Import the Python file `path` as module `name` (kept in sys.modules, so a second call reuses it)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def run(
    kernel: Any,
    benchmarks: Sequence[type[Benchmark]],
    *,
    device: str = "cuda",
    dtype: Any = None,
    shape: dict[str, int] | None = None,
    rotate: int = 3,
    warmup: int = 10,
    iters: int = 50,
    compile_peers: bool = True,
    ops: Sequence[str] | None = None,
) -> Report:
    """Time every workload of `benchmarks` that `kernel` has (or only `ops`) beside its peers; returns the report."""
    import torch

    dev = torch.device(device)
    dtype = torch.bfloat16 if dtype is None else dtype
    owners: dict[str, type[Benchmark]] = {}
    for cls in benchmarks:
        for w in cls.workloads():
            owners.setdefault(w, cls)
    needs = {w: cls.kernel_ops.get(w, w) for w, cls in owners.items()}
    if ops:
        selected = list(ops)
        unknown = [op for op in selected if op not in owners]
        if unknown:
            raise UsageError(f"no bench for {', '.join(unknown)}; choose from {', '.join(owners)}")
        missing = [op for op in selected if not hasattr(kernel, needs[op])]
        if missing:
            raise UsageError(f"{kernel.__name__} has no {', '.join(missing)} (built before it was added); rebuild it")
    else:  # every op this build has (an older build lacks the newer ones)
        selected = [op for op in owners if hasattr(kernel, needs[op])]
    seed = next((c.seed for c in benchmarks if c.seed is not None), int(time.time()) & 0xFFFF)
    gen = torch.Generator(device=dev).manual_seed(seed)
    first = benchmarks[0] if benchmarks else Benchmark
    sizes = {**first.shape, **(first.cpu_shape if dev.type == "cpu" else {}), **(shape or {})}
    instances = {
        cls: cls(
            kernel, dev, dtype, {**cls.shape, **(cls.cpu_shape if dev.type == "cpu" else {}), **(shape or {})}, gen
        )
        for cls in benchmarks
    }
    warm_up_device(dev)
    copy_gbps = copy_bandwidth(dev, 1 << 30 if dev.type == "cuda" else 1 << 27, warmup, iters)
    report = Report(
        device=_device_name(dev),
        torch=torch.__version__,
        dtype=str(dtype).replace("torch.", ""),
        shape=[sizes[k] for k in first.report_shape],
        copy_gbps=round(copy_gbps, 1),
        shape_names=list(first.report_shape),
    )
    for op in selected:
        bench = instances[owners[op]]
        # Each op's inputs are made just before it is timed and freed after it, so every op starts from the same
        # allocator state and the memory held does not grow with the number of ops.
        inputs = [getattr(bench, f"setup_{op}")() for _ in range(rotate)]
        eager = getattr(bench, f"verify_{op}")
        candidates: dict[str, Callable[..., Any]] = {
            "ours": getattr(bench, f"benchmark_{op}"),
            bench.eager_name.get(op, "eager"): eager,
        }
        candidates.update({name: _peer(bench, op, name, p) for name, p in bench.peers.get(op, {}).items()})
        if compile_peers:
            candidates["torch.compile"] = torch.compile(eager, dynamic=False)
        ref = reference(bench, op, inputs[0])
        for name, fn in candidates.items():
            out = fn(*inputs[0])  # also any compilation a peer does on its first call
            if out is NotImplemented:  # a peer that does not take these inputs
                continue
            # The same warm-up before every candidate: a GPU's clock follows its recent power draw, so without it
            # the first candidate is timed after the previous op's work and a peer after its own (idle)
            # compilation, and the order of the rows moves their times by several per cent.
            warm_up_device(dev)
            times = time_calls(fn, inputs, dev, warmup, iters)
            med = statistics.median(times)
            nbytes = _nbytes(*inputs[0]) + _nbytes(out)  # every input read once, every output written once
            pct = 100 * (nbytes / (med * 1e-6) / 1e9) / copy_gbps
            # three significant digits: a slow candidate's share stays above zero (the table prints one decimal)
            pct3 = float(f"{pct:.3g}")
            report.rows.append(Row(op, name, round(med, 2), nbytes, pct3, _rel_err(out, ref), len(times)))
        del candidates, inputs, ref, out
    return report


def format_report(report: Report) -> str:
    names = ",".join(report.shape_names)
    lines = [
        f"# {report.device}, torch {report.torch}, {report.dtype}, [{names}]={report.shape}, "
        f"copy bandwidth {report.copy_gbps:.0f} GB/s (read+write)",
        f"{'op':22} {'impl':14} {'median us':>10} {'% copy BW':>10} {'vs ours':>8} {'rel err':>9}",
    ]
    ours = {r.op: r.median_us for r in report.rows if r.impl == "ours"}
    for r in report.rows:
        speed = f"{r.median_us / ours[r.op]:.2f}x" if r.op in ours and r.impl != "ours" else ""
        err = f"{r.max_rel_err:.1e}" if r.max_rel_err is not None else ""
        lines.append(f"{r.op:22} {r.impl:14} {r.median_us:10.1f} {r.pct_copy_bw:9.1f}% {speed:>8} {err:>9}")
    return "\n".join(lines)


# ---- timing -------------------------------------------------------------------------------------


def time_calls(
    fn: Callable[..., Any], input_sets: Sequence[tuple], device: Any, warmup: int, iters: int, inner: int = 10
) -> list[float]:
    """Per-call times in microseconds, cycling through `input_sets` so caches don't serve repeats.

    On the GPU each sample is one CUDA-event interval around `inner` back-to-back calls, queued behind a
    device-side sleep that outlasts the host's queueing of them (measured once, slept for twice that, at
    least ~1 ms), so the interval holds GPU time, not Python launch time.
    """
    import torch

    for i in range(warmup):
        fn(*input_sets[i % len(input_sets)])
    _sync(device)
    times = []
    if device.type == "cuda":
        t0 = time.perf_counter()
        for i in range(inner):
            fn(*input_sets[i % len(input_sets)])
        queue_s = time.perf_counter() - t0
        _sync(device)
        sleep_cycles = max(2_000_000, int(2 * queue_s * 2e9))  # cycles at ~2 GHz; slower clocks sleep longer
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(sleep_cycles)
            start.record()
            for i in range(inner):
                fn(*input_sets[i % len(input_sets)])
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / inner)
    else:
        for i in range(iters):
            args = input_sets[i % len(input_sets)]
            t0 = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t0) * 1e6)
    return times


def warm_up_device(device: Any, seconds: float = 1.5) -> None:
    """Keep the GPU busy with copies for a moment: its clocks leave idle, and every candidate that follows is
    timed from the same clock state."""
    import torch

    if device.type != "cuda":
        return
    a = torch.empty(1 << 28, device=device)
    b = torch.empty_like(a)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize(device)


def copy_bandwidth(device: Any, nbytes: int, warmup: int, iters: int) -> float:
    """Device-to-device copy rate in GB/s, counting bytes read plus bytes written."""
    import torch

    n = nbytes // 4
    src = [torch.randn(n, device=device) for _ in range(2)]
    dst = torch.empty(n, device=device)
    times = time_calls(lambda s: dst.copy_(s), [(s,) for s in src], device, warmup, iters)
    return 2 * n * 4 / (statistics.median(times) * 1e-6) / 1e9


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peer(bench: Benchmark, op: str, name: str, peer: Callable[..., Any] | str) -> Callable[..., Any]:
    """A peer as declared: a function, or the name of one of the benchmark's methods."""
    if not isinstance(peer, str):
        return peer
    fn = getattr(bench, peer, None)
    if not callable(fn):
        cls = type(bench).__name__
        raise UsageError(f"{cls}.peers[{op!r}][{name!r}] names {peer!r}, which is no method of {cls}")
    return fn


def reference(bench: Benchmark, op: str, args: tuple) -> Any:
    """float64 truth of `op` on one input set: `reference_<op>` on the inputs, else `verify_<op>` in float64."""
    import torch

    own = getattr(bench, f"reference_{op}", None)
    if own is not None:
        return own(*args)
    return getattr(bench, f"verify_{op}")(*(a.double() if isinstance(a, torch.Tensor) else a for a in args))


def _nbytes(*ts: Any) -> int:
    import torch

    total = 0
    for t in ts:
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
        elif isinstance(t, (tuple, list)):
            total += _nbytes(*t)
    return total


def _rel_err(out: Any, ref: Any) -> float:
    if isinstance(out, (tuple, list)):
        return max(_rel_err(o, r) for o, r in zip(out, ref))
    o, r = out.double(), ref.double()
    return float((o - r).norm() / r.norm().clamp_min(1e-30))


def _device_name(dev: Any) -> str:
    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def _ordered_members(cls: type) -> list[tuple[str, Any]]:
    """Members in definition order, base classes first."""
    seen: dict[str, Any] = {}
    for klass in reversed(inspect.getmro(cls)):
        seen.update(vars(klass))
    return list(seen.items())
