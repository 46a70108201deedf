"""hubkernels.integrations.diffusers on a small LTX-Video transformer (hidden 128, 2 blocks) and a tiny
LTXPipeline: same outputs as diffusers (fp32 and bf16, text-to-video and per-token timesteps), the
expected modules replaced, the kernels actually running, torch.compile without graph breaks (and
without recomputing the RoPE tables per block), training mode, attention backends, hooks added after
kernelize, and undoing it all."""

from __future__ import annotations

import ast
import functools

import pytest
import torch
from ltx_tiny import TINY_CONFIG, expected_replacements, ltx_inputs, publish_ltx, tiny_ltx

from hubkernels.integrations import diffusers as hd
from hubkernels.layers import Mode, kernelized_layers

LAYERS = TINY_CONFIG["num_layers"]


def backend_name(processor) -> str:
    backend = processor._attention_backend
    return getattr(backend, "value", backend)


def op_calls(fn) -> dict[str, int]:
    """How many times each ltx_kernels op ran during fn() (from the profiler's dispatcher records)."""
    with torch.profiler.profile() as prof:
        fn()
    return {e.key.split("::")[-1]: e.count for e in prof.key_averages() if "ltx_kernels" in e.key and "::" in e.key}


def kernelized_eager_and_compiled(model, inputs, ltx) -> tuple:
    """(diffusers' output, then the kernelized model's output and {op: calls} eagerly and compiled whole, with
    fullgraph so any graph break is an error), outputs in float32. Kernelizes the model for inference + compile."""
    with torch.no_grad():
        ref = model(**inputs)[0].float()
        hd.kernelize(model, kernel=ltx, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        eager_calls = op_calls(lambda: model(**inputs))
        eager = model(**inputs)[0].float()
        torch._dynamo.reset()
        compiled_model = torch.compile(model, fullgraph=True)
        compiled = compiled_model(**inputs)[0].float()
        compiled_calls = op_calls(lambda: compiled_model(**inputs))
    return ref, eager, eager_calls, compiled, compiled_calls


# The attention prologue's RoPE inputs: diffusers' cos/sin tables, or token positions from which the
# kernel computes the angles (the CUDA default, the kernel's layers.ROPE_POSITIONS_DEVICES; forced here on the CPU).
ROPE_OPS = {"tables": ("qk_rms_norm_rope", "rope_tables"), "positions": ("qk_rms_norm_rope_grid", "rope_positions")}


@pytest.fixture(params=sorted(ROPE_OPS))
def rope_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, ltx) -> str:
    if request.param == "positions":
        monkeypatch.setattr(ltx.layers, "ROPE_POSITIONS_DEVICES", frozenset({"cpu", "cuda"}))
    return request.param


@pytest.mark.parametrize("per_token", [False, True], ids=["t2v", "per-token-timesteps"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernelized_ltx_matches_diffusers(ltx, dtype, per_token, rope_mode):
    model = tiny_ltx(dtype=dtype)
    inputs = ltx_inputs(per_token_timesteps=per_token, dtype=dtype)
    with torch.no_grad():
        ref = model(**inputs)[0]
        assert hd.kernelize(model, kernel=ltx) is model
        out = model(**inputs)[0]
    assert model._hubkernels_replaced == expected_replacements(LAYERS)
    if dtype == torch.float32:
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        return
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)
    # And no less accurate than diffusers' own bf16 forward, measured against the same model in fp64.
    with torch.no_grad():
        truth = tiny_ltx(dtype=torch.float64)(**ltx_inputs(per_token_timesteps=per_token, dtype=torch.float64))[0]
    assert (out.double() - truth).norm() <= 1.2 * (ref.double() - truth).norm()


def test_the_kernels_run_where_expected(ltx, rope_mode):
    prologue, rope_inputs = ROPE_OPS[rope_mode]
    model = tiny_ltx()
    inputs = ltx_inputs(per_token_timesteps=True)
    hd.kernelize(model, kernel=ltx)
    with torch.no_grad():
        calls = op_calls(lambda: model(**inputs))
    assert calls == {
        "rms_norm_modulate": 1,  # the first block's norm1 + AdaLN
        # cross-attention residual + norm2 AdaLN in every block; feed-forward residual + the next
        # block's norm1 AdaLN between blocks
        "add_rms_norm_modulate": LAYERS + LAYERS - 1,
        "gated_residual": LAYERS + 1,  # attn1 residuals, and the last block's feed-forward residual
        prologue: LAYERS,  # self-attention prologue (q/k norm + RoPE)
        "rms_norm": 2 * LAYERS,  # cross-attention q/k norms (no RoPE), as kernelized torch.nn.RMSNorm
        "gelu_tanh": LAYERS + 1,  # feed-forwards + caption projection
        rope_inputs: 1,  # the RoPE tables, or positions and frequencies, once per forward
    }
    # The hand-over between blocks is consumed within the forward: nothing stays on the blocks.
    assert all(getattr(b, "_hubkernels_pending_adaln", None) is None for b in model.transformer_blocks)
    hd.unkernelize(model)
    assert not any("_hubkernels_next_block" in vars(b) for b in model.transformer_blocks)


def test_torch_compile_fullgraph_of_the_kernelized_transformer(ltx, rope_mode):
    prologue, rope_inputs = ROPE_OPS[rope_mode]
    model = tiny_ltx()
    ref, eager, eager_calls, out, calls = kernelized_eager_and_compiled(
        model, ltx_inputs(per_token_timesteps=True), ltx
    )
    assert model._hubkernels_replaced == expected_replacements(LAYERS)
    assert calls == eager_calls  # compiled, the same kernels, as often
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert calls[prologue] == LAYERS and calls["rms_norm_modulate"] == 1  # still our kernels
    assert calls["add_rms_norm_modulate"] == 2 * LAYERS - 1 and "residual_add" not in calls  # residuals, fused
    assert calls[rope_inputs] == 1  # RoPE inputs once


def _rope_args(code: str, prologue: str) -> list[tuple[str, str]]:
    """The buffers passed as the RoPE inputs (cos/sin, or positions/frequencies) to each `prologue` op
    call of Inductor's output code."""

    def buffer(arg: ast.expr) -> str:  # `buf7` or `reinterpret_tensor(buf7, ...)` -> "buf7"
        return buffer(arg.args[0]) if isinstance(arg, ast.Call) else ast.unparse(arg)

    return [
        (buffer(node.args[4]), buffer(node.args[5]))
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(f".{prologue}.default")
    ]


def test_regional_compile_of_the_kernelized_blocks(ltx):
    """diffusers' compile_repeated_blocks (the blocks share compiled graphs): the hand-over between
    blocks crosses the graphs and stays in use, a second input reuses the graphs without picking up the
    first one's hand-over, and the depth adds no graphs (first, middle and last block: three)."""
    from torch._dynamo.utils import counters

    layers = 4
    config = dict(TINY_CONFIG, num_layers=layers)
    model = tiny_ltx(config)
    first, second = ltx_inputs(config, seed=1), ltx_inputs(config, seed=2)
    with torch.no_grad():
        ref_first, ref_second = model(**first)[0], model(**second)[0]
        hd.kernelize(model, kernel=ltx, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        torch._dynamo.reset()
        counters.clear()
        model.compile_repeated_blocks(fullgraph=True)
        out_first = model(**first)[0]
        out_second = model(**second)[0]
        calls = op_calls(lambda: model(**first))
    # Inductor's own fp32 code differs from eager by ~1e-5 here; a stale hand-over would be off by O(1).
    torch.testing.assert_close(out_first, ref_first, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out_second, ref_second, rtol=1e-4, atol=1e-4)
    assert calls["add_rms_norm_modulate"] == 2 * layers - 1 and calls["rms_norm_modulate"] == 1
    assert counters["stats"]["unique_graphs"] <= 3


def test_compiled_forward_computes_the_rope_inputs_once(ltx, rope_mode):
    """Inductor recomputes cheap pointwise results in front of every extern kernel that reads them; the
    RoPE positions and frequencies come from one opaque op instead, so every block's
    qk_rms_norm_rope_grid reads the same two buffers. force_pointwise_cat lowers diffusers'
    concatenations as Inductor does on CUDA (on CPU they are buffers of their own, which would hide a
    recomputation)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    config = dict(TINY_CONFIG, num_layers=4)
    model = tiny_ltx(config)
    inputs = ltx_inputs(config)
    with torch.no_grad(), inductor_config.patch(force_pointwise_cat=True):
        ref = model(**inputs)[0]
        hd.kernelize(model, kernel=ltx, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        compiled = torch.compile(model, fullgraph=True)
        out, codes = run_and_get_code(lambda: compiled(**inputs)[0])
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    prologue, rope_inputs = ROPE_OPS[rope_mode]
    rope = [args for code in codes for args in _rope_args(code, prologue)]
    assert len(rope) == 4, codes  # one fused q/k prologue per block
    assert len(set(rope)) == 1, rope  # all of them read the same position and frequency buffers
    assert sum(code.count(f".{rope_inputs}.default(") for code in codes) == 1


@pytest.mark.parametrize("dim", [128, 96, 11], ids=["pad2", "pad0", "pad5"])
def test_rope_tables_match_diffusers_bit_for_bit(ltx, dim, rope_mode):
    """Text-to-video grids (rope_interpolation_scale as floats, as a tensor, or none) and the video_coords
    of LTXConditionPipeline, with and without padding channels (dim % 6)."""
    from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed

    rope = LTXVideoRotaryPosEmbed(dim=dim)
    kernelized = ltx.layers.LTXVideoRotaryPosEmbed
    frames, height, width = 3, 4, 5
    hidden = torch.zeros(2, frames * height * width, dim)
    coords = torch.rand(2, 3, hidden.shape[1], generator=torch.Generator().manual_seed(0)) * 20
    calls = [
        dict(num_frames=frames, height=height, width=width, rope_interpolation_scale=scale)
        for scale in ((8 / 25, 32, 32), (torch.tensor(0.32), 32.0, 32.0), None)
    ] + [dict(video_coords=coords)]
    for kwargs in calls:
        expected = rope(hidden, **kwargs)
        got = kernelized.forward(rope, hidden, **kwargs)
        assert isinstance(got, ltx.layers.LTXRopePositions) == (rope_mode == "positions")
        for g, e in zip(got.tables() if rope_mode == "positions" else got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape and g.is_contiguous()
            assert torch.equal(g, e), kwargs


def test_video_coords_eager_and_compiled_match_diffusers(ltx):
    """LTXConditionPipeline passes video_coords instead of a frame/height/width grid."""
    model = tiny_ltx()
    inputs = ltx_inputs(per_token_timesteps=True)
    tokens = inputs["hidden_states"].shape[1]
    inputs["video_coords"] = torch.rand(2, 3, tokens, generator=torch.Generator().manual_seed(2)) * 30
    with torch.no_grad():
        ref = model(**inputs)[0]
        hd.kernelize(model, kernel=ltx, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        eager = model(**inputs)[0]
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True)(**inputs)[0]
    torch.testing.assert_close(eager, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(compiled, ref, rtol=1e-5, atol=1e-5)


def test_training_mode_keeps_what_has_no_backward_and_gradients_match(ltx):
    reference, model = tiny_ltx().train(), tiny_ltx().train()
    inputs = ltx_inputs(per_token_timesteps=True)
    hd.kernelize(model, kernel=ltx, mode=Mode.TRAINING)
    expected = expected_replacements(LAYERS)
    del expected["LTXVideoAttnProcessor"]  # qk_rms_norm_rope has no backward: diffusers' processor stays
    del expected["LTXVideoRotaryPosEmbed"]  # and with it diffusers' RoPE tables
    assert model._hubkernels_replaced == expected
    grads = []
    for m in (reference, model):
        m(**inputs)[0].square().mean().backward()
        grads.append({n: p.grad for n, p in m.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-5, msg=name)


def test_attention_backend_is_kept_and_unkernelize_restores_diffusers(ltx):
    from diffusers.models.transformers.transformer_ltx import LTXVideoAttnProcessor

    model = tiny_ltx()
    inputs = ltx_inputs()
    model.set_attention_backend("_native_math")
    with torch.no_grad():
        ref = model(**inputs)[0]
        hd.kernelize(model, kernel=ltx)
        processors = [m.processor for m in model.modules() if hasattr(m, "processor")]
        assert {type(p) for p in processors} == {ltx.layers.LTXVideoAttnProcessor}
        assert {backend_name(p) for p in processors} == {"_native_math"}
        torch.testing.assert_close(model(**inputs)[0], ref, rtol=1e-5, atol=1e-5)
        model.set_attention_backend("native")  # diffusers can still switch the backend of our processors
        assert {backend_name(p) for p in processors} == {"native"}
        model.set_attention_backend("_native_math")
        hd.unkernelize(model)
        assert kernelized_layers(model) == {} and model._hubkernels_replaced == {}
        restored = [m.processor for m in model.modules() if hasattr(m, "processor")]
        assert {type(p) for p in restored} == {LTXVideoAttnProcessor}
        assert {backend_name(p) for p in restored} == {"_native_math"}
        assert torch.equal(model(**inputs)[0], ref)  # exactly diffusers again


def test_a_kernelized_model_can_be_deep_copied(ltx):
    """EMA copies, pipelines cloning components: deepcopy keeps the kernels and the copy is independent."""
    import copy

    model = tiny_ltx()
    inputs = ltx_inputs()
    hd.kernelize(model, kernel=ltx)
    clone = copy.deepcopy(model)
    assert set(kernelized_layers(clone)) == set(kernelized_layers(model))
    with torch.no_grad():
        assert torch.equal(clone(**inputs)[0], model(**inputs)[0])
        calls = op_calls(lambda: clone(**inputs))
        clone.transformer_blocks[0].ff.net[2].weight.zero_()
        assert not torch.equal(clone(**inputs)[0], model(**inputs)[0])  # bound to the copy's own weights
    assert calls.get("qk_rms_norm_rope", 0) + calls.get("qk_rms_norm_rope_grid", 0) == LAYERS


def test_a_block_ignores_a_hand_over_for_another_tensor(ltx):
    """The fused residual + AdaLN hand-over between blocks is used only for the very hidden_states (and
    temb) it was made from: a block called on its own, or after a hook swapped the tensor, recomputes."""
    model = tiny_ltx()
    inputs = ltx_inputs()
    block = model.transformer_blocks[1]
    captured: dict = {}
    hook = block.register_forward_pre_hook(lambda module, args, kwargs: captured.update(kwargs), with_kwargs=True)
    with torch.no_grad():
        model(**inputs)
        hook.remove()
        ref = block(**captured)
        hd.kernelize(model, kernel=ltx)
        stale = torch.full_like(captured["hidden_states"], 7.0)
        block._hubkernels_pending_adaln = (stale, captured["temb"], stale)
        out = block(**{**captured, "hidden_states": captured["hidden_states"].clone()})
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert block._hubkernels_pending_adaln is None  # consumed (and dropped) by the call


def test_custom_processors_and_excluded_kinds_are_left_alone(ltx, rope_mode):
    from diffusers.models.transformers.transformer_ltx import LTXVideoAttnProcessor

    class MyProcessor(LTXVideoAttnProcessor):
        pass

    model = tiny_ltx()
    inputs = ltx_inputs()
    model.transformer_blocks[0].attn1.set_processor(MyProcessor())
    with torch.no_grad():
        ref = model(**inputs)[0]
    hd.kernelize(model, kernel=ltx, exclude=["LTXVideoTransformerBlock"])
    expected = expected_replacements(LAYERS)
    del expected["LTXVideoTransformerBlock"]
    expected["LTXVideoAttnProcessor"] -= 1
    if rope_mode == "positions":
        # The kernelized RoPE module then hands positions, not (cos, sin), to the fused processors only:
        # with a custom processor in the model, diffusers' RoPE module stays.
        del expected["LTXVideoRotaryPosEmbed"]
    assert model._hubkernels_replaced == expected
    assert type(model.transformer_blocks[0].attn1.processor) is MyProcessor
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs)[0], ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="Unknown kinds"):
        hd.kernelize(model, kernel=ltx, exclude=["Attention"])
    # The RoPE tables serve the fused attention prologue: leaving the processor leaves them too.
    hd.kernelize(model, kernel=ltx, exclude=["LTXVideoAttnProcessor"])
    assert "LTXVideoRotaryPosEmbed" not in model._hubkernels_replaced
    assert not any(isinstance(p, ltx.layers.LTXVideoAttnProcessor) for p in model.attn_processors.values())


def _add_hook(module: torch.nn.Module, calls: list) -> None:
    """What accelerate's add_hook_to_module does (enable_model_cpu_offload, device_map offload): keep the
    current forward in `_old_forward` and wrap it with pre/post hooks."""
    module._old_forward = module.forward

    def new_forward(module, *args, **kwargs):
        calls.append(type(module).__name__)
        return module._old_forward(*args, **kwargs)

    module.forward = functools.update_wrapper(functools.partial(new_forward, module), module._old_forward)


def test_kernelize_before_offload_hooks_keeps_working(ltx):
    model = tiny_ltx()
    inputs = ltx_inputs(per_token_timesteps=True)
    with torch.no_grad():
        ref = model(**inputs)[0]
        hd.kernelize(model, kernel=ltx)
        calls: list = []
        _add_hook(model, calls)  # model offload hooks the top module ...
        for block in model.transformer_blocks:  # ... sequential/group offload hooks the submodules
            _add_hook(block, calls)
        ops = op_calls(lambda: model(**inputs))
        out = model(**inputs)[0]
        # The kernelized block forward runs under the hook, the cross-block hand-over included.
        assert ops["add_rms_norm_modulate"] == 2 * LAYERS - 1
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        assert calls.count("LTXVideoTransformerBlock") == 2 * LAYERS
        # kernelize again (another mode) with the hooks in place: the hooks stay, kernels swap underneath
        hd.kernelize(model, kernel=ltx, mode=Mode.TRAINING)
        assert model.transformer_blocks[0].forward.func.__name__ == "new_forward"
        torch.testing.assert_close(model(**inputs)[0], ref, rtol=1e-5, atol=1e-5)


def tiny_pipeline():
    """A real LTXPipeline with tiny random components (no downloads; prompts are given as embeddings)."""
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    vae = AutoencoderKLLTXVideo(
        in_channels=3,
        out_channels=3,
        latent_channels=8,
        block_out_channels=(8, 8, 8, 8),
        decoder_block_out_channels=(8, 8, 8, 8),
        layers_per_block=(1, 1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1, 1),
        spatio_temporal_scaling=(True, True, False, False),
        decoder_spatio_temporal_scaling=(True, True, False, False),
        decoder_inject_noise=(False, False, False, False, False),
        upsample_residual=(False, False, False, False),
        upsample_factor=(1, 1, 1, 1),
        timestep_conditioning=False,
        patch_size=1,
        patch_size_t=1,
        encoder_causal=True,
        decoder_causal=False,
    )
    text_encoder = T5EncoderModel(T5Config(vocab_size=32, d_model=64, d_kv=16, d_ff=64, num_layers=1, num_heads=4))
    return LTXPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=None,
        transformer=tiny_ltx(),
    )


def test_one_call_kernelizes_a_pipeline_from_a_local_build(ltx_build):
    pipe = tiny_pipeline()
    embeds = torch.randn(1, 16, TINY_CONFIG["caption_channels"], generator=torch.Generator().manual_seed(3))
    mask = torch.ones(1, 16)
    kwargs = dict(
        prompt_embeds=embeds,
        prompt_attention_mask=mask,
        negative_prompt_embeds=torch.zeros_like(embeds),
        negative_prompt_attention_mask=mask,
        height=32,
        width=32,
        num_frames=9,
        num_inference_steps=2,
        guidance_scale=3.0,
        output_type="pt",
    )
    ref = pipe(generator=torch.Generator().manual_seed(0), **kwargs).frames
    assert hd.kernelize(pipe, path=ltx_build.path) is pipe
    assert pipe.transformer._hubkernels_replaced == expected_replacements(LAYERS)
    assert pipe._hubkernels_replaced["RMSNorm"] > 2 * LAYERS  # the VAE's RMSNorms too
    out = pipe(generator=torch.Generator().manual_seed(0), **kwargs).frames
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_exactly_one_kernel_source_is_required(ltx):
    with pytest.raises(ValueError, match="exactly one of repo_id"):
        hd.kernelize(tiny_ltx())
    with pytest.raises(ValueError, match="got repo_id, kernel"):
        hd.kernelize(tiny_ltx(), repo_id="hubkernels/ltx-kernels", kernel=ltx)
    with pytest.raises(TypeError, match="Diffusers model"):
        hd.kernelize(object(), kernel=ltx)


def test_kernelize_from_the_hub_by_repo_id(hub, ltx_build):
    repo_id = publish_ltx(ltx_build.path, "hubkernels/ltx-kernels")
    model = tiny_ltx()
    inputs = ltx_inputs()
    with torch.no_grad():
        ref = model(**inputs)[0]
        hd.kernelize(model, repo_id=repo_id, version=1)
        out = model(**inputs)[0]
    assert model._hubkernels_replaced == expected_replacements(LAYERS)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_on_an_h100_or_h200_ltx_self_attention_runs_the_kernels_attention(ltx):
    """Head dim 64 in bf16 on sm_90: the kernelized processor's self-attention is ltx_kernels.attention, eager
    and compiled whole; with diffusers' attention backend chosen ("native"), torch's SDPA again."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the attention kernel is built for sm_90a (H100, H200)")
    config = dict(TINY_CONFIG, attention_head_dim=64, cross_attention_dim=4 * 64)  # LTX: text width = inner width
    model = tiny_ltx(config, dtype=torch.bfloat16, device="cuda")
    inputs = ltx_inputs(config, tokens=(4, 8, 12), dtype=torch.bfloat16, device="cuda")
    ref, eager, calls, compiled, compiled_calls = kernelized_eager_and_compiled(model, inputs, ltx)
    with torch.no_grad():
        model.set_attention_backend("native")
        native_calls = op_calls(lambda: model(**inputs))
        model.reset_attention_backend()
    assert calls["attention"] == compiled_calls["attention"] == LAYERS  # self-attention; cross-attention: SDPA
    assert "attention" not in native_calls
    torch.testing.assert_close(eager, ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(compiled, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("per_token", [False, True], ids=["t2v", "per-token-timesteps"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernelized_ltx_on_cuda_matches_diffusers_eager_and_compiled(ltx, dtype, per_token):
    model = tiny_ltx(dtype=dtype, device="cuda")
    inputs = ltx_inputs(per_token_timesteps=per_token, dtype=dtype, device="cuda")
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    ref, eager, calls, compiled, compiled_calls = kernelized_eager_and_compiled(model, inputs, ltx)
    assert model._hubkernels_replaced == expected_replacements(LAYERS)
    assert calls["qk_rms_norm_rope_grid"] == LAYERS and calls["gated_residual"] == LAYERS + 1
    # Compiled, the same kernels run: the cross-block residual + AdaLN hand-over too.
    for op in ("qk_rms_norm_rope_grid", "gated_residual", "add_rms_norm_modulate", "rms_norm_modulate"):
        assert compiled_calls[op] == calls[op], (op, compiled_calls, calls)
    torch.testing.assert_close(eager, ref, **tol)
    torch.testing.assert_close(compiled, ref, **tol)
