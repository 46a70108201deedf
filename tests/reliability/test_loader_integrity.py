"""Tamper matrix: the ltx CPU build, tampered in the client's cache or in the hub's storage, is refused every
time; the warm load stays request-free and its content check costs a few hundred microseconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import new_repo, without_artifacts
from huggingface_hub import constants
from ltx_tiny import publish_ltx

from hubkernels.errors import HubkernelsError
from hubkernels.fetch.cache import RepoState
from hubkernels.fetch.install import install

ROOT = Path(__file__).resolve().parents[2]
MODES = ("size change", "same-size content change", "content change, mtime restored")


def _tamper(path: Path, mode: str) -> None:
    """Change the file (through the cache's symlink: the blob itself) the way `mode` says."""
    path = path.resolve()
    st = path.stat()
    data = bytearray(path.read_bytes())
    if mode == "size change":
        data[:0] = b" "
    else:
        i = len(data) // 2
        data[i] = (data[i] + 1) % 256 if data[i] not in (ord('"'), ord("\\")) else ord(" ")
    path.write_bytes(bytes(data))
    if mode == "content change, mtime restored":
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


@pytest.fixture(scope="module")
def ltx_repo(hub, ltx_build) -> tuple[str, str, tuple[str, ...]]:
    """(repo id, commit, the three files under test) of this checkout's ltx build on the hub."""
    repo_id = publish_ltx(ltx_build.path, new_repo())
    without_artifacts(repo_id)  # tampering reaches the per-file path; a tampered artifact has its own tests
    so = next(p.name for p in ltx_build.path.iterdir() if p.name.endswith(".abi3.so"))
    from hubkernels.fetch import kernel_versions

    commit = kernel_versions(repo_id)[1]
    return repo_id, commit, (so, "__init__.py", "metadata.json")


def test_tampered_files_are_refused_in_the_cache_and_on_the_server(
    hub, ltx_repo, tmp_path, record, monkeypatch
) -> None:
    repo_id, commit, names = ltx_repo
    template = tmp_path / "template"
    variant = install(repo_id, version=1, cache_dir=template).variant
    refused, tried, outcomes = 0, 0, {}
    for name in names:  # the client's cache
        for mode in MODES:
            cache = tmp_path / f"client-{name}-{mode}".replace(" ", "_").replace(",", "")
            shutil.copytree(template, cache, symlinks=True)
            _tamper(RepoState(repo_id, cache).variant_dir(commit, variant) / name, mode)
            tried += 1
            try:
                install(repo_id, version=1, cache_dir=cache)
                outcomes[f"client {name} {mode}"] = "LOADED"
            except HubkernelsError as e:
                refused += 1
                outcomes[f"client {name} {mode}"] = type(e).__name__
    storage = hub.app.state.hub.storage
    tree = RepoState(repo_id, template).tree(commit)
    # the hub's storage: the LFS object behind the file, downloaded over plain HTTP (a client without hf_xet; a
    # damaged Xet xorb is refused by hf_xet itself, after its own retries, which take minutes)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    for name in names:
        entry = tree[f"build/{variant}/{name}"]
        assert entry.lfs_sha256, f"{name} is not stored in LFS on the hub"
        blob = storage.lfs_path(entry.lfs_sha256)
        original, st = blob.read_bytes(), blob.stat()
        for mode in MODES:
            tried += 1
            try:
                _tamper(blob, mode)
                install(repo_id, version=1, cache_dir=tmp_path / f"server-{name}-{mode}".replace(" ", "_"))
                outcomes[f"server {name} {mode}"] = "LOADED"
            except HubkernelsError as e:
                refused += 1
                outcomes[f"server {name} {mode}"] = type(e).__name__
            finally:
                blob.write_bytes(original)
                os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    record(tried, tried - refused, refused_pct=round(100 * refused / tried, 1))
    assert refused == tried == 18, json.dumps(outcomes, indent=1)


def test_a_warm_load_makes_no_request_and_its_content_check_is_cheap(hub, ltx_repo, tmp_path, record) -> None:
    repo_id, commit, _ = ltx_repo
    cache = tmp_path / "cache"
    variant = install(repo_id, version=1, cache_dir=cache).variant
    hub.reset_requests()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import json, statistics, time
        import torch
        import hubkernels.digest as d
        import hubkernels.fetch as f
        from hubkernels.fetch.cache import RepoState, file_stats
        t = time.perf_counter()
        kernel = f.get_kernel({repo_id!r}, version=1)
        load_ms = (time.perf_counter() - t) * 1000
        assert kernel.ops is not None
        state = RepoState({repo_id!r})
        vdir = state.variant_dir({commit!r}, {variant!r})
        content, stat = [], []
        for _ in range(30):
            d._memo.clear()  # as in a fresh process
            t = time.perf_counter(); held = state.receipt_holds({commit!r}, {variant!r})
            content.append((time.perf_counter() - t) * 1000)
            assert held is not None
            t = time.perf_counter(); file_stats(vdir); stat.append((time.perf_counter() - t) * 1000)
        print(json.dumps({{"load_ms": load_ms, "content_check_ms": statistics.median(content),
                          "stat_check_ms": statistics.median(stat)}}))
        """),
        ],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_CACHE": str(cache), "HUBKERNELS_VERSION_TTL": "600"},
        capture_output=True,
        text=True,
        timeout=300,
    )  # zero requests: the user opted in to reusing versions
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    requests = [r for r in hub.requests() if r["path"] != "/api/agent-harnesses"]
    added = figures["content_check_ms"] - figures["stat_check_ms"]
    record(
        1,
        int(bool(requests)) + int(added >= 5.0),
        requests=len(requests),
        warm_load_ms=round(figures["load_ms"], 1),
        content_check_ms=round(figures["content_check_ms"], 3),
        old_stat_check_ms=round(figures["stat_check_ms"], 3),
        added_ms=round(added, 3),
    )
    assert requests == []
    assert added < 5.0, figures  # what the content check adds to a warm load, over the old size/mtime check
