"""What a build needs from this machine: the backend to build, a torch that fits, a toolkit for that backend.

Each check fails with a `BuildError` of one line that names the fix, before any compiler runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ..config import BuildConfig
from ..errors import BuildError
from ..system import System, Variant

#: Backends whose compiled variants need a torch built for them (torch.version.<x>).
_TORCH_BUILT_FOR = {"cuda": "CUDA", "rocm": "ROCm", "xpu": "XPU", "cann": "CANN"}
#: Backends `hubkernels build` compiles natively.
COMPILED_BACKENDS = ("cpu", "cuda")


def choose_backend(config: BuildConfig, system: System, backend: str | None) -> str:
    """The backend to build: the one asked for, else this system's if the kernel supports it, else cpu."""
    backends = config.general.backends
    if backend is not None:
        if backend not in backends:
            raise BuildError(
                f"{config.general.name} does not list backend {backend!r} (it lists {', '.join(backends)})"
            )
        return backend
    if system.backend in backends:
        return system.backend
    if "cpu" in backends:
        return "cpu"
    if config.is_noarch(backends[0]):
        return backends[0]
    raise BuildError(
        f"{config.general.name} supports {', '.join(backends)}, but this machine has {system.backend} "
        "(and the kernel has no cpu backend)."
    )


def _minor(version: str) -> tuple[int, int]:
    parts = [int(x) for x in str(version).split(".")[:2]]
    return (parts[0], parts[1] if len(parts) > 1 else 0)


def check_torch_bounds(config: BuildConfig, system: System) -> None:
    """Fail when the installed torch is outside `[torch] minver`/`maxver`."""
    t = config.torch
    if t is None:
        return
    here = system.torch_version
    if (t.minver and here < _minor(t.minver)) or (t.maxver and here > _minor(t.maxver)):
        raise BuildError(
            f"{config.general.name} supports torch {t.minver or 'any'}..{t.maxver or 'any'}; "
            f"installed torch is {here[0]}.{here[1]}: install a torch in that range"
        )


def stable_abi(config: BuildConfig, backend: str, system: System) -> tuple[int, int] | None:
    """The torch stable-ABI version (major, minor) `backend` targets, or None for a full-ABI build."""
    version = config.torch.stable_abi_for(backend) if config.torch else None
    if version is None:
        return None
    target = _minor(version)
    if system.torch_version < target:
        raise BuildError(
            f"{config.general.name} targets the torch {version} stable ABI for {backend}, but the "
            f"installed torch is {system.torch_version[0]}.{system.torch_version[1]}: "
            f"install torch >= {version} to build it"
        )
    return target


def variant_for(system: System, backend: str, target: tuple[int, int] | None) -> Variant:
    """The variant a compiled build of `backend` on this system produces (stable-ABI when `target` is set)."""
    if target is not None and backend == "cuda":
        # a stable-ABI binary needs torch's stable headers only, so any torch (a CPU one too) and any nvcc build it;
        # it links the toolkit's CUDA runtime, so its CUDA version is the toolkit's, not the building torch's
        home = cuda_home()
        if home is None:
            raise BuildError(
                "no CUDA toolkit found for the stable-ABI CUDA build (nvcc is not on PATH and CUDA_HOME "
                "is unset): install one (or the nvidia-cuda-nvcc wheel) and set CUDA_HOME"
            )
        cpu = system.build_variant("cpu")
        return Variant("stable-abi", backend, target, None, nvcc_version(home), cpu.cpu, cpu.os)
    check_backend_toolkit(system, backend)
    full = system.build_variant(backend)
    if target is None:
        return full
    return Variant("stable-abi", backend, target, None, full.backend_version, full.cpu, full.os)


def nvcc_version(home: Path) -> tuple[int, int]:
    """The (major, minor) release of the nvcc in `home`."""
    try:
        out = subprocess.run(
            [str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True, timeout=120
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"{home}/bin/nvcc does not run ({e}): check the CUDA toolkit") from None
    found = re.search(r"release (\d+)\.(\d+)", out)
    if not found:
        raise BuildError(f"{home}/bin/nvcc --version does not name a release: check the CUDA toolkit")
    return int(found.group(1)), int(found.group(2))


def check_backend_toolkit(system: System, backend: str) -> None:
    """Fail unless the installed torch is built for `backend` and its compiler toolkit is present."""
    if backend not in COMPILED_BACKENDS:
        raise BuildError(
            f"hubkernels build compiles {' and '.join(COMPILED_BACKENDS)} kernels; it cannot compile "
            f"{backend} sources yet (build another backend with --backend "
            f"{' or --backend '.join(COMPILED_BACKENDS)})"
        )
    if backend == "cpu":
        return
    if system.backend != backend:
        major, minor = system.torch_version
        raise BuildError(
            f"the installed torch {major}.{minor} is a {system.backend}-only build, so it has no "
            f"{_TORCH_BUILT_FOR[backend]} headers: install a {_TORCH_BUILT_FOR[backend]} build of torch "
            f"(pip install torch=={major}.{minor}.* from a {backend} wheel index; no GPU needed to "
            "compile) and build again"
        )
    if backend == "cuda" and cuda_home() is None:
        cuda = ".".join(str(p) for p in system.backend_version or ())
        raise BuildError(
            f"no CUDA toolkit found (nvcc is not on PATH and CUDA_HOME is unset): install CUDA {cuda} "
            "(the toolkit, or the nvidia-cuda-nvcc wheel) and put its bin/ on PATH or set CUDA_HOME"
        )


def cuda_home() -> Path | None:
    """The CUDA toolkit to compile with (holds bin/nvcc, and include/cuda_runtime.h when one does), or None."""
    from torch.utils import cpp_extension

    nvcc = shutil.which("nvcc")
    candidates = [Path(h) for h in (cpp_extension.CUDA_HOME,) if h]
    if nvcc:  # /usr/local/bin/nvcc may be a link or wrapper into /usr/local/cuda-X.Y, whose include/ torch needs
        candidates += [Path(nvcc).parent.parent, Path(os.path.realpath(nvcc)).parent.parent]
        candidates += [p for p in [_nvcc_top(nvcc)] if p is not None]
    with_nvcc = [c for c in candidates if (c / "bin" / "nvcc").is_file()]
    complete = [c for c in with_nvcc if (c / "include" / "cuda_runtime.h").is_file()]
    found = complete or with_nvcc
    return found[0] if found else None


def _nvcc_top(nvcc: str) -> Path | None:
    """The toolkit root nvcc itself reports (`TOP=` of a dry run), which sees through wrapper scripts."""
    try:
        out = subprocess.run(
            [nvcc, "--dryrun", "-x", "cu", "-E", os.devnull], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^#\$ TOP=(.+)$", out.stdout + out.stderr, re.MULTILINE)
    return Path(os.path.realpath(m.group(1).strip())) if m else None


def cuda_wheel_includes() -> list[Path]:
    """Header directories of the nvidia-* wheels torch depends on (cuSPARSE, cuBLAS, ... headers that ATen's
    CUDA headers include and a minimal toolkit lacks); searched after the toolkit's own."""
    import torch

    site = Path(torch.__file__).resolve().parent.parent
    return sorted(p for p in (site / "nvidia").glob("*/include") if p.is_dir())
