"""The local Hub's storage: bare git repositories under a root, large files content-addressed beside them.

`model` is its vocabulary (names, errors, LFS pointers, entries, patterns), `repo` one repository's reads and
commits, `store` the root that holds them all.
"""

from .model import (
    LRU,
    REPO_TYPES,
    SHA256_RE,
    CommitMeta,
    Entry,
    HubError,
    check_path_in_repo,
    decode_commit_lines,
    entry_not_found,
    gitignore_patterns,
    hub_date,
    lfs_patterns,
    matches_patterns,
)
from .repo import Repo
from .store import Storage

__all__ = [
    "LRU",
    "REPO_TYPES",
    "SHA256_RE",
    "CommitMeta",
    "Entry",
    "HubError",
    "Repo",
    "Storage",
    "check_path_in_repo",
    "decode_commit_lines",
    "entry_not_found",
    "gitignore_patterns",
    "hub_date",
    "lfs_patterns",
    "matches_patterns",
]
