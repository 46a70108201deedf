"""Read a kernel's `build.toml` (kernel-builder edition 5) into typed, frozen values.

Every mistake in the file (a syntax error, an unknown, missing or mistyped key, a bad value, a source file
that is not there) raises `ConfigError`, which names the file, the table and the key in one line that says
what to do. The schema follows kernel-builder's `kernels-data/src/config/v5.rs`: every table rejects
unknown keys, so a misspelt key is an error, never silently ignored.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from hubkernels.errors import HubkernelsError
from hubkernels.system import BACKENDS as _VARIANT_BACKENDS

__all__ = [
    "BACKENDS",
    "DEPENDENCIES",
    "EDITION",
    "KERNEL_BACKENDS",
    "PYTHON_DEPENDS",
    "BuildConfig",
    "ConfigError",
    "General",
    "GeneralBackend",
    "GeneralCuda",
    "HubConfig",
    "KernelConfig",
    "KernelDependency",
    "TorchConfig",
    "TorchNoarch",
    "TvmFfi",
    "load_config",
]

EDITION = 5
"""The only `general.edition` this module reads."""

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

PYTHON_DEPENDS: dict[str, tuple[str, ...]] = {
    "general": ("einops", "helion", "tvm-ffi"),
    "cuda": ("nvidia-cutlass-dsl",),
    "xpu": ("onednn",),
    "neuron": ("nki",),
    "tpu": (),
}
"""The curated `python-depends` keys, per table (kernel-builder's `python_dependencies.json`)."""

_NAME_RE = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_CUDA_CAP_RE = re.compile(r"^[0-9]+\.[0-9]+[af]?(\+PTX)?$")
_ROCM_ARCH_RE = re.compile(r"^gfx[0-9a-z]+(:[a-z0-9_-]+[+-])*$")
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
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

    def __init__(
        self, file: str | Path, table: str, key: str | None, message: str, *, line: int | None = None
    ) -> None:
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


def _rebuild_config_error(
    file: Path, table: str, key: str | None, message: str, line: int | None
) -> ConfigError:
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
    """`[general]`: the kernel's identity, the backends it supports and its dependencies."""

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
        return self.root / "torch-ext"

    @property
    def package_dir(self) -> Path:
        """The kernel's Python package directory: `torch_ext_dir / python_name`."""
        return self.torch_ext_dir / self.python_name

    def kernels_for(self, backend: str) -> list[KernelConfig]:
        """The `[kernel.*]` tables compiled for `backend`, in file order (empty for a noarch backend)."""
        self._check_listed(backend)
        return [kernel for kernel in self.kernels.values() if kernel.backend == backend]

    def is_noarch(self, backend: str) -> bool:
        """True when `backend` builds no native code: a [torch-noarch] kernel, or no [kernel.*] for it."""
        self._check_listed(backend)
        if self.torch_noarch is not None:
            return True
        return not any(kernel.backend == backend for kernel in self.kernels.values())

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


def load_config(path: str | Path, *, validate_files: bool = True) -> BuildConfig:
    """Read and validate `build.toml` from a kernel root directory (or the build.toml file itself).

    With `validate_files` (the default) every listed source file must exist relative to the kernel root;
    pass False to check the file's contents only.
    """
    given = Path(path)
    if given.is_dir():
        file = given / "build.toml"
    elif given.exists() or given.name == "build.toml":
        file = given
    else:
        raise ConfigError(given, "", None, "does not exist; pass a kernel root directory or its build.toml")
    if not file.is_file():
        raise ConfigError(
            file, "", None, "not found; pass the kernel root (the directory that holds build.toml)"
        )
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(file, "", None, f"is not UTF-8 text ({exc.reason}); save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(file, "", None, f"cannot be read: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(file, text, exc) from None

    root = file.resolve().parent
    config = _Reader(file).build(data, root, file.resolve())
    if validate_files:
        _check_files(file, config)
    return config


# --------------------------------------------------------------------------------------------------
# Reading tables


_TOML_TYPE_NAMES = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
                    (list, "an array"), (dict, "a table"))


def _toml_type(value: Any) -> str:
    """How a TOML value's type reads in an error message (bool before int: True is an int in Python)."""
    return next((name for kind, name in _TOML_TYPE_NAMES if isinstance(value, kind)), "a date/time")


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean '{match[0]}'?" if match else ""


class _Table:
    """One TOML table being read; knows the file and its dotted name so every error can name them."""

    def __init__(self, file: Path, name: str, data: dict[str, Any]) -> None:
        self.file = file
        self.name = name
        self.data = data

    def fail(self, key: str | None, message: str) -> NoReturn:
        raise ConfigError(self.file, self.name, key, message)

    def check_keys(self, allowed: Sequence[str], hints: dict[str, str] | None = None) -> None:
        for key in self.data:
            if key in allowed:
                continue
            hint = (hints or {}).get(key)
            if hint is None:
                hint = _did_you_mean(key, allowed)
            listing = ", ".join(allowed) if allowed else "none"
            self.fail(key, f"is not allowed here (allowed: {listing}).{hint}".rstrip())

    def require(self, key: str, example: str) -> None:
        if key not in self.data:
            self.fail(key, f"is missing; add it, e.g. {example}")

    def typed(self, key: str, kind: type, kind_name: str, example: str) -> Any:
        value = self.data[key]
        if isinstance(value, bool) and kind is not bool:
            ok = False
        else:
            ok = isinstance(value, kind)
        if not ok:
            self.fail(key, f"must be {kind_name}, not {_toml_type(value)} (e.g. {example})")
        return value

    def string(self, key: str, example: str, *, required: bool = False) -> str | None:
        if key not in self.data:
            if required:
                self.require(key, example)
            return None
        value = self.typed(key, str, "a string", example)
        if not value.strip():
            self.fail(key, f"must not be empty (e.g. {example})")
        return value

    def strings(
        self, key: str, example: str, *, required: bool = False, default: tuple[str, ...] = ()
    ) -> tuple[str, ...]:
        if key not in self.data:
            if required:
                self.require(key, example)
            return default
        value = self.data[key]
        if isinstance(value, str):
            self.fail(key, f"must be an array of strings, not a string (write {key} = [{_toml_value(value)}])")
        value = self.typed(key, list, "an array of strings", example)
        for index, item in enumerate(value):
            if not isinstance(item, str):
                self.fail(
                    key,
                    f"must be an array of strings, but entry {index + 1} is {_toml_type(item)} "
                    f"({_toml_value(item)}; e.g. {example})",
                )
        return tuple(value)

    def choices(
        self,
        key: str,
        allowed: Sequence[str],
        what: str,
        example: str,
        *,
        required: bool = False,
        hints: dict[str, str] | None = None,
    ) -> tuple[str, ...]:
        values = self.strings(key, example, required=required)
        for value in values:
            if value not in allowed:
                listing = ", ".join(allowed) if allowed else "none"
                hint = (hints or {}).get(value) or _did_you_mean(value, allowed)
                self.fail(key, f"has {value!r}, which is not {what} (allowed: {listing}).{hint}".rstrip())
        return values

    def version(self, key: str, example: str) -> str | None:
        if key not in self.data:
            return None
        value = self.data[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self.fail(key, f"must be a string, not {_toml_type(value)}: quote it (e.g. {example})")
        value = self.typed(key, str, "a version string", example)
        if not _VERSION_RE.match(value.strip()):
            self.fail(key, f"has {value!r}, which is not a version; write dot-separated numbers (e.g. {example})")
        return value.strip()

    def sub(self, key: str) -> _Table | None:
        if key not in self.data:
            return None
        value = self.data[key]
        name = f"{self.name}.{key}" if self.name else key
        if not isinstance(value, dict):
            self.fail(key, f"must be a table [{name}], not {_toml_type(value)}")
        return _Table(self.file, name, value)

    def relative_paths(self, key: str, example: str, *, required: bool = False) -> tuple[str, ...]:
        values = self.strings(key, example, required=required)
        for value in values:
            if Path(value).is_absolute() or value.startswith("~"):
                self.fail(key, f"has the absolute path {value!r}; paths are relative to the kernel root")
            if not value.strip():
                self.fail(key, "has an empty path; remove it or write the file's path relative to the kernel root")
        return values

    def pyext(self) -> tuple[str, ...]:
        values = self.strings("pyext", '["py", "json"]', default=_DEFAULT_PYEXT)
        for value in values:
            if not _EXT_RE.match(value):
                fix = f" (write {value.lstrip('.')!r})" if value.startswith(".") else ""
                self.fail("pyext", f"has {value!r}, which is not a file extension{fix}; e.g. [\"py\", \"json\"]")
        return values


class _Reader:
    """Turns the parsed TOML document into a BuildConfig, failing on the first schema violation."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def build(self, data: dict[str, Any], root: Path, resolved_file: Path) -> BuildConfig:
        top = _Table(self.file, "", data)
        top.check_keys(
            _TOP_KEYS,
            {"test": " build.toml has no [test] table: tests are found in tests/ by convention."},
        )
        if "general" not in data:
            raise ConfigError(
                self.file,
                "general",
                None,
                "is missing; add [general] with name, version, edition = 5, license and backends",
            )
        general_table = top.sub("general")
        assert general_table is not None
        general = self.general(general_table)

        present = [name for name in _FRAMEWORKS if name in data]
        if not present:
            raise ConfigError(
                self.file,
                "",
                None,
                "has no framework table; add exactly one of [torch] (compiled extension), "
                "[torch-noarch] (pure Python) or [tvm-ffi]",
            )
        if len(present) > 1:
            raise ConfigError(
                self.file,
                present[1],
                None,
                f"cannot be combined with [{present[0]}]; a kernel has exactly one framework table, keep one",
            )
        framework = top.sub(present[0])
        assert framework is not None
        torch = self.torch(framework) if present[0] == "torch" else None
        noarch = self.torch_noarch(framework) if present[0] == "torch-noarch" else None
        tvm_ffi = self.tvm_ffi(framework) if present[0] == "tvm-ffi" else None

        kernels: dict[str, KernelConfig] = {}
        kernel_table = top.sub("kernel")
        if kernel_table is not None:
            for name, value in kernel_table.data.items():
                if not isinstance(value, dict):
                    kernel_table.fail(
                        name,
                        f"must be a table [kernel.{name}], not {_toml_type(value)}; "
                        "each kernel is its own table, e.g. [kernel.my_kernel_cuda] with backend, depends and src",
                    )
                kernels[name] = self.kernel(_Table(self.file, f"kernel.{name}", value), name)

        return BuildConfig(
            root=root,
            file=resolved_file,
            general=general,
            torch=torch,
            torch_noarch=noarch,
            tvm_ffi=tvm_ffi,
            kernels=kernels,
        )

    # [general] ------------------------------------------------------------------------------------

    def general(self, t: _Table) -> General:
        # The edition decides the schema, so it is checked before anything else (as kernel-builder does).
        if "edition" not in t.data:
            t.fail(
                "edition",
                f"is missing; add edition = {EDITION} (older build.toml files: migrate with "
                "`kernel-builder update-build`)",
            )
        edition = t.typed("edition", int, "an integer", f"edition = {EDITION}")
        if edition != EDITION:
            t.fail(
                "edition",
                f"is {edition}: unsupported build edition {edition}; hubkernels reads edition {EDITION} "
                f"(set edition = {EDITION}, migrating the file with `kernel-builder update-build` if needed)",
            )
        t.check_keys(_GENERAL_KEYS)
        for key, example in (
            ("name", 'name = "my-kernel"'),
            ("version", "version = 1"),
            ("license", 'license = "apache-2.0"'),
            ("backends", 'backends = ["cpu", "cuda"]'),
        ):
            t.require(key, example)

        name = t.typed("name", str, "a string", 'name = "my-kernel"')
        if not _NAME_RE.match(name):
            suggestion = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
            hint = f" (e.g. {suggestion!r})" if _NAME_RE.match(suggestion) else " (e.g. 'my-kernel')"
            t.fail(
                "name",
                f"has {name!r}, which is not a valid kernel name: use lowercase letters, digits and '-', "
                f"starting with a letter and ending with a letter or digit{hint}",
            )
        version = t.typed("version", int, "an integer", "version = 1")
        if version < 0:
            t.fail("version", f"is {version}; the major version must be 0 or more (e.g. version = 1)")
        license_ = t.string("license", 'license = "apache-2.0"', required=True)
        assert license_ is not None

        backends = t.choices("backends", BACKENDS, "a backend", 'backends = ["cpu", "cuda"]', required=True)
        if not backends:
            t.fail("backends", f"is empty; list the backends this kernel supports (any of {', '.join(BACKENDS)})")
        backends = tuple(dict.fromkeys(backends))

        upstream = self.git_url(t, "upstream")
        source = self.git_url(t, "source")
        python_depends = self.python_depends(t, "general")
        kernel_depends = self.kernel_depends(t)

        hub = HubConfig()
        hub_table = t.sub("hub")
        if hub_table is not None:
            hub_table.check_keys(("repo-id", "branch"))
            repo_id = hub_table.string("repo-id", 'repo-id = "my-org/my-kernel"')
            if repo_id is not None and not _REPO_ID_RE.match(repo_id):
                hub_table.fail("repo-id", f"has {repo_id!r}; write the Hub repository as 'owner/name'")
            hub = HubConfig(repo_id=repo_id, branch=hub_table.string("branch", 'branch = "v1"'))

        cuda = GeneralCuda()
        cuda_table = t.sub("cuda")
        if cuda_table is not None:
            cuda_table.check_keys(("minver", "maxver", "kernel-depends", "python-depends"))
            minver = cuda_table.version("minver", 'minver = "12.8"')
            maxver = cuda_table.version("maxver", 'maxver = "13.0"')
            self.check_bounds(cuda_table, minver, maxver)
            cuda = GeneralCuda(
                minver=minver,
                maxver=maxver,
                python_depends=self.python_depends(cuda_table, "cuda"),
                kernel_depends=self.kernel_depends(cuda_table),
            )

        per_backend: dict[str, GeneralBackend] = {}
        for backend in ("xpu", "neuron", "tpu"):
            sub = t.sub(backend)
            if sub is None:
                per_backend[backend] = GeneralBackend()
                continue
            allowed = ("python-depends",) if backend == "tpu" else ("kernel-depends", "python-depends")
            sub.check_keys(allowed)
            per_backend[backend] = GeneralBackend(
                python_depends=self.python_depends(sub, backend),
                kernel_depends=self.kernel_depends(sub),
            )

        return General(
            name=name,
            version=version,
            edition=edition,
            license=license_,
            backends=backends,
            upstream=upstream,
            source=source,
            python_depends=python_depends,
            kernel_depends=kernel_depends,
            hub=hub,
            cuda=cuda,
            xpu=per_backend["xpu"],
            neuron=per_backend["neuron"],
            tpu=per_backend["tpu"],
        )

    @staticmethod
    def python_depends(t: _Table, scope: str) -> tuple[str, ...]:
        """`python-depends` of [general] (scope "general") or [general.<backend>]: curated names only."""
        allowed = PYTHON_DEPENDS[scope]
        hints = {
            dep: f" '{dep}' belongs in [{'general' if owner == 'general' else 'general.' + owner}] python-depends."
            for owner, deps in PYTHON_DEPENDS.items()
            if owner != scope
            for dep in deps
        }
        what = "a curated Python dependency" + ("" if scope == "general" else f" for {scope}")
        example = f"python-depends = [{_toml_value(allowed[0])}]" if allowed else "python-depends = []"
        return t.choices("python-depends", allowed, what, example, hints=hints)

    @staticmethod
    def git_url(t: _Table, key: str) -> str | None:
        value = t.string(key, f'{key} = "https://github.com/org/repo.git"')
        if value is None:
            return None
        scheme, sep, rest = value.partition("://")
        if sep:
            if scheme not in _GIT_SCHEMES or not rest.strip("/"):
                schemes = ", ".join(_GIT_SCHEMES)
                t.fail(key, f"has {value!r}, which is not a git URL; use one of the schemes {schemes}")
            return value
        host, colon, path = value.partition(":")  # scp-like: git@github.com:org/repo.git
        if colon and host and path and not path.startswith("/") and " " not in value:
            return value
        t.fail(key, f"has {value!r}, which is not a git URL (e.g. \"https://github.com/org/repo.git\")")

    @staticmethod
    def kernel_depends(t: _Table) -> tuple[KernelDependency, ...]:
        """`kernel-depends`: inline tables `{ repo-id = "o/n", version = 1 }` or `{ ..., revision = "sha" }`."""
        key = "kernel-depends"
        if key not in t.data:
            return ()
        example = '[{ repo-id = "kernels-community/activation", version = 1 }]'
        entries = t.typed(key, list, "an array of tables", f"{key} = {example}")
        deps: list[KernelDependency] = []
        for index, entry in enumerate(entries, start=1):
            if not isinstance(entry, dict):
                t.fail(key, f"entry {index} must be a table, not {_toml_type(entry)} (e.g. {key} = {example})")
            deps.append(_kernel_dependency(t, f"entry {index}", entry))
        return tuple(deps)

    @staticmethod
    def check_bounds(t: _Table, minver: str | None, maxver: str | None) -> None:
        if minver is None or maxver is None:
            return
        low = tuple(int(p) for p in minver.split("."))
        high = tuple(int(p) for p in maxver.split("."))
        if low > high:
            t.fail("maxver", f"is {maxver!r}, below minver {minver!r}; no version would be built")

    # framework tables ----------------------------------------------------------------------------

    def torch(self, t: _Table) -> TorchConfig:
        t.check_keys(("src", "include", "pyext", "minver", "maxver", "cxx-flags", "stable-abi"))
        minver = t.version("minver", 'minver = "2.12"')
        maxver = t.version("maxver", 'maxver = "2.13"')
        self.check_bounds(t, minver, maxver)
        return TorchConfig(
            src=t.relative_paths("src", 'src = ["torch-ext/torch_binding.cpp"]'),
            include=t.relative_paths("include", 'include = ["csrc/include"]'),
            pyext=t.pyext(),
            minver=minver,
            maxver=maxver,
            cxx_flags=t.strings("cxx-flags", 'cxx-flags = ["-O3"]'),
            stable_abi=self.stable_abi(t),
        )

    @staticmethod
    def stable_abi(t: _Table) -> StableAbi | None:
        if "stable-abi" not in t.data:
            return None
        value = t.data["stable-abi"]
        if isinstance(value, str):
            version = t.version("stable-abi", 'stable-abi = "2.11"')
            assert version is not None
            return version
        if not isinstance(value, dict):
            t.fail(
                "stable-abi",
                f"must be a version string or a table of backend = version, not {_toml_type(value)} "
                '(e.g. stable-abi = "2.11" or stable-abi = { cuda = "2.11" })',
            )
        table = _Table(t.file, "torch.stable-abi", value)
        table.check_keys(BACKENDS)
        versions: dict[str, str] = {}
        for backend in value:
            version = table.version(backend, f'{backend} = "2.11"')
            assert version is not None
            versions[backend] = version
        return versions

    @staticmethod
    def torch_noarch(t: _Table) -> TorchNoarch:
        # kernel-builder's TorchNoarch lacks the kebab-case rename, so the code reads the snake_case
        # spellings while the docs show kebab-case; both are accepted here.
        t.check_keys(("pyext", "cuda-capabilities", "rocm-archs", "cuda_capabilities", "rocm_archs"))
        for kebab, snake in (("cuda-capabilities", "cuda_capabilities"), ("rocm-archs", "rocm_archs")):
            if kebab in t.data and snake in t.data:
                t.fail(snake, f"repeats '{kebab}' (two spellings of one key); keep one")
        cap_key = "cuda_capabilities" if "cuda_capabilities" in t.data else "cuda-capabilities"
        arch_key = "rocm_archs" if "rocm_archs" in t.data else "rocm-archs"
        return TorchNoarch(
            pyext=t.pyext(),
            cuda_capabilities=_cuda_capabilities(t, cap_key),
            rocm_archs=_rocm_archs(t, arch_key),
        )

    @staticmethod
    def tvm_ffi(t: _Table) -> TvmFfi:
        t.check_keys(("src", "include", "pyext", "cxx-flags"))
        return TvmFfi(
            src=t.relative_paths("src", 'src = ["tvm-ffi-ext/tvm_ffi_binding.cpp"]', required=True),
            include=t.relative_paths("include", 'include = ["csrc/include"]'),
            pyext=t.pyext(),
            cxx_flags=t.strings("cxx-flags", 'cxx-flags = ["-O3"]'),
        )

    # [kernel.<name>] -----------------------------------------------------------------------------

    @staticmethod
    def kernel(t: _Table, name: str) -> KernelConfig:
        """One [kernel.<name>]: `backend` first, because it decides which other keys are allowed."""
        t.require("backend", 'backend = "cuda"')
        backend = t.typed("backend", str, "a string", 'backend = "cuda"')
        if backend not in KERNEL_BACKENDS:
            if backend in BACKENDS:
                extra = f" {backend} is built noarch: remove this table and keep {backend!r} in [general] backends."
            else:
                extra = _did_you_mean(backend, KERNEL_BACKENDS)
            allowed = ", ".join(KERNEL_BACKENDS)
            t.fail("backend", f"has {backend!r}, which cannot build native kernels (allowed: {allowed}).{extra}")
        allowed = _KERNEL_COMMON_KEYS + _KERNEL_BACKEND_KEYS[backend]
        hints = {
            key: f" '{key}' applies to backend '{owner}' only; this kernel's backend is '{backend}'."
            for owner, keys in _KERNEL_BACKEND_KEYS.items()
            if owner != backend
            for key in keys
        }
        t.check_keys(allowed, hints)
        t.require("depends", 'depends = ["torch"]')
        suffix = {"cuda": "cu", "rocm": "cu", "metal": "mm"}.get(backend, "cpp")
        src = t.relative_paths("src", f'src = ["{name}/{name}.{suffix}"]', required=True)
        if not src:
            t.fail("src", "is empty; list the kernel's source files, relative to the kernel root")
        return KernelConfig(
            name=name,
            backend=backend,
            depends=t.choices("depends", DEPENDENCIES, "a known dependency", 'depends = ["torch"]', required=True),
            src=src,
            include=t.relative_paths("include", f'include = ["{name}"]'),
            cxx_flags=t.strings("cxx-flags", 'cxx-flags = ["-O3"]'),
            cuda_capabilities=_cuda_capabilities(t, "cuda-capabilities"),
            cuda_flags=t.strings("cuda-flags", 'cuda-flags = ["--use_fast_math"]'),
            cuda_minver=t.version("cuda-minver", 'cuda-minver = "12.8"'),
            rocm_archs=_rocm_archs(t, "rocm-archs"),
            hip_flags=t.strings("hip-flags", 'hip-flags = ["-O3"]'),
            sycl_flags=t.strings("sycl-flags", 'sycl-flags = ["-O3"]'),
        )


def _kernel_dependency(t: _Table, where: str, entry: dict[str, Any]) -> KernelDependency:
    """One `kernel-depends` entry; `where` ("entry 2") tells the user which one is wrong."""
    key, allowed = "kernel-depends", ("repo-id", "version", "revision")
    for name in entry:
        if name not in allowed:
            hint = _did_you_mean(name, allowed)
            t.fail(key, f"{where} has unknown key '{name}' (allowed: {', '.join(allowed)}).{hint}".rstrip())
    repo_id = entry.get("repo-id")
    if not isinstance(repo_id, str) or not _REPO_ID_RE.match(repo_id):
        shown = "is missing repo-id" if repo_id is None else f"has repo-id {_toml_value(repo_id)}"
        t.fail(key, f'{where} {shown}; write the Hub repository as repo-id = "owner/name"')
    where = f"{where} ({repo_id})"
    version, revision = entry.get("version"), entry.get("revision")
    if version is not None and revision is not None:
        t.fail(key, f"{where} sets both version and revision; they are mutually exclusive, keep one")
    if version is None and revision is None:
        t.fail(key, f'{where} needs version = <major> or revision = "<git revision>"')
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
        t.fail(key, f"{where} has version {_toml_value(version)}; write a major version number, e.g. version = 1")
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        t.fail(key, f"{where} has revision {_toml_value(revision)}; write a git revision string")
    return KernelDependency(repo_id=repo_id, version=version, revision=revision)


def _cuda_capabilities(t: _Table, key: str) -> tuple[str, ...]:
    values = t.strings(key, f'{key} = ["8.0", "9.0a", "12.0+PTX"]')
    for value in values:
        if not _CUDA_CAP_RE.match(value):
            t.fail(
                key,
                f"has {value!r}, which is not a CUDA capability; write major.minor with an optional "
                "'a'/'f' suffix and '+PTX' (e.g. \"8.0\", \"9.0a\", \"12.0+PTX\")",
            )
    return values


def _rocm_archs(t: _Table, key: str) -> tuple[str, ...]:
    values = t.strings(key, f'{key} = ["gfx90a", "gfx942"]')
    for value in values:
        if not _ROCM_ARCH_RE.match(value):
            t.fail(key, f"has {value!r}, which is not a ROCm architecture (e.g. \"gfx90a\", \"gfx942\")")
    return values


def _check_files(file: Path, config: BuildConfig) -> None:
    """Every listed source must be a file under the kernel root; the error names its table and `src`."""
    tables: list[tuple[str, tuple[str, ...]]] = []
    if config.torch is not None:
        tables.append(("torch", config.torch.src))
    if config.tvm_ffi is not None:
        tables.append(("tvm-ffi", config.tvm_ffi.src))
    tables.extend((f"kernel.{kernel.name}", kernel.src) for kernel in config.kernels.values())
    for table, sources in tables:
        for source in sources:
            path = config.root / source
            if not path.is_file():
                what = "is a directory, not a file" if path.is_dir() else "does not exist"
                raise ConfigError(
                    file,
                    table,
                    "src",
                    f"lists {source!r}, which {what} (looked for {path}); "
                    "fix the path, relative to the kernel root",
                )


# --------------------------------------------------------------------------------------------------
# TOML syntax errors

_POSITION_RE = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_END_RE = re.compile(r"\s*\(at end of document\)\s*$")
_HEADER_RE = re.compile(r"^\s*\[\[?\s*([^\]\[]+?)\s*\]\]?\s*(#.*)?$")


def _syntax_error(file: Path, text: str, exc: Exception) -> ConfigError:
    """A ConfigError for a TOML syntax error: its line and column, and the table it sits in."""
    message = str(exc)
    lines = text.splitlines()
    line: int | None = getattr(exc, "lineno", None)
    column: int | None = getattr(exc, "colno", None)
    match = _POSITION_RE.search(message)
    if match:
        line, column = int(match.group(1)), int(match.group(2))
        message = message[: match.start()]
    elif _END_RE.search(message):
        message = _END_RE.sub("", message)
        line = line or len(lines) or 1
    message = message.rstrip(". ")
    table = ""
    if line is not None:
        for candidate in lines[: line][::-1]:
            header = _HEADER_RE.match(candidate)
            if header:
                table = header.group(1).replace('"', "").replace(" ", "")
                break
    where = f"line {line}, column {column}" if column is not None else f"line {line}"
    source = lines[line - 1].strip() if line is not None and 0 < line <= len(lines) else ""
    shown = f" ({source!r})" if source else ""
    return ConfigError(
        file, table, None, f"invalid TOML at {where}{shown}: {message}; fix the syntax there", line=line
    )
