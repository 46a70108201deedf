"""Lock files: pin Hub kernels to exact commits and the exact bytes of every variant, and load only that.

`hubkernels lock ORG/NAME[@vN|@rev]... [--output kernels.lock]` writes, per kernel, the resolved commit and, for
every variant at that commit, the sha256 of its metadata.json plus the per-file digest it carries (so the
metadata hash pins every file). `load_locked(repo_id, lockfile=...)` (or `get_kernel(repo_id, lockfile=...)`)
loads that commit and refuses a variant whose metadata.json is not byte-for-byte the locked one.

Format (JSON): {"hubkernels_lock": 1, "kernels": [{"repo_id", "version", "revision", "commit",
"variants": {"<variant>": {"metadata_sha256", "algorithm", "files": {path: b64 digest}}}}]}.
`version`/`revision` record what was asked for (null when neither was: the newest version).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import HubkernelsError, UsageError
from .fetch import TrustRemoteCode, _tree, import_installed, install, parse_spec, resolve_ref
from .fetch._hub import KernelNotFoundError, Remote
from .fetch._local import RepoState
from .fetch.deps import locked_dependencies
from .metadata import Metadata

FORMAT = 1
DEFAULT_LOCKFILE = "kernels.lock"


class LockFileError(HubkernelsError, ValueError):
    """A lock file is missing, malformed, or has no entry for the kernel asked for."""


@dataclass(frozen=True)
class LockedVariant:
    metadata_sha256: str
    algorithm: str
    files: dict[str, str]


@dataclass(frozen=True)
class LockEntry:
    """One locked kernel: the commit and what each of its variants must be."""

    repo_id: str
    commit: str
    version: int | None = None
    revision: str | None = None
    variants: dict[str, LockedVariant] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"repo_id": self.repo_id, "version": self.version, "revision": self.revision, "commit": self.commit,
                "variants": {name: {"metadata_sha256": v.metadata_sha256, "algorithm": v.algorithm, "files": v.files}
                             for name, v in sorted(self.variants.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LockEntry:
        return cls(repo_id=str(data["repo_id"]), commit=str(data["commit"]), version=data.get("version"),
                   revision=data.get("revision"),
                   variants={name: LockedVariant(str(v["metadata_sha256"]), str(v.get("algorithm", "sha256")),
                                                 dict(v.get("files") or {}))
                             for name, v in dict(data["variants"]).items()})


def lock_kernel(repo_id: str, *, version: int | None = None, revision: str | None = None,
                cache_dir: str | Path | None = None) -> LockEntry:
    """Resolve one kernel on the Hub now and record its commit and every variant's metadata hash and digest."""
    state, remote = RepoState(repo_id, cache_dir), Remote(repo_id)
    ref = resolve_ref(state, remote, version, revision, max_age=0.0)  # a lock records the Hub as it is now
    tree = _tree(state, remote, ref.commit)
    if tree is None:
        raise KernelNotFoundError(f"HF_HUB_OFFLINE=1 and the variants of {repo_id}@{ref.commit[:7]} were never "
                                  "listed here; lock needs the Hub.")
    metas = sorted(p for p in tree if p.count("/") == 2 and p.endswith("/metadata.json"))
    missing = [p for p in metas if not (state.repo_dir / "snapshots" / ref.commit / p).is_file()]
    if missing:
        remote.download(ref.commit, missing, state.cache, force=False, label=f"{repo_id} metadata")
    variants: dict[str, LockedVariant] = {}
    for p in metas:
        raw = (state.repo_dir / "snapshots" / ref.commit / p).read_bytes()
        if not tree[p].matches(raw):
            raise LockFileError(f"the cached {p} of {repo_id}@{ref.commit[:7]} differs from the Hub's; delete "
                                f"{state.repo_dir} and lock again")
        digest = Metadata.from_dict(json.loads(raw)).digest or {}
        variants[p.split("/")[1]] = LockedVariant(hashlib.sha256(raw).hexdigest(), str(digest.get("algorithm", "sha256")),
                                                  dict(digest.get("files") or {}))
    if not variants:
        raise KernelNotFoundError(f"{repo_id}@{ref.commit[:7]} has no build variants to lock")
    return LockEntry(repo_id, ref.commit, version, revision, variants)


def lock(specs: Sequence[str], output: str | Path | None = DEFAULT_LOCKFILE, *,
         cache_dir: str | Path | None = None) -> list[LockEntry]:
    """Lock `org/name[@vN|@rev]` specs; with `output`, merge them into that file (other kernels stay as they were)."""
    if not specs:
        raise UsageError("name at least one kernel to lock, e.g. `hubkernels lock hubkernels/ltx-kernels@v1`")
    entries = []
    for spec in specs:
        repo_id, version, revision = parse_spec(spec)
        entries.append(lock_kernel(repo_id, version=version, revision=revision, cache_dir=cache_dir))
    for entry in entries:  # grows while it runs: the kernel-depends of what is locked are locked too
        for dep in locked_dependencies(entry.repo_id, entry.commit, entry.variants, cache_dir):
            if dep.repo_id not in {e.repo_id for e in entries}:
                entries.append(lock_kernel(dep.repo_id, version=dep.version, revision=dep.revision,
                                           cache_dir=cache_dir))
    if output is not None:
        path = Path(output)
        kept = {e.repo_id: e for e in read_lock(path).values()} if path.is_file() else {}
        kept.update({e.repo_id: e for e in entries})
        write_lock(path, kept.values())
    return entries


def write_lock(path: str | Path, entries: Sequence[LockEntry] | Any) -> None:
    data = {"hubkernels_lock": FORMAT, "kernels": [e.to_json() for e in sorted(entries, key=lambda e: e.repo_id)]}
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def read_lock(path: str | Path) -> dict[str, LockEntry]:
    """{repo_id: entry} from a lock file, with an error that says how to make one if it is unusable."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise LockFileError(f"{path} does not exist. Create it with `hubkernels lock ORG/NAME@vN --output {path}`.") \
            from None
    except (OSError, ValueError) as e:
        raise LockFileError(f"{path} is not a readable lock file ({e})") from None
    if not isinstance(data, dict) or data.get("hubkernels_lock") != FORMAT:
        raise LockFileError(f"{path} is not a hubkernels lock file (format {FORMAT}); re-create it with "
                            "`hubkernels lock`")
    try:
        return {e.repo_id: e for e in (LockEntry.from_json(k) for k in data["kernels"])}
    except (KeyError, TypeError, ValueError) as e:
        raise LockFileError(f"{path} has a malformed entry ({e!r}); re-create it with `hubkernels lock`") from None


def _entry(repo_id: str, lockfile: str | Path) -> LockEntry:
    entries = read_lock(lockfile)
    if repo_id not in entries:
        raise LockFileError(f"{lockfile} has no entry for {repo_id} (it locks: {', '.join(sorted(entries)) or 'none'})."
                            f" Add it with `hubkernels lock {repo_id} --output {lockfile}`.")
    return entries[repo_id]


def install_locked(repo_id: str, *, lockfile: str | Path = DEFAULT_LOCKFILE, backend: str | None = None,
                   trust_remote_code: TrustRemoteCode = False, force_download: bool = False,
                   cache_dir: str | Path | None = None) -> Path:
    """Download and verify the locked commit's variant for this machine; returns its directory."""
    entry = _entry(repo_id, lockfile)
    return install(repo_id, revision=entry.commit, backend=backend, trust_remote_code=trust_remote_code,
                   force_download=force_download, cache_dir=cache_dir,
                   locked={n: v.metadata_sha256 for n, v in entry.variants.items()}, pins=_pins(lockfile)).path


def load_locked(repo_id: str, *, lockfile: str | Path = DEFAULT_LOCKFILE, backend: str | None = None,
                trust_remote_code: TrustRemoteCode = False, force_download: bool = False,
                cache_dir: str | Path | None = None) -> ModuleType:
    """Import the locked commit of `repo_id`; refuses a variant whose metadata.json differs from the lock."""
    entry = _entry(repo_id, lockfile)
    installed = install(repo_id, revision=entry.commit, backend=backend, trust_remote_code=trust_remote_code,
                        force_download=force_download, cache_dir=cache_dir,
                        locked={n: v.metadata_sha256 for n, v in entry.variants.items()}, pins=_pins(lockfile))
    return import_installed(installed)


def _pins(lockfile: str | Path) -> dict[str, str]:
    """{repo_id: commit} of every kernel in the lock: a locked kernel's dependencies load at these commits."""
    return {e.repo_id: e.commit for e in read_lock(lockfile).values()}


def register_cli(subparsers) -> None:  # type: ignore[no-untyped-def]
    """Add `hubkernels lock` (hubkernels.fetch.register_cli calls this; a second call is a no-op)."""
    if "lock" in subparsers.choices:
        return
    p = subparsers.add_parser("lock", help="pin Hub kernels to exact commits and variant hashes in a lock file")
    p.add_argument("kernels", nargs="+", metavar="ORG/NAME[@vN|@REV]", help="kernels to lock")
    p.add_argument("-o", "--output", default=DEFAULT_LOCKFILE, help="lock file to write or update (kernels.lock)")
    p.set_defaults(func=_cmd_lock)


def _cmd_lock(args) -> int:  # type: ignore[no-untyped-def]
    for entry in lock(args.kernels, args.output):
        asked = f"v{entry.version}" if entry.version is not None else entry.revision or "newest"
        print(f"{entry.repo_id} ({asked}) -> {entry.commit}: {len(entry.variants)} variant(s)")
    print(f"wrote {args.output}")
    return 0
