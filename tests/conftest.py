"""Shared fixtures: a real local Hub on 127.0.0.1 and the ltx-kernels build of this checkout.

HF_ENDPOINT is read once, when huggingface_hub is imported, so the port is chosen and the environment
set here, before any test module imports it; the server itself starts on first use.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hubfixture import TEST_TOKEN, free_port  # noqa: E402  (imports neither huggingface_hub nor hubkernels)

_SESSION_TMP = Path(tempfile.mkdtemp(prefix="hubkernels-tests-"))
HUB_PORT = free_port()
os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{HUB_PORT}"
os.environ.pop("HF_HUB_DISABLE_XET", None)  # the default install: LFS files go through Xet
os.environ["HF_HOME"] = str(_SESSION_TMP / "hf-home")
os.environ["HF_HUB_CACHE"] = str(_SESSION_TMP / "hf-cache")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ["HF_TOKEN"] = TEST_TOKEN  # a write token of the orgs tests publish to (hubfixture.TEST_ORGS)
os.environ.pop("HF_HUB_OFFLINE", None)
os.environ.pop("LOCAL_KERNELS", None)

if os.environ.get("HUBKERNELS_BACKEND") == "cpu":
    # A CUDA build of torch on a machine without a GPU (CI's Python 3.10 run: PyPI has no CPU torch for it).
    # HF `kernels` has no way to ask for CPU variants there but its backend= argument, so the tests that
    # cross-check against it skip (pytest.importorskip("kernels") reports why); hubkernels runs in full.
    sys.modules["kernels"] = None  # type: ignore[assignment]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's caches, hub and builds go with the session (1-2 GB a run otherwise stays in /tmp)."""
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def session_tmp() -> Path:
    return _SESSION_TMP


@pytest.fixture(scope="session")
def ltx_build():
    """The ltx-kernels variant for this machine, built from this checkout (incremental across runs); with
    HUBKERNELS_TEST_PUBLISHED_BUILD=1, the one build/ already holds for this machine (nothing compiled)."""
    from hubkernels.builder import BuildResult, build

    if os.environ.get("HUBKERNELS_TEST_PUBLISHED_BUILD"):
        from hubkernels.metadata import Metadata
        from hubkernels.system import Variant
        from hubkernels.variants import require, resolve

        chosen = require(resolve([p.name for p in (ROOT / "build").glob("torch-*")]), "build/")
        path = ROOT / "build" / str(chosen)
        return BuildResult(Variant.parse(path.name), path, Metadata.read(path).id, True)
    return build(ROOT, quiet=True)


@pytest.fixture(scope="session")
def ltx(request):
    """The ltx_kernels module of this checkout's build, loaded the way users load it.

    With HUBKERNELS_TEST_PUBLISHED_BUILD=1 (the GPU run of variants built on a CPU machine) nothing is compiled:
    build/ as it came is published to the session hub and loaded back with `get_kernel`."""
    import hubkernels

    if os.environ.get("HUBKERNELS_TEST_PUBLISHED_BUILD"):
        from ltx_tiny import publish_ltx

        request.getfixturevalue("hub")
        variants = sorted((ROOT / "build").glob("torch-*"))
        assert variants, "HUBKERNELS_TEST_PUBLISHED_BUILD: build/ holds no variant"
        return hubkernels.get_kernel(publish_ltx(variants[0]), version=1)
    request.getfixturevalue("ltx_build")
    return hubkernels.get_local_kernel(ROOT)


@pytest.fixture(scope="session")
def hub(session_tmp):
    """A Hub-compatible server (ours) on 127.0.0.1, the endpoint huggingface_hub was pointed at; in test mode,
    knowing the suite's HF_TOKEN and hubfixture.ADMIN_TOKEN."""
    pytest.importorskip(
        "starlette", reason="the local Hub needs starlette and uvicorn (pip install 'hubkernels[serve]')"
    )
    pytest.importorskip("uvicorn", reason="the local Hub needs starlette and uvicorn (pip install 'hubkernels[serve]')")
    from hubfixture import start_hub

    server = start_hub(session_tmp / "hub-root", port=HUB_PORT, trusted_orgs=("hubkernels",))
    yield server
    server.stop()
