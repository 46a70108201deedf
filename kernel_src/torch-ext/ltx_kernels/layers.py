"""Drop-in forwards for the modules LTX-Video (and transformers models) use, for `kernelize`.

Each layer is stateless: it reads the attributes of the module it is bound to (with
``types.MethodType(Layer.forward, module)``) and matches that module's own forward. Where a module is
in a configuration the kernels do not cover (weight dtype different from the input, GELU without the
tanh approximation), the layer computes exactly what the original module computes, in eager torch.

The LTX-Video model code lives here too (the block forward with its cross-block hand-over, the RoPE
inputs and the attention processor with the fused prologue), so every variant ships it and HF
``kernels`` loads it as well. ``diffusers_mapping()`` says which diffusers module each layer replaces;
``hubkernels.integrations.diffusers`` reads it and knows no model itself. This package imports only
the standard library, torch and itself.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ._attention import attention, attention_on_kernel
from ._linear import linear_gelu_tanh
from ._ops import ops
from ._rope_tables import rope_positions, rope_tables

__all__ = [
    "DiffusersGELU",
    "GeluTanh",
    "LTXRopePositions",
    "LTXVideoAttnProcessor",
    "LTXVideoRotaryPosEmbed",
    "LTXVideoTransformerBlock",
    "LlamaRMSNorm",
    "RMSNorm",
    "TorchRMSNorm",
    "diffusers_mapping",
]


def _rms_normalize_fp32(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) in fp32, as the eager RMSNorm implementations compute it."""
    xf = x.to(torch.float32)
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    """``diffusers.models.normalization.RMSNorm``: uses ``eps``, ``weight`` (None without
    elementwise_affine) and ``bias`` (optional)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight: Optional[torch.Tensor] = self.weight
        bias: Optional[torch.Tensor] = getattr(self, "bias", None)
        if weight is not None and weight.dtype != hidden_states.dtype:
            # diffusers normalises in fp32, casts to a half-precision weight's dtype, then multiplies.
            out = hidden_states * torch.rsqrt(hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True) + self.eps)
            if weight.dtype in (torch.float16, torch.bfloat16):
                out = out.to(weight.dtype)
            out = out * weight
        else:
            out = ops.rms_norm(hidden_states.contiguous(), weight, float(self.eps))
        if bias is not None:
            out = out + bias
        return out


class TorchRMSNorm(nn.Module):
    """``torch.nn.RMSNorm``: uses ``normalized_shape``, ``eps`` (None = machine epsilon of the
    accumulation dtype, as torch does) and ``weight`` (None without elementwise_affine)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight: Optional[torch.Tensor] = self.weight
        if weight is not None and weight.dtype != x.dtype:
            return F.rms_norm(x, self.normalized_shape, weight, self.eps)
        eps = self.eps
        if eps is None:
            eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
        dims = len(self.normalized_shape)
        if dims == 1:
            return ops.rms_norm(x.contiguous(), weight, float(eps))
        # Normalising over several trailing dims = over one flattened dim.
        flat = x.contiguous().flatten(-dims)
        out = ops.rms_norm(flat, weight.flatten() if weight is not None else None, float(eps))
        return out.view(x.shape)


class LlamaRMSNorm(nn.Module):
    """transformers' ``LlamaRMSNorm`` family: ``weight * normalize(x)``, eps in ``variance_epsilon``."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight: torch.Tensor = self.weight
        if weight.dtype != hidden_states.dtype:
            input_dtype = hidden_states.dtype
            return weight * _rms_normalize_fp32(hidden_states, self.variance_epsilon).to(input_dtype)
        return ops.rms_norm(hidden_states.contiguous(), weight, float(self.variance_epsilon))


class GeluTanh(nn.Module):
    """GELU with the tanh approximation: ``torch.nn.GELU(approximate="tanh")``, transformers'
    ``GELUTanh`` / ``NewGELUActivation``. A ``torch.nn.GELU`` with another ``approximate`` keeps
    torch's GELU."""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        approximate = getattr(self, "approximate", "tanh")
        if approximate != "tanh":
            return F.gelu(input, approximate=approximate)
        return ops.gelu_tanh(input.contiguous())


class DiffusersGELU(nn.Module):
    """``diffusers.models.activations.GELU``: ``proj`` (Linear) then GELU; the kernel when
    ``approximate == "tanh"`` (LTX-Video's feed-forward), torch's GELU otherwise."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        proj = self.proj
        if (
            self.approximate == "tanh"
            and hidden_states.is_cuda
            and proj.bias is not None
            and hidden_states.dtype in (torch.bfloat16, torch.float16)
            and not torch.is_grad_enabled()
        ):
            # Inference on CUDA: bias + tanh-GELU run in the matmul's cuBLASLt epilogue, so the [.., 4D]
            # activation is written once instead of written, read and written again (LTX: ~100 us a block).
            return linear_gelu_tanh(hidden_states, proj.weight, proj.bias)
        hidden_states = proj(hidden_states)
        if self.approximate != "tanh":
            return F.gelu(hidden_states, approximate=self.approximate)
        return ops.gelu_tanh(hidden_states.contiguous())


# ---------------------------------------------------------------------------------------------------------
# LTX-Video (diffusers' transformer_ltx)

_LTX = "diffusers.models.transformers.transformer_ltx"

# A kernelized block hands the next one its AdaLN output. The integration links each block to the one after
# it (`NEXT_BLOCK`, a plain attribute, not a submodule); a block leaves (hidden_states, temb, normalised) on
# the next one (`PENDING`), which uses it only for that very hidden_states and temb, and clears it. It holds
# under torch.compile of the whole model and of each block (diffusers' compile_repeated_blocks).
NEXT_BLOCK = "_hubkernels_next_block"
PENDING = "_hubkernels_pending_adaln"

#: Device types on which the kernelized RoPE module hands positions to the fused prologue, which then
#: computes the angles in the kernel (half the bytes to read). On a CPU the sin/cos cost more than reading
#: tables computed once per forward, so there the module returns the tables.
ROPE_POSITIONS_DEVICES = frozenset({"cuda"})


def _adaln_rows(block: nn.Module, temb: torch.Tensor, dtype: torch.dtype, rows: int) -> tuple:
    """The block's first `rows` AdaLN rows (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp) in
    `dtype`. temb is [B, 1, 6D] or [B, S, 6D] (per-token timesteps); the rows are strided views of one tensor,
    which the kernels read in place."""
    table = block.scale_shift_table
    per_row = temb.reshape(temb.size(0), temb.size(1), table.shape[0], -1)[:, :, :rows]
    return (table[None, None, :rows].to(device=temb.device) + per_row).to(dtype).unbind(dim=2)


def _norm_weight(norm: nn.Module, dtype: torch.dtype) -> Optional[torch.Tensor]:
    return None if norm.weight is None else norm.weight.to(dtype)


class LTXVideoTransformerBlock(nn.Module):
    """``LTXVideoTransformerBlock``: AdaLN as ``rms_norm_modulate``, gated residuals as ``gated_residual``,
    the cross-attention residual with the feed-forward's AdaLN as one ``add_rms_norm_modulate``, and, when
    linked to a following kernelized block, the feed-forward's gated residual with that block's AdaLN."""

    has_backward = True
    can_torch_compile = True

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        temb: torch.Tensor,
        image_rotary_emb: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
        encoder_attention_mask: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        dtype = hidden_states.dtype
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = _adaln_rows(self, temb, dtype, 6)
        w1, w2 = _norm_weight(self.norm1, dtype), _norm_weight(self.norm2, dtype)

        pending = getattr(self, PENDING, None)
        if pending is not None:
            setattr(self, PENDING, None)
        if pending is not None and pending[0] is hidden_states and pending[1] is temb:
            norm_hidden_states = pending[2]  # the previous block's fused residual + this AdaLN
        else:
            norm_hidden_states = ops.rms_norm_modulate(hidden_states, scale_msa, shift_msa, w1, float(self.norm1.eps))
        attn_hidden_states = self.attn1(
            hidden_states=norm_hidden_states, encoder_hidden_states=None, image_rotary_emb=image_rotary_emb
        )
        hidden_states = ops.gated_residual(hidden_states, attn_hidden_states, gate_msa)

        attn_hidden_states = self.attn2(
            hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            image_rotary_emb=None,
            attention_mask=encoder_attention_mask,
        )
        if (
            attn_hidden_states.shape == hidden_states.shape
            and attn_hidden_states.dtype == dtype
            and attn_hidden_states.is_contiguous()
        ):
            hidden_states, norm_hidden_states = ops.add_rms_norm_modulate(
                hidden_states, attn_hidden_states, scale_mlp, shift_mlp, None, w2, float(self.norm2.eps)
            )
        else:
            hidden_states = hidden_states + attn_hidden_states
            norm_hidden_states = ops.rms_norm_modulate(hidden_states, scale_mlp, shift_mlp, w2, float(self.norm2.eps))
        ff_output = self.ff(norm_hidden_states)
        # The link is decided when kernelizing, not here, so torch.compile traces no test of the other
        # module's forward.
        following = getattr(self, NEXT_BLOCK, None)
        if following is not None and ff_output.shape == hidden_states.shape and ff_output.dtype == dtype:
            # The feed-forward's gated residual and the following block's AdaLN in one pass: that block takes
            # its normalised input from here when it gets exactly this hidden_states and temb.
            shift_next, scale_next = _adaln_rows(following, temb, dtype, 2)
            hidden_states, norm_next = ops.add_rms_norm_modulate(
                hidden_states,
                ff_output.contiguous(),
                scale_next,
                shift_next,
                gate_mlp,
                _norm_weight(following.norm1, dtype),
                float(following.norm1.eps),
            )
            setattr(following, PENDING, (hidden_states, temb, norm_next))
            return hidden_states
        return ops.gated_residual(hidden_states, ff_output, gate_mlp)


class LTXRopePositions(NamedTuple):
    """What the kernelized ``LTXVideoRotaryPosEmbed`` returns instead of (cos, sin) on
    ``ROPE_POSITIONS_DEVICES``, for ``LTXVideoAttnProcessor`` only: each token's position and the
    frequencies, from which ``qk_rms_norm_rope_grid`` computes the angles. ``tables()`` gives (cos, sin)."""

    pos: torch.Tensor  # float32 [B, S, 3]: frame, height, width positions
    freqs: torch.Tensor  # float32 [dim // 6]
    dim: int
    theta: float

    def tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_tables(self.pos, self.dim, self.theta)


class LTXVideoRotaryPosEmbed(nn.Module):
    """``LTXVideoRotaryPosEmbed`` through opaque ops (computed once per compiled forward, not per block):
    ``LTXRopePositions`` on ``ROPE_POSITIONS_DEVICES``, else diffusers' (cos, sin) tables, bit for bit.
    No backward: its outputs feed the fused attention prologue, which serves inference only."""

    has_backward = False
    can_torch_compile = True

    def forward(
        self,
        hidden_states: torch.Tensor,
        num_frames: Optional[int] = None,
        height: Optional[int] = None,
        width: Optional[int] = None,
        rope_interpolation_scale: Any = None,
        video_coords: Optional[torch.Tensor] = None,
    ) -> Any:
        if video_coords is None:
            grid = self._prepare_video_coords(
                hidden_states.size(0),
                num_frames,
                height,
                width,
                rope_interpolation_scale=rope_interpolation_scale,
                device=hidden_states.device,
            )
        else:
            grid = torch.stack(
                [
                    video_coords[:, 0] / self.base_num_frames,
                    video_coords[:, 1] / self.base_height,
                    video_coords[:, 2] / self.base_width,
                ],
                dim=-1,
            )
        if grid.dtype == torch.float32 and grid.device.type in ROPE_POSITIONS_DEVICES:
            pos, freqs = rope_positions(grid, self.dim, float(self.theta))
            return LTXRopePositions(pos, freqs, self.dim, float(self.theta))
        return rope_tables(grid, self.dim, float(self.theta))


class LTXVideoAttnProcessor:
    """Diffusers' ``LTXVideoAttnProcessor`` with the attention prologue fused: with RoPE (self-attention),
    q/k RMSNorm + RoPE is one ``qk_rms_norm_rope_grid`` (given ``LTXRopePositions``) or ``qk_rms_norm_rope``
    (given cos/sin) call; otherwise the q/k norms run as modules. Unmasked self-attention with no backend or
    parallel config chosen runs ``ltx_kernels.attention``'s kernel where it can (an sm_90 GPU, bf16, head dim 64);
    everything else goes through the model module's ``dispatch_attention_fn`` with this processor's backend and
    parallel config, as in the original."""

    has_backward = False
    can_torch_compile = True
    _attention_backend = None
    _parallel_config = None

    def __call__(
        self,
        attn: nn.Module,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Any = None,
    ) -> torch.Tensor:
        # diffusers' own helpers, from the module that defines the attention class (this package imports
        # no diffusers).
        model_module = sys.modules[type(attn).__module__]
        batch_size, sequence_length, _ = (
            hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
        )
        if attention_mask is not None:
            attention_mask = attn.prepare_attention_mask(attention_mask, sequence_length, batch_size)
            attention_mask = attention_mask.view(batch_size, attn.heads, -1, attention_mask.shape[-1])
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states

        query = attn.to_q(hidden_states)
        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)

        norm_q, norm_k = attn.norm_q, attn.norm_k
        positions = image_rotary_emb if isinstance(image_rotary_emb, LTXRopePositions) else None
        fused = (
            image_rotary_emb is not None
            and query.shape == key.shape
            and norm_q.weight is not None
            and norm_k.weight is not None
            and norm_q.weight.dtype == query.dtype
            and norm_k.weight.dtype == key.dtype
            and norm_q.eps == norm_k.eps
        )
        eps = float(norm_q.eps if norm_q.eps is not None else torch.finfo(torch.float32).eps)
        if fused and positions is not None:
            query, key = ops.qk_rms_norm_rope_grid(
                query, key, norm_q.weight, norm_k.weight, positions.pos, positions.freqs, eps
            )
        else:
            if positions is not None:
                image_rotary_emb = positions.tables()
            if fused and image_rotary_emb[0].dtype == torch.float32:
                cos, sin = image_rotary_emb
                query, key = ops.qk_rms_norm_rope(query, key, norm_q.weight, norm_k.weight, cos, sin, eps)
            else:
                query = norm_q(query)
                key = norm_k(key)
                if image_rotary_emb is not None:
                    query = model_module.apply_rotary_emb(query, image_rotary_emb)
                    key = model_module.apply_rotary_emb(key, image_rotary_emb)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        if (
            attention_mask is None
            and self._attention_backend is None
            and self._parallel_config is None
            and attention_on_kernel(query, key, value)
        ):
            hidden_states = attention(query, key, value)  # this package's kernel on sm_90, same layout
        else:
            # diffusers before 0.36 has no context parallelism: its dispatch takes no parallel_config
            parallel = {} if self._parallel_config is None else {"parallel_config": self._parallel_config}
            hidden_states = model_module.dispatch_attention_fn(
                query,
                key,
                value,
                attn_mask=attention_mask,
                dropout_p=0.0,
                is_causal=False,
                backend=self._attention_backend,
                **parallel,
            )
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)
        hidden_states = attn.to_out[0](hidden_states)
        return attn.to_out[1](hidden_states)


# ---------------------------------------------------------------------------------------------------------
# What replaces what in diffusers models


def _is_tanh(module: nn.Module) -> bool:
    return getattr(module, "approximate", None) == "tanh"


def _no_bias(module: nn.Module) -> bool:
    return getattr(module, "bias", None) is None


def _plain_block(block: nn.Module) -> bool:
    """A block whose norms are diffusers' RMSNorm without bias and whose AdaLN table has six rows (the block
    layer reads their weight and eps, and the table)."""
    norms = (getattr(block, "norm1", None), getattr(block, "norm2", None))
    diffusers_rms_norm = ("diffusers.models.normalization", "RMSNorm")
    return (
        all((type(n).__module__, type(n).__qualname__) == diffusers_rms_norm and n.bias is None for n in norms)
        and getattr(block, "scale_shift_table", None) is not None
        and block.scale_shift_table.shape[0] == 6
    )


def _plain_rope(rope: nn.Module) -> bool:
    return callable(getattr(rope, "_prepare_video_coords", None)) and getattr(rope, "dim", 0) >= 6


def diffusers_mapping() -> dict[str, dict[str, Any]]:
    """Kind -> how ``hubkernels.integrations.diffusers`` uses it, in report order. Keys of an entry:

    ``layer`` (a forward swap: replaces modules of exactly the class ``"module:Class"`` for which ``when`` holds)
    or ``processor`` (swaps the stock attention processor ``"module:Class"`` of the attention class ``on``);
    ``link``: attribute names a block layer uses to hand over to the next module of a ModuleList running the
    same layer (next module, pending state); ``serves``: the processor kind this layer's output is for (left
    out when that kind is), and ``exclusive_on``: device types on which every attention module must run that
    processor (its output is then something only that processor reads).
    """
    return {
        "RMSNorm": {"layer": "diffusers.models.normalization:RMSNorm", "when": _no_bias},
        "TorchRMSNorm": {"layer": "torch.nn:RMSNorm"},
        "DiffusersGELU": {"layer": "diffusers.models.activations:GELU", "when": _is_tanh},
        "GeluTanh": {"layer": "torch.nn:GELU", "when": _is_tanh},
        "LTXVideoTransformerBlock": {
            "layer": f"{_LTX}:LTXVideoTransformerBlock",
            "when": _plain_block,
            "link": (NEXT_BLOCK, PENDING),
        },
        "LTXVideoAttnProcessor": {"processor": f"{_LTX}:LTXVideoAttnProcessor", "on": f"{_LTX}:LTXAttention"},
        "LTXVideoRotaryPosEmbed": {
            "layer": f"{_LTX}:LTXVideoRotaryPosEmbed",
            "when": _plain_rope,
            "serves": "LTXVideoAttnProcessor",
            "exclusive_on": ROPE_POSITIONS_DEVICES,
        },
    }
