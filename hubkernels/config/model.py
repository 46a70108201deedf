"""The typed values of a `build.toml` (kernel-builder edition 5): `BuildConfig` and its tables, the schema's
allowed values, and `ConfigError`. `hubkernels.config.schema` reads a file into them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from hubkernels.errors import HubkernelsError
from hubkernels.layout import torch_ext_dir
from hubkernels.system import BACKENDS as _VARIANT_BACKENDS

EDITION = 5
"""The `general.edition` this module reads; a file without one is edition 4 (`LEGACY_EDITION`)."""

LEGACY_EDITION = 4
"""A build.toml without `edition`: read and upgraded to edition 5 in memory, as kernels-data does."""

BACKENDS: tuple[str, ...] = tuple(sorted(set(_VARIANT_BACKENDS) - {"npu", "universal"}))
"""Values allowed in `general.backends`: the backends of `hubkernels.system.BACKENDS` that a build.toml names."""

KERNEL_BACKENDS: tuple[str, ...] = ("cpu", "cuda", "metal", "rocm", "xpu")
"""Values allowed in `[kernel.<name>] backend` (the other backends are built noarch only)."""

DEPENDENCIES: tuple[str, ...] = (
    "torch",
    "cutlass_2_10",
    "cutlass_3_5",
    "cutlass_3_6",
    "cutlass_3_8",
    "cutlass_3_9",
    "cutlass_4_0",
    "cutlass_4_4",
    "cutlass_4_5",
    "sycl_tla",
    "metal-cpp",
)
"""Values allowed in `[kernel.<name>] depends`."""

_CURATED: dict[str, dict[str, str | None]] = json.loads((Path(__file__).parent / "python_depends.json").read_text())

PYTHON_DEPENDS: dict[str, tuple[str, ...]] = {scope: tuple(deps) for scope, deps in _CURATED.items()}
"""The curated `python-depends` keys, per table (kernel-builder's `python_dependencies.json`; the data is
`python_depends.json` beside this module)."""

PYTHON_MODULES: dict[str, str | None] = {dep: module for deps in _CURATED.values() for dep, module in deps.items()}
"""Each curated `python-depends` key -> the module a loader imports to check it is installed (None: nothing to
check)."""

_NAME_RE = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_CUDA_CAP_RE = re.compile(r"^[0-9]+\.[0-9]+[af]?(\+PTX)?$")
_ROCM_ARCH_RE = re.compile(r"^gfx[0-9a-z]+(:[a-z0-9_-]+[+-])*$")
_EXT_RE = re.compile(r"^[A-Za-z0-9_]+$")
_GIT_SCHEMES = ("https", "http", "git", "ssh", "git+ssh", "git+https", "git+http")

_FRAMEWORKS = ("torch", "torch-noarch", "tvm-ffi")
_TOP_KEYS = ("general", *_FRAMEWORKS, "kernel")
_GENERAL_KEYS = (
    "name",
    "version",
    "edition",
    "license",
    "backends",
    "upstream",
    "source",
    "python-depends",
    "kernel-depends",
    "hub",
    "cuda",
    "xpu",
    "neuron",
    "tpu",
)
_KERNEL_COMMON_KEYS = ("backend", "depends", "src", "include", "cxx-flags")
_KERNEL_BACKEND_KEYS: dict[str, tuple[str, ...]] = {
    "cpu": (),
    "cuda": ("cuda-capabilities", "cuda-flags", "cuda-minver"),
    "metal": (),
    "rocm": ("rocm-archs", "hip-flags"),
    "xpu": ("sycl-flags",),
}
_DEFAULT_PYEXT = ("py", "pyi")

StableAbi = Union[str, dict[str, str]]


class ConfigError(HubkernelsError, ValueError):
    """A `build.toml` is unreadable or breaks the edition-5 schema.

    `file` is the build.toml path as the caller spelled it, `table` the dotted table name ("general",
    "kernel.relu_cuda"; "" for the top level of the document), `key` the offending key or None when the
    whole table is at fault, and `line` the 1-based line of a TOML syntax error.
    """

    def __init__(self, file: str | Path, table: str, key: str | None, message: str, *, line: int | None = None) -> None:
        self.file = Path(file)
        self.table = table
        self.key = key
        self.message = message
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"[{self.table}] " if self.table else ""
        if self.key is not None:
            what = f"key '{self.key}'" if self.table else f"top-level key '{self.key}'"
            return f"{self.file}: {where}{what} {self.message}"
        return f"{self.file}: {where}{self.message}"

    def __str__(self) -> str:
        return self._render()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_config_error, (self.file, self.table, self.key, self.message, self.line))


def _rebuild_config_error(file: Path, table: str, key: str | None, message: str, line: int | None) -> ConfigError:
    return ConfigError(file, table, key, message, line=line)


@dataclass(frozen=True)
class KernelDependency:
    """Another Hub kernel this one needs: pinned by major `version` or by exact `revision` (one of them)."""

    repo_id: str
    version: int | None = None
    revision: str | None = None


@dataclass(frozen=True)
class HubConfig:
    """`[general.hub]`: where `publish` uploads by default."""

    repo_id: str | None = None
    branch: str | None = None


@dataclass(frozen=True)
class GeneralCuda:
    """`[general.cuda]`: CUDA toolkit bounds (normally unset) and CUDA-only dependencies."""

    minver: str | None = None
    maxver: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()


@dataclass(frozen=True)
class GeneralBackend:
    """`[general.xpu]`, `[general.neuron]`, `[general.tpu]`: dependencies needed on that backend only."""

    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()


@dataclass(frozen=True)
class General:
    """`[general]`: the kernel's identity, the backends it supports and its dependencies.

    `edition` is the file's: 5, or 4 for a file without the key (its tables read as edition 5's).
    """

    name: str
    version: int
    edition: int
    license: str
    backends: tuple[str, ...]
    upstream: str | None = None
    source: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()
    hub: HubConfig = field(default_factory=HubConfig)
    cuda: GeneralCuda = field(default_factory=GeneralCuda)
    xpu: GeneralBackend = field(default_factory=GeneralBackend)
    neuron: GeneralBackend = field(default_factory=GeneralBackend)
    tpu: GeneralBackend = field(default_factory=GeneralBackend)


@dataclass(frozen=True)
class TorchConfig:
    """`[torch]`: an ahead-of-time compiled Torch extension (binding sources, Torch bounds, stable ABI)."""

    src: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    pyext: tuple[str, ...] = _DEFAULT_PYEXT
    minver: str | None = None
    maxver: str | None = None
    cxx_flags: tuple[str, ...] = ()
    stable_abi: StableAbi | None = None

    def stable_abi_for(self, backend: str) -> str | None:
        """The Torch stable-ABI version `backend` targets, or None to build it against the full ABI."""
        if isinstance(self.stable_abi, str):
            return self.stable_abi
        if isinstance(self.stable_abi, dict):
            return self.stable_abi.get(backend)
        return None


@dataclass(frozen=True)
class TorchNoarch:
    """`[torch-noarch]`: a pure-Python kernel (Triton, CuTe-DSL, ...); capabilities/archs go to metadata only."""

    pyext: tuple[str, ...] = _DEFAULT_PYEXT
    cuda_capabilities: tuple[str, ...] = ()
    rocm_archs: tuple[str, ...] = ()


@dataclass(frozen=True)
class TvmFfi:
    """`[tvm-ffi]`: an ahead-of-time compiled TVM-FFI extension."""

    src: tuple[str, ...]
    include: tuple[str, ...] = ()
    pyext: tuple[str, ...] = _DEFAULT_PYEXT
    cxx_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelConfig:
    """One `[kernel.<name>]`: native sources compiled for one backend. Keys of other backends stay empty."""

    name: str
    backend: str
    depends: tuple[str, ...]
    src: tuple[str, ...]
    include: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    cuda_capabilities: tuple[str, ...] = ()
    cuda_flags: tuple[str, ...] = ()
    cuda_minver: str | None = None
    rocm_archs: tuple[str, ...] = ()
    hip_flags: tuple[str, ...] = ()
    sycl_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildConfig:
    """A validated `build.toml`. Exactly one of `torch`, `torch_noarch`, `tvm_ffi` is set.

    `root` (the kernel root) and `file` are absolute; source paths in the tables are relative to `root`.
    """

    root: Path
    file: Path
    general: General
    torch: TorchConfig | None
    torch_noarch: TorchNoarch | None
    tvm_ffi: TvmFfi | None
    kernels: dict[str, KernelConfig]

    @property
    def name(self) -> str:
        """The kernel name as written (`my-act`)."""
        return self.general.name

    @property
    def python_name(self) -> str:
        """The Python package name: the kernel name with '-' replaced by '_' (`my_act`)."""
        return self.general.name.replace("-", "_")

    @property
    def framework(self) -> str:
        """Which framework table the file has: "torch", "torch-noarch" or "tvm-ffi"."""
        if self.torch is not None:
            return "torch"
        if self.torch_noarch is not None:
            return "torch-noarch"
        return "tvm-ffi"

    @property
    def branch(self) -> str:
        """The Hub branch builds are uploaded to: `[general.hub] branch`, else `v<version>`."""
        return self.general.hub.branch or f"v{self.general.version}"

    @property
    def data_extensions(self) -> tuple[str, ...]:
        """`pyext` entries other than py/pyi: extra data files shipped with the Python package."""
        table = self.torch or self.torch_noarch or self.tvm_ffi
        assert table is not None
        return tuple(ext for ext in table.pyext if ext not in _DEFAULT_PYEXT)

    @property
    def torch_ext_dir(self) -> Path:
        """The directory holding the Python package: that of the first binding source, else `root/torch-ext`."""
        src = self.torch.src if self.torch else self.tvm_ffi.src if self.tvm_ffi else ()
        if src:
            return (self.root / src[0]).parent
        return torch_ext_dir(self.root)

    @property
    def package_dir(self) -> Path:
        """The kernel's Python package directory: `torch_ext_dir / python_name`."""
        return self.torch_ext_dir / self.python_name

    def kernels_for(self, backend: str) -> list[KernelConfig]:
        """The `[kernel.*]` tables compiled for `backend`, in file order (empty for a noarch backend)."""
        self._check_listed(backend)
        return [kernel for kernel in self.kernels.values() if kernel.backend == backend]

    def is_noarch(self, backend: str) -> bool:
        """True when `backend` builds no native code: a [torch-noarch] kernel. A [torch] backend without a
        [kernel.*] is not noarch: it has nothing to build (kernel-builder's checks refuse it)."""
        self._check_listed(backend)
        return self.torch_noarch is not None

    def python_depends(self, backend: str) -> list[str]:
        """`[general] python-depends` followed by the `[general.<backend>]` ones, without duplicates."""
        self._check_listed(backend)
        specific = self._backend_table(backend)
        return list(dict.fromkeys((*self.general.python_depends, *specific.python_depends)))

    def kernel_depends(self, backend: str) -> list[KernelDependency]:
        """`[general] kernel-depends` followed by the `[general.<backend>]` ones, without duplicates."""
        self._check_listed(backend)
        specific = self._backend_table(backend)
        return list(dict.fromkeys((*self.general.kernel_depends, *specific.kernel_depends)))

    def _backend_table(self, backend: str) -> GeneralCuda | GeneralBackend:
        general = self.general
        tables: dict[str, GeneralCuda | GeneralBackend] = {
            "cuda": general.cuda,
            "xpu": general.xpu,
            "neuron": general.neuron,
            "tpu": general.tpu,
        }
        return tables.get(backend, GeneralBackend())

    def _check_listed(self, backend: str) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of: {', '.join(BACKENDS)}")
        if backend not in self.general.backends:
            raise ConfigError(
                self.file,
                "general",
                "backends",
                f"does not list {backend!r}; this kernel builds for {', '.join(self.general.backends)} "
                f"(add {backend!r} to backends to build it)",
            )
