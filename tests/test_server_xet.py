"""Large files through Xet, the default install: huggingface_hub + hf_xet against `hubkernels serve`.

The client is the oracle: hf_xet chunks, compresses and hashes; the hub checks every xorb and shard it receives,
rebuilds each file into its LFS store at commit time, and serves it back through Xet reconstruction (and over
plain HTTP for clients without hf_xet). Every assertion is on bytes a user gets back or on the hub's request log.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from helpers import make_kernel
from hubfixture import TEST_TOKEN

from hubkernels import cli
from hubkernels.builder import build

ROOT = Path(__file__).resolve().parent.parent
BIG = random.Random(13).randbytes(40 << 20)  # 40 MB of incompressible data: hf_xet stores it as ~600 chunks
BIG_SHA = hashlib.sha256(BIG).hexdigest()


def run_python(code: str, cache: Path) -> str:
    """Run ``code`` in a new interpreter pointed at the session hub, with its own empty caches."""
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(cache / "hub"),
        "HF_HOME": str(cache / "home"),
        "HUBKERNELS_CACHE": str(cache / "hubkernels"),
        "KERNELS_CACHE": str(cache / "kernels"),
    }
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def paths(hub) -> list[str]:
    return [r["path"] for r in hub.requests()]


def refused(hub) -> list[dict]:
    """Uploads the hub refused: xorbs, shards and commits (dedup and grant queries answer 404 by design)."""
    return [
        r
        for r in hub.requests()
        if r["status"] >= 400
        and r["method"] == "POST"
        and ("/cas/v1/xorbs/" in r["path"] or "/cas/v1/shards" in r["path"] or "/commit/" in r["path"])
    ]


def reconstructions(hub) -> int:
    return sum("/cas/v2/reconstructions/" in p or "/cas/v1/reconstructions/" in p for p in paths(hub))


@pytest.fixture(scope="module")
def big_kernel(hub, tmp_path_factory) -> str:
    """A noarch kernel whose package ships a 40 MB ``weights.bin``, published with ``hubkernels upload``."""
    root = make_kernel(tmp_path_factory.mktemp("big") / "k", backends=())
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace("[torch-noarch]", '[torch-noarch]\npyext = ["py", "bin"]'))
    (root / "torch-ext" / "tiny_act" / "weights.bin").write_bytes(BIG)
    build(root, backend="cpu", quiet=True)
    assert (root / "build" / "torch-cpu" / "weights.bin").stat().st_size == len(BIG)
    repo_id = f"hubkernels/big-{uuid.uuid4().hex[:8]}"
    hub.reset_requests()
    assert cli.main(["upload", str(root), "--repo-id", repo_id]) == 0
    sent = paths(hub)
    assert any(p.endswith("/xet-write-token/v1") for p in sent) and any("/cas/v1/xorbs/" in p for p in sent)
    assert not [p for p in sent if "/info/lfs/" in p]  # Xet, not the legacy LFS batch API
    return repo_id


def test_hubkernels_upload_of_a_40mb_variant_loads_in_a_new_process_through_xet(hub, big_kernel, tmp_path):
    hub.reset_requests()
    out = run_python(
        f"""
        import hashlib, pathlib, torch, hubkernels
        k = hubkernels.get_kernel({big_kernel!r}, version=1)
        weights = pathlib.Path(k.__file__).parent / "weights.bin"
        print(hashlib.sha256(weights.read_bytes()).hexdigest(), k.double(torch.ones(2)).tolist())
        """,
        tmp_path,
    )
    assert out.split(maxsplit=1) == [BIG_SHA, "[2.0, 2.0]\n"]
    assert reconstructions(hub) == 1  # the 40 MB file came through Xet (X-Xet-Hash on its resolve answer)


def test_hf_kernels_loads_the_xet_stored_variant(hub, big_kernel, tmp_path):
    hub.reset_requests()
    out = run_python(
        f"""
        import hashlib, pathlib, torch, kernels
        k = kernels.get_kernel({big_kernel!r}, version=1)
        weights = pathlib.Path(k.__file__).parent / "weights.bin"
        print(hashlib.sha256(weights.read_bytes()).hexdigest(), k.double(torch.ones(2)).tolist())
        """,
        tmp_path,
    )
    assert out.split(maxsplit=1) == [BIG_SHA, "[2.0, 2.0]\n"]
    assert reconstructions(hub) == 1


def test_upload_folder_then_download_through_xet_and_plain_http_is_byte_identical(hub, tmp_path):
    from huggingface_hub import HfApi, hf_hub_download, hf_hub_url, snapshot_download

    api = HfApi()
    repo_id = f"org/weights-{uuid.uuid4().hex[:8]}"
    api.create_repo(repo_id)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "weights.bin").write_bytes(BIG)
    (tmp_path / "src" / "notes.txt").write_text("small files stay inline\n")
    api.upload_folder(folder_path=tmp_path / "src", repo_id=repo_id)
    info = next(iter(api.get_paths_info(repo_id, ["weights.bin"])))
    assert info.lfs.sha256 == BIG_SHA and info.size == len(BIG)  # git holds an LFS pointer, as on the Hub

    hub.reset_requests()
    path = hf_hub_download(repo_id, "weights.bin", cache_dir=tmp_path / "c1")
    assert Path(path).read_bytes() == BIG and reconstructions(hub) == 1
    hub.reset_requests()
    snap = snapshot_download(repo_id, cache_dir=tmp_path / "c2")
    assert (Path(snap) / "weights.bin").read_bytes() == BIG and reconstructions(hub) == 1
    with urllib.request.urlopen(hf_hub_url(repo_id, "weights.bin"), timeout=60) as plain:  # no hf_xet involved
        assert plain.headers["X-Xet-Hash"] and plain.read() == BIG


def test_hf_upload_cli_goes_through_xet(hub, tmp_path):
    from huggingface_hub import HfApi, hf_hub_download

    repo_id = f"org/cli-{uuid.uuid4().hex[:8]}"
    HfApi().create_repo(repo_id)
    src = tmp_path / "blob.bin"
    src.write_bytes(BIG[: 6 << 20])
    hub.reset_requests()
    hf = Path(sys.executable).parent / "hf"
    out = subprocess.run(
        [str(hf), "upload", repo_id, str(src), "data/blob.bin"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert any("/cas/v1/shards" in p for p in paths(hub))
    path = hf_hub_download(repo_id, "data/blob.bin", cache_dir=tmp_path / "c")
    assert Path(path).read_bytes() == BIG[: 6 << 20]


def test_a_200mb_incompressible_file_uploads_through_xet_both_ways_and_loads_byte_identical(hub, tmp_path):
    """hf_xet's serialized xorbs reach 67,117,208 bytes (just over 64 MiB): the hub takes them, through
    `HfApi.upload_file` and through `hubkernels upload`, and both files come back byte-identical."""
    from huggingface_hub import HfApi, hf_hub_download

    from hubkernels.fetch import get_kernel

    # seeds whose hf_xet xorbs serialize to over 64 MiB (67,115,730 and 67,111,854 bytes): the old limit refused them
    first, second = random.Random(202).randbytes(200 << 20), random.Random(209).randbytes(200 << 20)
    repo_id = f"org/huge-{uuid.uuid4().hex[:8]}"
    HfApi().create_repo(repo_id)
    hub.reset_requests()
    HfApi().upload_file(path_or_fileobj=first, path_in_repo="huge.bin", repo_id=repo_id)
    assert refused(hub) == [] and any("/cas/v1/xorbs/" in r["path"] for r in hub.requests())
    assert Path(hf_hub_download(repo_id, "huge.bin", cache_dir=tmp_path / "c1")).read_bytes() == first

    root = make_kernel(tmp_path / "k", backends=())
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace("[torch-noarch]", '[torch-noarch]\npyext = ["py", "bin"]'))
    (root / "torch-ext" / "tiny_act" / "weights.bin").write_bytes(second)
    build(root, backend="cpu", quiet=True)
    kernel_id = f"hubkernels/huge-{uuid.uuid4().hex[:8]}"
    hub.reset_requests()
    assert cli.main(["upload", str(root), "--repo-id", kernel_id]) == 0
    assert refused(hub) == []
    kernel = get_kernel(kernel_id, version=1, cache_dir=tmp_path / "c2")
    weights = Path(kernel.__file__).parent / "weights.bin"
    assert hashlib.sha256(weights.read_bytes()).digest() == hashlib.sha256(second).digest()
    xorbs = [p.stat().st_size for p in (hub.root / "xet" / "xorbs").iterdir() if p.suffix != ".idx"]
    assert max(xorbs) > 64 << 20  # the case that used to fail was exercised


def _get(url: str, token: str | None = None, method: str = "GET", body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=body, method=method, headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_xet_tokens_are_scoped_and_signed(hub, big_kernel):
    status, body = _get(f"{hub.url}/api/kernels/{big_kernel}/xet-read-token/v1")
    token = json.loads(body)
    assert status == 200 and set(token) == {"accessToken", "exp", "casUrl"} and token["casUrl"].startswith(hub.url)
    xorb = f"{token['casUrl']}/v1/xorbs/default/{'0' * 64}"
    assert _get(xorb, token["accessToken"], "POST", b"x")[0] == 403  # a read token cannot upload
    assert _get(xorb, token["accessToken"][:-2] + "xx", "POST", b"x")[0] == 401  # a forged one is refused
    assert _get(f"{hub.url}/api/kernels/{big_kernel}/xet-write-token/v1")[0] == 401  # anonymous: no write token
    write = json.loads(_get(f"{hub.url}/api/kernels/{big_kernel}/xet-write-token/v1", TEST_TOKEN)[1])["accessToken"]
    status, body = _get(xorb, write, "POST", b"\0" * 8)  # a xorb whose content does not hash to its name
    assert status == 400 and "Rejected xorb" in json.loads(body)["error"]
    assert _get(f"{hub.url}/api/kernels/{big_kernel}/xet-read-token/no-such-branch")[0] == 404


def test_a_range_reconstruction_lists_whole_chunks_and_the_offset_into_them(hub, big_kernel):
    """What a resuming or streaming downloader asks: bytes [first, last] of the file, as whole chunks to fetch."""
    from hubkernels.server.xet.format import iter_chunks

    token = json.loads(_get(f"{hub.url}/api/kernels/{big_kernel}/xet-read-token/v1")[1])
    file_id = urllib.request.urlopen(
        urllib.request.Request(f"{hub.url}/kernels/{big_kernel}/resolve/v1/build/torch-cpu/weights.bin", method="HEAD")
    ).headers["X-Xet-Hash"]
    first, last = 20_000_123, 20_300_000
    req = urllib.request.Request(
        f"{token['casUrl']}/v2/reconstructions/{file_id}",
        headers={"Authorization": f"Bearer {token['accessToken']}", "Range": f"bytes={first}-{last}"},
    )
    plan = json.loads(urllib.request.urlopen(req).read())
    chunks = {}
    for xorb, fetches in plan["xorbs"].items():
        for fetch in fetches:
            (rng,) = fetch["ranges"]
            data_req = urllib.request.Request(
                fetch["url"], headers={"Range": f"bytes={rng['bytes']['start']}-{rng['bytes']['end']}"}
            )
            part = urllib.request.urlopen(data_req).read()
            for i, (_, _, raw) in enumerate(iter_chunks(part, 0, len(part))):
                chunks[(xorb, rng["chunks"]["start"] + i)] = raw
    data = b"".join(
        chunks[(t["hash"], i)] for t in plan["terms"] for i in range(t["range"]["start"], t["range"]["end"])
    )
    assert sum(t["unpacked_length"] for t in plan["terms"]) == len(data) < len(BIG) // 10
    start = plan["offset_into_first_range"]
    assert data[start : start + last - first + 1] == BIG[first : last + 1]


def test_xet_files_survive_a_restart_on_the_same_root(tmp_path):
    from hubfixture import start_hub
    from huggingface_hub import HfApi, hf_hub_download

    first = start_hub(tmp_path / "root")
    try:
        api = HfApi(endpoint=first.url)
        api.create_repo("org/kept")
        api.upload_file(path_or_fileobj=BIG[: 3 << 20], path_in_repo="kept.bin", repo_id="org/kept")
    finally:
        first.stop()
    again = start_hub(tmp_path / "root")
    try:
        path = hf_hub_download("org/kept", "kept.bin", cache_dir=tmp_path / "c", endpoint=again.url)
        assert Path(path).read_bytes() == BIG[: 3 << 20] and reconstructions(again) == 1
    finally:
        again.stop()


def test_a_client_that_sends_no_sha256_is_told_the_fix_in_one_line(hub):
    """An older hf_xet leaves the sha256 out of its shard; the hub accepts the upload but cannot commit the file
    as an LFS pointer, and says how to fix it. (The xorb and shard are built here the way such a client would.)"""
    import struct

    from huggingface_hub import HfApi

    from hubkernels.server.xet import format as fmt

    repo_id = f"org/old-{uuid.uuid4().hex[:8]}"
    HfApi().create_repo(repo_id)
    write = json.loads(_get(f"{hub.url}/api/models/{repo_id}/xet-write-token/main", TEST_TOKEN)[1])
    data = b"an old client's file\n" * 500
    chunk = fmt.chunk_hash(data)
    xorb = bytes([0]) + len(data).to_bytes(3, "little") + bytes([0]) + len(data).to_bytes(3, "little") + data
    xorb_hash = fmt.xorb_hash([(chunk, len(data))])
    assert (
        _get(f"{write['casUrl']}/v1/xorbs/default/{fmt.hash_to_hex(xorb_hash)}", write["accessToken"], "POST", xorb)[0]
        == 200
    )
    bookend = b"\xff" * 32 + bytes(16)
    shard = (
        fmt.SHARD_HEADER_TAG
        + struct.pack("<QQ", 2, 0)
        + fmt.file_hash([(chunk, len(data))])
        + struct.pack("<II8x", 1 << 31, 1)  # verification, no sha256
        + xorb_hash
        + struct.pack("<IIII", 0, len(data), 0, 1)
        + fmt.verification_hash([chunk])
        + bytes(16)
        + bookend
        + xorb_hash
        + struct.pack("<IIII", 0, 1, len(data), len(xorb))
        + chunk
        + struct.pack("<II8x", 0, len(data))
        + bookend
    )
    assert _get(f"{write['casUrl']}/v1/shards", write["accessToken"], "POST", shard)[0] == 200
    op = {"path": "old.bin", "algo": "sha256", "oid": hashlib.sha256(data).hexdigest(), "size": len(data)}
    body = "\n".join(
        json.dumps(line)
        for line in ({"key": "header", "value": {"summary": "old client"}}, {"key": "lfsFile", "value": op})
    ).encode()
    req = urllib.request.Request(
        f"{hub.url}/api/models/{repo_id}/commit/main",
        data=body,
        method="POST",
        headers={"Content-Type": "application/x-ndjson", "Authorization": f"Bearer {TEST_TOKEN}"},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    message = json.loads(err.value.read())["error"]
    assert err.value.code == 400 and "pip install -U hf_xet" in message and "\n" not in message


@pytest.mark.gpu
def test_the_cuda_build_uploads_through_xet_and_both_loaders_run_it(hub, ltx_build, tmp_path):
    """The issue's H200 check: `hubkernels upload` of the CUDA variant (its .so is large) with a default install,
    then hubkernels.get_kernel and kernels.get_kernel run rms_norm on the GPU, each in a new process."""
    pytest.importorskip("kernels")  # HF kernels is the second loader
    import warnings

    from hubkernels.publish import upload

    assert "-cu" in str(ltx_build.variant)
    repo_id = f"hubkernels/ltx-cuda-{uuid.uuid4().hex[:8]}"
    hub.reset_requests()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a work-in-progress checkout is dirty; publishing warns about that
        upload(ROOT, repo_id=repo_id, variants=[str(ltx_build.variant)])
    assert any("/cas/v1/shards" in p for p in paths(hub))
    for loader in ("hubkernels", "kernels"):
        hub.reset_requests()
        out = run_python(
            f"""
            import torch, {loader}
            k = {loader}.get_kernel({repo_id!r}, version=1)
            x, w = torch.randn(3, 17, 256, device="cuda"), torch.randn(256, device="cuda")
            ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
            print(float((k.rms_norm(x, w, 1e-6) - ref).abs().max()))
            """,
            tmp_path / loader,
        )
        assert float(out) < 1e-4 and reconstructions(hub) >= 1, loader
