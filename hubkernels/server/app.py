"""The HTTP surface of the local Hub: the endpoints ``huggingface_hub`` and HF ``kernels`` call, on Starlette.

Endpoint shapes, headers and error codes follow what the real client needs (see the project's local-hub
reference): typed errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``) and
``X-Error-Message``; resolve answers carry ``X-Repo-Commit`` and an ``ETag`` (git sha1, or sha256 for LFS files),
and for files uploaded through Xet also ``X-Xet-Hash`` (the Xet protocol itself lives in ``xet.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import parse_qs, quote, unquote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import xet
from .control import ControlMiddleware, HubControl, quiet_truncation_logs
from .storage import (
    REPO_TYPES,
    USER_NAME,
    Entry,
    HubError,
    Repo,
    Storage,
    check_path_in_repo,
    decode_commit_lines,
    entry_not_found,
    gitignore_patterns,
    hub_date,
    lfs_patterns,
    matches_patterns,
)

_PLURALS = {f"{t}s": t for t in REPO_TYPES}
_URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}
_CHUNK = 1 << 20
_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Hub:
    """The state behind one app: storage, the upload-mode rule, and the control (request log, faults, trust)."""

    def __init__(self, storage: Storage, control: HubControl, lfs_threshold: int | None) -> None:
        self.storage = storage
        self.control = control
        self.lfs_threshold = lfs_threshold

    def upload_mode(self, path: str, size: int, lfs_globs: list[str]) -> str:
        """``lfs`` for files of ``lfs_threshold`` bytes or more, or matching a ``filter=lfs`` pattern of the
        repo's ``.gitattributes`` (``*.so``, ``*.safetensors`` ...); ``regular`` (inlined in the commit) otherwise,
        and always when ``lfs_threshold`` is None."""
        if self.lfs_threshold is None or size == 0:
            return "regular"
        return "lfs" if size >= self.lfs_threshold or matches_patterns(path, lfs_globs) else "regular"


# -- helpers ----------------------------------------------------------------------------------------------------


def _error_response(exc: HubError) -> Response:
    headers = {"X-Error-Message": exc.message.encode("latin-1", "replace").decode("latin-1"), **exc.headers}
    if exc.code:
        headers["X-Error-Code"] = exc.code
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=headers)


async def _hub_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HubError)
    return _error_response(exc)


def _hub(request: Request) -> Hub:
    return request.app.state.hub


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _repo_url(request: Request, repo_type: str, repo_id: str) -> str:
    return f"{_base_url(request)}/{_URL_PREFIX[repo_type]}{repo_id}"


def _param(request: Request, name: str) -> str:
    return unquote(request.path_params[name])


def _private_in(body: dict[str, Any]) -> bool | None:
    """The visibility a create or settings body asks for: ``visibility`` ("private" / "public", huggingface_hub
    >= 1.x) or the older ``private`` flag; None when it says neither."""
    visibility = body.get("visibility")
    if visibility is not None:
        if visibility not in ("private", "public"):
            raise HubError(400, f"Invalid visibility {visibility!r}: use 'private' or 'public' (or 'protected' for "
                           "Spaces, which this hub does not serve).")
        return visibility == "private"
    private = body.get("private")
    if private is not None and not isinstance(private, bool):
        raise HubError(400, f"'private' must be true or false, not {private!r}.")
    return private


def _visible(request: Request, repo: Repo) -> Repo:
    """The repo, unless it is private and the request carries no token: then 401 RepoNotFound, as the Hub answers
    anonymous clients (this hub takes any bearer token as the owner's)."""
    if repo.private and not request.headers.get("authorization"):
        raise HubError(401, f"Repository not found: {repo.repo_type} {repo.repo_id} does not exist on this hub, or it "
                       "is private and the request was not authenticated: send a token (HF_TOKEN).", "RepoNotFound")
    return repo


def _api_repo(request: Request) -> Repo:
    """The repo named by ``/api/{t}/{org}/{name}/...`` (404 RepoNotFound if absent, 401 if private and anonymous)."""
    plural = _param(request, "t")
    repo_type = _PLURALS.get(plural)
    repo_id = f"{_param(request, 'org')}/{_param(request, 'name')}"
    if repo_type is None:
        raise HubError(404, f"Unknown repo type {plural!r} in the URL: use one of {', '.join(_PLURALS)}.")
    return _visible(request, _hub(request).storage.repo(repo_type, repo_id))


def _file_repo(request: Request, repo_type: str, *, check_access: bool = True) -> Repo:
    repo = _hub(request).storage.repo(repo_type, f"{_param(request, 'org')}/{_param(request, 'name')}")
    return _visible(request, repo) if check_access else repo


async def _json_body(request: Request) -> Any:
    body = await request.body()
    if not body:
        return {}
    try:
        return json.loads(body)
    except ValueError:
        raise HubError(400, "The request body is not valid JSON.") from None


def _entry_json(entry: Entry, repo: Repo, commit: str, expand: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": entry.type, "oid": entry.oid, "size": entry.size, "path": entry.path}
    if entry.lfs:
        out["lfs"] = {"oid": entry.lfs.sha256, "size": entry.lfs.size, "pointerSize": entry.lfs.pointer_size}
        xet_hash = repo.storage.xet.file_for_sha256(entry.lfs.sha256) if repo.storage.xet else None
        if xet_hash:
            out["xetHash"] = xet_hash
    if expand:
        last = repo.log(commit, limit=1, path=entry.path)
        if last:
            out["lastCommit"] = {"id": last[0].oid, "title": last[0].title, "date": hub_date(last[0].timestamp)}
    return out


# -- account and misc -------------------------------------------------------------------------------------------


def whoami(request: Request) -> Response:
    if not request.headers.get("authorization"):
        raise HubError(401, "Invalid credentials in Authorization header: send any bearer token to this local hub.")
    orgs = sorted({repo_id.split("/")[0] for _, repo_id in _hub(request).storage.list_repos()} - {USER_NAME})
    return JSONResponse({
        "type": "user", "id": USER_NAME, "name": USER_NAME, "fullname": "Local Hub User", "email": None,
        "emailVerified": False, "canPay": False, "isPro": False, "periodEnd": None, "avatarUrl": "",
        "orgs": [{"type": "org", "name": o, "fullname": o, "roleInOrg": "admin"} for o in orgs],
        "auth": {"type": "access_token", "accessToken": {"displayName": "local", "role": "write"}},
    })


def agent_harnesses(request: Request) -> Response:
    return JSONResponse({"standardEnvVars": [], "harnesses": {}})


def validate_yaml(request: Request) -> Response:
    return JSONResponse({"errors": [], "warnings": []})


def organization_overview(request: Request) -> Response:
    """Every organization exists here; ``trustedKernelPublisher`` is what HF ``kernels`` checks before loading."""
    org = _param(request, "org")
    hub = _hub(request)
    repos = [t for t, repo_id in hub.storage.list_repos() if repo_id.split("/")[0] == org]
    return JSONResponse({
        "name": org, "fullname": org, "avatarUrl": "", "details": None, "isVerified": False, "isFollowing": False,
        "numUsers": 1, "numModels": repos.count("model"), "numDatasets": repos.count("dataset"),
        "numSpaces": repos.count("space"), "numKernels": repos.count("kernel"), "numFollowers": 0,
        "numPapers": 0, "trustedKernelPublisher": org in hub.control.trusted_orgs,
    })


# -- repositories -----------------------------------------------------------------------------------------------


async def create_repo(request: Request) -> Response:
    body = await _json_body(request)
    repo_type = body.get("type") or "model"
    name = str(body.get("name") or "")
    org = body.get("organization") or USER_NAME
    if "/" in name:
        org, name = name.split("/", 1)
    if repo_type not in REPO_TYPES:
        raise HubError(400, f"Invalid repo type {repo_type!r}: use one of {', '.join(REPO_TYPES)}.")
    repo_id = f"{org}/{name}"
    url = _repo_url(request, repo_type, repo_id)
    try:
        await run_in_threadpool(lambda: _hub(request).storage.create_repo(repo_type, repo_id,
                                                                          private=bool(_private_in(body))))
    except HubError as exc:
        if exc.status != 409:
            raise
        return JSONResponse({"error": exc.message, "url": url}, status_code=409,
                            headers={"X-Error-Message": exc.message})
    return JSONResponse({"url": url, "name": repo_id, "id": repo_id})


async def delete_repo(request: Request) -> Response:
    body = await _json_body(request)
    repo_type = body.get("type") or "model"
    repo_id = f"{body.get('organization') or USER_NAME}/{body.get('name')}"
    if "/" in str(body.get("name")):
        repo_id = str(body.get("name"))
    await run_in_threadpool(_hub(request).storage.delete_repo, repo_type, repo_id)
    return Response(status_code=200)


def repo_info(request: Request) -> Response:
    repo = _api_repo(request)
    rev = _param(request, "rev") if "rev" in request.path_params else "main"
    commit = repo.resolve(rev)
    snap = repo.snapshot(commit)
    meta = repo.commit_meta(commit)
    with_blobs = request.query_params.get("blobs", "").lower() in ("1", "true")
    siblings = []
    for entry in snap.files():
        sibling: dict[str, Any] = {"rfilename": entry.path}
        if with_blobs:
            sibling.update(size=entry.size, blobId=entry.oid)
            if entry.lfs:
                sibling["lfs"] = {"size": entry.lfs.size, "sha256": entry.lfs.sha256,
                                  "pointerSize": entry.lfs.pointer_size}
        siblings.append(sibling)
    org = repo.repo_id.split("/")[0]
    info: dict[str, Any] = {
        "_id": repo.repo_id, "id": repo.repo_id, "author": org, "sha": commit, "lastModified": hub_date(meta.timestamp),
        "private": repo.private, "disabled": False, "gated": False, "downloads": 0, "likes": 0, "tags": [],
        "siblings": siblings,
    }
    if repo.repo_type == "model":
        info["modelId"] = repo.repo_id
    return JSONResponse(info)


async def update_settings(request: Request) -> Response:
    """``PUT /api/{t}/{org}/{name}/settings``: the visibility (HfApi.update_repo_settings); needs a token."""
    if not request.headers.get("authorization"):
        raise HubError(401, "Invalid credentials in Authorization header: send any bearer token to change settings.")
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise HubError(400, 'The settings body must be a JSON object, e.g. {"visibility": "private"}.')
    repo = _api_repo(request)
    private = _private_in(body)
    if private is not None:
        await run_in_threadpool(repo.set_private, private)
    return JSONResponse({"private": repo.private})


def list_refs(request: Request) -> Response:
    repo = _api_repo(request)
    refs = repo.refs()

    def fmt(kind: str, table: dict[str, str]) -> list[dict[str, str]]:
        return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": c} for n, c in sorted(table.items())]

    out: dict[str, Any] = {"branches": fmt("heads", refs.branches), "converts": [], "tags": fmt("tags", refs.tags)}
    if request.query_params.get("include_prs"):
        out["pullRequests"] = []
    return JSONResponse(out)


def list_tree(request: Request) -> Response:
    repo = _api_repo(request)
    commit = repo.resolve(_param(request, "rev"))
    snap = repo.snapshot(commit)
    directory = _param(request, "path").strip("/") if "path" in request.path_params else ""
    if directory and (directory not in snap.entries or snap.entries[directory].type != "directory"):
        raise entry_not_found(directory, commit, "folder")
    recursive = request.query_params.get("recursive", "").lower() in ("1", "true")
    expand = request.query_params.get("expand", "").lower() in ("1", "true")
    entries: Iterable[Entry] = snap.walk(directory) if recursive else snap.children.get(directory, [])
    return JSONResponse([_entry_json(e, repo, commit, expand) for e in entries])


async def paths_info(request: Request) -> Response:
    form = parse_qs((await request.body()).decode())  # the client posts a form: paths=a&paths=b&expand=False
    paths = form.get("paths", [])
    expand = (form.get("expand") or ["false"])[0].lower() == "true"

    def work() -> list[dict[str, Any]]:
        repo = _api_repo(request)
        commit = repo.resolve(_param(request, "rev"))
        snap = repo.snapshot(commit)
        found = [snap.entries[p.strip("/")] for p in paths if p.strip("/") in snap.entries]
        return [_entry_json(e, repo, commit, expand) for e in found]

    return JSONResponse(await run_in_threadpool(work))


def list_commits(request: Request) -> Response:
    repo = _api_repo(request)
    commit = repo.resolve(_param(request, "rev"))
    return JSONResponse([
        {"id": c.oid, "title": c.title, "message": c.message, "authors": [{"user": c.author}],
         "date": hub_date(c.timestamp)}
        for c in repo.log(commit)
    ])


async def branch(request: Request) -> Response:
    name = _param(request, "branch")
    if request.method == "DELETE":
        await run_in_threadpool(lambda: _api_repo(request).delete_branch(name))
        return JSONResponse({})
    body = await _json_body(request)
    await run_in_threadpool(lambda: _api_repo(request).create_branch(name, body.get("startingPoint")))
    return JSONResponse({})


async def create_tag(request: Request) -> Response:
    body = await _json_body(request)
    if not body.get("tag"):
        raise HubError(400, 'Missing "tag" in the request body: send {"tag": NAME, "message"?: TEXT}.')
    rev = _param(request, "rev")
    await run_in_threadpool(lambda: _api_repo(request).create_tag(str(body["tag"]), rev, body.get("message")))
    return JSONResponse({})


def delete_tag(request: Request) -> Response:
    _api_repo(request).delete_tag(_param(request, "rev"))
    return JSONResponse({})


# -- uploads ----------------------------------------------------------------------------------------------------


async def preupload(request: Request) -> Response:
    body = await _json_body(request)
    files = body.get("files")
    if not isinstance(files, list):
        raise HubError(400, 'Missing "files" in the preupload body: send {"files": [{"path", "size", "sample"}]}.')
    gitignore = body.get("gitIgnore")
    hub = _hub(request)

    def work() -> list[dict[str, Any]]:
        repo = _api_repo(request)
        commit = repo.resolve(_param(request, "rev"))
        snap = repo.snapshot(commit)
        ignore_text = gitignore if gitignore is not None else (repo.text_at(commit, ".gitignore") or "")
        ignored = gitignore_patterns(ignore_text)
        lfs_globs = lfs_patterns(repo.text_at(commit, ".gitattributes") or "")
        out = []
        for f in files:
            path = check_path_in_repo(str(f.get("path", "")))
            answer: dict[str, Any] = {"path": f.get("path"),
                                      "uploadMode": hub.upload_mode(path, int(f.get("size", 0)), lfs_globs),
                                      "shouldIgnore": matches_patterns(path, ignored)}
            current = snap.entries.get(path)
            if current is not None and current.type == "file":
                answer["oid"] = current.etag
            out.append(answer)
        return out

    return JSONResponse({"files": await run_in_threadpool(work), "commitOid": None})


async def lfs_batch(request: Request, repo_type: str) -> Response:
    body = await _json_body(request)
    if body.get("operation") != "upload":
        raise HubError(400, "This hub's LFS batch API serves uploads only; download files through /resolve/.")
    hub = _hub(request)
    repo = await run_in_threadpool(_file_repo, request, repo_type)
    base = f"{_base_url(request)}/{_URL_PREFIX[repo_type]}{repo.repo_id}.git/info/lfs/objects"
    objects = []
    for obj in body.get("objects") or []:
        oid, size = str(obj.get("oid", "")), obj.get("size")
        try:
            stored = hub.storage.lfs_size(oid)
        except HubError as exc:
            objects.append({"oid": oid, "size": size, "error": {"code": 422, "message": exc.message}})
            continue
        if not isinstance(size, int) or size < 0:
            objects.append({"oid": oid, "size": size, "error": {"code": 422, "message": "size must be an int >= 0"}})
        elif stored == size:
            objects.append({"oid": oid, "size": size})  # already stored: nothing to do
        else:
            objects.append({"oid": oid, "size": size, "authenticated": True, "actions": {
                "upload": {"href": f"{base}/{oid}/{size}"},
                "verify": {"href": f"{base}/{oid}/verify"},
            }})
    return JSONResponse({"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
                        media_type="application/vnd.git-lfs+json")


async def lfs_upload(request: Request, repo_type: str) -> Response:
    hub = _hub(request)
    await run_in_threadpool(lambda: _file_repo(request, repo_type, check_access=False))  # the href is the grant
    oid, size = _param(request, "oid"), int(request.path_params["size"])
    writer = hub.storage.lfs_writer(oid, size)
    try:
        async for chunk in request.stream():
            if chunk:
                writer.write(chunk)
    except BaseException:
        writer.abort()
        raise
    await run_in_threadpool(writer.finish)
    return Response(status_code=200)


async def lfs_verify(request: Request, repo_type: str) -> Response:
    body = await _json_body(request)
    oid = _param(request, "oid")
    stored = _hub(request).storage.lfs_size(oid)
    if stored is None or (body.get("size") is not None and body["size"] != stored):
        raise HubError(404, f"LFS object {oid} was not uploaded (or has another size): upload it again.")
    return JSONResponse({"oid": oid, "size": stored})


def _lfs_routes(prefix: str, repo_type: str) -> list[Route]:
    base = f"/{prefix}{{org}}/{{name}}.git/info/lfs/objects"

    async def batch(request: Request) -> Response:
        return await lfs_batch(request, repo_type)

    async def upload(request: Request) -> Response:
        return await lfs_upload(request, repo_type)

    async def verify(request: Request) -> Response:
        return await lfs_verify(request, repo_type)

    return [Route(f"{base}/batch", batch, methods=["POST"]),
            Route(f"{base}/{{oid}}/verify", verify, methods=["POST"]),
            Route(f"{base}/{{oid}}/{{size:int}}", upload, methods=["PUT"])]


async def commit(request: Request) -> Response:
    if request.query_params.get("create_pr") in ("1", "true", "True"):
        raise HubError(400, "Pull requests are not supported by this local hub: commit to a branch instead.")
    raw = await request.body()
    try:
        lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
    except ValueError:
        raise HubError(400, "The commit body is not valid NDJSON (one JSON object per line).") from None
    header, operations = decode_commit_lines(lines)
    branch_name = _param(request, "rev")

    def work() -> tuple[Repo, str]:
        repo = _api_repo(request)
        oid = repo.commit(branch_name, operations, summary=str(header.get("summary") or ""),
                          description=str(header.get("description") or ""),
                          parent_commit=header.get("parentCommit"))
        return repo, oid

    repo, oid = await run_in_threadpool(work)
    return JSONResponse({"success": True, "commitOid": oid,
                         "commitUrl": f"{_repo_url(request, repo.repo_type, repo.repo_id)}/commit/{oid}"})


# -- file downloads ---------------------------------------------------------------------------------------------


def _resolve_file(request: Request, repo_type: str) -> Response:
    repo = _file_repo(request, repo_type)
    commit = repo.resolve(_param(request, "rev"))
    path = _param(request, "path")
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
        file = _hub(request).storage.lfs_path(entry.lfs.sha256)
        if not file.is_file():
            raise HubError(500, f"The LFS object {entry.lfs.sha256} of {path!r} is missing from the hub's storage.")
        return StreamingResponse(_read_range(file, start, length), status_code=status, headers=headers,
                                 media_type="application/octet-stream")
    data = repo.read_blob(entry.oid)[start: start + length]
    return Response(data, status_code=status, headers=headers, media_type="application/octet-stream")


def _is_branch_like(request: Request) -> bool:
    return not re.fullmatch(r"[0-9a-f]{40}", _param(request, "rev"))


def _read_range(path: Path, start: int, length: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        f.seek(start)
        while length > 0:
            chunk = f.read(min(_CHUNK, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk


def _resolve_route(prefix: str, repo_type: str) -> Route:
    def endpoint(request: Request) -> Response:
        return _resolve_file(request, repo_type)

    return Route(f"/{prefix}{{org}}/{{name}}/resolve/{{rev}}/{{path:path}}", endpoint, methods=["GET", "HEAD"])


# -- control ----------------------------------------------------------------------------------------------------


def control_requests(request: Request) -> Response:
    return JSONResponse(_hub(request).control.requests())


def control_reset(request: Request) -> Response:
    _hub(request).control.reset_requests()
    return JSONResponse({})


async def control_faults(request: Request) -> Response:
    control = _hub(request).control
    if request.method == "DELETE":
        control.clear_faults()
        return JSONResponse({})
    if request.method == "GET":
        return JSONResponse([f.to_json() for f in control.faults()])
    body = await _json_body(request)
    allowed = {"path_regex", "method", "status", "truncate_after", "delay_s", "times", "headers"}
    unknown = set(body) - allowed
    if unknown or "path_regex" not in body:
        raise HubError(400, f"A fault is a JSON object with path_regex and some of {sorted(allowed)}; "
                            f"unknown keys: {sorted(unknown)}.")
    try:
        fault = control.add_fault(**body)
    except (TypeError, ValueError) as exc:
        raise HubError(400, str(exc)) from None
    return JSONResponse(fault.to_json())


def control_trust(request: Request) -> Response:
    """``PUT``/``DELETE /_hubkernels/trusted-orgs/{org}``: mark an organization a trusted kernel publisher or not."""
    org = _param(request, "org")
    trusted = _hub(request).control.trusted_orgs
    (trusted.add if request.method == "PUT" else trusted.discard)(org)
    return JSONResponse(sorted(trusted))


# -- the app ----------------------------------------------------------------------------------------------------


def create_app(root: Path, *, trusted_orgs: Iterable[str] = (), lfs_threshold: int | None = 1024) -> Starlette:
    """A Hub-compatible ASGI app storing its repositories under ``root``.

    ``trusted_orgs``: organizations whose overview says ``trustedKernelPublisher: true``. ``lfs_threshold``: files of
    this many bytes or more (or matching the repo's LFS patterns, e.g. ``*.so``) are uploaded as large files (Xet
    or the LFS batch API); None inlines every file in the commit. ``app.state.hub.control`` is the in-process
    handle on the request log and fault rules.
    """
    api = "/api/{t}/{org}/{name}"
    routes = [
        Route("/_hubkernels/requests", control_requests, methods=["GET"]),
        Route("/_hubkernels/requests/reset", control_reset, methods=["POST"]),
        Route("/_hubkernels/faults", control_faults, methods=["GET", "POST", "DELETE"]),
        Route("/_hubkernels/trusted-orgs/{org}", control_trust, methods=["PUT", "DELETE"]),
        Route("/api/whoami-v2", whoami, methods=["GET"]),
        Route("/api/agent-harnesses", agent_harnesses, methods=["GET"]),
        Route("/api/validate-yaml", validate_yaml, methods=["POST"]),
        Route("/api/repos/create", create_repo, methods=["POST"]),
        Route("/api/repos/delete", delete_repo, methods=["DELETE"]),
        Route("/api/organizations/{org}/overview", organization_overview, methods=["GET"]),
        Route(api, repo_info, methods=["GET"]),
        Route(f"{api}/revision/{{rev}}", repo_info, methods=["GET"]),
        Route(f"{api}/settings", update_settings, methods=["PUT"]),
        Route(f"{api}/refs", list_refs, methods=["GET"]),
        Route(f"{api}/tree/{{rev}}", list_tree, methods=["GET"]),
        Route(f"{api}/tree/{{rev}}/{{path:path}}", list_tree, methods=["GET"]),
        Route(f"{api}/paths-info/{{rev}}", paths_info, methods=["POST"]),
        Route(f"{api}/commits/{{rev}}", list_commits, methods=["GET"]),
        Route(f"{api}/branch/{{branch}}", branch, methods=["POST", "DELETE"]),
        Route(f"{api}/tag/{{rev}}", create_tag, methods=["POST"]),
        Route(f"{api}/tag/{{rev}}", delete_tag, methods=["DELETE"]),
        Route(f"{api}/preupload/{{rev}}", preupload, methods=["POST"]),
        Route(f"{api}/commit/{{rev}}", commit, methods=["POST"]),
    ]
    routes += xet.xet_routes(_api_repo)
    for repo_type, prefix in _URL_PREFIX.items():
        if prefix:
            routes += _lfs_routes(prefix, repo_type)
            routes.append(_resolve_route(prefix, repo_type))
    routes += _lfs_routes("", "model")
    routes.append(_resolve_route("", "model"))

    storage = Storage(Path(root))
    xet.install(storage)
    control = HubControl(set(trusted_orgs))
    app = Starlette(routes=routes, exception_handlers={HubError: _hub_error_handler})
    app.state.hub = Hub(storage, control, lfs_threshold)
    quiet_truncation_logs()
    app.add_middleware(_ControlLayer, control=control)
    return app


class _ControlLayer(ControlMiddleware):
    """`ControlMiddleware` in the shape Starlette's ``add_middleware`` builds (outermost user middleware)."""

    def __init__(self, app: Any, control: HubControl) -> None:
        super().__init__(app, control)
