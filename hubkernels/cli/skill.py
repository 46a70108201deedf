"""`hubkernels skill install|path`: the agent skill (`hubkernels.author.skill_install`)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "skill"
HELP = "install the agent skill for writing and shipping kernels"


def run_install(args: argparse.Namespace) -> int:
    from ..author.skill_install import CLAUDE_DEST, CODEX_DEST, OPENCODE_DEST, install_skill

    dest = (
        args.dest
        if args.dest is not None
        else (CODEX_DEST if args.codex else OPENCODE_DEST if args.opencode else CLAUDE_DEST)
    )
    target = install_skill(dest, force=args.force)
    files = sum(1 for p in target.rglob("*") if p.is_file())
    print(f"installed the hubkernels skill ({files} files) in {target}")
    print(f"  start at {target / 'SKILL.md'}; `hubkernels init NAME` begins a kernel from its template")
    return 0


def run_path(args: argparse.Namespace) -> int:
    from ..author.skill_install import skill_dir

    print(skill_dir())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from ..author.skill_install import CLAUDE_DEST, CODEX_DEST, OPENCODE_DEST

    p = sub.add_parser(NAME, help=HELP)
    actions = p.add_subparsers(dest="skill_command", metavar="{install,path}", required=True)
    install = actions.add_parser(
        "install",
        help="copy the skill where a coding agent finds it",
        description="Copy SKILL.md, references/ and templates/ to .claude/skills/hubkernels/ "
        "(default, Claude Code), .codex/skills/hubkernels/ (--codex), "
        ".opencode/skills/hubkernels/ (--opencode) or --dest.",
    )
    where = install.add_mutually_exclusive_group()
    where.add_argument("--dest", type=Path, help="install into this folder instead")
    where.add_argument(
        "--codex", action="store_true", help=f"install into {CODEX_DEST}/ (Codex) instead of {CLAUDE_DEST}/"
    )
    where.add_argument(
        "--opencode",
        action="store_true",
        help=f"install into {OPENCODE_DEST}/ (OpenCode's project skills) instead of {CLAUDE_DEST}/",
    )
    install.add_argument("--force", action="store_true", help="replace an earlier install of the skill")
    install.set_defaults(func=run_install)
    path = actions.add_parser("path", help="print where the skill lives inside the installed package")
    path.set_defaults(func=run_path)
