"""A plain `pip install hubkernels` (no extras) in a fresh virtual environment: no server dependencies, yet
`get_kernel` loads from a Hub (the session's, served by this test environment), and `hubkernels serve` answers
with one line naming the pip command of the `serve` extra.

Offline and quick: the wheel is built from this checkout and installed with `--no-deps --no-index`; the core
dependencies it declares (and theirs) are linked in from this test environment through a .pth file, so torch is
not installed again, and `pip check` proves they satisfy the wheel's requirements.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest
from helpers import ROOT, make_kernel, new_repo
from hubfixture import client_env
from packaging.requirements import Requirement

SERVER_MODULES = ("starlette", "uvicorn")

pytestmark = pytest.mark.slow  # a wheel build and a venv: about 20 s


def _wheel(tmp: Path) -> Path:
    """This checkout's wheel, built from a copy of its sources (a build in place would write into ROOT/build/)."""
    src = tmp / "src"
    shutil.copytree(ROOT / "hubkernels", src / "hubkernels", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run([*pip, "-w", str(tmp / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp / "dist").glob("hubkernels-*.whl")
    return wheel


def _core_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist that apply here without any extra."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        headers = HeaderParser().parsestr(z.read(meta).decode())
    reqs = [Requirement(r) for r in headers.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def _link_closure(reqs: list[Requirement], into: Path) -> set[str]:
    """Link the installed distributions `reqs` need (and theirs, transitively) from this environment into `into`."""
    into.mkdir()
    seen: set[str] = set()
    todo = list(reqs)
    while todo:
        req = todo.pop()
        key = req.name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        dist = importlib.metadata.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), (req, dist.version)
        for top in {Path(f).parts[0] for f in dist.files or []} - {".."}:
            if not (into / top).exists():
                (into / top).symlink_to(Path(dist.locate_file(top)))
        todo += [
            r for r in map(Requirement, dist.requires or []) if r.marker is None or r.marker.evaluate({"extra": ""})
        ]
    return seen


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory) -> Path:
    """A fresh venv holding this checkout's wheel, installed without extras; returns its python."""
    tmp = tmp_path_factory.mktemp("plain-install")
    wheel = _wheel(tmp)
    reqs = _core_requirements(wheel)
    assert {r.name for r in reqs} & set(SERVER_MODULES) == set()
    venv.EnvBuilder(with_pip=False).create(tmp / "venv")
    python = tmp / "venv" / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    linked = _link_closure(reqs, tmp / "deps")
    assert linked.isdisjoint(SERVER_MODULES), linked
    (site / "core_deps.pth").write_text(f"{tmp / 'deps'}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    subprocess.run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr  # the linked core dependencies satisfy the wheel
    return python


def _env(tmp: Path, url: str) -> dict[str, str]:
    """Only what a user's shell would hold: no PYTHONPATH (the checkout must not shadow the installed wheel)."""
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp), **client_env(url, tmp)}


def test_a_plain_install_loads_from_a_hub_without_the_server_dependencies(hub, plain_venv, tmp_path) -> None:
    from hubkernels.publish import upload

    repo_id = new_repo("hubkernels")
    upload(make_kernel(tmp_path / "kernel", value=7), repo_id=repo_id)
    code = (
        "import importlib.util, torch, hubkernels\n"
        f"print([m for m in {SERVER_MODULES!r} if importlib.util.find_spec(m)])\n"
        f"k = hubkernels.get_kernel({repo_id!r}, version=1)\n"
        "print(k.VALUE, k.double(torch.ones(2)).tolist())\n"
        "print(hubkernels.__file__)\n"
    )
    out = subprocess.run(
        [plain_venv, "-c", code], env=_env(tmp_path, hub.url), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    missing, loaded, where = out.stdout.splitlines()
    assert missing == "[]" and loaded == "7 [2.0, 2.0]"
    assert Path(where).is_relative_to(plain_venv.parent.parent)  # the installed wheel, not this checkout


def test_hubkernels_serve_without_the_extra_prints_the_pip_command(plain_venv, tmp_path) -> None:
    fix = "pip install 'hubkernels[serve]'"
    serve = subprocess.run(
        [plain_venv.parent / "hubkernels", "serve", "--port", "0"],
        env=_env(tmp_path, "http://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert serve.returncode == 2 and serve.stdout == ""
    assert serve.stderr.count("\n") == 1 and serve.stderr.startswith("hubkernels serve: error: "), serve.stderr
    assert serve.stderr.rstrip().endswith(fix)
    imported = subprocess.run(
        [plain_venv, "-c", "import hubkernels.server"],
        env=_env(tmp_path, "http://127.0.0.1:9"),
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 1 and imported.stderr.splitlines()[-1].endswith(fix)
    assert "ServeExtraMissing" in imported.stderr.splitlines()[-1]


def test_a_plain_install_ships_the_agent_skill(plain_venv, tmp_path) -> None:
    """The skill and its kernel template are package data under author/skill/: `hubkernels skill path` names
    them inside the installed package, and `hubkernels init` has a template to copy."""
    where = subprocess.run(
        [plain_venv.parent / "hubkernels", "skill", "path"],
        env=_env(tmp_path, "http://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr
    skill = Path(where.stdout.strip())
    assert skill.is_relative_to(plain_venv.parent.parent) and (skill / "SKILL.md").is_file()
    assert (skill / "templates" / "build.toml").is_file()
