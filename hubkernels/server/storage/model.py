"""The vocabulary of the local Hub's storage: names and paths it accepts, its errors, LFS pointers, tree entries,
snapshots, commit operations, and the gitignore/gitattributes pattern subset it reads."""

from __future__ import annotations

import base64
import collections
import fnmatch
import hashlib
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator, Literal

from ...errors import HubkernelsError
from ...layout import REPO_NAME_RULE, is_repo_name

REPO_TYPES = ("model", "dataset", "space", "kernel")
"""Repository types the server accepts (the Hub's plural forms name them in URLs: ``models``, ``kernels`` ...)."""

LFS_SPEC = "https://git-lfs.github.com/spec/v1"
MAX_POINTER_SIZE = 1024  # git-lfs never writes a pointer larger than this
NULL_SHA = "0" * 40
DEFAULT_GITATTRIBUTES = (
    "".join(
        f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
        for pattern in (
            "*.so",
            "*.dylib",
            "*.dll",
            "*.bin",
            "*.safetensors",
            "*.pt",
            "*.pth",
            "*.ckpt",
            "*.onnx",
            "*.h5",
            "*.msgpack",
            "*.npy",
            "*.npz",
            "*.pkl",
            "*.zip",
            "*.tar.gz",
            "*.tgz",
            "*.whl",
        )
    )
).encode()
"""The ``.gitattributes`` of the initial commit: binary artefacts are LFS files, as on the Hub."""

SYSTEM_AUTHOR = ("system", "system@hub.local")
USER_NAME = "local-user"
USER_AUTHOR = (USER_NAME, f"{USER_NAME}@hub.local")

HEX_RE = re.compile(r"^[0-9a-f]{7,40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
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
    return HubError(
        404, f"Revision not found: {rev!r} is neither a branch, a tag nor a commit of {repo_id}.", "RevisionNotFound"
    )


def entry_not_found(path: str, commit: str, what: str = "file") -> HubError:
    return HubError(
        404,
        f"Entry not found: {what} {path!r} does not exist at commit {commit}.",
        "EntryNotFound",
        headers={"X-Repo-Commit": commit},
    )


def check_repo_name(org: str, name: str) -> None:
    """Reject names the Hub rejects (and any that could escape the storage root)."""
    for part in (org, name):
        if not is_repo_name(part):
            raise HubError(400, f"Invalid repo name {org}/{name}: use {REPO_NAME_RULE}.")


SNAPSHOT_CACHE_ENTRIES = 100_000
"""The most tree entries all cached snapshots hold together (about 50 MiB; one larger tree is still cached alone)."""
MAX_PATH_LENGTH = 1024
"""The longest file path a commit may add, in UTF-8 bytes."""
MAX_PATH_DEPTH = 64
"""The most path components (folders plus the file) a commit may add."""
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def check_path_in_repo(path: str) -> str:
    """Normalise a file path of a commit and reject ones git or the Hub would refuse, or too long or deep."""
    if not isinstance(path, str):
        raise HubError(400, f"Invalid path in repo {path!r}: a path is a string.")
    path = path.strip("/")
    parts = path.split("/")
    if CONTROL_RE.search(path):
        raise HubError(
            400,
            f"Invalid path in repo {path[:200]!r}: control characters (newline, NUL ...) are not "
            "allowed in file names.",
        )
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_LENGTH or len(parts) > MAX_PATH_DEPTH:
        raise HubError(
            400,
            f"Invalid path in repo {path[:80]!r}...: at most {MAX_PATH_LENGTH} bytes and {MAX_PATH_DEPTH} levels deep.",
        )
    if not path or any(p in ("", ".", "..") for p in parts) or parts[0] == ".git":
        raise HubError(400, f"Invalid path in repo {path!r}: use a relative path without '.', '..' or '.git' parts.")
    return path


def check_branch_name(name: str) -> None:
    if (
        not _BRANCH_RE.match(name)
        or ".." in name
        or "//" in name
        or name.endswith(("/", ".lock", "."))
        or name.startswith("refs/")
        or "@{" in name
    ):
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
        if not oid.startswith("sha256:") or not SHA256_RE.match(oid[7:]) or not size.isdigit():
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
        """Every entry under ``directory``, depth first, directories before their contents (no recursion, so
        no tree is too deep to list)."""
        stack = [iter(self.children.get(directory, []))]
        while stack:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            yield entry
            if entry.type == "directory":
                stack.append(iter(self.children.get(entry.path, [])))

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


class LRU:
    """A small thread-safe LRU map for immutable values (snapshots and commit metadata by commit id), bounded by
    its number of values and, with ``weight``, by their total weight (a snapshot weighs its entries, so many
    commits of a 20,000-file tree cannot fill memory)."""

    def __init__(self, maxsize: int, *, weight=None, max_weight: int = 0) -> None:
        self._data: collections.OrderedDict = collections.OrderedDict()
        self._maxsize = maxsize
        self._weight = weight
        self._max_weight = max_weight
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._total -= self._weigh(old)
            self._data[key] = value
            self._total += self._weigh(value)
            while len(self._data) > self._maxsize or (
                self._max_weight and self._total > self._max_weight and len(self._data) > 1
            ):
                _, evicted = self._data.popitem(last=False)
                self._total -= self._weigh(evicted)

    def _weigh(self, value) -> int:
        return self._weight(value) if self._weight else 0


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


def decode_commit_lines(lines: list[dict]) -> tuple[dict, list[Operation]]:
    """Split a decoded NDJSON commit payload into its header and its operations (400 on anything malformed)."""
    header: dict = {}
    ops: list[Operation] = []
    for item in lines:
        key, value = (item.get("key"), item.get("value")) if isinstance(item, dict) else (None, None)
        if not isinstance(value, dict):
            raise HubError(400, f"Malformed commit line {item!r}: expected {{'key': ..., 'value': {{...}}}}.")
        if key == "header":
            for name in ("summary", "description", "parentCommit"):
                if value.get(name) is not None and not isinstance(value[name], str):
                    raise HubError(400, f"The commit header's {name!r} must be a string.")
            header = value
        elif key == "file":
            if value.get("encoding", "base64") != "base64":
                raise HubError(400, f"Unsupported encoding {value.get('encoding')!r}: send base64 content.")
            try:
                content = base64.b64decode(value.get("content", ""), validate=True)
            except (TypeError, ValueError):
                raise HubError(400, f"Content of {value.get('path')!r} is not valid base64.") from None
            ops.append(Operation("file", check_path_in_repo(value.get("path", "")), content=content))
        elif key == "lfsFile":
            if value.get("algo", "sha256") != "sha256":
                raise HubError(400, f"Unsupported LFS hash algorithm {value.get('algo')!r}: use sha256.")
            size, oid = value.get("size"), value.get("oid")
            if not isinstance(oid, str) or (size is not None and (not isinstance(size, int) or size < 0)):
                raise HubError(
                    400,
                    f"Malformed lfsFile line for {value.get('path')!r}: oid is a sha256 string and "
                    "size an integer >= 0.",
                )
            ops.append(Operation("lfsFile", check_path_in_repo(value.get("path", "")), lfs_oid=oid, lfs_size=size))
        elif key in ("deletedFile", "deletedFolder"):
            ops.append(Operation(key, check_path_in_repo(value.get("path", ""))))
        else:
            raise HubError(
                400,
                f"Unsupported commit operation {key!r}: this hub accepts header, file, lfsFile, "
                "deletedFile and deletedFolder.",
            )
    return header, ops
