"""Which build variants can load here, best first, and why the others cannot.

Like `packaging.tags.sys_tags()`: `system_variants()` yields the acceptable variants of a system in
priority order, and resolution takes the first one a repository offers. Rejection reasons come from the
same rules (`reject_reason`), so the trace a user reads and the choice we make never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .errors import UsageError, VariantNotFoundError
from .system import Variant, System

#: Oldest torch minor for which stable-ABI variants exist (torch 2.9).
_STABLE_ABI_FIRST_MINOR = 9
_METAL_MIN_MACOS = (26, 0)


@dataclass(frozen=True)
class Accepted:
    variant: Variant


@dataclass(frozen=True)
class Rejected:
    name: str
    reason: str


@dataclass(frozen=True)
class Resolution:
    """The outcome of matching a repository's variants against a system."""

    chosen: Variant | None
    trace: tuple[Accepted | Rejected, ...]

    def describe(self) -> str:
        """The trace as lines a user can read: accepted variants best first, then each rejection."""
        lines = []
        for i, entry in enumerate(self.trace):
            if isinstance(entry, Accepted):
                mark = "chosen" if i == 0 else "accepted"
                lines.append(f"  {mark:8} {entry.variant}")
            else:
                lines.append(f"  rejected {entry.name}: {entry.reason}")
        return "\n".join(lines) if lines else "  (the repository has no build variants)"


def _backend_for(system: System, backend: str | None) -> str:
    if backend is None or backend == system.backend:
        return system.backend
    if backend == "cpu":
        return "cpu"
    raise UsageError(f"backend={backend!r} is not available here: this torch supports {system.backend!r} and 'cpu'")


def reject_reason(variant: Variant, system: System, backend: str | None = None) -> str | None:
    """Why `variant` cannot load on `system` (None if it can). The single source of the matching rules."""
    want = _backend_for(system, backend)
    if variant.kind == "noarch":
        if variant.backend in (want, "universal") or (want == "cann" and variant.backend == "npu"):
            return None
        return f"noarch build for {variant.backend}, this system uses {want}"
    if system.free_threaded:
        return "free-threaded Python cannot load ABI3 extensions; use a noarch variant or a GIL build"
    if variant.cpu != system.cpu:
        return f"built for CPU {variant.cpu}, this machine is {system.cpu}"
    if variant.os != system.os:
        return f"built for {variant.os}, this machine runs {system.os}"
    if variant.backend != want:
        return f"built for {variant.backend}, this system uses {want}"
    fw = variant.framework_version
    if variant.kind == "torch":
        if fw != system.torch_version:
            return f"built for torch {fw[0]}.{fw[1]}, installed torch is {_v(system.torch_version)} (exact minor required)"  # type: ignore[index]
        if system.os == "linux" and variant.abi is not None and variant.abi != ("cxx11" if system.cxx11_abi else "cxx98"):
            return f"built with the {variant.abi} C++ ABI, torch uses {'cxx11' if system.cxx11_abi else 'cxx98'}"
    elif variant.kind == "stable-abi":
        if fw is None or fw > system.torch_version:
            return f"needs torch >= {_v(fw)} (stable ABI), installed torch is {_v(system.torch_version)}"
    else:
        return "tvm-ffi variants need apache-tvm-ffi, which hubkernels does not load"
    if want == "cuda":
        sv, vv = system.backend_version, variant.backend_version
        if sv is None or vv is None or vv[0] != sv[0] or vv[1] > sv[1]:
            return f"built with CUDA {_v(vv)}, torch uses CUDA {_v(sv)} (same major, minor <= torch's required)"
    elif variant.backend_version != (system.backend_version if want == system.backend else None):
        return f"built for {variant.compute}, this system has {want} {_v(system.backend_version)}"
    if want == "metal" and (system.macos_version or (0, 0)) < _METAL_MIN_MACOS:
        return f"Metal builds need macOS >= {_v(_METAL_MIN_MACOS)}"
    return None


def _v(version: tuple[int, int] | None) -> str:
    return "none" if version is None else f"{version[0]}.{version[1]}"


def _candidates(system: System, want: str) -> Iterator[Variant]:
    """Every variant that could fit `system`, in preference order (before the rules filter them)."""
    cpu, os_ = system.cpu, system.os
    if want == system.backend and system.backend_version is not None:
        major, minor = system.backend_version
        bversions: list[tuple[int, int] | None] = [(major, m) for m in range(minor, -1, -1)] if want == "cuda" \
            else [system.backend_version]
    else:
        bversions = [None]
    abis: list[str | None] = [("cxx11" if system.cxx11_abi else "cxx98"), None] if os_ == "linux" else [None]
    for bv in bversions:  # exact torch builds first: the most specific, compiled for this very torch
        for abi in abis:
            yield Variant("torch", want, system.torch_version, abi, bv, cpu, os_)
    tmajor, tminor = system.torch_version
    for m in range(tminor, _STABLE_ABI_FIRST_MINOR - 1, -1):  # then the stable ABI, newest first
        for bv in bversions:
            yield Variant("stable-abi", want, (tmajor, m), None, bv, cpu, os_)
    yield Variant("noarch", "npu" if want == "cann" else want)
    yield Variant("noarch", "universal")


def system_variants(system: System | None = None, backend: str | None = None) -> list[Variant]:
    """The variants that can load on `system`, best first (default: the running system)."""
    system = system or System.current()
    want = _backend_for(system, backend)
    return [v for v in _candidates(system, want) if reject_reason(v, system, backend) is None]


def resolve(available: Iterable[str], system: System | None = None, backend: str | None = None) -> Resolution:
    """Match the variant names a repository offers against the system; the first acceptable one wins."""
    system = system or System.current()
    names = sorted(set(available))
    offered: dict[Variant, str] = {}
    rejected: list[Rejected] = []
    for name in names:
        try:
            offered[Variant.parse(name)] = name
        except ValueError as e:
            rejected.append(Rejected(name, f"not a variant name ({e})"))
    accepted = [Accepted(v) for v in system_variants(system, backend) if v in offered]
    acceptable = {a.variant for a in accepted}
    for v, name in offered.items():
        if v not in acceptable:
            rejected.append(Rejected(name, reject_reason(v, system, backend) or "not preferred on this system"))
    rejected.sort(key=lambda r: r.name)
    return Resolution(accepted[0].variant if accepted else None, tuple(accepted) + tuple(rejected))


def require(resolution: Resolution, where: str) -> Variant:
    """The chosen variant, or a VariantNotFoundError carrying the whole trace and what to do."""
    if resolution.chosen is None:
        raise VariantNotFoundError(
            f"Cannot find a build variant for this system in {where}.\n{resolution.describe()}\n"
            "Build one for this machine with `hubkernels build`, or ask the publisher for this variant."
        )
    return resolution.chosen
