"""Names a build gives itself: the unique id (from git, as kernel-builder derives it) and the op namespace."""

from __future__ import annotations

import base64
import secrets
import subprocess
from pathlib import Path

from ..config import BuildConfig


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def git_state(root: Path) -> tuple[str | None, str | None, bool]:
    """(HEAD commit, HEAD tree, dirty): dirty means tracked files differ from HEAD (untracked files don't count)."""
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return None, None, False
    tree = _git(root, "rev-parse", "HEAD^{tree}")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit, tree, bool(status)


def unique_id(root: Path) -> str:
    """7 hex of the git tree of HEAD, `_dirty` appended for a changed work tree, random base32 outside git."""
    _, tree, dirty = git_state(root)
    if tree:
        return tree[:7] + ("_dirty" if dirty else "")
    return base64.b32encode(secrets.token_bytes(8)).decode().rstrip("=").lower()


def ops_name(config: BuildConfig, backend: str, uid: str) -> str:
    """The op namespace, module name and metadata id of one build: `_<python_name>_<backend>_<uid>`."""
    return f"_{config.python_name}_{backend}_{uid}"
