"""The Xet storage protocol of the local hub: what ``huggingface_hub`` + ``hf_xet`` speak for large files.

Tokens: ``GET /api/{t}/{org}/{name}/xet-{read,write}-token/{rev}`` answers ``{"accessToken", "exp", "casUrl"}``
(and the same in ``X-Xet-Access-Token`` / ``X-Xet-Token-Expiration`` / ``X-Xet-Cas-Url``). A token names its repo,
scope, expiry and the hub token it was issued to, and is HMAC-signed with a per-server secret; every CAS call
re-checks that hub token's access to the repo as it is now (revocation and visibility changes apply at once).
CAS (under ``{hub}/cas``): ``POST /v1/xorbs/default/{hash}`` stores a verified xorb, ``POST /v1/shards`` registers
the files a shard describes (each term checked against the stored xorbs, with its verification hash, the
file hash recomputed, and its claimed sha256 checked on the rebuilt bytes before anything points at them);
``GET /v1|v2/reconstructions/{file}`` tells a downloader which chunk ranges to fetch from signed
``/v1/xorb-data/{hash}`` URLs. ``GET /v1/chunks/...`` (global dedup) always answers 404: nothing is shared.

The git repos stay the source of truth: a commit's ``lfsFile`` names the sha256 the shard recorded (the shard
rebuilt the file into the LFS store) and git keeps an ordinary LFS pointer, so plain
downloads still work; resolve answers for such files add ``X-Xet-Hash`` and ``Link: <read-token>; rel="xet-auth"``.
"""

from __future__ import annotations

import hmac
import time
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..common import check_write, credential_digest, identity_of, namespace, readable, writable
from ..storage import Entry, HubError, Repo, Storage
from . import format as fmt
from .store import CAS_PREFIX, XetStore


def xet_routes(api_repo: Callable[[Request], Repo]) -> list[Route]:
    """The token routes (``api_repo`` finds the repo of an ``/api/{t}/{org}/{name}/...`` URL) and the CAS API."""

    def token(scope: str) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            repo = api_repo(request)
            if scope == "write":
                writable(request, repo, "upload to this repository")
            else:
                readable(request, repo)
            rev = request.path_params["rev"]
            if rev != "None":  # the client sends "None" when it commits to a pull request it has not opened yet
                repo.resolve(rev)
            store = _store(request)
            access, exp = store.issue_token(repo.repo_type, repo.repo_id, scope, credential_digest(request))
            cas = f"{str(request.base_url).rstrip('/')}{CAS_PREFIX}"
            return JSONResponse(
                {"accessToken": access, "exp": exp, "casUrl": cas},
                headers={"X-Xet-Access-Token": access, "X-Xet-Token-Expiration": str(exp), "X-Xet-Cas-Url": cas},
            )

        return endpoint

    api = "/api/{t}/{org}/{name}"
    cas = CAS_PREFIX
    return [
        Route(f"{api}/xet-read-token/{{rev}}", token("read"), methods=["GET"]),
        Route(f"{api}/xet-write-token/{{rev}}", token("write"), methods=["GET"]),
        Route(f"{cas}/v1/xorbs/{{prefix}}/{{hash}}", upload_xorb, methods=["POST"]),
        Route(f"{cas}/v1/xorbs/{{prefix}}/{{hash}}", head_xorb, methods=["HEAD"]),
        Route(f"{cas}/v1/shards", upload_shard, methods=["POST"]),
        Route(f"{cas}/v1/chunks/{{prefix}}/{{hash}}", dedup_query, methods=["GET"]),
        Route(f"{cas}/v1/reconstructions/{{hash}}", reconstruction_v1, methods=["GET"]),
        Route(f"{cas}/v2/reconstructions/{{hash}}", reconstruction_v2, methods=["GET"]),
        Route(f"{cas}/v1/files/{{hash}}", head_file, methods=["HEAD"]),
        Route(f"{cas}/v1/xorb-data/{{hash}}", xorb_data, methods=["GET"]),
        Route("/v1/telemetry", telemetry, methods=["POST"]),
        Route(f"{cas}/v1/telemetry", telemetry, methods=["POST"]),
    ]


async def telemetry(request: Request) -> Response:
    """hf_xet's transfer telemetry: accepted and dropped (a success, as the Hub's CAS answers; never a 404)."""
    async for _ in request.stream():
        pass
    return Response(status_code=202)


def install(storage: Storage) -> XetStore:
    """Attach a Xet store to ``storage`` (commits then rebuild Xet-uploaded files into the LFS store)."""
    store = XetStore(storage)
    storage.xet = store
    return store


def resolve_headers(request: Request, repo: Repo, commit: str, entry: Entry) -> dict[str, str]:
    """``X-Xet-Hash`` + the read-token link for a file stored through Xet (nothing for other files)."""
    store = repo.storage.xet
    file_id = store.file_for_sha256(entry.lfs.sha256) if store is not None and entry.lfs else None
    if file_id is None:
        return {}
    plural = f"{repo.repo_type}s"
    refresh = f"{str(request.base_url).rstrip('/')}/api/{plural}/{repo.repo_id}/xet-read-token/{commit}"
    return {"X-Xet-Hash": file_id, "Link": f'<{refresh}>; rel="xet-auth"'}


# -- CAS endpoints ------------------------------------------------------------------------------------------------


def _store(request: Request) -> XetStore:
    return request.app.state.hub.storage.xet


def _hash_param(request: Request) -> str:
    value = request.path_params["hash"]
    try:
        fmt.hex_to_hash(value)
    except fmt.XetFormatError as exc:
        raise HubError(400, str(exc)) from None
    return value


async def _body(request: Request, what: str) -> bytes:
    """The request body, refused before reading when it announces more than a xorb or shard may hold."""
    if int(request.headers.get("content-length") or 0) > fmt.MAX_XORB_BYTES:
        raise HubError(
            413, f"The {what} is larger than {fmt.MAX_XORB_BYTES} bytes, the Xet limit: let hf_xet split it."
        )
    return await request.body()


async def upload_xorb(request: Request) -> Response:
    store = _store(request)
    repo = await run_in_threadpool(_authorized, request, "write")
    xorb_hex = _hash_param(request)
    data = await _body(request, "xorb")
    try:
        inserted = await run_in_threadpool(store.put_xorb, xorb_hex, data)
    except fmt.XetFormatError as exc:
        raise HubError(400, f"Rejected xorb {xorb_hex}: {exc}") from None
    repo.link_object(xorb_hex)  # a shard of this repo may use it now (its bytes were just checked)
    return JSONResponse({"was_inserted": inserted})


def head_xorb(request: Request) -> Response:
    repo = _authorized(request, "read")
    xorb_hex = _hash_param(request)
    path = _store(request).xorb_path(xorb_hex)
    if not path.is_file() or not repo.has_object(xorb_hex):
        return Response(status_code=404)  # stored for another repo only: this one uploads its own copy
    return Response(status_code=200, headers={"Content-Length": str(path.stat().st_size)})


async def upload_shard(request: Request) -> Response:
    store = _store(request)
    repo = await run_in_threadpool(_authorized, request, "write")
    data = await _body(request, "shard")
    try:
        files = await run_in_threadpool(store.put_shard, data, repo.has_object)
    except fmt.XetFormatError as exc:
        raise HubError(400, f"Rejected shard: {exc}") from None
    for file in files:
        if file.sha256 is not None:
            repo.link_object(file.sha256)  # a commit of this repo may name it now
    return JSONResponse({"result": 1})


def _authorized(request: Request, scope: str) -> Repo:
    """The repository the request's Xet token names, if that token is still good for it now: signed and
    unexpired, and the hub token it was issued to (none for an anonymous read token) still exists and may still
    read it (write to it, for ``scope="write"``) as the repository is now (a repo turned private stops anonymous
    read tokens; a revoked token stops its Xet tokens). 401 otherwise."""
    claims = _store(request).check_token(request, scope)
    repo = request.app.state.hub.storage.repo(claims["t"], claims["r"])
    digest = claims.get("k")
    who = identity_of(request, digest) if digest else None
    if repo.private and (who is None or not who.member_of(namespace(repo.repo_id))):
        raise HubError(
            401,
            "This Xet token no longer reads its repository (it turned private, or the token it was "
            "issued to lost access): request a new one from the xet-read-token route.",
        )
    if scope == "write":
        if who is None:
            raise HubError(401, "This Xet token was not issued to a write token: use the xet-write-token route.")
        check_write(who, namespace(repo.repo_id), f"upload to this repository ({repo.repo_id})")
    return repo


def _check_readable(repo: Repo, sha256: str | None) -> None:
    """Refuse a file that the repo the read token names does not hold (a 404, as for an unknown file)."""
    if sha256 is None or not repo.has_object(sha256):
        raise HubError(404, "No such file in the repository this Xet token was issued for.")


def dedup_query(request: Request) -> Response:
    _authorized(request, "read")
    _hash_param(request)
    return Response(status_code=404)  # no global deduplication: every upload sends its own chunks


def _range(request: Request) -> tuple[int, int | None]:
    header = request.headers.get("range", "").strip()
    if not header:
        return 0, None
    try:
        first, _, last = header.removeprefix("bytes=").partition("-")
        return int(first), int(last) if last else None
    except ValueError:
        raise HubError(400, f"Unsupported Range {header!r}: send one 'bytes=START-END' range.") from None


async def _plan(request: Request) -> tuple[XetStore, dict[str, Any]]:
    store = _store(request)
    repo = await run_in_threadpool(_authorized, request, "read")
    file_hex = _hash_param(request)
    _check_readable(repo, store.file(file_hex)["sha256"])
    first, last = _range(request)
    plan = await run_in_threadpool(store.plan, file_hex, first, last)
    base = str(request.base_url).rstrip("/")
    for xorb_hex, ranges in plan["xorbs"].items():
        url = base + store.sign_url(xorb_hex)
        plan["xorbs"][xorb_hex] = [{"url": url, "ranges": [r]} for r in ranges]  # one range per URL: no multipart
    return store, plan


async def reconstruction_v2(request: Request) -> Response:
    _, plan = await _plan(request)
    return JSONResponse(plan)


async def reconstruction_v1(request: Request) -> Response:
    _, plan = await _plan(request)
    fetch_info = {
        x: [{"range": f["ranges"][0]["chunks"], "url": f["url"], "url_range": f["ranges"][0]["bytes"]} for f in fetches]
        for x, fetches in plan.pop("xorbs").items()
    }
    return JSONResponse({**plan, "fetch_info": fetch_info})


def head_file(request: Request) -> Response:
    """The size of a file the token's repository holds; 404 alike for unknown files and other repos' files."""
    store = _store(request)
    repo = _authorized(request, "read")
    record = store.file(_hash_param(request))
    _check_readable(repo, record["sha256"])
    return Response(status_code=200, headers={"Content-Length": str(record["size"])})


def xorb_data(request: Request) -> Response:
    """Bytes of a stored xorb, for a URL a reconstruction signed (one ``Range`` per request)."""
    store = _store(request)
    xorb_hex = _hash_param(request)
    exp, sig = request.query_params.get("e", ""), request.query_params.get("s", "")
    if not exp.isdigit() or int(exp) < time.time() or not hmac.compare_digest(sig, store._sign(f"{xorb_hex}:{exp}")):
        raise HubError(403, "This xorb URL is unsigned or expired: ask the reconstruction API for a fresh one.")
    path = store.xorb_path(xorb_hex)
    size = path.stat().st_size
    first, last = _range(request)
    last = size - 1 if last is None else min(last, size - 1)
    if first > last:
        return Response(status_code=416, headers={"Content-Range": f"bytes */{size}"})
    with open(path, "rb") as f:
        f.seek(first)
        body = f.read(last - first + 1)
    status = 206 if request.headers.get("range") else 200
    headers = {"Content-Range": f"bytes {first}-{last}/{size}"} if status == 206 else {}
    return Response(body, status_code=status, headers=headers, media_type="application/octet-stream")
