"""Git-backed storage of the local Hub.

One bare git repository per (repo type, ``org/name``) under ``<root>/repos/<type>s/<org>/<name>.git``, driven
through the ``git`` CLI, so commits, branches and tags are real and a file's oid is git's blob sha1 (what the
client's cache and ``verify_repo_checksums`` check). Large files live content-addressed under
``<root>/lfs/<sha256>``; the git tree holds a standard LFS pointer for them.

Reads never lock (git objects are immutable and ``update-ref`` is atomic); writes to one repository are
serialised by a per-repository lock. One server process owns a root at a time.
"""

from __future__ import annotations

import base64
import collections
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Literal

from ..errors import HubkernelsError

REPO_TYPES = ("model", "dataset", "space", "kernel")
"""Repository types the server accepts (the Hub's plural forms name them in URLs: ``models``, ``kernels`` ...)."""

LFS_SPEC = "https://git-lfs.github.com/spec/v1"
MAX_POINTER_SIZE = 1024  # git-lfs never writes a pointer larger than this
NULL_SHA = "0" * 40
DEFAULT_GITATTRIBUTES = (
    "".join(
        f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
        for pattern in (
            "*.so", "*.dylib", "*.dll", "*.bin", "*.safetensors", "*.pt", "*.pth", "*.ckpt", "*.onnx",
            "*.h5", "*.msgpack", "*.npy", "*.npz", "*.pkl", "*.zip", "*.tar.gz", "*.tgz", "*.whl",
        )
    )
).encode()
"""The ``.gitattributes`` of the initial commit: binary artefacts are LFS files, as on the Hub."""

SYSTEM_AUTHOR = ("system", "system@hub.local")
USER_NAME = "local-user"
USER_AUTHOR = (USER_NAME, f"{USER_NAME}@hub.local")

_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?$")
_HEX_RE = re.compile(r"^[0-9a-f]{7,40}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_BRANCH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}$")


class HubError(HubkernelsError):
    """An error the server answers with: HTTP status, message and, when typed, the Hub's ``X-Error-Code``."""

    def __init__(self, status: int, message: str, code: str | None = None, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


def repo_not_found(repo_type: str, repo_id: str) -> HubError:
    return HubError(404, f"Repository not found: {repo_type} {repo_id} does not exist on this hub.", "RepoNotFound")


def revision_not_found(repo_id: str, rev: str) -> HubError:
    return HubError(404, f"Revision not found: {rev!r} is neither a branch, a tag nor a commit of {repo_id}.",
                    "RevisionNotFound")


def entry_not_found(path: str, commit: str, what: str = "file") -> HubError:
    return HubError(404, f"Entry not found: {what} {path!r} does not exist at commit {commit}.", "EntryNotFound",
                    headers={"X-Repo-Commit": commit})


def check_repo_name(org: str, name: str) -> None:
    """Reject names the Hub rejects (and any that could escape the storage root)."""
    for part in (org, name):
        if not _NAME_RE.match(part) or "--" in part or ".." in part or part.endswith(".git"):
            raise HubError(400, f"Invalid repo name {org}/{name}: use letters, digits, '-', '_' and '.', "
                                "at most 96 characters, no '--' or '..', not ending in '.git'.")


def check_path_in_repo(path: str) -> str:
    """Normalise a file path of a commit and reject ones git or the Hub would refuse."""
    path = path.strip("/")
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts) or parts[0] == ".git" or "\0" in path:
        raise HubError(400, f"Invalid path in repo {path!r}: use a relative path without '.', '..' or '.git' parts.")
    return path


def check_branch_name(name: str) -> None:
    if (not _BRANCH_RE.match(name) or ".." in name or "//" in name or name.endswith(("/", ".lock", "."))
            or name.startswith("refs/") or "@{" in name):
        raise HubError(400, f"Invalid branch or tag name {name!r}: use letters, digits, '.', '_', '-' and '/'.")


def hub_date(timestamp: float) -> str:
    """The Hub's date format (``2024-01-31T12:00:00.000Z``), which ``huggingface_hub.parse_datetime`` reads."""
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def git_blob_oid(data: bytes) -> str:
    """Git's object id of a blob with this content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class LfsPointer:
    """What an LFS pointer file says: the real content's sha256 and size, and the pointer's own size."""

    sha256: str
    size: int
    pointer_size: int

    @staticmethod
    def render(sha256: str, size: int) -> bytes:
        return f"version {LFS_SPEC}\noid sha256:{sha256}\nsize {size}\n".encode()

    @classmethod
    def parse(cls, data: bytes) -> LfsPointer | None:
        """The pointer in ``data``, or None when ``data`` is an ordinary file."""
        if len(data) > MAX_POINTER_SIZE or not data.startswith(b"version " + LFS_SPEC.encode() + b"\n"):
            return None
        fields = dict(line.split(" ", 1) for line in data.decode("ascii", "replace").splitlines()[1:] if " " in line)
        oid, size = fields.get("oid", ""), fields.get("size", "")
        if not oid.startswith("sha256:") or not _SHA256_RE.match(oid[7:]) or not size.isdigit():
            return None
        return cls(sha256=oid[7:], size=int(size), pointer_size=len(data))


@dataclass(frozen=True)
class Entry:
    """A file or directory of one commit's tree."""

    path: str
    type: Literal["file", "directory"]
    oid: str  # git blob or tree sha1
    git_size: int = 0  # size of the git blob (the pointer's size for LFS files)
    mode: str = "100644"
    lfs: LfsPointer | None = None

    @property
    def size(self) -> int:
        """The size a user sees: the real content's size for LFS files, 0 for directories."""
        return self.lfs.size if self.lfs else self.git_size

    @property
    def etag(self) -> str:
        """What the Hub sends as ETag for the file: the sha256 for LFS files, the blob sha1 otherwise."""
        return self.lfs.sha256 if self.lfs else self.oid


@dataclass
class Snapshot:
    """The full tree of one commit, listed once and cached (a commit never changes)."""

    commit: str
    entries: dict[str, Entry]  # every file and directory by path
    children: dict[str, list[Entry]] = field(default_factory=dict)  # direct children by directory ("" = root)

    def __post_init__(self) -> None:
        self.children = {"": []}
        for entry in self.entries.values():  # ls-tree order: a directory comes before its contents
            parent = entry.path.rpartition("/")[0]
            self.children.setdefault(parent, []).append(entry)
            if entry.type == "directory":
                self.children.setdefault(entry.path, [])

    def files(self) -> list[Entry]:
        return [e for e in self.entries.values() if e.type == "file"]

    def walk(self, directory: str = "") -> Iterator[Entry]:
        """Every entry under ``directory``, depth first, directories before their contents."""
        for entry in self.children.get(directory, []):
            yield entry
            if entry.type == "directory":
                yield from self.walk(entry.path)

    def file(self, path: str) -> Entry:
        entry = self.entries.get(path)
        if entry is None or entry.type != "file":
            raise entry_not_found(path, self.commit)
        return entry


@dataclass(frozen=True)
class CommitMeta:
    """What the API reports about a commit."""

    oid: str
    title: str
    message: str
    author: str
    timestamp: int


@dataclass(frozen=True)
class Refs:
    branches: dict[str, str]  # name -> commit
    tags: dict[str, str]  # name -> commit (annotated tags peeled)


@dataclass(frozen=True)
class Operation:
    """One line of an NDJSON commit: add a regular or LFS file, delete a file, or delete a folder."""

    kind: Literal["file", "lfsFile", "deletedFile", "deletedFolder"]
    path: str
    content: bytes = b""  # for "file"
    lfs_oid: str = ""  # for "lfsFile"
    lfs_size: int | None = None


class _LRU:
    """A small thread-safe LRU map for immutable values (snapshots and commit metadata by commit id)."""

    def __init__(self, maxsize: int) -> None:
        self._data: collections.OrderedDict = collections.OrderedDict()
        self._maxsize = maxsize
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._maxsize:
                self._data.popitem(last=False)


#: A private repository holds this file beside its git data (git ignores it; a restart keeps it).
PRIVATE_MARKER = "hubkernels-private"


class Repo:
    """One bare git repository: read a revision's tree, commit operations, manage branches and tags."""

    def __init__(self, storage: Storage, repo_type: str, repo_id: str, path: Path) -> None:
        self.storage = storage
        self.repo_type = repo_type
        self.repo_id = repo_id
        self.path = path
        self.lock = storage._repo_lock(path)

    @property
    def private(self) -> bool:
        """Whether reading it needs a token (as on the Hub: anonymous clients are told it does not exist)."""
        return (self.path / PRIVATE_MARKER).is_file()

    def set_private(self, private: bool) -> None:
        with self.lock:
            marker = self.path / PRIVATE_MARKER
            if private:
                marker.write_text("private\n")
            else:
                marker.unlink(missing_ok=True)

    # -- git plumbing -------------------------------------------------------------------------------------------

    def git(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None,
            check: bool = True) -> bytes:
        """Run ``git --git-dir <repo> args...`` with a clean environment and return its stdout."""
        return self.storage._git(["--git-dir", str(self.path), *args], input=input, env=env, check=check)

    # -- reading ------------------------------------------------------------------------------------------------

    def refs(self) -> Refs:
        out = self.git("for-each-ref", "--format=%(refname)%00%(objectname)%00%(*objectname)",
                       "refs/heads", "refs/tags").decode()
        branches: dict[str, str] = {}
        tags: dict[str, str] = {}
        for line in out.splitlines():
            ref, obj, peeled = line.split("\0")
            if ref.startswith("refs/heads/"):
                branches[ref[len("refs/heads/"):]] = obj
            elif ref.startswith("refs/tags/"):
                tags[ref[len("refs/tags/"):]] = peeled or obj
        return Refs(branches, tags)

    def resolve(self, rev: str) -> str:
        """The commit a revision names: a branch, a tag, ``refs/heads|tags/...`` or a (short) commit sha."""
        refs = self.refs()
        for table, prefix in ((refs.branches, "refs/heads/"), (refs.tags, "refs/tags/")):
            name = rev[len(prefix):] if rev.startswith(prefix) else rev
            if name in table:
                return table[name]
        if _HEX_RE.match(rev):
            out = self.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False).decode().strip()
            if re.fullmatch(r"[0-9a-f]{40}", out):
                return out
        raise revision_not_found(self.repo_id, rev)

    def snapshot(self, commit: str) -> Snapshot:
        """Every entry of a commit's tree, with LFS pointers recognised; cached per commit."""
        key = (str(self.path), commit)
        cached = self.storage._snapshots.get(key)
        if cached is not None:
            return cached
        out = self.git("ls-tree", "-r", "-t", "-l", "-z", "--full-tree", commit)
        raw: list[tuple[str, str, str, str, str]] = []
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.decode("utf-8", "surrogateescape").partition("\t")
            mode, kind, oid, size = meta.split()
            raw.append((path, mode, kind, oid, size))
        pointers = self.storage._pointers_of(
            self, [oid for _, _, kind, oid, size in raw if kind == "blob" and int(size) <= MAX_POINTER_SIZE])
        entries: dict[str, Entry] = {}
        for path, mode, kind, oid, size in raw:
            if kind == "tree":
                entries[path] = Entry(path, "directory", oid, 0, mode)
            elif kind == "blob":
                entries[path] = Entry(path, "file", oid, int(size), mode, pointers.get(oid))
        snap = Snapshot(commit, entries)
        self.storage._snapshots.put(key, snap)
        return snap

    def commit_meta(self, commit: str) -> CommitMeta:
        cached = self.storage._commits.get((str(self.path), commit))
        if cached is not None:
            return cached
        return self.log(commit, limit=1)[0]

    def log(self, rev: str, *, limit: int | None = None, path: str | None = None) -> list[CommitMeta]:
        """Commits reachable from ``rev``, newest first (optionally only those touching ``path``)."""
        args = ["log", "--format=%H%x00%an%x00%ct%x00%s%x00%b%x1e"]
        if limit is not None:
            args.append(f"--max-count={limit}")
        args.append(rev)
        if path is not None:
            args += ["--", path]
        metas = []
        for record in self.git(*args).decode("utf-8", "replace").split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            oid, author, ts, title, body = record.split("\0", 4)
            meta = CommitMeta(oid, title, body.strip(), author, int(ts))
            self.storage._commits.put((str(self.path), oid), meta)
            metas.append(meta)
        return metas

    def read_blob(self, oid: str) -> bytes:
        return self.git("cat-file", "blob", oid)

    def text_at(self, commit: str, path: str) -> str | None:
        """A small text file's content at a commit, or None when it is absent."""
        entry = self.snapshot(commit).entries.get(path)
        if entry is None or entry.type != "file" or entry.lfs:
            return None
        return self.read_blob(entry.oid).decode("utf-8", "replace")

    # -- writing ------------------------------------------------------------------------------------------------

    def commit(self, branch: str, operations: list[Operation], *, summary: str, description: str = "",
               parent_commit: str | None = None, author: tuple[str, str] = USER_AUTHOR) -> str:
        """Apply ``operations`` on top of ``branch`` as one new commit and move the branch to it."""
        with self.lock:
            head = self.refs().branches.get(branch)
            if head is None:
                raise HubError(404, f"Revision not found: branch {branch!r} does not exist in {self.repo_id} "
                                    "(create it first with create_branch).", "RevisionNotFound")
            if parent_commit and parent_commit != head:
                raise HubError(412, f"A commit has happened since {parent_commit}: {branch} is now at {head}. "
                                    "Refresh and try again.")
            snap = self.snapshot(head)
            tree = {e.path: (e.mode, e.oid) for e in snap.files()}
            blobs = self._write_blobs([self._blob_content(op) for op in operations if op.kind in ("file", "lfsFile")])
            for op in operations:
                if op.kind in ("file", "lfsFile"):
                    tree[op.path] = ("100644", next(blobs))
                elif op.kind == "deletedFile":
                    if op.path not in tree:
                        raise HubError(404, f"A file with this name doesn't exist: {op.path!r} is not in "
                                            f"{self.repo_id}@{branch}.", "EntryNotFound")
                    del tree[op.path]
                else:
                    doomed = [p for p in tree if p.startswith(op.path + "/")]
                    if not doomed:
                        raise HubError(404, f"A folder with this name doesn't exist: {op.path!r} is not in "
                                            f"{self.repo_id}@{branch}.", "EntryNotFound")
                    for p in doomed:
                        del tree[p]
            _check_no_file_directory_clash(tree)
            tree_oid = self._write_tree(tree)
            message = summary.strip() or "Update files"
            if description.strip():
                message += "\n\n" + description.strip()
            new = self._commit_tree(tree_oid, [head], message, author)
            self.git("update-ref", f"refs/heads/{branch}", new, head)
            return new

    def create_branch(self, branch: str, starting_point: str | None) -> str:
        check_branch_name(branch)
        with self.lock:
            commit = self.resolve(starting_point or "main")
            if branch in self.refs().branches:
                raise HubError(409, f"Reference already exists: branch {branch!r} of {self.repo_id}.")
            self.git("update-ref", f"refs/heads/{branch}", commit, NULL_SHA)
            return commit

    def delete_branch(self, branch: str) -> None:
        with self.lock:
            if branch == "main":
                raise HubError(403, "The main branch cannot be deleted.")
            head = self.refs().branches.get(branch)
            if head is None:
                raise HubError(404, f"Revision not found: branch {branch!r} does not exist in {self.repo_id}.",
                               "RevisionNotFound")
            self.git("update-ref", "-d", f"refs/heads/{branch}", head)

    def create_tag(self, tag: str, rev: str, message: str | None) -> str:
        check_branch_name(tag)
        with self.lock:
            commit = self.resolve(rev)
            if tag in self.refs().tags:
                raise HubError(409, f"Reference already exists: tag {tag!r} of {self.repo_id}.")
            if message:
                self.git("tag", "-a", "-F", "-", tag, commit, input=message.encode(), env=_ident_env(USER_AUTHOR))
            else:
                self.git("update-ref", f"refs/tags/{tag}", commit, NULL_SHA)
            return commit

    def delete_tag(self, tag: str) -> None:
        with self.lock:
            if tag not in self.refs().tags:
                raise HubError(404, f"Revision not found: tag {tag!r} does not exist in {self.repo_id}.",
                               "RevisionNotFound")
            self.git("update-ref", "-d", f"refs/tags/{tag}")

    # -- helpers ------------------------------------------------------------------------------------------------

    def _blob_content(self, op: Operation) -> bytes:
        if op.kind == "file":
            return op.content
        size = self.storage.lfs_size(op.lfs_oid)
        if size is None or (op.lfs_size is not None and op.lfs_size != size):
            raise HubError(400, f"LFS object {op.lfs_oid} (size {op.lfs_size}) for {op.path!r} was never uploaded: "
                                "upload it through the LFS batch API before committing.")
        return LfsPointer.render(op.lfs_oid, size)

    def _write_blobs(self, contents: list[bytes]) -> Iterator[str]:
        """Store blobs with one ``git hash-object -w`` call and yield their oids in order."""
        if not contents:
            return iter(())
        with tempfile.TemporaryDirectory(dir=self.storage.tmp_dir) as tmp:
            paths = []
            for i, data in enumerate(contents):
                p = Path(tmp, str(i))
                p.write_bytes(data)
                paths.append(str(p))
            out = self.git("hash-object", "-w", "--no-filters", "--stdin-paths", input="\n".join(paths).encode())
        return iter(out.decode().split())

    def _write_tree(self, files: dict[str, tuple[str, str]]) -> str:
        """Build the nested git trees of a flat ``path -> (mode, oid)`` map through a throwaway index."""
        if not files:
            return self.git("mktree", input=b"").decode().strip()
        with tempfile.TemporaryDirectory(dir=self.storage.tmp_dir) as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp, "index"))}
            info = "".join(f"{mode} {oid}\t{path}\n" for path, (mode, oid) in sorted(files.items()))
            self.git("update-index", "--index-info", input=info.encode(), env=env)
            return self.git("write-tree", env=env).decode().strip()

    def _commit_tree(self, tree: str, parents: list[str], message: str, author: tuple[str, str]) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.git(*args, input=message.encode(), env=_ident_env(author)).decode().strip()


def _ident_env(author: tuple[str, str]) -> dict[str, str]:
    name, email = author
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def _check_no_file_directory_clash(files: dict[str, tuple[str, str]]) -> None:
    directories = {p.rsplit("/", 1)[0] for p in files if "/" in p}
    for d in list(directories):
        while "/" in d:
            d = d.rsplit("/", 1)[0]
            directories.add(d)
    clash = sorted(directories & files.keys())
    if clash:
        raise HubError(400, f"{clash[0]!r} would be both a file and a folder: delete one of them in the same commit.")


def matches_patterns(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` matches one of these gitignore/gitattributes-style glob patterns (a useful subset:
    ``*.so``, ``build/``, ``/docs/*.md``; a pattern without '/' matches the file name at any depth)."""
    name = path.rsplit("/", 1)[-1]
    for pattern in patterns:
        if pattern.endswith("/"):
            prefix = pattern.strip("/")
            if path.startswith(prefix + "/") or f"/{prefix}/" in f"/{path}":
                return True
        elif "/" in pattern.strip("/"):
            if fnmatch.fnmatchcase(path, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, pattern.lstrip("/")):
            return True
    return False


def gitignore_patterns(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", "!"))]


def lfs_patterns(gitattributes: str) -> list[str]:
    """The patterns of a ``.gitattributes`` that route files through LFS (``filter=lfs``)."""
    out = []
    for line in gitattributes.splitlines():
        parts = line.split()
        if len(parts) > 1 and not parts[0].startswith("#") and "filter=lfs" in parts[1:]:
            out.append(parts[0])
    return out


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
        self._snapshots = _LRU(256)
        self._commits = _LRU(4096)
        self._pointer_cache: dict[str, LfsPointer | None] = {}
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
        """The repository, or a 404 ``RepoNotFound``."""
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

    def list_repos(self) -> list[tuple[str, str]]:
        """Every (type, repo_id) stored."""
        out = []
        for repo_type in REPO_TYPES:
            for head in sorted((self.repos_dir / f"{repo_type}s").glob("*/*.git/HEAD")):
                out.append((repo_type, f"{head.parent.parent.name}/{head.parent.name[:-4]}"))
        return out

    # -- LFS objects --------------------------------------------------------------------------------------------

    def lfs_path(self, sha256: str) -> Path:
        if not _SHA256_RE.match(sha256):
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

    def _git(self, args: list[str], *, input: bytes | None = None, env: dict[str, str] | None = None,
             check: bool = True) -> bytes:
        proc = subprocess.run(["git", *args], input=input, capture_output=True,
                              env={**self._env, **(env or {})}, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args[2:] if args[0] == '--git-dir' else args)} failed "
                               f"({proc.returncode}): {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout

    def _pointers_of(self, repo: Repo, oids: list[str]) -> dict[str, LfsPointer]:
        """Which of these small blobs are LFS pointers (one ``git cat-file --batch`` for the unknown ones)."""
        unknown = sorted({o for o in oids if o not in self._pointer_cache})
        if unknown:
            out = repo.git("cat-file", "--batch", input="".join(o + "\n" for o in unknown).encode())
            pos = 0
            for oid in unknown:
                header_end = out.index(b"\n", pos)
                _, _, size = out[pos:header_end].decode().split()
                data = out[header_end + 1: header_end + 1 + int(size)]
                pos = header_end + 1 + int(size) + 1
                self._pointer_cache[oid] = LfsPointer.parse(data)
        return {o: p for o in oids if (p := self._pointer_cache.get(o)) is not None}


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
        self._file.write(chunk)
        self._hash.update(chunk)
        self._size += len(chunk)

    def finish(self) -> int:
        """Move the object into place; 400 if its content does not hash to the announced oid."""
        self._file.close()
        try:
            if self._hash.hexdigest() != self.sha256 or (
                    self.expected_size is not None and self._size != self.expected_size):
                raise HubError(400, f"Uploaded content does not match LFS oid {self.sha256}: got sha256 "
                                    f"{self._hash.hexdigest()} and {self._size} bytes. Upload the exact file bytes.")
            os.replace(self._tmp, self.target)
            return self._size
        finally:
            self._tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)


def decode_commit_lines(lines: list[dict]) -> tuple[dict, list[Operation]]:
    """Split a decoded NDJSON commit payload into its header and its operations (400 on anything malformed)."""
    header: dict = {}
    ops: list[Operation] = []
    for item in lines:
        key, value = item.get("key"), item.get("value")
        if not isinstance(value, dict):
            raise HubError(400, f"Malformed commit line {item!r}: expected {{'key': ..., 'value': {{...}}}}.")
        if key == "header":
            header = value
        elif key == "file":
            if value.get("encoding", "base64") != "base64":
                raise HubError(400, f"Unsupported encoding {value.get('encoding')!r}: send base64 content.")
            try:
                content = base64.b64decode(value.get("content", ""), validate=True)
            except ValueError:
                raise HubError(400, f"Content of {value.get('path')!r} is not valid base64.") from None
            ops.append(Operation("file", check_path_in_repo(str(value.get("path", ""))), content=content))
        elif key == "lfsFile":
            if value.get("algo", "sha256") != "sha256":
                raise HubError(400, f"Unsupported LFS hash algorithm {value.get('algo')!r}: use sha256.")
            size = value.get("size")
            ops.append(Operation("lfsFile", check_path_in_repo(str(value.get("path", ""))),
                                 lfs_oid=str(value.get("oid", "")), lfs_size=int(size) if size is not None else None))
        elif key in ("deletedFile", "deletedFolder"):
            ops.append(Operation(key, check_path_in_repo(str(value.get("path", "")))))
        else:
            raise HubError(400, f"Unsupported commit operation {key!r}: this hub accepts header, file, lfsFile, "
                                "deletedFile and deletedFolder.")
    return header, ops

