"""The LTX-Video layers ship in the kernel: HF `kernels` (0.17.2), given a mapping to this checkout's build
(`LocalLayerRepository`), runs the fused block on a small LTX-Video transformer, with the same output as
hubkernels' own kernelize. HF `kernels` runs in a process of its own (it marks diffusers' block class)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from ltx_tiny import TINY_CONFIG, ltx_inputs, tiny_ltx

from hubkernels.integrations import diffusers as hd

ROOT = Path(__file__).resolve().parents[2]
LAYERS = TINY_CONFIG["num_layers"]

_HF_KERNELS = """
    import json, sys, torch, kernels
    from pathlib import Path
    from diffusers.models.transformers.transformer_ltx import LTXVideoTransformerBlock
    from ltx_tiny import ltx_inputs, tiny_ltx

    kernels.replace_kernel_forward_from_hub(LTXVideoTransformerBlock, "LTXVideoTransformerBlock")
    model, inputs = tiny_ltx(), ltx_inputs(per_token_timesteps=True)
    repo = kernels.LocalLayerRepository(repo_path=Path({root!r}), layer_name="LTXVideoTransformerBlock")
    with kernels.use_kernel_mapping({{"LTXVideoTransformerBlock": {{"cpu": repo}}}}):
        kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cpu")
    with torch.no_grad(), torch.profiler.profile() as prof:
        out = model(**inputs)[0]
    torch.save(out, {out!r})
    calls = {{e.key.split("::")[-1]: e.count for e in prof.key_averages() if "ltx_kernels" in e.key}}
    Path({calls!r}).write_text(json.dumps(calls))
"""


def test_hf_kernels_runs_our_fused_ltx_block_with_our_output(ltx, ltx_build, tmp_path):
    out_path, calls_path = tmp_path / "out.pt", tmp_path / "calls.json"
    code = textwrap.dedent(_HF_KERNELS.format(root=str(ROOT), out=str(out_path), calls=str(calls_path)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Each block ran the kernel's block forward: AdaLN, gated residual and the fused residual + AdaLN.
    assert json.loads(calls_path.read_text()) == {
        "rms_norm_modulate": LAYERS,
        "gated_residual": 2 * LAYERS,
        "add_rms_norm_modulate": LAYERS,
    }
    model, inputs = tiny_ltx(), ltx_inputs(per_token_timesteps=True)
    with torch.no_grad():
        reference = model(**inputs)[0]
        hd.kernelize_diffusers(
            model, kernel=ltx, exclude=[k for k in hd.declared_kinds(ltx) if k != "LTXVideoTransformerBlock"]
        )
        ours = model(**inputs)[0]
    assert model._hubkernels_replaced == {"LTXVideoTransformerBlock": LAYERS}
    theirs = torch.load(out_path)
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(theirs, reference, rtol=1e-5, atol=1e-5)
