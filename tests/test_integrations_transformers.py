"""Transformers models with ltx-kernels from the (local) Hub: tiny random Llama and Qwen3, saved with
save_pretrained and loaded back with from_pretrained, kernelized (1) by `hubkernels.kernelize` as they
are and (2) through transformers' own `use_kernels=True` path with HF `kernels`."""

from __future__ import annotations

import pytest
import torch
from ltx_tiny import publish_ltx

import hubkernels.integrations as hki
from hubkernels.integrations.transformers import ltx_kernels_mapping
from hubkernels.layers import Mode, kernelized_layers, use_kernel_mapping

REPO = "hubkernels/ltx-kernels"


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act="gelu_pytorch_tanh",
    )
    return LlamaForCausalLM, LlamaForCausalLM(config)


def tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    return Qwen3ForCausalLM, Qwen3ForCausalLM(config)


# Per model: its builder, and what kernelize replaces (layer name -> count). Llama: input/post-attention norms
# per layer + the final norm, and the GELU-tanh MLP activation per layer; Qwen3 adds per-head q/k norms.
MODELS = {
    "llama": (tiny_llama, {"LlamaRMSNorm": 5, "GeluTanh": 2}),
    "qwen3": (tiny_qwen3, {"LlamaRMSNorm": 9}),
}
IDS = torch.randint(0, 64, (2, 11), generator=torch.Generator().manual_seed(0))


def saved(name, tmp_path):
    """The tiny model saved with save_pretrained and loaded back with from_pretrained, plus its class."""
    build, _ = MODELS[name]
    cls, model = build()
    model.save_pretrained(tmp_path)
    return cls, cls.from_pretrained(tmp_path).eval()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hubkernels_kernelize_takes_transformers_models_as_they_are(name, tmp_path, hub, ltx_build):
    publish_ltx(ltx_build.path, REPO)
    _, model = saved(name, tmp_path)
    with torch.no_grad():
        ref = model(IDS).logits
        with use_kernel_mapping(ltx_kernels_mapping(REPO, version=1)):
            assert hki.kernelize(model, mode=Mode.INFERENCE) is model
        with torch.profiler.profile() as prof:
            out = model(IDS).logits
    replaced: dict[str, int] = {}
    for layer in kernelized_layers(model).values():
        replaced[layer.__name__] = replaced.get(layer.__name__, 0) + 1
    assert replaced == MODELS[name][1]
    ran = {e.key.split("::")[-1]: e.count for e in prof.key_averages() if "ltx_kernels" in e.key}
    assert ran.get("rms_norm") == MODELS[name][1]["LlamaRMSNorm"]
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def _transformers_kernels_path() -> str | None:
    """Why transformers' own kernels path cannot run here, or None when it can."""
    import importlib.metadata

    import transformers
    from transformers.utils import import_utils

    if import_utils.is_kernels_available():
        return None
    try:
        installed = importlib.metadata.version("kernels")
    except importlib.metadata.PackageNotFoundError:
        return "HF kernels is not installed (pip install 'hubkernels[test]'): transformers' kernels path is off"
    return (
        f"transformers {transformers.__version__} wants kernels >= {import_utils.KERNELS_MIN_VERSION}, < "
        f"{import_utils.KERNELS_MAX_VERSION}; kernels {installed} is installed, so "
        "transformers disables its kernels integration (use_kernels=True raises)"
    )


@pytest.mark.parametrize("name", sorted(MODELS))
def test_transformers_use_kernels_loads_our_repo_through_hf_kernels(name, tmp_path, hub, ltx_build):
    reason = _transformers_kernels_path()
    if reason:
        pytest.skip(reason)
    import kernels

    publish_ltx(ltx_build.path, REPO)
    cls, model = saved(name, tmp_path)
    with torch.no_grad():
        ref = model(IDS).logits
    # On CPU, transformers' KernelConfig refuses the "cpu" device; a kernels mapping is the CPU route.
    mapping = {"RMSNorm": {"cpu": kernels.LayerRepository(REPO, layer_name="LlamaRMSNorm", version=1)}}
    with kernels.use_kernel_mapping(mapping):
        model = cls.from_pretrained(tmp_path, use_kernels=True).eval()
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    assert norms and all(
        m.forward.__func__.__qualname__ == "LlamaRMSNorm.forward" and m.forward.__func__.__module__.endswith(".layers")
        for m in norms
    )
    with torch.no_grad():
        torch.testing.assert_close(model(IDS).logits, ref, rtol=1e-4, atol=1e-4)


def test_hubkernels_kernelize_survives_train_and_eval_under_transformers_use_kernels(tmp_path, hub, ltx_build):
    reason = _transformers_kernels_path()
    if reason:
        pytest.skip(reason)
    publish_ltx(ltx_build.path, REPO)
    cls, model = saved("llama", tmp_path)
    with torch.no_grad():
        ref = model(IDS).logits
    model = cls.from_pretrained(tmp_path, use_kernels=True).eval()  # transformers' hooks, HF kernels' mapping
    with use_kernel_mapping(ltx_kernels_mapping(REPO, version=1)):
        hki.kernelize(model, mode=Mode.INFERENCE)
    model.train()
    model.eval()  # transformers re-runs HF kernels' kernelize on each switch
    with torch.no_grad(), torch.profiler.profile() as prof:
        out = model(IDS).logits
    ran = {e.key.split("::")[-1]: e.count for e in prof.key_averages() if "ltx_kernels" in e.key}
    assert ran.get("rms_norm") == MODELS["llama"][1]["LlamaRMSNorm"]  # 28dd25c: 0 calls
    assert sum(layer.__name__ == "LlamaRMSNorm" for layer in kernelized_layers(model).values()) == 5
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(MODELS))
def test_transformers_kernel_config_loads_our_repo(name, tmp_path, hub, ltx_build):
    reason = _transformers_kernels_path()
    if reason:
        pytest.skip(reason)
    from transformers import KernelConfig

    publish_ltx(ltx_build.path, REPO)
    cls, model = saved(name, tmp_path)
    ref_model = cls.from_pretrained(tmp_path, device_map="cuda").eval()
    # inherit_mapping=False: transformers' default mapping also names community repos (on CUDA, the rotary
    # embedding's kernels-community/rotary), which this local Hub does not host; only our entry is wanted.
    config = KernelConfig({"RMSNorm": f"{REPO}:LlamaRMSNorm"}, inherit_mapping=False)
    model = cls.from_pretrained(tmp_path, device_map="cuda", use_kernels=True, kernel_config=config).eval()
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    assert norms and all(m.forward.__func__.__qualname__ == "LlamaRMSNorm.forward" for m in norms)
    with torch.no_grad():
        torch.testing.assert_close(model(IDS.cuda()).logits, ref_model(IDS.cuda()).logits, rtol=1e-3, atol=1e-3)
