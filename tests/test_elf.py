"""`hubkernels.elf` is the one ELF reader: the build's load check and the loader read a library's symbol tables
through it, without loading the library."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hubkernels.builder import build
from hubkernels.elf import ElfError, read_elf, symbol_names
from hubkernels.errors import HubkernelsError

MINI = Path(__file__).parent / "fixtures" / "mini"


@pytest.fixture(scope="module")
def module_so() -> tuple[Path, str]:
    """(the mini kernel's built native module, its id)."""
    built = build(MINI, quiet=True)
    return built.path / f"{built.id}.abi3.so", built.id


def test_a_built_module_links_torch_and_exports_its_init(module_so):
    so, ident = module_so
    module = read_elf(so)
    assert f"PyInit_{ident}" in module.exports
    assert "libc10.so" in module.needed or "libtorch_cpu.so" in module.needed
    assert any(u.name.startswith("_ZN") or u.version for u in module.undefined)  # it needs torch's symbols


def test_the_loaders_view_of_the_same_module_agrees(module_so):
    so, ident = module_so
    names = symbol_names(so)
    assert names is not None and f"PyInit_{ident}" in names.functions
    assert names.functions <= read_elf(so).exports  # the fast reader finds no export the full one misses
    # the TORCH_LIBRARY block's static initializer names the op namespace (here the unexpanded macro that stands
    # for the id, as kernel-builder's binding writes it): the loader's collision check reads it
    assert any(n.endswith(b"TORCH_LIBRARY_static_init_TORCH_EXTENSION_NAME") for n in names.static)


def test_a_file_that_is_not_elf_is_none_to_the_loader(tmp_path):
    other = tmp_path / "mod.so"
    other.write_bytes(b"\xcf\xfa\xed\xfe" + b"\0" * 60)  # a Mach-O header
    assert symbol_names(other) is None


def test_a_truncated_library_is_one_typed_error(module_so, tmp_path):
    so, _ = module_so
    cut = tmp_path / so.name
    shutil.copy(so, cut)
    cut.write_bytes(cut.read_bytes()[:200])
    for read in (read_elf, symbol_names):
        with pytest.raises(ElfError) as e:
            read(cut)
        assert isinstance(e.value, HubkernelsError) and cut.name in str(e.value)
