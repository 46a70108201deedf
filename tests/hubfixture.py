"""Start the local Hub for tests (``hubkernels.server.BackgroundHub`` on 127.0.0.1) and point clients at it.

``huggingface_hub`` reads ``HF_ENDPOINT`` (and ``HF_HUB_CACHE``) once, when it is first
imported. So a session picks the port first, sets the environment with `client_env`, and only then imports
anything that imports ``huggingface_hub``; `start_hub` can run later on that port. This module imports neither
``huggingface_hub`` nor ``hubkernels`` at import time.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from hubkernels.server import BackgroundHub

TEST_USER = "local-user"
TEST_TOKEN = "hf_local_test_token"
"""The suite's HF_TOKEN: a write token of `TEST_USER`, a member of `TEST_ORGS`."""
TEST_ORGS = (
    "hubkernels",
    "org",
    "someone",
    "someone-else",
    "trusted-later",
    "trusted-org",
    "skill-test",
    "acme",
    "kernels-test",
    "other",
    "evilorg",
    "my-org",
)
"""The organizations tests publish to; a test that publishes under a new organization adds it here."""
ADMIN_TOKEN = "hf_local_admin_token"
"""An admin token (no write rights) for the test-mode control routes ``/_hubkernels/...``."""


def test_tokens() -> list:
    """The tokens every test hub knows: `TEST_TOKEN` (write) and `ADMIN_TOKEN`."""
    from hubkernels.server import TokenSpec

    return [TokenSpec(TEST_TOKEN, TEST_USER, TEST_ORGS, write=True), TokenSpec(ADMIN_TOKEN, "hub-admin", admin=True)]


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the hub binds it with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def client_env(url: str, home: Path) -> dict[str, str]:
    """The environment that points ``huggingface_hub`` (and HF ``kernels``) at the hub at ``url``, with its cache
    and config under ``home``. Telemetry stays on: the hub answers ``/api/agent-harnesses`` (with
    ``HF_HUB_DISABLE_TELEMETRY=1``, HF kernels 0.17.2 sends an illegal User-Agent)."""
    home = Path(home)
    return {
        "HF_ENDPOINT": url,
        "HF_HOME": str(home / "hf-home"),
        "HF_HUB_CACHE": str(home / "hf-cache"),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_TOKEN": TEST_TOKEN,
    }


def start_hub(
    tmp_root: Path, *, trusted_orgs: Iterable[str] = (), port: int = 0, lfs_threshold: int | None = 1024, **options
) -> BackgroundHub:
    """A started hub in test mode storing its repositories under ``tmp_root``, knowing `test_tokens`; call
    ``.stop()`` when done. ``options`` go to ``BackgroundHub`` (``limits=``, ``tokens=`` ...)."""
    from hubkernels.server import BackgroundHub

    Path(tmp_root).mkdir(parents=True, exist_ok=True)
    options.setdefault("tokens", test_tokens())
    options.setdefault("test_mode", True)
    return BackgroundHub(Path(tmp_root), port=port, trusted_orgs=trusted_orgs, lfs_threshold=lfs_threshold, **options)


def start_hub_with_env(base: Path, *, trusted_orgs: Iterable[str] = ()) -> BackgroundHub:
    """The whole session recipe: pick a port, set `client_env` in ``os.environ``, start the hub on that port.
    Call it before ``huggingface_hub`` is imported, or the client keeps its old endpoint."""
    port = free_port()
    os.environ.update(client_env(f"http://127.0.0.1:{port}", Path(base)))
    return start_hub(Path(base) / "hub-root", trusted_orgs=trusted_orgs, port=port)
