"""Bounds on what one request may cost the local Hub: its body size and how long its client may stay silent.

`LimitsMiddleware` answers 413 to a body over the limit (at once when ``Content-Length`` announces it, otherwise
as soon as the bytes read pass it, so memory never grows by more than the limit) and 408 to a client that stops
sending its body. `header_timeout_protocol` closes connections whose request headers do not arrive in time.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .common import Limits, header_safe
from .storage import HubError

_LFS_PUT_RE = re.compile(r"\.git/info/lfs/objects/[0-9a-f]{64}/(\d{1,15})$")


class LimitsMiddleware:
    """ASGI layer bounding request bodies (JSON/NDJSON bodies by ``max_body_bytes``, an LFS PUT by the size its
    URL announces) and the silence allowed between body chunks (``read_timeout_s``)."""

    def __init__(self, app: Any, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.max_body_bytes
        lfs_put = _LFS_PUT_RE.search(scope["path"]) if scope["method"] == "PUT" else None
        if lfs_put:
            limit = int(lfs_put.group(1))
        declared = next((v for k, v in scope.get("headers", []) if k.lower() == b"content-length"), None)
        if declared is not None and (not declared.strip().isdigit() or int(declared) > limit):
            await _refuse(send, 413, f"The request body ({declared.decode('latin-1')[:20]} bytes) is over this hub's "
                                     f"limit of {limit} bytes.")
            return
        received = 0
        body_done = False
        timeout = self.limits.read_timeout_s

        async def bounded_receive() -> dict:
            nonlocal received, body_done
            if body_done:  # later calls wait for a disconnect while the answer streams: no bound on those
                return await receive()
            try:
                with anyio.fail_after(timeout):
                    message = await receive()
            except TimeoutError:
                raise HubError(408, f"The request body stalled for {timeout:g} s: send it without pauses.",
                               headers={"Connection": "close"}) from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HubError(413, f"The request body is over this hub's limit of {limit} bytes.",
                                   headers={"Connection": "close"})
            return message

        await self.app(scope, bounded_receive, send)


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"), (b"x-error-message", header_safe(message).encode("latin-1"))]})
    await send({"type": "http.response.body", "body": body})


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose next request's headers are not complete within
    ``timeout_s`` of the connection opening or of the previous answer (a trickle of bytes does not reset it)."""

    class HeaderTimeoutProtocol(H11Protocol):
        _header_timer: Any = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # the request line and headers are in; body silence is LimitsMiddleware's

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state in (h11.IDLE, h11.DONE):
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if self.conn.their_state in (h11.IDLE, h11.DONE) and (self.cycle is None or self.cycle.response_complete):
                if not self.transport.is_closing():
                    self.transport.close()

    return HeaderTimeoutProtocol
