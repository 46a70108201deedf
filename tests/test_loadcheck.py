"""The load check: a variant's modules must resolve on every torch its name admits, judged by real torch binaries.

Scenarios a publisher meets: ltx-kernels built here loads on torch 2.10 to the newest; a module that calls a
function only newer torches export, one that calls into libtorch_cuda.so without linking it, and one that needs a
library nobody ships are each refused by `build` with one line naming the symbol, the library and the torch
versions; one that needs a libstdc++ newer than manylinux_2_28 is named apart (it loads on newer systems only); a
stable-ABI CUDA variant built with a CPU torch links libtorch_cuda.so like one built on a GPU machine.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from hubkernels.builder import build
from hubkernels.builder.loadcheck import admitted_tables, check_module, load_problems, variant_load_problems
from hubkernels.builder.symbols import TABLE_DIR, shipped_tables, write_link_stubs, write_table
from hubkernels.elf import read_elf
from hubkernels.errors import BuildError
from hubkernels.system import Variant

NEWEST = (2, 15)
STABLE_CPU = Variant.parse("torch-stable-abi210-cpu-x86_64-linux")


def test_tables_from_the_published_wheels_cover_every_torch_from_the_stable_abi_floor_to_the_newest():
    tables = shipped_tables()
    assert [t.minor for t in tables] == [(2, m) for m in range(10, NEWEST[1] + 1)]
    for t in tables:
        assert t.source.startswith(f"torch-{t.version}") and t.source.endswith(".whl")
        assert "aoti_torch_get_current_cuda_stream" in t.libraries["libtorch_cuda.so"].exports
        assert "libtorch_cuda.so" not in t.libraries["libtorch_cpu.so"].needed
    assert [t.minor for t in admitted_tables(STABLE_CPU)] == [t.minor for t in tables]


def test_the_maintainer_script_writes_a_table_byte_for_byte_as_it_ships(tmp_path):
    """`scripts/torch_symbols.py` re-extracting a wheel already shipped changes no byte (no spurious diffs)."""
    for table in shipped_tables():
        out = write_table(table, tmp_path)
        assert out.read_bytes() == (TABLE_DIR / out.name).read_bytes(), out.name


def test_ltx_kernels_cpu_variant_built_here_loads_on_every_torch_it_admits(ltx_build):
    assert ltx_build.variant.kind == "stable-abi"
    assert [t.minor for t in admitted_tables(ltx_build.variant)][-1] == NEWEST
    assert variant_load_problems(ltx_build.path) == []


def _probe_kernel(root: Path, *, backend: str, call: str, declare: str) -> Path:
    """A one-source stable-ABI kernel whose exported probe function makes `call` (declared by `declare`)."""
    pkg = root / "torch-ext" / "loadcheck_probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from ._ops import ops\n")
    suffix = "cu" if backend == "cuda" else "cpp"
    (root / "probe").mkdir()
    export = 'extern "C" __attribute__((visibility("default")))'
    body = f"{declare}\n{export} long probe_call() {{ return (long)({call}); }}\n"
    (root / "probe" / f"probe.{suffix}").write_text(body)
    (root / "torch-ext" / "torch_binding.cpp").write_text(
        '#include "registration.h"\nREGISTER_EXTENSION(TORCH_EXTENSION_NAME)\n'
    )
    (root / "build.toml").write_text(
        textwrap.dedent(f"""\
        [general]
        name = "loadcheck-probe"
        version = 1
        edition = 5
        license = "Apache-2.0"
        backends = ["{backend}"]

        [torch]
        src = ["torch-ext/torch_binding.cpp"]
        stable-abi = "2.10"

        [kernel.probe]
        backend = "{backend}"
        depends = ["torch"]
        src = ["probe/probe.{suffix}"]
        {'cuda-capabilities = ["9.0"]' if backend == "cuda" else ""}
        """)
    )
    return root


def test_a_call_only_newer_torches_export_fails_the_build_naming_the_torches_that_lack_it(tmp_path):
    kernel = _probe_kernel(
        tmp_path, backend="cpu", call="torch_from_blob()", declare='extern "C" int torch_from_blob();'
    )
    with pytest.raises(BuildError) as failed:
        build(kernel, quiet=True)
    lines = [line for line in str(failed.value).splitlines() if "torch_from_blob, which no library" in line]
    assert len(lines) == 1, str(failed.value)
    assert lines[0].endswith(
        "torch exports it from 2.11 on: raise [torch] stable-abi to 2.11 or avoid the call (torch 2.10)"
    ), lines[0]
    assert not (kernel / "build").exists() or not any((kernel / "build").glob("torch-*"))  # nothing half published


def test_a_cuda_call_without_libtorch_cuda_in_dt_needed_fails_the_build(tmp_path):
    kernel = _probe_kernel(
        tmp_path,
        backend="cpu",
        call="aoti_torch_get_current_cuda_stream(0, 0)",
        declare='extern "C" int aoti_torch_get_current_cuda_stream(int, void**);',
    )
    with pytest.raises(BuildError) as failed:
        build(kernel, quiet=True)
    assert "calls aoti_torch_get_current_cuda_stream, exported by libtorch_cuda.so, which " in str(failed.value), str(
        failed.value
    )
    assert "does not list in DT_NEEDED: link it (-ltorch_cuda) (torch 2.10, 2.11, 2.12, 2.13, 2.14, 2.15)" in str(
        failed.value
    )


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) to compile a .cu source")
def test_a_stable_cuda_variant_built_with_a_cpu_torch_links_libtorch_cuda_and_loads_on_every_torch(tmp_path):
    kernel = _probe_kernel(
        tmp_path,
        backend="cuda",
        call="aoti_torch_get_current_cuda_stream(0, 0)",
        declare='extern "C" int aoti_torch_get_current_cuda_stream(int, void**);',
    )
    result = build(kernel, backend="cuda", quiet=True)
    assert result.variant.kind == "stable-abi" and result.variant.backend == "cuda"
    (so,) = result.path.glob("*.abi3.so")
    assert "libtorch_cuda.so" in read_elf(so).needed
    assert variant_load_problems(result.path) == []


def _cc(tmp_path: Path, name: str, source: str, *args: str, cxx: bool = False) -> Path:
    src = tmp_path / (name + (".cpp" if cxx else ".c"))
    src.write_text(source)
    out = tmp_path / f"{name}.so"
    subprocess.run(["c++" if cxx else "cc", "-shared", "-fPIC", "-O0", "-o", str(out), str(src), *args], check=True)
    return out


def test_a_library_that_neither_torch_nor_the_system_provides_is_named(tmp_path):
    lib = _cc(tmp_path, "libfoo", "int foo(void) { return 1; }", "-Wl,-soname,libfoo.so.1")
    stubs = write_link_stubs(tmp_path / "stubs", shipped_tables()[0], ("libtorch_cpu.so",))
    so = _cc(
        tmp_path,
        "probe",
        "int foo(void); int probe(void) { return foo(); }",
        f"-L{tmp_path}",
        "-l:libfoo.so",
        f"-L{stubs}",
        "-ltorch_cpu",
    )
    problems = load_problems(so, STABLE_CPU, shipped_tables())
    assert lib.is_file()
    assert any("needs libfoo.so.1, which neither torch nor a manylinux_2_28 system provides" in p for p in problems)


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_a_libstdcxx_symbol_newer_than_manylinux_2_28_is_a_platform_finding_with_its_version(tmp_path):
    source = (
        "#include <sstream>\n#include <string>\n"
        "std::string probe(int x) { std::stringstream ss; ss << x; return std::move(ss).str(); }\n"
    )
    so = _cc(tmp_path, "probe", source, "-std=c++20", cxx=True)
    if not any(u.version == "GLIBCXX_3.4.29" for u in read_elf(so).undefined):
        pytest.skip("this libstdc++ inlines std::stringbuf::str() &&, so there is nothing to plant")
    found = check_module(so, STABLE_CPU, shipped_tables())
    assert not found.problems  # it loads on every torch; on systems older than its libstdc++ it does not
    assert any(
        "at GLIBCXX_3.4.29 from libstdc++.so.6, newer than manylinux_2_28 guarantees (GLIBCXX_3.4.24)" in p
        for p in found.platform
    ), found


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) to compile ltx-kernels' CUDA")
def test_ltx_kernels_cu130_variant_built_on_this_cpu_machine_loads_on_every_torch_it_admits(tmp_path):
    result = build(Path(__file__).resolve().parent.parent, backend="cuda", out_dir=tmp_path, quiet=True)
    assert result.variant.kind == "stable-abi" and result.variant.backend == "cuda"
    (so,) = result.path.glob("*.abi3.so")
    assert {"libtorch_cuda.so", "libcudart.so.13"} <= set(read_elf(so).needed)
    assert [t.minor for t in admitted_tables(result.variant)][-1] == NEWEST
    assert variant_load_problems(result.path) == []
