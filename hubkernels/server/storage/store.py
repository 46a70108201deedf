"""Git-backed storage of the local Hub.

One bare git repository per (repo type, ``org/name``) under ``<root>/repos/<type>s/<org>/<name>.git``, driven
through the ``git`` CLI, so commits, branches and tags are real and a file's oid is git's blob sha1 (what the
client's cache and ``verify_repo_checksums`` check). Large files live content-addressed under
``<root>/lfs/<sha256>``; the git tree holds a standard LFS pointer for them.

Reads never lock (git objects are immutable and ``update-ref`` is atomic); writes to one repository are
serialised by a per-repository lock. One server process owns a root at a time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from .model import (  # noqa: F401  (re-exported: the routes and other modules import them from here)
    CONTROL_RE,
    DEFAULT_GITATTRIBUTES,
    LRU,
    MAX_PATH_DEPTH,
    MAX_PATH_LENGTH,
    MAX_POINTER_SIZE,
    NULL_SHA,
    REPO_TYPES,
    SHA256_RE,
    SNAPSHOT_CACHE_ENTRIES,
    SYSTEM_AUTHOR,
    USER_AUTHOR,
    USER_NAME,
    CommitMeta,
    Entry,
    HubError,
    LfsPointer,
    Operation,
    Refs,
    Snapshot,
    check_branch_name,
    check_path_in_repo,
    check_repo_name,
    decode_commit_lines,
    entry_not_found,
    git_blob_oid,
    gitignore_patterns,
    hub_date,
    lfs_patterns,
    matches_patterns,
    repo_not_found,
    revision_not_found,
)
from .repo import LINKS_SCANNED, OBJECT_LINKS, PRIVATE_MARKER, Repo  # noqa: F401

if TYPE_CHECKING:
    from ..xet.store import XetStore

POINTER_CACHE_ENTRIES = 200_000
"""The most small blobs whose "LFS pointer or not" answer the server keeps (about 40 MiB); older ones are read again."""


class Storage:
    """All repositories and LFS objects under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.repos_dir = self.root / "repos"
        self.lfs_dir = self.root / "lfs"
        self.tmp_dir = self.root / "tmp"
        for d in (self.repos_dir, self.lfs_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)
        if shutil.which("git") is None:
            raise RuntimeError("The local hub stores repositories with git, but `git` is not on PATH: install git.")
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._snapshots = LRU(256, weight=lambda snap: len(snap.entries), max_weight=SNAPSHOT_CACHE_ENTRIES)
        self._commits = LRU(4096)
        self._pointer_cache = LRU(POINTER_CACHE_ENTRIES)  # oid -> LfsPointer, or False for a regular file
        self.xet: XetStore | None = None  # set by hubkernels.server.xet.install
        self._env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.root),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
        }

    # -- repositories -------------------------------------------------------------------------------------------

    def repo_path(self, repo_type: str, repo_id: str) -> Path:
        org, _, name = repo_id.partition("/")
        check_repo_name(org, name)
        return self.repos_dir / f"{repo_type}s" / org / f"{name}.git"

    def repo(self, repo_type: str, repo_id: str) -> Repo:
        """The repository, or a 404 ``RepoNotFound`` (400 for a name with control characters)."""
        if CONTROL_RE.search(repo_id):
            raise HubError(400, f"Invalid repo name {repo_id!r}: control characters are not allowed in names.")
        if repo_type not in REPO_TYPES or repo_id.count("/") != 1:
            raise repo_not_found(repo_type, repo_id)
        try:
            path = self.repo_path(repo_type, repo_id)
        except HubError:
            raise repo_not_found(repo_type, repo_id) from None
        if not (path / "HEAD").is_file():
            raise repo_not_found(repo_type, repo_id)
        return Repo(self, repo_type, repo_id, path)

    def create_repo(self, repo_type: str, repo_id: str, *, private: bool = False) -> Repo:
        """A new repository whose ``main`` holds one commit with the default ``.gitattributes``; 409 if it exists."""
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"Invalid repo type {repo_type!r}: use one of {', '.join(REPO_TYPES)}.")
        path = self.repo_path(repo_type, repo_id)
        with self._repo_lock(path):
            if (path / "HEAD").is_file():
                raise HubError(409, f"You already created this {repo_type} repo: {repo_id}.")
            staging = Path(tempfile.mkdtemp(dir=self.tmp_dir, prefix="new-repo-"))
            try:
                self._git(["init", "--bare", "--quiet", "--initial-branch=main", str(staging)])
                repo = Repo(self, repo_type, repo_id, staging)
                blob = next(repo._write_blobs([DEFAULT_GITATTRIBUTES]))
                tree = repo.git("mktree", input=f"100644 blob {blob}\t.gitattributes\n".encode()).decode().strip()
                commit = repo._commit_tree(tree, [], "initial commit", SYSTEM_AUTHOR)
                repo.git("update-ref", "refs/heads/main", commit, NULL_SHA)
                (staging / OBJECT_LINKS).mkdir()
                (staging / OBJECT_LINKS / LINKS_SCANNED).touch()
                if private:
                    (staging / PRIVATE_MARKER).write_text("private\n")
                path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging, path)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return Repo(self, repo_type, repo_id, path)

    def delete_repo(self, repo_type: str, repo_id: str) -> None:
        repo = self.repo(repo_type, repo_id)
        with repo.lock:
            doomed = Path(tempfile.mkdtemp(dir=self.tmp_dir, prefix="deleted-"))
            os.replace(repo.path, doomed / "repo.git")
        shutil.rmtree(doomed, ignore_errors=True)

    def is_private(self, repo_type: str, repo_id: str) -> bool:
        """Whether this names an existing private repository (False for anything invalid or absent)."""
        try:
            return (self.repo_path(repo_type, repo_id) / PRIVATE_MARKER).is_file()
        except HubError:
            return False

    def list_repos(self) -> list[tuple[str, str]]:
        """Every (type, repo_id) stored."""
        out = []
        for repo_type in REPO_TYPES:
            for head in sorted((self.repos_dir / f"{repo_type}s").glob("*/*.git/HEAD")):
                out.append((repo_type, f"{head.parent.parent.name}/{head.parent.name[:-4]}"))
        return out

    # -- LFS objects --------------------------------------------------------------------------------------------

    def lfs_path(self, sha256: str) -> Path:
        if not SHA256_RE.match(sha256):
            raise HubError(400, f"Invalid LFS oid {sha256!r}: expected 64 lowercase hex digits (a sha256).")
        return self.lfs_dir / sha256

    def lfs_size(self, sha256: str) -> int | None:
        """The stored object's size, or None when it was never uploaded."""
        try:
            return self.lfs_path(sha256).stat().st_size
        except FileNotFoundError:
            return None

    def lfs_writer(self, sha256: str, expected_size: int | None) -> LfsWriter:
        return LfsWriter(self, sha256, expected_size)

    # -- internals ----------------------------------------------------------------------------------------------

    def _repo_lock(self, path: Path) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(str(path), threading.Lock())

    def _git(
        self, args: list[str], *, input: bytes | None = None, env: dict[str, str] | None = None, check: bool = True
    ) -> bytes:
        proc = subprocess.run(
            ["git", *args], input=input, capture_output=True, env={**self._env, **(env or {})}, check=False
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"git {' '.join(args[2:] if args[0] == '--git-dir' else args)} failed "
                f"({proc.returncode}): {proc.stderr.decode(errors='replace').strip()}"
            )
        return proc.stdout

    def _pointers_of(self, repo: Repo, oids: list[str]) -> dict[str, LfsPointer]:
        """Which of these small blobs are LFS pointers (one ``git cat-file --batch`` for the unknown ones)."""
        known = {o: self._pointer_cache.get(o) for o in set(oids)}
        unknown = sorted(o for o, p in known.items() if p is None)
        if unknown:
            out = repo.git("cat-file", "--batch", input="".join(o + "\n" for o in unknown).encode())
            pos = 0
            for oid in unknown:
                header_end = out.index(b"\n", pos)
                _, _, size = out[pos:header_end].decode().split()
                data = out[header_end + 1 : header_end + 1 + int(size)]
                pos = header_end + 1 + int(size) + 1
                known[oid] = LfsPointer.parse(data) or False
                self._pointer_cache.put(oid, known[oid])
        return {o: p for o in oids if (p := known[o])}


class LfsWriter:
    """Receives an LFS object in chunks, checks its sha256 and size, and stores it atomically."""

    def __init__(self, storage: Storage, sha256: str, expected_size: int | None) -> None:
        self.target = storage.lfs_path(sha256)
        self.sha256 = sha256
        self.expected_size = expected_size
        fd, tmp = tempfile.mkstemp(dir=storage.tmp_dir, prefix="lfs-")
        self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self._size = 0

    def write(self, chunk: bytes) -> None:
        if self.expected_size is not None and self._size + len(chunk) > self.expected_size:
            raise HubError(
                400,
                f"More bytes than announced for LFS object {self.sha256} ({self.expected_size}): "
                "upload the exact file bytes.",
            )
        self._file.write(chunk)
        self._hash.update(chunk)
        self._size += len(chunk)

    def finish(self) -> int:
        """Move the object into place; 400 if its content does not hash to the announced oid."""
        self._file.close()
        try:
            if self._hash.hexdigest() != self.sha256 or (
                self.expected_size is not None and self._size != self.expected_size
            ):
                raise HubError(
                    400,
                    f"Uploaded content does not match LFS oid {self.sha256}: got sha256 "
                    f"{self._hash.hexdigest()} and {self._size} bytes. Upload the exact file bytes.",
                )
            os.replace(self._tmp, self.target)
            return self._size
        finally:
            self._tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)
