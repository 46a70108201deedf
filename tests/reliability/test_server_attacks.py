"""Attacks on `hubkernels serve`, each written as the attacker would try it (loopback only, bounded).

On the hub of commit b50b33f every one of these succeeded: anyone could write to a trusted publisher's `v1`,
delete private repos, trust orgs and inject faults; a forged LFS pointer or any `Authorization` header read
private files. Now each is refused and what the victim loads stays the publisher's.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest
from hubfixture import ADMIN_TOKEN, TEST_TOKEN, start_hub
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
from server_helpers import http, ndjson, post_json

SECRET = b"the private weights\n" * 300  # 6 KB: stored through LFS


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """A test-mode hub with a public and a private kernel repo of `org`, and tokens for an intruder."""
    server = start_hub(tmp_path_factory.mktemp("attacked"), trusted_orgs=("org",))
    owner = HfApi(endpoint=server.url, token=TEST_TOKEN)
    for repo_id, private in (("org/pub", False), ("org/priv", True)):
        owner.create_repo(repo_id, repo_type="kernel", private=private)
        owner.upload_file(
            path_or_fileobj=SECRET if private else b"public", path_in_repo="w.bin", repo_id=repo_id, repo_type="kernel"
        )
        owner.create_branch(repo_id, repo_type="kernel", branch="v1")
        owner.create_tag(repo_id, repo_type="kernel", tag="t1")
    server.intruders = {
        "anonymous": None,
        "garbage": "garbage-token",
        "other org (write)": server.create_token("mallory", ["mallory-org"], write=True),
        "member (read)": server.create_token("reader", ["org"], write=False),
    }
    yield server
    server.stop()


def _state(server) -> dict:
    api = HfApi(endpoint=server.url, token=TEST_TOKEN)
    out = {}
    for repo_id in ("org/pub", "org/priv"):
        refs = api.list_repo_refs(repo_id, repo_type="kernel")
        out[repo_id] = (
            {b.name: b.target_commit for b in refs.branches},
            {t.name: t.target_commit for t in refs.tags},
            api.kernel_info(repo_id).private,
        )
    out["trusted"] = sorted(server.control.trusted_orgs)
    out["faults"] = len(server.control.faults())
    return out


def _writes(url: str) -> list[tuple[str, str, str, bytes | None]]:
    """(label, method, path, body) of every write an intruder may try."""
    commit = ndjson(
        {"key": "header", "value": {"summary": "pwn"}},
        {"key": "file", "value": {"path": "build/x/__init__.py", "content": "cHdu", "encoding": "base64"}},
    )
    out = []
    for repo in ("pub", "priv"):
        api = f"/api/kernels/org/{repo}"
        out += [
            (f"commit {repo}@v1", "POST", f"{api}/commit/v1", commit),
            (f"preupload {repo}", "POST", f"{api}/preupload/v1", json.dumps({"files": []}).encode()),
            (
                f"lfs batch {repo}",
                "POST",
                f"/kernels/org/{repo}.git/info/lfs/objects/batch",
                json.dumps({"operation": "upload", "objects": [{"oid": "a" * 64, "size": 1}]}).encode(),
            ),
            (f"branch create {repo}", "POST", f"{api}/branch/evil", b"{}"),
            (f"branch delete {repo}", "DELETE", f"{api}/branch/v1", None),
            (f"tag create {repo}", "POST", f"{api}/tag/main", json.dumps({"tag": "evil"}).encode()),
            (f"tag delete {repo}", "DELETE", f"{api}/tag/t1", None),
            (
                f"settings {repo}",
                "PUT",
                f"{api}/settings",
                json.dumps({"visibility": "public" if repo == "priv" else "private"}).encode(),
            ),
            (
                f"delete {repo}",
                "DELETE",
                "/api/repos/delete",
                json.dumps({"type": "kernel", "name": repo, "organization": "org"}).encode(),
            ),
        ]
    out += [
        (
            "create in org",
            "POST",
            "/api/repos/create",
            json.dumps({"type": "kernel", "name": "evil", "organization": "org"}).encode(),
        ),
        ("trust an org", "PUT", "/_hubkernels/trusted-orgs/mallory-org", None),
        ("inject a fault", "POST", "/_hubkernels/faults", json.dumps({"path_regex": ".", "status": 503}).encode()),
        ("read the request log", "GET", "/_hubkernels/requests", None),
    ]
    return out


def test_no_write_without_a_members_write_token(attacked, record):
    before = _state(attacked)
    tried, let_through = 0, []
    for who, token in attacked.intruders.items():
        for label, method, path, body in _writes(attacked.url):
            status, _, answer = http(attacked.url + path, method, {"Content-Type": "application/json"}, body, token)
            tried += 1
            if status not in (401, 403, 404):
                let_through.append((who, label, status, answer[:120]))
    record(tried, len(let_through))
    assert let_through == []
    assert _state(attacked) == before
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=attacked.url, token=TEST_TOKEN).kernel_info("org/evil")


def test_control_routes_need_test_mode_and_an_admin_token(attacked, tmp_path, record):
    assert http(f"{attacked.url}/_hubkernels/requests", token=ADMIN_TOKEN)[0] == 200
    assert http(f"{attacked.url}/_hubkernels/requests", token=TEST_TOKEN)[0] == 403  # a write token is no admin
    production = start_hub(tmp_path / "prod", test_mode=False)
    try:
        statuses = [
            http(f"{production.url}{path}", method, token=ADMIN_TOKEN)[0]
            for path, method in (
                ("/_hubkernels/requests", "GET"),
                ("/_hubkernels/faults", "POST"),
                ("/_hubkernels/trusted-orgs/x", "PUT"),
            )
        ]
    finally:
        production.stop()
    record(len(statuses) + 2)
    assert statuses == [404, 404, 404]


def test_anonymous_upload_to_a_trusted_publishers_v1_is_refused_and_the_victim_loads_the_publisher(
    hub, tmp_path, record
):
    from helpers import make_kernel

    import hubkernels
    from hubkernels.publish import upload

    repo_id = f"hubkernels/victim-{uuid.uuid4().hex[:8]}"
    upload(make_kernel(tmp_path / "publisher", value=1), repo_id=repo_id)  # the session's write token
    evil = make_kernel(tmp_path / "attacker", value=666)
    mallory = hub.create_token("mallory", ["mallory-org"], write=True)
    reader = hub.create_token("hk-reader", ["hubkernels"])
    refused = []
    for token in (False, mallory, reader):
        with pytest.raises(HfHubHTTPError) as err:
            HfApi(token=token).upload_folder(
                folder_path=evil / "build", path_in_repo="build", repo_id=repo_id, repo_type="kernel", revision="v1"
            )
        refused.append(err.value.response.status_code)
    kernel = hubkernels.get_kernel(repo_id, version=1, cache_dir=tmp_path / "victim-cache")
    record(len(refused) + 1)
    assert refused == [401, 403, 403]
    assert kernel.VALUE == 1


def test_a_forged_lfs_pointer_does_not_read_another_repos_private_file(attacked, tmp_path, record):
    oid = hashlib.sha256(SECRET).hexdigest()
    mallory = attacked.intruders["other org (write)"]
    api = HfApi(endpoint=attacked.url, token=mallory)
    api.create_repo("mallory/leak", repo_type="kernel")
    base = f"{attacked.url}/api/kernels/mallory/leak"
    # 1. commit a pointer to the private object straight away
    forged = ndjson(
        {"key": "header", "value": {"summary": "leak"}},
        {"key": "lfsFile", "value": {"path": "leak.bin", "algo": "sha256", "oid": oid, "size": len(SECRET)}},
    )
    status, _, body = http(f"{base}/commit/main", "POST", {"Content-Type": "application/x-ndjson"}, forged, mallory)
    assert status == 400 and "upload it first" in json.loads(body)["error"]
    # 2. the LFS batch does not say "already stored": it asks for the bytes, which mallory does not have
    status, _, body = post_json(
        f"{attacked.url}/kernels/mallory/leak.git/info/lfs/objects/batch",
        {"operation": "upload", "objects": [{"oid": oid, "size": len(SECRET)}]},
        mallory,
    )
    (obj,) = json.loads(body)["objects"]
    href = obj["actions"]["upload"]["href"]
    assert http(href, "PUT", body=b"x" * len(SECRET))[0] == 400  # wrong bytes: refused
    assert http(href.split("?")[0], "PUT", body=SECRET)[0] == 403  # no grant: refused
    assert http(f"{base}/commit/main", "POST", {"Content-Type": "application/x-ndjson"}, forged, mallory)[0] == 400
    # 3. mallory's own token, a garbage one and a malformed header on the private file itself
    resolve = f"{attacked.url}/kernels/org/priv/resolve/main/w.bin"
    answers = {
        name: http(resolve, headers={"Authorization": value})
        for name, value in (
            ("garbage", "garbage"),
            ("bearer garbage", "Bearer garbage"),
            ("mallory", f"Bearer {mallory}"),
            ("empty bearer", "Bearer "),
        )
    }
    leaked = [name for name, (status, _, data) in answers.items() if status == 200 or SECRET[:40] in data]
    record(4 + len(answers), len(leaked))
    assert leaked == []
    assert {name: a[0] for name, a in answers.items()} == {
        "garbage": 401,
        "bearer garbage": 401,
        "mallory": 404,
        "empty bearer": 401,
    }
    assert answers["garbage"][1]["X-Error-Message"] == "Invalid credentials in Authorization header"
    assert (
        Path(
            hf_hub_download(
                "org/priv",
                "w.bin",
                repo_type="kernel",
                endpoint=attacked.url,
                token=TEST_TOKEN,
                cache_dir=tmp_path / "owner",
            )
        ).read_bytes()
        == SECRET
    )


def test_the_request_log_never_holds_a_private_repos_paths_or_hashes(attacked, tmp_path, record):
    oid = hashlib.sha256(SECRET).hexdigest()
    attacked.reset_requests()
    owner = HfApi(endpoint=attacked.url, token=TEST_TOKEN)
    owner.list_repo_files("org/priv", repo_type="kernel")
    owner.create_commit(
        "org/priv", [CommitOperationAdd("more.bin", SECRET + b"!")], commit_message="more", repo_type="kernel"
    )
    hf_hub_download(
        "org/priv", "w.bin", repo_type="kernel", endpoint=attacked.url, token=TEST_TOKEN, cache_dir=tmp_path / "c"
    )
    log = json.dumps(attacked.requests())
    record(len(attacked.requests()))
    assert "org/priv" not in log and oid not in log and hashlib.sha256(SECRET + b"!").hexdigest() not in log
    assert len(attacked.requests()) >= 6


def test_whoami_answers_for_the_tokens_user_and_its_orgs(attacked):
    status, _, body = http(f"{attacked.url}/api/whoami-v2", token=attacked.intruders["member (read)"])
    me = json.loads(body)
    assert status == 200 and me["name"] == "reader" and [o["name"] for o in me["orgs"]] == ["org"]
    assert me["auth"]["accessToken"]["role"] == "read"
    assert http(f"{attacked.url}/api/whoami-v2")[0] == 401


def test_a_members_token_does_not_reach_a_namespace_spelled_in_another_case(attacked, record):
    status, _, _ = post_json(
        f"{attacked.url}/api/repos/create", {"type": "kernel", "name": "x", "organization": "ORG"}, TEST_TOKEN
    )
    record(1, int(status != 403))
    assert status == 403
