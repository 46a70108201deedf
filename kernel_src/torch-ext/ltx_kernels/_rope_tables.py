"""`rope_tables` / `rope_positions`: LTX-Video's RoPE inputs as opaque ops, so torch.compile computes them once.

Diffusers builds the tables (`LTXVideoRotaryPosEmbed`) from cheap pointwise ops, which Inductor leaves
unrealized. A custom op's tensor inputs get the strides the op saw when traced (the default layout
constraint of custom ops), and an unrealized input is made into a copy of its own at each call, with the
pointwise math inlined: the tables are recomputed in front of every `qk_rms_norm_rope` call (28 a forward
in the 2B model, 100 MB per table). The outputs of an opaque op are buffers, computed once and read by
every block. Eager computes the same values as diffusers, in fewer passes (the interleave and padding are
written in place instead of through repeat_interleave and cat).
"""

from __future__ import annotations

import math

import torch

from ._ops import add_op_namespace_prefix


def _check(grid: torch.Tensor, dim: int) -> None:
    if grid.dim() != 3 or grid.shape[-1] != 3:
        raise RuntimeError(
            f"ltx_kernels.rope_tables: grid must be [batch, tokens, 3] (frame, height, width "
            f"positions), got shape {list(grid.shape)}"
        )
    if not grid.is_floating_point():
        raise RuntimeError(f"ltx_kernels.rope_tables: grid must be floating point, got {grid.dtype}")
    if dim < 6:
        raise RuntimeError(f"ltx_kernels.rope_tables: dim must be at least 6 (one frequency per axis), got {dim}")


def _freqs(dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """diffusers' per-axis RoPE frequencies, pi/2 included: float32 [dim // 6]."""
    freqs = theta ** torch.linspace(
        math.log(1.0, theta), math.log(theta, theta), dim // 6, device=device, dtype=torch.float32
    )
    return freqs * math.pi / 2.0


@torch.library.custom_op(add_op_namespace_prefix("rope_tables"), mutates_args=())
def rope_tables(grid: torch.Tensor, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each [B, S, dim], of diffusers' `LTXVideoRotaryPosEmbed` for positions `grid` [B, S, 3].

    dim // 6 frequencies per axis, interleaved in pairs; the first dim % 6 channels are padding
    (cos 1, sin 0). The dtype is grid's promoted with float32 (float32 for the pipelines' grids).
    """
    _check(grid, dim)
    # The angles exactly as diffusers computes them (same ops, same order), so the tables match bit for bit.
    freqs = _freqs(dim, theta, grid.device)
    angles = (freqs * (grid.unsqueeze(-1) * 2 - 1)).transpose(-1, -2).flatten(2)  # [B, S, 3 * (dim // 6)]
    pad = dim % 6
    tables = []
    for value, pad_value in ((angles.cos(), 1.0), (angles.sin(), 0.0)):
        table = angles.new_empty(*angles.shape[:2], dim)
        table[..., :pad].fill_(pad_value)
        table[..., pad:].unflatten(-1, (-1, 2)).copy_(value.unsqueeze(-1).expand(*value.shape, 2))
        tables.append(table)
    return tables[0], tables[1]


@rope_tables.register_fake
def _(grid: torch.Tensor, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    _check(grid, dim)
    dtype = torch.promote_types(torch.float32, grid.dtype)
    shape = (grid.shape[0], grid.shape[1], dim)
    return grid.new_empty(shape, dtype=dtype), grid.new_empty(shape, dtype=dtype)


@torch.library.custom_op(add_op_namespace_prefix("rope_positions"), mutates_args=())
def rope_positions(grid: torch.Tensor, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(pos, freqs) for `qk_rms_norm_rope_grid`: grid [B, S, 3] as a contiguous float32 copy, and the
    float32 [dim // 6] frequencies of `rope_tables`. Both are tiny; being an opaque op's outputs, they
    are computed once per compiled forward and read by every block.
    """
    _check(grid, dim)
    if grid.dtype != torch.float32:
        raise RuntimeError(
            f"ltx_kernels.rope_positions: grid must be float32 (diffusers computes float32 "
            f"angles from it), got {grid.dtype}"
        )
    return grid.clone(memory_format=torch.contiguous_format), _freqs(dim, theta, grid.device)


@rope_positions.register_fake
def _(grid: torch.Tensor, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    _check(grid, dim)
    return grid.new_empty(grid.shape, dtype=torch.float32), grid.new_empty((dim // 6,), dtype=torch.float32)
