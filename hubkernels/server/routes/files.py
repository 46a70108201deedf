"""Upload and download routes of the local Hub: preupload, the LFS batch API (with upload grants), commits and
``resolve`` (file downloads with ``Range``).

An LFS upload href carries a signed, time-limited grant for one object and one repository (the client sends no
token with the PUT); the object is then linked to that repository, and a commit may only name objects linked
to its own repository, so storage shared between repositories never leaks a private file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import xet
from ..common import (
    MAX_JSON_CONTAINERS,
    URL_PREFIX,
    api_repo,
    base_url,
    check_write,
    credential_digest,
    field,
    file_repo,
    hub,
    json_object,
    namespace,
    param,
    parse_json,
    readable,
    repo_url,
    writable,
)
from ..storage import (
    SHA256_RE,
    HubError,
    check_path_in_repo,
    decode_commit_lines,
    gitignore_patterns,
    lfs_patterns,
    matches_patterns,
)

_CHUNK = 1 << 20
_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


# -- uploads ----------------------------------------------------------------------------------------------------


async def preupload(request: Request) -> Response:
    body = await json_object(request, "preupload body", '{"files": [{"path": "a.bin", "size": 3, "sample": ""}]}')
    files = body.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise HubError(400, 'Missing "files" in the preupload body: send {"files": [{"path", "size", "sample"}]}.')
    gitignore = field(body, "gitIgnore", str)
    state = hub(request)

    def work() -> list[dict[str, Any]]:
        repo = api_repo(request)
        writable(request, repo, "upload to this repository")
        commit = repo.resolve(param(request, "rev"))
        snap = repo.snapshot(commit)
        ignore_text = gitignore if gitignore is not None else (repo.text_at(commit, ".gitignore") or "")
        ignored = gitignore_patterns(ignore_text)
        lfs_globs = lfs_patterns(repo.text_at(commit, ".gitattributes") or "")
        out = []
        for f in files:
            path = check_path_in_repo(f.get("path", ""))
            size = field(f, "size", int, 0)
            answer: dict[str, Any] = {
                "path": f.get("path"),
                "uploadMode": state.upload_mode(path, size, lfs_globs),
                "shouldIgnore": matches_patterns(path, ignored),
            }
            current = snap.entries.get(path)
            if current is not None and current.type == "file":
                answer["oid"] = current.etag
            out.append(answer)
        return out

    return JSONResponse({"files": await run_in_threadpool(work), "commitOid": None})


async def lfs_batch(request: Request, repo_type: str) -> Response:
    body = await json_object(request, "LFS batch body", '{"operation": "upload", "objects": [{"oid", "size"}]}')
    if body.get("operation") != "upload":
        raise HubError(400, "This hub's LFS batch API serves uploads only; download files through /resolve/.")
    requested = body.get("objects") or []
    if not isinstance(requested, list) or not all(isinstance(o, dict) for o in requested):
        raise HubError(400, 'The LFS batch "objects" must be a list of {"oid": SHA256, "size": BYTES}.')
    state = hub(request)

    def work() -> list[dict[str, Any]]:
        repo = file_repo(request, repo_type)
        writable(request, repo, "upload to this repository")
        digest = credential_digest(request)
        assert digest is not None  # writable() needs a token
        base = f"{base_url(request)}/{URL_PREFIX[repo_type]}{repo.repo_id}.git/info/lfs/objects"
        objects: list[dict[str, Any]] = []
        for obj in requested:
            oid, size = obj.get("oid"), obj.get("size")
            if not isinstance(oid, str) or not SHA256_RE.match(oid):
                objects.append({"oid": oid, "size": size, "error": {"code": 422, "message": "oid must be a sha256"}})
            elif not isinstance(size, int) or isinstance(size, bool) or size < 0:
                objects.append(
                    {"oid": oid, "size": size, "error": {"code": 422, "message": "size must be an int >= 0"}}
                )
            elif state.storage.lfs_size(oid) == size and repo.has_object(oid):
                objects.append({"oid": oid, "size": size})  # already in this repo: nothing to do
            else:  # even when stored for another repo: the client proves it has the bytes by sending them
                grant = state.grants.sign(repo_type, repo.repo_id, oid, digest)
                objects.append(
                    {
                        "oid": oid,
                        "size": size,
                        "authenticated": True,
                        "actions": {
                            "upload": {"href": f"{base}/{oid}/{size}?grant={grant}"},
                            "verify": {"href": f"{base}/{oid}/verify?grant={grant}"},
                        },
                    }
                )
        return objects

    objects = await run_in_threadpool(work)
    return JSONResponse(
        {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}, media_type="application/vnd.git-lfs+json"
    )


def _granted(request: Request, repo_type: str) -> Any:
    """The repo of an upload href whose grant is valid for it and its object, and whose token may still write
    to it (a revoked token or a lost membership ends its grants at once); 403 otherwise."""
    repo = file_repo(request, repo_type)
    oid = param(request, "oid")
    digest = hub(request).grants.check(request.query_params.get("grant"), repo_type, repo.repo_id, oid)
    who = hub(request).tokens.lookup_digest(digest) if digest else None
    if who is None:
        raise HubError(
            403,
            f"No valid upload grant for {oid} in {repo.repo_id}: ask the LFS batch API for a new "
            "upload URL (grants expire after an hour, or when their token is revoked).",
        )
    check_write(who, namespace(repo.repo_id), f"upload to this repository ({repo.repo_id})")
    return repo


async def lfs_upload(request: Request, repo_type: str) -> Response:
    state = hub(request)
    repo = await run_in_threadpool(_granted, request, repo_type)
    oid, size = param(request, "oid"), int(request.path_params["size"])
    writer = state.storage.lfs_writer(oid, size)
    try:
        async for chunk in request.stream():
            if chunk:
                writer.write(chunk)
    except BaseException:
        writer.abort()
        raise
    await run_in_threadpool(writer.finish)
    await run_in_threadpool(repo.link_object, oid)
    return Response(status_code=200)


async def lfs_verify(request: Request, repo_type: str) -> Response:
    body = await json_object(request, "LFS verify body", '{"oid": SHA256, "size": BYTES}')
    repo = await run_in_threadpool(_granted, request, repo_type)
    oid = param(request, "oid")
    stored = hub(request).storage.lfs_size(oid)
    if stored is None or body.get("size") not in (None, stored) or not repo.has_object(oid):
        raise HubError(
            404, f"LFS object {oid} was not uploaded to {repo.repo_id} (or has another size): upload it again."
        )
    return JSONResponse({"oid": oid, "size": stored})


def lfs_routes(prefix: str, repo_type: str) -> list[Route]:
    base = f"/{prefix}{{org}}/{{name}}.git/info/lfs/objects"

    async def batch(request: Request) -> Response:
        return await lfs_batch(request, repo_type)

    async def upload(request: Request) -> Response:
        return await lfs_upload(request, repo_type)

    async def verify(request: Request) -> Response:
        return await lfs_verify(request, repo_type)

    return [
        Route(f"{base}/batch", batch, methods=["POST"]),
        Route(f"{base}/{{oid}}/verify", verify, methods=["POST"]),
        Route(f"{base}/{{oid}}/{{size:int}}", upload, methods=["PUT"]),
    ]


async def commit(request: Request) -> Response:
    if request.query_params.get("create_pr") in ("1", "true", "True"):
        raise HubError(400, "Pull requests are not supported by this local hub: commit to a branch instead.")
    repo = await run_in_threadpool(api_repo, request)
    who = await run_in_threadpool(writable, request, repo, "commit to this repository")  # before the body
    raw = await request.body()
    header, operations = await run_in_threadpool(_decode_commit, raw)  # off the event loop: others go on
    branch_name = param(request, "rev")

    def work() -> tuple[Any, str]:
        oid = repo.commit(
            branch_name,
            operations,
            summary=header.get("summary") or "",
            description=header.get("description") or "",
            parent_commit=header.get("parentCommit"),
            author=(who.user, f"{who.user}@hub.local"),
        )
        return repo, oid

    repo, oid = await run_in_threadpool(work)
    return JSONResponse(
        {
            "success": True,
            "commitOid": oid,
            "commitUrl": f"{repo_url(request, repo.repo_type, repo.repo_id)}/commit/{oid}",
        }
    )


def _decode_commit(raw: bytes) -> tuple[dict, list[Any]]:
    if raw.count(b"{") + raw.count(b"[") > MAX_JSON_CONTAINERS:  # before splitting: no line is parsed then
        raise HubError(
            413,
            f"The commit body holds more than {MAX_JSON_CONTAINERS} JSON objects and arrays: split "
            "it into several commits.",
        )
    what = "commit body (NDJSON, one JSON object per line)"
    return decode_commit_lines([parse_json(line, what) for line in raw.splitlines() if line.strip()])


# -- file downloads ---------------------------------------------------------------------------------------------


def _resolve_file(request: Request, repo_type: str) -> Response:
    repo = readable(request, file_repo(request, repo_type))
    commit = repo.resolve(param(request, "rev"))
    path = param(request, "path")
    entry = repo.snapshot(commit).file(path)
    size = entry.size
    headers = {
        "X-Repo-Commit": commit,
        "ETag": f'"{entry.etag}"',
        "Accept-Ranges": "bytes",
        "Content-Disposition": f"inline; filename*=UTF-8''{quote(path.rsplit('/', 1)[-1])}",
        "Cache-Control": "no-cache" if _is_branch_like(request) else "public, max-age=31536000, immutable",
    }
    if entry.lfs:
        headers["X-Linked-Etag"] = f'"{entry.lfs.sha256}"'
        headers["X-Linked-Size"] = str(size)
        headers.update(xet.resolve_headers(request, repo, commit, entry))
    start, end = 0, size - 1
    status = 200
    range_header = request.headers.get("range")
    if range_header and request.method == "GET":
        match = _RANGE_RE.match(range_header.strip())
        if match and (match.group(1) or match.group(2)):
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            else:
                start, end = max(size - int(match.group(2)), 0), size - 1
            if start >= size or start > end:
                return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    length = max(end - start + 1, 0)
    headers["Content-Length"] = str(length)
    if request.method == "HEAD":
        return Response(status_code=status, headers=headers, media_type="application/octet-stream")
    if entry.lfs:
        file = hub(request).storage.lfs_path(entry.lfs.sha256)
        if not file.is_file():
            raise HubError(500, f"The LFS object {entry.lfs.sha256} of {path!r} is missing from the hub's storage.")
        return StreamingResponse(
            _read_range(file, start, length), status_code=status, headers=headers, media_type="application/octet-stream"
        )
    data = repo.read_blob(entry.oid)[start : start + length]
    return Response(data, status_code=status, headers=headers, media_type="application/octet-stream")


def _is_branch_like(request: Request) -> bool:
    return not re.fullmatch(r"[0-9a-f]{40}", param(request, "rev"))


def _read_range(path: Path, start: int, length: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        f.seek(start)
        while length > 0:
            chunk = f.read(min(_CHUNK, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk


def resolve_route(prefix: str, repo_type: str) -> Route:
    def endpoint(request: Request) -> Response:
        return _resolve_file(request, repo_type)

    return Route(f"/{prefix}{{org}}/{{name}}/resolve/{{rev}}/{{path:path}}", endpoint, methods=["GET", "HEAD"])
