"""Concurrent cold loads and a failing network: eight processes filling one empty cache at once, and downloads
killed, answered 5xx, truncated or cut off. Every outcome is a verified variant or a typed DownloadError."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import make_kernel, new_repo, without_artifacts

from hubkernels.errors import HubkernelsError
from hubkernels.fetch import DownloadError, get_kernel, kernel_versions
from hubkernels.fetch.cache import RepoState
from hubkernels.fetch.install import install
from hubkernels.publish import upload

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kernel(hub, tmp_path_factory) -> tuple[str, str]:
    """(repo id, v1 commit) of a freshly published tiny-act whose files all travel over plain HTTP GETs (under the
    hub's 1 KiB large-file threshold), so faults on `/resolve/` reach them; Xet transfers have their own tests."""
    repo_id = new_repo()
    upload(
        make_kernel(
            tmp_path_factory.mktemp("k") / "k",
            value=3,
            extra_files={"table.py": "TABLE = " + repr(list(range(200))) + "\n"},
        ),
        repo_id=repo_id,
    )
    without_artifacts(repo_id)  # the file-by-file path (a kernel-builder repo); one artifact has its own tests
    return repo_id, kernel_versions(repo_id)[1]


def _gets(hub) -> Counter:
    return Counter(
        r["path"].rsplit("/", 1)[1]
        for r in hub.requests()
        if r["method"] == "GET" and "/resolve/" in r["path"] and r["status"] in (200, 206)
    )


def test_eight_processes_cold_load_one_cache_at_once(hub, kernel, tmp_path, record) -> None:
    repo_id, commit = kernel
    cache = tmp_path / "cache"
    code = textwrap.dedent(f"""
        import sys, time
        from hubkernels.fetch.install import install
        while time.time() < {time.time() + 3.0}:  # start together
            time.sleep(0.005)
        installed = install({repo_id!r}, version=1)
        print(installed.path, installed.verified is not None)
        """)
    env = {**os.environ, "HF_HUB_CACHE": str(cache)}
    hub.reset_requests()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(8)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    vdir = RepoState(repo_id, cache).variant_dir(commit, "torch-cpu")
    ok = [out.split() == [str(vdir), "True"] for out, _ in results]
    gets = _gets(hub)
    leftovers = [p.name for p in cache.rglob("*.incomplete")]
    failures = ok.count(False) + sum(n != 1 for n in gets.values()) + len(leftovers)
    record(8, failures, gets_per_file=dict(gets), incomplete_left=len(leftovers))
    assert all(ok), [err[-1500:] for out, err in results]
    assert set(gets) == {"__init__.py", "_ops.py", "metadata.json", "table.py"} and set(gets.values()) == {1}, gets
    assert leftovers == []
    assert get_kernel(repo_id, version=1, cache_dir=cache).VALUE == 3


FAULTS = {
    "5xx": dict(status=503),
    "truncated": dict(truncate_after=100),
    "cut off after headers": dict(truncate_after=0),
}


@pytest.mark.parametrize("kind", list(FAULTS))
def test_a_download_that_keeps_failing_is_a_typed_error_and_nothing_partial_is_used(
    hub, kernel, tmp_path, kind, record
) -> None:
    repo_id, commit = kernel
    cache = tmp_path / "cache"
    hub.control.add_fault(r"/resolve/.*/table\.py$", method="GET", times=None, **FAULTS[kind])
    try:
        with pytest.raises(DownloadError, match="table.py .*Nothing was loaded"):
            install(repo_id, version=1, cache_dir=cache)
    finally:
        hub.control.clear_faults()
    state = RepoState(repo_id, cache)
    vdir = state.variant_dir(commit, "torch-cpu")
    partial_used = (vdir / "table.py").exists() or state.receipt(commit, "torch-cpu") is not None
    recovered = install(repo_id, version=1, cache_dir=cache)  # the next try completes and verifies
    record(1, int(partial_used or recovered.verified is None), fault=kind)
    assert not partial_used and recovered.verified is not None


def test_a_process_killed_mid_download_leaves_a_cache_the_next_load_completes(hub, kernel, tmp_path, record) -> None:
    repo_id, commit = kernel
    cache = tmp_path / "cache"
    hub.control.add_fault(r"/resolve/.*/table\.py$", method="GET", delay_s=30.0, times=1)
    proc = subprocess.Popen(
        [sys.executable, "-c", f"from hubkernels.fetch.install import install; install({repo_id!r}, version=1)"],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_CACHE": str(cache)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(r["fault"] == "delay" for r in hub.requests()) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        hub.control.clear_faults()
    state = RepoState(repo_id, cache)
    assert state.receipt(commit, "torch-cpu") is None  # killed before verification: nothing vouches for it
    try:
        installed = install(repo_id, version=1, cache_dir=cache)
        failed = installed.verified is None
    except HubkernelsError:
        failed = True
    record(1, int(failed))
    assert not failed
