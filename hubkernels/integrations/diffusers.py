"""Kernelize Diffusers models and pipelines with an ltx-kernels build (LTX-Video's hot elementwise work).

Diffusers marks none of its layers for kernels, so the mapping here selects modules by their exact
classes (`LayerMatch`), never by class name (diffusers' `RMSNorm` and `torch.nn.RMSNorm` share a name
but not attributes or eps). What gets replaced, by kind (the kernel layer or op used):

| kind | modules | kernel |
|---|---|---|
| `RMSNorm` | `diffusers.models.normalization.RMSNorm` without bias (LTX: norm1/norm2, weightless) | `layers.RMSNorm` |
| `TorchRMSNorm` | `torch.nn.RMSNorm` (LTX: attention q/k norms across heads, with weight) | `layers.TorchRMSNorm` |
| `DiffusersGELU` | `diffusers.models.activations.GELU(approximate="tanh")` (the feed-forward's proj + GELU) | `layers.DiffusersGELU` |
| `GeluTanh` | `torch.nn.GELU(approximate="tanh")` (LTX: caption projection) | `layers.GeluTanh` |
| `LTXVideoTransformerBlock` | the block forward: AdaLN as `rms_norm_modulate`, gated residuals as `gated_residual`, the cross-attention residual and the feed-forward's AdaLN as one `add_rms_norm_modulate`, and the feed-forward's gated residual with the next block's AdaLN as another | built from the ops |
| `LTXVideoAttnProcessor` | `LTXAttention` processor: q/k RMSNorm + RoPE as one `qk_rms_norm_rope_grid` (angles computed in the kernel; `qk_rms_norm_rope` reading tables on older builds) when RoPE is given | built from the ops |
| `LTXVideoRotaryPosEmbed` | the RoPE inputs (with `LTXVideoAttnProcessor`, for its prologue): token positions on CUDA (`ROPE_POSITIONS_DEVICES`), else (CPU, or builds without `qk_rms_norm_rope_grid`) the cos/sin tables | `rope_positions` / `rope_tables` |

All but the processor are forward swaps through `hubkernels.layers.kernelize` (so `Mode`, fallbacks and
restoring work as there); the attention prologue is an attention processor, swapped on each
`LTXAttention` that uses diffusers' stock `LTXVideoAttnProcessor` (custom processors are left alone).

Under torch.compile, the RoPE inputs come from opaque ops (`rope_positions` / `rope_tables`, Python
custom ops in the kernel package's `_rope_tables.py`): Inductor recomputes cheap pointwise inputs in
front of every extern kernel that reads them, i.e. once per block, and an opaque op's outputs are
computed once. Builds without them keep diffusers' tables.
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Optional, Union

from ..layers import LayerMatch, Mode, kernelize as _kernelize_layers, kernelized_layers, use_kernel_mapping
from ..layers.kernelize import KernelizeFallback, kernelized_forward, mode_conflict, restore_forward
from ..layers.mode import check_kernelize_mode

if TYPE_CHECKING:
    import torch
    from torch import nn

logger = logging.getLogger(__name__)

#: Every kind `kernelize` can replace, in the order reported.
KINDS = ("RMSNorm", "TorchRMSNorm", "DiffusersGELU", "GeluTanh", "LTXVideoTransformerBlock", "LTXVideoAttnProcessor",
         "LTXVideoRotaryPosEmbed")

_ORIGINAL_PROCESSOR = "_hubkernels_original_processor"


# ---------------------------------------------------------------------------------------------------------
# What a kernel module offers


def op_support(kernel: ModuleType, op_names: Iterable[str]) -> tuple[bool, bool]:
    """(has_backward, can_torch_compile) of a kernel's torch ops, as registered with torch's dispatcher.

    An op has a backward when an Autograd kernel is registered, and is compile-safe when it has a fake
    (meta) implementation. Anything unreadable counts as unsupported.
    """
    import torch

    ops = getattr(getattr(kernel, "_ops", None), "ops", None)
    namespace = getattr(ops, "name", None)
    if not namespace:
        return False, False
    backward = compile_safe = True
    for name in op_names:
        qualname = f"{namespace}::{name}"
        try:
            backward &= torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Autograd")
            fake = torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta")
            if not fake:
                from torch._library.simple_registry import singleton

                fake = singleton.find(qualname).fake_impl.kernel is not None
            compile_safe &= bool(fake)
        except Exception:  # noqa: BLE001 - an op torch cannot describe is treated as unsupported
            return False, False
    return bool(backward), bool(compile_safe)


def _kernel_function(kernel: ModuleType, module: str, name: str) -> Optional[Callable]:
    """`name` from the kernel package's submodule `module` (imported, which registers its ops), or None
    when this build has no such submodule (built before it existed)."""
    qualified = f"{kernel.__name__}.{module}"
    try:
        submodule = importlib.import_module(qualified)
    except ModuleNotFoundError as e:
        if e.name not in (qualified, kernel.__name__):
            raise
        return None
    return getattr(submodule, name, None)


class KernelModuleLayer:
    """A repository over an already-loaded kernel module: `kernel.layers.<name>` (or a layer built from
    its ops). Equality is by kernel module and name, so kernelize's memo works across calls."""

    def __init__(self, kernel: ModuleType, name: str, build: Optional[Callable[[ModuleType], type]] = None) -> None:
        self.kernel = kernel
        self.name = name
        self._build = build

    def load(self) -> type:
        if self._build is not None:
            return self._build(self.kernel)
        from ..layers.repos import layer_from_kernel

        return layer_from_kernel(self.kernel, self.name, self.kernel.__name__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelModuleLayer) and (self.kernel, self.name) == (other.kernel, other.name)

    def __hash__(self) -> int:
        return hash((id(self.kernel), self.name))

    def __repr__(self) -> str:
        return f"{self.kernel.__name__}:{self.name}"


# ---------------------------------------------------------------------------------------------------------
# The LTX-Video block and attention processor, built from a kernel's functional ops


_block_layers: dict[int, type] = {}

# Kernelized LTX blocks hand the next block its AdaLN output: kernelize links each block to the one
# after it (a plain attribute, not a submodule), and a block leaves (hidden_states, temb, normalised)
# on the next one, which uses it only for that very hidden_states and temb, and clears it. It holds
# under torch.compile of the whole model and of each block (diffusers' compile_repeated_blocks: three
# block graphs, first, middle and last, whatever the depth); both are tested.
_NEXT_BLOCK = "_hubkernels_next_block"
_PENDING = "_hubkernels_pending_adaln"


def _adaln_rows(block: "nn.Module", temb: "torch.Tensor", dtype: "torch.dtype", rows: int) -> tuple:
    """The block's first `rows` AdaLN rows (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp,
    gate_mlp) in `dtype`. temb is [B, 1, 6D] (one timestep per sample) or [B, S, 6D] (per-token
    timesteps); the rows are strided views of one tensor, which the kernels read in place."""
    table = block.scale_shift_table
    per_row = temb.reshape(temb.size(0), temb.size(1), table.shape[0], -1)[:, :, :rows]
    return (table[None, None, :rows].to(device=temb.device) + per_row).to(dtype).unbind(dim=2)


def _norm_weight(norm: "nn.Module", dtype: "torch.dtype") -> Optional["torch.Tensor"]:
    return None if norm.weight is None else norm.weight.to(dtype)


def ltx_block_layer(kernel: ModuleType) -> type:
    """`LTXVideoTransformerBlock.forward` with AdaLN (`rms_norm_modulate`) and the gated residuals
    (`gated_residual`) as kernels, and the cross-attention residual fused into the next AdaLN
    (`add_rms_norm_modulate`: x and y read once, h and its normalisation written once). Builds without
    that op add and normalise separately. With the op, a block linked to a following kernelized
    block (see `_link_blocks`) also fuses its feed-forward residual with that block's AdaLN and hands
    the result over. One layer class per kernel module."""
    cached = _block_layers.get(id(kernel))
    if cached is not None:
        return cached
    import torch
    from torch import nn

    rms_norm_modulate = kernel.rms_norm_modulate
    gated_residual = kernel.gated_residual
    add_rms_norm_modulate = getattr(kernel, "add_rms_norm_modulate", None)
    ops = (("rms_norm_modulate", "gated_residual")
           + (("add_rms_norm_modulate",) if add_rms_norm_modulate is not None else ()))
    has_backward, can_compile = op_support(kernel, ops)

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor, temb: torch.Tensor,
                image_rotary_emb: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
                encoder_attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        dtype = hidden_states.dtype
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = _adaln_rows(self, temb, dtype, 6)
        w1, w2 = _norm_weight(self.norm1, dtype), _norm_weight(self.norm2, dtype)

        pending = getattr(self, _PENDING, None)
        if pending is not None:
            setattr(self, _PENDING, None)
        if pending is not None and pending[0] is hidden_states and pending[1] is temb:
            norm_hidden_states = pending[2]  # the previous block's fused residual + this AdaLN
        else:
            norm_hidden_states = rms_norm_modulate(hidden_states, scale_msa, shift_msa, w1, self.norm1.eps)
        attn_hidden_states = self.attn1(hidden_states=norm_hidden_states, encoder_hidden_states=None,
                                        image_rotary_emb=image_rotary_emb)
        hidden_states = gated_residual(hidden_states, attn_hidden_states, gate_msa)

        attn_hidden_states = self.attn2(hidden_states, encoder_hidden_states=encoder_hidden_states,
                                        image_rotary_emb=None, attention_mask=encoder_attention_mask)
        if (add_rms_norm_modulate is not None and attn_hidden_states.shape == hidden_states.shape
                and attn_hidden_states.dtype == dtype and attn_hidden_states.is_contiguous()):
            hidden_states, norm_hidden_states = add_rms_norm_modulate(
                hidden_states, attn_hidden_states, scale_mlp, shift_mlp, None, w2, self.norm2.eps)
        else:
            hidden_states = hidden_states + attn_hidden_states
            norm_hidden_states = rms_norm_modulate(hidden_states, scale_mlp, shift_mlp, w2, self.norm2.eps)
        ff_output = self.ff(norm_hidden_states)
        # A following block runs this same forward: kernelize links it (`_link_blocks`, decided there,
        # not here, so that torch.compile traces no test of the other module's forward).
        following = getattr(self, _NEXT_BLOCK, None)
        if (following is not None and add_rms_norm_modulate is not None
                and ff_output.shape == hidden_states.shape and ff_output.dtype == dtype):
            # The feed-forward's gated residual and the following block's AdaLN in one pass: that block
            # takes its normalised input from here when it gets exactly this hidden_states and temb.
            shift_next, scale_next = _adaln_rows(following, temb, dtype, 2)
            hidden_states, norm_next = add_rms_norm_modulate(
                hidden_states, ff_output.contiguous(), scale_next, shift_next, gate_mlp,
                _norm_weight(following.norm1, dtype), following.norm1.eps)
            setattr(following, _PENDING, (hidden_states, temb, norm_next))
            return hidden_states
        return gated_residual(hidden_states, ff_output, gate_mlp)

    layer = type("LTXVideoTransformerBlock", (nn.Module,), {
        "forward": forward, "has_backward": has_backward, "can_torch_compile": can_compile,
        "__module__": __name__,
        "__doc__": "LTX-Video block forward with fused AdaLN, gated residuals and residual + AdaLN."})
    _block_layers[id(kernel)] = layer
    return layer


#: Device types on which the kernelized RoPE module hands positions to the fused prologue, which then
#: computes the angles in the kernel (H200: 67 vs 94 us a block, 201 MB less to read). On a CPU the
#: sin/cos cost more than reading tables computed once per forward (2 cores: 8.3 vs 1.2 ms a call), so
#: there the module returns the tables.
ROPE_POSITIONS_DEVICES = frozenset({"cuda"})


class LTXRopePositions(NamedTuple):
    """What the kernelized `LTXVideoRotaryPosEmbed` returns in place of its (cos, sin) tables, for
    `KernelLTXVideoAttnProcessor` only: each token's position and the frequencies, from which
    `qk_rms_norm_rope_grid` computes the angles in the kernel (200 MB less to read per block in the
    2B model). `tables()` gives diffusers' (cos, sin) when a processor needs them after all."""

    pos: "torch.Tensor"  # float32 [B, S, 3]: frame, height, width positions
    freqs: "torch.Tensor"  # float32 [dim // 6]
    dim: int
    theta: float
    rope_tables: Callable  # the kernel's rope_tables op

    def tables(self) -> tuple["torch.Tensor", "torch.Tensor"]:
        return self.rope_tables(self.pos, self.dim, self.theta)


_rope_layers: dict[int, type] = {}


def ltx_rope_layer(kernel: ModuleType) -> type:
    """`LTXVideoRotaryPosEmbed.forward` through the kernel's opaque ops: `LTXRopePositions` for the fused
    attention prologue when the kernel has `qk_rms_norm_rope_grid` and the device is one of
    `ROPE_POSITIONS_DEVICES`, else the cos/sin tables of its `rope_tables` op.

    Same positions as diffusers (its own grid code), same tables bit for bit. Behind the ops,
    torch.compile computes them once per forward instead of once per attention block. No
    backward: they feed the fused attention prologue, which serves inference only.
    """
    cached = _rope_layers.get(id(kernel))
    if cached is not None:
        return cached
    import torch
    from torch import nn

    rope_tables = _kernel_function(kernel, "_rope_tables", "rope_tables")
    if rope_tables is None:
        raise ValueError(f"{kernel.__name__} has no rope_tables op (built before it was added); rebuild it.")
    rope_positions = _rope_positions(kernel)
    ops = ("rope_tables",) + (("rope_positions",) if rope_positions is not None else ())
    _, can_compile = op_support(kernel, ops)

    def forward(self, hidden_states: torch.Tensor, num_frames: Optional[int] = None, height: Optional[int] = None,
                width: Optional[int] = None, rope_interpolation_scale: Any = None,
                video_coords: Optional[torch.Tensor] = None) -> Any:
        if video_coords is None:
            grid = self._prepare_video_coords(hidden_states.size(0), num_frames, height, width,
                                              rope_interpolation_scale=rope_interpolation_scale,
                                              device=hidden_states.device)
        else:
            grid = torch.stack([video_coords[:, 0] / self.base_num_frames, video_coords[:, 1] / self.base_height,
                                video_coords[:, 2] / self.base_width], dim=-1)
        if (rope_positions is not None and grid.dtype == torch.float32
                and grid.device.type in ROPE_POSITIONS_DEVICES):
            pos, freqs = rope_positions(grid, self.dim, float(self.theta))
            return LTXRopePositions(pos, freqs, self.dim, float(self.theta), rope_tables)
        return rope_tables(grid, self.dim, float(self.theta))

    layer = type("LTXVideoRotaryPosEmbed", (nn.Module,), {
        "forward": forward, "has_backward": False, "can_torch_compile": can_compile,
        "__module__": __name__, "__doc__": "LTX-Video RoPE inputs from opaque ops (computed once compiled)."})
    _rope_layers[id(kernel)] = layer
    return layer


def _rope_positions(kernel: ModuleType) -> Optional[Callable]:
    """The kernel's rope_positions op when it also has qk_rms_norm_rope_grid (builds before them: None)."""
    if not hasattr(kernel, "qk_rms_norm_rope_grid"):
        return None
    return _kernel_function(kernel, "_rope_tables", "rope_positions")


class KernelLTXVideoAttnProcessor:
    """Diffusers' `LTXVideoAttnProcessor` with the attention prologue fused: when RoPE is given
    (self-attention), q/k RMSNorm + RoPE is one `qk_rms_norm_rope_grid` call (given `LTXRopePositions`)
    or `qk_rms_norm_rope` call (given cos/sin tables); otherwise the q/k norms run
    as modules (themselves kernelized). Attention itself goes through `dispatch_attention_fn` with
    this processor's `_attention_backend` / `_parallel_config`, as in the original."""

    _attention_backend = None
    _parallel_config = None

    def __init__(self, kernel: ModuleType) -> None:
        # The functions only: processors must deepcopy.
        self._qk_rms_norm_rope = kernel.qk_rms_norm_rope
        self._qk_rms_norm_rope_grid = getattr(kernel, "qk_rms_norm_rope_grid", None)
        ops = ("qk_rms_norm_rope",) + (("qk_rms_norm_rope_grid",) if self._qk_rms_norm_rope_grid else ())
        self.has_backward, self.can_torch_compile = op_support(kernel, ops)

    def __call__(self, attn: "nn.Module", hidden_states: "torch.Tensor",
                 encoder_hidden_states: Optional["torch.Tensor"] = None,
                 attention_mask: Optional["torch.Tensor"] = None,
                 image_rotary_emb: Any = None) -> "torch.Tensor":
        import torch
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.transformers.transformer_ltx import apply_rotary_emb

        batch_size, sequence_length, _ = (
            hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape)
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
        fused = (image_rotary_emb is not None and query.shape == key.shape
                 and norm_q.weight is not None and norm_k.weight is not None
                 and norm_q.weight.dtype == query.dtype and norm_k.weight.dtype == key.dtype
                 and norm_q.eps == norm_k.eps)
        eps = norm_q.eps if norm_q.eps is not None else torch.finfo(torch.float32).eps
        if fused and positions is not None and self._qk_rms_norm_rope_grid is not None:
            query, key = self._qk_rms_norm_rope_grid(query, key, norm_q.weight, norm_k.weight, positions.pos,
                                                     positions.freqs, eps)
        else:
            if positions is not None:
                image_rotary_emb = positions.tables()
            if fused and image_rotary_emb[0].dtype == torch.float32:
                cos, sin = image_rotary_emb
                query, key = self._qk_rms_norm_rope(query, key, norm_q.weight, norm_k.weight, cos, sin, eps)
            else:
                query = norm_q(query)
                key = norm_k(key)
                if image_rotary_emb is not None:
                    query = apply_rotary_emb(query, image_rotary_emb)
                    key = apply_rotary_emb(key, image_rotary_emb)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        hidden_states = dispatch_attention_fn(
            query, key, value, attn_mask=attention_mask, dropout_p=0.0, is_causal=False,
            backend=self._attention_backend, parallel_config=self._parallel_config)
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)
        hidden_states = attn.to_out[0](hidden_states)
        return attn.to_out[1](hidden_states)


# ---------------------------------------------------------------------------------------------------------
# The mapping


def _is_tanh(module: "nn.Module") -> bool:
    return getattr(module, "approximate", None) == "tanh"


def _no_bias(module: "nn.Module") -> bool:
    return getattr(module, "bias", None) is None


def _plain_block(block: "nn.Module") -> bool:
    from diffusers.models.normalization import RMSNorm

    norms = (getattr(block, "norm1", None), getattr(block, "norm2", None))
    return (all(type(n) is RMSNorm and n.bias is None for n in norms)
            and getattr(block, "scale_shift_table", None) is not None and block.scale_shift_table.shape[0] == 6)


def _plain_rope(rope: "nn.Module") -> bool:
    return callable(getattr(rope, "_prepare_video_coords", None)) and getattr(rope, "dim", 0) >= 6


def ltx_mapping(kernel: ModuleType, device_type: str, exclude: Iterable[str] = ()) -> dict:
    """The class-keyed kernel mapping for LTX-Video's layers, served by one loaded ltx-kernels module.

    Use it with `hubkernels.use_kernel_mapping` and `hubkernels.kernelize`, or let `kernelize` below do
    both. Kinds whose layer or ops the kernel lacks are left out, and `LTXVideoRotaryPosEmbed` comes
    only with `LTXVideoAttnProcessor` (the tables exist for its fused prologue; for diffusers' own RoPE,
    Inductor does better fusing the table math into it).
    """
    import torch
    from diffusers.models.activations import GELU
    from diffusers.models.normalization import RMSNorm
    from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed, LTXVideoTransformerBlock

    layers = getattr(kernel, "layers", None)
    entries: dict[str, tuple[LayerMatch, KernelModuleLayer]] = {
        "RMSNorm": (LayerMatch(RMSNorm, _no_bias), KernelModuleLayer(kernel, "RMSNorm")),
        "TorchRMSNorm": (LayerMatch(torch.nn.RMSNorm), KernelModuleLayer(kernel, "TorchRMSNorm")),
        "DiffusersGELU": (LayerMatch(GELU, _is_tanh), KernelModuleLayer(kernel, "DiffusersGELU")),
        "GeluTanh": (LayerMatch(torch.nn.GELU, _is_tanh), KernelModuleLayer(kernel, "GeluTanh")),
        "LTXVideoTransformerBlock": (LayerMatch(LTXVideoTransformerBlock, _plain_block),
                                     KernelModuleLayer(kernel, "LTXVideoTransformerBlock", ltx_block_layer)),
        "LTXVideoRotaryPosEmbed": (LayerMatch(LTXVideoRotaryPosEmbed, _plain_rope),
                                   KernelModuleLayer(kernel, "LTXVideoRotaryPosEmbed", ltx_rope_layer)),
    }
    mapping = {}
    for kind, (match, repo) in entries.items():
        if kind in exclude or (kind == "LTXVideoRotaryPosEmbed" and "LTXVideoAttnProcessor" in exclude):
            continue
        if kind == "LTXVideoTransformerBlock":
            available = all(hasattr(kernel, op) for op in ("rms_norm_modulate", "gated_residual"))
        elif kind == "LTXVideoRotaryPosEmbed":
            available = (hasattr(kernel, "qk_rms_norm_rope")
                         and _kernel_function(kernel, "_rope_tables", "rope_tables") is not None)
        else:
            available = hasattr(layers, kind)
        if not available:
            logger.info("%s offers no %s; those modules keep their forward", kernel.__name__, kind)
            continue
        mapping[match] = {device_type: repo}
    return mapping


# ---------------------------------------------------------------------------------------------------------
# One call for a model or a pipeline


def kernelize(obj: Any, *, repo_id: Optional[str] = None, version: Optional[int] = None,
              revision: Optional[str] = None, kernel: Optional[ModuleType] = None,
              path: Union[str, Path, None] = None, mode: Mode = Mode.INFERENCE,
              device: Union[str, "torch.device", None] = None,
              trust_remote_code: Union[bool, list[str]] = False, exclude: Iterable[str] = ()) -> Any:
    """Kernelize a Diffusers model or every model of a pipeline with one kernel; returns `obj`.

    The kernel comes from exactly one of `repo_id` (+ `version` or `revision`, through `get_kernel`
    and its trust policy), `path` (a local build) or `kernel` (an already loaded module). Call it
    after moving the model to its device and before `enable_model_cpu_offload()`. What was replaced
    is logged and left on the object as `obj._hubkernels_replaced` ({kind: module count}, see KINDS;
    for a pipeline the totals, and each model has its own); `exclude` names kinds to leave alone.
    Running it again with another mode re-decides every module.
    """
    check_kernelize_mode(mode)
    module = _load_kernel(repo_id, version, revision, kernel, path, trust_remote_code)
    exclude = set(exclude)
    unknown = exclude - set(KINDS)
    if unknown:
        raise ValueError(f"Unknown kinds to exclude: {sorted(unknown)}; kinds are {', '.join(KINDS)}")

    unmapped = set(exclude)
    if hasattr(module, "qk_rms_norm_rope") and mode_conflict(KernelLTXVideoAttnProcessor(module), mode):
        unmapped.add("LTXVideoRotaryPosEmbed")  # the tables serve the fused prologue, which cannot serve `mode`
    total: Counter[str] = Counter()
    for name, model in _models_of(obj):
        device_type = _device_type(obj, model, device)
        model_unmapped = set(unmapped)
        if (_rope_positions(module) is not None and device_type in ROPE_POSITIONS_DEVICES
                and _custom_processors(model)):
            # Positions instead of tables would reach processors that expect (cos, sin).
            model_unmapped.add("LTXVideoRotaryPosEmbed")
        mapping = ltx_mapping(module, device_type, model_unmapped)
        with use_kernel_mapping(mapping):
            _kernelize_layers(model, mode=mode, device=device_type, use_fallback=KernelizeFallback.DEFAULT)
        _link_blocks(model)
        counts = Counter(layer.__name__ for layer in kernelized_layers(model).values())
        if "LTXVideoAttnProcessor" not in exclude and hasattr(module, "qk_rms_norm_rope"):
            counts["LTXVideoAttnProcessor"] += _swap_processors(model, module, mode)
        else:
            _restore_processors(model)
        replaced = {kind: counts[kind] for kind in KINDS if counts[kind]}
        logger.info("kernelized %s with %s (%s, %s): %s", name or type(model).__name__, module.__name__, mode,
                    device_type, ", ".join(f"{k} x{n}" for k, n in replaced.items()) or "nothing")
        _set_report(model, replaced)
        total.update(counts)
    _set_report(obj, {kind: total[kind] for kind in KINDS if total[kind]})
    return obj


def unkernelize(obj: Any) -> Any:
    """Undo `kernelize`: original forwards and attention processors everywhere; returns `obj`."""
    for _, model in _models_of(obj):
        for module in model.modules():
            restore_forward(module)
            module.__dict__.pop(_NEXT_BLOCK, None)
            module.__dict__.pop(_PENDING, None)
        _restore_processors(model)
        _set_report(model, {})
    _set_report(obj, {})
    return obj


def _link_blocks(model: "nn.Module") -> None:
    """Point each kernelized LTX block at the one after it in its ModuleList when that one runs the same
    kernelized forward (for the cross-block AdaLN fusion; a hook that wraps it later still calls it).
    Stored in __dict__, so the link is no submodule: state_dict, .to() and module traversal ignore it."""
    from torch import nn
    from diffusers.models.transformers.transformer_ltx import LTXVideoTransformerBlock

    def block_forward(module: Optional["nn.Module"]) -> Optional[Callable]:
        if type(module) is not LTXVideoTransformerBlock:
            return None
        func = getattr(kernelized_forward(module), "__func__", None)
        return func if any(func is layer.forward for layer in _block_layers.values()) else None

    for blocks in model.modules():
        if not isinstance(blocks, nn.ModuleList):
            continue
        for block, following in zip(blocks, list(blocks)[1:] + [None]):
            if type(block) is LTXVideoTransformerBlock:
                mine = block_forward(block)
                linked = following if mine is not None and block_forward(following) is mine else None
                block.__dict__[_NEXT_BLOCK] = linked
                block.__dict__.pop(_PENDING, None)


def _swap_processors(model: "nn.Module", kernel: ModuleType, mode: Mode) -> int:
    from diffusers.models.transformers.transformer_ltx import LTXAttention, LTXVideoAttnProcessor

    processor = None
    swapped = 0
    for path, attn in model.named_modules():
        if type(attn) is not LTXAttention:
            continue
        current = attn.processor
        if type(current) is KernelLTXVideoAttnProcessor:
            original = attn.__dict__.get(_ORIGINAL_PROCESSOR, current)
        elif type(current) is LTXVideoAttnProcessor:
            original = current
        else:
            logger.info("%s uses a custom processor (%s); leaving it", path, type(current).__name__)
            continue
        processor = processor or KernelLTXVideoAttnProcessor(kernel)
        conflict = mode_conflict(processor, mode)
        if conflict is not None:
            logger.warning("%s keeps diffusers' LTXVideoAttnProcessor: the fused processor cannot serve %s: %s",
                           path, mode, conflict)
            _restore_processor(attn)
            continue
        new = KernelLTXVideoAttnProcessor(kernel)
        # Keep the attention backend and parallel config chosen with set_attention_backend / parallelism.
        new._attention_backend = current._attention_backend
        new._parallel_config = current._parallel_config
        attn.__dict__[_ORIGINAL_PROCESSOR] = original
        attn.set_processor(new)
        swapped += 1
    return swapped


def _custom_processors(model: "nn.Module") -> bool:
    """Whether an LTXAttention of the model uses a processor other than diffusers' stock one or ours."""
    from diffusers.models.transformers.transformer_ltx import LTXAttention, LTXVideoAttnProcessor

    return any(type(m.processor) not in (LTXVideoAttnProcessor, KernelLTXVideoAttnProcessor)
               for m in model.modules() if type(m) is LTXAttention)


def _restore_processor(attn: "nn.Module") -> None:
    original = attn.__dict__.pop(_ORIGINAL_PROCESSOR, None)
    if original is not None:
        current = attn.processor
        original._attention_backend = current._attention_backend
        original._parallel_config = current._parallel_config
        attn.set_processor(original)


def _restore_processors(model: "nn.Module") -> None:
    for attn in model.modules():
        _restore_processor(attn)


def _load_kernel(repo_id: Optional[str], version: Optional[int], revision: Optional[str],
                 kernel: Optional[ModuleType], path: Union[str, Path, None],
                 trust_remote_code: Union[bool, list[str]]) -> ModuleType:
    given = [name for name, v in (("repo_id", repo_id), ("kernel", kernel), ("path", path)) if v is not None]
    if len(given) != 1:
        raise ValueError("Pass exactly one of repo_id=<org/name> (with version= or revision=), path=<local "
                         f"kernel build> or kernel=<loaded module>; got {', '.join(given) or 'none'}.")
    if kernel is not None:
        return kernel
    if path is not None:
        from ..load import get_local_kernel

        return get_local_kernel(path)
    from ..fetch import get_kernel

    return get_kernel(repo_id, version=version, revision=revision, trust_remote_code=trust_remote_code)


def _models_of(obj: Any) -> list[tuple[str, "nn.Module"]]:
    from torch import nn

    if isinstance(obj, nn.Module):
        return [("", obj)]
    components = getattr(obj, "components", None)
    if isinstance(components, dict):
        return [(name, m) for name, m in components.items() if isinstance(m, nn.Module)]
    raise TypeError(f"Expected a Diffusers model (nn.Module) or pipeline, got {type(obj).__name__}")


def _device_type(obj: Any, model: "nn.Module", device: Union[str, "torch.device", None]) -> str:
    """The device the model computes on: explicit, else the pipeline's execution device (which sees
    offload hooks), else the model's hook or parameters."""
    import torch

    from ..layers.device import device_type_of
    from ..layers.kernelize import module_device

    if isinstance(device, str):
        return device.split(":")[0]
    if isinstance(device, torch.device):
        return device.type
    execution = getattr(obj, "_execution_device", None) if obj is not model else None
    found = execution if isinstance(execution, torch.device) else module_device(model)
    if found is None:
        raise ValueError(f"Cannot tell which device {type(model).__name__} runs on; pass device='cuda' or 'cpu'.")
    return device_type_of(found)


def _set_report(obj: Any, replaced: dict[str, int]) -> None:
    try:
        object.__setattr__(obj, "_hubkernels_replaced", dict(replaced))
    except (AttributeError, TypeError):  # objects without a __dict__: the log line is the report
        pass
