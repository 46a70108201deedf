"""build.toml (kernel-builder edition 5): every upstream example parses, every mistake is named.

A kernel author's two experiences of `hubkernels.config`: a valid file loads into the values the build
needs (backends, kernels per backend, noarch backends, package directory, dependencies), and a broken
file fails with one line that names the file, the table and the key, from the library and from the CLI.
"""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from hubkernels.config import (
    BuildConfig,
    ConfigError,
    KernelDependency,
    TorchNoarch,
    load_config,
)
from hubkernels.errors import HubkernelsError

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "build_toml"
EXAMPLES = sorted(p.name for p in FIXTURES.iterdir() if (p / "build.toml").is_file())


# --------------------------------------------------------------------------------------------------
# The upstream examples (tests/fixtures/build_toml/<example>/, with stub sources so files validate)


def test_fixtures_cover_the_upstream_examples() -> None:
    expected = {
        "relu",
        "relu-torch-stable-abi",
        "extra-data",
        "relu-compiler-flags",
        "relu-archs-subset",
        "relu-torch-bounds",
        "silu-and-mul",
        "relu-triton",
    }
    assert expected <= set(EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_loads_with_its_sources(example: str) -> None:
    config = load_config(FIXTURES / example)
    assert config.root == (FIXTURES / example).resolve()
    assert config.file == config.root / "build.toml"
    assert config.general.edition == 5
    assert config.python_name == config.general.name.replace("-", "_")
    assert (config.package_dir / "__init__.py").is_file()
    for backend in config.general.backends:
        kernels = config.kernels_for(backend)
        assert all(k.backend == backend for k in kernels)
        assert config.is_noarch(backend) == (config.torch_noarch is not None)


def test_path_may_be_the_build_toml_itself() -> None:
    assert load_config(FIXTURES / "relu" / "build.toml") == load_config(FIXTURES / "relu")


def test_relu_builds_one_native_kernel_per_backend() -> None:
    config = load_config(FIXTURES / "relu")
    assert config.general.backends == ("cpu", "cuda", "metal", "rocm", "xpu")
    assert config.framework == "torch"
    assert [k.name for k in config.kernels_for("cuda")] == ["relu"]
    assert [k.name for k in config.kernels_for("rocm")] == ["relu_rocm"]
    metal_sources = ("relu_metal/relu.mm", "relu_metal/relu.metal", "relu_metal/common.h")
    assert config.kernels_for("metal")[0].src == metal_sources
    assert not any(config.is_noarch(b) for b in config.general.backends)
    assert config.torch_ext_dir == config.root / "torch-ext"
    assert config.package_dir == config.root / "torch-ext" / "relu"
    assert config.general.hub.repo_id == "kernels-test/relu"
    assert config.branch == "v1"
    assert config.kernels["relu"].cuda_capabilities == ()  # omitted: every supported capability


def test_stable_abi_table_and_a_backend_without_kernel_is_not_noarch() -> None:
    config = load_config(FIXTURES / "relu-torch-stable-abi")
    assert config.torch is not None
    assert config.torch.stable_abi_for("cuda") == "2.11"
    assert config.torch.stable_abi_for("metal") == "2.11"
    assert not config.is_noarch("metal")  # upstream comments out [kernel.relu_metal]: nothing to build
    assert not config.is_noarch("cuda")
    assert config.kernels_for("metal") == []


def test_stable_abi_as_one_version_for_every_backend(tmp_path: Path) -> None:
    root = write_kernel(tmp_path, BASE.replace(TORCH_SRC, TORCH_SRC + '\nstable-abi = "2.11"'))
    torch = load_config(root).torch
    assert torch is not None
    assert torch.stable_abi == "2.11"
    assert torch.stable_abi_for("cpu") == torch.stable_abi_for("cuda") == "2.11"


def test_extra_data_ships_json_next_to_the_python_code() -> None:
    config = load_config(FIXTURES / "extra-data")
    assert config.torch is not None and config.torch.pyext == ("json", "py")
    assert config.data_extensions == ("json",)
    assert load_config(FIXTURES / "relu").data_extensions == ()  # default pyext: py, pyi


def test_compiler_flags_reach_each_backend() -> None:
    config = load_config(FIXTURES / "relu-compiler-flags")
    assert config.torch is not None and config.torch.cxx_flags == ("-DCANARY_IN_THE_KERNEL",)
    assert config.kernels["activation"].cuda_flags == ("-DWHO_AM_I_IF_NOT_THE_CANARY",)
    assert config.kernels["activation_rocm"].hip_flags == ("-DWHO_AM_I_IF_NOT_THE_CANARY",)
    assert config.kernels["activation_xpu"].sycl_flags == ("-DWHO_AM_I_IF_NOT_THE_CANARY",)
    assert config.kernels["activation"].hip_flags == ()


def test_archs_subset_keeps_the_listed_capabilities() -> None:
    config = load_config(FIXTURES / "relu-archs-subset")
    assert config.kernels["relu"].cuda_capabilities == ("5.0", "7.5", "8.0", "9.0")
    assert config.kernels["relu_rocm"].rocm_archs == ("gfx90a", "gfx940", "gfx942", "gfx1100")


def test_torch_bounds() -> None:
    config = load_config(FIXTURES / "relu-torch-bounds")
    assert config.torch is not None
    assert (config.torch.minver, config.torch.maxver) == ("2.12", "2.12")
    assert config.python_name == "relu"


@pytest.mark.parametrize("example", ["silu-and-mul", "relu-triton", "gemm-triton-autotune", "kernel-deps"])
def test_torch_noarch_kernels_have_no_native_code(example: str) -> None:
    config = load_config(FIXTURES / example)
    assert config.framework == "torch-noarch"
    assert config.kernels == {}
    assert all(config.is_noarch(b) for b in config.general.backends)
    assert config.torch_ext_dir == config.root / "torch-ext"


def test_empty_torch_noarch_table_takes_the_defaults() -> None:
    assert load_config(FIXTURES / "relu-triton").torch_noarch == TorchNoarch()


@pytest.mark.parametrize(
    ("caps_key", "archs_key"),
    [("cuda_capabilities", "rocm_archs"), ("cuda-capabilities", "rocm-archs")],
    ids=["snake-case (what kernel-builder's code reads)", "kebab-case (what its docs show)"],
)
def test_torch_noarch_accepts_both_spellings(tmp_path: Path, caps_key: str, archs_key: str) -> None:
    text = NOARCH + f'{caps_key} = ["8.0", "9.0a"]\n{archs_key} = ["gfx942"]\n'
    noarch = load_config(write_kernel(tmp_path, text)).torch_noarch
    assert noarch is not None
    assert noarch.cuda_capabilities == ("8.0", "9.0a")
    assert noarch.rocm_archs == ("gfx942",)


def test_tvm_ffi_package_lives_next_to_its_binding() -> None:
    config = load_config(FIXTURES / "relu-tvm-ffi")
    assert config.framework == "tvm-ffi"
    assert config.tvm_ffi is not None and config.tvm_ffi.src == ("tvm-ffi-ext/tvm_ffi_binding.cpp",)
    assert config.torch_ext_dir == config.root / "tvm-ffi-ext"
    assert config.kernels["relu_cuda"].depends == ()


def test_dependencies_merge_general_and_backend_lists() -> None:
    config = load_config(FIXTURES / "my-act")
    assert config.python_depends("cpu") == ["einops"]
    assert config.python_depends("cuda") == ["einops", "nvidia-cutlass-dsl"]
    assert config.python_depends("xpu") == ["einops", "onednn"]
    activation = KernelDependency("kernels-community/activation", version=1)
    flash = KernelDependency("kernels-community/flash-attn3", revision="0123456789abcdef0123456789abcdef01234567")
    assert config.kernel_depends("cpu") == [activation]
    assert config.kernel_depends("cuda") == [activation, flash]
    assert load_config(FIXTURES / "relu-nki").python_depends("neuron") == ["nki"]
    assert load_config(FIXTURES / "kernel-deps").general.kernel_depends == (
        KernelDependency("kernels-staging/einops", revision="pr1053"),
    )


def test_complete_example_reads_every_key() -> None:
    config = load_config(FIXTURES / "my-act")
    general = config.general
    assert general.upstream == "https://github.com/example/my-act.git"
    assert general.source == "git@github.com:example/my-act-kernel.git"
    assert config.branch == "v1-beta"
    assert config.torch is not None and config.torch.include == ("csrc/include",)
    assert config.torch.stable_abi == {"cuda": "2.11", "rocm": "2.9"}
    assert config.torch.stable_abi_for("cpu") is None
    cuda = config.kernels["my_act_cuda"]
    assert cuda.depends == ("torch", "cutlass_3_9")
    assert cuda.cuda_capabilities == ("8.0", "8.9", "9.0a", "10.0f", "12.0+PTX")
    assert cuda.cuda_minver == "12.8"
    assert cuda.include == ("my_act_cuda",)
    assert config.kernels["my_act_cpu"].cxx_flags == ("-O3",)


def test_config_values_are_frozen() -> None:
    config = load_config(FIXTURES / "relu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.general.version = 2  # type: ignore[misc]


def test_asking_about_an_unlisted_backend_names_general_backends() -> None:
    config = load_config(FIXTURES / "relu-torch-bounds")  # cuda and rocm only
    with pytest.raises(ConfigError) as info:
        config.kernels_for("cpu")
    assert (info.value.table, info.value.key) == ("general", "backends")
    assert "'cpu'" in str(info.value)
    with pytest.raises(ValueError, match="unknown backend"):
        config.is_noarch("cuda12")


# --------------------------------------------------------------------------------------------------
# Malformed files: each error names the file, the table and the key

BASE = """\
[general]
name = "relu"
version = 1
edition = 5
license = "Apache-2.0"
backends = ["cpu", "cuda"]

[general.hub]
repo-id = "kernels-test/relu"

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.relu_cuda]
backend = "cuda"
depends = ["torch"]
src = ["relu_cuda/relu.cu"]
cuda-capabilities = ["8.0", "9.0a", "12.0+PTX"]

[kernel.relu_cpu]
backend = "cpu"
depends = ["torch"]
src = ["relu_cpu/relu_cpu.cpp"]
"""
TORCH_SRC = '[torch]\nsrc = ["torch-ext/torch_binding.cpp"]'
GENERAL_END = 'backends = ["cpu", "cuda"]'
V4 = BASE.replace("edition = 5\n", "")  # kernels-community's files mostly: no edition key
CUDA_KERNEL = '[kernel.relu_cuda]\nbackend = "cuda"'
NOARCH = BASE[: BASE.index("[torch]")] + "[torch-noarch]\n"
TVM_FFI = BASE.replace(TORCH_SRC, '[tvm-ffi]\nsrc = ["torch-ext/torch_binding.cpp"]')
STUB_SOURCES = ("torch-ext/torch_binding.cpp", "relu_cuda/relu.cu", "relu_cpu/relu_cpu.cpp")


def write_kernel(root: Path, text: str) -> Path:
    """A kernel root holding `text` as build.toml and stub files for BASE's sources."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "build.toml").write_text(text)
    for rel in STUB_SOURCES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("// stub\n")
    return root


def edit(base: str, old: str, new: str) -> str:
    assert old in base, f"test bug: {old!r} not in the base file"
    return base.replace(old, new, 1)


def in_general(line: str, base: str = BASE) -> str:
    """`base` with one more key/value line at the end of its [general] keys."""
    return edit(base, GENERAL_END, f"{GENERAL_END}\n{line}")


class Bad(NamedTuple):
    id: str
    text: str
    table: str  # "" = top level of the document
    key: str | None
    says: str  # a fragment of the message: the diagnosis the user reads


KERNEL_ROCM = '\n[kernel.relu_rocm]\nbackend = "rocm"\ndepends = ["torch"]\nsrc = ["relu_cuda/relu.cu"]\n'
KERNEL_XPU = '\n[kernel.relu_xpu]\nbackend = "xpu"\ndepends = ["torch"]\nsrc = ["relu_cpu/relu_cpu.cpp"]\n'
KERNEL_METAL = '\n[kernel.relu_metal]\nbackend = "metal"\ndepends = ["torch"]\nsrc = ["relu_cpu/relu_cpu.cpp"]\n'

MALFORMED = [
    # unknown keys, one per table
    Bad("unknown-top-level-table", BASE + "\n[test]\nmarkers = []\n", "", "test", "tests are found in tests/"),
    Bad(
        "unknown-key-general",
        edit(BASE, "license =", "licence ="),
        "general",
        "licence",
        "Did you mean 'license'?",
    ),
    Bad(
        "unknown-key-general.hub",
        edit(BASE, "repo-id =", "repo_id ="),
        "general.hub",
        "repo_id",
        "Did you mean 'repo-id'?",
    ),
    Bad(
        "unknown-key-general.cuda",
        BASE + '\n[general.cuda]\nmin-ver = "12.8"\n',
        "general.cuda",
        "min-ver",
        "Did you mean 'minver'?",
    ),
    Bad(
        "unknown-key-general.xpu",
        BASE + '\n[general.xpu]\npython-depend = ["onednn"]\n',
        "general.xpu",
        "python-depend",
        "Did you mean 'python-depends'?",
    ),
    Bad(
        "unknown-key-general.neuron",
        BASE + "\n[general.neuron]\nkernel-depend = []\n",
        "general.neuron",
        "kernel-depend",
        "not allowed here",
    ),
    Bad(
        "unknown-key-general.tpu",
        BASE + "\n[general.tpu]\nkernel-depends = []\n",
        "general.tpu",
        "kernel-depends",
        "(allowed: python-depends)",
    ),
    Bad(
        "unknown-key-torch",
        edit(BASE, TORCH_SRC, TORCH_SRC + '\ncxxflags = ["-O3"]'),
        "torch",
        "cxxflags",
        "Did you mean 'cxx-flags'?",
    ),
    Bad(
        "unknown-key-torch.stable-abi",
        BASE + '\n[torch.stable-abi]\ncudaa = "2.11"\n',
        "torch.stable-abi",
        "cudaa",
        "Did you mean 'cuda'?",
    ),
    Bad(
        "unknown-key-torch-noarch",
        NOARCH + 'cuda-capability = ["8.0"]\n',
        "torch-noarch",
        "cuda-capability",
        "Did you mean",
    ),
    Bad(
        "unknown-key-tvm-ffi",
        edit(TVM_FFI, "[tvm-ffi]", '[tvm-ffi]\npyexts = ["py"]'),
        "tvm-ffi",
        "pyexts",
        "Did you mean 'pyext'?",
    ),
    Bad(
        "unknown-key-kernel-cuda",
        edit(BASE, "cuda-capabilities =", "cuda-capabilites ="),
        "kernel.relu_cuda",
        "cuda-capabilites",
        "Did you mean 'cuda-capabilities'?",
    ),
    Bad(
        "unknown-key-kernel-cpu",
        BASE + 'cuda-flags = ["-O3"]\n',
        "kernel.relu_cpu",
        "cuda-flags",
        "applies to backend 'cuda' only",
    ),
    Bad(
        "unknown-key-kernel-rocm",
        BASE + KERNEL_ROCM + 'sycl-flags = ["-O3"]\n',
        "kernel.relu_rocm",
        "sycl-flags",
        "applies to backend 'xpu' only",
    ),
    Bad(
        "unknown-key-kernel-xpu",
        BASE + KERNEL_XPU + 'hip-flags = ["-O3"]\n',
        "kernel.relu_xpu",
        "hip-flags",
        "applies to backend 'rocm' only",
    ),
    Bad(
        "unknown-key-kernel-metal",
        BASE + KERNEL_METAL + 'cuda-capabilities = ["8.0"]\n',
        "kernel.relu_metal",
        "cuda-capabilities",
        "applies to backend 'cuda'",
    ),
    Bad(
        "unknown-key-kernel-depends-entry",
        in_general('kernel-depends = [{ repo-id = "org/act", version = 1, rev = "x" }]'),
        "general",
        "kernel-depends",
        "unknown key 'rev'",
    ),
    # missing keys and tables
    Bad("missing-name", edit(BASE, 'name = "relu"\n', ""), "general", "name", "is missing"),
    Bad("missing-version", edit(BASE, "version = 1\n", ""), "general", "version", "is missing"),
    # edition 4 (no edition key) reads as edition 5, less what edition 5 added
    Bad(
        "v4-kernel-depends",
        in_general('kernel-depends = [{ repo-id = "org/act", version = 1 }]', V4),
        "general",
        "kernel-depends",
        "It needs edition 5: add edition = 5",
    ),
    Bad("v4-general-tpu", V4 + "\n[general.tpu]\npython-depends = []\n", "general", "tpu", "add edition = 5"),
    Bad(
        "v4-cuda-kernel-depends",
        V4 + '\n[general.cuda]\nkernel-depends = [{ repo-id = "o/n", version = 1 }]\n',
        "general.cuda",
        "kernel-depends",
        "add edition = 5",
    ),
    Bad(
        "v4-stable-abi-table",
        edit(V4, TORCH_SRC, TORCH_SRC + '\nstable-abi = { cpu = "2.10" }'),
        "torch",
        "stable-abi",
        "must be a version string in edition 4",
    ),
    Bad("missing-license", edit(BASE, 'license = "Apache-2.0"\n', ""), "general", "license", "is missing"),
    Bad("missing-backends", edit(BASE, GENERAL_END + "\n", ""), "general", "backends", "is missing"),
    Bad("missing-general-table", BASE[BASE.index("[torch]") :], "general", None, "is missing"),
    Bad(
        "missing-kernel-backend",
        edit(BASE, CUDA_KERNEL, "[kernel.relu_cuda]"),
        "kernel.relu_cuda",
        "backend",
        "is missing",
    ),
    Bad(
        "missing-kernel-depends",
        edit(BASE, 'depends = ["torch"]\nsrc = ["relu_cuda', 'src = ["relu_cuda'),
        "kernel.relu_cuda",
        "depends",
        "is missing",
    ),
    Bad(
        "missing-kernel-src",
        edit(BASE, 'src = ["relu_cpu/relu_cpu.cpp"]\n', ""),
        "kernel.relu_cpu",
        "src",
        "is missing",
    ),
    Bad(
        "missing-tvm-ffi-src",
        edit(TVM_FFI, '[tvm-ffi]\nsrc = ["torch-ext/torch_binding.cpp"]', "[tvm-ffi]"),
        "tvm-ffi",
        "src",
        "is missing",
    ),
    # wrong types
    Bad(
        "version-is-a-string",
        edit(BASE, "version = 1", 'version = "1"'),
        "general",
        "version",
        "must be an integer, not a string",
    ),
    Bad(
        "backends-is-a-string",
        edit(BASE, GENERAL_END, 'backends = "cuda"'),
        "general",
        "backends",
        'write backends = ["cuda"]',
    ),
    Bad(
        "edition-is-a-string",
        edit(BASE, "edition = 5", 'edition = "5"'),
        "general",
        "edition",
        "must be an integer",
    ),
    Bad(
        "license-is-a-number",
        edit(BASE, 'license = "Apache-2.0"', "license = 2"),
        "general",
        "license",
        "must be a string",
    ),
    Bad(
        "hub-is-not-a-table",
        in_general('hub = "org/relu"', base=edit(BASE, '[general.hub]\nrepo-id = "kernels-test/relu"\n', "")),
        "general",
        "hub",
        "must be a table [general.hub]",
    ),
    Bad(
        "depends-is-a-string",
        edit(BASE, 'depends = ["torch"]', 'depends = "torch"'),
        "kernel.relu_cuda",
        "depends",
        "must be an array of strings",
    ),
    Bad(
        "torch-minver-is-a-float",
        edit(BASE, TORCH_SRC, TORCH_SRC + "\nminver = 2.12"),
        "torch",
        "minver",
        "quote it",
    ),
    Bad(
        "stable-abi-is-an-array",
        edit(BASE, TORCH_SRC, TORCH_SRC + '\nstable-abi = ["2.11"]'),
        "torch",
        "stable-abi",
        "must be a version string or a table",
    ),
    Bad(
        "kernel-is-not-a-table",
        NOARCH + '\n[kernel]\nbackend = "cuda"\n',
        "kernel",
        "backend",
        "each kernel is its own table",
    ),
    Bad(
        "capabilities-is-a-string",
        edit(BASE, 'cuda-capabilities = ["8.0", "9.0a", "12.0+PTX"]', 'cuda-capabilities = "8.0"'),
        "kernel.relu_cuda",
        "cuda-capabilities",
        "not a string",
    ),
    # bad values
    Bad(
        "name-with-underscore",
        edit(BASE, 'name = "relu"', 'name = "relu_kernel"'),
        "general",
        "name",
        "(e.g. 'relu-kernel')",
    ),
    Bad(
        "name-with-uppercase",
        edit(BASE, 'name = "relu"', 'name = "Relu"'),
        "general",
        "name",
        "not a valid kernel name",
    ),
    Bad("edition-4", edit(BASE, "edition = 5", "edition = 4"), "general", "edition", "unsupported build edition 4"),
    Bad(
        "unknown-backend",
        edit(BASE, GENERAL_END, 'backends = ["cpu", "tpuu"]'),
        "general",
        "backends",
        "Did you mean 'tpu'?",
    ),
    Bad("empty-backends", edit(BASE, GENERAL_END, "backends = []"), "general", "backends", "is empty"),
    Bad(
        "cuda-capability-9",
        edit(BASE, '"9.0a"', '"9"'),
        "kernel.relu_cuda",
        "cuda-capabilities",
        "'9', which is not a CUDA capability",
    ),
    Bad(
        "rocm-arch-mi300",
        BASE + KERNEL_ROCM + 'rocm-archs = ["mi300"]\n',
        "kernel.relu_rocm",
        "rocm-archs",
        "not a ROCm architecture",
    ),
    Bad(
        "unknown-depends",
        edit(BASE, 'depends = ["torch"]', 'depends = ["torch", "cutlass_3_7"]'),
        "kernel.relu_cuda",
        "depends",
        "'cutlass_3_7', which is not a known dependency",
    ),
    Bad(
        "uncurated-python-depends",
        in_general('python-depends = ["numpy"]'),
        "general",
        "python-depends",
        "not a curated Python dependency",
    ),
    Bad(
        "backend-python-depends-in-general",
        in_general('python-depends = ["nvidia-cutlass-dsl"]'),
        "general",
        "python-depends",
        "belongs in [general.cuda]",
    ),
    Bad(
        "kernel-depends-version-and-revision",
        in_general('kernel-depends = [{ repo-id = "org/act", version = 1, revision = "abc123" }]'),
        "general",
        "kernel-depends",
        "mutually exclusive",
    ),
    Bad(
        "kernel-depends-neither-version-nor-revision",
        in_general('kernel-depends = [{ repo-id = "org/act" }]'),
        "general",
        "kernel-depends",
        "needs version",
    ),
    Bad(
        "two-framework-tables",
        BASE + "\n[torch-noarch]\n",
        "torch-noarch",
        None,
        "cannot be combined with [torch]",
    ),
    Bad("no-framework-table", edit(BASE, TORCH_SRC, ""), "", None, "has no framework table"),
    Bad(
        "kernel-backend-noarch-only",
        edit(BASE, 'backend = "cuda"', 'backend = "tpu"'),
        "kernel.relu_cuda",
        "backend",
        "built noarch",
    ),
    Bad(
        "torch-minver-above-maxver",
        edit(BASE, TORCH_SRC, TORCH_SRC + '\nminver = "2.13"\nmaxver = "2.12"'),
        "torch",
        "maxver",
        "below minver",
    ),
    Bad(
        "upstream-not-a-git-url",
        in_general('upstream = "ftp://example.com/x.git"'),
        "general",
        "upstream",
        "not a git URL",
    ),
    Bad(
        "hub-repo-id-without-owner",
        edit(BASE, 'repo-id = "kernels-test/relu"', 'repo-id = "relu"'),
        "general.hub",
        "repo-id",
        "'owner/name'",
    ),
    Bad(
        "pyext-with-dot",
        edit(BASE, TORCH_SRC, TORCH_SRC + '\npyext = ["py", ".json"]'),
        "torch",
        "pyext",
        "(write 'json')",
    ),
    Bad(
        "absolute-src",
        edit(BASE, '"relu_cuda/relu.cu"', '"/usr/src/relu.cu"'),
        "kernel.relu_cuda",
        "src",
        "relative to the kernel root",
    ),
    Bad(
        "noarch-both-spellings",
        NOARCH + 'cuda-capabilities = ["8.0"]\ncuda_capabilities = ["8.0"]\n',
        "torch-noarch",
        "cuda_capabilities",
        "keep one",
    ),
    Bad(
        "src-file-missing",
        edit(BASE, '"relu_cuda/relu.cu"', '"relu_cuda/relu_missing.cu"'),
        "kernel.relu_cuda",
        "src",
        "'relu_cuda/relu_missing.cu', which does not exist",
    ),
    # not TOML at all
    Bad(
        "toml-syntax-error",
        edit(BASE, 'license = "Apache-2.0"', "license = Apache-2.0"),
        "general",
        None,
        "invalid TOML at line 5",
    ),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[c.id for c in MALFORMED])
def test_malformed_build_toml_names_file_table_and_key(tmp_path: Path, case: Bad) -> None:
    root = write_kernel(tmp_path / "kernel", case.text)
    with pytest.raises(ConfigError) as info:
        load_config(root)
    err = info.value
    line = str(err)
    assert (err.file, err.table, err.key) == (root / "build.toml", case.table, case.key), line
    assert line.startswith(f"{root / 'build.toml'}: "), line
    if case.table:
        assert f"[{case.table}]" in line
    if case.key is not None:
        assert f"'{case.key}'" in line
    assert case.says in line
    assert "\n" not in line


def test_the_error_line_reads_as_documented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_kernel(tmp_path, edit(BASE, "cuda-capabilities =", "cuda-capabilites ="))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(".")
    assert str(info.value) == (
        "build.toml: [kernel.relu_cuda] key 'cuda-capabilites' is not allowed here (allowed: backend, depends, "
        "src, include, cxx-flags, cuda-capabilities, cuda-flags, cuda-minver). Did you mean 'cuda-capabilities'?"
    )


def test_validate_files_false_only_checks_the_contents(tmp_path: Path) -> None:
    root = tmp_path / "kernel"
    root.mkdir()
    (root / "build.toml").write_text(BASE)  # no source files at all
    config = load_config(root, validate_files=False)
    assert config.kernels["relu_cuda"].src == ("relu_cuda/relu.cu",)
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert (info.value.table, info.value.key) == ("torch", "src")


def test_syntax_error_carries_its_line(tmp_path: Path) -> None:
    bad = next(c for c in MALFORMED if c.id == "toml-syntax-error")
    with pytest.raises(ConfigError) as info:
        load_config(write_kernel(tmp_path, bad.text))
    assert info.value.line == 5
    assert "'license = Apache-2.0'" in str(info.value)  # the offending line, as written


def test_missing_build_toml_and_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"build\.toml: not found; pass the kernel root"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nowhere")


def test_config_error_is_a_hubkernels_error_and_survives_pickling(tmp_path: Path) -> None:
    root = write_kernel(tmp_path, edit(BASE, "edition = 5", "edition = 4"))
    with pytest.raises(HubkernelsError) as info:
        load_config(root)
    err = info.value
    assert isinstance(err, ConfigError) and isinstance(err, ValueError)
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.file, copy.table, copy.key, str(copy)) == (err.file, err.table, err.key, str(err))


def test_edition_4_is_upgraded_in_memory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    v5 = load_config(write_kernel(tmp_path / "v5", BASE))
    with caplog.at_level("WARNING", logger="hubkernels.config"):
        v4 = load_config(write_kernel(tmp_path / "v4", V4))
    assert v4.general.edition == 4 and v5.general.edition == 5
    assert dataclasses.replace(v4.general, edition=5) == v5.general
    assert (v4.torch, v4.kernels) == (v5.torch, v5.kernels)
    assert "legacy edition 4" in caplog.text and "add edition = 5" in caplog.text.lower()
    stable = load_config(write_kernel(tmp_path / "v4s", edit(V4, TORCH_SRC, TORCH_SRC + '\nstable-abi = "2.10"')))
    assert stable.torch is not None and stable.torch.stable_abi_for("cuda") == "2.10"


@pytest.mark.parametrize("edition", [3, 4, 6])
def test_other_editions_are_refused_without_pointing_at_nix(tmp_path: Path, edition: int) -> None:
    with pytest.raises(ConfigError, match=f"unsupported build edition {edition}") as info:
        load_config(write_kernel(tmp_path, edit(BASE, "edition = 5", f"edition = {edition}")))
    assert "kernel-builder" not in str(info.value) and "nix" not in str(info.value).lower()


# --------------------------------------------------------------------------------------------------
# The CLI: every malformed case exits 2 with one line naming file, table and key, never a traceback


# One case per kind of mistake goes through a real `python -m hubkernels` process (about 2 s each on this
# machine); the whole table goes through `hubkernels.cli.main`, the function that process runs.
CLI_SUBPROCESS_CASES = [
    c
    for c in MALFORMED
    if c.id
    in {
        "unknown-key-kernel-cuda",
        "v4-kernel-depends",
        "backends-is-a-string",
        "cuda-capability-9",
        "no-framework-table",
        "toml-syntax-error",
        "src-file-missing",
    }
]


def assert_one_line_naming(output: str, root: Path, case: Bad) -> None:
    assert "Traceback" not in output, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert str(root / "build.toml") in lines[0]
    if case.table:
        assert f"[{case.table}]" in lines[0]
    if case.key is not None:
        assert f"'{case.key}'" in lines[0]
    assert case.says in lines[0]


@pytest.mark.parametrize("command", ["build", "variants"])
@pytest.mark.parametrize("case", CLI_SUBPROCESS_CASES, ids=[c.id for c in CLI_SUBPROCESS_CASES])
def test_cli_process_exits_2_with_one_line(tmp_path: Path, case: Bad, command: str) -> None:
    root = write_kernel(tmp_path / "kernel", case.text)
    proc = subprocess.run(
        [sys.executable, "-m", "hubkernels", command, str(root)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert_one_line_naming(proc.stdout + proc.stderr, root, case)


@pytest.mark.parametrize("command", ["build", "variants"])
@pytest.mark.parametrize("case", MALFORMED, ids=[c.id for c in MALFORMED])
def test_cli_main_exits_2_with_one_line(
    tmp_path: Path, case: Bad, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from hubkernels.cli import main

    root = write_kernel(tmp_path / "kernel", case.text)
    status = main([command, str(root)])  # an exception escaping here would be a traceback for the user
    out, err = capsys.readouterr()
    assert status == 2, out + err
    assert_one_line_naming(out + err, root, case)


# --------------------------------------------------------------------------------------------------
# This repository's own kernel: ltx-kernels


def test_repo_build_toml_is_valid_ltx_kernels() -> None:
    config = load_config(REPO, validate_files=False)
    assert config.general.name == "ltx-kernels"
    assert {"cpu", "cuda"} <= set(config.general.backends)
    assert config.framework == "torch"
    assert not config.is_noarch("cpu") and not config.is_noarch("cuda")
    assert config.package_dir == REPO / "kernel_src" / "torch-ext" / "ltx_kernels"


def test_repo_build_toml_sources_exist() -> None:
    config = load_config(REPO)  # every listed source file is present
    assert isinstance(config, BuildConfig)
