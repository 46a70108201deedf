"""What every route of the local Hub shares: its state, error answers, body decoding and access checks.

Access follows the Hub: anyone reads public repositories; a private one answers only tokens of members of its
namespace (anonymous clients get 401 RepoNotFound, other users 404 RepoNotFound); writing needs a write token of
a member. An ``Authorization`` header with an unknown token is refused (401) on every route, public ones too.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .auth import GrantSigner, Identity, TokenError, TokenStore, hash_token
from .control import HubControl
from .storage import REPO_TYPES, CommitMeta, Entry, HubError, Repo, Storage, hub_date, matches_patterns

PLURALS = {f"{t}s": t for t in REPO_TYPES}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
"""The Hub's message for an unknown token (huggingface_hub then raises a plain 401, not RepoNotFound)."""
_UNSAFE_HEADER_RE = re.compile(r"[\x00-\x1f\x7f]")
_TOKEN_TEXT_RE = re.compile(r"^[\x21-\x7e]{1,1024}$")  # a credential is printable ASCII, never anything else


@dataclass
class Limits:
    """Bounds on what one request may cost the server."""

    max_body_bytes: int = 64 << 20  # JSON and NDJSON bodies; an LFS PUT is bounded by its announced size
    read_timeout_s: float = 60.0  # a client silent this long while sending its request is dropped


class Hub:
    """The state behind one app: storage, tokens, upload grants, the upload-mode rule, limits and the control."""

    def __init__(
        self,
        storage: Storage,
        control: HubControl,
        lfs_threshold: int | None,
        tokens: TokenStore,
        *,
        test_mode: bool = False,
        limits: Limits | None = None,
    ) -> None:
        self.storage = storage
        self.control = control
        self.lfs_threshold = lfs_threshold
        self.tokens = tokens
        self.grants = GrantSigner()
        self.test_mode = test_mode
        self.limits = limits or Limits()

    def upload_mode(self, path: str, size: int, lfs_globs: list[str]) -> str:
        """``lfs`` for files of ``lfs_threshold`` bytes or more, or matching a ``filter=lfs`` pattern of the
        repo's ``.gitattributes`` (``*.so``, ``*.safetensors`` ...); ``regular`` (inlined in the commit) otherwise,
        and always when ``lfs_threshold`` is None."""
        if self.lfs_threshold is None or size == 0:
            return "regular"
        return "lfs" if size >= self.lfs_threshold or matches_patterns(path, lfs_globs) else "regular"


# -- answers ----------------------------------------------------------------------------------------------------


def header_safe(text: str) -> str:
    """``text`` as a header value: latin-1, control characters (NUL, newlines) replaced by '?'."""
    return _UNSAFE_HEADER_RE.sub("?", text).encode("latin-1", "replace").decode("latin-1")


def error_response(exc: HubError) -> Response:
    headers = {"X-Error-Message": header_safe(exc.message), **{k: header_safe(v) for k, v in exc.headers.items()}}
    if exc.code:
        headers["X-Error-Code"] = exc.code
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=headers)


async def hub_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HubError)
    return error_response(exc)


def hub(request: Request) -> Hub:
    return request.app.state.hub


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def repo_url(request: Request, repo_type: str, repo_id: str) -> str:
    return f"{base_url(request)}/{URL_PREFIX[repo_type]}{repo_id}"


def param(request: Request, name: str) -> str:
    from urllib.parse import unquote

    return unquote(request.path_params[name])


async def json_object(request: Request, what: str = "request body", example: str = "{...}") -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}``); 400 for invalid JSON or any other JSON value. The
    credentials are checked before a byte of the body is read (401 for an unknown token)."""
    identity(request)
    body = await request.body()
    if not body.strip():
        return {}
    value = await run_in_threadpool(parse_json, body, what, example)
    if not isinstance(value, dict):
        raise HubError(400, f"The {what} must be a JSON object, e.g. {example}; got {type(value).__name__}.")
    return value


MAX_JSON_CONTAINERS = 200_000
"""The most objects and arrays one JSON or NDJSON body may hold (about 50 MiB once parsed)."""
_SURROGATE_ESCAPE_RE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_json(raw: bytes, what: str = "request body", example: str = "{...}") -> Any:
    """One JSON document, parsed with limits: at most `MAX_JSON_CONTAINERS` containers (413), finite numbers
    only, and text that is valid Unicode (no lone surrogates); 400 for anything else."""
    if raw.count(b"{") + raw.count(b"[") > MAX_JSON_CONTAINERS:
        raise HubError(413, f"The {what} holds more than {MAX_JSON_CONTAINERS} JSON objects and arrays: split it.")
    try:
        value = json.loads(raw, parse_float=_finite_float, parse_constant=_no_constant)
        if _SURROGATE_ESCAPE_RE.search(raw):
            json.dumps(value, ensure_ascii=False).encode("utf-8")  # a lone surrogate raises here
    except (ValueError, RecursionError):  # UnicodeError is a ValueError
        raise HubError(
            400,
            f"The {what} is not valid JSON: send a JSON object, e.g. {example} (finite numbers, valid Unicode text).",
        ) from None
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """``body[name]`` checked to be of ``kind`` (None and absent give ``default``); 400 otherwise."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise HubError(400, f"{name!r} must be a {names}, not {type(value).__name__}.")
    return value


def entries_json(entries: list[Entry], repo: Repo, commit: str, expand: bool = False) -> list[dict[str, Any]]:
    """Tree / paths-info entries as the Hub lists them; with ``expand``, each one's last commit, found for all of
    them in one bounded walk of the history (`Repo.last_commits`), never one ``git log`` per entry."""
    last = repo.last_commits(commit, [e.path for e in entries]) if expand else {}
    return [entry_json(e, repo, commit, last.get(e.path)) for e in entries]


def entry_json(entry: Entry, repo: Repo, commit: str, last: CommitMeta | None = None) -> dict[str, Any]:
    """A tree / paths-info entry as the Hub lists it (``xetHash`` for files stored through Xet)."""
    out: dict[str, Any] = {"type": entry.type, "oid": entry.oid, "size": entry.size, "path": entry.path}
    if entry.lfs:
        out["lfs"] = {"oid": entry.lfs.sha256, "size": entry.lfs.size, "pointerSize": entry.lfs.pointer_size}
        xet_hash = repo.storage.xet.file_for_sha256(entry.lfs.sha256) if repo.storage.xet else None
        if xet_hash:
            out["xetHash"] = xet_hash
    if last is not None:
        out["lastCommit"] = {"id": last.oid, "title": last.title, "date": hub_date(last.timestamp)}
    return out


# -- who is asking, and what may they do ------------------------------------------------------------------------


def identity(request: Request) -> Identity | None:
    """The token's identity, None without ``Authorization``; 401 for anything but a known bearer token."""
    digest = credential_digest(request)
    return None if digest is None else identity_of(request, digest)


def credential_digest(request: Request) -> str | None:
    """The `hash_token` digest of the request's bearer token, None without ``Authorization``; 401 for a header
    that is not ``Bearer <printable ASCII>``."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or not _TOKEN_TEXT_RE.match(token):
        raise HubError(401, INVALID_CREDENTIALS)
    return hash_token(token)


def identity_of(request: Request, digest: str) -> Identity:
    """The identity of the token with this digest; 401 when it is unknown or was revoked."""
    try:
        found = hub(request).tokens.lookup_digest(digest)
    except TokenError as exc:  # a damaged tokens.json: the operator's to fix, said on every authenticated call
        raise HubError(503, str(exc)) from None
    if found is None:
        raise HubError(401, INVALID_CREDENTIALS)
    return found


def need_identity(request: Request, action: str) -> Identity:
    found = identity(request)
    if found is None:
        raise HubError(
            401,
            f"You must be authenticated to {action}: send a write token (HF_TOKEN) of a member of "
            "the repository's namespace.",
        )
    return found


def readable(request: Request, repo: Repo) -> Repo:
    """The repo if the request may read it: public, or private and the token's user is a member of its namespace."""
    who = identity(request)
    if not repo.private:
        return repo
    if who is None:
        raise HubError(
            401,
            f"Repository not found: {repo.repo_type} {repo.repo_id} does not exist on this hub, or it "
            "is private and the request was not authenticated: send a token (HF_TOKEN).",
            "RepoNotFound",
        )
    if not who.member_of(namespace(repo.repo_id)):
        raise HubError(
            404,
            f"Repository not found: {repo.repo_type} {repo.repo_id} does not exist on this hub, or "
            f"{who.user} may not read it.",
            "RepoNotFound",
        )
    return repo


def writable(request: Request, repo: Repo, action: str = "write to this repository") -> Identity:
    """The identity of a request that may write to ``repo``: 401 anonymous, 403 read token or not a member."""
    readable(request, repo)
    who = need_identity(request, action)
    check_write(who, namespace(repo.repo_id), f"{action} ({repo.repo_id})")
    return who


def check_write(who: Identity, ns: str, action: str) -> None:
    if who.role != "write":
        raise HubError(
            403,
            f"Your token is read-only and cannot {action}: use a write token (hubkernels serve token create --write).",
        )
    if not who.member_of(ns):
        raise HubError(403, f"You don't have the rights to {action}: {who.user} is not a member of '{ns}'.")


def namespace(repo_id: str) -> str:
    return repo_id.split("/", 1)[0]


def api_repo(request: Request) -> Repo:
    """The repo named by ``/api/{t}/{org}/{name}/...`` (404 RepoNotFound if absent), not yet access-checked."""
    plural = param(request, "t")
    repo_type = PLURALS.get(plural)
    if repo_type is None:
        raise HubError(404, f"Unknown repo type {plural!r} in the URL: use one of {', '.join(PLURALS)}.")
    return hub(request).storage.repo(repo_type, f"{param(request, 'org')}/{param(request, 'name')}")


def file_repo(request: Request, repo_type: str) -> Repo:
    return hub(request).storage.repo(repo_type, f"{param(request, 'org')}/{param(request, 'name')}")


_REPO_PATH_RES = (
    re.compile(r"^/api/(models|datasets|spaces|kernels)/([^/]+)/([^/]+)"),
    re.compile(r"^/(datasets/|spaces/|kernels/)?([^/_][^/]*)/([^/]+?)(?:\.git/info/lfs/|/resolve/)"),
)


def private_path(storage: Storage, path: str) -> bool:
    """Whether a (decoded) request path names a private repository: such requests are logged without it."""
    for pattern in _REPO_PATH_RES:
        match = pattern.match(path)
        if match:
            kind = (match.group(1) or "").rstrip("/")
            repo_type = PLURALS.get(kind, "model" if kind in ("", "models") else kind[:-1])
            return storage.is_private(repo_type, f"{match.group(2)}/{match.group(3)}")
    return False
