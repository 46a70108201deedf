"""Variant wheels (PEP 825): `hubkernels build --wheel` packs a built variant into a wheel of one public version whose
label and variant.json say which machines it is for, and whose files are the variant's Hub-layout files.

variantlib (the reference implementation, from the package index) reads back every wheel's metadata.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hubkernels import digest
from hubkernels.builder.wheel import build_wheel, plain_name, variant_json, wheel_label, wheel_variant
from hubkernels.layout import shipped_files
from hubkernels.metadata import Metadata
from hubkernels.system import Variant

variantlib = pytest.importorskip("variantlib", reason="the test extra installs variantlib (pip install -e .[test])")

ROOT = Path(__file__).resolve().parent.parent


def _variantlib_label(wheel: Path) -> str:
    """The label variantlib reads from the wheel's name, after validating its variant.json against that label."""
    from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX
    from variantlib.variant_dist_info import VariantDistInfo

    match = VALIDATION_WHEEL_NAME_REGEX.fullmatch(wheel.name)
    assert match is not None and match.group("variant_label"), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        raw = next(zf.read(n) for n in zf.namelist() if n.endswith(".dist-info/variant.json"))
    return VariantDistInfo(raw, match.group("variant_label")).variant_label


def test_ltx_wheel_is_the_hub_layout_variant_byte_for_byte(ltx_build, tmp_path: Path) -> None:
    wheel = build_wheel(ltx_build.path, tmp_path)
    meta = Metadata.read(ltx_build.path)
    assert wheel.name.startswith("ltx_kernels-1-cp310-abi3-") and "+" not in wheel.name  # one public version
    assert _variantlib_label(wheel) == "null"  # the stable-ABI CPU build is the null variant

    with zipfile.ZipFile(wheel) as zf:
        packed = {n[len("ltx_kernels/") :]: zf.read(n) for n in zf.namelist() if n.startswith("ltx_kernels/")}
        record = zf.read("ltx_kernels-1.dist-info/RECORD").decode()
    assert packed == {rel: p.read_bytes() for rel, p in shipped_files(ltx_build.path)}
    packed_meta = Metadata.parse(packed["metadata.json"])
    assert packed_meta.digest == meta.digest
    files = {rel: digest.hash_bytes(data) for rel, data in packed.items() if rel not in digest.EXCLUDED_TOP_LEVEL}
    assert files == packed_meta.digest["files"]
    assert all(f"ltx_kernels/{rel}," in record for rel in packed)

    again = build_wheel(ltx_build.path, tmp_path / "again")
    assert again.read_bytes() == wheel.read_bytes()  # reproducible: the same build packs the same bytes


def _fake_variant(root: Path, name: str, backend: dict) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "__init__.py").write_text("VALUE = 1\n")
    meta = Metadata(
        name="ltx-kernels",
        id=f"_ltx_kernels_{backend['type']}_abcdef0",
        version=1,
        license="Apache-2.0",
        backend=backend,
    )
    meta.digest = {"algorithm": "sha256", "files": digest.hash_variant(d)}
    meta.write(d)
    return d


@pytest.mark.parametrize(
    ("name", "backend", "label", "properties"),
    [
        (
            "torch-stable-abi211-cu130-x86_64-linux",
            {"type": "cuda", "archs": ["8.0", "9.0+PTX"]},
            "cu130",
            ["nvidia :: cuda_version_lower_bound :: 13.0", "nvidia :: sm_arch :: 8.0", "nvidia :: sm_arch :: 9.0"],
        ),
        ("torch213-cxx11-cpu-x86_64-linux", {"type": "cpu"}, "torch213_cpu", ["abi_dependency :: torch :: 2.13"]),
        (
            "torch212-cxx11-cu126-x86_64-linux",
            {"type": "cuda", "archs": ["9.0"]},
            "torch212_cu126",
            [
                "abi_dependency :: torch :: 2.12",
                "nvidia :: cuda_version_lower_bound :: 12.6",
                "nvidia :: sm_arch :: 9.0",
            ],
        ),
    ],
)
def test_cuda_and_full_abi_variants_carry_their_properties(
    tmp_path: Path, name: str, backend: dict, label: str, properties: list[str]
) -> None:
    from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX
    from variantlib.variant_dist_info import VariantDistInfo

    wheel = build_wheel(_fake_variant(tmp_path, name, backend), tmp_path / "dist")
    assert wheel.name == f"ltx_kernels-1-cp310-abi3-manylinux_2_28_x86_64-{label}.whl"
    assert wheel_label(wheel.name) == label and plain_name(wheel.name).count("-") == 4
    with zipfile.ZipFile(wheel) as zf:
        info = VariantDistInfo(
            zf.read("ltx_kernels-1.dist-info/variant.json"),
            VALIDATION_WHEEL_NAME_REGEX.fullmatch(wheel.name).group("variant_label"),
        )
        requires = zf.read("ltx_kernels-1.dist-info/METADATA").decode()
    assert sorted(p.to_str() for p in info.variant_desc.properties) == properties
    assert ("Requires-Dist: torch>=2.11" in requires) == name.startswith("torch-stable-abi")


def test_variants_index_of_a_version_merges_every_wheel(tmp_path: Path) -> None:
    from variantlib.variants_json import VariantsJson

    variants = {
        "torch-stable-abi211-cpu-x86_64-linux": {"type": "cpu"},
        "torch-stable-abi211-cu130-x86_64-linux": {"type": "cuda", "archs": ["8.0", "9.0"]},
        "torch213-cxx11-cpu-x86_64-linux": {"type": "cpu"},
    }
    wvs = [wheel_variant(Variant.parse(n), Metadata.read(_fake_variant(tmp_path, n, b))) for n, b in variants.items()]
    index = VariantsJson(variant_json(wvs))
    assert set(index.variants) == {"null", "cu130", "torch213_cpu"}
    for wv in wvs:  # each wheel's own variant.json merges into the index without conflict (PEP 825)
        index.merge(VariantsJson(variant_json([wv])))
    assert index.namespace_priorities == ["nvidia", "abi_dependency"]


def test_build_wheel_command_writes_the_variant_wheel(ltx_build, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hubkernels", "build", str(ROOT), "--wheel", "--wheel-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    wheels = sorted(tmp_path.glob("*.whl"))
    assert [w.name for w in wheels] == [out.stdout.split()[-1].rsplit("/", 1)[-1]]
    assert json.loads(zipfile.ZipFile(wheels[0]).read("ltx_kernels-1.dist-info/variant.json"))["variants"] == {
        "null": {}
    }
