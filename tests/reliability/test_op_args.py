"""ltx-kernels op arguments: strided views give PyTorch's answer, and fuzzed arguments never give a traceback.

Every op is called as a model would call it with views (a transposed x, a sliced q, a weight taken
every other element, tables that start one element into their storage, an expanded x) and must
return what it returns for the same values laid out contiguously, as every PyTorch op does. The
fuzz draws dtypes, shapes, strides, empties and NaN/inf for every argument from one recorded seed
(LTX_TEST_SEED=<seed> replays it): each call returns a correct result or raises a RuntimeError that
starts with "ltx_kernels.<op>:" (a one-line error the user can act on); anything else is a failure.
The same tests run on CUDA under `pytest -m gpu`.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import ltx_reference as ref
import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
    ),
]

B, S, D = 2, 3, 24  # D: even (RoPE), a multiple of 6 (grid RoPE) and of the 16-byte vector widths


@dataclass(frozen=True)
class Op:
    """One op: how to make valid arguments, call it and compute its float64 reference."""

    name: str
    make: Callable[[torch.Generator, torch.dtype], dict[str, torch.Tensor | None]]
    call: Callable[..., object]
    reference: Callable[..., object]


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, std: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * std).to(dtype)


def _rope_grid_reference(q, k, weight_q, weight_k, pos, freqs):
    cos, sin = ref.rope_tables(pos, freqs, q.shape[-1])
    return ref.qk_rms_norm_rope(q, k, weight_q, weight_k, cos, sin)


def _gelu_reference(x: torch.Tensor) -> torch.Tensor:
    """gelu_tanh in float64 with its limit at -inf (0) where the formula gives -inf * 0."""
    out = ref.gelu_tanh(x)
    return torch.where(x.double() == -math.inf, torch.zeros_like(out), out)


def _ops(ltx) -> list[Op]:
    bsd = (B, S, D)

    def angles(gen: torch.Generator) -> dict[str, torch.Tensor]:
        a = torch.rand(*bsd, generator=gen, dtype=torch.float64) * 2 * math.pi
        return {"cos": a.cos().float(), "sin": a.sin().float()}

    return [
        Op(
            "rms_norm",
            lambda g, dt: {"x": _randn(g, *bsd, dtype=dt), "weight": _randn(g, D, dtype=dt)},
            lambda a: ltx.rms_norm(a["x"], a["weight"]),
            lambda a: ref.rms_norm(a["x"], a["weight"]),
        ),
        Op(
            "rms_norm_modulate",
            lambda g, dt: {
                "x": _randn(g, *bsd, dtype=dt),
                "scale": _randn(g, B, 1, D, dtype=dt, std=0.5),
                "shift": _randn(g, B, S, D, dtype=dt, std=0.5),
                "weight": _randn(g, D, dtype=dt),
            },
            lambda a: ltx.rms_norm_modulate(a["x"], a["scale"], a["shift"], a["weight"]),
            lambda a: ref.rms_norm_modulate(a["x"], a["scale"], a["shift"], a["weight"]),
        ),
        Op(
            "add_rms_norm_modulate",
            lambda g, dt: {
                "x": _randn(g, *bsd, dtype=dt),
                "y": _randn(g, *bsd, dtype=dt),
                "scale": _randn(g, B, 1, D, dtype=dt, std=0.5),
                "shift": _randn(g, B, 1, D, dtype=dt, std=0.5),
                "gate": _randn(g, B, S, D, dtype=dt, std=0.5),
                "weight": _randn(g, D, dtype=dt),
            },
            lambda a: ltx.add_rms_norm_modulate(a["x"], a["y"], a["scale"], a["shift"], a["gate"], a["weight"]),
            lambda a: ref.add_rms_norm_modulate(a["x"], a["y"], a["scale"], a["shift"], a["gate"], a["weight"]),
        ),
        Op(
            "rope_interleaved_qk",
            lambda g, dt: {"q": _randn(g, *bsd, dtype=dt), "k": _randn(g, *bsd, dtype=dt), **angles(g)},
            lambda a: ltx.rope_interleaved_qk(a["q"], a["k"], a["cos"], a["sin"]),
            lambda a: ref.rope_interleaved_qk(a["q"], a["k"], a["cos"], a["sin"]),
        ),
        Op(
            "gelu_tanh",
            lambda g, dt: {"x": _randn(g, *bsd, dtype=dt, std=3.0)},
            lambda a: ltx.gelu_tanh(a["x"]),
            lambda a: _gelu_reference(a["x"]),
        ),
        Op(
            "gated_residual",
            lambda g, dt: {
                "x": _randn(g, *bsd, dtype=dt),
                "y": _randn(g, *bsd, dtype=dt),
                "gate": _randn(g, B, 1, D, dtype=dt, std=0.5),
            },
            lambda a: ltx.gated_residual(a["x"], a["y"], a["gate"]),
            lambda a: ref.gated_residual(a["x"], a["y"], a["gate"]),
        ),
        Op(
            "qk_rms_norm_rope",
            lambda g, dt: {
                "q": _randn(g, *bsd, dtype=dt),
                "k": _randn(g, *bsd, dtype=dt),
                "weight_q": _randn(g, D, dtype=dt),
                "weight_k": _randn(g, D, dtype=dt),
                **angles(g),
            },
            lambda a: ltx.qk_rms_norm_rope(a["q"], a["k"], a["weight_q"], a["weight_k"], a["cos"], a["sin"]),
            lambda a: ref.qk_rms_norm_rope(a["q"], a["k"], a["weight_q"], a["weight_k"], a["cos"], a["sin"]),
        ),
        Op(
            "qk_rms_norm_rope_grid",
            lambda g, dt: {
                "q": _randn(g, *bsd, dtype=dt),
                "k": _randn(g, *bsd, dtype=dt),
                "weight_q": _randn(g, D, dtype=dt),
                "weight_k": _randn(g, D, dtype=dt),
                "pos": torch.rand(B, S, 3, generator=g) * 8,
                "freqs": torch.rand(D // 6, generator=g) * 3,
            },
            lambda a: ltx.qk_rms_norm_rope_grid(a["q"], a["k"], a["weight_q"], a["weight_k"], a["pos"], a["freqs"]),
            lambda a: _rope_grid_reference(a["q"], a["k"], a["weight_q"], a["weight_k"], a["pos"], a["freqs"]),
        ),
    ]


OP_NAMES = [
    "rms_norm",
    "rms_norm_modulate",
    "add_rms_norm_modulate",
    "rope_interleaved_qk",
    "gelu_tanh",
    "gated_residual",
    "qk_rms_norm_rope",
    "qk_rms_norm_rope_grid",
]

# Views with the values of t (same shape) in another memory layout.
LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    # the dims reversed in memory, viewed back in t's order (a transposed tensor; 1-D: a reversed copy)
    "transposed": lambda t: (
        t.permute(tuple(reversed(range(t.dim())))).contiguous().permute(tuple(reversed(range(t.dim()))))
    ),
    # every other element of a twice-as-long last dim (last-dim stride 2)
    "last_dim_step_2": lambda t: torch.stack([t, torch.zeros_like(t)], dim=-1).flatten(-2)[..., ::2],
    # every third row of the first dim, from a taller tensor (an odd outer stride)
    "outer_step_3": lambda t: torch.cat(
        [t.unsqueeze(1), torch.zeros_like(t).unsqueeze(1).expand(-1, 2, *t.shape[1:])], dim=1
    ).flatten(0, 1)[::3],
    # contiguous, but one element into its storage (not 16-byte aligned)
    "offset_1": lambda t: torch.cat([torch.zeros(1, dtype=t.dtype, device=t.device), t.flatten()])[1:].view(t.shape),
}


def _expanded(t: torch.Tensor) -> torch.Tensor | None:
    """t with its first dim made of one row repeated through stride 0 (an expanded view), when it has one."""
    if t.dim() < 2:
        return None
    row = t[:1]
    return row.expand(t.shape)


def _layouts(t: torch.Tensor) -> dict[str, torch.Tensor]:
    """The views of t that are really strided (a 1-D tensor has no transposed view, for example)."""
    views = {name: make(t) for name, make in LAYOUTS.items()}
    expanded = _expanded(t)
    if expanded is not None:
        views["expanded"] = expanded
    return {name: v for name, v in views.items() if name == "offset_1" or not v.is_contiguous()}


def _seed() -> int:
    return int(os.environ.get("LTX_TEST_SEED") or secrets.randbits(62))


def _outputs(result: object) -> tuple[torch.Tensor, ...]:
    return result if isinstance(result, tuple) else (result,)


def _close(got: object, want: object, dtype: torch.dtype, seed: int, what: str) -> None:
    for g, w in zip(_outputs(got), _outputs(want)):
        assert g.dtype == dtype and g.shape == w.shape and g.is_contiguous(), what
        torch.testing.assert_close(
            g.double().cpu(),
            w.double().cpu(),
            **ref.tolerance(dtype),
            equal_nan=True,
            msg=lambda m: f"{what}: {m}\n(replay with LTX_TEST_SEED={seed})",
        )


def _require_backend(ltx, device: str) -> None:
    try:
        ltx.gelu_tanh(torch.zeros(1, device=device))
    except NotImplementedError:
        pytest.skip(f"the loaded ltx-kernels variant has no {device} implementation")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", OP_NAMES)
def test_every_argument_in_every_layout_gives_the_contiguous_result(ltx, record, device, op_name):
    """Each tensor argument of the op in turn, as a transposed, stepped, offset or expanded view: the
    op returns the float64 reference's values, and on CPU exactly what it returns for contiguous inputs."""
    _require_backend(ltx, device)
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    op = next(o for o in _ops(ltx) if o.name == op_name)
    cases = 0
    for dtype in (torch.float32, torch.bfloat16):
        args = {k: (v.to(device) if v is not None else None) for k, v in op.make(gen, dtype).items()}
        want = op.reference(args)
        plain = op.call(args)
        _close(plain, want, dtype, seed, f"{op_name} contiguous")
        for name, t in args.items():
            for layout, view in _layouts(t).items():
                strided = {**args, name: view}
                assert layout == "expanded" or torch.equal(view, t)
                what = f"{op_name}({name} {layout}, {dtype})"
                got = op.call(strided)
                cases += 1
                if layout == "expanded":  # other values than t: compare with its own reference
                    _close(got, op.reference(strided), dtype, seed, what)
                    continue
                _close(got, want, dtype, seed, what)
                if device == "cpu":
                    for g, p in zip(_outputs(got), _outputs(plain)):
                        assert torch.equal(g, p), f"{what} differs from the contiguous call (seed {seed})"
    record(cases=cases, failures=0, seed=seed, op=op_name, device=device)


# --------------------------------------------------------------------------------------------------
# Fuzzing: random mutations of valid arguments.

FUZZ_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
    torch.uint8,
]


def _mutate(gen: torch.Generator, t: torch.Tensor | None, optional: bool) -> tuple[torch.Tensor | None, str]:
    """One random change to an argument (or none): dtype, shape, stride, empty, NaN/inf, missing."""

    def pick(n: int) -> int:
        return int(torch.randint(n, (1,), generator=gen))

    if t is None:
        return None, "none"
    kind = pick(12)
    if kind == 0:
        dtype = FUZZ_DTYPES[pick(len(FUZZ_DTYPES))]
        return t.to(dtype), f"dtype {dtype}"
    if kind == 1:
        rank = pick(5)
        shape = [pick(5) + (pick(2) * 20) for _ in range(rank)]
        return torch.randn(shape, generator=gen).to(t.dtype).to(t.device), f"shape {shape}"
    if kind == 2 and t.dim() > 0:
        dim = pick(t.dim())
        return t.narrow(dim, 0, 0), f"empty dim {dim}"
    if kind == 3 and t.dim() > 0:
        layout = list(LAYOUTS)[pick(len(LAYOUTS))]
        return LAYOUTS[layout](t), f"layout {layout}"
    if kind == 4 and t.is_floating_point() and t.numel():
        flat = t.clone().flatten()
        special = [math.nan, math.inf, -math.inf][pick(3)]
        flat[pick(flat.numel())] = special
        return flat.view(t.shape), f"value {special}"
    if kind == 5 and t.dim() > 0:
        return t.unsqueeze(pick(t.dim() + 1)), "unsqueezed"
    if kind == 6 and t.dim() > 0:
        return t.sum(-1), "one dim fewer"
    if kind == 7:
        return torch.tensor(1.5, dtype=t.dtype, device=t.device), "0-d"
    if kind == 8 and optional:
        return None, "none"
    if kind == 9 and t.dim() > 0 and t.shape[-1] > 1:
        return t[..., : t.shape[-1] - 1 - pick(t.shape[-1] - 1)], "last dim shorter (odd)"
    if kind == 10 and t.is_floating_point():
        return t * 1e30, "huge values"
    return t, "unchanged"


def _tame(v: torch.Tensor | None) -> bool:
    """A value the float64 reference and the kernel agree on within tolerance: finite and moderate."""
    if v is None or v.numel() == 0:
        return True
    return v.is_floating_point() and bool(v.isfinite().all()) and float(v.abs().max()) < 1e4


@pytest.mark.parametrize("device", DEVICES)
def test_fuzzed_arguments_give_results_or_one_line_errors(ltx, record, device):
    """400 calls with 1-3 arguments mutated: each returns the reference's result (finite inputs) or
    raises a RuntimeError 'ltx_kernels.<op>: ...' of one line; never another exception or a crash."""
    _require_backend(ltx, device)
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    ops = _ops(ltx)
    optional = {"weight", "gate"}  # the arguments that may be None
    cases = failures = clean_errors = results = checked = 0
    problems: list[str] = []
    for i in range(400):
        op = ops[int(torch.randint(len(ops), (1,), generator=gen))]
        dtype = [torch.float32, torch.float16, torch.bfloat16][int(torch.randint(3, (1,), generator=gen))]
        args = op.make(gen, dtype)
        names = list(args)
        changes = []
        for _ in range(1 + int(torch.randint(3, (1,), generator=gen))):
            name = names[int(torch.randint(len(names), (1,), generator=gen))]
            args[name], change = _mutate(gen, args[name], name in optional)
            changes.append(f"{name}: {change}")
        args = {k: (v.to(device) if v is not None else None) for k, v in args.items()}
        what = f"case {i} {op.name}({', '.join(changes)})"
        cases += 1
        try:
            out = op.call(args)
        except RuntimeError as e:
            message = str(e)
            if message.startswith(f"ltx_kernels.{op.name}: ") and "\n" not in message.strip():
                clean_errors += 1
                continue
            failures += 1
            problems.append(f"{what}: RuntimeError without the op's one-line message: {message[:300]!r}")
            continue
        except Exception as e:  # noqa: BLE001 - any other exception is what this test hunts
            failures += 1
            problems.append(f"{what}: {type(e).__name__}: {str(e)[:300]}")
            continue
        results += 1
        if all(_tame(v) for v in args.values()):
            checked += 1
            try:
                _close(out, op.reference(args), args[names[0]].dtype, seed, what)
            except AssertionError as e:
                failures += 1
                problems.append(f"{what}: wrong result: {str(e)[:300]}")
    record(
        cases=cases,
        failures=failures,
        seed=seed,
        device=device,
        clean_errors=clean_errors,
        results=results,
        checked_against_reference=checked,
    )
    assert not problems, f"seed {seed} (replay with LTX_TEST_SEED={seed}):\n" + "\n".join(problems[:40])
    assert clean_errors > 50 and results > 50, (clean_errors, results)


@pytest.mark.parametrize("device", DEVICES)
def test_gelu_tanh_infinities_and_nan_like_the_limit(ltx, device):
    """-inf -> 0 (gelu's limit; the tanh formula gives -inf * 0), +inf -> +inf, NaN -> NaN, in every dtype
    and in strided views."""
    _require_backend(ltx, device)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.tensor(
            [[-math.inf, math.inf, math.nan, -1.0], [0.0, 2.0, -20.0, -math.inf]], dtype=dtype, device=device
        )
        for view in (x, x.t().contiguous().t()):
            out = ltx.gelu_tanh(view).double().cpu()
            assert out[0, 0] == 0 and out[1, 3] == 0 and out[0, 1] == math.inf and out[0, 2].isnan()
            assert out[1, 2] == 0 and out[1, 0] == 0
