"""One repository of the local Hub: a bare git repo read and written through the ``git`` CLI, with its
visibility marker and the large-file objects it may name."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from .model import (
    HEX_RE,
    MAX_POINTER_SIZE,
    NULL_SHA,
    SHA256_RE,
    USER_AUTHOR,
    CommitMeta,
    Entry,
    HubError,
    LfsPointer,
    Operation,
    Refs,
    Snapshot,
    check_branch_name,
    revision_not_found,
)

if TYPE_CHECKING:
    from .store import Storage

#: A private repository holds this file beside its git data (git ignores it; a restart keeps it).
PRIVATE_MARKER = "hubkernels-private"
#: The large-file objects a repository may name, one empty file per sha256 (uploaded to it, or in its history).
OBJECT_LINKS = "hubkernels-objects"
LINKS_SCANNED = ".scanned"
#: The most commits one expanded listing walks to find its entries' last commits.
LAST_COMMIT_WALK = 10_000


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

    # -- large-file objects this repository may name ------------------------------------------------------------

    def link_object(self, sha256: str) -> None:
        """Record that this repository may name the stored object ``sha256`` (it was uploaded to it)."""
        links = self.path / OBJECT_LINKS
        links.mkdir(exist_ok=True)
        (links / self.storage.lfs_path(sha256).name).touch()

    def has_object(self, sha256: str) -> bool:
        """Whether the object ``sha256`` was uploaded to this repository or is named in its history."""
        if not SHA256_RE.match(sha256):
            return False
        links = self.path / OBJECT_LINKS
        if (links / sha256).is_file():
            return True
        if not (links / LINKS_SCANNED).is_file():  # a repository from before links existed: link its history once
            for pointer in self._history_pointers():
                self.link_object(pointer)
            links.mkdir(exist_ok=True)
            (links / LINKS_SCANNED).touch()
            return (links / sha256).is_file()
        return False

    def _history_pointers(self) -> set[str]:
        out = self.git("cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype) %(objectsize)")
        small = [
            oid
            for oid, kind, size in (line.split() for line in out.decode().splitlines())
            if kind == "blob" and int(size) <= MAX_POINTER_SIZE
        ]
        return {p.sha256 for p in self.storage._pointers_of(self, small).values()}

    # -- git plumbing -------------------------------------------------------------------------------------------

    def git(
        self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None, check: bool = True
    ) -> bytes:
        """Run ``git --git-dir <repo> args...`` with a clean environment and return its stdout."""
        return self.storage._git(["--git-dir", str(self.path), *args], input=input, env=env, check=check)

    # -- reading ------------------------------------------------------------------------------------------------

    def refs(self) -> Refs:
        out = self.git(
            "for-each-ref", "--format=%(refname)%00%(objectname)%00%(*objectname)", "refs/heads", "refs/tags"
        ).decode()
        branches: dict[str, str] = {}
        tags: dict[str, str] = {}
        for line in out.splitlines():
            ref, obj, peeled = line.split("\0")
            if ref.startswith("refs/heads/"):
                branches[ref[len("refs/heads/") :]] = obj
            elif ref.startswith("refs/tags/"):
                tags[ref[len("refs/tags/") :]] = peeled or obj
        return Refs(branches, tags)

    def resolve(self, rev: str) -> str:
        """The commit a revision names: a branch, a tag, ``refs/heads|tags/...`` or a (short) commit sha."""
        refs = self.refs()
        for table, prefix in ((refs.branches, "refs/heads/"), (refs.tags, "refs/tags/")):
            name = rev[len(prefix) :] if rev.startswith(prefix) else rev
            if name in table:
                return table[name]
        if HEX_RE.match(rev):
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
            self, [oid for _, _, kind, oid, size in raw if kind == "blob" and int(size) <= MAX_POINTER_SIZE]
        )
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

    def last_commits(self, commit: str, paths: list[str], max_commits: int = LAST_COMMIT_WALK) -> dict[str, CommitMeta]:
        """The newest commit touching each path (a folder: any file under it), from one ``git log --name-only``
        walk of at most ``max_commits`` commits; paths not touched within them are left out."""
        wanted = set(paths)
        found: dict[str, CommitMeta] = {}
        if not wanted:
            return found
        out = self.git(
            "-c",
            "core.quotePath=false",
            "log",
            f"--max-count={max_commits}",
            "--name-only",
            "--format=%x1e%H%x00%an%x00%ct%x00%s",
            commit,
        )
        for record in out.decode("utf-8", "surrogateescape").split("\x1e")[1:]:
            head, _, names = record.partition("\n")
            oid, author, ts, title = head.split("\0", 3)
            meta = CommitMeta(oid, title, "", author, int(ts))
            for name in names.splitlines():
                parts = name.split("/")
                for depth in range(1, len(parts) + 1):  # the file and every folder above it
                    path = "/".join(parts[:depth])
                    if path in wanted and path not in found:
                        found[path] = meta
            if len(found) == len(wanted):
                break
        return found

    def read_blob(self, oid: str) -> bytes:
        return self.git("cat-file", "blob", oid)

    def text_at(self, commit: str, path: str) -> str | None:
        """A small text file's content at a commit, or None when it is absent."""
        entry = self.snapshot(commit).entries.get(path)
        if entry is None or entry.type != "file" or entry.lfs:
            return None
        return self.read_blob(entry.oid).decode("utf-8", "replace")

    # -- writing ------------------------------------------------------------------------------------------------

    def commit(
        self,
        branch: str,
        operations: list[Operation],
        *,
        summary: str,
        description: str = "",
        parent_commit: str | None = None,
        author: tuple[str, str] = USER_AUTHOR,
    ) -> str:
        """Apply ``operations`` on top of ``branch`` as one new commit and move the branch to it."""
        with self.lock:
            head = self.refs().branches.get(branch)
            if head is None:
                raise HubError(
                    404,
                    f"Revision not found: branch {branch!r} does not exist in {self.repo_id} "
                    "(create it first with create_branch).",
                    "RevisionNotFound",
                )
            if parent_commit and parent_commit != head:
                raise HubError(
                    412,
                    f"A commit has happened since {parent_commit}: {branch} is now at {head}. Refresh and try again.",
                )
            snap = self.snapshot(head)
            tree = {e.path: (e.mode, e.oid) for e in snap.files()}
            blobs = self._write_blobs([self._blob_content(op) for op in operations if op.kind in ("file", "lfsFile")])
            for op in operations:
                if op.kind in ("file", "lfsFile"):
                    tree[op.path] = ("100644", next(blobs))
                elif op.kind == "deletedFile":
                    if op.path not in tree:
                        raise HubError(
                            404,
                            f"A file with this name doesn't exist: {op.path!r} is not in {self.repo_id}@{branch}.",
                            "EntryNotFound",
                        )
                    del tree[op.path]
                else:
                    doomed = [p for p in tree if p.startswith(op.path + "/")]
                    if not doomed:
                        raise HubError(
                            404,
                            f"A folder with this name doesn't exist: {op.path!r} is not in {self.repo_id}@{branch}.",
                            "EntryNotFound",
                        )
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
                raise HubError(
                    404, f"Revision not found: branch {branch!r} does not exist in {self.repo_id}.", "RevisionNotFound"
                )
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
                raise HubError(
                    404, f"Revision not found: tag {tag!r} does not exist in {self.repo_id}.", "RevisionNotFound"
                )
            self.git("update-ref", "-d", f"refs/tags/{tag}")

    # -- helpers ------------------------------------------------------------------------------------------------

    def _blob_content(self, op: Operation) -> bytes:
        """The git blob of an added file. A regular file whose text is an LFS pointer is read as one by every
        download, so it obeys the rule of an ``lfsFile``: it may only name an object this repository owns."""
        if op.kind == "file":
            pointer = LfsPointer.parse(op.content)
            if pointer is None:
                return op.content
            self._pointer_blob(op.path, pointer.sha256, pointer.size)
            return op.content
        return self._pointer_blob(op.path, op.lfs_oid, op.lfs_size)

    def _pointer_blob(self, path: str, oid: str, announced: int | None) -> bytes:
        """The pointer blob of object ``oid``, which must be stored and owned by this repository (400 if not)."""
        size = self.storage.lfs_size(oid) if SHA256_RE.match(oid) else None
        if size is None and self.storage.xet is not None and self.has_object(oid) and self.storage.xet.fill_lfs(oid):
            size = self.storage.lfs_size(oid)  # uploaded through Xet: rebuilt from its xorbs, sha256 checked
        if size is None or (announced is not None and announced != size) or not self.has_object(oid):
            raise HubError(
                400,
                f"LFS object {oid} (size {announced}) for {path!r} was never uploaded "
                f"to {self.repo_id}: upload it first (LFS batch API, or Xet with a current hf_xet: "
                "`pip install -U hf_xet`, older ones do not send the sha256 this hub needs), then "
                "commit.",
            )
        return LfsPointer.render(oid, size)

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
            info = "".join(f"{mode} {oid}\t{path}\0" for path, (mode, oid) in sorted(files.items()))
            self.git("update-index", "-z", "--index-info", input=info.encode(), env=env)  # -z: names never quoted
            return self.git("write-tree", env=env).decode().strip()

    def _commit_tree(self, tree: str, parents: list[str], message: str, author: tuple[str, str]) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.git(*args, input=message.encode(), env=_ident_env(author)).decode().strip()


def _ident_env(author: tuple[str, str]) -> dict[str, str]:
    name, email = author
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


def _check_no_file_directory_clash(files: dict[str, tuple[str, str]]) -> None:
    directories = {p.rsplit("/", 1)[0] for p in files if "/" in p}
    for d in list(directories):
        while "/" in d:
            d = d.rsplit("/", 1)[0]
            directories.add(d)
    clash = sorted(directories & files.keys())
    if clash:
        raise HubError(400, f"{clash[0]!r} would be both a file and a folder: delete one of them in the same commit.")
