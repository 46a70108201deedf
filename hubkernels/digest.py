"""Per-file sha256 digests of a variant directory, in kernel-builder's format (padded base64)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from .errors import DigestError
from .layout import shipped_files

#: Top-level files the digest never covers (the metadata carries the digest itself).
EXCLUDED_TOP_LEVEL = frozenset({"metadata.json", "metadata.json.sigstore"})


def _files(variant_dir: Path) -> list[Path]:
    return [p for rel, p in shipped_files(variant_dir) if rel not in EXCLUDED_TOP_LEVEL]


def hash_file(path: Path, algorithm: str = "sha256") -> str:
    """Standard padded base64 of the file's hash (`"hello world"` -> `uU0nuZNNPgil...zek=`)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode("ascii")


def hash_variant(variant_dir: str | Path, algorithm: str = "sha256") -> dict[str, str]:
    """`{relative/posix/path: b64 hash}` for every file of the variant, sorted by path."""
    root = Path(variant_dir)
    return {p.relative_to(root).as_posix(): hash_file(p, algorithm) for p in _files(root)}


def violations(variant_dir: str | Path, digest: dict | None) -> list[str]:
    """What differs between the files on disk and the recorded digest (empty list: they match)."""
    if not digest or "files" not in digest:
        return ["metadata.json has no digest"]
    algorithm = digest.get("algorithm", "sha256")
    if algorithm not in ("sha256", "sha512"):
        return [f"unsupported digest algorithm {algorithm!r}"]
    actual = hash_variant(variant_dir, algorithm)
    expected: dict[str, str] = digest["files"]
    problems = [f"missing file {p}" for p in sorted(set(expected) - set(actual))]
    problems += [f"unexpected file {p}" for p in sorted(set(actual) - set(expected))]
    problems += [f"{p} has been modified (hash mismatch)" for p in sorted(set(expected) & set(actual))
                 if expected[p] != actual[p]]
    return problems


def verify_variant(variant_dir: str | Path, digest: dict | None, *, repair_hint: str = "") -> None:
    """Raise DigestError listing every violation, with how to repair, if the files don't match."""
    problems = violations(variant_dir, digest)
    if problems:
        hint = repair_hint or "Rebuild it, or delete the directory and download it again."
        raise DigestError(f"{variant_dir} does not match its metadata.json digest:\n  - "
                          + "\n  - ".join(problems) + f"\n{hint}")
