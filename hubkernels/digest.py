"""Per-file sha256 digests of a variant directory, in kernel-builder's format (padded base64).

`hash_file(..., memo=True)` hashes a file once per process: the answer is kept under the file's path and its
full stat (size, mtime, inode, device and ctime, which no user can set back), so a warm load re-checks content
truly and pays for the hashing once.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from pathlib import Path

from .errors import DigestError
from .layout import shipped_files

#: Top-level files the digest never covers (the metadata carries the digest itself).
EXCLUDED_TOP_LEVEL = frozenset({"metadata.json", "metadata.json.sigstore"})

_memo: dict[tuple[str, str], tuple[tuple[int, ...], str]] = {}
_memo_lock = threading.Lock()


def files(variant_dir: str | Path) -> list[tuple[str, Path]]:
    """(posix relative path, path) of every file the digest covers, sorted: no bytecode, no metadata.json."""
    return sorted((rel, p) for rel, p in shipped_files(variant_dir) if rel not in EXCLUDED_TOP_LEVEL)


def _stat_key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def hash_bytes(data: bytes, algorithm: str = "sha256") -> str:
    """Standard padded base64 of the hash of `data`."""
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode("ascii")


def hash_file(path: Path, algorithm: str = "sha256", *, memo: bool = False) -> str:
    """Standard padded base64 of the file's hash (`"hello world"` -> `uU0nuZNNPgil...zek=`).

    `memo=True`: reuse this process's answer while the file's stat (ctime included) is unchanged.
    """
    if not memo:
        return _hash_file(path, algorithm)
    key = (os.fspath(path), algorithm)
    before = _stat_key(os.stat(path))
    with _memo_lock:
        known = _memo.get(key)
    if known is not None and known[0] == before:
        return known[1]
    value = hash_file(path, algorithm)
    if _stat_key(os.stat(path)) == before:  # unchanged while it was read: safe to remember
        with _memo_lock:
            _memo[key] = (before, value)
    return value


def _hash_file(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode("ascii")


def hash_variant(variant_dir: str | Path, algorithm: str = "sha256", *, memo: bool = False) -> dict[str, str]:
    """`{relative/posix/path: b64 hash}` for every file of the variant, sorted by path."""
    return {rel: hash_file(p, algorithm, memo=memo) for rel, p in files(variant_dir)}


def check(variant_dir: str | Path, digest: dict | None) -> tuple[list[str], dict[str, str]]:
    """(violations, the hashes computed): what differs between the files and the recorded digest."""
    if not digest or "files" not in digest:
        return ["metadata.json has no digest"], {}
    algorithm = digest.get("algorithm", "sha256")
    if algorithm not in ("sha256", "sha512"):
        return [f"unsupported digest algorithm {algorithm!r}"], {}
    actual = hash_variant(variant_dir, algorithm, memo=True)
    expected: dict[str, str] = digest["files"]
    problems = [f"missing file {p}" for p in sorted(set(expected) - set(actual))]
    problems += [f"unexpected file {p}" for p in sorted(set(actual) - set(expected))]
    problems += [
        f"{p} has been modified (hash mismatch)"
        for p in sorted(set(expected) & set(actual))
        if expected[p] != actual[p]
    ]
    return problems, actual


def violations(variant_dir: str | Path, digest: dict | None) -> list[str]:
    """What differs between the files on disk and the recorded digest (empty list: they match)."""
    return check(variant_dir, digest)[0]


def verify_variant(variant_dir: str | Path, digest: dict | None, *, repair_hint: str = "") -> dict[str, str]:
    """Raise DigestError listing every violation, with how to repair, if the files don't match; else the hashes."""
    problems, actual = check(variant_dir, digest)
    if problems:
        hint = repair_hint or "Rebuild it, or delete the directory and download it again."
        raise DigestError(
            f"{variant_dir} does not match its metadata.json digest:\n  - " + "\n  - ".join(problems) + f"\n{hint}"
        )
    return actual
