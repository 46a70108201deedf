"""The local Hub against the real huggingface_hub client: what publishing and loading kernels relies on.

Every call passes ``endpoint=`` explicitly, so these tests do not depend on which HF_ENDPOINT the client read
at import; each test module gets its own hub on a fresh root.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from hubfixture import ADMIN_TOKEN, TEST_TOKEN, start_hub  # noqa: E402
from huggingface_hub import (  # noqa: E402
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    constants,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import (  # noqa: E402
    EntryNotFoundError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

ROOT = Path(__file__).resolve().parent.parent
TOKEN = TEST_TOKEN
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SO_BYTES = bytes(range(256)) * 20  # 5120 bytes: over the 1 KiB threshold, so it goes through LFS
INIT_PY = b"from ._ops import ops\n"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture(scope="module")
def local_hub(tmp_path_factory):
    server = start_hub(tmp_path_factory.mktemp("hub-root"), trusted_orgs=("trusted-org",))
    yield server
    server.stop()


@pytest.fixture
def api(local_hub) -> HfApi:
    return HfApi(endpoint=local_hub.url, token=TOKEN)


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "cache"


def kernel_folder(base: Path) -> Path:
    """A kernel repo layout: a README, a small .py, and a >1 KiB shared object."""
    variant = base / "build" / "torch213-cxx11-cpu-x86_64-linux"
    variant.mkdir(parents=True)
    (base / "README.md").write_text("---\nlicense: apache-2.0\ntags: [kernel]\n---\n# relu\n")
    (variant / "__init__.py").write_bytes(INIT_PY)
    (variant / "_relu_cpu_abc1234.abi3.so").write_bytes(SO_BYTES)
    (variant / "metadata.json").write_text(json.dumps({"name": "relu", "version": 1}))
    return base


@pytest.fixture
def kernel_repo(api, tmp_path) -> str:
    """A fresh kernel repo with the kernel folder uploaded on main."""
    repo_id = f"org/relu-{uuid.uuid4().hex[:8]}"
    api.create_repo(repo_id, repo_type="kernel")
    api.upload_folder(folder_path=kernel_folder(tmp_path / "src"), repo_id=repo_id, repo_type="kernel")
    return repo_id


VARIANT = "build/torch213-cxx11-cpu-x86_64-linux"
SO_PATH = f"{VARIANT}/_relu_cpu_abc1234.abi3.so"


def http(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    """A plain urllib request: (status, headers, body), errors included."""
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=body)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


# -- repositories -----------------------------------------------------------------------------------------------


def test_create_repo_kernel_and_model_types_with_exist_ok(api, local_hub):
    name = f"org/new-{uuid.uuid4().hex[:8]}"
    url = api.create_repo(name, repo_type="kernel")
    assert url == f"{local_hub.url}/kernels/{name}" and url.repo_type == "kernel"
    assert api.create_repo(name, repo_type="kernel", exist_ok=True) == url
    with pytest.raises(HfHubHTTPError) as err:
        api.create_repo(name, repo_type="kernel")
    assert err.value.response.status_code == 409

    model_url = api.create_repo(name, repo_type="model")  # same name, other type: another repo
    assert model_url == f"{local_hub.url}/{name}"
    # A new repo has an initial commit on main holding .gitattributes, like the Hub.
    assert api.list_repo_files(name) == [".gitattributes"]
    commits = api.list_repo_commits(name)
    assert [c.title for c in commits] == ["initial commit"] and commits[0].authors == ["system"]
    assert api.model_info(name).sha == commits[0].commit_id


def test_upload_folder_stores_small_files_inline_and_binaries_through_lfs(api, local_hub, kernel_repo):
    files = {
        f.path: f for f in api.list_repo_tree(kernel_repo, repo_type="kernel", recursive=True) if hasattr(f, "blob_id")
    }
    assert set(files) == {".gitattributes", "README.md", f"{VARIANT}/__init__.py", SO_PATH, f"{VARIANT}/metadata.json"}
    init = files[f"{VARIANT}/__init__.py"]
    assert init.lfs is None and init.blob_id == git_blob_sha1(INIT_PY) and init.size == len(INIT_PY)
    so = files[SO_PATH]
    assert so.lfs is not None and so.size == len(SO_BYTES)
    assert so.lfs.sha256 == hashlib.sha256(SO_BYTES).hexdigest()
    # Storage is real git: the tree holds an LFS pointer, the bytes sit in the LFS store by sha256.
    git_dir = local_hub.root / "repos" / "kernels" / f"{kernel_repo}.git"
    pointer = subprocess.run(
        ["git", "--git-dir", str(git_dir), "cat-file", "-p", f"main:{SO_PATH}"], capture_output=True, check=True
    ).stdout.decode()
    assert f"oid sha256:{so.lfs.sha256}" in pointer and so.blob_id == git_blob_sha1(pointer.encode())
    assert (local_hub.root / "lfs" / so.lfs.sha256).read_bytes() == SO_BYTES


def test_reuploading_unchanged_files_makes_no_commit(api, local_hub, kernel_repo, tmp_path):
    head = api.repo_info(kernel_repo, repo_type="kernel").sha
    local_hub.reset_requests()
    info = api.upload_folder(folder_path=kernel_folder(tmp_path / "again"), repo_id=kernel_repo, repo_type="kernel")
    assert info.oid == head
    assert not [r for r in local_hub.requests() if "/commit/" in r["path"] or r["method"] == "PUT"]


def test_branch_upload_refs_and_revision_info(api, kernel_repo):
    api.create_branch(kernel_repo, branch="v1", repo_type="kernel")
    api.create_branch(kernel_repo, branch="v1", repo_type="kernel", exist_ok=True)
    with pytest.raises(HfHubHTTPError) as err:
        api.create_branch(kernel_repo, branch="v1", repo_type="kernel")
    assert err.value.response.status_code == 409

    api.upload_file(
        path_or_fileobj=b"v1 only\n", path_in_repo="NOTES.txt", repo_id=kernel_repo, repo_type="kernel", revision="v1"
    )
    refs = api.list_repo_refs(kernel_repo, repo_type="kernel")
    branches = {b.name: b.target_commit for b in refs.branches}
    assert set(branches) == {"main", "v1"} and branches["main"] != branches["v1"]
    assert refs.converts == [] and refs.tags == []
    assert "NOTES.txt" in api.list_repo_files(kernel_repo, repo_type="kernel", revision="v1")
    assert "NOTES.txt" not in api.list_repo_files(kernel_repo, repo_type="kernel")
    assert api.kernel_info(kernel_repo, revision="v1").sha == branches["v1"]
    assert api.repo_info(kernel_repo, repo_type="kernel", revision=branches["main"]).sha == branches["main"]

    api.create_branch(kernel_repo, branch="old", revision=branches["main"], repo_type="kernel")
    assert {b.name: b.target_commit for b in api.list_repo_refs(kernel_repo, repo_type="kernel").branches}[
        "old"
    ] == branches["main"]
    api.delete_branch(kernel_repo, branch="old", repo_type="kernel")
    assert "old" not in {b.name for b in api.list_repo_refs(kernel_repo, repo_type="kernel").branches}


def test_branch_names_with_slashes_round_trip(api, kernel_repo, cache, local_hub):
    api.create_branch(kernel_repo, branch="release/v2", repo_type="kernel")
    path = hf_hub_download(
        kernel_repo,
        f"{VARIANT}/__init__.py",
        repo_type="kernel",
        revision="release/v2",
        cache_dir=cache,
        endpoint=local_hub.url,
    )
    assert Path(path).read_bytes() == INIT_PY


def test_tree_listing_recursive_and_by_path(api, kernel_repo):
    top = {e.path: type(e).__name__ for e in api.list_repo_tree(kernel_repo, repo_type="kernel")}
    assert top == {".gitattributes": "RepoFile", "README.md": "RepoFile", "build": "RepoFolder"}
    # What HF kernels does to list the variants of a repo.
    variants = [e.path for e in api.list_repo_tree(kernel_repo, repo_type="kernel", path_in_repo="build")]
    assert variants == [VARIANT]
    everything = [e.path for e in api.list_repo_tree(kernel_repo, repo_type="kernel", recursive=True)]
    assert "build" in everything and VARIANT in everything and SO_PATH in everything
    expanded = list(api.list_repo_tree(kernel_repo, repo_type="kernel", path_in_repo=VARIANT, expand=True))
    assert all(e.last_commit is not None and e.last_commit.title.startswith("Upload") for e in expanded)
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(kernel_repo, repo_type="kernel", path_in_repo="no/such/dir"))


# -- downloads --------------------------------------------------------------------------------------------------


def test_resolve_headers_give_commit_etag_and_size(api, kernel_repo, local_hub):
    sha = api.kernel_info(kernel_repo).sha
    so = get_hf_file_metadata(hf_hub_url(kernel_repo, SO_PATH, repo_type="kernel", endpoint=local_hub.url), token=TOKEN)
    assert so.commit_hash == sha and so.size == len(SO_BYTES)
    assert so.etag == hashlib.sha256(SO_BYTES).hexdigest()  # LFS files: the sha256, as the Hub does
    init = get_hf_file_metadata(
        hf_hub_url(kernel_repo, f"{VARIANT}/__init__.py", repo_type="kernel", endpoint=local_hub.url), token=TOKEN
    )
    assert init.etag == git_blob_sha1(INIT_PY) and init.size == len(INIT_PY)
    status, headers, _ = http(hf_hub_url(kernel_repo, SO_PATH, repo_type="kernel", endpoint=local_hub.url), "HEAD")
    # The .so went up through Xet (the default client): its answer says how to download it through Xet too.
    assert status == 200 and len(headers["X-Xet-Hash"]) == 64 and 'rel="xet-auth"' in headers["Link"]
    status, headers, _ = http(
        hf_hub_url(kernel_repo, f"{VARIANT}/__init__.py", repo_type="kernel", endpoint=local_hub.url), "HEAD"
    )
    assert status == 200 and not [h for h in headers if h.lower().startswith("x-xet")]  # inlined: plain HTTP


def test_download_twice_the_second_comes_from_the_cache(api, kernel_repo, local_hub, cache):
    first = hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    assert Path(first).read_bytes() == SO_BYTES
    local_hub.reset_requests()
    again = hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    assert again == first
    # A branch costs one HEAD (is main still at that commit?) and no body transfer.
    assert [r["method"] for r in local_hub.requests()] == ["HEAD"]
    local_hub.reset_requests()
    sha = api.kernel_info(kernel_repo).sha
    local_hub.reset_requests()
    pinned = hf_hub_download(
        kernel_repo, SO_PATH, repo_type="kernel", revision=sha, cache_dir=cache, endpoint=local_hub.url
    )
    assert Path(pinned).read_bytes() == SO_BYTES and local_hub.requests() == []  # a commit sha: no request


def test_snapshot_download_with_allow_patterns(api, kernel_repo, local_hub, cache):
    folder = snapshot_download(
        kernel_repo, repo_type="kernel", allow_patterns=[f"{VARIANT}/*"], cache_dir=cache, endpoint=local_hub.url
    )
    got = sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*") if p.is_file())
    assert got == [f"{VARIANT}/__init__.py", SO_PATH, f"{VARIANT}/metadata.json"]
    assert Path(folder, SO_PATH).read_bytes() == SO_BYTES
    verification = api.verify_repo_checksums(kernel_repo, repo_type="kernel", cache_dir=cache)
    assert verification.mismatches == [] and verification.checked_count == 3


def test_range_request_answers_206_with_the_slice(api, kernel_repo, local_hub):
    for path, data in ((SO_PATH, SO_BYTES), (f"{VARIANT}/__init__.py", INIT_PY)):
        url = hf_hub_url(kernel_repo, path, repo_type="kernel", endpoint=local_hub.url)
        status, headers, body = http(url, headers={"Range": "bytes=10-"})
        assert status == 206 and body == data[10:]
        assert headers["Content-Range"] == f"bytes 10-{len(data) - 1}/{len(data)}"
        status, _, body = http(url, headers={"Range": "bytes=2-5"})
        assert status == 206 and body == data[2:6]
        status, headers, _ = http(url, headers={"Range": f"bytes={len(data) + 5}-"})
        assert status == 416 and headers["Content-Range"] == f"bytes */{len(data)}"


def test_tags_resolve_like_branches(api, kernel_repo, local_hub, cache):
    sha = api.kernel_info(kernel_repo).sha
    api.create_tag(kernel_repo, tag="v1.0.0", tag_message="first release", repo_type="kernel")
    api.create_tag(kernel_repo, tag="light", repo_type="kernel")
    tags = {t.name: t.target_commit for t in api.list_repo_refs(kernel_repo, repo_type="kernel").tags}
    assert tags == {"v1.0.0": sha, "light": sha}
    path = hf_hub_download(
        kernel_repo, SO_PATH, repo_type="kernel", revision="v1.0.0", cache_dir=cache, endpoint=local_hub.url
    )
    assert Path(path).read_bytes() == SO_BYTES
    with pytest.raises(HfHubHTTPError) as err:
        api.create_tag(kernel_repo, tag="light", repo_type="kernel")
    assert err.value.response.status_code == 409
    api.create_tag(kernel_repo, tag="light", repo_type="kernel", exist_ok=True)


# -- commits ----------------------------------------------------------------------------------------------------


def test_stale_parent_commit_is_refused_with_412(api, kernel_repo):
    base = api.kernel_info(kernel_repo).sha
    api.upload_file(path_or_fileobj=b"one\n", path_in_repo="a.txt", repo_id=kernel_repo, repo_type="kernel")
    with pytest.raises(HfHubHTTPError) as err:
        api.create_commit(
            kernel_repo,
            [CommitOperationAdd("b.txt", b"two\n")],
            commit_message="late",
            parent_commit=base,
            repo_type="kernel",
        )
    assert err.value.response.status_code == 412
    assert "b.txt" not in api.list_repo_files(kernel_repo, repo_type="kernel")


def test_delete_files_and_folders_in_a_commit(api, kernel_repo):
    api.create_commit(
        kernel_repo, [CommitOperationDelete("README.md")], commit_message="drop readme", repo_type="kernel"
    )
    files = api.list_repo_files(kernel_repo, repo_type="kernel")
    assert "README.md" not in files and SO_PATH in files
    api.create_commit(kernel_repo, [CommitOperationDelete("build/")], commit_message="drop build", repo_type="kernel")
    assert api.list_repo_files(kernel_repo, repo_type="kernel") == [".gitattributes"]
    with pytest.raises(EntryNotFoundError):
        api.create_commit(kernel_repo, [CommitOperationDelete("README.md")], commit_message="again", repo_type="kernel")
    assert [c.title for c in api.list_repo_commits(kernel_repo, repo_type="kernel")][:2] == [
        "drop build",
        "drop readme",
    ]


def test_concurrent_commits_to_one_branch_all_land(api, kernel_repo):
    errors = []

    def upload(i: int) -> None:
        try:
            api.upload_file(
                path_or_fileobj=f"{i}\n".encode(),
                path_in_repo=f"parallel/{i}.txt",
                repo_id=kernel_repo,
                repo_type="kernel",
            )
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=upload, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    files = api.list_repo_files(kernel_repo, repo_type="kernel")
    assert {f"parallel/{i}.txt" for i in range(6)} <= set(files)


def test_commit_to_missing_branch_and_unknown_lfs_object_are_refused(api, kernel_repo, local_hub):
    with pytest.raises(RevisionNotFoundError):
        api.upload_file(
            path_or_fileobj=b"x",
            path_in_repo="x.txt",
            repo_id=kernel_repo,
            repo_type="kernel",
            revision="no-such-branch",
        )
    body = "\n".join(
        json.dumps(line)
        for line in (
            {"key": "header", "value": {"summary": "bad"}},
            {"key": "lfsFile", "value": {"path": "big.bin", "algo": "sha256", "oid": "ab" * 32, "size": 10}},
        )
    ).encode()
    status, headers, payload = http(
        f"{local_hub.url}/api/kernels/{kernel_repo}/commit/main",
        "POST",
        {"Content-Type": "application/x-ndjson", **AUTH},
        body,
    )
    assert status == 400 and "never uploaded" in json.loads(payload)["error"]


def test_a_root_from_before_object_links_still_commits_objects_of_its_own_history(api, kernel_repo, local_hub):
    oid = hashlib.sha256(SO_BYTES).hexdigest()
    links = local_hub.root / "repos" / "kernels" / f"{kernel_repo}.git" / "hubkernels-objects"
    shutil.rmtree(links)  # what a repository created before per-repo object links looks like
    body = "\n".join(
        json.dumps(line)
        for line in (
            {"key": "header", "value": {"summary": "copy"}},
            {"key": "lfsFile", "value": {"path": "copy.so", "algo": "sha256", "oid": oid, "size": len(SO_BYTES)}},
        )
    ).encode()
    status, _, payload = http(
        f"{local_hub.url}/api/kernels/{kernel_repo}/commit/main",
        "POST",
        {"Content-Type": "application/x-ndjson", **AUTH},
        body,
    )
    assert status == 200, payload
    assert (links / oid).is_file()
    # and an upload href's verify step needs its grant too
    verify = f"{local_hub.url}/kernels/{kernel_repo}.git/info/lfs/objects/{oid}/verify"
    assert (
        http(
            verify,
            "POST",
            {"Content-Type": "application/json", **AUTH},
            json.dumps({"oid": oid, "size": len(SO_BYTES)}).encode(),
        )[0]
        == 403
    )


# -- errors -----------------------------------------------------------------------------------------------------


def test_typed_errors_for_missing_repo_revision_and_file(api, kernel_repo, local_hub, cache):
    with pytest.raises(RepositoryNotFoundError):
        api.kernel_info("org/does-not-exist")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/does-not-exist", "x", repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    with pytest.raises(RepositoryNotFoundError):
        api.kernel_info(kernel_repo.replace("org/", "other/"))
    with pytest.raises(RevisionNotFoundError):
        api.kernel_info(kernel_repo, revision="v404")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(
            kernel_repo, SO_PATH, repo_type="kernel", revision="v404", cache_dir=cache, endpoint=local_hub.url
        )
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_files(kernel_repo, repo_type="kernel", revision="0" * 40)
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(
            kernel_repo, f"{VARIANT}/missing.py", repo_type="kernel", cache_dir=cache, endpoint=local_hub.url
        )
    status, headers, body = http(hf_hub_url(kernel_repo, "missing.py", repo_type="kernel", endpoint=local_hub.url))
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound" and len(headers["X-Repo-Commit"]) == 40
    assert "missing.py" in json.loads(body)["error"]


def test_legacy_lfs_batch_upload_is_served_too(api, local_hub, tmp_path, cache, monkeypatch):
    """A client with Xet off (HF_HUB_DISABLE_XET=1, or no hf_xet) uploads through the LFS batch API."""
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    repo_id = f"org/legacy-{uuid.uuid4().hex[:8]}"
    api.create_repo(repo_id, repo_type="kernel")
    local_hub.reset_requests()
    api.upload_folder(folder_path=kernel_folder(tmp_path / "k"), repo_id=repo_id, repo_type="kernel")
    paths = [r["path"] for r in local_hub.requests()]
    assert f"/kernels/{repo_id}.git/info/lfs/objects/batch" in paths and not [p for p in paths if "xet" in p]
    assert (local_hub.root / "lfs" / hashlib.sha256(SO_BYTES).hexdigest()).read_bytes() == SO_BYTES
    path = hf_hub_download(repo_id, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    assert Path(path).read_bytes() == SO_BYTES


def test_all_regular_mode_inlines_every_file(tmp_path):
    """With lfs_threshold=None every file is inlined in the commit: no LFS and no Xet transfer at all."""
    server = start_hub(tmp_path / "root", lfs_threshold=None)
    try:
        api = HfApi(endpoint=server.url, token=TOKEN)
        api.create_repo("org/inline", repo_type="kernel")
        api.upload_folder(folder_path=kernel_folder(tmp_path / "src"), repo_id="org/inline", repo_type="kernel")
        so = next(iter(api.get_paths_info("org/inline", [SO_PATH], repo_type="kernel")))
        assert so.lfs is None and so.blob_id == git_blob_sha1(SO_BYTES)
        path = hf_hub_download("org/inline", SO_PATH, repo_type="kernel", cache_dir=tmp_path / "c", endpoint=server.url)
        assert Path(path).read_bytes() == SO_BYTES
    finally:
        server.stop()


# -- account, organizations -------------------------------------------------------------------------------------


def test_whoami_and_trusted_kernel_publishers(api, local_hub):
    assert api.whoami()["name"] == "local-user"
    assert getattr(api.get_organization_overview("trusted-org"), "trustedKernelPublisher") is True
    assert getattr(api.get_organization_overview("someone"), "trustedKernelPublisher") is False
    local_hub.trust("someone")
    assert getattr(api.get_organization_overview("someone"), "trustedKernelPublisher") is True
    local_hub.trust("someone", False)
    assert getattr(api.get_organization_overview("someone"), "trustedKernelPublisher") is False


def test_repositories_survive_a_restart_on_the_same_root(tmp_path):
    first = start_hub(tmp_path / "root")
    api = HfApi(endpoint=first.url, token=TOKEN)
    api.create_repo("org/persist", repo_type="kernel")
    sha = api.upload_file(path_or_fileobj=SO_BYTES, path_in_repo="k.so", repo_id="org/persist", repo_type="kernel").oid
    first.stop()
    second = start_hub(tmp_path / "root")
    try:
        assert HfApi(endpoint=second.url).kernel_info("org/persist").sha == sha
        path = hf_hub_download("org/persist", "k.so", repo_type="kernel", cache_dir=tmp_path / "c", endpoint=second.url)
        assert Path(path).read_bytes() == SO_BYTES
    finally:
        second.stop()


def test_private_repos_answer_only_clients_with_a_token(api, local_hub, cache, tmp_path):
    repo_id = f"org/private-{uuid.uuid4().hex[:8]}"
    api.create_repo(repo_id, repo_type="kernel", private=True)
    api.upload_folder(folder_path=kernel_folder(tmp_path / "k"), repo_id=repo_id, repo_type="kernel")  # LFS too
    so = "build/torch213-cxx11-cpu-x86_64-linux/_relu_cpu_abc1234.abi3.so"
    assert api.kernel_info(repo_id).private is True
    assert (
        Path(
            hf_hub_download(repo_id, so, repo_type="kernel", endpoint=local_hub.url, token=TOKEN, cache_dir=cache)
        ).read_bytes()
        == SO_BYTES
    )
    anonymous = HfApi(endpoint=local_hub.url, token=False)
    for call in (
        lambda: anonymous.kernel_info(repo_id),
        lambda: anonymous.list_repo_refs(repo_id, repo_type="kernel"),
        lambda: anonymous.list_repo_files(repo_id, repo_type="kernel"),
        lambda: hf_hub_download(
            repo_id,
            "README.md",
            repo_type="kernel",
            endpoint=local_hub.url,
            token=False,
            cache_dir=tmp_path / "anonymous",
        ),
    ):
        with pytest.raises(RepositoryNotFoundError, match="private and the request was not authenticated"):
            call()
    # huggingface_hub 2.4's update_repo_settings takes no kernel repo type: its PUT, sent as it would be
    settings = urllib.request.Request(
        f"{local_hub.url}/api/kernels/{repo_id}/settings",
        method="PUT",
        data=json.dumps({"visibility": "public"}).encode(),
        headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
    )
    assert json.load(urllib.request.urlopen(settings)) == {"private": False}
    for body in (b'["private"]', b'{"visibility": "secret"}', b'{"private": "yes"}'):
        bad = urllib.request.Request(settings.full_url, method="PUT", data=body, headers=settings.headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad)
        assert refused.value.code == 400
    assert anonymous.kernel_info(repo_id).private is False  # a refused body changes nothing
    assert anonymous.kernel_info(repo_id).private is False
    assert (
        Path(
            hf_hub_download(
                repo_id, so, repo_type="kernel", endpoint=local_hub.url, token=False, cache_dir=tmp_path / "anonymous"
            )
        ).read_bytes()
        == SO_BYTES
    )


def test_update_repo_settings_switches_visibility_and_needs_a_token(api, local_hub):
    repo_id = f"org/model-{uuid.uuid4().hex[:8]}"
    api.create_repo(repo_id, private=True)
    anonymous = HfApi(endpoint=local_hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError):
        anonymous.model_info(repo_id)
    api.update_repo_settings(repo_id, private=False)
    assert anonymous.model_info(repo_id).private is False
    api.update_repo_settings(repo_id, visibility="private")
    with pytest.raises(RepositoryNotFoundError):
        anonymous.model_info(repo_id)
    with pytest.raises(HfHubHTTPError) as refused:
        anonymous.update_repo_settings(repo_id, private=False)
    assert refused.value.response.status_code == 401
    assert api.model_info(repo_id).private is True


def test_a_private_repo_stays_private_after_a_restart(tmp_path):
    first = start_hub(tmp_path / "root")
    HfApi(endpoint=first.url, token=TOKEN).create_repo("org/secret", repo_type="kernel", private=True)
    first.stop()
    second = start_hub(tmp_path / "root")
    try:
        assert HfApi(endpoint=second.url, token=TOKEN).kernel_info("org/secret").private is True
        with pytest.raises(RepositoryNotFoundError):
            HfApi(endpoint=second.url, token=False).kernel_info("org/secret")
    finally:
        second.stop()


# -- observability and fault injection --------------------------------------------------------------------------


def test_request_log_over_http_and_in_process(api, kernel_repo, local_hub):
    local_hub.reset_requests()
    api.list_repo_refs(kernel_repo, repo_type="kernel")
    expected = [
        {
            "method": "GET",
            "path": f"/api/kernels/{kernel_repo}/refs",
            "query": "",
            "status": 200,
            "range": None,
            "fault": None,
        }
    ]
    assert local_hub.requests() == expected
    status, _, body = http(f"{local_hub.url}/_hubkernels/requests", headers=ADMIN)
    assert status == 200 and json.loads(body) == expected  # control routes are not logged themselves
    assert http(f"{local_hub.url}/_hubkernels/requests/reset", "POST", ADMIN)[0] == 200
    assert local_hub.requests() == []


def test_injected_500_on_xet_storage_is_retried_and_the_download_succeeds(kernel_repo, local_hub, cache):
    rule = {"path_regex": r"/cas/v1/xorb-data/", "method": "GET", "status": 500, "times": 1}
    status, _, body = http(
        f"{local_hub.url}/_hubkernels/faults",
        "POST",
        {"Content-Type": "application/json", **ADMIN},
        json.dumps(rule).encode(),
    )
    assert status == 200 and json.loads(body)["times"] == 1
    local_hub.reset_requests()
    path = hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    assert Path(path).read_bytes() == SO_BYTES
    assert [r["fault"] for r in local_hub.requests() if "/xorb-data/" in r["path"]] == ["status", None]


def test_injected_500_on_a_plain_download_fails_once_then_succeeds(api, kernel_repo, local_hub, cache, monkeypatch):
    """Clients without hf_xet download LFS files over plain HTTP GET; a 500 there surfaces, a retry works."""
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    rule = {"path_regex": r"/resolve/.*\.so$", "method": "GET", "status": 500, "times": 1}
    local_hub.add_fault(**rule)
    with pytest.raises(HfHubHTTPError) as err:
        hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    assert err.value.response.status_code == 500
    sha = api.kernel_info(kernel_repo).sha
    assert not (cache / f"kernels--{kernel_repo.replace('/', '--')}" / "snapshots" / sha / SO_PATH).exists()
    path = hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    assert Path(path).read_bytes() == SO_BYTES
    assert [r["fault"] for r in local_hub.requests() if r["method"] == "GET" and r["path"].endswith(".so")] == [
        "status",
        None,
    ]


def test_a_failing_hub_falls_back_to_the_warm_cache(kernel_repo, local_hub, cache):
    path = hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    local_hub.add_fault(r"/resolve/", method="HEAD", status=503, times=None)
    try:
        again = hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    finally:
        http(f"{local_hub.url}/_hubkernels/faults", "DELETE", ADMIN)
    assert again == path and local_hub.control.faults() == []


def test_truncated_xet_body_is_retried_and_the_file_is_whole(kernel_repo, local_hub, cache):
    local_hub.reset_requests()
    local_hub.add_fault(r"/cas/v1/xorb-data/", method="GET", truncate_after=100, times=1)
    path = hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    assert Path(path).read_bytes() == SO_BYTES
    gets = [r for r in local_hub.requests() if "/xorb-data/" in r["path"]]
    assert [r["fault"] for r in gets] == ["truncate", None] and gets[1]["status"] == 206


def test_a_xet_download_that_fails_leaves_no_complete_looking_file(api, kernel_repo, local_hub, cache):
    local_hub.add_fault(r"/cas/v1/xorb-data/", method="GET", status=404, times=None)  # storage lost the data
    try:
        with pytest.raises(Exception):
            hf_hub_download(kernel_repo, SO_PATH, repo_type="kernel", cache_dir=cache, endpoint=local_hub.url)
    finally:
        local_hub.clear_faults()
    repo_cache = cache / f"kernels--{kernel_repo.replace('/', '--')}"
    sha = api.kernel_info(kernel_repo).sha
    assert not (repo_cache / "snapshots" / sha / SO_PATH).exists()
    assert not (repo_cache / "blobs" / hashlib.sha256(SO_BYTES).hexdigest()).exists()


def test_bad_fault_rules_are_refused(local_hub):
    status, _, body = http(
        f"{local_hub.url}/_hubkernels/faults",
        "POST",
        {"Content-Type": "application/json", **ADMIN},
        json.dumps({"path_regex": "x"}).encode(),
    )
    assert status == 400 and "status, truncate_after or delay_s" in json.loads(body)["error"]
    status, _, _ = http(
        f"{local_hub.url}/_hubkernels/faults",
        "POST",
        {"Content-Type": "application/json", **ADMIN},
        json.dumps({"path_regex": "(", "status": 500}).encode(),
    )
    assert status == 400


# -- command line -----------------------------------------------------------------------------------------------


def _cli_commands() -> list[list[str]]:
    return [[sys.executable, "-m", "hubkernels", "serve"]]


@pytest.mark.parametrize("command", _cli_commands(), ids=lambda c: " ".join(c[1:3]))
def test_cli_serve_prints_its_url_and_answers(command, tmp_path):
    created = subprocess.run(
        [*command, "token", "create", "--user", "alice", "--org", "acme", "--write", "--root", str(tmp_path / "root")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    proc = subprocess.Popen(
        [*command, "--port", "0", "--root", str(tmp_path / "root"), "--trusted-org", "acme"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the server printed nothing within 60 s"
        line = proc.stdout.readline().strip()
        assert line.startswith("Hub listening on http://127.0.0.1:") and str(tmp_path / "root") in line
        url = line.split()[3]
        status, _, body = http(f"{url}/api/whoami-v2", headers={"Authorization": f"Bearer {token}"})
        assert status == 200 and json.loads(body)["name"] == "alice"
        assert [o["name"] for o in json.loads(body)["orgs"]] == ["acme"]
        assert json.loads(http(f"{url}/api/organizations/acme/overview")[2])["trustedKernelPublisher"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    stderr = proc.stderr.read()
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status says how it ended.
    assert proc.returncode in (0, -signal.SIGTERM) and "Traceback" not in stderr, stderr
    assert (tmp_path / "root" / "repos").is_dir()


def test_cli_refuses_a_busy_port(tmp_path, local_hub):
    proc = subprocess.run(
        [sys.executable, "-m", "hubkernels", "serve", "--port", str(local_hub.port)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "Pick another --port" in proc.stderr and "Traceback" not in proc.stderr
