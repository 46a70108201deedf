"""Compile the `[torch]` binding and a backend's `[kernel.*]` sources into one `<name>.abi3.so`.

Flags follow kernel-builder's CMake flow: `TORCH_EXTENSION_NAME=<ops name>`, the backend macro (`CPU_KERNEL`,
`CUDA_KERNEL` + `USE_CUDA=1`), `registration.h` on the include path, `-fno-gnu-unique`, torch's nvcc flags
without its half/bfloat16 operator bans (plus `ENABLE_FP8`), per-kernel `-gencode`, and for a stable-ABI
build `TORCH_TARGET_VERSION=(M << 56) | (m << 48)`. The compile runs torch.utils.cpp_extension + ninja in a
child process (`hubkernels._setup_ext`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ..config import BuildConfig
from ..errors import BuildError
from .generated import glibc_compat, libstdcxx_compat, registration_dir
from .symbols import stable_link_stubs
from .toolchain import cuda_home, cuda_wheel_includes

_CXX_SUFFIXES = {".cpp", ".cc", ".cxx", ".c"}
_CUDA_SUFFIXES = {".cu"}
#: CUDA capabilities built when a [kernel.*] table does not list any (kernel-builder's defaults for CUDA >= 13).
_DEFAULT_CUDA_ARCHS = ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX")
#: Torch's nvcc flags that kernel-builder undoes (CUDA >= 11.8): half and bfloat16 operators stay usable.
_UNDO_NVCC = ("-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__", "-DENABLE_FP8")
_BACKEND_DEFINES = {"cpu": ["-DCPU_KERNEL"], "cuda": ["-DCUDA_KERNEL", "-DUSE_CUDA=1"]}


class CompileError(BuildError):
    """The compiler (or linker) failed; the message carries its output. The CLI exits 1 on it."""


def compile_native(config: BuildConfig, backend: str, name: str, work: Path, *, jobs: int | None,
                   verbose: bool, stable_abi: tuple[int, int] | None) -> tuple[Path, list[str]]:
    """Compile into `work/lib/<name>*.so`; returns it and the CUDA capabilities built (empty for cpu)."""
    root = config.root
    kernels = config.kernels_for(backend)
    srcs: list[Path] = [root / rel for rel in (config.torch.src if config.torch else ())]
    includes: list[Path] = [root] + [root / rel for rel in (config.torch.include if config.torch else ())]
    cxx_flags: list[str] = ["-O3"] + list(config.torch.cxx_flags if config.torch else ())
    nvcc_flags: list[str] = ["-O3"]
    for k in kernels:
        srcs += [root / s for s in k.src]
        includes += [root / i for i in k.include]
        cxx_flags += list(k.cxx_flags)
        nvcc_flags += list(k.cuda_flags or ())
    missing = [str(s.relative_to(root)) for s in srcs if not s.is_file()]
    if missing:
        raise BuildError(f"{config.file}: source {missing[0]} listed for {backend} does not exist; "
                         "fix the path in build.toml or add the file")
    suffixes = _CXX_SUFFIXES | (_CUDA_SUFFIXES if backend == "cuda" else set())
    compiled = [s for s in srcs if s.suffix in suffixes]
    if not compiled:
        raise BuildError(f"no C++/CUDA sources to compile for backend {backend}: list .cpp/.cu files in "
                         f"[kernel.*] src of {config.file.name}")
    includes.append(registration_dir(work))
    defines = list(_BACKEND_DEFINES[backend])
    if stable_abi:
        defines.append(f"-DTORCH_TARGET_VERSION={target_version(stable_abi)}")
    archs: list[str] = []
    env = dict(os.environ)
    if backend == "cuda":
        home = cuda_home()
        if home is not None:
            env["CUDA_HOME"] = str(home)
        after = [f for inc in cuda_wheel_includes() for f in ("-isystem", str(inc))]
        cxx_flags += after
        nvcc_flags += after
        archs = _cuda_archs(kernels)
        for a in archs:
            nvcc_flags += _gencode(a)
        nvcc_flags += [*_UNDO_NVCC, "--expt-relaxed-constexpr", *defines]
    cxx_flags += [*defines, "-fno-gnu-unique", "-g0"]
    compiled += [glibc_compat(work), libstdcxx_compat(work)]
    # A stable-ABI module links against stubs of its floor torch's libraries (made from that torch's real
    # binaries), never the building torch's: the same DT_NEEDED list whichever torch builds it, CUDA's
    # libtorch_cuda.so included when the building torch is a CPU one.
    library_dirs: list[str] = []
    libraries: list[str] = []
    stubs = stable_link_stubs(work, stable_abi, backend) if stable_abi else None
    if stubs is not None:
        library_dirs.append(str(stubs))
        if backend == "cuda":
            libraries.append("torch_cuda")
    lib_dir, tmp_dir = work / "lib", work / "obj"
    lib_dir.mkdir(parents=True, exist_ok=True)
    if backend == "cuda" and stable_abi and env.get("CUDA_HOME"):
        includes.append(Path(env["CUDA_HOME"]) / "include")  # the host compile of the binding sees cuda_runtime.h
    spec = {"name": name, "sources": [str(s) for s in compiled], "include_dirs": [str(i) for i in includes],
            "cxx": cxx_flags, "nvcc": nvcc_flags, "cuda": backend == "cuda", "stable": bool(stable_abi),
            "build_lib": str(lib_dir), "build_temp": str(tmp_dir), "library_dirs": library_dirs,
            "libraries": libraries,
            "link": ["-fopenmp"] if "-fopenmp" in cxx_flags else []}
    (work / "spec.json").write_text(json.dumps(spec, indent=2))
    for old in lib_dir.glob(f"{name}*.so"):
        old.unlink()
    if jobs:
        env["MAX_JOBS"] = str(jobs)
    cmd = [sys.executable, "-m", "hubkernels._setup_ext", str(work / "spec.json")]
    _run_with_progress(cmd, env, len(compiled), verbose)
    built = list(lib_dir.glob(f"{name}*.so"))
    if not built:
        raise CompileError(f"the compiler reported success but produced no {name}*.so in {lib_dir}")
    return built[0], archs


def target_version(target: tuple[int, int]) -> str:
    """`TORCH_TARGET_VERSION` for torch (major, minor), as torch's headers spell it: 0x020b000000000000."""
    return f"0x{(target[0] << 56) | (target[1] << 48):016x}"


def _cuda_archs(kernels: list) -> list[str]:  # type: ignore[type-arg]
    archs: set[str] = set()
    for k in kernels:
        archs.update(k.cuda_capabilities or _DEFAULT_CUDA_ARCHS)
    return sorted(archs, key=lambda a: tuple(int(x) for x in re.findall(r"\d+", a)))


def _gencode(arch: str) -> list[str]:
    ptx = arch.endswith("+PTX")
    num = arch.removesuffix("+PTX").replace(".", "")
    flags = [f"-gencode=arch=compute_{num},code=sm_{num}"]
    if ptx:
        flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def _run_with_progress(cmd: list[str], env: dict[str, str], n_sources: int, verbose: bool) -> None:
    """Run the compile, showing ninja's [i/n] steps as a progress bar; on failure raise with the whole log."""
    from tqdm import tqdm

    log: list[str] = []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                errors="replace")
    except OSError as e:
        raise BuildError(f"could not start the compile ({e})") from None
    assert proc.stdout is not None
    step = re.compile(r"^\[(\d+)/(\d+)\]")
    with tqdm(total=n_sources + 1, desc="compiling", unit="step", file=sys.stderr,
              disable=None, leave=False) as bar:
        for line in proc.stdout:
            log.append(line)
            if verbose:
                bar.write(line.rstrip())
            m = step.match(line)
            if m:
                bar.total = int(m.group(2))
                bar.n = int(m.group(1))
                bar.refresh()
    if proc.wait() != 0:
        tail = "".join(log[-400:]).rstrip()
        raise CompileError(f"compilation failed (exit {proc.returncode}):\n{tail}")
