"""Publishing to the local Hub: branch v<N>, the card on main, a tag per upload, and re-uploads that replace
exactly the variants they carry. Everything goes through huggingface_hub against the server on 127.0.0.1.

`make_kernel` (a tiny pure-Python kernel built with `hubkernels build`) is in tests/helpers.py, shared with the
loader tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_kernel, new_repo, remote_files

from hubkernels import cli
from hubkernels.errors import UsageError
from hubkernels.metadata import Metadata
from hubkernels.publish import PublishError, _batches, package_api, upload


def hf_api():
    from huggingface_hub import HfApi

    return HfApi()


def test_upload_publishes_branch_card_and_tag_seen_by_huggingface_hub(hub, tmp_path: Path) -> None:
    from huggingface_hub import hf_hub_download, snapshot_download

    repo_id = new_repo()
    root = make_kernel(tmp_path / "k", backends=("cpu", "cuda"), repo_id=repo_id)
    result = upload(root)  # repo id from [general.hub]
    assert (result.repo_id, result.branch, result.variants, result.changed) == (
        repo_id,
        "v1",
        ("torch-cpu", "torch-cuda"),
        True,
    )

    refs = hf_api().list_repo_refs(repo_id, repo_type="kernel")
    branches = {b.name: b.target_commit for b in refs.branches}
    assert branches["v1"] == result.commit
    assert result.tag == f"v1-{result.commit[:7]}"
    assert {t.name: t.target_commit for t in refs.tags} == {result.tag: result.commit}

    snap = Path(snapshot_download(repo_id, repo_type="kernel", revision="v1", cache_dir=tmp_path / "cache"))
    for variant in ("torch-cpu", "torch-cuda"):
        local = root / "build" / variant
        assert sorted(p.name for p in (snap / "build" / variant).iterdir()) == sorted(p.name for p in local.iterdir())
        assert (snap / "build" / variant / "metadata.json").read_bytes() == (local / "metadata.json").read_bytes()

    card = Path(
        hf_hub_download(repo_id, "README.md", repo_type="kernel", revision="main", cache_dir=tmp_path / "cache")
    ).read_text()
    assert card.startswith("---\nlicense: apache-2.0\n")
    assert f'get_kernel("{repo_id}", version=1)' in card
    assert "| `double` | Twice x, computed the slow way. |" in card and "| `VALUE` |" in card
    assert "| `torch-cpu` | cpu |" in card and "| `torch-cuda` | cuda |" in card


def test_uploading_the_same_build_again_changes_nothing(hub, tmp_path: Path) -> None:
    repo_id = new_repo()
    root = make_kernel(tmp_path / "k")
    first = upload(root, repo_id=repo_id)
    hub.reset_requests()
    again = upload(root, repo_id=repo_id)
    assert (again.commit, again.tag, again.changed) == (first.commit, first.tag, False)
    commits = [r for r in hub.requests() if r["method"] == "POST" and r["path"].endswith("/commit/v1")]
    assert commits == []  # huggingface_hub saw every file unchanged and made no commit


def test_second_upload_replaces_one_variant_and_leaves_the_others(hub, tmp_path: Path) -> None:
    repo_id = new_repo()
    root = make_kernel(tmp_path / "k", backends=("cpu", "cuda"), extra_files={"old_helper.py": "X = 1\n"})
    first = upload(root, repo_id=repo_id)
    before = remote_files(repo_id, first.commit)
    assert "build/torch-cpu/old_helper.py" in before

    (root / "torch-ext" / "tiny_act" / "old_helper.py").unlink()
    make_kernel(root, value=2, backends=("cpu",))  # rebuild torch-cpu only: new __init__.py, no old_helper.py
    second = upload(root, repo_id=repo_id, variants=["torch-cpu"])
    assert second.variants == ("torch-cpu",) and second.changed
    assert second.deleted == ("build/torch-cpu/old_helper.py",)
    after = remote_files(repo_id, "v1")

    assert "build/torch-cpu/old_helper.py" not in after
    assert after["build/torch-cpu/__init__.py"] != before["build/torch-cpu/__init__.py"]
    cuda_before = {p: b for p, b in before.items() if p.startswith("build/torch-cuda/")}
    assert cuda_before and {p: after[p] for p in cuda_before} == cuda_before  # untouched, file for file
    assert [p for p in after if p.startswith("build/torch-cuda/")] == list(cuda_before)
    assert second.tag == f"v1-{second.commit[:7]}" and second.tag != first.tag  # one immutable tag per upload
    from huggingface_hub import hf_hub_download

    card = Path(hf_hub_download(repo_id, "README.md", repo_type="kernel", cache_dir=tmp_path / "c")).read_text()
    assert "| `torch-cpu` | cpu |" in card and "| `torch-cuda` | cuda |" in card  # the card lists both still


def test_a_new_version_goes_to_its_own_branch(hub, tmp_path: Path) -> None:
    repo_id = new_repo()
    v1 = upload(make_kernel(tmp_path / "v1"), repo_id=repo_id)
    v2 = upload(make_kernel(tmp_path / "v2", version=2, value=2), repo_id=repo_id)
    branches = {b.name: b.target_commit for b in hf_api().list_repo_refs(repo_id, repo_type="kernel").branches}
    assert branches["v1"] == v1.commit and branches["v2"] == v2.commit and v2.tag.startswith("v2-")


def test_dirty_build_is_published_with_a_warning(hub, tmp_path: Path) -> None:
    root = make_kernel(tmp_path / "k")
    meta = Metadata.read(root / "build" / "torch-cpu")
    meta.provenance = {**(meta.provenance or {}), "kernel": {"commit": "0" * 40, "dirty": True}}
    meta.write(root / "build" / "torch-cpu")
    with pytest.warns(UserWarning, match="uncommitted changes"):
        result = upload(root, repo_id=new_repo())
    assert result.changed


def test_damaged_or_stale_builds_are_refused_before_anything_is_sent(hub, tmp_path: Path) -> None:
    root = make_kernel(tmp_path / "k")
    init = root / "build" / "torch-cpu" / "__init__.py"
    init.write_text(init.read_text() + "# edited after the build\n")
    repo_id = new_repo()
    hub.reset_requests()
    with pytest.raises(PublishError, match="does not match its metadata.json digest.*hubkernels build"):
        upload(root, repo_id=repo_id)
    assert hub.requests() == []

    root = make_kernel(tmp_path / "k2")
    (root / "build.toml").write_text((root / "build.toml").read_text().replace("version = 1", "version = 3"))
    with pytest.raises(PublishError, match="tiny-act v1, but .* says tiny-act v3. Rebuild"):
        upload(root, repo_id=repo_id)


def test_usage_errors_say_what_to_pass(hub, tmp_path: Path) -> None:
    root = make_kernel(tmp_path / "k")
    with pytest.raises(UsageError, match=r"pass --repo-id ORG/NAME .* \[general.hub\] repo-id"):
        upload(root)
    with pytest.raises(UsageError, match=r"not built: torch-metal \(built: torch-cpu\)"):
        upload(root, repo_id=new_repo(), variants=["torch-metal"])


def test_an_old_huggingface_hub_is_refused_with_the_fix(monkeypatch, tmp_path: Path) -> None:
    import hubkernels.publish as publish

    monkeypatch.setattr(publish, "MIN_HUB_CLIENT", (99, 0))
    with pytest.raises(PublishError, match=r"huggingface_hub >= 99.0 .*pip install -U"):
        upload(make_kernel(tmp_path / "k"), repo_id=new_repo())


def test_commits_hold_at_most_1000_operations_and_keep_variants_whole() -> None:
    groups = [list(range(600)), list(range(600)), list(range(2100)), [1]]
    batches = _batches(groups)
    assert [len(b) for b in batches] == [600, 600, 1000, 1000, 101]
    assert sum(batches, []) == sum(groups, [])


def test_more_than_1000_files_are_committed_in_batches(hub, tmp_path: Path) -> None:
    repo_id = new_repo()
    extra = {f"gen_{i:04d}.py": f"N = {i}\n" for i in range(1001)}
    root = make_kernel(tmp_path / "k", extra_files=extra)
    hub.reset_requests()
    result = upload(root, repo_id=repo_id, source=False)  # the source would be 1003 more files
    commits = [r for r in hub.requests() if r["method"] == "POST" and r["path"].endswith("/commit/v1")]
    assert len(commits) == 2  # 1004 files: 1000 + 4
    assert len([p for p in remote_files(repo_id, result.commit) if p.startswith("build/")]) == 1004


def test_card_api_is_read_without_importing_the_package(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        '"""Doc line."""\nraise SystemExit("imported!")\n__all__ = ["f", "g"]\ndef f():\n    """F does f."""\n'
    )
    assert package_api(pkg) == ("Doc line.", [("f", "F does f."), ("g", "")])


def test_cli_upload_prints_how_to_load_and_errors_in_one_line(hub, tmp_path: Path, capsys, monkeypatch) -> None:
    repo_id = new_repo()
    org = repo_id.split("/")[0]
    root = make_kernel(tmp_path / "k")
    monkeypatch.delenv("HUBKERNELS_TRUSTED_ORGS", raising=False)
    assert cli.main(["upload", str(root), "--repo-id", repo_id]) == 0
    out = capsys.readouterr().out
    # the org is not trusted here: the hint works as printed only with the opt-in
    hint = f'get_kernel("{repo_id}", version=1, trust_remote_code=[{org!r}])'
    assert f"{repo_id}@v1: uploaded torch-cpu" in out and hint in out, out
    monkeypatch.setenv("HUBKERNELS_TRUSTED_ORGS", org)
    assert cli.main(["upload", str(root), "--repo-id", repo_id]) == 0
    assert f'get_kernel("{repo_id}", version=1)' in capsys.readouterr().out
    assert "1 wheel(s) under wheels/" in out
    assert cli.main(["upload", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hubkernels upload: error: no repo id") and "\n" not in err


def test_no_tag_when_asked_not_to(hub, tmp_path: Path) -> None:
    repo_id = new_repo()
    result = upload(make_kernel(tmp_path / "k"), repo_id=repo_id, create_tag=False)
    assert result.tag is None and hf_api().list_repo_refs(repo_id, repo_type="kernel").tags == []


@pytest.mark.parametrize("bars", [None, "0"])
def test_cli_upload_into_a_log_leaves_progress_bars_out(hub, tmp_path: Path, bars) -> None:
    """`hubkernels upload > log 2>&1`: huggingface_hub's and hf_xet's progress bars would be a line per refresh
    there; they are left out unless HF_HUB_DISABLE_PROGRESS_BARS=0 asks for them."""
    import os
    import subprocess
    import sys

    root = make_kernel(tmp_path / "k", extra_files={"table.txt": os.urandom(3 << 20).hex()})  # big enough for bars
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    if bars is not None:
        env["HF_HUB_DISABLE_PROGRESS_BARS"] = bars
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "hubkernels", "upload", str(root), "--repo-id", new_repo()],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    has_bars = "%|" in done.stderr or "it/s" in done.stderr or "B/s" in done.stderr
    assert has_bars == (bars == "0"), done.stderr[-2000:]


def test_a_variant_pep_825_cannot_describe_still_gets_its_artifact(hub, tmp_path: Path) -> None:
    repo_id = new_repo()
    result = upload(make_kernel(tmp_path / "k", backends=("cpu", "cuda")), repo_id=repo_id)
    wheels = sorted(p for p in remote_files(repo_id, result.commit) if p.startswith("wheels/"))
    assert wheels == [
        "wheels/tiny_act-1-variants.json",
        "wheels/torch-cpu/tiny_act-1-py3-none-any-null.whl",
        "wheels/torch-cuda/tiny_act-1-py3-none-any.whl",
    ]  # no label: only the loader reads it


def test_upload_pushes_the_variant_wheel_and_index_in_the_layout_commit(hub, ltx_build, tmp_path: Path) -> None:
    import json
    import warnings

    from huggingface_hub import hf_hub_download

    from hubkernels.builder.wheel import build_wheel

    repo_id = new_repo()
    root = Path(__file__).resolve().parent.parent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a checkout with local changes publishes a dirty build
        result = upload(root, repo_id=repo_id, variants=[ltx_build.path.name], source=False)
    local = build_wheel(ltx_build.path, tmp_path / "dist")
    commits = hf_api().list_repo_commits(repo_id, repo_type="kernel", revision=result.branch)
    files = remote_files(repo_id, result.commit)
    parent = remote_files(repo_id, commits[1].commit_id)
    index = "wheels/ltx_kernels-1-variants.json"
    added = set(files) - set(parent)
    wheel = f"wheels/{ltx_build.path.name}/{local.name}"
    assert {wheel, index, f"build/{ltx_build.path.name}/metadata.json"} <= added  # in the layout's commit
    pushed = Path(
        hf_hub_download(repo_id, wheel, repo_type="kernel", revision=result.commit, cache_dir=tmp_path / "cache")
    )
    assert pushed.read_bytes() == local.read_bytes()
    variants = json.loads(
        Path(
            hf_hub_download(repo_id, index, repo_type="kernel", revision=result.commit, cache_dir=tmp_path / "cache")
        ).read_text()
    )
    assert variants["variants"] == {"null": {}}
    variantlib = pytest.importorskip("variantlib.variants_json")
    assert "null" in variantlib.VariantsJson(variants).variants

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = upload(root, repo_id=repo_id, variants=[ltx_build.path.name], source=False)
    assert not again.changed  # the same build packs the same wheel and index
