"""Stages on the CPU machine the wheels a GPU-machine call carries: what its image (Python 3.12) lacks.

python scripts/device_stage.py whl   .whl/: hubkernels' and the GPU tests' dependencies (diffusers among them), at
                                     the versions this checkout's .venv holds, so the GPU runs what CI runs
python scripts/device_stage.py fa4   .fa4a/, .fa4b/: flash-attn-4 and the CuTe DSL, the peer of BENCHMARKS.md §8;
                                     its 92 MB library wheel goes as an xz tar in two parts, since a call carries
                                     64 MiB (the tracked tree and build/ included)
Each folder is added to .git/info/exclude: it travels only in a call whose `carry` names it. On the GPU machine:
  whl: python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site
       .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD
  fa4: call A carries .fa4a: mkdir -p /tmp/keep && cp -r .fa4a /tmp/keep/ && python3 -m pip install -q --no-index
       --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/keep/.fa4a/*.whl
       call B carries .fa4b (and build/): cat /tmp/keep/.fa4a/part.aa .fa4b/part.ab | xz -d | tar x -C /tmp/site;
       python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .fa4b/*.whl;
       export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
# Missing from the GPU image or older there than hubkernels needs (its package list: the device tool's KINDS.md).
WHL = [
    "huggingface_hub", "hf-xet", "httpx2", "httpcore2", "pyelftools", "starlette", "uvicorn", "blake3", "lz4",
    "kernels", "diffusers", "importlib_metadata", "transformers", "variantlib", "truststore", "tomlkit",
    "platformdirs", "click", "idna",
]  # fmt: skip
FA4 = ["flash-attn-4==4.0.0b36", "nvidia-cutlass-dsl==4.8.1", "nvidia-cutlass-dsl-libs-base==4.8.1",
       "nvidia-cutlass-dsl-libs-core==4.8.1", "quack-kernels", "apache-tvm-ffi", "torch-c-dlpack-ext",
       "einops"]  # fmt: skip
# what `hubkernels bench` itself needs beyond the image, for call B, which has no room left for .whl
BENCH = ["pyelftools"]
FA4_BIG = "nvidia-cutlass-dsl-libs-cu13==4.8.1"  # 92 MB: unpacked, tarred, split
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "linux_x86_64", "any"]  # fmt: skip


def venv_version(name: str) -> str:
    """NAME==VERSION as this checkout's .venv has it (the versions CI tests)."""
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    out = subprocess.run([str(VENV_PYTHON), "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{name} is not in .venv: run ./dev test once first")
    return f"{name}=={out.stdout.strip()}"


def download(specs: list[str], dest: Path) -> None:
    dest.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", "-d", str(dest)]  # fmt: skip
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + specs, check=True)


def exclude(*folders: str) -> None:
    path = ROOT / ".git" / "info" / "exclude"
    path.parent.mkdir(parents=True, exist_ok=True)
    have = path.read_text().splitlines() if path.exists() else []
    with path.open("a") as f:
        for d in folders:
            if f"/{d}/" not in have:
                f.write(f"/{d}/\n")


def stage_whl() -> None:
    exclude(".whl")
    download([venv_version(n) for n in WHL], ROOT / ".whl")


def stage_fa4() -> None:
    exclude(".fa4a", ".fa4b")
    a, b = ROOT / ".fa4a", ROOT / ".fa4b"
    download(FA4, a)
    download([venv_version(n) for n in BENCH], b)
    with tempfile.TemporaryDirectory() as tmp:
        download([FA4_BIG], Path(tmp) / "dl")
        (wheel,) = (Path(tmp) / "dl").glob("*.whl")
        site = Path(tmp) / "site"
        subprocess.run(["unzip", "-q", str(wheel), "-d", str(site)], check=True)
        tar = Path(tmp) / "libs.tar.xz"
        subprocess.run(f"tar c -C {site} . | xz -T0 -6 > {tar}", shell=True, check=True)
        half = (tar.stat().st_size + 1) // 2
        data = tar.read_bytes()
        (a / "part.aa").write_bytes(data[:half])
        (b / "part.ab").write_bytes(data[half:])
    for d in (a, b):
        size = sum(f.stat().st_size for f in d.iterdir())
        print(f"{d.name}: {size / 2**20:.1f} MiB")


def main() -> None:
    steps = {"whl": stage_whl, "fa4": stage_fa4}
    if len(sys.argv) < 2 or any(a not in steps for a in sys.argv[1:]):
        raise SystemExit(__doc__)
    for a in sys.argv[1:]:
        steps[a]()


if __name__ == "__main__":
    main()
