"""The HTTP surface of the local Hub: the endpoints ``huggingface_hub`` and HF ``kernels`` call, on Starlette.

Endpoint shapes, headers and error codes follow what the real client needs: typed errors carry ``X-Error-Code``
(``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``) and ``X-Error-Message``; resolve answers carry
``X-Repo-Commit`` and an ``ETag`` (git sha1, or sha256 for LFS files); and for files uploaded through Xet also
``X-Xet-Hash`` (the Xet protocol itself lives in the ``xet`` package). Access is checked as on the Hub (see
`common`); the routes live in the `routes` package (`repos`, `files`, `control`, `simple`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from starlette.applications import Starlette
from starlette.routing import Route

from . import xet
from .auth import TokenSpec, TokenStore
from .common import URL_PREFIX, Hub, Limits, api_repo, hub_error_handler, private_path
from .control import ControlMiddleware, HubControl, quiet_truncation_logs
from .limits import LimitsMiddleware
from .routes.control import control_faults, control_requests, control_reset, control_trust
from .routes.files import commit, lfs_routes, preupload, resolve_route
from .routes.repos import (
    agent_harnesses,
    branch,
    create_repo,
    create_tag,
    delete_repo,
    delete_tag,
    list_commits,
    list_refs,
    list_tree,
    organization_overview,
    paths_info,
    repo_info,
    update_settings,
    validate_yaml,
    whoami,
)
from .routes.simple import simple_routes
from .storage import HubError, Storage


def create_app(
    root: Path,
    *,
    trusted_orgs: Iterable[str] = (),
    lfs_threshold: int | None = 1024,
    tokens: Iterable[TokenSpec] = (),
    test_mode: bool = False,
    limits: Limits | None = None,
) -> Starlette:
    """A Hub-compatible ASGI app storing its repositories (and ``tokens.json``) under ``root``.

    ``trusted_orgs``: organizations whose overview says ``trustedKernelPublisher: true``. ``lfs_threshold``: files of
    this many bytes or more (or matching the repo's LFS patterns, e.g. ``*.so``) are uploaded as large files (Xet
    or the LFS batch API); None inlines every file in the commit. ``tokens``: tokens known in memory, beside
    those of ``root/tokens.json``. ``test_mode`` turns on the ``/_hubkernels/`` control routes (admin tokens only).
    ``app.state.hub.control`` is the in-process handle on the request log and fault rules.
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
    routes += xet.xet_routes(api_repo)
    routes += simple_routes()  # the package index over the repos' wheels (routes.simple)
    for repo_type, prefix in URL_PREFIX.items():
        if prefix:
            routes += lfs_routes(prefix, repo_type)
            routes.append(resolve_route(prefix, repo_type))
    routes += lfs_routes("", "model")
    routes.append(resolve_route("", "model"))

    storage = Storage(Path(root))
    xet.install(storage)
    control = HubControl(set(trusted_orgs))
    state = Hub(storage, control, lfs_threshold, TokenStore(storage.root, tokens), test_mode=test_mode, limits=limits)
    app = Starlette(routes=routes, exception_handlers={HubError: hub_error_handler})
    app.state.hub = state
    quiet_truncation_logs()
    app.add_middleware(_LimitsLayer, limits=state.limits)
    app.add_middleware(_ControlLayer, control=control, is_private=lambda path: private_path(storage, path))
    return app


class _ControlLayer(ControlMiddleware):
    """`ControlMiddleware` in the shape Starlette's ``add_middleware`` builds (outermost user middleware)."""

    def __init__(self, app: Any, control: HubControl, is_private: Any) -> None:
        super().__init__(app, control, is_private)


class _LimitsLayer(LimitsMiddleware):
    """`LimitsMiddleware` in the shape ``add_middleware`` builds (inside the control layer)."""

    def __init__(self, app: Any, limits: Limits) -> None:
        super().__init__(app, limits)
