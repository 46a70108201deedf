"""Loading local variants: clear errors when nothing fits, GPU capability checks, declared dependencies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import hubkernels
from hubkernels.errors import KernelLoadError, VariantNotFoundError
from hubkernels.fetch.importer import check_capability, import_variant
from hubkernels.metadata import Metadata
from hubkernels.system import System
from hubkernels.variants import cuda_arch_supports


def _pure_variant(root: Path, name: str, *, python_depends: list[str] | None = None, body: str = "X = 1\n") -> Path:
    d = root / "build" / name
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(body)
    kid = f"_pure_cpu_{abs(hash((str(root), name))) % 16**7:07x}"
    Metadata(
        name="pure", id=kid, version=1, license="MIT", backend={"type": "cpu"}, python_depends=python_depends or []
    ).write(d)
    return d


def test_no_build_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(VariantNotFoundError, match="hubkernels build"):
        hubkernels.get_local_kernel(tmp_path)


def test_no_matching_variant_lists_each_rejection(tmp_path: Path) -> None:
    _pure_variant(tmp_path, "torch29-cxx11-cpu-aarch64-linux")
    _pure_variant(tmp_path, "torch-metal")
    with pytest.raises(VariantNotFoundError) as e:
        hubkernels.get_local_kernel(tmp_path)
    msg = str(e.value)
    assert "torch29-cxx11-cpu-aarch64-linux: built for" in msg and "torch-metal: noarch build for metal" in msg


def test_noarch_variant_loads_as_a_package(tmp_path: Path) -> None:
    d = _pure_variant(tmp_path, "torch-cpu", body="from .helper import VALUE\n")
    (d / "helper.py").write_text("VALUE = 7\n")
    mod = hubkernels.get_local_kernel(tmp_path)
    assert mod.VALUE == 7 and mod.__name__ == Metadata.read(d).id


def test_the_same_build_from_a_second_place_is_the_module_already_imported(tmp_path: Path) -> None:
    """A kernel downloaded again into another cache loads as the module already imported, also once the first copy
    is deleted (a cleaned cache); a different build under the same id is refused, naming both places."""
    first = _pure_variant(tmp_path / "a", "torch-cpu")
    module = import_variant(first)
    again = shutil.copytree(first, tmp_path / "b" / "build" / "torch-cpu")
    assert import_variant(again) is module
    other = shutil.copytree(first, tmp_path / "c" / "build" / "torch-cpu")
    (other / "__init__.py").write_text("X = 2\n")
    with pytest.raises(KernelLoadError, match="different builds with the same id") as e:
        import_variant(other)
    assert str(first.resolve()) in str(e.value) and str(other.resolve()) in str(e.value)
    shutil.rmtree(tmp_path / "a")
    assert import_variant(again) is module


def test_declared_python_dependency_must_be_installed(tmp_path: Path) -> None:
    d = _pure_variant(tmp_path, "torch-cpu", python_depends=["helion"])
    pytest.importorskip("torch")
    if __import__("importlib.util").util.find_spec("helion") is None:
        with pytest.raises(KernelLoadError, match="pip install helion"):
            import_variant(d)


def test_unsupported_python_dependency_is_refused(tmp_path: Path) -> None:
    d = _pure_variant(tmp_path, "torch-cpu", python_depends=["kepler-22b"])
    with pytest.raises(KernelLoadError, match="kepler-22b"):
        import_variant(d)


def test_every_dependency_build_toml_accepts_is_one_the_loader_knows(tmp_path: Path) -> None:
    """One curated table (config/python_depends.json): a key that build.toml accepts never fails a load as
    unsupported; one with nothing to import (onednn) or already installed loads, the others name the pip command."""
    import importlib.util

    from hubkernels.config import PYTHON_DEPENDS, PYTHON_MODULES

    for dep in sorted({d for deps in PYTHON_DEPENDS.values() for d in deps}):
        d = _pure_variant(tmp_path / dep, "torch-cpu", python_depends=[dep])
        module = PYTHON_MODULES[dep]
        if module is None or importlib.util.find_spec(module) is not None:
            assert import_variant(d).X == 1
        else:
            with pytest.raises(KernelLoadError, match=f"pip install {dep}"):
                import_variant(d)


@pytest.mark.parametrize(
    "arch,cap,ok",
    [
        ("9.0", (9, 0), True),
        ("8.0", (8, 6), True),
        ("8.0", (9, 0), False),
        ("8.0+PTX", (9, 0), True),
        ("9.0a", (9, 0), True),
        ("9.0a", (10, 0), False),
        ("10.0", (9, 0), False),
        ("12.0+PTX", (9, 0), False),
        ("10.0f", (10, 3), True),
        ("12.0f", (12, 1), True),
        ("10.0f", (12, 0), False),
        ("10.0a", (10, 3), False),
    ],
)
def test_arch_compatibility(arch: str, cap: tuple[int, int], ok: bool) -> None:
    assert cuda_arch_supports(arch, cap) is ok


def test_capability_mismatch_is_a_readable_error() -> None:
    meta = Metadata(
        name="k", id="_k_cuda_1a2b3c4", version=1, license="MIT", backend={"type": "cuda", "archs": ["9.0"]}
    )
    ampere = System((2, 11), "cuda", (13, 0), "x86_64", "linux", capabilities=((8, 6),))
    with pytest.raises(KernelLoadError, match=r"built for CUDA capabilities 9\.0, but the GPUs here are 8\.6"):
        check_capability(meta, ampere)
    check_capability(meta, System((2, 11), "cuda", (13, 0), "x86_64", "linux", capabilities=((9, 0),)))


def test_family_arch_builds_load_on_newer_minors_of_the_family() -> None:
    meta = Metadata(name="k", id="_k_cuda_f", version=1, license="MIT", backend={"type": "cuda", "archs": ["10.0f"]})
    check_capability(meta, System((2, 13), "cuda", (13, 0), "x86_64", "linux", capabilities=((10, 3),)))
    with pytest.raises(KernelLoadError, match="built for CUDA capabilities 10.0f"):
        check_capability(meta, System((2, 13), "cuda", (13, 0), "x86_64", "linux", capabilities=((12, 0),)))


def test_rocm_build_without_this_gpu_s_gfx_arch_is_refused() -> None:
    meta = Metadata(name="k", id="_k_rocm_x", version=1, license="MIT", backend={"type": "rocm", "archs": ["gfx942"]})
    check_capability(meta, System((2, 13), "rocm", (7, 1), "x86_64", "linux", rocm_archs=("gfx942",)))
    with pytest.raises(KernelLoadError, match="built for ROCm archs gfx942, but the GPUs here are gfx90a"):
        check_capability(meta, System((2, 13), "rocm", (7, 1), "x86_64", "linux", rocm_archs=("gfx90a",)))


def test_a_variant_that_needs_a_newer_kernels_release_is_refused(tmp_path: Path) -> None:
    d = _pure_variant(tmp_path, "torch-cpu")
    meta = Metadata.read(d)
    meta.extra["kernels-minver"] = "0.99.0"
    meta.write(d)
    with pytest.raises(KernelLoadError, match=r"requires kernels>=0\.99\.0, and hubkernels follows kernels 0\.17\.2"):
        import_variant(d)


def test_metadata_round_trips_unknown_keys(tmp_path: Path) -> None:
    raw = {
        "name": "x",
        "id": "_x_cpu_1a2b3c4",
        "version": 2,
        "license": "MIT",
        "python-depends": [],
        "kernel-depends": [],
        "backend": {"type": "cpu"},
        "future-key": {"a": 1},
    }
    (tmp_path / "metadata.json").write_text(json.dumps(raw))
    meta = Metadata.read(tmp_path)
    assert meta.to_dict() == raw
