"""Reading one TOML table with errors that name the file, the table and the key; TOML syntax errors."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..layout import is_repo_id
from .model import (
    _CUDA_CAP_RE,
    _DEFAULT_PYEXT,
    _EXT_RE,
    _ROCM_ARCH_RE,
    _VERSION_RE,
    ConfigError,
    KernelDependency,
)

_TOML_TYPE_NAMES = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)


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
                self.fail("pyext", f'has {value!r}, which is not a file extension{fix}; e.g. ["py", "json"]')
        return values


def _kernel_dependency(t: _Table, where: str, entry: dict[str, Any]) -> KernelDependency:
    """One `kernel-depends` entry; `where` ("entry 2") tells the user which one is wrong."""
    key, allowed = "kernel-depends", ("repo-id", "version", "revision")
    for name in entry:
        if name not in allowed:
            hint = _did_you_mean(name, allowed)
            t.fail(key, f"{where} has unknown key '{name}' (allowed: {', '.join(allowed)}).{hint}".rstrip())
    repo_id = entry.get("repo-id")
    if not is_repo_id(repo_id):
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
            t.fail(key, f'has {value!r}, which is not a ROCm architecture (e.g. "gfx90a", "gfx942")')
    return values


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
        for candidate in lines[:line][::-1]:
            header = _HEADER_RE.match(candidate)
            if header:
                table = header.group(1).replace('"', "").replace(" ", "")
                break
    where = f"line {line}, column {column}" if column is not None else f"line {line}"
    source = lines[line - 1].strip() if line is not None and 0 < line <= len(lines) else ""
    shown = f" ({source!r})" if source else ""
    return ConfigError(file, table, None, f"invalid TOML at {where}{shown}: {message}; fix the syntax there", line=line)
