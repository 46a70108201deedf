"""The ``/_hubkernels/`` control routes: the request log, fault rules and trusted organizations over HTTP.

They exist only on a hub started in test mode (``create_app(test_mode=True)``, ``hubkernels serve --test-mode``;
otherwise 404) and answer only admin tokens (401 anonymous, 403 other tokens).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..common import hub, identity, json_object, param
from ..control import FAULT_KEYS
from ..storage import HubError


def _admin(request: Request) -> None:
    if not hub(request).test_mode:
        raise HubError(404, "Not found: the /_hubkernels/ control routes exist only on a hub started with --test-mode.")
    who = identity(request)
    if who is None:
        raise HubError(401, "The control routes need an admin token (hubkernels serve token create --admin).")
    if not who.admin:
        raise HubError(
            403,
            f"{who.user}'s token is not an admin token: the control routes need one "
            "(hubkernels serve token create --admin).",
        )


def control_requests(request: Request) -> Response:
    _admin(request)
    return JSONResponse(hub(request).control.requests())


def control_reset(request: Request) -> Response:
    _admin(request)
    hub(request).control.reset_requests()
    return JSONResponse({})


async def control_faults(request: Request) -> Response:
    _admin(request)
    control = hub(request).control
    if request.method == "DELETE":
        control.clear_faults()
        return JSONResponse({})
    if request.method == "GET":
        return JSONResponse([f.to_json() for f in control.faults()])
    body = await json_object(request, "fault rule", '{"path_regex": "/resolve/", "status": 500}')
    allowed = {"path_regex", *FAULT_KEYS}
    unknown = set(body) - allowed
    if unknown or "path_regex" not in body:
        raise HubError(
            400,
            f"A fault is a JSON object with path_regex and some of {sorted(allowed)}; unknown keys: {sorted(unknown)}.",
        )
    if body.get("headers") is not None and not isinstance(body["headers"], dict):
        raise HubError(400, "A fault's headers must be a JSON object of header names to values.")
    try:
        fault = control.add_fault(**body)
    except (TypeError, ValueError, OverflowError) as exc:
        raise HubError(400, str(exc)) from None
    return JSONResponse(fault.to_json())


def control_trust(request: Request) -> Response:
    """``PUT``/``DELETE /_hubkernels/trusted-orgs/{org}``: mark an organization a trusted kernel publisher or not."""
    _admin(request)
    org = param(request, "org")
    trusted = hub(request).control.trusted_orgs
    (trusted.add if request.method == "PUT" else trusted.discard)(org)
    return JSONResponse(sorted(trusted))
