"""`hubkernels init NAME`: a new kernel from the skill's template, renamed, committed and ready to build.

The kernel follows kernel-builder's conventions: a dash-separated kernel name (`fast-norms`), its Python
package with underscores (`fast_norms`, under `kernel_src/torch-ext/`), `build.toml` edition 5 with one
`[kernel.<package>_<backend>]` table per backend, one op per source file, `_ops.py` generated per build, relative
imports only, and its benchmarks in `benchmarks/benchmark*.py`. The one op starts as the template's RMSNorm (under
the name `--op` gives it): a working starting point to rewrite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..errors import UsageError
from ..layout import BUILD_DIR
from .skill_install import skill_dir

__all__ = ["BACKENDS", "TEMPLATE_OP", "ScaffoldError", "init_kernel"]

#: Backends the template has sources for.
BACKENDS = ("cpu", "cuda")

_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_OP = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
TEMPLATE_OP = "rms_norm"
_ARTEFACTS = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "_build", "_ops.py", ".pytest_cache")
_GITIGNORE = f"{BUILD_DIR}/\n_build/\n__pycache__/\n*.pyc\n.pytest_cache/\n"


class ScaffoldError(UsageError):
    """The kernel cannot be created as asked (the message says what to do)."""


def init_kernel(
    name: str,
    dest: str | Path | None = None,
    *,
    backends: Sequence[str] = BACKENDS,
    op: str = TEMPLATE_OP,
    repo_id: str | None = None,
    git: bool = True,
) -> Path:
    """Create the kernel `name` in `dest` (default `./name`) and return its root; never overwrites anything."""
    if not _NAME.fullmatch(name):
        raise ScaffoldError(
            f"kernel name {name!r} must be lowercase letters and digits separated by '-' (e.g. fast-norms)"
        )
    if not _OP.fullmatch(op):
        raise ScaffoldError(f"op name {op!r} must be a Python identifier in snake_case (e.g. silu_and_mul)")
    backends = tuple(dict.fromkeys(backends))
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise ScaffoldError(
            f"--backends takes a comma-separated subset of {','.join(BACKENDS)}, got {','.join(backends) or 'nothing'}"
        )
    root = Path(dest if dest is not None else name).expanduser().absolute()
    if root.exists() or root.is_symlink():
        raise ScaffoldError(f"{root} already exists; init never overwrites: choose another --dest or remove it")
    package = name.replace("-", "_")
    renames = [("my_kernels", package), ("my-kernels", name), ("MY_KERNELS", package.upper())]
    if op != TEMPLATE_OP:
        renames.append((TEMPLATE_OP, op))
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = root.with_name(f".{root.name}.init")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(skill_dir() / "templates", staging, ignore=_ARTEFACTS)
        for backend in BACKENDS:
            if backend not in backends:
                shutil.rmtree(staging / "kernel_src" / f"my_kernels_{backend}")
        _rename_tree(staging, renames)
        _write_build_toml(staging / "build.toml", name, package, backends, repo_id or f"my-org/{name}")
        (staging / ".gitignore").write_text(_GITIGNORE, encoding="utf-8")
        staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if git:
        _git_commit(root, f"{name}: scaffold from hubkernels init")
    return root


def _rename_tree(root: Path, renames: list[tuple[str, str]]) -> None:
    """Apply `renames` to every file's text and to every file and folder name under `root`."""

    def rename(text: str) -> str:
        for old, new in renames:  # torch's own F.rms_norm keeps its name
            text = re.sub(rf"(?<!F\.)(?<!functional\.){re.escape(old)}", new, text)
        return text

    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):  # children before parents
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            if rename(text) != text:
                path.write_text(rename(text), encoding="utf-8")
        if rename(path.name) != path.name:
            path.rename(path.with_name(rename(path.name)))


def _write_build_toml(path: Path, name: str, package: str, backends: tuple[str, ...], repo_id: str) -> None:
    """The template's build.toml with only the chosen backends' tables and this kernel's repo id."""
    text = path.read_text(encoding="utf-8")
    for backend in BACKENDS:
        if backend not in backends:  # drop the whole [kernel.<package>_<backend>] table
            text = re.sub(rf"\n\[kernel\.{package}_{backend}\].*?(?=\n\[|\Z)", "", text, flags=re.S)
    text = re.sub(
        r"^backends = \[.*\]$", "backends = [" + ", ".join(f'"{b}"' for b in backends) + "]", text, flags=re.M
    )
    text = re.sub(r'^repo-id = ".*"$', f'repo-id = "{repo_id}"', text, flags=re.M)
    text = re.sub(r"^# .*\(SKILL\.md, \"1\. Scaffold\"\)\.$", f"# {name}: made by `hubkernels init`.", text, flags=re.M)
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def _git_commit(root: Path, message: str) -> None:
    """`git init` and commit everything, so builds get a stable op namespace (the HEAD tree's hash)."""
    if shutil.which("git") is None:
        return
    env = {**os.environ}
    for key, value in (("GIT_AUTHOR_NAME", "hubkernels init"), ("GIT_AUTHOR_EMAIL", "init@hubkernels.invalid")):
        env.setdefault(key, value)  # only where git has no identity configured
        env.setdefault(key.replace("AUTHOR", "COMMITTER"), value)
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", message]):
        done = subprocess.run(["git", *cmd], cwd=root, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise ScaffoldError(
                f"the kernel is in {root} but `git {' '.join(cmd)}` failed: "
                f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}; commit it yourself"
            )
