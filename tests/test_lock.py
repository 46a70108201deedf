"""Lock files: `hubkernels lock` records the commit (in HF kernels' `kernels.lock` format) and every variant's metadata
hash (beside it); loading from the lock gets exactly that, even after the branch moves, and refuses anything else."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from helpers import make_kernel, new_repo, run_python

from hubkernels import cli
from hubkernels.errors import DigestError, UsageError
from hubkernels.fetch import get_kernel, install_locked, load_locked, lock, lock_project
from hubkernels.fetch.lockfile import LockFileError, digests_path, read_lock, write_lock
from hubkernels.metadata import Metadata
from hubkernels.publish import upload


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
    assert json.loads(out.read_text()) == [
        {"dependency": {"repo-id": repo_id, "version": 1}, "lock": {"commit": commit}}
    ]
    digests = json.loads(digests_path(out).read_text())
    assert digests["hubkernels_digests"] == 1 and list(digests["kernels"]) == [repo_id]
    entry = digests["kernels"][repo_id]
    assert entry["commit"] == commit and sorted(entry["variants"]) == ["torch-cpu", "torch-cuda"]
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
    data = json.loads(digests_path(lockfile).read_text())
    data["kernels"][repo_id]["variants"]["torch-cpu"]["metadata_sha256"] = "0" * 64
    digests_path(lockfile).write_text(json.dumps(data))
    with pytest.raises(DigestError, match="is not the one the lock file recorded .*re-run `hubkernels lock"):
        load_locked(repo_id, lockfile=lockfile, cache_dir=tmp_path / "cache")


def test_locked_warm_load_in_a_new_process_makes_no_request(hub, kernel, tmp_path: Path) -> None:
    repo_id, _, _ = kernel
    lockfile = tmp_path / "kernels.lock"
    lock([f"{repo_id}@v1"], lockfile, cache_dir=tmp_path / "cache")
    load_locked(repo_id, lockfile=lockfile, cache_dir=tmp_path / "cache")
    hub.reset_requests()
    out = run_python(
        f"import hubkernels; print(hubkernels.load_locked({repo_id!r}, lockfile={str(lockfile)!r}).VALUE)",
        tmp_path / "cache",
    )
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
    assert entries[repo_id].revision == commit and entries[other].version == 1  # the newest, recorded as v1


def test_unusable_lock_files_say_how_to_make_one(kernel, tmp_path: Path) -> None:
    repo_id, _, _ = kernel
    with pytest.raises(LockFileError, match="does not exist. Create it with `hubkernels lock"):
        load_locked(repo_id, lockfile=tmp_path / "missing.lock")
    (tmp_path / "bad.lock").write_text('{"locks": []}')
    with pytest.raises(LockFileError, match="not a kernels.lock file .*re-create it with `hubkernels lock`"):
        load_locked(repo_id, lockfile=tmp_path / "bad.lock")
    (tmp_path / "empty.lock").write_text("[]")
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


def test_older_lock_formats_still_load(kernel, tmp_path: Path) -> None:
    repo_id, root, commit = kernel
    meta = (root / "build" / "torch-cpu" / "metadata.json").read_bytes()
    ours_v1 = tmp_path / "format1.lock"
    ours_v1.write_text(
        json.dumps(
            {
                "hubkernels_lock": 1,
                "kernels": [
                    {
                        "repo_id": repo_id,
                        "version": None,
                        "revision": None,
                        "commit": commit,
                        "variants": {"torch-cpu": {"metadata_sha256": hashlib.sha256(meta).hexdigest(), "files": {}}},
                    }
                ],
            }
        )
    )
    assert load_locked(repo_id, lockfile=ours_v1, cache_dir=tmp_path / "c").VALUE == 10
    write_lock(tmp_path / "migrated.lock", read_lock(ours_v1).values())  # "the newest" is kept as the commit
    assert json.loads((tmp_path / "migrated.lock").read_text()) == [
        {"dependency": {"repo-id": repo_id, "revision": commit}, "lock": {"commit": commit}}
    ]
    pre017 = tmp_path / "pre017.lock"  # what kernels wrote before 0.17: a commit per repo and per-variant hashes
    pre017.write_text(
        json.dumps(
            [
                {
                    "repo_id": repo_id,
                    "sha": commit,
                    "variants": {"torch-cpu": {"hash": "sha256-00", "hash_type": "git_lfs_concat"}},
                }
            ]
        )
    )
    assert read_lock(pre017)[repo_id].commit == commit
    assert load_locked(repo_id, lockfile=pre017, cache_dir=tmp_path / "c").VALUE == 10


def test_digests_of_a_commit_the_lock_no_longer_names_are_not_used(kernel, tmp_path: Path) -> None:
    repo_id, _, commit = kernel
    lockfile = tmp_path / "kernels.lock"
    lock([f"{repo_id}@v1"], lockfile, cache_dir=tmp_path / "cache")
    assert read_lock(lockfile)[repo_id].variants
    moved = json.loads(lockfile.read_text())
    moved[0]["lock"]["commit"] = "f" * 40  # `kernels lock` re-locked it elsewhere; our digests are for `commit`
    lockfile.write_text(json.dumps(moved))
    assert read_lock(lockfile)[repo_id].variants == {} and read_lock(lockfile)[repo_id].commit == "f" * 40


def test_lock_a_project_from_its_pyproject(kernel, tmp_path: Path, monkeypatch, capsys) -> None:
    repo_id, _, commit = kernel
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n\n[tool.kernels.dependencies]\n# pinned\n')
    monkeypatch.setenv("HUBKERNELS_CACHE", str(tmp_path / "cache"))
    assert cli.main(["lock", f"{repo_id}@v1", "--project", str(project)]) == 0
    text = (project / "pyproject.toml").read_text()
    assert text == f'[project]\nname = "app"\n\n[tool.kernels.dependencies]\n"{repo_id}" = 1\n# pinned\n'
    assert read_lock(project / "kernels.lock")[repo_id].commit == commit
    (project / "kernels.lock").unlink()
    assert cli.main(["lock", str(project)]) == 0  # like `kernels lock DIR`
    assert f"wrote {project / 'kernels.lock'}" in capsys.readouterr().out
    assert [e.commit for e in lock_project(project, cache_dir=tmp_path / "cache")] == [commit]
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n')
    assert cli.main(["lock", str(project)]) == 2
    assert "has no [tool.kernels.dependencies] table" in capsys.readouterr().err


def test_the_package_face_reaches_the_locked_loader() -> None:
    import hubkernels

    assert hubkernels.load_locked is load_locked and hubkernels.LockFileError is LockFileError
