"""Loading from the local Hub: versions, verification, trust, the zero-request warm path, offline loads, and
what happens when the server fails. Every test has its own cache directory; the server is the session hub.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import api_requests as _api_requests
from helpers import make_kernel, new_repo, run_python

import hubkernels.digest
from hubkernels import cli
from hubkernels.errors import DigestError, UsageError, VariantNotFoundError
from hubkernels.fetch import (
    DownloadError,
    KernelNotFoundError,
    UntrustedKernelError,
    get_kernel,
    get_kernel_variants,
    has_kernel,
    install_kernel,
)
from hubkernels.fetch.cache import RepoState, repo_folder
from hubkernels.fetch.install import install
from hubkernels.metadata import Metadata
from hubkernels.publish import upload
from hubkernels.variants import Accepted, Rejected

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Published:
    repo_id: str
    commits: dict[int, str]  # version -> commit
    tags: dict[int, str]
    files: tuple[str, ...]  # the torch-cpu variant's files


def _publish(
    tmp: Path,
    org: str,
    backends: tuple[str, ...] = ("cpu", "cuda"),
    versions: tuple[int, ...] = (1, 2),
    artifacts: bool = True,
) -> Published:
    """tiny-act versions uploaded with `hubkernels upload`; `artifacts=False` then removes wheels/, leaving the
    layout kernel-builder publishes (loaded file by file)."""
    from huggingface_hub import HfApi

    repo_id = new_repo(org)
    commits, tags = {}, {}
    for v in versions:
        result = upload(make_kernel(tmp / f"v{v}", version=v, value=v, backends=backends), repo_id=repo_id)
        commits[v], tags[v] = result.commit, result.tag
        if not artifacts:
            commits[v] = HfApi().delete_folder("wheels", repo_id, repo_type="kernel", revision=f"v{v}").oid
    files = tuple(sorted(p.name for p in (tmp / f"v{versions[0]}" / "build" / f"torch-{backends[0]}").iterdir()))
    return Published(repo_id, commits, tags, files)


@pytest.fixture(scope="module")
def published(hub, tmp_path_factory) -> Published:
    """tiny-act v1 and v2 (variants torch-cpu and torch-cuda) from the trusted org."""
    return _publish(tmp_path_factory.mktemp("published"), "hubkernels")


@pytest.fixture(scope="module")
def filewise(hub, tmp_path_factory) -> Published:
    """tiny-act v1 and v2 laid out as kernel-builder publishes them (build/ only, no artifact): loaded file by file."""
    return _publish(tmp_path_factory.mktemp("filewise"), "hubkernels", artifacts=False)


@pytest.fixture(scope="module")
def untrusted(hub, tmp_path_factory) -> Published:
    """tiny-act v1 from an organization the Hub does not flag as a trusted publisher."""
    return _publish(tmp_path_factory.mktemp("untrusted"), "someone-else", versions=(1,))


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


# -- choosing what to load ------------------------------------------------------------------------------------


def test_no_version_takes_the_newest_and_says_how_to_pin_it(published, cache, caplog) -> None:
    with caplog.at_level("INFO", logger="hubkernels"):
        kernel = get_kernel(published.repo_id, cache_dir=cache)
    assert kernel.VALUE == 2
    assert torch.equal(kernel.double(torch.arange(3.0)), torch.tensor([0.0, 2.0, 4.0]))
    logged = caplog.text
    assert "using the newest, v2" in logged and published.commits[2][:7] in logged
    assert f"get_kernel('{published.repo_id}', version=2)" in logged


def test_version_revision_branch_and_tag_each_load_what_was_published(published, cache) -> None:
    assert get_kernel(published.repo_id, version=1, cache_dir=cache).VALUE == 1
    assert get_kernel(published.repo_id, version=2, cache_dir=cache).VALUE == 2
    assert get_kernel(published.repo_id, revision=published.commits[1], cache_dir=cache).VALUE == 1
    assert get_kernel(published.repo_id, revision="v1", cache_dir=cache).VALUE == 1
    assert get_kernel(published.repo_id, revision=published.tags[2], cache_dir=cache).VALUE == 2


def test_cold_load_fetches_the_chosen_variant_as_one_artifact(hub, published, cache) -> None:
    hub.reset_requests()  # a new process: nothing cached, not even hf_xet's token
    out = run_python(
        f"import hubkernels.fetch as f; print(f.get_kernel({published.repo_id!r}, version=1).VALUE)", cache
    )
    assert out.stdout.split() == ["1"]
    asked = [(m, p) for m, p in _api_requests(hub) if p != "/v1/telemetry"]  # hf_xet's telemetry (answered 202)
    assert not any("torch-cuda" in path for _, path in asked)
    commit = published.commits[1]
    assert [p.split("/")[1] if p.startswith("/cas/") else p for _, p in asked] == [
        f"/api/kernels/{published.repo_id}/refs",
        "/api/organizations/hubkernels/overview",
        f"/api/kernels/{published.repo_id}/tree/{commit}/wheels",  # names every variant and its artifact
        f"/api/kernels/{published.repo_id}/xet-read-token/{commit}",  # no HEAD: the listing gave the Xet hash
        "cas",
        "cas",
    ]  # the artifact's reconstruction and its one xorb range


def test_cold_load_of_a_kernel_builder_repo_downloads_only_the_chosen_variants_files(hub, filewise, cache) -> None:
    hub.reset_requests()
    get_kernel(filewise.repo_id, version=1, cache_dir=cache)
    asked = _api_requests(hub)
    assert not any("torch-cuda" in path for _, path in asked)
    listing = [(m, p) for m, p in asked if "/resolve/" not in p]
    assert [p.rsplit("/", 2)[-2:] if "/tree/" in p else p for _, p in listing] == [
        f"/api/kernels/{filewise.repo_id}/refs",
        "/api/organizations/hubkernels/overview",
        [filewise.commits[1], "wheels"],
        [filewise.commits[1], "build"],
    ]  # no wheels/: the build/ listing
    downloads = sorted(p.rsplit("/", 1)[1] for _, p in asked if "/resolve/" in p)
    assert downloads == sorted(filewise.files * 2)  # HEAD + GET of each file of torch-cpu, nothing else


def test_warm_load_in_a_new_process_makes_no_request(hub, published, cache) -> None:
    get_kernel(published.repo_id, version=1, cache_dir=cache)
    get_kernel(published.repo_id, version=2, cache_dir=cache)
    hub.reset_requests()
    out = run_python(
        f"""
        import hubkernels.fetch as f
        a = f.get_kernel({published.repo_id!r}, version=1)
        b = f.get_kernel({published.repo_id!r}, revision={published.commits[1]!r})
        c = f.get_kernel({published.repo_id!r})
        print(a.VALUE, b.VALUE, c.VALUE)
        """,
        cache,
        HUBKERNELS_VERSION_TTL="600",
    )  # the user opts in to reusing resolved versions
    assert out.stdout.split() == ["1", "1", "2"]
    assert hub.requests() == []


def test_a_warm_load_of_a_version_asks_only_the_branchs_commit(hub, published, cache) -> None:
    get_kernel(published.repo_id, version=1, cache_dir=cache)
    hub.reset_requests()
    out = run_python(
        f"import hubkernels.fetch as f; print(f.get_kernel({published.repo_id!r}, version=1).VALUE)", cache
    )
    assert out.stdout.split() == ["1"]
    assert _api_requests(hub) == [("GET", f"/api/kernels/{published.repo_id}/refs")]


@pytest.mark.slow
def test_a_new_process_sees_a_reuploaded_version_at_once_in_both_loaders(hub, tmp_path) -> None:
    repo_id = new_repo()
    loaders = {"hubkernels": "import hubkernels as m", "kernels": "import kernels as m"}

    def load_in_new_processes() -> list[str]:
        return [
            run_python(
                f"{imp}; print(m.get_kernel({repo_id!r}, version=1).VALUE)",
                tmp_path / name,
                KERNELS_CACHE=str(tmp_path / name / "kernels"),
            ).stdout.split()[-1]
            for name, imp in loaders.items()
        ]

    upload(make_kernel(tmp_path / "first", value=1), repo_id=repo_id)
    before = load_in_new_processes()
    upload(make_kernel(tmp_path / "again", value=2), repo_id=repo_id)  # the publisher re-uploads v1
    assert (before, load_in_new_processes()) == (["1", "1"], ["2", "2"])  # 28dd25c: ours kept 1 for 600 s


def test_ranks_starting_together_share_one_cache(hub, published, cache) -> None:
    code = f"import hubkernels.fetch as f; print(f.get_kernel({published.repo_id!r}, version=2).VALUE)"
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HUBKERNELS_VERSION_TTL": "600"}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    results = [r.communicate(timeout=300) for r in ranks]
    assert [out.strip() for out, _ in results] == ["2"] * 4, [err[-2000:] for _, err in results]
    hub.reset_requests()
    run_python(code, cache, HUBKERNELS_VERSION_TTL="600")  # the next job on this node: nothing left to ask
    assert hub.requests() == []


def test_versions_are_asked_again_after_the_freshness_window_but_commits_never(hub, published, cache) -> None:
    get_kernel(published.repo_id, version=1, cache_dir=cache)
    hub.reset_requests()
    run_python(
        f"import hubkernels.fetch as f; f.get_kernel({published.repo_id!r}, revision={published.commits[1]!r})",
        cache,
        HUBKERNELS_VERSION_TTL="0",
    )
    assert hub.requests() == []
    run_python(
        f"import hubkernels.fetch as f; f.get_kernel({published.repo_id!r}, version=1)",
        cache,
        HUBKERNELS_VERSION_TTL="0",
    )
    assert _api_requests(hub) == [("GET", f"/api/kernels/{published.repo_id}/refs")]


def test_offline_version_works_after_one_online_load(hub, published, cache, monkeypatch) -> None:
    get_kernel(published.repo_id, version=1, cache_dir=cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HUBKERNELS_VERSION_TTL", "0")  # offline, the index is used however old it is
    hub.reset_requests()
    assert get_kernel(published.repo_id, version=1, cache_dir=cache).VALUE == 1
    with pytest.raises(KernelNotFoundError, match=r"no version 5 \(offline.*Available versions: v1, v2"):
        get_kernel(published.repo_id, version=5, cache_dir=cache)
    with pytest.raises(KernelNotFoundError, match="HF_HUB_OFFLINE=1 and .* not in the cache|Load it once online"):
        get_kernel(published.repo_id, version=2, cache_dir=cache)  # known version, never downloaded
    with pytest.raises(KernelNotFoundError, match="never been resolved on this machine"):
        get_kernel(new_repo(), version=1, cache_dir=cache)
    assert hub.requests() == []


def test_offline_new_process_resolves_the_version_from_the_local_index(hub, published, cache) -> None:
    get_kernel(published.repo_id, version=2, cache_dir=cache)
    hub.reset_requests()
    out = run_python(
        f"import hubkernels.fetch as f; print(f.get_kernel({published.repo_id!r}, version=2).VALUE)",
        cache,
        HF_HUB_OFFLINE="1",
        HUBKERNELS_VERSION_TTL="0",
    )
    assert out.stdout.strip() == "2" and hub.requests() == []


# -- verification ---------------------------------------------------------------------------------------------


def test_a_warm_load_checks_content_once_per_process(published, cache, monkeypatch) -> None:
    first = install(published.repo_id, version=1, cache_dir=cache)
    assert not first.warm
    hashed: list[Path] = []
    real = hubkernels.digest._hash_file
    monkeypatch.setattr(hubkernels.digest, "_hash_file", lambda p, a: hashed.append(p) or real(p, a))
    again = install(published.repo_id, version=1, cache_dir=cache)
    assert again.warm and hashed == [] and again.path == first.path  # this process hashed them already
    init = first.path / "__init__.py"
    os.utime(init, ns=(init.stat().st_atime_ns, init.stat().st_mtime_ns + 10**9))  # touched, same bytes
    touched = install(published.repo_id, version=1, cache_dir=cache)
    assert touched.warm and [p.name for p in hashed] == ["__init__.py"]  # its content was checked again
    stat = init.stat()
    data = init.read_bytes()
    init.write_bytes(data.replace(b"VALUE = 1", b"VALUE = 7"))  # same size, mtime put back
    os.utime(init, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert init.stat().st_size == stat.st_size
    with pytest.raises(DigestError, match="__init__.py has been modified"):
        install(published.repo_id, version=1, cache_dir=cache)


def test_a_tampered_file_is_refused_with_how_to_repair_it(published, cache) -> None:
    path = install_kernel(published.repo_id, version=1, cache_dir=cache)
    init = path / "__init__.py"
    init.write_text(init.read_text() + "\nimport os  # injected\n")
    with pytest.raises(DigestError) as e:
        get_kernel(published.repo_id, version=1, cache_dir=cache)
    msg = str(e.value)
    assert "__init__.py has been modified" in msg and "force_download=True" in msg
    assert f"hubkernels download {published.repo_id}@{published.commits[1]} --force" in msg
    repaired = get_kernel(published.repo_id, version=1, cache_dir=cache, force_download=True)
    assert repaired.VALUE == 1 and "injected" not in init.read_text()


def test_an_extra_file_or_edited_metadata_is_refused(published, cache) -> None:
    path = install_kernel(published.repo_id, version=2, cache_dir=cache)
    (path / "sneaky.py").write_text("print('hi')\n")
    with pytest.raises(DigestError, match="unexpected file sneaky.py"):
        install_kernel(published.repo_id, version=2, cache_dir=cache)
    (path / "sneaky.py").unlink()
    meta = path / "metadata.json"
    data = json.loads(meta.read_text())
    data["digest"]["files"]["__init__.py"] = "AAAA"
    meta.write_text(json.dumps(data))
    with pytest.raises(DigestError, match="metadata.json differs from the one the Hub lists"):
        install_kernel(published.repo_id, version=2, cache_dir=cache)


def test_install_kernel_downloads_and_verifies_without_importing(hub, tmp_path, cache) -> None:
    fresh = _publish(tmp_path / "fresh", "hubkernels", versions=(1,))  # a build no test has imported
    path = install_kernel(fresh.repo_id, version=1, cache_dir=cache)
    assert path == RepoState(fresh.repo_id, cache).variant_dir(fresh.commits[1], "torch-cpu")
    meta = Metadata.read(path)
    assert meta.version == 1 and meta.id not in sys.modules


def test_cache_folder_is_huggingface_hubs(published) -> None:
    from huggingface_hub.file_download import repo_folder_name

    assert repo_folder(published.repo_id) == repo_folder_name(repo_id=published.repo_id, repo_type="kernel")


# -- the version cache ----------------------------------------------------------------------------------------


def test_a_version_that_failed_to_load_is_listed_again_after_republishing(hub, tmp_path, cache) -> None:
    repo_id = new_repo()
    upload(make_kernel(tmp_path / "cuda", backends=("cuda",)), repo_id=repo_id)
    with pytest.raises(VariantNotFoundError):
        get_kernel(repo_id, version=1, cache_dir=cache)  # v1 has no build for this machine
    upload(make_kernel(tmp_path / "cpu", value=5, backends=("cpu", "cuda")), repo_id=repo_id)  # v1 again, fixed
    assert get_kernel(repo_id, version=1, cache_dir=cache).VALUE == 5  # within the freshness window


def test_a_cached_version_without_this_machines_variant_is_resolved_again_once(
    hub, tmp_path, cache, capsys, monkeypatch
) -> None:
    repo_id = new_repo()
    upload(make_kernel(tmp_path / "cuda", backends=("cuda",)), repo_id=repo_id)
    assert not has_kernel(repo_id, version=1, cache_dir=cache)  # lists v1 into the local index
    upload(make_kernel(tmp_path / "cpu", value=6, backends=("cpu",)), repo_id=repo_id)
    hub.reset_requests()
    assert get_kernel(repo_id, version=1, cache_dir=cache).VALUE == 6
    assert [p for _, p in _api_requests(hub)].count(f"/api/kernels/{repo_id}/refs") == 1
    monkeypatch.setenv("HUBKERNELS_CACHE", str(cache))
    monkeypatch.setenv("HUBKERNELS_VERSION_TTL", "600")
    assert cli.main(["info", repo_id]) == 0
    assert re.search(r"version cache: \d+ s old \(answers warm loads for 600 s", capsys.readouterr().out)


# -- trust ----------------------------------------------------------------------------------------------------


def test_untrusted_publisher_is_refused_with_how_to_opt_in(untrusted, cache) -> None:
    org = untrusted.repo_id.split("/")[0]
    for load in (get_kernel, install_kernel):
        with pytest.raises(UntrustedKernelError) as e:
            load(untrusted.repo_id, version=1, cache_dir=cache)
        msg = str(e.value)
        assert "not flag as a trusted kernel publisher" in msg
        assert f"trust_remote_code=['{org}']" in msg and f"HUBKERNELS_TRUSTED_ORGS={org}" in msg
    assert not (cache / repo_folder(untrusted.repo_id) / "snapshots").exists()  # nothing was downloaded


@pytest.mark.parametrize("how", ["list", "repo_id", "true", "env"])
def test_opting_in_loads_an_untrusted_publisher(untrusted, cache, monkeypatch, how) -> None:
    org = untrusted.repo_id.split("/")[0]
    trust: object = {"list": [org], "repo_id": [untrusted.repo_id], "true": True, "env": False}[how]
    if how == "env":
        monkeypatch.setenv("HUBKERNELS_TRUSTED_ORGS", f"other,{org}")
    assert get_kernel(untrusted.repo_id, version=1, cache_dir=cache, trust_remote_code=trust).VALUE == 1


def test_an_org_the_hub_starts_trusting_loads_without_opt_in(hub, tmp_path_factory, cache) -> None:
    later = _publish(tmp_path_factory.mktemp("later"), "trusted-later", versions=(1,))
    with pytest.raises(UntrustedKernelError):
        get_kernel(later.repo_id, version=1, cache_dir=cache)
    hub.trust("trusted-later")
    try:
        assert get_kernel(later.repo_id, version=1, cache_dir=cache).VALUE == 1
    finally:
        hub.trust("trusted-later", False)
    # the commit was approved while its publisher was trusted: loading it again needs no new check
    hub.reset_requests()
    assert get_kernel(later.repo_id, revision=later.commits[1], cache_dir=cache).VALUE == 1
    assert hub.requests() == []


def test_trust_remote_code_must_be_a_bool_or_a_list(published, cache) -> None:
    with pytest.raises(UsageError, match="list of organizations"):
        get_kernel(published.repo_id, version=1, cache_dir=cache, trust_remote_code="hubkernels")  # type: ignore


# -- bad input ------------------------------------------------------------------------------------------------


def test_a_private_kernel_loads_with_a_token_and_without_one_says_to_set_it(hub, tmp_path, cache, monkeypatch) -> None:
    repo_id = new_repo()
    upload(make_kernel(tmp_path / "k"), repo_id=repo_id, private=True)
    assert get_kernel(repo_id, version=1, cache_dir=cache).VALUE == 1  # the session's HF_TOKEN
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    with pytest.raises(
        KernelNotFoundError, match=f"no kernel repository {repo_id} .*private repositories also need HF_TOKEN"
    ):
        get_kernel(repo_id, version=1, cache_dir=tmp_path / "other-cache")


def test_unknown_repo_version_or_revision_lists_what_exists(published, cache) -> None:
    with pytest.raises(KernelNotFoundError, match="no kernel repository hubkernels/does-not-exist on http"):
        get_kernel("hubkernels/does-not-exist", version=1, cache_dir=cache)
    with pytest.raises(KernelNotFoundError, match=r"has no version 7. Available versions: v1, v2. Pass version=2"):
        get_kernel(published.repo_id, version=7, cache_dir=cache)
    with pytest.raises(KernelNotFoundError, match=r"no revision 'nope'.*branches: main, v1, v2; tags: v1-"):
        get_kernel(published.repo_id, revision="nope", cache_dir=cache)
    with pytest.raises(KernelNotFoundError, match=f"has no commit {'0' * 40}"):
        get_kernel(published.repo_id, revision="0" * 40, cache_dir=cache)
    with pytest.raises(UsageError, match="org/name"):
        get_kernel("no-slash", cache_dir=cache)
    with pytest.raises(UsageError, match="not both"):
        get_kernel(published.repo_id, version=1, revision="v1", cache_dir=cache)


def test_no_variant_for_this_machine_shows_the_trace(hub, tmp_path_factory, cache) -> None:
    cuda_only = _publish(tmp_path_factory.mktemp("cuda-only"), "hubkernels", backends=("cuda",), versions=(1,))
    with pytest.raises(VariantNotFoundError) as e:
        get_kernel(cuda_only.repo_id, version=1, cache_dir=cache)
    assert "rejected torch-cuda: noarch build for cuda, this system uses cpu" in str(e.value)
    assert not has_kernel(cuda_only.repo_id, version=1, cache_dir=cache)
    assert get_kernel_variants(cuda_only.repo_id, version=1, cache_dir=cache) == [
        Rejected("torch-cuda", "noarch build for cuda, this system uses cpu")
    ]


def test_variant_trace_and_has_kernel(published, cache) -> None:
    trace = get_kernel_variants(published.repo_id, version=1, cache_dir=cache)
    assert [type(t) for t in trace] == [Accepted, Rejected]
    assert str(trace[0].variant) == "torch-cpu" and trace[1].name == "torch-cuda"
    assert has_kernel(published.repo_id, version=2, cache_dir=cache)


# -- a failing server -----------------------------------------------------------------------------------------


def test_server_errors_are_retried(hub, filewise, cache) -> None:
    hub.add_fault(r"/refs$", status=500, times=2)
    hub.add_fault(r"/resolve/.*/__init__\.py$", method="GET", status=503, times=1)
    hub.reset_requests()
    try:
        assert get_kernel(filewise.repo_id, version=2, cache_dir=cache).VALUE == 2
    finally:
        hub.clear_faults()
    statuses = [r["status"] for r in hub.requests() if r["fault"] == "status"]
    assert statuses == [500, 500, 503]


def test_a_persistent_failure_is_a_clean_error_and_nothing_partial_is_loaded(hub, filewise, cache) -> None:
    hub.add_fault(r"/resolve/.*/__init__\.py$", method="GET", status=500, times=None)
    try:
        with pytest.raises(
            DownloadError,
            match=r"downloading build/torch-cpu/__init__.py .* failed 3 times at "
            r"http://127.0.0.1.*Nothing was loaded",
        ):
            get_kernel(filewise.repo_id, version=1, cache_dir=cache)
    finally:
        hub.clear_faults()
    state = RepoState(filewise.repo_id, cache)
    vdir = state.variant_dir(filewise.commits[1], "torch-cpu")
    assert not (vdir / "__init__.py").exists() and state.receipt(filewise.commits[1], "torch-cpu") is None
    assert get_kernel(filewise.repo_id, version=1, cache_dir=cache).VALUE == 1  # and it recovers


def test_a_connection_closed_mid_file_is_resumed(hub, filewise, cache) -> None:
    hub.add_fault(r"/resolve/.*/__init__\.py$", method="GET", truncate_after=40, times=1)
    hub.reset_requests()
    try:
        assert get_kernel(filewise.repo_id, version=1, cache_dir=cache).VALUE == 1
    finally:
        hub.clear_faults()
    gets = [r for r in hub.requests() if r["method"] == "GET" and r["path"].endswith("/__init__.py")]
    assert [g["fault"] for g in gets] == ["truncate", None] and gets[1]["status"] in (200, 206)


def test_a_connection_that_always_drops_leaves_no_file_behind(hub, filewise, cache) -> None:
    hub.add_fault(r"/resolve/.*/__init__\.py$", method="GET", truncate_after=0, times=None)
    try:
        with pytest.raises(DownloadError, match="__init__.py"):
            install_kernel(filewise.repo_id, version=2, cache_dir=cache)
    finally:
        hub.clear_faults()
    vdir = RepoState(filewise.repo_id, cache).variant_dir(filewise.commits[2], "torch-cpu")
    assert not (vdir / "__init__.py").exists()
    assert install_kernel(filewise.repo_id, version=2, cache_dir=cache) == vdir


# -- overrides and the command line ---------------------------------------------------------------------------


def test_local_kernels_override_skips_the_hub(hub, tmp_path, monkeypatch) -> None:
    root = make_kernel(tmp_path / "k", value=42)
    monkeypatch.setenv("LOCAL_KERNELS", f"someone/tiny={root}")
    hub.reset_requests()
    assert get_kernel("someone/tiny", version=1).VALUE == 42 and hub.requests() == []


def test_cli_download_and_info(published, cache, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HUBKERNELS_CACHE", str(cache))
    assert cli.main(["download", f"{published.repo_id}@v1"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert (path / "metadata.json").is_file() and path.is_relative_to(cache)
    assert cli.main(["info", published.repo_id]) == 0
    out = capsys.readouterr().out
    assert f"v1  {published.commits[1]}" in out and "chosen   torch-cpu" in out and "rejected torch-cuda" in out
    assert cli.main(["download", f"{published.repo_id}@v9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hubkernels download: error:") and "Available versions: v1, v2" in err
