"""The agent skill that teaches coding agents to write and ship kernels, and its install (`hubkernels skill`).

The skill (SKILL.md, references/, templates/) ships inside the package, in `hubkernels/author/skill/`.
`hubkernels skill install` copies it where a coding agent looks for skills: `.claude/skills/hubkernels/`
of the current directory by default (Claude Code), `.codex/skills/hubkernels/` with `--codex`,
`.opencode/skills/hubkernels/` with `--opencode` (OpenCode's project skill folder; it also reads
`.claude/skills/`), or any `--dest`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..errors import UsageError

__all__ = [
    "CLAUDE_DEST",
    "CODEX_DEST",
    "OPENCODE_DEST",
    "SkillInstallError",
    "install_skill",
    "skill_dir",
]

#: Where `install` puts the skill by default (relative to the current directory), per agent.
CLAUDE_DEST = Path(".claude/skills/hubkernels")
CODEX_DEST = Path(".codex/skills/hubkernels")
OPENCODE_DEST = Path(".opencode/skills/hubkernels")

#: What a build or test run leaves in the template: never shipped, never installed.
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "_build", "_ops.py", ".pytest_cache")


class SkillInstallError(UsageError):
    """The skill cannot be installed there as asked (the message says what to do)."""


def skill_dir() -> Path:
    """The skill folder inside the installed hubkernels package (holds SKILL.md)."""
    return Path(__file__).resolve().parent / "skill"


def _is_skill_install(path: Path) -> bool:
    """True for a folder a previous install made: its SKILL.md names this skill in the frontmatter."""
    try:
        head = (path / "SKILL.md").read_text(encoding="utf-8").split("\n---", 1)[0]
    except OSError:
        return False
    return head.startswith("---") and any(line.strip() == "name: hubkernels" for line in head.splitlines())


def install_skill(dest: str | Path = CLAUDE_DEST, *, force: bool = False) -> Path:
    """Copy the skill to `dest` and return it (absolute).

    An existing non-empty `dest` is left alone unless `force` is true, and even then it is replaced only if
    it holds a previous install of this skill, so a mistyped `--dest` never deletes anyone's files.
    """
    source = skill_dir()
    if not (source / "SKILL.md").is_file():
        raise SkillInstallError(
            f"the skill is missing from this hubkernels installation ({source}); reinstall hubkernels"
        )
    target = Path(dest).expanduser().absolute()
    occupied = target.exists() and (not target.is_dir() or any(target.iterdir()))
    if occupied and not force:
        raise SkillInstallError(f"{target} already exists; pass --force to replace it with this version")
    if occupied and not _is_skill_install(target):
        raise SkillInstallError(
            f"{target} is not a hubkernels skill install (no SKILL.md named hubkernels), so "
            "it is not replaced even with --force; choose another --dest"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Copy next to the target, then swap it in: an interrupted install never leaves half a skill.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        shutil.copytree(source, staging / "skill", ignore=_IGNORED)
        old = staging / "old"
        if target.exists():
            target.rename(old)
        try:
            (staging / "skill").rename(target)
        except OSError:
            if old.exists():
                old.rename(target)  # put the previous install back
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
