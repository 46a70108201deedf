"""Account, organization and repository routes of the local Hub: whoami, create/delete, info, settings, refs,
tree, paths-info, commits, branches and tags."""

from __future__ import annotations

from typing import Any, Iterable
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..common import (
    INVALID_CREDENTIALS,
    api_repo,
    check_write,
    entries_json,
    field,
    hub,
    identity,
    json_object,
    need_identity,
    param,
    readable,
    repo_url,
    writable,
)
from ..storage import REPO_TYPES, Entry, HubError, entry_not_found, hub_date

# -- account and misc -------------------------------------------------------------------------------------------


def whoami(request: Request) -> Response:
    who = identity(request)
    if who is None:
        raise HubError(401, INVALID_CREDENTIALS)
    return JSONResponse(
        {
            "type": "user",
            "id": who.user,
            "name": who.user,
            "fullname": who.user,
            "email": None,
            "emailVerified": False,
            "canPay": False,
            "isPro": False,
            "periodEnd": None,
            "avatarUrl": "",
            "orgs": [
                {"type": "org", "name": o, "fullname": o, "roleInOrg": "write" if who.role == "write" else "read"}
                for o in sorted(who.orgs)
            ],
            "auth": {"type": "access_token", "accessToken": {"displayName": "hubkernels", "role": who.role}},
        }
    )


def agent_harnesses(request: Request) -> Response:
    return JSONResponse({"standardEnvVars": [], "harnesses": {}})


def validate_yaml(request: Request) -> Response:
    return JSONResponse({"errors": [], "warnings": []})


def organization_overview(request: Request) -> Response:
    """Every organization exists here; ``trustedKernelPublisher`` is what HF ``kernels`` checks before loading."""
    org = param(request, "org")
    state = hub(request)
    repos = [t for t, repo_id in state.storage.list_repos() if repo_id.split("/")[0] == org]
    return JSONResponse(
        {
            "name": org,
            "fullname": org,
            "avatarUrl": "",
            "details": None,
            "isVerified": False,
            "isFollowing": False,
            "numUsers": 1,
            "numModels": repos.count("model"),
            "numDatasets": repos.count("dataset"),
            "numSpaces": repos.count("space"),
            "numKernels": repos.count("kernel"),
            "numFollowers": 0,
            "numPapers": 0,
            "trustedKernelPublisher": org in state.control.trusted_orgs,
        }
    )


# -- repositories -----------------------------------------------------------------------------------------------


def private_in(body: dict[str, Any]) -> bool | None:
    """The visibility a create or settings body asks for: ``visibility`` ("private" / "public", huggingface_hub
    >= 1.x) or the older ``private`` flag; None when it says neither."""
    visibility = body.get("visibility")
    if visibility is not None:
        if visibility not in ("private", "public"):
            raise HubError(
                400,
                f"Invalid visibility {visibility!r}: use 'private' or 'public' (or 'protected' for "
                "Spaces, which this hub does not serve).",
            )
        return visibility == "private"
    private = body.get("private")
    if private is not None and not isinstance(private, bool):
        raise HubError(400, f"'private' must be true or false, not {private!r}.")
    return private


def _named_repo(body: dict[str, Any], default_namespace: str) -> tuple[str, str]:
    """(type, repo_id) of a create or delete body: ``name`` (or ``org/name``), ``organization``, ``type``."""
    repo_type = field(body, "type", str, "model")
    name = field(body, "name", str, "")
    org = field(body, "organization", str, default_namespace)
    if "/" in name:
        org, name = name.split("/", 1)
    if repo_type not in REPO_TYPES:
        raise HubError(400, f"Invalid repo type {repo_type!r}: use one of {', '.join(REPO_TYPES)}.")
    if not name:
        raise HubError(400, 'Missing "name" in the request body: send {"name": NAME, "organization"?: ORG}.')
    return repo_type, f"{org}/{name}"


async def create_repo(request: Request) -> Response:
    body = await json_object(request, "create-repo body", '{"name": "relu", "organization": "org"}')
    who = need_identity(request, "create a repository")
    repo_type, repo_id = _named_repo(body, who.user)
    private = bool(private_in(body))
    check_write(who, repo_id.split("/")[0], f"create a {repo_type} under the namespace {repo_id.split('/')[0]}")
    url = repo_url(request, repo_type, repo_id)
    try:
        await run_in_threadpool(lambda: hub(request).storage.create_repo(repo_type, repo_id, private=private))
    except HubError as exc:
        if exc.status != 409:
            raise
        return JSONResponse(
            {"error": exc.message, "url": url}, status_code=409, headers={"X-Error-Message": exc.message}
        )
    return JSONResponse({"url": url, "name": repo_id, "id": repo_id})


async def delete_repo(request: Request) -> Response:
    body = await json_object(request, "delete-repo body", '{"name": "relu", "organization": "org"}')
    who = need_identity(request, "delete a repository")
    repo_type, repo_id = _named_repo(body, who.user)

    def work() -> None:
        repo = hub(request).storage.repo(repo_type, repo_id)
        writable(request, repo, "delete this repository")
        hub(request).storage.delete_repo(repo_type, repo_id)

    await run_in_threadpool(work)
    return Response(status_code=200)


def repo_info(request: Request) -> Response:
    repo = readable(request, api_repo(request))
    rev = param(request, "rev") if "rev" in request.path_params else "main"
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
                sibling["lfs"] = {
                    "size": entry.lfs.size,
                    "sha256": entry.lfs.sha256,
                    "pointerSize": entry.lfs.pointer_size,
                }
        siblings.append(sibling)
    org = repo.repo_id.split("/")[0]
    info: dict[str, Any] = {
        "_id": repo.repo_id,
        "id": repo.repo_id,
        "author": org,
        "sha": commit,
        "lastModified": hub_date(meta.timestamp),
        "private": repo.private,
        "disabled": False,
        "gated": False,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "siblings": siblings,
    }
    if repo.repo_type == "model":
        info["modelId"] = repo.repo_id
    return JSONResponse(info)


async def update_settings(request: Request) -> Response:
    """``PUT /api/{t}/{org}/{name}/settings``: the visibility (HfApi.update_repo_settings); needs a write token."""
    body = await json_object(request, "settings body", '{"visibility": "private"}')
    private = private_in(body)

    def work() -> bool:
        repo = api_repo(request)
        writable(request, repo, "change this repository's settings")
        if private is not None:
            repo.set_private(private)
        return repo.private

    return JSONResponse({"private": await run_in_threadpool(work)})


def list_refs(request: Request) -> Response:
    repo = readable(request, api_repo(request))
    refs = repo.refs()

    def fmt(kind: str, table: dict[str, str]) -> list[dict[str, str]]:
        return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": c} for n, c in sorted(table.items())]

    out: dict[str, Any] = {"branches": fmt("heads", refs.branches), "converts": [], "tags": fmt("tags", refs.tags)}
    if request.query_params.get("include_prs"):
        out["pullRequests"] = []
    return JSONResponse(out)


def list_tree(request: Request) -> Response:
    repo = readable(request, api_repo(request))
    commit = repo.resolve(param(request, "rev"))
    snap = repo.snapshot(commit)
    directory = param(request, "path").strip("/") if "path" in request.path_params else ""
    if directory and (directory not in snap.entries or snap.entries[directory].type != "directory"):
        raise entry_not_found(directory, commit, "folder")
    recursive = request.query_params.get("recursive", "").lower() in ("1", "true")
    expand = request.query_params.get("expand", "").lower() in ("1", "true")
    entries: Iterable[Entry] = snap.walk(directory) if recursive else snap.children.get(directory, [])
    return JSONResponse(entries_json(list(entries), repo, commit, expand))


MAX_PATHS_INFO = 100_000
"""The most form fields (paths) one paths-info request may name."""


async def paths_info(request: Request) -> Response:
    # the client posts a form: paths=a&paths=b&expand=False; who may read the repo is settled before the body
    repo = await run_in_threadpool(lambda: readable(request, api_repo(request)))
    raw = await request.body()
    try:
        form = await run_in_threadpool(lambda: parse_qs(raw.decode("utf-8", "replace"), max_num_fields=MAX_PATHS_INFO))
    except ValueError:
        raise HubError(413, f"A paths-info request names at most {MAX_PATHS_INFO} paths: split it.") from None
    paths = form.get("paths", [])
    expand = (form.get("expand") or ["false"])[0].lower() == "true"

    def work() -> list[dict[str, Any]]:
        commit = repo.resolve(param(request, "rev"))
        snap = repo.snapshot(commit)
        found = [snap.entries[p.strip("/")] for p in paths if p.strip("/") in snap.entries]
        return entries_json(found, repo, commit, expand)

    return JSONResponse(await run_in_threadpool(work))


def list_commits(request: Request) -> Response:
    repo = readable(request, api_repo(request))
    commit = repo.resolve(param(request, "rev"))
    return JSONResponse(
        [
            {
                "id": c.oid,
                "title": c.title,
                "message": c.message,
                "authors": [{"user": c.author}],
                "date": hub_date(c.timestamp),
            }
            for c in repo.log(commit)
        ]
    )


async def branch(request: Request) -> Response:
    name = param(request, "branch")
    if request.method == "DELETE":

        def delete() -> None:
            repo = api_repo(request)
            writable(request, repo, "delete a branch")
            repo.delete_branch(name)

        await run_in_threadpool(delete)
        return JSONResponse({})
    body = await json_object(request, "branch body", '{"startingPoint": "main"}')
    start = field(body, "startingPoint", str)

    def create() -> None:
        repo = api_repo(request)
        writable(request, repo, "create a branch")
        repo.create_branch(name, start)

    await run_in_threadpool(create)
    return JSONResponse({})


async def create_tag(request: Request) -> Response:
    body = await json_object(request, "tag body", '{"tag": "v1.0", "message": "release"}')
    tag, message = field(body, "tag", str), field(body, "message", str)
    if not tag:
        raise HubError(400, 'Missing "tag" in the request body: send {"tag": NAME, "message"?: TEXT}.')
    rev = param(request, "rev")

    def work() -> None:
        repo = api_repo(request)
        writable(request, repo, "create a tag")
        repo.create_tag(tag, rev, message)

    await run_in_threadpool(work)
    return JSONResponse({})


def delete_tag(request: Request) -> Response:
    repo = api_repo(request)
    writable(request, repo, "delete a tag")
    repo.delete_tag(param(request, "rev"))
    return JSONResponse({})
