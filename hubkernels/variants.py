"""Which build variants can load here, best first, and why the others cannot.

The rules and the preference order are HF `kernels`' (release `KERNELS_COMPAT`): `reject_reason` is its
acceptance check, `preference_key` its sort key, so both loaders pick the same variant of a repository.
`DIFFERENCES` lists, one line each, where hubkernels knowingly decides otherwise; `hubkernels variants`
prints them. Every rejection carries a sentence saying why, and the trace a user reads is the one we act on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from .errors import UsageError, VariantNotFoundError
from .system import System, Variant

#: The HF `kernels` release whose resolution, capability and `kernels-minver` rules this module follows.
KERNELS_COMPAT = (0, 17, 2)

#: Where hubkernels knowingly decides otherwise than `kernels` KERNELS_COMPAT, one line each.
DIFFERENCES = (
    "tvm-ffi variants are never chosen (hubkernels does not load apache-tvm-ffi); kernels takes one that matches "
    "an installed tvm_ffi, and then, for a backend minor of 0, ties it with torch-<backend> in set order",
    "variants of equal preference are ordered by name; kernels keeps the order of a Python set, which changes "
    "with the hash seed",
    "a CUDA/ROCm build loads if any visible GPU supports it; kernels checks only the current device, and "
    "get_local_kernel not at all",
    "kernels-minver is compared with 0.17.2, the kernels release hubkernels follows; kernels compares it with "
    "its own installed version",
)

#: Oldest torch minor with stable-ABI builds; only bounds the list `system_variants` prints.
_STABLE_ABI_FIRST_MINOR = 9
_METAL_MIN_MACOS = (26, 0)
_VERSIONED_BACKENDS = ("cuda", "rocm", "xpu", "cann")


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


def reject_reason(variant: Variant, system: System, backend: str | None = None) -> str | None:
    """Why `variant` cannot load on `system` (None if it can). The single source of the matching rules."""
    want = _backend_for(system, backend)
    if variant.kind == "noarch":
        noarch = "npu" if want == "cann" else want
        if variant.backend in (noarch, "universal"):
            return None
        return f"noarch build for {variant.backend}, this system uses {noarch}"
    if system.free_threaded:
        return "free-threaded Python before 3.15 cannot load arch builds (ABI3); use a noarch variant or a GIL build"
    if variant.cpu != system.cpu:
        return f"built for CPU {variant.cpu}, this machine is {system.cpu}"
    if variant.os != system.os:
        return f"built for {variant.os}, this machine runs {system.os}"
    fw = variant.framework_version
    if variant.kind == "torch":
        if fw != system.torch_version:
            return f"built for torch {_v(fw)}, installed torch is {_v(system.torch_version)} (exact minor required)"
        if variant.abi is not None and variant.abi != system.cxx_abi:
            if system.cxx_abi is None:
                return f"tagged with the {variant.abi} C++ ABI, which only Linux torch builds have"
            return f"built with the {variant.abi} C++ ABI, torch uses {system.cxx_abi}"
    elif variant.kind == "stable-abi":
        if fw is None or fw > system.torch_version:
            return f"needs torch >= {_v(fw)} (stable ABI), installed torch is {_v(system.torch_version)}"
    else:
        return "tvm-ffi variants need apache-tvm-ffi, which hubkernels does not load"
    if want == "cuda" and variant.backend == "cuda":
        sv, vv = system.backend_version, variant.backend_version
        if sv is None or vv is None or vv[0] != sv[0] or vv[1] > sv[1]:
            return f"built with CUDA {_v(vv)}, torch uses CUDA {_v(sv)} (same major, minor <= torch's required)"
        return None
    have = system.backend_version if want == system.backend else None
    if variant.backend != want or variant.backend_version != have:
        return (
            f"built for {_backend_name(variant.backend, variant.backend_version)}, this system uses "
            f"{_backend_name(want, have)}"
        )
    if want == "metal" and (system.macos_version is None or system.macos_version < _METAL_MIN_MACOS):
        return f"Metal builds need macOS >= {_v(_METAL_MIN_MACOS)}, this is {_v(system.macos_version)}"
    return None


def preference_key(variant: Variant) -> tuple[int, int, int, int]:
    """`kernels`' order for accepted variants (smaller is better): the stable ABI, newest first; then exact-torch
    builds, tagless before `-cxx11`; then tvm-ffi; each by the highest backend minor; then torch-<backend>, and
    torch-universal last."""
    if variant.kind == "noarch":
        return (2, 0, 0, 1 if variant.backend == "universal" else 0)
    if variant.kind == "stable-abi":
        major, minor = variant.framework_version or (0, 0)
        framework = (0, -major, -minor)
    elif variant.kind == "torch":
        framework = (1, 0, 1 if variant.abi is not None else 0)
    else:
        framework = (2, 0, 0)
    minor = variant.backend_version[1] if variant.backend in _VERSIONED_BACKENDS and variant.backend_version else 0
    return (*framework, -minor)


def system_variants(system: System | None = None, backend: str | None = None) -> list[Variant]:
    """The variants that can load on `system`, best first (default: the running system)."""
    system = system or System.current()
    want = _backend_for(system, backend)
    accepted = {v for v in _candidates(system, want) if reject_reason(v, system, backend) is None}
    return sorted(accepted, key=_order)


def resolve(available: Iterable[str], system: System | None = None, backend: str | None = None) -> Resolution:
    """Match the variant names a repository offers against the system; the most preferred acceptable one wins."""
    system = system or System.current()
    _backend_for(system, backend)  # a backend this system cannot use is a usage error, not a rejection
    accepted: list[Variant] = []
    rejected: list[Rejected] = []
    for name in sorted(set(available)):
        try:
            variant = Variant.parse(name)
        except ValueError as e:
            rejected.append(Rejected(name, f"not a variant name ({e})"))
            continue
        reason = reject_reason(variant, system, backend)
        if reason is None:
            accepted.append(variant)
        else:
            rejected.append(Rejected(name, reason))
    accepted.sort(key=_order)
    trace = tuple(Accepted(v) for v in accepted) + tuple(rejected)
    return Resolution(accepted[0] if accepted else None, trace)


def require(resolution: Resolution, where: str) -> Variant:
    """The chosen variant, or a VariantNotFoundError carrying the whole trace and what to do."""
    if resolution.chosen is None:
        raise VariantNotFoundError(
            f"Cannot find a build variant for this system in {where}.\n{resolution.describe()}\n"
            "Build one for this machine with `hubkernels build`, or ask the publisher for this variant."
        )
    return resolution.chosen


def cuda_arch_supports(arch: str, capability: tuple[int, int]) -> bool | None:
    """Does a declared CUDA arch (`9.0`, `9.0a`, `10.0f`, `8.0+PTX`) run on `capability`? None: unknown spelling.

    `a` builds run on that exact capability; `f` (family) and plain builds on the same major with an equal or newer
    minor; `+PTX` on any equal or newer capability.
    """
    ptx = arch.endswith("+PTX")
    base = arch.removesuffix("+PTX")
    suffix = base[-1:] if base.endswith(("a", "f")) else ""
    major_s, sep, minor_s = base.removesuffix(suffix).partition(".")
    if not sep or not major_s.isdigit() or not minor_s.isdigit():
        return None
    arch_cap = (int(major_s), int(minor_s))
    if suffix == "a":
        return capability == arch_cap
    if ptx and not suffix:
        return capability >= arch_cap
    return capability[0] == arch_cap[0] and capability[1] >= arch_cap[1]


def archs_support(archs: Sequence[str], capability: tuple[int, int]) -> bool:
    """Does a build declaring CUDA `archs` run on `capability`? True when no arch is in a known spelling."""
    verdicts = [cuda_arch_supports(a, capability) for a in archs]
    return all(v is None for v in verdicts) or any(verdicts)


def minver_reason(minver: object) -> str | None:
    """Why a variant whose metadata says `kernels-minver: minver` cannot load (None if it can)."""
    if minver is None:
        return None
    parts = str(minver).split(".")
    if not isinstance(minver, str) or len(parts) != 3 or not all(p.isdigit() for p in parts):
        return f"its metadata.json has kernels-minver {minver!r}, not a version X.Y.Z, so kernels cannot read it"
    if tuple(int(p) for p in parts) > KERNELS_COMPAT:
        return (
            f"it requires kernels>={minver}, and hubkernels follows kernels "
            f"{'.'.join(map(str, KERNELS_COMPAT))}; use a variant or version built for that release"
        )
    return None


def _backend_for(system: System, backend: str | None) -> str:
    if backend is None or backend == system.backend:
        return system.backend
    if backend == "cpu":
        return "cpu"
    raise UsageError(f"backend={backend!r} is not available here: this torch supports {system.backend!r} and 'cpu'")


def _order(variant: Variant) -> tuple[tuple[int, int, int, int], str]:
    return preference_key(variant), str(variant)


def _backend_name(backend: str, version: tuple[int, int] | None) -> str:
    name = {"cuda": "CUDA", "rocm": "ROCm", "xpu": "XPU", "cann": "CANN"}.get(backend, backend)
    return name if version is None else f"{name} {_v(version)}"


def _v(version: tuple[int, ...] | None) -> str:
    return "none" if version is None else ".".join(map(str, version))


def _candidates(system: System, want: str) -> Iterator[Variant]:
    """The variants worth listing for `system` (resolution itself never enumerates: it checks what a repo offers)."""
    cpu, os_ = system.cpu, system.os
    if want == system.backend and system.backend_version is not None:
        major, minor = system.backend_version
        bversions: list[tuple[int, int] | None] = (
            [(major, m) for m in range(minor, -1, -1)] if want == "cuda" else [system.backend_version]
        )
    else:
        bversions = [None]
    tmajor, tminor = system.torch_version
    for bv in bversions:
        for abi in (None, system.cxx_abi) if system.cxx_abi else (None,):
            yield Variant("torch", want, system.torch_version, abi, bv, cpu, os_)
        for m in range(tminor, _STABLE_ABI_FIRST_MINOR - 1, -1):
            yield Variant("stable-abi", want, (tmajor, m), None, bv, cpu, os_)
    yield Variant("noarch", "npu" if want == "cann" else want)
    yield Variant("noarch", "universal")
