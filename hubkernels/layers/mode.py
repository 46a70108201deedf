"""`Mode`: what a model is kernelized for (inference or training, with or without torch.compile)."""

from __future__ import annotations

from enum import Flag, auto


class Mode(Flag):
    """Kernelize mode, with HF `kernels`' rules.

    `INFERENCE` and `TRAINING` exclude each other; either may add `TORCH_COMPILE`. `FALLBACK` is only
    for mappings (the layer used when no other mode matches) and combines with nothing.
    """

    _NONE = 0
    FALLBACK = auto()
    TRAINING = auto()
    INFERENCE = auto()
    TORCH_COMPILE = auto()

    def __or__(self, other: "Mode") -> "Mode":
        union = super().__or__(other)
        if Mode.INFERENCE in union and Mode.TRAINING in union:
            raise ValueError("Mode.INFERENCE and Mode.TRAINING are mutually exclusive.")
        if Mode.FALLBACK in union and union != Mode.FALLBACK:
            raise ValueError("Mode.FALLBACK cannot be combined with other modes.")
        return union


#: For a kernelize mode, the registered modes to try, best first (HF `kernels`' order).
MODE_PRIORITY: dict[Mode, tuple[Mode, ...]] = {
    Mode.INFERENCE: (
        Mode.INFERENCE,
        Mode.INFERENCE | Mode.TORCH_COMPILE,
        Mode.TRAINING,
        Mode.TRAINING | Mode.TORCH_COMPILE,
        Mode.FALLBACK,
    ),
    Mode.INFERENCE | Mode.TORCH_COMPILE: (
        Mode.INFERENCE | Mode.TORCH_COMPILE,
        Mode.TRAINING | Mode.TORCH_COMPILE,
        Mode.FALLBACK,
    ),
    Mode.TRAINING: (Mode.TRAINING, Mode.TRAINING | Mode.TORCH_COMPILE, Mode.FALLBACK),
    Mode.TRAINING | Mode.TORCH_COMPILE: (Mode.TRAINING | Mode.TORCH_COMPILE, Mode.FALLBACK),
}


def check_kernelize_mode(mode: Mode) -> None:
    """Refuse modes kernelize cannot run in (FALLBACK, or neither INFERENCE nor TRAINING)."""
    if not isinstance(mode, Mode):
        raise TypeError(f"mode must be a hubkernels.Mode, got {mode!r}")
    flags: Mode = mode  # kept as a Mode: the FALLBACK test below narrows `mode` to the other members
    if mode == Mode.FALLBACK:
        raise ValueError(
            "Mode.FALLBACK can only be used to register kernel mappings; kernelize with "
            "Mode.INFERENCE or Mode.TRAINING (optionally | Mode.TORCH_COMPILE)."
        )
    if Mode.INFERENCE not in flags and Mode.TRAINING not in flags:
        raise ValueError("kernelize mode must contain Mode.INFERENCE or Mode.TRAINING.")
