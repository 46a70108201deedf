"""Lock Hub kernels to exact commits and variant digests: what `hubkernels lock` and `load_locked` read back.

`lock(["ORG/NAME@vN", ...], output)` locks kernels by name; `lock_project(DIR)` locks what DIR/pyproject.toml lists
in `[tool.kernels.dependencies]`, as `kernels lock DIR` does (`add=` first adds named kernels to that list).
Kernels that a locked variant `kernel-depends` on are locked too. The files are `lockfile`'s: `kernels.lock` in
HF kernels' own format, and our digests beside it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..metadata import Metadata
from .cache import RepoState
from .lockfile import (
    DEFAULT_LOCKFILE,
    LockedVariant,
    LockEntry,
    LockFileError,
    add_dependency,
    read_dependencies,
    read_lock,
    write_lock,
)
from .remote import KernelNotFoundError, Remote
from .resolve import build_tree, parse_spec, resolve_ref

__all__ = ["lock", "lock_kernel", "lock_project"]

logger = logging.getLogger("hubkernels.fetch")


def lock_kernel(
    repo_id: str, *, version: int | None = None, revision: str | None = None, cache_dir: str | Path | None = None
) -> LockEntry:
    """Resolve one kernel on the Hub now and record its commit and every variant's metadata hash and digest.

    With neither `version` nor `revision`, the newest version is resolved and recorded as that version.
    """
    entry, _ = _lock_one(repo_id, version, revision, cache_dir)
    return entry


def lock(
    specs: Sequence[str], output: str | Path | None = DEFAULT_LOCKFILE, *, cache_dir: str | Path | None = None
) -> list[LockEntry]:
    """Lock `org/name[@vN|@rev]` specs and the kernels they depend on; with `output`, merge them into that file."""
    if not specs:
        raise UsageError("name at least one kernel to lock, e.g. `hubkernels lock hubkernels/ltx-kernels@v1`")
    entries = _lock_tree([parse_spec(spec) for spec in specs], cache_dir)
    if output is not None:
        path = Path(output)
        kept = dict(read_lock(path)) if path.is_file() else {}
        kept.update({e.repo_id: e for e in entries})
        write_lock(path, kept.values())
    return entries


def lock_project(
    project_dir: str | Path = ".", *, add: Sequence[str] = (), cache_dir: str | Path | None = None
) -> list[LockEntry]:
    """Lock what `project_dir/pyproject.toml` lists in `[tool.kernels.dependencies]` into `project_dir/kernels.lock`.

    `add`: `org/name@vN` specs to put on that list first (the file is otherwise left as it was).
    """
    project = Path(project_dir)
    for spec in add:
        repo_id, version, revision = parse_spec(spec)
        if version is None:
            raise UsageError(f"{spec}: pyproject.toml lists kernels by major version; write {repo_id}@v<N>")
        add_dependency(project / "pyproject.toml", repo_id, version)
    deps = read_dependencies(project / "pyproject.toml")
    entries = _lock_tree([(repo_id, version, None) for repo_id, version in sorted(deps.items())], cache_dir)
    write_lock(project / DEFAULT_LOCKFILE, entries)
    return entries


def _lock_tree(wanted: list[tuple[str, int | None, str | None]], cache_dir: str | Path | None) -> list[LockEntry]:
    """Lock each (repo_id, version, revision) and, transitively, the kernels its variants depend on."""
    done: dict[str, LockEntry] = {}
    todo = list(wanted)
    while todo:
        repo_id, version, revision = todo.pop(0)
        if repo_id in done:
            continue
        entry, deps = _lock_one(repo_id, version, revision, cache_dir)
        done[repo_id] = entry
        todo.extend(d for d in deps if d[0] not in done)
    return list(done.values())


def _lock_one(
    repo_id: str, version: int | None, revision: str | None, cache_dir: str | Path | None
) -> tuple[LockEntry, list[tuple[str, int | None, str | None]]]:
    state, remote = RepoState(repo_id, cache_dir), Remote(repo_id)
    ref = resolve_ref(state, remote, version, revision, max_age=0.0)  # a lock records the Hub as it is now
    tree = build_tree(state, remote, ref.commit)
    if tree is None:
        raise KernelNotFoundError(
            f"HF_HUB_OFFLINE=1 and the variants of {repo_id}@{ref.commit[:7]} were never "
            "listed here; lock needs the Hub."
        )
    metas = sorted(p for p in tree if p.count("/") == 2 and p.endswith("/metadata.json"))
    missing = [p for p in metas if not (state.repo_dir / "snapshots" / ref.commit / p).is_file()]
    if missing:
        remote.download(ref.commit, missing, state.cache, force=False, label=f"{repo_id} metadata")
    variants: dict[str, LockedVariant] = {}
    deps: list[tuple[str, int | None, str | None]] = []
    for p in metas:
        raw = (state.repo_dir / "snapshots" / ref.commit / p).read_bytes()
        if not tree[p].matches(raw):
            raise LockFileError(
                f"the cached {p} of {repo_id}@{ref.commit[:7]} differs from the Hub's; delete "
                f"{state.repo_dir} and lock again"
            )
        metadata = Metadata.from_dict(json.loads(raw))
        digest = metadata.digest or {}
        variants[p.split("/")[1]] = LockedVariant(
            hashlib.sha256(raw).hexdigest(), str(digest.get("algorithm", "sha256")), dict(digest.get("files") or {})
        )
        deps.extend(_dependency(d) for d in metadata.kernel_depends)
    if not variants:
        raise KernelNotFoundError(f"{repo_id}@{ref.commit[:7]} has no build variants to lock")
    if version is None and revision is None:
        version = ref.version  # recorded as what it resolved to: kernels' lock names a version or a revision
    return LockEntry(repo_id, ref.commit, version, revision, variants), deps


def _dependency(dep: Any) -> tuple[str, int | None, str | None]:
    """A metadata.json `kernel-depends` item ({"repo-id", "version" | "revision"}) as (repo_id, version, revision)."""
    if isinstance(dep, str):
        return parse_spec(dep)
    return str(dep["repo-id"]), dep.get("version"), dep.get("revision")
