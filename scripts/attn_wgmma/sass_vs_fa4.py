"""The main loop of the shipped attention kernel against flash-attn-4's, instruction by instruction, on the CPU machine.

python scripts/attn_wgmma/sass_vs_fa4.py   (no GPU: flash-attn-4's documented CPU-only compile path)
Needs a Python with flash-attn-4, nvidia-cutlass-dsl, torch and triton (its cuobjdump) installed, e.g.
  python3 -m venv /tmp/fa4 && /tmp/fa4/bin/pip install torch==2.13.0 flash-attn-4==4.0.0b36 triton numpy
and nvcc for sm_90a. Compiles flash-attn-4's sm90 forward for [2, 6144, 32, 64] bf16 under torch's FakeTensorMode
(FLASH_ATTENTION_ARCH=sm_90, CUTE_DSL_ARCH=sm_90a), compiles shim.cu's shipped configuration with nvcc, and prints,
for each kernel's main loop (the backward branch around one tile's Q K^T and P V), the instruction count and mix.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNEL = HERE.parent.parent / "kernel_src" / "ltx_cuda_sm90"
SHIPPED = "Bf16ScoresELi3ELi128ELi3ELNS_8ScheduleE2"  # shim.cu's variant 0: 3 consumers, 128-token tiles, 3 stages
LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);")
KINDS = {  # instruction classes, by opcode prefix
    "tensor (HGMMA)": ("HGMMA",),
    "exp2 (MUFU)": ("MUFU",),
    "fp32 arithmetic": ("FFMA", "FMUL", "FADD", "FMNMX", "FSETP", "FSEL"),
    "bf16 packing": ("F2FP",),
    "shuffles": ("SHFL",),
    "barriers, mbarriers, wgmma sync": ("BAR", "SYNCS", "WARPGROUP", "WARPSYNC", "DEPBAR"),
    "uniform datapath": ("U", "S2UR", "R2UR"),
    "integer, moves, predicates": ("IMAD", "IADD", "LOP", "SHF", "ISETP", "MOV", "SEL", "LEA", "VIADD", "PLOP", "P2R"),
    "branches": ("BRA",),
}


def fa4_cubin(out: Path) -> Path:
    """flash-attn-4's forward for LTX-Video's shape, compiled for sm_90a without a GPU."""
    code = f"""
import os
os.environ.update(FLASH_ATTENTION_ARCH="sm_90", CUTE_DSL_ARCH="sm_90a", FLASH_ATTENTION_NUM_SMS="132",
                  CUTE_DSL_KEEP="cubin", CUTE_DSL_DUMP_DIR={str(out)!r})
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from flash_attn.cute.interface import _flash_attn_fwd
with FakeTensorMode(allow_non_fake_inputs=True):
    q, k, v = (torch.empty(2, 6144, 32, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    _flash_attn_fwd(q, k, v, softmax_scale=0.125)
"""
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    (cubin,) = out.glob("*FlashAttentionForwardSm90*.cubin")
    return cubin


def ours_cubin(out: Path) -> Path:
    cubin = out / "shim.cubin"
    cmd = ["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-I", str(KERNEL),
           "-o", str(cubin), str(HERE / "shim.cu")]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return cubin


def cuobjdump() -> str:
    import triton  # its NVIDIA backend carries cuobjdump

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def functions(cubin: Path) -> dict[str, list[tuple[int, str, str]]]:
    """(address, opcode, operands) of every instruction, by function."""
    sass = subprocess.run([cuobjdump(), "--dump-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    out: dict[str, list[tuple[int, str, str]]] = {}
    name = ""
    for ln in sass.splitlines():
        if "Function :" in ln:
            name = ln.split("Function :")[1].strip()
            out[name] = []
        elif m := LINE.search(ln):
            out[name].append((int(m.group(1), 16), m.group(3), m.group(4)))
    return out


def main_loop(code: list[tuple[int, str, str]]) -> tuple[list[tuple[int, str, str]], int]:
    """The instructions a tile takes in the loop around one tile's Q K^T (64x128) and P V (64x64), without the
    blocks the loop branches forward over (the last tile's mask, taken once), and how many those hold."""
    for addr, op, args in code:
        target = re.search(r"0x([0-9a-f]+)", args) if op == "BRA" else None
        if not target or int(target.group(1), 16) >= addr:
            continue
        body = [i for i in code if int(target.group(1), 16) <= i[0] <= addr]
        shapes = {i[1] + i[2].split(",")[0] for i in body if i[1].startswith("HGMMA")}
        if any("64x128" in s for s in shapes) and any("64x64" in s for s in shapes):
            skipped: set[int] = set()
            for a, o, x in body:
                t = re.search(r"0x([0-9a-f]+)", x) if o == "BRA" else None
                if t and a < int(t.group(1), 16) <= addr:
                    skipped |= {i[0] for i in body if a < i[0] < int(t.group(1), 16)}
            return [i for i in body if i[0] not in skipped], len(skipped)
    raise SystemExit("no main loop found")


def mix(body: list[tuple[int, str, str]]) -> Counter[str]:
    c: Counter[str] = Counter()
    for _, op, _ in body:
        if op == "NOP":
            continue
        c[next((k for k, prefixes in KINDS.items() if op.startswith(prefixes)), "other")] += 1
    return c


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "fa4").mkdir()
        fa4 = next(iter(functions(fa4_cubin(out / "fa4")).values()))
        ours = next(v for k, v in functions(ours_cubin(out)).items() if SHIPPED in k)
    rows = {}
    for name, code in (("ltx-kernels", ours), ("flash-attn-4", fa4)):
        body, skipped = main_loop(code)
        rows[name] = (mix(body), len([i for i in body if i[1] != "NOP"]), skipped)
    print(f"{'main loop, a 128-token tile':34} {'ltx-kernels':>12} {'flash-attn-4':>13}")
    for kind in [*KINDS, "other"]:
        print(f"{kind:34} {rows['ltx-kernels'][0][kind]:12} {rows['flash-attn-4'][0][kind]:13}")
    print(f"{'all (no NOPs)':34} {rows['ltx-kernels'][1]:12} {rows['flash-attn-4'][1]:13}")
    print(f"{'branched over but on the last tile':34} {rows['ltx-kernels'][2]:12} {rows['flash-attn-4'][2]:13}")


if __name__ == "__main__":
    main()
