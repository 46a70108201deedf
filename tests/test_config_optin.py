"""Model authors opt in through config.json (`hub_kernels`); users get the author's kernels with one call.

Scenarios: an author declares kernels and saves; a user loads and kernelizes, gets the same outputs, and
saving again keeps the entry; a broken entry (missing repo or layer, malformed) warns and keeps the
original layer; a config cannot grant trust; kernels mapped in code take precedence."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from ltx_tiny import TINY_CONFIG, ltx_inputs, publish_ltx, tiny_ltx

import hubkernels.integrations as hki
from hubkernels.integrations.config import ConfigEntryError, declare_hub_kernels
from hubkernels.layers import LocalLayerRepository, kernelized_layers, use_kernel_mapping

REPO = "hubkernels/ltx-kernels"
RMSNORM_ENTRY = {"RMSNorm": {"repo_id": REPO, "layer": "LlamaRMSNorm", "version": 1}}
IDS = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )


def author_saves(tmp_path, entries) -> "object":
    """An author's tiny Llama with `entries` declared, saved to tmp_path; returns the plain reloaded model."""
    from transformers import LlamaForCausalLM

    model = llama()
    declare_hub_kernels(model, entries)
    model.save_pretrained(tmp_path)
    return LlamaForCausalLM.from_pretrained(tmp_path).eval()


def kinds(model) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in kernelized_layers(model).values():
        out[layer.__name__] = out.get(layer.__name__, 0) + 1
    return out


def test_author_declares_user_gets_the_kernels_and_save_keeps_the_entry(tmp_path, hub, ltx_build):
    from transformers import LlamaForCausalLM

    publish_ltx(ltx_build.path, REPO)
    plain = author_saves(tmp_path / "author", RMSNORM_ENTRY)
    assert json.loads((tmp_path / "author" / "config.json").read_text())["hub_kernels"] == RMSNORM_ENTRY
    model = hki.from_pretrained(LlamaForCausalLM, tmp_path / "author")
    assert kinds(model) == {"LlamaRMSNorm": 5}
    with torch.no_grad():
        torch.testing.assert_close(model(IDS).logits, plain(IDS).logits, rtol=1e-4, atol=1e-4)
    model.save_pretrained(tmp_path / "user")
    assert json.loads((tmp_path / "user" / "config.json").read_text())["hub_kernels"] == RMSNORM_ENTRY
    # Loading without the helper and kernelizing later reads the same entry.
    again = LlamaForCausalLM.from_pretrained(tmp_path / "user").eval()
    hki.kernelize(again)
    assert kinds(again) == {"LlamaRMSNorm": 5}


def test_a_diffusers_author_names_classes_exactly(tmp_path, hub, ltx_build):
    from diffusers import LTXVideoTransformer3DModel

    publish_ltx(ltx_build.path, REPO)
    entries = {
        "diffusers.models.normalization.RMSNorm": {"repo_id": REPO, "layer": "RMSNorm", "version": 1},
        "torch.nn.modules.normalization.RMSNorm": {"repo_id": REPO, "layer": "TorchRMSNorm", "version": 1},
        "diffusers.models.activations.GELU": {
            "repo_id": REPO,
            "layer": "DiffusersGELU",
            "version": 1,
            "devices": ["cpu", "cuda"],
        },
    }
    model = tiny_ltx()
    declare_hub_kernels(model, entries)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["_hub_kernels"] == entries
    inputs = ltx_inputs(per_token_timesteps=True)
    with torch.no_grad():
        ref = LTXVideoTransformer3DModel.from_pretrained(tmp_path)(**inputs)[0]
        model = hki.from_pretrained(LTXVideoTransformer3DModel, tmp_path)
        out = model(**inputs)[0]
    layers = TINY_CONFIG["num_layers"]
    assert kinds(model) == {"RMSNorm": 2 * layers, "TorchRMSNorm": 4 * layers, "DiffusersGELU": layers}
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "entry, expect",
    [
        ({"repo_id": "hubkernels/no-such-kernel", "layer": "LlamaRMSNorm", "version": 1}, "no-such-kernel"),
        ({"repo_id": REPO, "layer": "NoSuchLayer", "version": 1}, "NoSuchLayer"),
        ({"repo_id": REPO, "layer": "LlamaRMSNorm", "version": 7}, "LayerRepository"),
    ],
    ids=["missing-repo", "missing-layer", "missing-version"],
)
def test_a_broken_entry_warns_and_keeps_the_original_layer(entry, expect, tmp_path, hub, ltx_build, caplog):
    publish_ltx(ltx_build.path, REPO)
    model = author_saves(tmp_path, {"RMSNorm": entry})
    with torch.no_grad():
        ref = model(IDS).logits
        with caplog.at_level(logging.WARNING, logger="hubkernels"):
            hki.kernelize(model)
        assert kernelized_layers(model) == {}
        assert torch.equal(model(IDS).logits, ref)
    assert "keeping the original layer" in caplog.text and expect in caplog.text


def test_a_malformed_entry_in_config_json_warns(tmp_path, caplog):
    from transformers import LlamaForCausalLM

    llama().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["hub_kernels"] = {"RMSNorm": {"repo_id": REPO, "layer": "LlamaRMSNorm"}}  # no version or revision
    (tmp_path / "config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.WARNING, logger="hubkernels"):
        model = hki.from_pretrained(LlamaForCausalLM, tmp_path)
    assert kernelized_layers(model) == {}
    assert 'exactly one of "version"' in caplog.text


def test_a_config_cannot_grant_trust(tmp_path, hub, ltx_build, caplog):
    from transformers import LlamaForCausalLM

    publish_ltx(ltx_build.path, "someone/ltx-kernels")  # an org the Hub does not flag as trusted
    author_saves(tmp_path, {"RMSNorm": {"repo_id": "someone/ltx-kernels", "layer": "LlamaRMSNorm", "version": 1}})
    with caplog.at_level(logging.WARNING, logger="hubkernels"):
        model = hki.from_pretrained(LlamaForCausalLM, tmp_path)
    assert kernelized_layers(model) == {} and "UntrustedKernelError" in caplog.text
    model = hki.from_pretrained(LlamaForCausalLM, tmp_path, kernel_trust_remote_code=["someone"])
    assert kinds(model) == {"LlamaRMSNorm": 5}
    with pytest.raises(ConfigEntryError, match="user's decision"):
        declare_hub_kernels(
            llama(), {"RMSNorm": {"repo_id": REPO, "layer": "LlamaRMSNorm", "version": 1, "trust_remote_code": True}}
        )


def test_a_mapping_registered_in_code_takes_precedence(tmp_path, ltx_build, caplog):
    model = author_saves(tmp_path, {"RMSNorm": {"repo_id": "hubkernels/no-such-kernel", "layer": "X", "version": 1}})
    root = ltx_build.path.parent.parent
    with use_kernel_mapping({"RMSNorm": {"cpu": LocalLayerRepository(root, layer_name="LlamaRMSNorm")}}):
        with caplog.at_level(logging.WARNING, logger="hubkernels"):
            hki.kernelize(model)
    assert kinds(model) == {"LlamaRMSNorm": 5}
    assert "no-such-kernel" not in caplog.text  # the config entry was never tried


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"repo_id": REPO, "layer": "L", "version": 1, "revision": "main"}, 'exactly one of "version"'),
        ({"repo_id": "ltx-kernels", "layer": "L", "version": 1}, '"repo_id" must be "org/name"'),
        ({"repo_id": REPO, "layer": "L", "version": 1, "device": "cuda"}, "unknown fields"),
        ({"repo_id": REPO, "layer": "L", "version": 1, "devices": ["gpu"]}, '"devices" must be'),
        ({"repo_id": REPO, "layer": "L", "version": "1"}, '"version" must be a non-negative integer'),
    ],
)
def test_declare_checks_entries_and_says_what_to_fix(entry, message):
    with pytest.raises(ConfigEntryError, match=message):
        declare_hub_kernels(llama(), {"RMSNorm": entry})
