"""Lock files, the format only: HF `kernels`' `kernels.lock`, our digests beside it, and `pyproject.toml`'s list.

`kernels.lock` is exactly what `kernels lock` (0.17.2) writes and `kernels download` reads: a JSON list of
`{"dependency": {"repo-id": ..., "version": N | "revision": ...}, "lock": {"commit": <40 hex>}}`. Its reader
rejects any key it does not know, so what hubkernels adds (per variant: the sha256 of metadata.json and the
per-file digest it carries) lives beside it, in `<lockfile>.digests`, keyed by repo and commit; a lock that
`kernels lock` rewrote simply has no digests for the commits it changed. The kernels to lock are declared in
`pyproject.toml` as `[tool.kernels.dependencies]` `"org/name" = <major version>`.

Older files still read: hubkernels' format 1 (`{"hubkernels_lock": 1, ...}`) and the list of
`{"repo_id", "sha", "variants"}` that kernels wrote before 0.17. Locking lives in `fetch.locking`, loading what a
lock says in `fetch.load` (`load_locked`).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import HubkernelsError
from ..layout import is_repo_id, write_atomic

DEFAULT_LOCKFILE = "kernels.lock"
DIGESTS_SUFFIX = ".digests"
#: The format of the digests file (and of the old single-file hubkernels lock).
FORMAT = 1

_COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_TABLE = "[tool.kernels.dependencies]"


class LockFileError(HubkernelsError, ValueError):
    """A lock file is missing, malformed, or has no entry for the kernel asked for."""


@dataclass(frozen=True)
class LockedVariant:
    """What one variant must be: the sha256 of its metadata.json and the per-file digest that file carries."""

    metadata_sha256: str
    algorithm: str = "sha256"
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LockEntry:
    """One locked kernel: what was asked for (`version` or `revision`), the commit, and its variants' digests."""

    repo_id: str
    commit: str
    version: int | None = None
    revision: str | None = None
    variants: dict[str, LockedVariant] = field(default_factory=dict)


def digests_path(lockfile: str | Path) -> Path:
    """Where the digests of `lockfile` live: `kernels.lock` -> `kernels.lock.digests`."""
    lockfile = Path(lockfile)
    return lockfile.with_name(lockfile.name + DIGESTS_SUFFIX)


def write_lock(path: str | Path, entries: Iterable[LockEntry]) -> None:
    """Write `path` in kernels' format and, if any entry has digests, `<path>.digests` beside it."""
    entries = sorted(entries, key=lambda e: e.repo_id)
    locks = []
    for e in entries:
        if e.version is None and e.revision is None:
            raise LockFileError(f"{e.repo_id}: a lock entry needs the version or revision it was resolved from")
        dep: dict[str, Any] = {"repo-id": e.repo_id}
        dep.update({"version": e.version} if e.version is not None else {"revision": e.revision})
        locks.append({"dependency": dep, "lock": {"commit": e.commit}})
    digests = {
        e.repo_id: {
            "commit": e.commit,
            "variants": {
                name: {"metadata_sha256": v.metadata_sha256, "algorithm": v.algorithm, "files": v.files}
                for name, v in sorted(e.variants.items())
            },
        }
        for e in entries
        if e.variants
    }
    path = Path(path)
    write_atomic(path, json.dumps(locks, indent=2) + "\n")
    side = digests_path(path)
    if digests:
        write_atomic(side, json.dumps({"hubkernels_digests": FORMAT, "kernels": digests}, indent=2) + "\n")
    elif side.exists():
        side.unlink()


def read_lock(path: str | Path) -> dict[str, LockEntry]:
    """{repo_id: entry} from a lock file (kernels', or an older format), with its digests where they still apply."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise LockFileError(
            f"{path} does not exist. Create it with `hubkernels lock ORG/NAME@vN --output {path}`."
        ) from None
    except (OSError, ValueError) as e:
        raise LockFileError(f"{path} is not a readable lock file ({e}); re-create it with `hubkernels lock`") from None
    try:
        if isinstance(data, dict) and data.get("hubkernels_lock") == FORMAT:
            return {e.repo_id: e for e in (_old_entry(k) for k in data["kernels"])}
        if not isinstance(data, list):
            raise TypeError("expected a JSON list of locked kernels")
        entries = [_kernels_entry(item) if "dependency" in item else _pre017_entry(item) for item in data]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise LockFileError(f"{path} is not a kernels.lock file ({e}); re-create it with `hubkernels lock`") from None
    digests = _read_digests(digests_path(path))
    out: dict[str, LockEntry] = {}
    for entry in entries:
        locked = digests.get(entry.repo_id)
        if locked is not None and locked.get("commit") == entry.commit:
            entry = LockEntry(entry.repo_id, entry.commit, entry.version, entry.revision, _variants(locked["variants"]))
        out.setdefault(entry.repo_id, entry)  # kernels also takes the first entry of a repo
    return out


def lock_entry(lockfile: str | Path, repo_id: str) -> LockEntry:
    """The entry of `repo_id`, or an error that says how to add it."""
    entries = read_lock(lockfile)
    if repo_id not in entries:
        raise LockFileError(
            f"{lockfile} has no entry for {repo_id} (it locks: {', '.join(sorted(entries)) or 'none'})."
            f" Add it with `hubkernels lock {repo_id} --output {lockfile}`."
        )
    return entries[repo_id]


def read_dependencies(pyproject: str | Path) -> dict[str, int]:
    """`[tool.kernels.dependencies]` of a pyproject.toml: {"org/name": major version}."""
    pyproject, toml = Path(pyproject), _toml()
    try:
        data = toml.loads(pyproject.read_text())
    except FileNotFoundError:
        raise LockFileError(
            f"{pyproject} does not exist: name the kernels (`hubkernels lock ORG/NAME@vN`), or list "
            f"them in its {_TABLE} table"
        ) from None
    except (OSError, toml.TOMLDecodeError) as e:
        raise LockFileError(f"{pyproject} cannot be read ({e})") from None
    deps = data.get("tool", {}).get("kernels", {}).get("dependencies")
    if not isinstance(deps, dict) or not deps:
        raise LockFileError(
            f"{pyproject} has no {_TABLE} table; add one with lines like "
            '"kernels-community/activation" = 1, or run `hubkernels lock ORG/NAME@vN --project DIR`'
        )
    bad = [k for k, v in deps.items() if isinstance(v, bool) or not isinstance(v, int) or not is_repo_id(k)]
    if bad:
        raise LockFileError(f'{pyproject} {_TABLE}: {", ".join(bad)} must be "org/name" = <major version number>')
    return dict(deps)


def add_dependency(pyproject: str | Path, repo_id: str, version: int) -> None:
    """Set `"repo_id" = version` in `[tool.kernels.dependencies]`, keeping the rest of the file as it is."""
    pyproject = Path(pyproject)
    text = pyproject.read_text() if pyproject.exists() else ""
    line = f'"{repo_id}" = {version}'
    key = re.compile(rf'^[ \t]*["\']{re.escape(repo_id)}["\'][ \t]*=.*$', re.M)
    header = re.compile(rf"^[ \t]*{re.escape(_TABLE)}[ \t]*(#.*)?$", re.M)
    if key.search(text):
        new = key.sub(line, text, count=1)
    elif (m := header.search(text)) is not None:
        new = text[: m.end()] + "\n" + line + text[m.end() :]
    else:
        new = text + ("\n" if text and not text.endswith("\n") else "") + ("\n" if text else "") + f"{_TABLE}\n{line}\n"
    toml = _toml()
    try:
        got = toml.loads(new).get("tool", {}).get("kernels", {}).get("dependencies", {})
    except toml.TOMLDecodeError:
        got = {}
    if got.get(repo_id) != version:
        raise LockFileError(
            f"cannot add {repo_id} to {pyproject} without rewriting it; add {line} under {_TABLE} yourself"
        )
    write_atomic(pyproject, new)


def _kernels_entry(item: dict[str, Any]) -> LockEntry:
    dep, lock = item["dependency"], item["lock"]
    unknown = (
        (set(item) - {"dependency", "lock"})
        | (set(dep) - {"repo-id", "version", "revision"})
        | (set(lock) - {"commit"})
    )
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))}")
    if ("version" in dep) == ("revision" in dep):
        raise ValueError(f"{dep.get('repo-id')}: exactly one of version and revision is needed")
    version = dep.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValueError(f"{dep['repo-id']}: version must be a number, got {version!r}")
    return LockEntry(str(dep["repo-id"]), _commit(lock["commit"]), version, dep.get("revision"))


def _pre017_entry(item: dict[str, Any]) -> LockEntry:
    return LockEntry(str(item["repo_id"]), _commit(item["sha"]), revision=str(item["sha"]))


def _old_entry(data: dict[str, Any]) -> LockEntry:
    commit, version, revision = _commit(data["commit"]), data.get("version"), data.get("revision")
    return LockEntry(
        str(data["repo_id"]),
        commit,
        version,
        commit if version is None and revision is None else revision,
        _variants(data["variants"]),
    )


def _variants(data: dict[str, Any]) -> dict[str, LockedVariant]:
    return {
        name: LockedVariant(str(v["metadata_sha256"]), str(v.get("algorithm", "sha256")), dict(v.get("files") or {}))
        for name, v in dict(data).items()
    }


def _commit(value: object) -> str:
    if not isinstance(value, str) or not _COMMIT.match(value):
        raise ValueError(f"{value!r} is not a commit id (40 hex digits)")
    return value


def _read_digests(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise LockFileError(f"{path} is not readable ({e}); delete it or re-create it with `hubkernels lock`") from None
    if (
        not isinstance(data, dict)
        or data.get("hubkernels_digests") != FORMAT
        or not isinstance(data.get("kernels"), dict)
    ):
        raise LockFileError(
            f"{path} is not a hubkernels digests file (format {FORMAT}); delete it or re-create it "
            "with `hubkernels lock`"
        )
    return data["kernels"]


def _toml() -> Any:
    """The TOML reader, imported when a pyproject.toml is read (loading a kernel needs none): `tomllib`, or on
    Python 3.10 the `tomli` package it came from (a dependency there)."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli

    return tomli
