"""Plain-HTTP helpers for the server attack tests: requests with chosen headers, raw sockets, process figures."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def http(
    url: str,
    method: str = "GET",
    headers: dict | None = None,
    body: bytes | None = None,
    token: str | None = None,
    timeout: float = 20,
) -> tuple[int, Any, bytes]:
    """(status, headers, body) of one request, errors included; ``token`` adds ``Authorization: Bearer``."""
    headers = dict(headers or {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, method=method, headers=headers, data=body)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def post_json(url: str, payload: Any, token: str | None = None, method: str = "POST") -> tuple[int, Any, bytes]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return http(url, method, {"Content-Type": "application/json"}, data, token)


def ndjson(*lines: dict) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


def raw_exchange(port: int, head: bytes, body_chunks: int = 0, chunk: bytes = b"", wait_s: float = 10.0) -> bytes:
    """Send ``head`` then up to ``body_chunks`` copies of ``chunk`` on a fresh connection (stopping when the
    server closes), and return what the server answered (b"" when it closed without an answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(head)
        try:
            for _ in range(body_chunks):
                s.sendall(chunk)
        except OSError:  # the server answered and closed while we were still sending: what we want to read
            pass
        s.settimeout(wait_s)
        out = b""
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                out += data
                if b"\r\n\r\n" in out and len(out) > 4096:
                    break
        except (socket.timeout, ConnectionResetError):
            pass
        return out


def proc_figures(pid: int) -> dict[str, int]:
    """Resident memory (KiB) and open file descriptors of a process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return {"rss_kib": rss, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def serve_process(root: Path, *options: str, cwd: Path) -> tuple[subprocess.Popen, str]:
    """`hubkernels serve --test-mode` over `root` in its own process, after creating a write token of `local-user`
    in `org`; returns the process and its URL once it printed it. `options` are serve's own flags."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "hubkernels",
            "serve",
            "token",
            "create",
            "--user",
            "local-user",
            "--org",
            "org",
            "--write",
            "--root",
            str(root),
        ],
        check=True,
        capture_output=True,
        cwd=cwd,
        timeout=60,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "hubkernels", "serve", "--root", str(root), *options, "--test-mode"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "the hub printed nothing within 60 s"
    return proc, proc.stdout.readline().split()[3]
