"""Compile a kernel package into a Hub-layout variant: `build/<variant>/` with `metadata.json` and digest.

No Nix: sources go through `torch.utils.cpp_extension` (setuptools + ninja) into one Python-limited-API
module `<id>.abi3.so` per variant, with ops registered by `TORCH_LIBRARY` under the unique namespace
`_<python_name>_<backend>_<id>`. Incremental: a rebuild with nothing changed only checks a stamp.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ._version import __version__
from .config import BuildConfig, load_config
from .digest import hash_variant
from .errors import BuildError
from .layout import ships
from .metadata import Metadata
from .platform import System, Variant

_CXX_SUFFIXES = {".cpp", ".cc", ".cxx", ".c"}
_CUDA_SUFFIXES = {".cu"}
#: CUDA capabilities built when a [kernel.*] table does not list any (kernel-builder's defaults for CUDA >= 13).
_DEFAULT_CUDA_ARCHS = ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX")


@dataclass(frozen=True)
class BuildResult:
    """What a build produced."""

    variant: Variant
    path: Path
    id: str
    up_to_date: bool


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def git_state(root: Path) -> tuple[str | None, str | None, bool]:
    """(HEAD commit, HEAD tree, dirty): dirty means tracked files differ from HEAD (untracked files don't count)."""
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return None, None, False
    tree = _git(root, "rev-parse", "HEAD^{tree}")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit, tree, bool(status)


def unique_id(root: Path) -> str:
    """7 hex of the git tree of HEAD, `_dirty` appended for a changed work tree, random base32 outside git."""
    _, tree, dirty = git_state(root)
    if tree:
        return tree[:7] + ("_dirty" if dirty else "")
    return base64.b32encode(secrets.token_bytes(8)).decode().rstrip("=").lower()


def ops_name(config: BuildConfig, backend: str, uid: str) -> str:
    return f"_{config.python_name}_{backend}_{uid}"


def choose_backend(config: BuildConfig, system: System, backend: str | None) -> str:
    """The backend to build: the one asked for, else this system's if the kernel supports it, else cpu."""
    backends = config.general.backends
    if backend:
        if backend not in backends:
            raise BuildError(f"{config.general.name} does not list backend {backend!r} (it lists {', '.join(backends)})")
        return backend
    if system.backend in backends:
        return system.backend
    if "cpu" in backends:
        return "cpu"
    raise BuildError(f"{config.general.name} supports {', '.join(backends)}, but this machine has {system.backend} "
                     "(and the kernel has no cpu backend).")


def _cuda_archs(kernels: list) -> list[str]:  # type: ignore[type-arg]
    archs: set[str] = set()
    for k in kernels:
        archs.update(k.cuda_capabilities or _DEFAULT_CUDA_ARCHS)
    return sorted(archs, key=lambda a: tuple(int(x) for x in re.findall(r"\d+", a)))


def _gencode(arch: str) -> list[str]:
    ptx = arch.endswith("+PTX")
    base = arch.removesuffix("+PTX")
    num = base.replace(".", "")
    flags = [f"-gencode=arch=compute_{num},code=sm_{num}"]
    if ptx:
        flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def _torch_bounds_ok(config: BuildConfig, system: System) -> None:
    t = config.torch
    if t is None:
        return
    here = system.torch_version
    for bound, ok in ((t.minver, lambda b: here >= b), (t.maxver, lambda b: here <= b)):
        if bound:
            b = tuple(int(x) for x in str(bound).split(".")[:2])
            if not ok(b):
                raise BuildError(f"{config.general.name} supports torch {t.minver or 'any'}..{t.maxver or 'any'}; "
                                 f"installed torch is {here[0]}.{here[1]}")


def _package_files(config: BuildConfig) -> list[Path]:
    """The Python package files shipped in every variant (.py plus the [torch] pyext extensions)."""
    pkg = config.package_dir
    if not (pkg / "__init__.py").is_file():
        raise BuildError(f"{pkg}/__init__.py is missing: the kernel's Python package must live there")
    exts = {"py", *config.data_extensions}  # arch builds drop .pyi stubs, as kernel-builder does
    files = []
    for p in sorted(pkg.rglob("*")):
        rel = p.relative_to(pkg)
        if p.is_file() and ships(rel.as_posix()) and p.suffix.lstrip(".") in exts and rel.as_posix() != "_ops.py":
            files.append(p)
    return files


def _ops_py(name: str) -> str:
    return textwrap.dedent(f'''\
        # Generated by hubkernels build. Loads the native ops of this variant.
        import torch

        from . import {name}  # noqa: F401  (importing the .abi3.so registers TORCH_LIBRARY({name}))

        ops = torch.ops.{name}


        def add_op_namespace_prefix(op_name: str) -> str:
            """The fully qualified name of an op of this build: "{name}::<op_name>"."""
            return f"{name}::{{op_name}}"
        ''')


def _noarch_ops_py(python_name: str, uid: str) -> str:
    return textwrap.dedent(f'''\
        # Generated by hubkernels build. Python ops of this noarch variant live in a per-backend namespace.
        import torch


        def _backend() -> str:
            if torch.version.cuda:
                return "cuda"
            if torch.version.hip:
                return "rocm"
            if torch.backends.mps.is_available():
                return "metal"
            if getattr(torch.version, "xpu", None):
                return "xpu"
            return "cpu"


        _OPS_NAME = f"_{python_name}_{{_backend()}}_{uid}"
        ops = getattr(torch.ops, _OPS_NAME)


        def add_op_namespace_prefix(op_name: str) -> str:
            return f"{{_OPS_NAME}}::{{op_name}}"
        ''')


def _stamp(parts: list[object], files: list[Path]) -> str:
    h = hashlib.sha256(json.dumps([str(p) for p in parts]).encode())
    for f in sorted(files):
        h.update(str(f).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _compile(config: BuildConfig, backend: str, name: str, work: Path, jobs: int | None,
             verbose: bool) -> tuple[Path, list[str]]:
    """Compile the [torch] binding and the backend's [kernel.*] sources into `<name>.abi3.so`; returns it."""
    root = config.root
    kernels = config.kernels_for(backend)
    srcs: list[Path] = []
    includes: list[Path] = [root]
    cxx_flags: list[str] = ["-O3"]
    nvcc_flags: list[str] = ["-O3"]
    for rel in (config.torch.src if config.torch else ()):
        srcs.append(root / rel)
    for rel in (config.torch.include if config.torch else ()):
        includes.append(root / rel)
    cxx_flags += list(config.torch.cxx_flags if config.torch else ())
    for k in kernels:
        srcs += [root / s for s in k.src]
        includes += [root / i for i in k.include]
        cxx_flags += list(k.cxx_flags)
        nvcc_flags += list(k.cuda_flags or ())
    compiled = [s for s in srcs if s.suffix in _CXX_SUFFIXES | (_CUDA_SUFFIXES if backend == "cuda" else set())]
    if not compiled:
        raise BuildError(f"no C++/CUDA sources to compile for backend {backend}")
    archs: list[str] = []
    if backend == "cuda":
        archs = _cuda_archs(kernels)
        for a in archs:
            nvcc_flags += _gencode(a)
        nvcc_flags += ["-DCUDA_KERNEL", "--expt-relaxed-constexpr"]
    macro = {"cpu": "CPU_KERNEL", "cuda": "CUDA_KERNEL", "rocm": "ROCM_KERNEL", "xpu": "XPU_KERNEL",
             "metal": "METAL_KERNEL"}[backend]
    cxx_flags += [f"-D{macro}", "-fno-gnu-unique", "-g0"]
    compiled.append(_glibc_compat(work))
    lib_dir, tmp_dir = work / "lib", work / "obj"
    lib_dir.mkdir(parents=True, exist_ok=True)
    spec = {"name": name, "sources": [str(s) for s in compiled], "include_dirs": [str(i) for i in includes],
            "cxx": cxx_flags, "nvcc": nvcc_flags, "cuda": backend == "cuda",
            "build_lib": str(lib_dir), "build_temp": str(tmp_dir),
            "link": ["-fopenmp"] if "-fopenmp" in cxx_flags else []}
    (work / "spec.json").write_text(json.dumps(spec, indent=2))
    env = dict(os.environ)
    if jobs:
        env["MAX_JOBS"] = str(jobs)
    cmd = [sys.executable, "-m", "hubkernels._setup_ext", str(work / "spec.json")]
    _run_with_progress(cmd, env, len(compiled), verbose)
    built = list(lib_dir.glob(f"{name}*.so"))
    if not built:
        raise BuildError(f"the compiler reported success but produced no {name}*.so in {lib_dir}")
    return built[0], archs


def _glibc_compat(work: Path) -> Path:
    """A source that keeps the module loadable on glibc 2.28 (manylinux_2_28) when built on a newer glibc.

    libstdc++ >= 11 reads glibc 2.32's `__libc_single_threaded` to skip atomics; a hidden local definition
    set to 0 ("maybe multi-threaded") binds that read inside the module, so it always takes the atomic path.
    """
    path = work / "_glibc_compat.cpp"
    text = ('// generated by hubkernels build\n'
            'extern "C" {\n__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;\n}\n')
    work.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def check_abi(so: Path, python_abi: str = "3.9", manylinux: str = "manylinux_2_28") -> list[str]:
    """kernel-abi-check's Python ABI3 and manylinux checks of one module; returns the violations (readable)."""
    try:
        import kernel_abi_check
    except ImportError:
        return []
    obj = kernel_abi_check.ObjectFile(str(so))
    problems = [f"Python ABI3 {python_abi}: {v}" for v in obj.check_python_abi(python_abi)]
    problems += [f"{manylinux}: {v}" for v in obj.check_manylinux(manylinux)]
    return problems


def _run_with_progress(cmd: list[str], env: dict[str, str], n_sources: int, verbose: bool) -> None:
    """Run the compile, showing ninja's [i/n] steps as a progress bar; on failure show the whole log."""
    from tqdm import tqdm

    log: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
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
        tail = "".join(log[-400:])
        raise BuildError(f"compilation failed (exit {proc.returncode}):\n{tail}")


def build(path: str | Path = ".", *, backend: str | None = None, jobs: int | None = None,
          verbose: bool = False, out_dir: str | Path | None = None, quiet: bool = False) -> BuildResult:
    """Build the kernel at `path` for this machine into `<path>/build/<variant>/` and return where it went.

    Concurrent builds of one checkout (parallel test sessions, say) take turns on a lock file.
    """
    from filelock import FileLock

    config = load_config(path)
    (config.root / "_build").mkdir(exist_ok=True)
    with FileLock(str(config.root / "_build" / ".lock")):
        return _build_locked(config, backend, jobs, verbose, out_dir, quiet)


def _build_locked(config: BuildConfig, backend: str | None, jobs: int | None, verbose: bool,
                  out_dir: str | Path | None, quiet: bool) -> BuildResult:
    root = config.root
    system = System.current()
    backend = choose_backend(config, system, backend)
    _torch_bounds_ok(config, system)
    uid = unique_id(root)
    name = ops_name(config, backend, uid)
    noarch = config.is_noarch(backend)
    variant = Variant("noarch", backend) if noarch else system.build_variant(backend)
    out_root = Path(out_dir) if out_dir else root / "build"
    dest = out_root / str(variant)
    work = root / "_build" / str(variant)
    pkg_files = _package_files(config)
    sources = [root / s for k in config.kernels_for(backend) for s in k.src]
    sources += [root / s for s in (config.torch.src if config.torch else ())]
    builder = [Path(__file__), Path(__file__).with_name("_setup_ext.py")]  # a new builder rebuilds
    stamp = _stamp([__version__, name, str(variant), config.file.read_text(), sys.version_info[:2]],
                   pkg_files + sources + builder)
    stamp_file = work / "stamp"
    if dest.is_dir() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        try:
            from .digest import violations
            if not violations(dest, Metadata.read(dest).digest):
                _say(quiet, f"{variant}: up to date ({dest})")
                return BuildResult(variant, dest, name, True)
        except (OSError, ValueError):
            pass
    _say(quiet, f"Building {config.general.name} v{config.general.version} -> {variant} (ops namespace {name})")
    work.mkdir(parents=True, exist_ok=True)
    staging = out_root / f".{variant}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    archs: list[str] = []
    for f in pkg_files:
        target = staging / f.relative_to(config.package_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    if noarch:
        (staging / "_ops.py").write_text(_noarch_ops_py(config.python_name, uid))
    else:
        so, archs = _compile(config, backend, name, work, jobs, verbose)
        shutil.copy2(so, staging / f"{name}.abi3.so")
        problems = check_abi(staging / f"{name}.abi3.so")
        if any(p.startswith("Python ABI3") for p in problems):
            raise BuildError(f"{name}.abi3.so uses Python API outside the stable ABI:\n  " + "\n  ".join(problems))
        for p in problems:
            _say(quiet, f"warning: ABI check: {p}")
        (staging / "_ops.py").write_text(_ops_py(name))
    commit, _, dirty = git_state(root)
    backend_meta: dict[str, object] = {"type": backend}
    if backend == "cuda":
        backend_meta["archs"] = archs
    # "kernel-builder" names the builder that made the variant (HF kernels requires the key); we are that builder.
    provenance: dict[str, object] = {"kernel-builder": {"name": "hubkernels", "version": __version__}}
    if commit:
        provenance["kernel"] = {"commit": commit, "dirty": dirty}
    meta = Metadata(name=config.general.name, id=name, version=config.general.version, license=config.general.license,
                    backend=backend_meta, python_depends=config.python_depends(backend),
                    kernel_depends=[_dependency(d) for d in config.kernel_depends(backend)],
                    upstream=config.general.upstream, source=config.general.source,
                    digest={"algorithm": "sha256", "files": hash_variant(staging)}, provenance=provenance)
    meta.write(staging)
    if dest.exists():
        shutil.rmtree(dest)
    staging.rename(dest)
    stamp_file.write_text(stamp)
    _say(quiet, f"{variant}: built {dest}")
    return BuildResult(variant, dest, name, False)


def _dependency(dep: object) -> dict[str, object]:
    out: dict[str, object] = {"repo-id": dep.repo_id}  # type: ignore[attr-defined]
    for key in ("version", "revision"):
        if getattr(dep, key) is not None:
            out[key] = getattr(dep, key)
    return out


def _say(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)
