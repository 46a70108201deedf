"""A package index over the variant wheels of the kernel repos (PEP 503 HTML, PEP 691 JSON, PEP 825 variants).

`hubkernels upload` puts each variant's wheel under ``wheels/<variant>/`` of a ``v<N>`` branch; this module lists
those with a variant label (a wheel without one is only the loader's artifact of a variant PEP 825 cannot describe):

- ``/simple/<project>/``: every variant wheel (label in its name, for installers with variant support), the
  version's ``<dist>-<version>-variants.json``, and the null variant (the stable-ABI CPU build) once more under its
  plain name, so ``pip install --index-url <hub>/simple ltx-kernels`` works with installers that know no variants.
- ``/simple/-/variant/<label>/<project>/``: only the wheels of variant ``<label>`` (``cu130``, ``torch213_cpu``...),
  under their plain names: the per-variant index an installer without variant support is pointed at, as PyTorch
  does per CUDA version.

A caller sees the wheels of the repos it may read (a private repo's need its token, sent as a bearer token or as
the password of HTTP basic auth, which is how pip and uv send index credentials). Files are served from
``/simple/-/files/<sha256>/<file name>`` (a URL that names no repository, so neither does the request log), with
their sha256 and ``Requires-Python`` in the listing.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import Iterator

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ...layout import WHEELS_DIR, plain_name, wheel_label
from ..common import INVALID_CREDENTIALS, hub, namespace, param
from ..storage import LRU, Entry, HubError, Repo

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
PEP691_HTML = "application/vnd.pypi.simple.v1+html"
_BRANCH = re.compile(r"v\d+")
_CHUNK = 1 << 20
_requires_python = LRU(4096)  # sha256 -> Requires-Python of a wheel (content-addressed: never stale)


@dataclass(frozen=True)
class IndexFile:
    """One file of a project page: its name as listed, where it lives, its sha256 and Requires-Python."""

    filename: str
    repo: Repo
    commit: str
    entry: Entry
    sha256: str
    requires_python: str | None


def project_name(dist: str) -> str:
    """PEP 503's normalized project name (`ltx_kernels` -> `ltx-kernels`)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def _caller(request: Request):
    """The identity behind a bearer token or basic auth's password; None when anonymous; 401 for unknown ones."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, value = header.strip().partition(" ")
    token = value.strip()
    if scheme.lower() == "basic":
        try:
            token = base64.b64decode(token).decode().partition(":")[2]
        except ValueError:
            token = ""
    found = hub(request).tokens.lookup(token) if scheme.lower() in ("basic", "bearer") and token else None
    if found is None:
        raise HubError(401, INVALID_CREDENTIALS, headers={"WWW-Authenticate": 'Basic realm="hubkernels"'})
    return found


def _may_read(who, repo: Repo) -> bool:
    return not repo.private or (who is not None and who.member_of(namespace(repo.repo_id)))


def _sha256(repo: Repo, entry: Entry) -> str:
    return entry.lfs.sha256 if entry.lfs else hashlib.sha256(repo.read_blob(entry.oid)).hexdigest()


def _open(repo: Repo, entry: Entry):
    if entry.lfs:
        return open(repo.storage.lfs_path(entry.lfs.sha256), "rb")
    import io

    return io.BytesIO(repo.read_blob(entry.oid))


def _wheel_requires_python(repo: Repo, entry: Entry, sha256: str) -> str | None:
    cached = _requires_python.get(sha256)
    if cached is not None:
        return cached or None
    value = ""
    try:
        with _open(repo, entry) as f, zipfile.ZipFile(f) as zf:
            name = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
            if name:
                value = HeaderParser().parsestr(zf.read(name).decode("utf-8", "replace")).get("Requires-Python", "")
    except (OSError, zipfile.BadZipFile):
        value = ""
    _requires_python.put(sha256, value)
    return value or None


def _published(request: Request) -> Iterator[tuple[Repo, str, Entry]]:
    """(repo, commit, entry) of every file under ``wheels/`` (``wheels/<variant>/<wheel>`` and the variants index)
    of a ``v<N>`` branch of a kernel repo the caller reads."""
    who = _caller(request)
    storage = hub(request).storage
    for repo_type, repo_id in storage.list_repos():
        if repo_type != "kernel":
            continue
        try:
            repo = storage.repo(repo_type, repo_id)
        except HubError:
            continue
        if not _may_read(who, repo):
            continue
        for branch, commit in sorted(repo.refs().branches.items()):
            if not _BRANCH.fullmatch(branch):
                continue
            for entry in repo.snapshot(commit).walk(WHEELS_DIR):
                if entry.type == "file":
                    yield repo, commit, entry


def _listed_as(path: str, label: str | None) -> list[str]:
    """The names the file at ``path`` (under ``wheels/``) has in the index of ``label`` (None: the main index)."""
    name = path.rsplit("/", 1)[1]
    own = wheel_label(name) if name.endswith(".whl") else None
    if own is not None:
        if label is None:
            return [name] + ([plain_name(name)] if own == "null" else [])
        return [plain_name(name)] if own == label else []
    return [name] if label is None and name.endswith("-variants.json") and path.count("/") == 1 else []


def _index(request: Request, label: str | None) -> dict[str, dict[str, IndexFile]]:
    """{project: {file name: file}}; the first repo (by id) to publish a file name keeps it."""
    projects: dict[str, dict[str, IndexFile]] = {}
    for repo, commit, entry in _published(request):
        name = entry.path.rsplit("/", 1)[1]
        names = _listed_as(entry.path, label)
        if not names:
            continue
        files = projects.setdefault(project_name(name.split("-", 1)[0]), {})
        sha = _sha256(repo, entry)
        rp = _wheel_requires_python(repo, entry, sha) if name.endswith(".whl") else None
        for listed in names:
            files.setdefault(listed, IndexFile(listed, repo, commit, entry, sha, rp))
    return projects


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    html_at = min((accept.find(t) for t in (PEP691_HTML, "text/html") if t in accept), default=len(accept))
    return PEP691_JSON in accept and accept.index(PEP691_JSON) < html_at


def _file_url(request: Request, f: IndexFile) -> str:
    """Content-addressed, so neither the URL nor the hub's request log names the (maybe private) repository."""
    return f"{str(request.base_url).rstrip('/')}/simple/-/files/{f.sha256}/{f.filename}"


def _root_page(request: Request, projects: list[str]) -> Response:
    if _wants_json(request):
        return JSONResponse(
            {"meta": {"api-version": "1.1"}, "projects": [{"name": p} for p in projects]}, media_type=PEP691_JSON
        )
    links = "".join(f'<a href="{html.escape(p)}/">{html.escape(p)}</a>\n' for p in projects)
    return HTMLResponse(
        f'<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.1">'
        f"<title>Simple index</title></head><body>\n{links}</body></html>\n"
    )


def _project_page(request: Request, project: str, files: dict[str, IndexFile]) -> Response:
    listed = sorted(files.values(), key=lambda f: f.filename)
    if _wants_json(request):
        versions = sorted({f.filename.split("-")[1] for f in listed})
        return JSONResponse(
            {
                "meta": {"api-version": "1.1"},
                "name": project,
                "versions": versions,
                "files": [
                    {
                        "filename": f.filename,
                        "url": _file_url(request, f),
                        "hashes": {"sha256": f.sha256},
                        "size": f.entry.size,
                        **({"requires-python": f.requires_python} if f.requires_python else {}),
                    }
                    for f in listed
                ],
            },
            media_type=PEP691_JSON,
        )
    links = []
    for f in listed:
        rp = f' data-requires-python="{html.escape(f.requires_python)}"' if f.requires_python else ""
        links.append(
            f'<a href="{html.escape(_file_url(request, f))}#sha256={f.sha256}"{rp}>{html.escape(f.filename)}</a><br>\n'
        )
    return HTMLResponse(
        f'<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.1">'
        f"<title>Links for {html.escape(project)}</title></head><body>\n"
        f"<h1>Links for {html.escape(project)}</h1>\n{''.join(links)}</body></html>\n"
    )


async def simple_root(request: Request) -> Response:
    label = request.path_params.get("label")
    projects = await run_in_threadpool(_index, request, label)
    return _root_page(request, sorted(projects))


async def simple_project(request: Request) -> Response:
    label = request.path_params.get("label")
    project = param(request, "project")
    if project != project_name(project):
        base = f"/simple/-/variant/{label}" if label else "/simple"
        return Response(status_code=301, headers={"Location": f"{base}/{project_name(project)}/"})
    projects = await run_in_threadpool(_index, request, label)
    if project not in projects:
        raise HubError(
            404,
            f"No project {project!r} on this index: no kernel repo you may read publishes its wheels "
            "(hubkernels upload puts them under wheels/ of v<N>).",
        )
    return _project_page(request, project, projects[project])


async def simple_file(request: Request) -> Response:
    filename = param(request, "filename")

    sha256 = param(request, "sha256")

    def find() -> IndexFile:
        for repo, commit, entry in _published(request):  # only repos the caller may read
            name = entry.path.rsplit("/", 1)[1]
            listed = {*_listed_as(entry.path, None), *_listed_as(entry.path, wheel_label(name))}
            if filename in listed and _sha256(repo, entry) == sha256:
                return IndexFile(filename, repo, commit, entry, sha256, None)
        raise HubError(
            404,
            f"No file {filename!r} with sha256 {sha256[:12]}... on this index (or its repository "
            "is private: send its token).",
        )

    found = await run_in_threadpool(find)
    headers = {
        "Content-Length": str(found.entry.size),
        "ETag": f'"{found.entry.etag}"',
        "Cache-Control": "public, max-age=31536000, immutable",
    }
    media = "application/json" if filename.endswith(".json") else "application/octet-stream"

    def chunks() -> Iterator[bytes]:
        with _open(found.repo, found.entry) as f:
            while chunk := f.read(_CHUNK):
                yield chunk

    return StreamingResponse(chunks(), headers=headers, media_type=media)


def simple_routes() -> list[Route]:
    """The index routes (see the module doc)."""
    return [
        Route("/simple/", simple_root, methods=["GET"]),
        Route("/simple/-/variant/{label}/", simple_root, methods=["GET"]),
        Route("/simple/-/variant/{label}/{project}/", simple_project, methods=["GET"]),
        Route("/simple/-/files/{sha256}/{filename}", simple_file, methods=["GET"]),
        Route("/simple/{project}/", simple_project, methods=["GET"]),
    ]
