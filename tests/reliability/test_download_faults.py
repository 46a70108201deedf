"""A fault on any one request of a cold load ends, within a deadline, in a verified load or a typed error that
says what to do: on the artifact path (refs, org overview, `wheels/` listing, Xet token, reconstruction, xorb
range), on the file-by-file path of a kernel-builder repo (its `build/` listing), and on its plain-HTTP file GETs.
Each fault hits every matching request of the first load; once it is cleared, a second load in the same process
and cache completes, so nothing the fault left behind is used.

Before (commit 74887ab's loader, a 60 s deadline): 25 of these 39 cases failed, 8 untyped errors
(JSONDecodeError, KeyError... on garbage or misshapen 200 answers) and 17 loads still running after 60 s (no
timeout on API calls, hf_xet's 120 s read timeout and 6 min of retries, a trickle resetting every read timeout).

Each load runs in a process forked from a server that already imported torch, so a hang is timed out and killed.
The loader's limits are set short here (HUBKERNELS_FAULT_HUB_DEADLINE, HUBKERNELS_FAULT_READ_TIMEOUT) so the
matrix runs in a couple of minutes; `test_a_stalled_xorb_range_with_the_default_limits_ends_within_60_s` uses the
loader's defaults.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from pathlib import Path

import pytest
from helpers import make_kernel, new_repo, without_artifacts

DEADLINE_S = float(os.environ.get("HUBKERNELS_FAULT_DEADLINE_S", "60"))
#: The loader's limits in this file's matrix (short, so it runs quickly); the default-limits test unsets them.
SHORT_LIMITS = {
    "HUBKERNELS_HUB_DEADLINE": os.environ.get("HUBKERNELS_FAULT_HUB_DEADLINE", "3"),
    "HF_HUB_DOWNLOAD_TIMEOUT": os.environ.get("HUBKERNELS_FAULT_READ_TIMEOUT", "1"),
}
#: What a typed error's message must offer the user (one of them).
ADVICE = ("try again", "retry", "HF_ENDPOINT", "force_download", "--force", "HF_HUB_OFFLINE", "trust_remote_code")

GARBAGE = "<html><body>502 Bad Gateway</body></html>"
JSON_FAULTS = {
    "503": dict(status=503),
    "garbage 200": dict(body=GARBAGE),
    "wrong json 200": dict(body='{"items": 7, "branches": null, "casUrl": 1, "terms": "x"}'),
    "stall before headers": dict(delay_s=300),
    "trickle": dict(trickle_s=1.0),
    "short content-length": dict(headers={"Content-Length": "5"}),
}
LISTING_FAULTS = [f for f in JSON_FAULTS if f != "short content-length"]
BODY_FAULTS = {
    "503": dict(status=503),
    "garbage 200": dict(body=GARBAGE),
    "cut mid-body": dict(truncate_after=40),
    "stall mid-body": dict(stall_after=40, stall_s=300),
    "trickle": dict(trickle_s=1.0),
    "short content-length": dict(headers={"Content-Length": "5"}),
}
#: (path, request: pattern with {repo} for the kernel's repo id, GET only, faults); paths: "artifact" is a repo
#: published by `hubkernels upload`, "file by file" one without wheels/ (as kernel-builder publishes).
REQUESTS = {
    "refs": ("artifact", r"^/api/kernels/{repo}/refs$", JSON_FAULTS),
    "org overview": (
        "artifact",
        r"^/api/organizations/[^/]+/overview$",
        ["503", "garbage 200", "stall before headers"],
    ),
    "wheels listing": ("artifact", r"^/api/kernels/{repo}/tree/[0-9a-f]{{40}}/wheels", LISTING_FAULTS),
    "xet token": ("artifact", r"^/api/kernels/{repo}/xet-read-token/", LISTING_FAULTS),
    "reconstruction": ("artifact", r"^/cas/v\d/reconstructions/", LISTING_FAULTS),
    "xorb range": ("artifact", r"^/cas/v1/xorb-data/", [f for f in BODY_FAULTS if f != "garbage 200"]),
    "build listing": (
        "file by file",
        r"^/api/kernels/{repo}/tree/[0-9a-f]{{40}}/build",
        ["garbage 200", "stall before headers"],
    ),
    "plain http file": ("file by file", r"/{repo}/resolve/[0-9a-f]{{40}}/build/torch-cpu/(.+/)?_ops\.py$", BODY_FAULTS),
    "xet file": ("file by file", r"^/cas/v1/xorb-data/", ["stall mid-body"]),
}
CASES = [
    pytest.param(request, fault, id=f"{request}-{fault}")
    for request, (_, _, faults) in REQUESTS.items()
    for fault in faults
]


@pytest.fixture(scope="module")
def kernels(hub, tmp_path_factory) -> dict[str, str]:
    """{path: repo id}: tiny-act (VALUE 5, with a table.py over the hub's 1 KiB Xet threshold) published twice."""
    out = {}
    for path in ("artifact", "file by file"):
        repo_id = new_repo()
        root = make_kernel(
            tmp_path_factory.mktemp("k") / "k",
            value=5,
            extra_files={"table.py": "TABLE = " + repr(list(range(400))) + "\n"},
        )
        from hubkernels.publish import upload

        upload(root, repo_id=repo_id)
        if path == "file by file":
            without_artifacts(repo_id)
        out[path] = repo_id
    return out


@pytest.fixture(scope="module")
def forkserver():
    """A multiprocessing context whose processes fork from a server that imported torch (a load starts fast)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch"])
    return ctx


def _attempt(repo_id: str, cache: str) -> dict:
    import hubkernels

    start = time.monotonic()
    try:
        module = hubkernels.get_kernel(repo_id, version=1, cache_dir=cache)
        return {"outcome": "loaded" if module.VALUE == 5 else "wrong module", "s": time.monotonic() - start}
    except hubkernels.HubkernelsError as e:
        return {"outcome": "typed", "type": type(e).__name__, "message": str(e), "s": time.monotonic() - start}
    except BaseException as e:  # noqa: BLE001  (what the test is about: anything untyped is a failure)
        return {
            "outcome": "untyped",
            "type": type(e).__name__,
            "message": str(e)[:500],
            "where": traceback.format_exc()[-1500:],
            "s": time.monotonic() - start,
        }


def _calls_running() -> int:
    import threading

    return sum(t.name == "hubkernels-hub-call" and t.is_alive() for t in threading.enumerate())


def _two_loads(repo_id: str, cache: str, env: dict, conn) -> None:  # type: ignore[no-untyped-def]
    """In the forked process: a load under the fault, then (once the parent cleared it) another."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    first = _attempt(repo_id, cache)
    deadline = time.monotonic() + 5  # a call given up on must not go on downloading in the background
    while time.monotonic() < deadline and _calls_running():
        time.sleep(0.1)
    conn.send(first | {"lingering": _calls_running()})
    conn.recv()
    os.environ.pop("HUBKERNELS_HUB_DEADLINE", None)  # the second load has the default deadline (a loaded machine)
    conn.send(_attempt(repo_id, cache))


def _run(ctx, hub, repo_id: str, cache: Path, env: dict, fault: tuple[str, dict]) -> tuple[dict, dict]:
    """(first, second) outcomes: the first load under `fault`, the second after it is cleared."""
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_two_loads, args=(repo_id, str(cache), env, child), daemon=True)
    hub.add_fault(fault[0], method="GET", times=None, **fault[1])
    try:
        proc.start()
        first = parent.recv() if parent.poll(DEADLINE_S) else {"outcome": "hang", "s": DEADLINE_S}
    finally:
        hub.clear_faults()
    second = {"outcome": "not run"}
    if first["outcome"] != "hang":
        parent.send("again")
        second = parent.recv() if parent.poll(DEADLINE_S) else {"outcome": "hang", "s": DEADLINE_S}
    proc.kill()
    proc.join(10)
    return first, second


def _verdict(first: dict, second: dict, leftovers: list[str]) -> list[str]:
    """What went wrong (empty: the case passes)."""
    wrong = []
    if first["outcome"] == "typed":
        if not any(a.lower() in first["message"].lower() for a in ADVICE):
            wrong.append(f"{first['type']} says nothing to do: {first['message'][:200]}")
    elif first["outcome"] != "loaded":
        wrong.append(f"first load: {first}")
    if first["outcome"] != "hang" and first["s"] > DEADLINE_S:
        wrong.append(f"first load took {first['s']:.1f} s")
    if first.get("lingering"):
        wrong.append(f"{first['lingering']} Hub calls still running 5 s after the load gave up on them")
    if second["outcome"] != "loaded":
        wrong.append(f"the load after the fault cleared: {second}")
    if leftovers:
        wrong.append(f"left behind: {leftovers}")
    return wrong


@pytest.mark.parametrize(("request_name", "fault"), CASES)
def test_a_fault_on_any_request_of_a_cold_load_ends_in_time_typed_or_loaded(
    hub, kernels, forkserver, tmp_path, request_name, fault, record
) -> None:
    path, pattern, faults = REQUESTS[request_name]
    rule = (JSON_FAULTS | BODY_FAULTS)[fault]
    repo_id = kernels[path]
    cache = tmp_path / "cache"
    first, second = _run(forkserver, hub, repo_id, cache, SHORT_LIMITS, (pattern.format(repo=repo_id), rule))
    leftovers = [str(p.relative_to(cache)) for p in cache.rglob("*") if p.suffix in (".partial", ".incomplete")]
    wrong = _verdict(first, second, leftovers)
    record(
        1,
        int(bool(wrong)),
        path=path,
        request=request_name,
        fault=fault,
        outcome=first["outcome"] if first["outcome"] != "typed" else first["type"],
        first_load_s=round(first.get("s", DEADLINE_S), 1),
    )
    assert not wrong, wrong


def test_a_stalled_xorb_range_with_the_default_limits_ends_within_60_s(hub, kernels, forkserver, tmp_path, record):
    """The loader's own defaults (no HUBKERNELS_HUB_DEADLINE, HF_HUB_DOWNLOAD_TIMEOUT or HF_XET_* set) bound a
    download whose every xorb range stalls mid-body."""
    env = {k: None for k in SHORT_LIMITS} | {k: None for k in os.environ if k.startswith("HF_XET_CLIENT_")}
    cache = tmp_path / "cache"
    rule = (r"^/cas/v1/xorb-data/", BODY_FAULTS["stall mid-body"])
    first, second = _run(forkserver, hub, kernels["artifact"], cache, env, rule)
    wrong = _verdict(first, second, [])
    record(1, int(bool(wrong)), outcome=first.get("type", first["outcome"]), first_load_s=round(first["s"], 1))
    assert not wrong, wrong
