"""`hubkernels serve` as a package index: real pip and real uv, in fresh virtual environments, install ltx-kernels
from the wheels `hubkernels upload` pushed, and the installed package runs its ops; private repos stay private.

The fresh environments see this interpreter's torch through a `.pth` file (no torch download; uv is told to leave
torch out of its resolution, as it does not read packages a `.pth` adds); the kernel comes only from the local
Hub's index.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
import warnings
from pathlib import Path

import pytest

from hubkernels.publish import upload

ROOT = Path(__file__).resolve().parent.parent
JSON = "application/vnd.pypi.simple.v1+json"
OPS_CHECK = """
import torch, ltx_kernels
assert ltx_kernels.__file__.startswith({site!r}), ltx_kernels.__file__
x = torch.randn(2, 8, 64)
w = torch.randn(64)
ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
assert torch.allclose(ltx_kernels.rms_norm(x, w, 1e-6), ref, atol=1e-5)
g = ltx_kernels.gelu_tanh(x)
assert torch.allclose(g, torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-5)
print("ops ok")
"""


@pytest.fixture(scope="module")
def published(hub, ltx_build) -> str:
    """ltx-kernels' CPU variant, uploaded (wheel included) to a public repo of the session hub."""
    repo_id = f"hubkernels/ltx-index-{uuid.uuid4().hex[:8]}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a checkout with local changes publishes a dirty build
        upload(ROOT, repo_id=repo_id, variants=[ltx_build.path.name], source=False)
    return repo_id


class _Answer:
    def __init__(self, status: int, content: bytes) -> None:
        self.status_code, self.content = status, content
        self.text = content.decode("utf-8", "replace")

    def json(self):  # type: ignore[no-untyped-def]
        return __import__("json").loads(self.content)


def _get(url: str, headers: dict[str, str] | None = None) -> _Answer:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return _Answer(r.status, r.read())
    except urllib.error.HTTPError as e:
        return _Answer(e.code, e.read())


def _venv(path: Path) -> Path:
    """A fresh virtual environment that sees this interpreter's torch (and nothing else installed)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    torch_dir = Path(__import__("torch").__file__).parent.parent
    (Path(purelib) / "host-torch.pth").write_text(f"{torch_dir}\n")
    return python


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    full.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", UV_NO_CONFIG="1", **env)
    out = subprocess.run(args, capture_output=True, text=True, env=full, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out


def test_pip_installs_ltx_kernels_from_the_index_and_its_ops_run(hub, published, tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-cache-dir",
            "--index-url",
            f"{hub.url}/simple",
            "ltx-kernels",
        ]
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    assert "ops ok" in _run([str(python), "-c", OPS_CHECK.format(site=site)], PYTHONPATH="").stdout
    local = (
        f"import torch, hubkernels; k = hubkernels.get_local_kernel({site + '/ltx_kernels'!r}, verify=True); "
        "x = torch.randn(4, 64); print(torch.allclose(k.gelu_tanh(x), torch.nn.functional.gelu(x, "
        "approximate='tanh'), atol=1e-5))"
    )
    assert _run([str(python), "-c", local], PYTHONPATH=str(ROOT)).stdout.split()[-1] == "True"  # as a local build


def test_uv_installs_ltx_kernels_from_the_index_and_its_ops_run(hub, published, tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (the test extra installs it)")
    python = _venv(tmp_path / "venv")
    # uv reads installed packages from the venv's own site-packages only, so the host torch the .pth shows is
    # taken out of the resolution (an override that never applies) instead of downloaded
    overrides = tmp_path / "overrides.txt"
    overrides.write_text('torch; sys_platform == "never"\n')
    _run(
        [
            uv,
            "pip",
            "install",
            "--python",
            str(python),
            "--no-cache",
            "--index-url",
            f"{hub.url}/simple",
            "--overrides",
            str(overrides),
            "ltx-kernels",
        ]
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    assert "ops ok" in _run([str(python), "-c", OPS_CHECK.format(site=site)], PYTHONPATH="").stdout


def test_project_page_lists_hashes_requires_python_and_the_variants_index(hub, published) -> None:
    page = _get(f"{hub.url}/simple/ltx-kernels/", headers={"Accept": JSON}).json()
    files = {f["filename"]: f for f in page["files"]}
    assert "ltx_kernels-1-variants.json" in files
    labelled = [n for n in files if n.endswith("-null.whl")]
    # the null variant is listed twice, under its label and its plain name (other tests' ltx repos add other labels)
    plain = [labelled[0].removesuffix("-null.whl") + ".whl"] if len(labelled) == 1 else []
    assert plain and plain[0] in files, sorted(files)
    wheel = _get(files[plain[0]]["url"])
    assert wheel.status_code == 200
    assert files[plain[0]]["hashes"]["sha256"] == __import__("hashlib").sha256(wheel.content).hexdigest()
    assert files[plain[0]]["requires-python"] == ">=3.10"
    variants = _get(files["ltx_kernels-1-variants.json"]["url"]).json()
    assert variants["variants"] == {"null": {}}
    html = _get(f"{hub.url}/simple/ltx-kernels/").text
    assert f'#sha256={files[plain[0]]["hashes"]["sha256"]}" data-requires-python="&gt;=3.10"' in html

    per_variant = _get(f"{hub.url}/simple/-/variant/null/ltx-kernels/", headers={"Accept": JSON}).json()
    assert [f["filename"] for f in per_variant["files"]] == plain
    assert _get(f"{hub.url}/simple/-/variant/cu130/ltx-kernels/").status_code == 404


def _secret_kernel(root: Path, repo_id: str) -> Path:
    """A one-file noarch kernel whose package (`secret_act`) no other test publishes, built for the CPU."""
    from hubkernels.builder import build

    (root / "torch-ext" / "secret_act").mkdir(parents=True)
    (root / "build.toml").write_text(
        f'[general]\nname = "secret-act"\nversion = 1\nedition = 5\n'
        f'license = "Apache-2.0"\nbackends = ["cpu"]\n\n[general.hub]\n'
        f'repo-id = "{repo_id}"\n\n[torch-noarch]\n'
    )
    (root / "torch-ext" / "secret_act" / "__init__.py").write_text("VALUE = 7\n")
    build(root, backend="cpu", quiet=True)
    return root


def test_private_repo_wheels_are_listed_only_with_its_token(hub, tmp_path: Path) -> None:
    from hubfixture import TEST_TOKEN

    repo_id = f"someone/secret-{uuid.uuid4().hex[:8]}"
    upload(_secret_kernel(tmp_path / "k", repo_id), private=True)
    hub.reset_requests()

    anonymous = _get(f"{hub.url}/simple/", headers={"Accept": JSON}).json()
    assert "secret-act" not in {p["name"] for p in anonymous["projects"]}
    assert _get(f"{hub.url}/simple/secret-act/").status_code == 404
    bearer = {"Authorization": f"Bearer {TEST_TOKEN}", "Accept": JSON}
    basic = {"Authorization": "Basic " + base64.b64encode(f"__token__:{TEST_TOKEN}".encode()).decode()}
    assert "secret-act" in {p["name"] for p in _get(f"{hub.url}/simple/", headers=bearer).json()["projects"]}
    files = _get(f"{hub.url}/simple/secret-act/", headers=bearer).json()["files"]
    assert "secret_act-1-py3-none-any.whl" in {f["filename"] for f in files}
    assert _get(f"{hub.url}/simple/secret-act/", headers=basic).status_code == 200  # pip's index credentials
    url = next(f["url"] for f in files if f["filename"].endswith(".whl"))
    assert _get(url).status_code == 404 and _get(url, headers=bearer).status_code == 200
    assert not any(repo_id in r["path"] for r in hub.requests())  # the index's URLs name no private repo
