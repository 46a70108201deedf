"""Package one build variant as a wheel, for those who deploy with pip instead of the Hub.

The wheel installs the variant as the kernel's own package (`ltx_kernels`), pins the torch minor it was
built against, and carries the variant in its version's local label so wheels of several variants of one
kernel can sit in one index: `ltx_kernels-1+torch213.cxx11.cpu-cp310-abi3-manylinux_2_28_x86_64.whl`.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from ._version import __version__
from .layout import shipped_files
from .metadata import Metadata
from .platform import Variant


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_name(meta: Metadata, variant: Variant, manylinux: str | None) -> str:
    """The wheel's file name for `variant` (PEP 427), with the variant as the version's local label."""
    dist = meta.python_name
    if variant.kind == "noarch":
        return f"{dist}-{meta.version}+{variant.backend}-py3-none-any.whl"
    local = ".".join(str(variant).split("-")[:-2])  # cpu and os are in the platform tag already
    platform = (manylinux or variant.os) + "_" + (variant.cpu or "any") if variant.os == "linux" else \
        f"{variant.os}_{variant.cpu}"
    return f"{dist}-{meta.version}+{local}-cp310-abi3-{platform}.whl"


def build_wheel(variant_dir: str | Path, out_dir: str | Path, *, manylinux: str | None = "manylinux_2_28") -> Path:
    """Write the wheel of one built variant into `out_dir` and return its path."""
    variant_dir = Path(variant_dir)
    meta = Metadata.read(variant_dir)
    variant = Variant.parse(variant_dir.name)
    name = wheel_name(meta, variant, manylinux)
    dist, version = name.split("-")[0], name.split("-")[1]
    tag = "-".join(name[:-4].split("-")[2:])
    info = f"{dist}-{version}.dist-info"
    requires = []
    if variant.kind == "torch" and variant.framework_version:
        requires.append(f"torch=={variant.framework_version[0]}.{variant.framework_version[1]}.*")
    elif variant.kind == "stable-abi" and variant.framework_version:
        requires.append(f"torch>={variant.framework_version[0]}.{variant.framework_version[1]}")
    requires += meta.python_depends
    files: dict[str, bytes] = {}
    for rel, p in shipped_files(variant_dir):
        files[f"{dist}/{rel}"] = p.read_bytes()
    files[f"{info}/METADATA"] = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}", f"License: {meta.license}",
         "Requires-Python: >=3.10", *[f"Requires-Dist: {r}" for r in requires],
         f"Summary: {meta.name} kernel, build variant {variant_dir.name} ({meta.id})", ""]).encode()
    files[f"{info}/WHEEL"] = "\n".join(
        ["Wheel-Version: 1.0", f"Generator: hubkernels {__version__}", "Root-Is-Purelib: false", f"Tag: {tag}", ""]
    ).encode()
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files.items()] + [f"{info}/RECORD,,"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / name
    tmp = target.with_suffix(".partial")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    tmp.replace(target)
    return target
