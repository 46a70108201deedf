"""Lock files: `hubkernels lock` records the commit and every variant's metadata hash; loading from the lock gets
exactly that, even after the branch moves, and refuses anything else."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from hubkernels import cli
from hubkernels.errors import DigestError, UsageError
from hubkernels.fetch import get_kernel
from hubkernels.lock import LockFileError, install_locked, load_locked, lock, read_lock
from hubkernels.metadata import Metadata
from hubkernels.publish import upload
from helpers import make_kernel, new_repo, run_python


@pytest.fixture(scope="module")
def kernel(hub, tmp_path_factory) -> tuple[str, Path, str]:
    """(repo id, kernel root, commit of v1) for tiny-act v1 with variants torch-cpu and torch-cuda, VALUE 10."""
    root = make_kernel(tmp_path_factory.mktemp("locked") / "k", value=10, backends=("cpu", "cuda"))
    repo_id = new_repo()
    return repo_id, root, upload(root, repo_id=repo_id).commit


def test_lock_records_commit_and_every_variant(kernel, tmp_path: Path) -> None:
    repo_id, root, commit = kernel
    out = tmp_path / "kernels.lock"
    lock([f"{repo_id}@v1"], out, cache_dir=tmp_path / "cache")
    data = json.loads(out.read_text())
    assert data["hubkernels_lock"] == 1 and len(data["kernels"]) == 1
    entry = data["kernels"][0]
    assert (entry["repo_id"], entry["version"], entry["revision"], entry["commit"]) == (repo_id, 1, None, commit)
    assert sorted(entry["variants"]) == ["torch-cpu", "torch-cuda"]
    for name, locked in entry["variants"].items():
        local = root / "build" / name / "metadata.json"
        assert locked["metadata_sha256"] == hashlib.sha256(local.read_bytes()).hexdigest()
        assert locked["files"] == Metadata.read(local).digest["files"] and locked["algorithm"] == "sha256"


def test_loading_from_the_lock_ignores_later_uploads(hub, tmp_path: Path, monkeypatch) -> None:
    repo_id = new_repo()
    commit = upload(make_kernel(tmp_path / "k", value=10), repo_id=repo_id).commit
    lockfile = tmp_path / "kernels.lock"
    lock([f"{repo_id}@v1"], lockfile, cache_dir=tmp_path / "cache")
    moved = tmp_path / "moved"
    upload(make_kernel(moved, value=11), repo_id=repo_id)  # v1 moves on
    cache = tmp_path / "cache2"
    monkeypatch.setenv("HUBKERNELS_VERSION_TTL", "0")
    assert get_kernel(repo_id, version=1, cache_dir=cache).VALUE == 11
    assert load_locked(repo_id, lockfile=lockfile, cache_dir=cache).VALUE == 10
    assert get_kernel(repo_id, lockfile=lockfile, cache_dir=cache).VALUE == 10
    assert install_locked(repo_id, lockfile=lockfile, cache_dir=cache).parts[-3] == commit


def test_a_variant_that_differs_from_the_lock_is_refused(kernel, tmp_path: Path) -> None:
    repo_id, _, _ = kernel
    lockfile = tmp_path / "kernels.lock"
    lock([f"{repo_id}@v1"], lockfile, cache_dir=tmp_path / "cache")
    data = json.loads(lockfile.read_text())
    data["kernels"][0]["variants"]["torch-cpu"]["metadata_sha256"] = "0" * 64
    lockfile.write_text(json.dumps(data))
    with pytest.raises(DigestError, match="is not the one the lock file recorded .*re-run `hubkernels lock"):
        load_locked(repo_id, lockfile=lockfile, cache_dir=tmp_path / "cache")


def test_locked_warm_load_in_a_new_process_makes_no_request(hub, kernel, tmp_path: Path) -> None:
    repo_id, _, _ = kernel
    lockfile = tmp_path / "kernels.lock"
    lock([f"{repo_id}@v1"], lockfile, cache_dir=tmp_path / "cache")
    load_locked(repo_id, lockfile=lockfile, cache_dir=tmp_path / "cache")
    hub.reset_requests()
    out = run_python(f"import hubkernels.lock as l; print(l.load_locked({repo_id!r}, lockfile={str(lockfile)!r}).VALUE)",
                     tmp_path / "cache")
    assert out.stdout.strip() == "10" and hub.requests() == []


def test_lock_merges_into_an_existing_file(hub, kernel, tmp_path: Path) -> None:
    repo_id, _, commit = kernel
    other = new_repo()
    other_commit = upload(make_kernel(tmp_path / "other"), repo_id=other).commit
    lockfile = tmp_path / "kernels.lock"
    lock([f"{repo_id}@{commit}"], lockfile, cache_dir=tmp_path / "cache")
    lock([other], lockfile, cache_dir=tmp_path / "cache")
    entries = read_lock(lockfile)
    assert {k: e.commit for k, e in entries.items()} == {repo_id: commit, other: other_commit}
    assert entries[repo_id].revision == commit and entries[other].version is None


def test_unusable_lock_files_say_how_to_make_one(kernel, tmp_path: Path) -> None:
    repo_id, _, _ = kernel
    with pytest.raises(LockFileError, match="does not exist. Create it with `hubkernels lock"):
        load_locked(repo_id, lockfile=tmp_path / "missing.lock")
    (tmp_path / "bad.lock").write_text("[]")
    with pytest.raises(LockFileError, match="not a hubkernels lock file"):
        load_locked(repo_id, lockfile=tmp_path / "bad.lock")
    (tmp_path / "empty.lock").write_text('{"hubkernels_lock": 1, "kernels": []}')
    with pytest.raises(LockFileError, match=f"no entry for {repo_id}.*hubkernels lock {repo_id} --output"):
        load_locked(repo_id, lockfile=tmp_path / "empty.lock")
    with pytest.raises(UsageError, match="not both"):
        get_kernel(repo_id, version=1, lockfile=tmp_path / "empty.lock")


def test_cli_lock(kernel, tmp_path: Path, monkeypatch, capsys) -> None:
    repo_id, _, commit = kernel
    monkeypatch.setenv("HUBKERNELS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "k.lock"
    assert cli.main(["lock", f"{repo_id}@v1", "--output", str(out)]) == 0
    assert f"{repo_id} (v1) -> {commit}: 2 variant(s)" in capsys.readouterr().out
    assert read_lock(out)[repo_id].commit == commit
    assert cli.main(["lock", "hubkernels/no-such-kernel", "--output", str(out)]) == 2
    assert "no kernel repository hubkernels/no-such-kernel" in capsys.readouterr().err
