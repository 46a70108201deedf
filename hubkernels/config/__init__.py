"""Read a kernel's `build.toml` (kernel-builder edition 5, or edition 4 upgraded in memory) into typed values.

Every mistake in the file (a syntax error, an unknown, missing or mistyped key, a bad value, a source file
that is not there) raises `ConfigError`, which names the file, the table and the key in one line that says
what to do. The schema follows kernel-builder's `kernels-data/src/config/v5.rs`: every table rejects
unknown keys, so a misspelt key is an error, never silently ignored.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from .model import (
    BACKENDS,
    DEPENDENCIES,
    EDITION,
    KERNEL_BACKENDS,
    LEGACY_EDITION,
    PYTHON_DEPENDS,
    PYTHON_MODULES,
    BuildConfig,
    ConfigError,
    General,
    GeneralBackend,
    GeneralCuda,
    HubConfig,
    KernelConfig,
    KernelDependency,
    TorchConfig,
    TorchNoarch,
    TvmFfi,
)
from .schema import _Reader
from .tables import _syntax_error

__all__ = [
    "BACKENDS",
    "DEPENDENCIES",
    "EDITION",
    "KERNEL_BACKENDS",
    "LEGACY_EDITION",
    "PYTHON_DEPENDS",
    "PYTHON_MODULES",
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
        raise ConfigError(file, "", None, "not found; pass the kernel root (the directory that holds build.toml)")
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
    if config.general.edition == LEGACY_EDITION:
        logging.getLogger("hubkernels.config").warning(
            "%s uses the legacy edition 4 (no edition key); read as edition %d. Add edition = %d to "
            "[general] to say so.",
            file,
            EDITION,
            EDITION,
        )
    if validate_files:
        _check_files(file, config)
    return config


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
                    f"lists {source!r}, which {what} (looked for {path}); fix the path, relative to the kernel root",
                )
