"""Helpers the tests share (tests never import each other): a tiny kernel built and published, fresh repo ids,
Python in a new process with the session's Hub environment, and the loader's requests from the Hub's log."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from hubkernels.builder import build

ROOT = Path(__file__).resolve().parent.parent
#: `verify --tolerance` on CI: ours may take up to 4x torch.compile's time there. The 2 shared cores swing a tie
#: between the skill template's fp16 rms_norm and torch.compile from 1.0x to 0.41x under load, while the defect
#: the gate exists for (an fp16 loop left scalar) measures 0.11x, more than twice past this allowance.
VERIFY_CI_TOLERANCE = "3.0"


def make_kernel(
    root: Path,
    *,
    version: int = 1,
    value: int = 1,
    backends: tuple[str, ...] = ("cpu",),
    repo_id: str | None = None,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write and build `tiny-act` (noarch: `double(x)`, `VALUE`) at `root`; returns root. Builds torch-<backend>."""
    pkg = root / "torch-ext" / "tiny_act"
    pkg.mkdir(parents=True, exist_ok=True)
    hub = f'\n[general.hub]\nrepo-id = "{repo_id}"\n' if repo_id else ""
    (root / "build.toml").write_text(
        textwrap.dedent(f"""\
        [general]
        name = "tiny-act"
        version = {version}
        edition = 5
        license = "Apache-2.0"
        backends = ["cpu", "cuda"]
        """)
        + hub
        + "\n[torch-noarch]\n"
    )
    (pkg / "__init__.py").write_text(
        textwrap.dedent(f'''\
        """tiny-act: a one-function kernel for loader tests."""
        import torch

        __all__ = ["double", "VALUE"]
        VALUE = {value}


        def double(x: torch.Tensor) -> torch.Tensor:
            """Twice x, computed the slow way."""
            return x * 2
        ''')
    )
    for name, text in (extra_files or {}).items():
        (pkg / name).write_text(text)
    for backend in backends:
        build(root, backend=backend, quiet=True)
    return root


def without_artifacts(repo_id: str, version: int = 1) -> str:
    """Remove `wheels/` from a kernel's v<version> branch, leaving the layout kernel-builder publishes (build/ and
    source/), which loaders fetch file by file; returns the new commit."""
    from huggingface_hub import HfApi

    return HfApi().delete_folder("wheels", repo_id, repo_type="kernel", revision=f"v{version}").oid


def new_repo(org: str = "hubkernels") -> str:
    """A fresh repo id on the shared session hub."""
    return f"{org}/tiny-{uuid.uuid4().hex[:10]}"


def api_requests(hub) -> list[tuple[str, str]]:
    """(method, path) of what the loader asked, leaving out huggingface_hub's once-a-day telemetry registry."""
    return [(r["method"], r["path"]) for r in hub.requests() if r["path"] != "/api/agent-harnesses"]


def run_python(code: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter with the test session's Hub environment and `cache` as HF_HUB_CACHE."""
    full = {**os.environ, "HF_HUB_CACHE": str(cache), **env}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def remote_files(repo_id: str, revision: str) -> dict[str, str]:
    """{path: blob id} of every file of a kernel repo at `revision`."""
    from huggingface_hub import HfApi, RepoFile

    return {
        f.path: f.blob_id
        for f in HfApi().list_repo_tree(repo_id, recursive=True, revision=revision, repo_type="kernel")
        if isinstance(f, RepoFile)
    }


DEPS_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "deps"
DEP_PLACEHOLDER = "hubkernels/dep-base"  # the dependency's repo id as the deps fixtures write it


def deps_kernel(src: str, dest: Path, replace: dict[str, str]) -> Path:
    """A copy of the deps fixture `src` at `dest` with `replace` applied to its text, built for the CPU."""
    import shutil

    from hubkernels.builder import build

    shutil.copytree(DEPS_FIXTURES / src, dest)
    for path in dest.rglob("*"):
        if path.is_file():
            text = path.read_text()
            for old, new in replace.items():
                text = text.replace(old, new)
            path.write_text(text)
    build(dest, backend="cpu", quiet=True)
    return dest
