"""A cold `get_kernel` of a repo published by `hubkernels upload` fetches the chosen variant as one artifact: the
request count does not grow with the number of files, a warm load asks nothing, a failed download loads nothing.
Requests are counted at the session hub (its test-mode request log).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import api_requests, make_kernel, new_repo, run_python

from hubkernels.fetch import DownloadError, get_kernel
from hubkernels.fetch.cache import RepoState
from hubkernels.publish import upload

TELEMETRY = "/v1/telemetry"  # hf_xet's transfer telemetry, answered 202 as a success (not a Hub request we make)


def _published(tmp: Path, files: int) -> str:
    """tiny-act with `files` files in its torch-cpu variant (metadata.json included), uploaded; its repo id."""
    extra = {f"part_{i:03d}.py": f"PART = {i}\n" for i in range(files - 3)}  # + __init__.py, _ops.py, metadata
    root = make_kernel(tmp / f"k{files}", extra_files=extra)
    assert sum(1 for p in (root / "build" / "torch-cpu").rglob("*") if p.is_file()) == files
    repo_id = new_repo()
    upload(root, repo_id=repo_id, source=False)
    return repo_id


def _cold_requests(hub, repo_id: str, cache: Path) -> list[tuple[str, str]]:
    hub.reset_requests()
    out = run_python(f"import hubkernels.fetch as f; print(f.get_kernel({repo_id!r}, version=1).VALUE)", cache)
    assert out.stdout.split() == ["1"]
    return [(m, p) for m, p in api_requests(hub) if p != TELEMETRY]


def test_cold_requests_are_equal_for_9_and_500_files_and_a_warm_load_asks_only_the_commit(hub, tmp_path: Path) -> None:
    small, large = _published(tmp_path, 9), _published(tmp_path, 500)
    asked_small = _cold_requests(hub, small, tmp_path / "cache-small")
    asked_large = _cold_requests(hub, large, tmp_path / "cache-large")
    assert len(asked_small) == len(asked_large) <= 6, (asked_small, asked_large)
    shape = [p.replace(large, "REPO").split("/")[1:3] for _, p in asked_large]
    assert shape == [p.replace(small, "REPO").split("/")[1:3] for _, p in asked_small]
    variant = RepoState(large, tmp_path / "cache-large").local_variants
    commit = next(p.split("/")[6] for _, p in asked_large if "/tree/" in p)
    assert variant(commit) == ["torch-cpu"]
    assert len(list((tmp_path / "cache-large").rglob("part_*.py"))) == 497

    hub.reset_requests()  # warm: a new process with the same cache asks only for v1's current commit, as kernels
    run_python(f"import hubkernels.fetch as f; f.get_kernel({large!r}, version=1)", tmp_path / "cache-large")
    assert [r["path"] for r in hub.requests()] == [f"/api/kernels/{large}/refs"]
    hub.reset_requests()  # pinned to the commit (or locked): nothing at all
    run_python(f"import hubkernels.fetch as f; f.get_kernel({large!r}, revision={commit!r})", tmp_path / "cache-large")
    assert hub.requests() == []


def test_a_failed_artifact_download_loads_nothing_and_the_next_load_recovers(hub, tmp_path: Path) -> None:
    repo_id = _published(tmp_path, 9)
    cache = tmp_path / "cache"
    hub.add_fault(r"^/cas/v\d/reconstructions/", status=404, times=None)
    try:
        with pytest.raises(DownloadError):
            get_kernel(repo_id, version=1, cache_dir=cache)
    finally:
        hub.clear_faults()
    state = RepoState(repo_id, cache)
    assert state.local_variants(next(iter(state.refs().versions.values()))) == []  # nothing half-unpacked
    assert get_kernel(repo_id, version=1, cache_dir=cache).VALUE == 1


def test_a_build_listing_cached_by_has_kernel_does_not_turn_the_load_file_by_file(hub, tmp_path: Path) -> None:
    from hubkernels.fetch import has_kernel

    repo_id = _published(tmp_path, 9)
    cache = tmp_path / "cache"
    assert has_kernel(repo_id, version=1, cache_dir=cache)  # lists build/ (and caches it)
    hub.reset_requests()
    assert get_kernel(repo_id, version=1, cache_dir=cache).VALUE == 1
    paths = [p for _, p in api_requests(hub)]
    assert any(p.endswith("/wheels") for p in paths) and not any("/resolve/" in p for p in paths)
