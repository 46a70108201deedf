"""Package one build variant as a variant wheel (PEP 825, as `variantlib` reads it), for pip, uv and the Hub.

Every variant of a kernel version shares one public version; the variant is in the wheel variant label
(`ltx_kernels-1-cp310-abi3-manylinux_2_28_x86_64-cu130.whl`) and in `<dist-info>/variant.json`:

| Hub variant | label | properties |
|---|---|---|
| `torch-stable-abi*-cpu-*` | `null` (the null variant) | none |
| `torch-stable-abi*-cuMMm-*` | `cuMMm` | `nvidia :: cuda_version_lower_bound`, `nvidia :: sm_arch` (one per arch) |
| `torchMm-cxx11-cpu-*` (full ABI) | `torchMm_cpu` | `abi_dependency :: torch :: M.m` |
| `torchMm-cxx11-cuMMm-*` | `torchMm_cuMMm` | the CUDA ones and `abi_dependency :: torch` |

The wheel's package directory holds exactly the variant's Hub-layout files (metadata.json and its digest
included), so a wheel, a Hub download and a local build are the same bytes. A version's wheels are described
together by `<dist>-<version>-variants.json` (`variant_json` of them all).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ..errors import UsageError
from ..layout import VARIANT_RECORD, plain_name, shipped_files, variants_index_name, wheel_label  # noqa: F401  (re-exported)
from ..metadata import Metadata
from ..system import Variant
from .slice import sm_of

#: PEP 825's schema of variant.json / variants.json (variantlib 0.2).
SCHEMA = "https://variants-schema.wheelnext.dev/v0.2.0.json"
NULL_LABEL = "null"
#: The provider plugin installers run to learn this machine's `nvidia` properties.
NVIDIA_PROVIDER = {
    "requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
    "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
}
# Fixed timestamp for reproducible wheels (zip cannot store dates before 1980).
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class WheelVariant:
    """A wheel variant: its label and its properties as `(namespace, feature, value)`, sorted."""

    label: str
    properties: tuple[tuple[str, str, str], ...] = ()

    @property
    def null(self) -> bool:
        return not self.properties

    def as_json(self) -> dict[str, dict[str, list[str]]]:
        """The properties as variant.json's `variants.<label>` mapping."""
        out: dict[str, dict[str, list[str]]] = {}
        for namespace, feature, value in self.properties:
            out.setdefault(namespace, {}).setdefault(feature, []).append(value)
        return out


def wheel_variant(variant: Variant, meta: Metadata) -> WheelVariant:
    """The wheel variant of a Hub variant (the table in the module doc); UsageError for backends without one."""
    props: list[tuple[str, str, str]] = []
    parts: list[str] = []
    if variant.kind == "torch" and variant.framework_version:
        major, minor = variant.framework_version
        props.append(("abi_dependency", "torch", f"{major}.{minor}"))
        parts.append(f"torch{major}{minor}" + ("_cxx98" if variant.abi == "cxx98" else ""))
    elif variant.kind not in ("stable-abi", "noarch"):
        raise UsageError(f"{variant}: a {variant.kind} variant has no wheel variant; pack a torch or stable-ABI one")
    elif variant.kind == "noarch" and variant.backend not in ("cpu", "universal"):
        raise UsageError(
            f"{variant}: a noarch {variant.backend} variant has no wheel variant (no property says "
            "'any version'); its files load from the Hub layout"
        )
    if variant.backend == "cuda":
        if variant.backend_version is not None:
            props.append(("nvidia", "cuda_version_lower_bound", "{}.{}".format(*variant.backend_version)))
        props += [("nvidia", "sm_arch", arch.removesuffix("+PTX")) for arch in meta.archs]
        parts.append(variant.compute)
    elif variant.backend not in ("cpu", "universal"):
        raise UsageError(f"{variant}: wheels are made for CPU and CUDA variants, not {variant.backend}")
    elif parts:
        parts.append(variant.compute)
    return WheelVariant("_".join(parts) if props else NULL_LABEL, tuple(sorted(set(props))))


def variant_json(variants: list[WheelVariant]) -> dict:
    """PEP 825's JSON for `variants` (one: a wheel's variant.json; all of a version's: its variants.json).

    Namespaces rank `nvidia` first, then `abi_dependency` (the installers' builtin provider) where a full-ABI
    wheel uses it, so the files of one version merge (PEP 825's prefix rule)."""
    providers: dict = {"nvidia": NVIDIA_PROVIDER}
    if any(ns == "abi_dependency" for v in variants for ns, _, _ in v.properties):
        providers["abi_dependency"] = {"builtin": "abi_dependency"}
    return {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": list(providers)},
        "providers": providers,
        "variants": {v.label: v.as_json() for v in sorted(variants, key=lambda v: v.label)},
    }


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _platform(variant: Variant, manylinux: str | None) -> str:
    if variant.os == "linux":
        return f"{manylinux or 'linux'}_{variant.cpu or 'any'}"
    return f"{variant.os}_{variant.cpu}"


def wheel_tag(variant: Variant, manylinux: str | None) -> str:
    """The wheel's `python-abi-platform` tag: any Python for noarch, else the limited API of CPython 3.10+."""
    return "py3-none-any" if variant.kind == "noarch" else f"cp310-abi3-{_platform(variant, manylinux)}"


def wheel_name(meta: Metadata, variant: Variant, manylinux: str | None, wv: WheelVariant | None = None) -> str:
    """The wheel's file name: `<dist>-<version>-<tag>-<label>.whl` (PEP 427 + PEP 825), without the label for a
    variant PEP 825 cannot describe (`variant_or_none`)."""
    base = f"{meta.python_name}-{meta.version}-{wheel_tag(variant, manylinux)}"
    return f"{base}-{wv.label}.whl" if wv is not None else f"{base}.whl"


def variant_or_none(variant: Variant, meta: Metadata) -> WheelVariant | None:
    """`wheel_variant`, or None for a variant without one (noarch CUDA, ROCm, ...)."""
    try:
        return wheel_variant(variant, meta)
    except UsageError:
        return None


def pack(variant_dir: str | Path, out_dir: str | Path, *, any_variant: bool = False, sliced: bool = False) -> Path:
    """`build_wheel`, tagged manylinux_2_28 when the variant's modules pass kernel-abi-check's manylinux check."""
    from .abi import check_abi

    portable = not any(p.startswith("manylinux") for so in Path(variant_dir).glob("*.so") for p in check_abi(so))
    return build_wheel(
        variant_dir, out_dir, manylinux="manylinux_2_28" if portable else None, any_variant=any_variant, sliced=sliced
    )


def slice_label(label: str, arch: str) -> str:
    """The label of a per-arch slice (`hubkernels.builder.slice`) of the variant labelled `label`:
    `cu130` -> `cu130_sm90`."""
    return f"{label}_sm{sm_of(arch)}"


def build_wheel(
    variant_dir: str | Path,
    out_dir: str | Path,
    *,
    manylinux: str | None = "manylinux_2_28",
    any_variant: bool = False,
    sliced: bool = False,
) -> Path:
    """Write the variant wheel of one built variant into `out_dir` and return its path (same bytes each time).

    `any_variant=True`: a variant PEP 825 cannot describe gets a wheel without label or variant.json (the
    loader's artifact of it, which the package index does not list) instead of a UsageError. `sliced=True`: the
    directory is a one-arch slice of a CUDA variant (`slice_label`)."""
    variant_dir = Path(variant_dir)
    meta = Metadata.read(variant_dir)
    variant = Variant.parse(variant_dir.name)
    wv = variant_or_none(variant, meta) if any_variant else wheel_variant(variant, meta)
    if sliced and wv is not None and len(meta.archs) == 1:
        wv = WheelVariant(slice_label(wv.label, meta.archs[0]), wv.properties)
    name = wheel_name(meta, variant, manylinux, wv)
    dist, version = meta.python_name, str(meta.version)
    info = f"{dist}-{version}.dist-info"
    requires = []
    if variant.kind == "torch" and variant.framework_version:
        requires.append(f"torch=={variant.framework_version[0]}.{variant.framework_version[1]}.*")
    elif variant.kind == "stable-abi" and variant.framework_version:
        requires.append(f"torch>={variant.framework_version[0]}.{variant.framework_version[1]}")
    requires += meta.python_depends
    files: dict[str, bytes] = {f"{dist}/{rel}": p.read_bytes() for rel, p in shipped_files(variant_dir)}
    files[f"{info}/METADATA"] = "\n".join(
        [
            "Metadata-Version: 2.1",
            f"Name: {dist}",
            f"Version: {version}",
            f"License: {meta.license}",
            "Requires-Python: >=3.10",
            *[f"Requires-Dist: {r}" for r in requires],
            f"Summary: {meta.name} kernel, build variant {variant_dir.name} ({meta.id})",
            "",
        ]
    ).encode()
    files[f"{info}/WHEEL"] = "\n".join(
        [
            "Wheel-Version: 1.0",
            f"Generator: hubkernels {__version__}",
            "Root-Is-Purelib: false",
            f"Tag: {wheel_tag(variant, manylinux)}",
            "",
        ]
    ).encode()
    files[f"{info}/{VARIANT_RECORD}"] = f"{variant_dir.name}\n".encode()  # get_local_kernel(installed package)
    if wv is not None:
        files[f"{info}/variant.json"] = (json.dumps(variant_json([wv]), indent=2, sort_keys=True) + "\n").encode()
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / name
    tmp = target.with_suffix(".partial")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, date_time=_ZIP_DATE)
            entry.external_attr = 0o644 << 16
            zf.writestr(entry, data, compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(target)
    return target
