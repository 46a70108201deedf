"""Content is owned, not shared by hash: attacks on `hubkernels serve` by a user with a write token for her own
namespace only (mallory), who knows the sha256 or Xet hashes of other repositories' files but not their bytes.

Before these were closed, each one worked: a shard claiming a public file's sha256 made every Xet download of
that file (HF `kernels` included) return mallory's bytes; pointer text committed as a regular file, a shard
claiming a private file's sha256, or a junk xorb re-posted under a stored xorb's hash let mallory publish a
private file in her own public repo; a Xet read token outlived its repo's visibility; and the sha256 list of a
published `kernels.lock.digests` was enough to read a private kernel's files.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import xet_craft
from hubfixture import TEST_TOKEN
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError
from server_helpers import http, ndjson

ROOT = Path(__file__).resolve().parents[2]
SECRET = os.urandom(6000)  # stored through Xet (over the 1 KiB LFS threshold), incompressible


def _pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _commit(url: str, repo_id: str, token: str, *ops: dict) -> int:
    body = ndjson({"key": "header", "value": {"summary": "mine"}}, *ops)
    return http(
        f"{url}/api/kernels/{repo_id}/commit/main", "POST", {"Content-Type": "application/x-ndjson"}, body, token
    )[0]


def _lfs_line(path: str, sha256: str, size: int) -> dict:
    return {"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": sha256, "size": size}}


def _file_line(path: str, data: bytes) -> dict:
    return {"key": "file", "value": {"path": path, "content": base64.b64encode(data).decode(), "encoding": "base64"}}


def _anonymous(url: str, repo_id: str, path: str) -> bytes | None:
    status, _, data = http(f"{url}/kernels/{repo_id}/resolve/main/{path}")
    return data if status == 200 else None


@pytest.fixture(scope="module")
def mallory(hub):
    """Mallory's write token (namespace `mallory` only) and a fresh public repo of hers for each use."""
    token = hub.create_token("mallory", write=True)

    def new_repo() -> str:
        repo_id = f"mallory/x-{uuid.uuid4().hex[:8]}"
        HfApi(endpoint=hub.url, token=token).create_repo(repo_id, repo_type="kernel")
        return repo_id

    return token, new_repo


@pytest.fixture(scope="module")
def private_file(hub):
    """A private repo of `hubkernels` holding SECRET, uploaded through Xet; its repo id and sha256."""
    repo_id = f"hubkernels/secret-{uuid.uuid4().hex[:8]}"
    api = HfApi(endpoint=hub.url, token=TEST_TOKEN)
    api.create_repo(repo_id, repo_type="kernel", private=True)
    hub.reset_requests()
    api.upload_file(path_or_fileobj=SECRET, path_in_repo="w.bin", repo_id=repo_id, repo_type="kernel")
    assert any("/cas/v1/shards" in r["path"] for r in hub.requests())  # through Xet
    return repo_id, hashlib.sha256(SECRET).hexdigest()


def test_pointer_text_in_a_regular_file_does_not_publish_a_private_file(hub, mallory, private_file, tmp_path, record):
    token, new_repo = mallory
    _, oid = private_file
    repo_id = new_repo()
    raw = _commit(hub.url, repo_id, token, _file_line("leak.txt", _pointer(oid, len(SECRET))))
    with pytest.raises(HfHubHTTPError) as err:  # the same through huggingface_hub's own upload
        HfApi(endpoint=hub.url, token=token).upload_file(
            path_or_fileobj=_pointer(oid, len(SECRET)), path_in_repo="leak2.txt", repo_id=repo_id, repo_type="kernel"
        )
    leaked = [p for p in ("leak.txt", "leak2.txt") if _anonymous(hub.url, repo_id, p) == SECRET]
    record(2, len(leaked))
    assert (raw, err.value.response.status_code, leaked) == (400, 400, [])
    assert "was never uploaded to" in err.value.response.headers["X-Error-Message"]


def test_a_shard_claiming_a_private_files_sha256_does_not_publish_it(hub, mallory, private_file, record):
    token, new_repo = mallory
    _, oid = private_file
    repo_id = new_repo()
    xet_token, cas = xet_craft.write_token(hub.url, repo_id, token)
    xorb_hex, body, leaves = xet_craft.xorb(os.urandom(len(SECRET)))  # her own bytes, the victim's hash
    pushed = xet_craft.push(cas, xet_token, xorb_hex, body, xet_craft.shard(xorb_hex, leaves, oid))
    committed = _commit(hub.url, repo_id, token, _lfs_line("leak.bin", oid, len(SECRET)))
    record(3, int(_anonymous(hub.url, repo_id, "leak.bin") == SECRET))
    assert (pushed, committed) == ((200, 400), 400)
    assert _anonymous(hub.url, repo_id, "leak.bin") is None


def _stored_xorb(hub, sha256: str) -> tuple[str, list[tuple[bytes, int]]]:
    """The xorb and chunk leaves the hub stored a file in (what a leak of hashes, not bytes, would give)."""
    from hubkernels.server.xet import store as xet_store

    xet = hub.root / "xet"
    file_hex = (xet / "sha256" / sha256).read_text()
    ((xorb_hex, _size, start, end),) = json.loads((xet / "files" / file_hex).read_text())["terms"]
    raw = (xet / "xorbs" / f"{xorb_hex}.idx").read_bytes()
    records = [xet_store._RECORD.unpack_from(raw, i) for i in range(0, len(raw), xet_store._RECORD.size)]
    assert (start, end) == (0, len(records))
    return xorb_hex, [(h, size) for h, _, _, size in records]


def test_a_junk_xorb_posted_under_a_stored_hash_does_not_lend_its_chunks(hub, mallory, private_file, record):
    token, new_repo = mallory
    _, oid = private_file
    repo_id = new_repo()
    xorb_hex, leaves = _stored_xorb(hub, oid)
    xet_token, cas = xet_craft.write_token(hub.url, repo_id, token)
    _, junk, _ = xet_craft.xorb(b"junk")
    pushed = xet_craft.push(cas, xet_token, xorb_hex, junk, xet_craft.shard(xorb_hex, leaves, oid))
    committed = _commit(hub.url, repo_id, token, _lfs_line("leak.bin", oid, len(SECRET)))
    record(3, int(_anonymous(hub.url, repo_id, "leak.bin") == SECRET))
    assert (pushed, committed) == ((400, 403), 400)


def test_a_shard_claiming_a_public_files_sha256_does_not_make_hf_kernels_run_the_attackers_code(
    hub, mallory, tmp_path, record
):
    pytest.importorskip("kernels")  # the victim is HF `kernels`
    from helpers import make_kernel

    from hubkernels.builder import build
    from hubkernels.publish import upload

    token, new_repo = mallory
    root = make_kernel(tmp_path / "publisher", backends=())
    init = root / "torch-ext" / "tiny_act" / "__init__.py"
    init.write_text(init.read_text() + "#" * 2000 + "\n")  # over 1 KiB: stored through Xet
    build(root, backend="cpu", quiet=True)
    victim = f"hubkernels/poisoned-{uuid.uuid4().hex[:8]}"
    upload(root, repo_id=victim)
    original = (root / "build" / "torch-cpu" / "__init__.py").read_bytes()
    tree = list(HfApi(endpoint=hub.url).list_repo_tree(victim, recursive=True, revision="v1", repo_type="kernel"))
    sha = hashlib.sha256(original).hexdigest()
    entry = next(e for e in tree if e.path.endswith("/__init__.py") and e.lfs and e.lfs.sha256 == sha)
    marker = tmp_path / "attacker-code-ran"
    payload = f"import pathlib as _p; _p.Path({str(marker)!r}).write_text('ran')\n".encode()
    evil = payload + original[: len(original) - len(payload) - 1] + b"\n"
    assert len(evil) == len(original)
    repo_id = new_repo()  # mallory commits nothing anywhere: the shard alone is the attack
    xet_token, cas = xet_craft.write_token(hub.url, repo_id, token)
    xorb_hex, body, leaves = xet_craft.xorb(evil)
    pushed = xet_craft.push(cas, xet_token, xorb_hex, body, xet_craft.shard(xorb_hex, leaves, entry.lfs.sha256))
    cache = tmp_path / "victim"
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(cache / "hub"),
        "HF_HOME": str(cache / "home"),
        "KERNELS_CACHE": str(cache / "kernels"),
        "HUBKERNELS_CACHE": str(cache / "hubkernels"),
    }
    env.pop("HF_TOKEN", None)  # the victim is anonymous
    code = f"""
        import kernels, pathlib
        k = kernels.get_kernel({victim!r}, version=1)
        print(k.VALUE, pathlib.Path(k.__file__).read_bytes() == {original!r})
        """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    record(2, int(marker.exists()))
    assert out.returncode == 0, out.stderr[-3000:]
    assert not marker.exists(), "HF kernels ran the attacker's code"
    assert out.stdout.split() == ["1", "True"]
    assert pushed == (200, 400)


def test_a_published_lock_digests_list_does_not_read_a_private_kernel(hub, mallory, tmp_path, record):
    from helpers import make_kernel

    from hubkernels.fetch import lock
    from hubkernels.fetch.lockfile import digests_path
    from hubkernels.publish import upload

    token, new_repo = mallory
    big = {f"table{i}.py": f"TABLE = {list(range(400 + i))!r}\n" for i in range(3)}  # over 1 KiB each: Xet
    root = make_kernel(tmp_path / "private", extra_files=big)
    private = f"hubkernels/locked-{uuid.uuid4().hex[:8]}"
    HfApi(token=TEST_TOKEN).create_repo(private, repo_type="kernel", private=True)
    upload(root, repo_id=private)
    lock([f"{private}@v1"], output=tmp_path / "kernels.lock", cache_dir=tmp_path / "owner-cache")
    published = json.loads(digests_path(tmp_path / "kernels.lock").read_text())  # what a public app repo carries
    (variant,) = published["kernels"][private]["variants"].values()
    files = variant["files"]
    assert variant["algorithm"] == "sha256"
    wanted = {base64.b64decode(d).hex(): path for path, d in files.items() if not path.endswith("metadata.json")}
    real = {
        hashlib.sha256(p.read_bytes()).hexdigest(): p.read_bytes()
        for p in (root / "build" / "torch-cpu").rglob("*")
        if p.is_file()
    }
    assert len(wanted) >= 3 and set(wanted) <= set(real)
    repo_id = new_repo()
    xet_token, cas = xet_craft.write_token(hub.url, repo_id, token)
    read = 0
    for n, sha in enumerate(wanted):
        size = len(real[sha])
        _commit(hub.url, repo_id, token, _file_line(f"p{n}.txt", _pointer(sha, size)))
        xorb_hex, body, leaves = xet_craft.xorb(os.urandom(size))
        xet_craft.push(cas, xet_token, xorb_hex, body, xet_craft.shard(xorb_hex, leaves, sha))
        _commit(hub.url, repo_id, token, _lfs_line(f"s{n}.bin", sha, size))
        read += sum(_anonymous(hub.url, repo_id, p) == real[sha] for p in (f"p{n}.txt", f"s{n}.bin"))
    record(3 * len(wanted), read)
    assert read == 0


def test_a_xet_read_token_stops_reading_when_its_repo_turns_private(hub, record):
    repo_id = f"hubkernels/turning-{uuid.uuid4().hex[:8]}"
    owner = HfApi(endpoint=hub.url, token=TEST_TOKEN)
    owner.create_repo(repo_id, repo_type="kernel")
    owner.upload_file(path_or_fileobj=SECRET, path_in_repo="w.bin", repo_id=repo_id, repo_type="kernel")
    head = http(f"{hub.url}/kernels/{repo_id}/resolve/main/w.bin", "HEAD")[1]
    xet_hash = head["X-Xet-Hash"]
    read_token = json.loads(http(f"{hub.url}/api/kernels/{repo_id}/xet-read-token/main")[2])["accessToken"]
    plan = f"{hub.url}/cas/v2/reconstructions/{xet_hash}"
    before = http(plan, token=read_token)[0]
    assert (
        http(
            f"{hub.url}/api/kernels/{repo_id}/settings",
            "PUT",
            {"Content-Type": "application/json"},
            json.dumps({"visibility": "private"}).encode(),
            TEST_TOKEN,
        )[0]
        == 200
    )
    after = http(plan, token=read_token)[0]
    head_after = http(f"{hub.url}/cas/v1/files/{xet_hash}", "HEAD", token=read_token)[0]
    record(3, int(after == 200) + int(head_after == 200))
    assert (before, after, head_after) == (200, 401, 401)


def test_head_of_a_cas_file_tells_another_repos_token_nothing(hub, mallory, private_file, record):
    token, new_repo = mallory
    repo_id = new_repo()
    read_token = json.loads(http(f"{hub.url}/api/kernels/{repo_id}/xet-read-token/main", token=token)[2])["accessToken"]
    xet_hash = (hub.root / "xet" / "sha256" / private_file[1]).read_text()
    status, headers, _ = http(f"{hub.url}/cas/v1/files/{xet_hash}", "HEAD", token=read_token)
    record(1, int(status == 200))
    assert status == 404 and headers.get("Content-Length") != str(len(SECRET))


def test_revoking_a_token_ends_its_upload_grants_and_xet_tokens_at_once(hub, record):
    token = hub.create_token("leaver", write=True)
    repo_id = f"leaver/x-{uuid.uuid4().hex[:8]}"
    HfApi(endpoint=hub.url, token=token).create_repo(repo_id, repo_type="kernel")
    data = os.urandom(2000)
    oid = hashlib.sha256(data).hexdigest()
    batch = http(
        f"{hub.url}/kernels/{repo_id}.git/info/lfs/objects/batch",
        "POST",
        {"Content-Type": "application/json"},
        json.dumps({"operation": "upload", "objects": [{"oid": oid, "size": len(data)}]}).encode(),
        token,
    )
    href = json.loads(batch[2])["objects"][0]["actions"]["upload"]["href"]
    xet_token, cas = xet_craft.write_token(hub.url, repo_id, token)
    xorb_hex, body, _ = xet_craft.xorb(data)
    assert hub.app.state.hub.tokens.revoke(token)
    after = (http(href, "PUT", body=data)[0], xet_craft.push(cas, xet_token, xorb_hex, body, None)[0])
    record(2, sum(s == 200 for s in after))
    assert after == (403, 401)
