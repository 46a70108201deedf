"""Requests that must not hurt the hub, or any request after them: bad bodies, deep and odd paths, huge and
unfinished bodies, NUL bytes, a backtracking fault pattern. On commit b50b33f these gave 500s, dropped
connections, unbounded memory, endless waits, or broke every later listing of the repo."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hubfixture import ADMIN_TOKEN, TEST_TOKEN, start_hub
from huggingface_hub import HfApi
from server_helpers import http, ndjson, post_json, proc_figures, raw_exchange, serve_process

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    from hubkernels.server import Limits

    server = start_hub(tmp_path_factory.mktemp("limited"), limits=Limits(max_body_bytes=1 << 20, read_timeout_s=1.0))
    HfApi(endpoint=server.url, token=TEST_TOKEN).create_repo("org/target", repo_type="kernel")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def hub_process(tmp_path_factory):
    """`hubkernels serve --test-mode` in its own process (1 MiB bodies, 1 s read timeout), and its pid."""
    root = tmp_path_factory.mktemp("process-root")
    proc, url = serve_process(root, "--max-body-mb", "1", "--read-timeout", "1", cwd=ROOT)
    token = json.loads(
        subprocess.run(
            [sys.executable, "-m", "hubkernels", "serve", "token", "list", "--json", "--root", str(root)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout
    )
    assert len(token) == 1
    yield proc, url, root
    proc.terminate()
    proc.wait(timeout=20)


def test_bodies_that_are_not_json_objects_get_400(limited, record):
    api = f"{limited.url}/api/kernels/org/target"
    create, batch = f"{limited.url}/api/repos/create", f"{limited.url}/kernels/org/target.git/info/lfs/objects/batch"
    cases = [
        (create, "POST"),
        (f"{api}/preupload/main", "POST"),
        (f"{api}/branch/x", "POST"),
        (f"{api}/tag/main", "POST"),
        (f"{api}/settings", "PUT"),
        (batch, "POST"),
        (f"{limited.url}/api/repos/delete", "DELETE"),
    ]
    not_objects = [b"[]", b'"a"', b"123", b"null", b"{", b"[" * 100_000]
    answers = [post_json(url, body, TEST_TOKEN, method)[0] for url, method in cases for body in not_objects]
    wrong_types = [
        (create, b'{"name": 5, "organization": "org"}'),
        (create, b'{"name": "n", "private": "yes"}'),
        (f"{api}/preupload/main", b'{"files": [1]}'),
        (f"{api}/preupload/main", b'{"files": "a"}'),
        (f"{api}/preupload/main", b'{"files": [{"path": "a", "size": "big"}]}'),
        (f"{api}/tag/main", b'{"tag": ["x"]}'),
        (f"{api}/branch/y", b'{"startingPoint": 3}'),
        (batch, b'{"operation": "upload", "objects": "x"}'),
    ]
    answers += [post_json(url, body, TEST_TOKEN)[0] for url, body in wrong_types]
    commit_bodies = [
        b"[]",
        b"1",
        b'{"key": "file", "value": {"path": 3, "content": "eA=="}}',
        b'{"key": "file", "value": {"path": "a", "content": 5}}',
        b'{"key": "lfsFile", "value": {"path": "a", "oid": "x", "size": "big"}}',
        b'{"key": "header", "value": {"summary": []}}',
    ]
    answers += [
        http(f"{api}/commit/main", "POST", {"Content-Type": "application/x-ndjson"}, b, TEST_TOKEN)[0]
        for b in commit_bodies
    ]
    wrong = [a for a in answers if a != 400]
    record(len(answers), len(wrong))
    assert wrong == []
    assert HfApi(endpoint=limited.url).list_repo_files("org/target", repo_type="kernel") == [".gitattributes"]


def test_a_path_1000_directories_deep_is_refused_at_commit_and_the_repo_keeps_loading(hub, tmp_path, record):
    from helpers import make_kernel

    import hubkernels
    from hubkernels.publish import upload

    repo_id = f"hubkernels/deep-{uuid.uuid4().hex[:8]}"
    upload(make_kernel(tmp_path / "k"), repo_id=repo_id)
    refused = []
    for path in ("d/" * 1000 + "f.py", "d/" * 70 + "f.py", "x" * 2000, "build/a\nb.py", "build/a\rb", "a\x00b"):
        body = ndjson(
            {"key": "header", "value": {"summary": "deep"}},
            {"key": "file", "value": {"path": path, "content": base64.b64encode(b"x").decode(), "encoding": "base64"}},
        )
        status, _, answer = http(
            f"{hub.url}/api/kernels/{repo_id}/commit/v1",
            "POST",
            {"Content-Type": "application/x-ndjson"},
            body,
            TEST_TOKEN,
        )
        refused.append(status)
    api = HfApi()
    files = api.list_repo_files(repo_id, repo_type="kernel", revision="v1")
    kernel = hubkernels.get_kernel(repo_id, version=1, cache_dir=tmp_path / "cache")
    record(len(refused) + 2, sum(s != 400 for s in refused))
    assert refused == [400] * 6
    assert all(f.count("/") < 10 for f in files) and kernel.VALUE == 1


def test_nul_in_a_repo_name_and_newline_in_a_path_get_400_answers(limited, record):
    answers = {
        "NUL in repo info": http(f"{limited.url}/api/kernels/org/ta%00rget")[0],
        "NUL in resolve": http(f"{limited.url}/kernels/org/ta%00rget/resolve/main/x")[0],
        "NUL in create": post_json(
            f"{limited.url}/api/repos/create", {"type": "kernel", "name": "a\x00b", "organization": "org"}, TEST_TOKEN
        )[0],
        "newline in preupload": post_json(
            f"{limited.url}/api/kernels/org/target/preupload/main",
            {"files": [{"path": "a\nb", "size": 1, "sample": ""}]},
            TEST_TOKEN,
        )[0],
        "newline in tree path": http(f"{limited.url}/api/kernels/org/target/tree/main/a%0Ab")[0],
    }
    record(len(answers), sum(s not in (400, 404) for s in answers.values()))
    assert answers == {
        "NUL in repo info": 400,
        "NUL in resolve": 400,
        "NUL in create": 400,
        "newline in preupload": 400,
        "newline in tree path": 404,
    }


def test_a_backtracking_fault_pattern_cannot_stall_other_requests(limited, record):
    status, _, _ = post_json(
        f"{limited.url}/_hubkernels/faults", {"path_regex": "(a|aa)+$", "status": 500}, ADMIN_TOKEN
    )
    assert status == 200
    assert (
        post_json(f"{limited.url}/_hubkernels/faults", {"path_regex": "a" * 300, "status": 500}, ADMIN_TOKEN)[0] == 400
    )
    start = time.monotonic()
    statuses = [http(f"{limited.url}/api/kernels/org/{'a' * 40}!")[0] for _ in range(20)]
    elapsed = time.monotonic() - start
    record(22, 0, elapsed_s=round(elapsed, 3))
    assert statuses == [404] * 20 and elapsed < 5 and limited.control.faults() == []


def test_a_body_over_the_limit_gets_413_without_the_server_growing(hub_process, record):
    proc, url, _ = hub_process
    port = int(url.rsplit(":", 1)[1])
    before = proc_figures(proc.pid)
    announced = raw_exchange(
        port,
        b"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 314572800\r\n\r\n",
        300,
        b"x" * (1 << 20),
    )
    chunked_head = b"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"100000\r\n" + b"x" * (1 << 20) + b"\r\n"
    streamed = raw_exchange(port, chunked_head, 100, chunk)
    lfs_over = raw_exchange(
        port,
        b"PUT /kernels/org/x.git/info/lfs/objects/" + b"a" * 64 + b"/10 HTTP/1.1\r\n"
        b"Host: x\r\nContent-Length: 104857600\r\n\r\n",
        100,
        b"x" * (1 << 20),
    )
    after = proc_figures(proc.pid)
    grown_mib = (after["rss_kib"] - before["rss_kib"]) / 1024
    record(3, 0, rss_before_kib=before["rss_kib"], rss_after_kib=after["rss_kib"], sent_mib=500)
    assert announced.startswith(b"HTTP/1.1 413") and streamed.startswith(b"HTTP/1.1 413")
    assert lfs_over.startswith(b"HTTP/1.1 413")
    assert grown_mib < 40, f"the server grew by {grown_mib:.0f} MiB"
    assert http(f"{url}/api/kernels/org/nothing")[0] == 404  # and it still answers


def test_a_client_that_never_finishes_its_request_is_dropped(hub_process, record):
    proc, url, _ = hub_process
    port = int(url.rsplit(":", 1)[1])
    fds = proc_figures(proc.pid)["fds"]
    timings = {}
    for name, head in (
        ("headers", b"GET /api/kernels/org/x HTTP/1.1\r\nHost: x\r\nX-Slow: "),
        ("body", b"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"),
    ):
        start = time.monotonic()
        answer = raw_exchange(port, head, wait_s=15)
        timings[name] = (round(time.monotonic() - start, 2), answer[:12])
    record(len(timings), 0, **{f"{k}_dropped_after_s": v[0] for k, v in timings.items()})
    assert timings["headers"][0] < 10 and timings["headers"][1] == b""
    assert timings["body"][0] < 10 and timings["body"][1] == b"HTTP/1.1 408"
    assert proc_figures(proc.pid)["fds"] <= fds + 1


def test_a_slow_reader_of_a_long_download_is_not_cut_off_by_the_read_timeout(limited, tmp_path, record):
    big = bytes(range(256)) * (64 << 10)  # 16 MiB: more than the socket buffers hold
    HfApi(endpoint=limited.url, token=TEST_TOKEN).upload_file(
        path_or_fileobj=big, path_in_repo="big.bin", repo_id="org/target", repo_type="kernel"
    )
    port = int(limited.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"GET /kernels/org/target/resolve/main/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = s.recv(65536)
        time.sleep(2.5)  # longer than the hub's 1 s read timeout, while its answer waits on us
        while chunk := s.recv(1 << 20):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    record(1, int(body != big), pause_s=2.5, read_timeout_s=1.0)
    assert head.startswith(b"HTTP/1.1 200") and body == big


def test_the_download_faults_do_what_they_say(limited, record):
    """The faults test_download_faults injects: a garbage 200, a Content-Length shorter than the body, a body that
    stalls after 10 bytes with the connection open, and one trickled 16 bytes at a time."""
    from http.client import HTTPConnection

    refs = "/api/kernels/org/target/refs"
    status, _, full = http(limited.url + refs)
    assert status == 200 and len(full) > 40
    seen = {}
    limited.add_fault(r"/refs$", body="<html>garbage")
    seen["garbage 200"] = http(limited.url + refs)[::2] == (200, b"<html>garbage")
    limited.add_fault(r"/refs$", headers={"Content-Length": "5"})
    seen["short content-length"] = http(limited.url + refs)[2] == full[:5]
    limited.add_fault(r"/refs$", stall_after=10, stall_s=5)
    conn = HTTPConnection("127.0.0.1", limited.port, timeout=1.5)
    conn.request("GET", refs)
    response = conn.getresponse()
    head = response.read(10)
    try:
        response.read(1)
        stalled = False
    except TimeoutError:
        stalled = True
    conn.close()
    seen["stall mid-body"] = head == full[:10] and stalled
    limited.add_fault(r"/refs$", trickle_s=0.1)
    start = time.monotonic()
    body = http(limited.url + refs)[2]
    seen["trickle"] = body == full and time.monotonic() - start >= 0.1 * (len(full) // 16 - 1)
    limited.clear_faults()
    record(len(seen), sum(not ok for ok in seen.values()))
    assert all(seen.values()), seen
