"""Every input is bounded and typed before it is parsed: a fuzz of names, paths, credentials and bodies with no
server traceback, the memory an unauthenticated request may cost, a body trickled to hold a connection, an LZ4
bomb, an expanded listing of a large tree, and a damaged tokens file.

Before: 158 tracebacks in one robustness run (lone surrogates, non-ASCII Xet tokens, out-of-range floats, a fault
header holding a newline), a 60 MiB anonymous JSON body took the server from 102 MiB to 1.6 GiB, a body trickled
at one byte per interval held its connection forever, a 4.4 MB xorb made the server allocate 1 GiB, and one
anonymous ``tree?recursive&expand`` ran a ``git log`` per file.
"""

from __future__ import annotations

import http.client as http_client
import json
import logging
import os
import random
import re
import select
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from hubfixture import ADMIN_TOKEN, TEST_TOKEN, start_hub
from huggingface_hub import HfApi
from server_helpers import http, raw_exchange, serve_process

ROOT = Path(__file__).resolve().parents[2]


class _Tracebacks(logging.Handler):
    """Counts log records that carry an exception: what uvicorn and starlette log for an unhandled error."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(self.format(record).splitlines()[-1])


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    server = start_hub(tmp_path_factory.mktemp("fuzzed"))
    api = HfApi(endpoint=server.url, token=TEST_TOKEN)
    api.create_repo("org/target", repo_type="kernel")
    api.upload_file(path_or_fileobj=os.urandom(3000), path_in_repo="w.bin", repo_id="org/target", repo_type="kernel")
    handler = _Tracebacks()
    logging.getLogger().addHandler(handler)
    server.tracebacks = handler.records
    yield server
    logging.getLogger().removeHandler(handler)
    server.stop()


_STRANGE = [
    "\ud800",
    "\udfff",
    "a\ud800b",
    "\x00",
    "a\nb",
    "a\rb",
    "é",
    "名前",
    "\u202e",
    "a" * 300,
    "",
    " ",
    "..",
    ".",
    "/",
    "a/../b",
    "%00",
    "%",
    "a%2Fb",
    "\x7f",
    "\t",
    "a b",
    "-a",
    "a--b",
    "1e999",
    "\\",
    "'",
    '"',
    "a.git",
    ".git/config",
    "\ufffe",
    "\U0001f600",
]


def _words(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(_STRANGE)
    if pick < 0.8:
        return "".join(rng.choice(_STRANGE + ["a", "b", "/", "."]) for _ in range(rng.randint(1, 4)))
    return "".join(chr(rng.choice([rng.randint(0, 0x7F), rng.randint(0x80, 0x10FFFF)])) for _ in range(5))


def _json_text(value: object) -> bytes:
    """JSON that may carry lone surrogates (as escapes) and out-of-range numbers, as a hostile client writes it."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).replace('"__BIGFLOAT__"', "1e999").encode()


def _body(rng: random.Random, word: str) -> bytes:
    shapes = [
        {"name": word, "organization": "org", "type": "kernel"},
        {"name": "ok", "organization": word, "private": rng.choice([True, "yes", 1e999, None])},
        {"files": [{"path": word, "size": rng.choice([1, -1, "__BIGFLOAT__", 2**70]), "sample": ""}]},
        {"operation": "upload", "objects": [{"oid": word, "size": "__BIGFLOAT__"}]},
        {"tag": word, "message": word},
        {"startingPoint": word},
        {"visibility": word},
        # fault rules for TRACE only: the rule's own input is fuzzed, it never fires on the fuzz's requests
        {
            "path_regex": word,
            "method": "TRACE",
            "status": rng.choice([418, "__BIGFLOAT__", 99]),
            "headers": {word: word},
        },
        {
            "path_regex": word,
            "method": "TRACE",
            "status": 418,
            "headers": {"X-A": "a\nb" if rng.random() < 0.5 else word},
        },
        [word],
        word,
        "__BIGFLOAT__",
    ]
    body = _json_text(rng.choice(shapes))
    if rng.random() < 0.2:
        body = b"[" * rng.randint(1, 5000) + body
    return body


def _commit_body(rng: random.Random, word: str) -> bytes:
    lines = [
        {"key": "header", "value": {"summary": word, "description": word}},
        {
            "key": rng.choice(["file", "lfsFile", "deletedFile", "deletedFolder", word]),
            "value": {"path": word, "content": "eA==", "oid": word, "size": "__BIGFLOAT__"},
        },
    ]
    return b"\n".join(_json_text(line) for line in lines)


#: RFC 9110's field-value: no control character but HTAB (obs-text, bytes 0x80-0xFF, allowed).
_FIELD_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]*")


def _token(rng: random.Random, word: str) -> str:
    pick = rng.choice(["bearer", "xet", "scheme", "latin"])
    safe = word.encode("latin-1", "replace").decode("latin-1")
    if pick == "bearer":
        return f"Bearer {safe}"
    if pick == "xet":
        return f"Bearer xet_{safe}.{safe}"
    if pick == "scheme":
        return safe
    return "Bearer hf_\xe9\xff" + safe


def test_a_fuzz_of_names_paths_credentials_and_bodies_gives_no_server_traceback(fuzzed, record):
    rng = random.Random(2025)
    url = fuzzed.url
    statuses: dict[int, int] = {}
    cases = resets = 0
    failures = []
    while cases < 2400:
        word = _words(rng)
        quoted = quote(word.encode("utf-8", "surrogatepass"), safe="")
        token = _token(rng, word) if rng.random() < 0.4 else None
        auth = {"Authorization": token} if token else {}
        own = {"Authorization": f"Bearer {TEST_TOKEN}"}
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        json_type = {"Content-Type": "application/json"}
        requests = [
            ("GET", f"/api/kernels/org/{quoted}", auth, None),
            ("GET", f"/api/kernels/{quoted}/x/tree/main/{quoted}?recursive=1&expand=1", auth, None),
            ("GET", f"/kernels/org/target/resolve/{quoted}/{quoted}", auth, None),
            ("HEAD", f"/kernels/org/target/resolve/main/{quoted}", auth, None),
            ("POST", "/api/repos/create", {**json_type, **(auth or own)}, _body(rng, word)),
            ("POST", "/api/kernels/org/target/preupload/main", {**json_type, **(auth or own)}, _body(rng, word)),
            (
                "POST",
                "/api/kernels/org/target/commit/main",
                {"Content-Type": "application/x-ndjson", **(auth or own)},
                _commit_body(rng, word),
            ),
            (
                "POST",
                "/kernels/org/target.git/info/lfs/objects/batch",
                {**json_type, **(auth or own)},
                _body(rng, word),
            ),
            ("POST", "/_hubkernels/faults", {**json_type, **admin}, _body(rng, word)),
            ("POST", f"/api/kernels/org/target/paths-info/{quoted}", auth, f"paths={quoted}&expand=true".encode()),
            ("GET", f"/cas/v2/reconstructions/{quoted}", auth, None),
            ("POST", f"/cas/v1/xorbs/default/{quoted}", auth, os.urandom(64)),
            ("GET", f"/api/kernels/org/target/xet-read-token/{quoted}", auth, None),
        ]
        method, path, headers, body = rng.choice(requests)
        try:
            try:
                status = http(url + path, method, headers, body, timeout=30)[0]
            except ConnectionResetError:  # a refusal racing a client still sending (seen under load): once more
                resets += 1
                status = http(url + path, method, headers, body, timeout=30)[0]
        except (ValueError, UnicodeError) as exc:  # the client refused to send it (a header with a newline ...)
            if isinstance(exc, http_client.HTTPException):
                raise
            continue
        except ConnectionResetError as exc:
            if not all(_FIELD_VALUE.fullmatch(v) for v in headers.values()):  # uvicorn's own 400 for a header
                status = 400  # RFC 9110 forbids (NUL, VT, FF ...), then a close that resets a client still sending
            else:
                status = 0
                failures.append(f"{method} {path[:80]}: {type(exc).__name__}")
        except Exception as exc:  # a dropped connection, a malformed answer: the server failed this case
            status = 0
            failures.append(f"{method} {path[:80]}: {type(exc).__name__}")
        statuses[status] = statuses.get(status, 0) + 1
        if status >= 500 or status == 0:
            failures.append(f"{method} {path[:80]} -> {status}")
        cases += 1
    fuzzed.clear_faults()
    record(
        cases,
        len(failures) + len(fuzzed.tracebacks),
        seed=2025,
        tracebacks=len(fuzzed.tracebacks),
        resets=resets,
        statuses={str(k): v for k, v in sorted(statuses.items())},
    )
    assert fuzzed.tracebacks == []
    assert failures == []
    assert http(f"{url}/api/kernels/org/target")[0] == 200  # and it still answers


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`hubkernels serve --test-mode` in its own process with its default body limits (2 s read timeout)."""
    root = tmp_path_factory.mktemp("served-root")
    proc, url = serve_process(root, "--read-timeout", "2", cwd=ROOT)
    yield proc, url, root
    proc.terminate()
    proc.wait(timeout=20)


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_no_unauthenticated_request_takes_the_server_past_200_mib(served, record):
    proc, url, _ = served
    port = int(url.rsplit(":", 1)[1])
    empties = b"[" + b"{}," * (20 << 20) + b"{}]"  # 60 MiB of empty objects
    answers = []
    for path in (
        "/api/repos/create",
        "/api/kernels/org/x/commit/main",
        "/api/kernels/org/x/preupload/main",
        "/kernels/org/x.git/info/lfs/objects/batch",
        "/api/kernels/org/x/paths-info/main",
        "/cas/v1/shards",
        "/cas/v1/xorbs/default/" + "a" * 64,
    ):
        for auth in (b"", b"Authorization: Bearer not-a-token\r\n"):
            announced = (
                (
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(empties)}\r\n"
                ).encode()
                + auth
                + b"\r\n"
            )
            answers.append(
                raw_exchange(port, announced + empties[: 1 << 20], 59, empties[1 << 20 : 2 << 20], wait_s=1)[:12]
            )
            chunked = f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n".encode() + auth + b"\r\n"
            chunk = b"100000\r\n" + empties[: 1 << 20] + b"\r\n"
            answers.append(raw_exchange(port, chunked, 60, chunk, wait_s=1)[:12])
    peak = _peak_rss_mib(proc.pid)
    record(len(answers), sum(not a.startswith((b"HTTP/1.1 4",)) for a in answers), peak_rss_mib=round(peak, 1))
    assert [(i, a) for i, a in enumerate(answers) if not a.startswith(b"HTTP/1.1 4")] == []
    assert peak < 200, f"the server peaked at {peak:.0f} MiB"


def test_a_body_trickled_one_byte_at_a_time_is_dropped_by_a_total_deadline(served, record):
    _, url, _ = served
    port = int(url.rsplit(":", 1)[1])
    start = time.monotonic()
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        while time.monotonic() - start < 20:  # one byte every 0.5 s: each well within the 2 s read timeout
            try:
                s.sendall(b" ")
            except OSError:
                break
            ready, _, _ = select.select([s], [], [], 0.5)
            if ready:
                answer = s.recv(4096)
                break
    elapsed = time.monotonic() - start
    record(1, int(not answer.startswith(b"HTTP/1.1 408")), dropped_after_s=round(elapsed, 2))
    assert answer.startswith(b"HTTP/1.1 408") and elapsed < 6


def test_an_lz4_bomb_xorb_is_refused_without_allocating_its_claim(served, record):
    import lz4.frame

    from hubkernels.server.xet import format as fmt

    proc, url, root = served
    token = subprocess.run(
        [
            sys.executable,
            "-m",
            "hubkernels",
            "serve",
            "token",
            "create",
            "--user",
            "bomber",
            "--write",
            "--root",
            str(root),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    ).stdout.strip()
    HfApi(endpoint=url, token=token).create_repo("bomber/x", repo_type="kernel")
    xet = json.loads(http(f"{url}/api/kernels/bomber/x/xet-write-token/main", token=token)[2])
    bomb = lz4.frame.compress(bytes(256 << 20))  # 256 MiB of zeros in ~1 MB, its chunk header claiming 64 KiB
    chunk = bytes([0]) + len(bomb).to_bytes(3, "little") + bytes([1]) + (64 << 10).to_bytes(3, "little") + bomb
    assert len(bomb) < (1 << 24)
    before = _peak_rss_mib(proc.pid)
    status, _, body = http(f"{xet['casUrl']}/v1/xorbs/default/{'0' * 64}", "POST", body=chunk, token=xet["accessToken"])
    grown = _peak_rss_mib(proc.pid) - before
    record(1, int(status != 400), bomb_bytes=len(chunk), peak_growth_mib=round(grown, 1))
    assert status == 400 and b"decompressed" in body
    assert grown < 100, f"the server's peak grew by {grown:.0f} MiB"
    assert fmt.MAX_XORB_BYTES > 67_117_208  # the largest xorb hf_xet was seen to send fits


def test_an_expanded_listing_of_a_large_tree_costs_one_history_walk(fuzzed, record):
    api = HfApi(endpoint=fuzzed.url, token=TEST_TOKEN)
    repo_id = f"org/wide-{uuid.uuid4().hex[:8]}"
    api.create_repo(repo_id, repo_type="kernel")
    from huggingface_hub import CommitOperationAdd

    api.create_commit(
        repo_id,
        [CommitOperationAdd(f"d{i % 20}/f{i}.txt", str(i).encode()) for i in range(2000)],
        commit_message="wide",
        repo_type="kernel",
    )
    api.create_commit(
        repo_id, [CommitOperationAdd("d3/f3.txt", b"changed")], commit_message="one more", repo_type="kernel"
    )
    start = time.monotonic()
    status, _, body = http(f"{fuzzed.url}/api/kernels/{repo_id}/tree/main?recursive=true&expand=true")
    elapsed = time.monotonic() - start
    entries = {e["path"]: e for e in json.loads(body)}
    record(1, int(elapsed > 3), files=2000, elapsed_s=round(elapsed, 3))
    assert status == 200 and len(entries) >= 2020
    assert entries["d3/f3.txt"]["lastCommit"]["title"] == "one more"
    assert entries["d3"]["lastCommit"]["title"] == "one more"
    assert entries["d4/f4.txt"]["lastCommit"]["title"] == "wide"
    assert elapsed < 3, f"an expanded listing of 2,000 files took {elapsed:.1f} s"


def test_a_damaged_tokens_file_gives_one_line_in_serve_token(tmp_path, record):
    outputs = []
    for text in ('{"tokens": [{"id": 1}]}', '{"users": [1, 2]}', "[1]", '{"tokens": 5}', "\xff{", "{" * 100_000):
        (tmp_path / "tokens.json").write_text(text, encoding="latin-1")
        out = subprocess.run(
            [sys.executable, "-m", "hubkernels", "serve", "token", "list", "--root", str(tmp_path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        outputs.append((out.returncode, out.stderr.strip()))
    bad = [o for o in outputs if o[0] != 2 or "\n" in o[1] or "Traceback" in o[1]]
    record(len(outputs), len(bad))
    assert bad == [] and all("tokens.json" in err for _, err in outputs)


def test_the_lfs_pointer_cache_stays_within_its_bound_and_lfs_files_stay_lfs(tmp_path, monkeypatch, record):
    """Listing a tree reads which small blobs are LFS pointers once and keeps the answers in a bounded cache: 300
    small files through a 50-entry cache leave 50 answers, and the listing stays right when they are read again."""
    import hashlib

    from huggingface_hub import CommitOperationAdd

    from hubkernels.server.storage import store

    monkeypatch.setattr(store, "POINTER_CACHE_ENTRIES", 50)
    server = start_hub(tmp_path / "hub")
    try:
        api = HfApi(endpoint=server.url, token=TEST_TOKEN)
        api.create_repo("org/many-small", repo_type="kernel")
        big = os.urandom(3000)
        ops = [CommitOperationAdd(f"f{i}.txt", f"small {i}".encode()) for i in range(300)]
        api.create_commit(
            "org/many-small", [*ops, CommitOperationAdd("w.bin", big)], commit_message="m", repo_type="kernel"
        )
        listings = []
        for _ in range(2):
            status, _, body = http(f"{server.url}/api/kernels/org/many-small/tree/main?recursive=true")
            assert status == 200
            listings.append({e["path"]: (e.get("lfs") or {}).get("oid") for e in json.loads(body)})
        cached = len(server.app.state.hub.storage._pointer_cache._data)
    finally:
        server.stop()
    want = {f"f{i}.txt": None for i in range(300)} | {"w.bin": hashlib.sha256(big).hexdigest()}
    wrong = sum(listing.get(p, "missing") != v for listing in listings for p, v in want.items())
    record(2, wrong + int(cached > 50), small_files=300, bound=50, cached=cached)
    assert cached <= 50, cached
    assert wrong == 0, [{p: listing.get(p) for p in ("f0.txt", "w.bin")} for listing in listings]
