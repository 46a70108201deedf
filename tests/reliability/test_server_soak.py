"""A short soak of `hubkernels serve` in its own process, and its token command line.

The soak runs a few hundred loads and commits (bounded loops, loopback only) and compares the server's resident
memory and open file descriptors before and after; figures go to the reliability log.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import HfHubHTTPError
from server_helpers import http, proc_figures

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "hubkernels", "serve"]
COMMITS, LOADS = 60, 140


def _token(root: Path, *args: str, command: list[str] = SERVER) -> str:
    done = subprocess.run(
        [*command, "token", "create", "--root", str(root), *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


def _start(root: Path, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [*SERVER, "--root", str(root), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "the hub printed nothing within 60 s"
    return proc, proc.stdout.readline().split()[3]


def test_soak_loads_and_commits_leave_memory_and_descriptors_flat(tmp_path, record):
    token = _token(tmp_path / "root", "--user", "soak", "--org", "org", "--write")
    proc, url = _start(tmp_path / "root")
    try:
        api = HfApi(endpoint=url, token=token)
        api.create_repo("org/soak", repo_type="kernel")
        api.upload_file(
            path_or_fileobj=b"\x7fELF" + bytes(5000), path_in_repo="build/k.so", repo_id="org/soak", repo_type="kernel"
        )
        for i in range(5):  # warm up: first git calls, imports, caches
            hf_hub_download(
                "org/soak", "build/k.so", repo_type="kernel", endpoint=url, cache_dir=tmp_path / f"w{i}", token=token
            )
        before = proc_figures(proc.pid)
        start = time.monotonic()
        failures = 0
        for i in range(COMMITS):
            try:
                api.create_commit(
                    "org/soak",
                    [CommitOperationAdd(f"build/f{i % 7}.py", f"V = {i}\n".encode())],
                    commit_message=f"soak {i}",
                    repo_type="kernel",
                )
            except HfHubHTTPError:
                failures += 1
        commits_s = time.monotonic() - start
        for i in range(LOADS):
            cache = tmp_path / "loads" / str(i % 20)
            try:
                if i % 4 == 0:
                    snapshot_download("org/soak", repo_type="kernel", endpoint=url, cache_dir=cache, token=token)
                else:
                    hf_hub_download(
                        "org/soak",
                        "build/k.so",
                        repo_type="kernel",
                        endpoint=url,
                        cache_dir=cache,
                        force_download=True,
                        token=token,
                    )
            except HfHubHTTPError:
                failures += 1
        elapsed = time.monotonic() - start
        after = proc_figures(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    record(
        COMMITS + LOADS,
        failures,
        rss_before_kib=before["rss_kib"],
        rss_after_kib=after["rss_kib"],
        fds_before=before["fds"],
        fds_after=after["fds"],
        elapsed_s=round(elapsed, 1),
        commits_s=round(commits_s, 1),
    )
    assert failures == 0
    assert after["fds"] <= before["fds"] + 4, (before, after)
    assert after["rss_kib"] - before["rss_kib"] < 40 * 1024, (before, after)


def test_token_cli_creates_lists_and_revokes_and_the_server_follows(tmp_path, record):
    root = tmp_path / "root"
    token = _token(
        root,
        "--user",
        "alice",
        "--org",
        "acme",
        "--org",
        "tools",
        "--write",
        command=[sys.executable, "-m", "hubkernels", "serve"],
    )
    reader = _token(root, "--user", "bob", "--org", "acme")
    racing = [
        subprocess.Popen(
            [*SERVER, "token", "create", "--root", str(root), "--user", f"racer{i}"], stdout=subprocess.PIPE, cwd=ROOT
        )
        for i in range(3)
    ]
    for p in racing:
        p.communicate(timeout=120)
    assert [p.returncode for p in racing] == [0] * 3  # three writers at once: none is lost (checked below)
    stored = (root / "tokens.json").read_text()
    assert token not in stored and reader not in stored and token.startswith("hf_")
    listed = json.loads(
        subprocess.run(
            [*SERVER, "token", "list", "--json", "--root", str(root)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        ).stdout
    )
    assert [(t["user"], t["role"], t["orgs"]) for t in listed][:2] == [
        ("alice", "write", ["acme", "tools"]),
        ("bob", "read", ["acme"]),
    ]
    assert sorted(t["user"] for t in listed[2:]) == [f"racer{i}" for i in range(3)]
    proc, url = _start(root)
    try:
        assert json.loads(http(f"{url}/api/whoami-v2", token=token)[2])["name"] == "alice"
        HfApi(endpoint=url, token=token).create_repo("acme/tool", repo_type="kernel")
        revoked = subprocess.run(
            [*SERVER, "token", "revoke", listed[0]["id"], "--root", str(root)], cwd=ROOT, timeout=60
        )
        assert revoked.returncode == 0
        after_revoke = http(f"{url}/api/whoami-v2", token=token)[0]  # the running server sees the change
        unknown = subprocess.run(
            [*SERVER, "token", "revoke", "nope", "--root", str(root)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    record(8)
    assert after_revoke == 401
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1


def test_serving_beyond_loopback_without_a_token_is_refused_in_one_line(tmp_path, record):
    done = subprocess.run(
        [*SERVER, "--host", "0.0.0.0", "--port", "0", "--root", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    record(1)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "token create" in done.stderr
