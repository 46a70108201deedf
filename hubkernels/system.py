"""What a build variant is (the Hub's `build/<variant>` grammar) and what the running system is.

`Variant` is a small frozen value with `parse()`/`str()` that round-trip, like `packaging.tags.Tag`.
`System` describes this machine; `hubkernels.variants` matches one against the other.
"""

from __future__ import annotations

import platform as _platform
import re
import sys
import sysconfig
from dataclasses import dataclass, field

from . import settings

#: Backends a variant can target (kernel-builder's list, plus HF's legacy `universal` noarch name).
BACKENDS = ("cpu", "cuda", "rocm", "xpu", "metal", "cann", "neuron", "tpu", "npu", "universal")

_TORCH = re.compile(r"^torch(\d)(\d+)(?:-(cxx11|cxx98))?$")
_STABLE = re.compile(r"^torch-stable-abi(\d)(\d+)$")
_TVM = re.compile(r"^tvm-ffi(\d+?)(\d+)$")
_COMPUTE = re.compile(r"^(?:(cpu|metal|neuron|tpu)|cu(\d+)(\d)|rocm(\d+)(\d)|xpu(\d+)(\d)|cann(\d+)(\d))$")
_CPU_ALIASES = {"arm64": "aarch64", "amd64": "x86_64", "x64": "x86_64"}


def normalize_cpu(machine: str) -> str:
    """`platform.machine()` spelled the way variant names spell it (arm64 -> aarch64, AMD64 -> x86_64)."""
    m = machine.lower()
    return _CPU_ALIASES.get(m, m)


@dataclass(frozen=True, order=True)
class Variant:
    """One build variant, e.g. `torch213-cxx11-cu130-x86_64-linux` or `torch-cpu`.

    kind: "torch" (exact torch minor), "stable-abi" (torch stable ABI, forward compatible),
    "tvm-ffi", or "noarch" (pure Python, `torch-<backend>`).
    """

    kind: str
    backend: str
    framework_version: tuple[int, int] | None = None
    abi: str | None = None  # "cxx11" / "cxx98" / None (untagged)
    backend_version: tuple[int, int] | None = None
    cpu: str | None = None
    os: str | None = None

    @classmethod
    def parse(cls, name: str) -> "Variant":
        """Parse a variant directory name; raises ValueError saying what part is wrong."""
        if name.startswith("torch-") and not name.startswith("torch-stable-abi"):
            backend = name[len("torch-") :]
            if backend not in BACKENDS:
                raise ValueError(f"{name!r}: unknown noarch backend {backend!r} (known: {', '.join(BACKENDS)})")
            return cls(kind="noarch", backend=backend)
        parts = name.split("-")
        if name.startswith("torch-stable-abi"):
            head, rest, pattern, kind = "-".join(parts[:3]), parts[3:], _STABLE, "stable-abi"
        elif name.startswith("tvm-ffi"):
            head, rest, pattern, kind = "-".join(parts[:2]), parts[2:], _TVM, "tvm-ffi"
        elif len(parts) >= 2 and parts[1] in ("cxx11", "cxx98"):
            head, rest, pattern, kind = f"{parts[0]}-{parts[1]}", parts[2:], _TORCH, "torch"
        else:
            head, rest, pattern, kind = parts[0], parts[1:], _TORCH, "torch"
        m = pattern.match(head)
        if not m:
            raise ValueError(
                f"{name!r}: expected torch<M><m>[-cxx11], torch-stable-abi<M><m>, tvm-ffi<M><m> or torch-<backend>"
            )
        fw = (int(m.group(1)), int(m.group(2)))
        abi = m.group(3) if kind == "torch" else None
        if len(rest) < 3:
            raise ValueError(f"{name!r}: expected <framework>-<compute>-<cpu>-<os>")
        compute, cpu, os_ = rest[0], "-".join(rest[1:-1]), rest[-1]
        backend, bver = _parse_compute(name, compute)
        return cls(kind=kind, backend=backend, framework_version=fw, abi=abi, backend_version=bver, cpu=cpu, os=os_)

    def __str__(self) -> str:
        if self.kind == "noarch":
            return f"torch-{self.backend}"
        assert self.framework_version is not None
        major, minor = self.framework_version
        head = {
            "torch": f"torch{major}{minor}",
            "stable-abi": f"torch-stable-abi{major}{minor}",
            "tvm-ffi": f"tvm-ffi{major}{minor}",
        }[self.kind]
        if self.kind == "torch" and self.abi:
            head += f"-{self.abi}"
        return f"{head}-{self.compute}-{self.cpu}-{self.os}"

    @property
    def compute(self) -> str:
        """The compute part of the name: cpu, metal, cu130, rocm71, xpu20253, ..."""
        if self.backend_version is None:
            return self.backend
        a, b = self.backend_version
        prefix = {"cuda": "cu", "rocm": "rocm", "xpu": "xpu", "cann": "cann"}[self.backend]
        return f"{prefix}{a}{b}"


def _parse_compute(name: str, compute: str) -> tuple[str, tuple[int, int] | None]:
    m = _COMPUTE.match(compute)
    if not m:
        raise ValueError(
            f"{name!r}: unknown compute {compute!r} (cpu, metal, cu<MM><m>, rocm<M><m>, xpu<YYYY><m>, ...)"
        )
    g = m.groups()
    if g[0]:
        return g[0], None
    for backend, (i, j) in (("cuda", (1, 2)), ("rocm", (3, 4)), ("xpu", (5, 6)), ("cann", (7, 8))):
        if g[i] is not None:
            return backend, (int(g[i]), int(g[j]))
    raise AssertionError(compute)


@dataclass(frozen=True)
class System:
    """The facts about this process that decide which variants can load in it."""

    torch_version: tuple[int, int]
    backend: str
    backend_version: tuple[int, int] | None
    cpu: str
    os: str
    cxx11_abi: bool = True
    capabilities: tuple[tuple[int, int], ...] = field(default=())
    macos_version: tuple[int, int] | None = None
    free_threaded: bool = False  # a free-threaded CPython before 3.15, which cannot load ABI3 extensions
    rocm_archs: tuple[str, ...] = field(default=())  # gfx names of the visible ROCm GPUs

    @property
    def cxx_abi(self) -> str | None:
        """The C++ ABI tag torch matches: cxx11 or cxx98 on Linux, None elsewhere (tags never match there)."""
        if self.os != "linux":
            return None
        return "cxx11" if self.cxx11_abi else "cxx98"

    @classmethod
    def current(cls) -> "System":
        """Read the running interpreter, torch build and visible GPUs."""
        import torch

        major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
        backend, bver = ("cpu", None) if settings.backend() == "cpu" else _detect_backend(torch)
        caps: tuple[tuple[int, int], ...] = ()
        gfx: tuple[str, ...] = ()
        if backend in ("cuda", "rocm") and torch.cuda.is_available():
            caps = tuple(tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count()))  # type: ignore[misc]
            if backend == "rocm":
                gfx = tuple(
                    str(torch.cuda.get_device_properties(i).gcnArchName).split(":")[0]
                    for i in range(torch.cuda.device_count())
                )
        os_ = _platform.system().lower()
        macos = None
        if os_ == "darwin":
            rel = _platform.mac_ver()[0].split(".")
            macos = (int(rel[0]), int(rel[1]) if len(rel) > 1 else 0)
        return cls(
            torch_version=(major, minor),
            backend=backend,
            backend_version=bver,
            cpu=normalize_cpu(_platform.machine()),
            os=os_,
            cxx11_abi=bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)),
            capabilities=caps,
            macos_version=macos,
            rocm_archs=gfx,
            free_threaded=sys.version_info < (3, 15) and bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        )

    def build_variant(self, backend: str | None = None) -> Variant:
        """The arch variant a build on this system produces for `backend` (default: the system's backend)."""
        backend = backend or self.backend
        bver = self.backend_version if backend == self.backend else None
        if backend in ("cuda", "rocm", "xpu", "cann") and bver is None:
            raise ValueError(f"cannot build for {backend}: this torch was not built with {backend}")
        abi = ("cxx11" if self.cxx11_abi else "cxx98") if self.os == "linux" else None
        return Variant(
            kind="torch",
            backend=backend,
            framework_version=self.torch_version,
            abi=abi,
            backend_version=bver,
            cpu=self.cpu,
            os=self.os,
        )


def _detect_backend(torch) -> tuple[str, tuple[int, int] | None]:
    """The backend torch was built for, in HF kernels' order (the toolkit torch was built with, not the driver)."""
    if hasattr(torch.backends, "tpu"):
        return "tpu", None
    if hasattr(torch, "neuron"):  # before CUDA: the Neuron extension loads into CUDA torch builds too
        return "neuron", None
    if getattr(torch.version, "cuda", None):
        a, b = torch.version.cuda.split(".")[:2]
        return "cuda", (int(a), int(b))
    if getattr(torch.version, "hip", None):
        a, b = torch.version.hip.split(".")[:2]
        return "rocm", (int(a), int(b))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "metal", None
    xpu = getattr(torch.version, "xpu", None)
    if xpu:
        return "xpu", (int(xpu[:4]), int(xpu[5:6]))  # "20250300" -> 2025.3, as kernels reads it
    privateuse = getattr(torch._C, "_get_privateuse1_backend_name", lambda: None)()
    if privateuse == "npu":
        from torch_npu.utils.collect_env import get_cann_version

        cann = get_cann_version()
        return "cann", (int(cann[0]), int(cann[2]))
    return "cpu", None
