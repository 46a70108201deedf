"""Compile the `[torch]` binding and a backend's `[kernel.*]` sources into one `<name>.abi3.so`.

Flags follow kernel-builder's CMake flow: `TORCH_EXTENSION_NAME=<ops name>`, the backend macro (`CPU_KERNEL`,
`CUDA_KERNEL` + `USE_CUDA=1`), `registration.h` on the include path, `-fno-gnu-unique`, torch's nvcc flags
without its half/bfloat16 operator bans (plus `ENABLE_FP8`), per-kernel `-gencode`, and for a stable-ABI
build `TORCH_TARGET_VERSION=(M << 56) | (m << 48)`. The compile runs torch.utils.cpp_extension + ninja in a
child process (`hubkernels.builder._setup_ext`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ..config import BuildConfig, KernelConfig
from ..errors import BuildError
from .checks import dependency_includes
from .generated import glibc_compat, libstdcxx_compat, registration_dir
from .machine import cuda_home, cuda_wheel_includes, nvcc_version
from .symbols import stable_link_stubs

_CXX_SUFFIXES = {".cpp", ".cc", ".cxx", ".c"}
_CUDA_SUFFIXES = {".cu"}
#: kernel-builder's capabilities per CUDA release (newest first): a [kernel.*] without cuda-capabilities gets
#: them, and requested ones are intersected with them (`preamble.cmake`, `cuda_archs_loose_intersection`).
_DEFAULT_CUDA_ARCHS: tuple[tuple[tuple[int, int], tuple[str, ...]], ...] = (
    ((13, 0), ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX")),
    ((12, 8), ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "12.0+PTX")),
    ((0, 0), ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0+PTX")),
)
#: Torch's nvcc flags that kernel-builder undoes (CUDA >= 11.8): half and bfloat16 operators stay usable.
_UNDO_NVCC = (
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-DENABLE_FP8",
)
_BACKEND_DEFINES = {"cpu": ["-DCPU_KERNEL"], "cuda": ["-DCUDA_KERNEL", "-DUSE_CUDA=1"]}


class CompileError(BuildError):
    """The compiler (or linker) failed; the message carries its output. The CLI exits 1 on it."""


def compile_native(
    config: BuildConfig,
    backend: str,
    name: str,
    work: Path,
    *,
    jobs: int | None,
    verbose: bool,
    stable_abi: tuple[int, int] | None,
) -> tuple[Path, list[str]]:
    """Compile into `work/lib/<name>*.so`; returns it and the CUDA capabilities built (empty for cpu).

    Flags go per source, as kernel-builder's CMake sets them: `[torch] cxx-flags` reach the binding only, and
    each `[kernel.*]`'s `cxx-flags`, `cuda-flags`, `include` and capabilities reach that kernel's sources only,
    so a CPU variant's binding and generic kernels keep the platform's baseline ISA.
    """
    root = config.root
    kernels = config.kernels_for(backend)
    binding = [root / rel for rel in (config.torch.src if config.torch else ())]
    includes: list[Path] = [root] + [root / rel for rel in (config.torch.include if config.torch else ())]
    missing = [
        str(s.relative_to(root)) for s in binding + [root / s for k in kernels for s in k.src] if not s.is_file()
    ]
    if missing:
        raise BuildError(
            f"{config.file}: source {missing[0]} listed for {backend} does not exist; "
            "fix the path in build.toml or add the file"
        )
    suffixes = _CXX_SUFFIXES | (_CUDA_SUFFIXES if backend == "cuda" else set())
    env = dict(os.environ)
    cuda_version: tuple[int, int] | None = None
    if backend == "cuda":
        home = cuda_home()
        if home is not None:
            env["CUDA_HOME"] = str(home)
            cuda_version = nvcc_version(home)
            kernels = [k for k in kernels if not (k.cuda_minver and cuda_version < _version(k.cuda_minver))]
    groups: list[dict[str, object]] = []
    all_archs: list[str] = []
    for k in kernels:
        archs = _kernel_archs(k, cuda_version, env.get("CUDA_HOME")) if backend == "cuda" else []
        all_archs += archs
        groups.append(
            {
                "name": f"kernel-{k.name}",
                "sources": [str(root / s) for s in k.src if Path(s).suffix in suffixes],
                "include_dirs": [str(root / i) for i in k.include],
                "cxx": list(k.cxx_flags),
                "nvcc": [*(k.cuda_flags or ()), *(f for a in archs for f in _gencode(a))],
            }
        )
    archs_built = _sort_archs(set(all_archs))
    # The binding also sees the kernels' include directories (kernel-builder gives it [torch] include only), so
    # it may include a kernel's header by name; it never gets a kernel's flags.
    groups.insert(
        0,
        {
            "name": "torch-binding",
            "sources": [str(s) for s in binding if s.suffix in suffixes]
            + [str(glibc_compat(work)), str(libstdcxx_compat(work))],
            "include_dirs": list(dict.fromkeys(str(root / i) for k in kernels for i in k.include)),
            "cxx": list(config.torch.cxx_flags if config.torch else ()),
            "nvcc": [f for a in archs_built for f in _gencode(a)],
        },
    )
    groups = [g for g in groups if g["sources"]]
    if len(groups) == 1 and len(groups[0]["sources"]) == 1:  # type: ignore[arg-type]
        raise BuildError(
            f"no C++/CUDA sources to compile for backend {backend}: list .cpp/.cu files in "
            f"[kernel.*] src of {config.file.name}"
        )
    includes.append(registration_dir(work))
    includes += dependency_includes(config, backend)
    defines = list(_BACKEND_DEFINES[backend])
    if stable_abi:
        defines.append(f"-DTORCH_TARGET_VERSION={target_version(stable_abi)}")
    cxx_flags: list[str] = ["-O3"]
    nvcc_flags: list[str] = ["-O3"]
    if backend == "cuda":
        after = [f for inc in cuda_wheel_includes() for f in ("-isystem", str(inc))]
        cxx_flags += after
        nvcc_flags += [*after, *_UNDO_NVCC, "--expt-relaxed-constexpr", *defines]
    cxx_flags += [*defines, "-fno-gnu-unique", "-g0"]
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
    compiled = [src for g in groups for src in g["sources"]]  # type: ignore[attr-defined]
    openmp = any("-fopenmp" in g["cxx"] for g in groups)  # type: ignore[operator]
    spec = {
        "name": name,
        "sources": compiled,
        "include_dirs": [str(i) for i in includes],
        "cxx": cxx_flags,
        "nvcc": nvcc_flags,
        "cuda": backend == "cuda",
        "stable": bool(stable_abi),
        "groups": groups,
        "build_lib": str(lib_dir),
        "build_temp": str(tmp_dir),
        "library_dirs": library_dirs,
        "libraries": libraries,
        "link": ["-fopenmp"] if openmp else [],
    }
    (work / "spec.json").write_text(json.dumps(spec, indent=2))
    for old in lib_dir.glob(f"{name}*.so"):
        old.unlink()
    if jobs:
        env["MAX_JOBS"] = str(jobs)
    cmd = [sys.executable, "-m", "hubkernels.builder._setup_ext", str(work / "spec.json")]
    _run_with_progress(cmd, env, len(compiled), verbose)
    built = list(lib_dir.glob(f"{name}*.so"))
    if not built:
        raise CompileError(f"the compiler reported success but produced no {name}*.so in {lib_dir}")
    return built[0], archs_built


def target_version(target: tuple[int, int]) -> str:
    """`TORCH_TARGET_VERSION` for torch (major, minor), as torch's headers spell it: 0x020b000000000000."""
    return f"0x{(target[0] << 56) | (target[1] << 48):016x}"


def default_cuda_archs(cuda: tuple[int, int] | None) -> tuple[str, ...]:
    """kernel-builder's capabilities for a CUDA release: what a kernel without `cuda-capabilities` gets."""
    return next(archs for floor, archs in _DEFAULT_CUDA_ARCHS if cuda is None or cuda >= floor)


def cuda_kernel_archs(
    kernel: str, requested: tuple[str, ...], cuda: tuple[int, int] | None, toolkit: frozenset[str] | None = None
) -> list[str]:
    """A kernel's capabilities as kernel-builder builds them: `requested` loosely intersected with the
    release's capabilities (those `nvcc --list-gpu-arch` lists, when `toolkit` is given); an empty result fails.

    For each supported capability, the highest requested one at or below it of the same major (any major for
    `+PTX`) is built; `9.0a` is kept when 9.0 is supported. With nothing requested, every default is built.
    """
    defaults = default_cuda_archs(cuda)
    if not requested:
        return [a for a in defaults if toolkit is None or _compute(a) in toolkit]
    targets = [a.removesuffix("+PTX") for a in defaults]
    if toolkit is not None:
        targets = [a for a in targets if _compute(a) in toolkit]
    ptx = {a.removesuffix("+PTX") for a in requested if a.endswith("+PTX")}
    wanted = list(dict.fromkeys(a.removesuffix("+PTX") for a in requested))
    chosen: list[str] = []
    remaining = list(targets)
    for arch in [a for a in wanted if a[-1] in "af"]:
        wanted.remove(arch)
        if arch[:-1] in targets:
            remaining = [t for t in remaining if t != arch[:-1]]
            chosen.append(arch)
    wanted.sort(key=_arch_key)
    for target in remaining:
        pick = None
        for arch in wanted:
            if _arch_key(arch) > _arch_key(target):
                break
            if arch in ptx or arch.split(".")[0] == target.split(".")[0]:
                pick = arch
        if pick is not None:
            chosen.append(pick)
    if not chosen:
        raise BuildError(
            f"CUDA kernel: {kernel}, empty set of capabilities after intersection (kernel: "
            f"{';'.join(requested)}, supported: {';'.join(targets)}); list a capability that "
            f"CUDA {'.'.join(map(str, cuda or ())) or 'here'} supports in cuda-capabilities"
        )
    return _sort_archs({a + "+PTX" if a in ptx else a for a in chosen})


def toolkit_archs(home: str | None) -> frozenset[str] | None:
    """The `compute_XY` names `nvcc --list-gpu-arch` prints, or None when that nvcc cannot say."""
    if not home:
        return None
    return _list_gpu_arch(home)


@functools.lru_cache(maxsize=None)
def _list_gpu_arch(home: str) -> frozenset[str] | None:
    try:
        out = subprocess.run(
            [str(Path(home) / "bin" / "nvcc"), "--list-gpu-arch"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = frozenset(re.findall(r"compute_\w+", out))
    return found or None


def _kernel_archs(kernel: KernelConfig, cuda: tuple[int, int] | None, home: str | None) -> list[str]:
    return cuda_kernel_archs(kernel.name, kernel.cuda_capabilities, cuda, toolkit_archs(home))


def _compute(arch: str) -> str:
    return "compute_" + arch.removesuffix("+PTX").replace(".", "")


def _arch_key(arch: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", arch))


def _sort_archs(archs: set[str]) -> list[str]:
    return sorted(archs, key=lambda a: (_arch_key(a), a))


def _version(text: str) -> tuple[int, int]:
    parts = [int(x) for x in text.split(".")[:2]]
    return (parts[0], parts[1] if len(parts) > 1 else 0)


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
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, errors="replace"
        )
    except OSError as e:
        raise BuildError(f"could not start the compile ({e})") from None
    assert proc.stdout is not None
    step = re.compile(r"^\[(\d+)/(\d+)\]")
    done = last = 0  # one ninja run per source group: its [i/n] steps add to the runs before it
    with tqdm(total=n_sources, desc="compiling", unit="step", file=sys.stderr, disable=None, leave=False) as bar:
        for line in proc.stdout:
            log.append(line)
            if verbose:
                bar.write(line.rstrip())
            m = step.match(line)
            if m:
                i = int(m.group(1))
                if i <= last:
                    done += last
                last = i
                bar.total = max(bar.total or 0, done + int(m.group(2)))
                bar.n = done + i
                bar.refresh()
    if proc.wait() != 0:
        tail = "".join(log[-400:]).rstrip()
        raise CompileError(f"compilation failed (exit {proc.returncode}):\n{tail}")
