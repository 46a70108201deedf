"""Build and run the CPU emulation of this checkout's CUDA kernels (emu.h + cases.cpp).

The CUDA sources named by build.toml are copied and rewritten just enough for g++: a launch
`k<<<cfg>>>(args)` becomes `emu::launch<&k>(emu::Config(cfg), args)`, a kernel's __launch_bounds__
becomes a check at the top of its body, and inline PTX becomes its CPU equivalent. Anything the
rewrite does not recognise is an error that says so, never silently left out. Objects and the
binary are cached by content hash, so a second run only runs.

    python tests/ltx/cuda_emu/harness.py [--repo DIR] [SUITE ...]   # build, run, print a summary
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
MIN_GCC = 12  # C++20 (template <auto>, inline variables) with the CUDA 13 host headers
# -O0: the build is most of a cold run (the row-norm sources instantiate ~80 kernels each).
CXXFLAGS = [
    "-std=c++20",
    "-O0",
    "-g1",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
]
RUNTIME = (HERE / "emu.cpp", HERE / "cases.cpp")  # compiled with the kernel sources, and
RUNTIME_FLAGS = ["-O1"]  # optimised: drawing the random inputs at -O0 would take most of the run
DEFAULT_TIMEOUT_S = 300.0

# Inline PTX the kernels use, by instruction: the C++ statement that replaces
# asm("<instruction> %0, %1;" : "=f"(out) : "f"(in)).
PTX = {
    "ex2.approx.ftz.f32": "{out} = emu::ex2_approx_ftz({in});",
}


class HarnessError(RuntimeError):
    """The emulation could not be prepared, built or run; the message says what to change."""


# ---- toolchain ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    cxx: str
    version: str
    cuda_include: Path


def find_toolchain() -> Toolchain | str:
    """The g++ and CUDA headers to build with, or the reason there are none (a sentence)."""
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None:
        return f"no C++ compiler `{cxx}` on PATH (the CUDA emulation needs g++ >= {MIN_GCC})"
    try:
        out = subprocess.run([cxx, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True, timeout=30)
        version = out.stdout.strip()
        ident = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"`{cxx}` does not run: {e}"
    if "clang" in ident.lower() or not version or int(version.split(".")[0]) < MIN_GCC:
        return f"`{cxx}` is {version or 'unknown'}; the CUDA emulation needs g++ >= {MIN_GCC}"
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the emulation switches fibers in x86-64 assembly (emu.cpp), this is {platform.machine()}"
    include = _cuda_include()
    if include is None:
        return "no CUDA headers (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h): install the CUDA toolkit or set CUDA_HOME"
    probe = _sanitizer_probe(cxx)
    if probe:
        return probe
    return Toolchain(cxx, version, include)


def _cuda_include() -> Path | None:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    for root in filter(None, roots):
        inc = Path(root) / "include"
        if all((inc / h).is_file() for h in ("cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h")):
            return inc
    return None


def _sanitizer_probe(cxx: str) -> str | None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "probe.cpp"
        src.write_text('#include <cstdio>\nint main() { std::puts("ok"); }\n')
        r = subprocess.run([cxx, *CXXFLAGS, str(src), "-o", str(Path(d) / "probe")], capture_output=True, text=True)
        if r.returncode != 0:
            return (
                f"`{cxx}` cannot build with {' '.join(CXXFLAGS)} (libasan/libubsan missing?): "
                + r.stderr.strip()[-300:]
            )
    return None


# ---- sources --------------------------------------------------------------------------------

_LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;", re.S)
_ASM = re.compile(
    r'\basm\s*(?:volatile\s*)?\(\s*"([^"]*)"\s*:\s*"=\w+"\s*\(([^()]+)\)\s*:\s*'
    r'"\w+"\s*\(([^()]+)\)\s*\)\s*;'
)


# `#if defined(__CUDA_ARCH__)` ... `#else`: device-only code (vector inline PTX) with a host twin in
# the #else branch, which is what g++ compiles here.
_DEVICE_ONLY = re.compile(r"#if defined\(__CUDA_ARCH__\)\n.*?#else\n", re.S)


def cuda_sources(repo: Path) -> list[Path]:
    """Every file of every CUDA kernel in the repo's build.toml, in the order listed, but those of kernels built
    only for arch-specific targets (`9.0a`): their wgmma and bulk copies have no CPU equivalent, the GPU tests
    check them."""
    toml = repo / "build.toml"
    if not toml.is_file():
        raise HarnessError(f"{toml} not found: pass the root of a kernel checkout")
    config = tomllib.loads(toml.read_text())
    files = [
        repo / src
        for kernel in config.get("kernel", {}).values()
        if kernel.get("backend") == "cuda" and not _arch_specific_only(kernel.get("cuda-capabilities", []))
        for src in kernel.get("src", [])
    ]
    if not files:
        raise HarnessError(f'{toml} names no [kernel.*] with backend = "cuda"')
    return files


def _arch_specific_only(capabilities: list[str]) -> bool:
    return bool(capabilities) and all(c.removesuffix("+PTX").endswith("a") for c in capabilities)


def rewrite(text: str, name: str) -> str:
    """One CUDA source as g++ + emu.h compile it; HarnessError on anything not understood."""
    text = _LAUNCH.sub(lambda m: f"emu::launch<&{m[1]}>(emu::Config({m[2]}), {m[3]});", text)
    if "<<<" in text:
        line = text[: text.index("<<<")].count("\n") + 1
        raise HarnessError(
            f"{name}:{line}: a kernel launch the emulation cannot rewrite (tests/ltx/cuda_emu/harness.py, _LAUNCH)"
        )
    text = _move_launch_bounds(text, name)

    def asm(m: re.Match[str]) -> str:
        op = m[1].split()[0]
        if op not in PTX:
            raise HarnessError(
                f"{name}: inline PTX `{op}` has no CPU equivalent; add one to PTX in tests/ltx/cuda_emu/harness.py"
            )
        return PTX[op].format(out=m[2].strip(), **{"in": m[3].strip()})

    text = _DEVICE_ONLY.sub("#if 0\n#else\n", text)  # device-only code: the #else branch runs here
    text = _ASM.sub(asm, text)
    if re.search(r"\basm\b\s*(volatile\s*)?\(", text):
        raise HarnessError(
            f"{name}: an inline asm statement the emulation cannot parse (one output, one input is all it knows)"
        )
    return text


def _move_launch_bounds(text: str, name: str) -> str:
    start = 0
    while (at := text.find("__launch_bounds__(", start)) >= 0:
        start = at + 1
        if "//" in text[text.rfind("\n", 0, at) + 1 : at]:
            continue  # in a comment
        open_ = at + len("__launch_bounds__")
        close = _matching(text, open_, name)
        max_threads = _split_top_level(text[open_ + 1 : close])[0]
        rest = text[close + 1 :]
        params = rest.index("(")  # the kernel's parameter list, then its body
        body = rest.index("{", _matching(rest, params, name))
        rest = rest[: body + 1] + f" emu::check_launch_bounds({max_threads});" + rest[body + 1 :]
        text = text[:at] + rest
    return text


def _matching(text: str, open_: int, name: str) -> int:
    depth = 0
    for i in range(open_, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise HarnessError(f"{name}: unbalanced parentheses after offset {open_}")


def _split_top_level(args: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(args):
        depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(c, 0)
        if c == "," and depth == 0:
            parts.append(args[start:i].strip())
            start = i + 1
    return parts + [args[start:].strip()]


def prepare(repo: Path, out: Path) -> list[Path]:
    """Writes the rewritten sources to `out` (headers by name, each .cu as .cpp); returns the .cpps."""
    out.mkdir(parents=True, exist_ok=True)
    units = []
    for src in cuda_sources(repo):
        if not src.is_file():
            raise HarnessError(f"{src} (named in build.toml) does not exist")
        text = rewrite(src.read_text(), str(src.relative_to(repo)))
        if src.suffix == ".cu":
            dst = out / (src.stem + ".cpp")
            dst.write_text('#include "emu.h"\n' + text)
            units.append(dst)
        else:
            (out / src.name).write_text(text)
    return units


# ---- build ----------------------------------------------------------------------------------


def build(repo: Path, cache: Path, toolchain: Toolchain, *, jobs: int | None = None) -> Path:
    """The emulation binary for the repo's current CUDA sources (cached under `cache`)."""
    cache.mkdir(parents=True, exist_ok=True)
    for sub in ("src", "obj", "bin"):
        (cache / sub).mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache / "src", prefix=".tmp-"))
    try:
        units = prepare(repo, tmp)
        common = hashlib.sha256()
        for part in (toolchain.cxx, toolchain.version, str(toolchain.cuda_include), *CXXFLAGS):
            common.update(part.encode() + b"\0")
        headers = sorted(p for p in tmp.iterdir() if p.suffix in {".h", ".cuh"}) + [HERE / "emu.h"]
        for h in headers:
            common.update(h.name.encode() + b"\0" + h.read_bytes() + b"\0")
        unit_keys = {
            u.name: hashlib.sha256(common.digest() + " ".join(_unit_flags(u)).encode() + u.read_bytes()).hexdigest()[
                :16
            ]
            for u in [*units, *RUNTIME]
        }
        key = hashlib.sha256("".join(sorted(unit_keys.values())).encode()).hexdigest()[:16]
        # The rewritten sources stay in place: compiler errors and sanitizer reports point at them.
        src_dir = cache / "src" / key
        if not src_dir.exists():
            try:
                os.replace(tmp, src_dir)
            except OSError:  # another process put the same sources there first
                pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    binary = cache / "bin" / f"cuda-emu-{key}"
    keep = {binary, src_dir}
    jobs_to_run: list[tuple[Path, Path]] = []
    for name, h in unit_keys.items():
        unit = HERE / name if HERE / name in RUNTIME else src_dir / name
        obj = cache / "obj" / f"{Path(name).stem}-{h}.o"
        keep.add(obj)
        if not obj.exists():
            jobs_to_run.append((unit, obj))
    if binary.exists():
        _prune(cache, keep)
        return binary

    flags = [*CXXFLAGS, f"-I{toolchain.cuda_include}", f"-I{HERE}", f"-I{src_dir}"]

    def compile_one(job: tuple[Path, Path]) -> None:
        unit, obj = job
        tmp_obj = obj.with_name(f"{obj.name}.{os.getpid()}.tmp")
        _compile([toolchain.cxx, *flags, *_unit_flags(unit), "-c", str(unit), "-o", str(tmp_obj)], unit.name)
        os.replace(tmp_obj, obj)

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as ex:
        list(ex.map(compile_one, jobs_to_run))
    objects = sorted(str(p) for p in keep if p.suffix == ".o")
    tmp_bin = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
    _compile([toolchain.cxx, *CXXFLAGS, *objects, "-o", str(tmp_bin)], "the link")
    os.replace(tmp_bin, binary)
    _prune(cache, keep)
    return binary


def _unit_flags(unit: Path) -> list[str]:
    return RUNTIME_FLAGS if unit.name in {r.name for r in RUNTIME} else []


def _compile(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise HarnessError(
            f"the emulation build failed in {what}. If a kernel uses a CUDA feature the emulation "
            f"lacks, add it to tests/ltx/cuda_emu/emu.h.\n$ {' '.join(cmd)}\n{r.stderr[-6000:]}"
        )


def _prune(cache: Path, keep: set[Path]) -> None:
    """Drops cached objects and binaries of other source versions unused for a day."""
    old = time.time() - 86400
    for f in [*cache.glob("obj/*"), *cache.glob("bin/*"), *cache.glob("src/*")]:
        try:
            if f not in keep and f.stat().st_mtime < old:
                shutil.rmtree(f) if f.is_dir() else f.unlink()
        except OSError:
            pass


# ---- run ------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What one run of the binary reported."""

    returncode: int
    output: str
    checks: int = 0
    failed: int = 0
    launches: int = 0
    suites: dict[str, int] = field(default_factory=dict)  # suite -> checks run
    kernels: dict[str, int] = field(default_factory=dict)  # every kernel instantiation -> launches
    failures: list[str] = field(default_factory=list)
    last_case: str = ""  # the check that ran last (the one that died, if the process did)
    worst: dict[str, float] = field(default_factory=dict)  # dtype -> largest error / tolerance
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return self.checks - self.failed


def run(binary: Path, suites: list[str] | None = None, *, timeout: float = DEFAULT_TIMEOUT_S) -> RunResult:
    """Runs the given suites (all but the fault self-tests when None)."""
    t0 = time.perf_counter()
    try:
        r = subprocess.run([str(binary), *(suites or [])], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise HarnessError(
            f"the emulation ran past {timeout:.0f} s: a __syncthreads or shuffle that some threads "
            f"of a block never reach (a deadlock on the GPU too), or far more work than the cases "
            f"should take.\n{(e.stdout or b'')[-3000:]!r}"
        ) from e
    stderr = []
    last_case = ""
    for line in r.stderr.splitlines():
        if line.startswith("CASE "):
            last_case = line[5:]
        else:
            stderr.append(line)
    result = RunResult(
        r.returncode, r.stdout + "\n".join(stderr), last_case=last_case, seconds=time.perf_counter() - t0
    )
    for line in r.stdout.splitlines():
        if line.startswith("FAIL "):
            result.failures.append(line)
        elif line.startswith("KERNEL "):
            _, n, name = line.split(" ", 2)
            result.kernels[name] = int(n)
        elif line.startswith("SUITE "):
            _, name, n = line.split()
            result.suites[name] = int(n)
        elif line.startswith("WORST "):
            _, dtype, ratio = line.split()[:3]
            result.worst[dtype] = float(ratio)
        elif line.startswith("RESULT "):
            fields = dict(kv.split("=") for kv in line.split()[1:])
            result.checks, result.failed = int(fields["checks"]), int(fields["failed"])
            result.launches = int(fields["launches"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=HERE.parents[2])
    parser.add_argument(
        "--cache", type=Path, default=None, help="where objects and the binary are kept (default: REPO/_build/cuda_emu)"
    )
    parser.add_argument("suites", nargs="*", help="rms mod addmod gated gelu rope qk qkgrid empty (default: all)")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    tc = find_toolchain()
    if isinstance(tc, str):
        print(f"cannot run the CUDA emulation: {tc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    binary = build(repo, args.cache or repo / "_build" / "cuda_emu", tc)
    print(f"built {binary} in {time.perf_counter() - t0:.1f} s")
    res = run(binary, args.suites)
    worst = ", ".join(f"{dt} {r:.2f}" for dt, r in sorted(res.worst.items()))
    print(
        f"{res.passed} passed, {res.failed} failed, {res.launches} launches, "
        f"largest error / tolerance: {worst} ({res.seconds:.1f} s)"
    )
    for f in res.failures:
        print("  " + f)
    if res.returncode != 0 and not res.failures:
        print(f"  died in: {res.last_case}\n{res.output[-4000:]}")
    ok = res.returncode == 0 and res.failed == 0 and res.checks > 0
    launched = dict(res.kernels)
    never = sorted(name for name, n in launched.items() if n == 0)
    if not args.suites:
        print(f"{len(launched) - len(never)} of {len(launched)} kernel instantiations launched")
        for name in never:
            print(f"  never launched: {name}")
        ok &= not never
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
