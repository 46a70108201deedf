"""What hubkernels remembers on disk next to the huggingface_hub cache, so warm loads need no network.

Everything lives in the repository's own cache folder, `<cache>/kernels--org--name/hubkernels/`, which
`hf cache` ignores and `hf cache delete` removes together with the repository:

    refs.json                    the repo's branches and tags (version -> commit) and when they were listed
    trust.json                   whether the org is a trusted publisher, when that was checked, approved commits
    trees/<commit>.json          the listing of build/ at that commit (immutable, so kept forever)
    receipts/<commit>/<variant>.json
                                 proof that the variant's files were verified: metadata.json's sha256 and the
                                 hash of every file, which a warm load checks again (once per process)
    receipts/<commit>/<variant>.<python>.code
                                 the variant's Python code compiled from the verified sources (its sha256 is in
                                 the receipt), so verified variants never run a `__pycache__`

Files are written to a temporary name and renamed into place, so a crash never leaves a half-written record.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import marshal
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

from .. import digest as _digest
from .. import settings
from ..layout import METADATA, build_dir, shipped_files, variant_dir, write_atomic

#: Compiled code is kept per interpreter: its cache tag and bytecode magic number.
_CODE_TAG = f"{sys.implementation.cache_tag}-{importlib.util.MAGIC_NUMBER.hex()}"

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_VERSION_BRANCH = re.compile(r"^v(\d+)$")


def is_commit(revision: str | None) -> bool:
    """True for a full 40-hex commit id (immutable, so it needs no lookup)."""
    return bool(revision and _COMMIT.match(revision))


def version_of(branch: str) -> int | None:
    """`v12` -> 12; any other branch name -> None."""
    m = _VERSION_BRANCH.match(branch)
    return int(m.group(1)) if m else None


def hub_cache(cache_dir: str | Path | None = None) -> Path:
    """The huggingface_hub cache in use: `cache_dir`, else HUBKERNELS_CACHE/KERNELS_CACHE, else HF_HUB_CACHE."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    configured = settings.cache_dir()
    if configured is not None:
        return configured
    from huggingface_hub import constants  # a few ms; avoids the 200 ms of importing the download machinery

    return Path(constants.HF_HUB_CACHE)


def repo_folder(repo_id: str) -> str:
    """huggingface_hub's cache folder name of a kernel repo: `kernels--org--name`."""
    return "kernels--" + repo_id.replace("/", "--")


def write_json(path: Path, data: Any) -> None:
    """Record `data` at `path`, atomically."""
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def read_json(path: Path) -> Any:
    """The record at `path`, or None when it is missing or unreadable ("not known yet")."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Verified:
    """What a variant's files were verified to be: `{relative path: b64 hash}` in `algorithm` (the digest's), and
    optionally code objects compiled from exactly those sources (`{b64 hash of the source: code}`)."""

    algorithm: str
    files: Mapping[str, str]
    code: Mapping[str, CodeType] = field(default_factory=dict)


@dataclass(frozen=True)
class TreeEntry:
    """One file of build/ as the Hub listed it: size, git blob id, and the LFS sha256 when it is an LFS file."""

    size: int
    blob_id: str
    lfs_sha256: str | None = None

    def matches(self, data: bytes) -> bool:
        """Do these bytes hash to what the Hub says the file is?"""
        if len(data) != self.size:
            return False
        if self.lfs_sha256:
            return hashlib.sha256(data).hexdigest() == self.lfs_sha256
        return git_blob_id(data) == self.blob_id


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob: sha1 of `blob <size>\\0` + the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Refs:
    """A repo's branches and tags as last listed, and when (time.time())."""

    branches: dict[str, str]
    tags: dict[str, str]
    checked_at: float

    @property
    def versions(self) -> dict[int, str]:
        """{N: commit} for every `v<N>` branch, in ascending order of N."""
        found = {version_of(b): c for b, c in self.branches.items()}
        return {v: found[v] for v in sorted(v for v in found if v is not None)}

    def age(self) -> float:
        return time.time() - self.checked_at


class RepoState:
    """The records hubkernels keeps for one kernel repo inside its huggingface_hub cache folder."""

    def __init__(self, repo_id: str, cache_dir: str | Path | None = None) -> None:
        self.repo_id = repo_id
        self.cache = hub_cache(cache_dir)
        self.repo_dir = self.cache / repo_folder(repo_id)
        self.root = self.repo_dir / "hubkernels"

    # -- where the downloaded files are ---------------------------------------------------------------------

    def variant_dir(self, commit: str, variant: str) -> Path:
        """`<cache>/kernels--org--name/snapshots/<commit>/build/<variant>` (huggingface_hub's layout)."""
        return variant_dir(self.repo_dir / "snapshots" / commit, variant)

    def local_variants(self, commit: str) -> list[str]:
        """Variants of `commit` present in the cache (what an offline load can choose from without a listing)."""
        build = build_dir(self.repo_dir / "snapshots" / commit)
        return sorted(p.name for p in build.iterdir() if (p / METADATA).is_file()) if build.is_dir() else []

    # -- refs: version -> commit ----------------------------------------------------------------------------

    def refs(self) -> Refs | None:
        data = read_json(self.root / "refs.json")
        if not isinstance(data, dict):
            return None
        try:
            return Refs(dict(data["branches"]), dict(data["tags"]), float(data["checked_at"]))
        except (KeyError, TypeError, ValueError):
            return None

    def save_refs(self, branches: dict[str, str], tags: dict[str, str]) -> Refs:
        refs = Refs(branches, tags, time.time())
        write_json(self.root / "refs.json", {"branches": branches, "tags": tags, "checked_at": refs.checked_at})
        return refs

    def forget_refs(self) -> None:
        """Make the index stale (kept for offline use), so the next load by name lists the refs again."""
        refs = self.refs()
        if refs is not None:
            write_json(self.root / "refs.json", {"branches": refs.branches, "tags": refs.tags, "checked_at": 0.0})

    def hf_refs(self) -> dict[str, str]:
        """Branch -> commit from huggingface_hub's own `refs/` files (written when someone downloaded by name)."""
        refs_dir = self.repo_dir / "refs"
        out: dict[str, str] = {}
        if refs_dir.is_dir():
            for p in refs_dir.iterdir():
                if p.is_file():
                    commit = p.read_text().strip()
                    if is_commit(commit):
                        out[p.name] = commit
        return out

    def write_hf_ref(self, branch: str, commit: str) -> None:
        """Record `refs/<branch>` the way huggingface_hub does, so HF `kernels` finds `version=N` offline too.

        Only written once the commit's snapshot exists (`hf cache scan` rejects refs to missing snapshots).
        """
        if "/" in branch or not (self.repo_dir / "snapshots" / commit).is_dir():
            return
        path = self.repo_dir / "refs" / branch
        try:
            if path.is_file() and path.read_text() == commit:
                return
            write_atomic(path, commit)
        except OSError:
            pass  # a convenience for other tools; never a reason to fail a load

    # -- trust -----------------------------------------------------------------------------------------------

    def trust(self) -> dict[str, Any]:
        data = read_json(self.root / "trust.json")
        return data if isinstance(data, dict) else {}

    def save_trust(self, *, publisher_trusted: bool | None = None, approve: str | None = None) -> None:
        """Record the org's trusted-publisher flag (now) and/or a commit loaded while it was trusted."""
        data = self.trust()
        if publisher_trusted is not None:
            data["publisher_trusted"] = publisher_trusted
            data["checked_at"] = time.time()
        if approve:
            commits = set(data.get("approved_commits") or [])
            commits.add(approve)
            data["approved_commits"] = sorted(commits)
        write_json(self.root / "trust.json", data)

    # -- trees: the build/ listing of a commit --------------------------------------------------------------

    def tree(self, commit: str) -> dict[str, TreeEntry] | None:
        data = read_json(self.root / "trees" / f"{commit}.json")
        if not isinstance(data, dict):
            return None
        try:
            return {p: TreeEntry(int(e["size"]), str(e["blob_id"]), e.get("lfs_sha256")) for p, e in data.items()}
        except (KeyError, TypeError, ValueError):
            return None

    def save_tree(self, commit: str, tree: dict[str, TreeEntry]) -> None:
        write_json(
            self.root / "trees" / f"{commit}.json",
            {
                p: {"size": e.size, "blob_id": e.blob_id, **({"lfs_sha256": e.lfs_sha256} if e.lfs_sha256 else {})}
                for p, e in tree.items()
            },
        )

    # -- receipts ---------------------------------------------------------------------------------------------

    def _receipt_path(self, commit: str, variant: str) -> Path:
        return self.root / "receipts" / commit / f"{variant}.json"

    def _code_path(self, commit: str, variant: str) -> Path:
        return self.root / "receipts" / commit / f"{variant}.{_CODE_TAG}.code"

    def receipt(self, commit: str, variant: str) -> dict[str, Any] | None:
        data = read_json(self._receipt_path(commit, variant))
        return data if isinstance(data, dict) and "files" in data and "metadata_sha256" in data else None

    def save_receipt(self, commit: str, variant: str, metadata_sha256: str, verified: Verified) -> None:
        """Record what the variant's files were verified to be (their hashes), and its compiled Python code."""
        record: dict[str, Any] = {
            "metadata_sha256": metadata_sha256,
            "verified_at": time.time(),
            "algorithm": verified.algorithm,
            "files": dict(verified.files),
        }
        if verified.code:
            path = self._code_path(commit, variant)
            data = marshal.dumps(dict(verified.code))
            write_atomic(path, data)
            record["code"] = {_CODE_TAG: hashlib.sha256(data).hexdigest()}
        write_json(self._receipt_path(commit, variant), record)

    def drop_receipt(self, commit: str, variant: str) -> None:
        self._receipt_path(commit, variant).unlink(missing_ok=True)
        self._code_path(commit, variant).unlink(missing_ok=True)

    def receipt_holds(self, commit: str, variant: str) -> tuple[str, Verified] | None:
        """(metadata sha256, what was verified) if every file still has the content the receipt recorded, else None.

        Each file is hashed once per process (`digest.hash_file(memo=True)`): a same-size edit with its mtime put
        back is caught, and a second load in the process costs one stat per file.
        """
        receipt = self.receipt(commit, variant)
        if receipt is None:
            return None
        algorithm, files = receipt.get("algorithm"), receipt.get("files")
        if algorithm not in ("sha256", "sha512") or not isinstance(files, dict):
            return None  # a receipt of an older hubkernels (sizes and mtimes only): verify again
        vdir = self.variant_dir(commit, variant)
        try:
            meta = _digest.hash_file(vdir / "metadata.json", "sha256", memo=True)
            current = _digest.hash_variant(vdir, algorithm, memo=True)
        except OSError:
            return None
        if current != files or base64.b64decode(meta).hex() != receipt["metadata_sha256"]:
            return None
        code = self._code(commit, variant, receipt)
        return str(receipt["metadata_sha256"]), Verified(algorithm, files, code)

    def _code(self, commit: str, variant: str, receipt: dict[str, Any]) -> dict[str, CodeType]:
        """The code compiled at verification, if its bytes are those the receipt recorded (else none: compile)."""
        expected = (receipt.get("code") or {}).get(_CODE_TAG) if isinstance(receipt.get("code"), dict) else None
        if not expected:
            return {}
        try:
            data = self._code_path(commit, variant).read_bytes()
            if hashlib.sha256(data).hexdigest() != expected:
                return {}
            code = marshal.loads(data)
        except (OSError, ValueError, EOFError, TypeError):
            return {}
        ok = isinstance(code, dict) and all(isinstance(k, str) and isinstance(v, CodeType) for k, v in code.items())
        return code if ok else {}


def compile_sources(vdir: Path, verified: Verified) -> dict[str, CodeType]:
    """Code objects of the variant's verified .py files, compiled from bytes re-hashed as they are read."""
    root = vdir.resolve()
    code: dict[str, CodeType] = {}
    for rel, expected in verified.files.items():
        if not rel.endswith(".py"):
            continue
        path = root / rel
        try:
            data = path.read_bytes()
            if _digest.hash_bytes(data, verified.algorithm) == expected:
                code[expected] = compile(data, str(path), "exec", dont_inherit=True)
        except (OSError, SyntaxError, ValueError):
            continue  # imported from source later, where the error is reported
    return code


def file_stats(variant_dir: Path) -> list[tuple[str, tuple[int, int, int]]]:
    """(relative path, (size, mtime_ns, inode)) of every file, following the cache's symlinks to the blobs."""
    out = []
    for rel, p in shipped_files(variant_dir):
        st = p.stat()
        out.append((rel, (st.st_size, st.st_mtime_ns, st.st_ino)))
    return sorted(out)
