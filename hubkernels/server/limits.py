"""Bounds on what one request may cost the local Hub: its body size and how long its client may take to send it.

`LimitsMiddleware` answers 413 to a body over the limit (at once when ``Content-Length`` announces it, otherwise
as soon as the bytes read pass it, so memory never grows by more than the limit) and 408 to a client that does not
finish its body by a total deadline (a trickle of bytes does not extend it). Limits fit what each client sends:
a Xet xorb or shard up to `xet.format.MAX_XORB_BYTES`, an LFS PUT its announced size, other bodies
``max_body_bytes``, and a request without credentials at most `ANONYMOUS_BODY_BYTES` (no anonymous request can
make the server parse a large body). `header_timeout_protocol` closes connections whose request headers do not
arrive in time.
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
from .xet.format import MAX_XORB_BYTES

_LFS_PUT_RE = re.compile(r"\.git/info/lfs/objects/[0-9a-f]{64}/(\d{1,15})$")
_CAS_UPLOAD_RE = re.compile(r"^/cas/v1/(xorbs/[^/]+/[0-9a-f]{64}|shards)$")
ANONYMOUS_BODY_BYTES = 1 << 20
"""The largest body a request without ``Authorization`` may send (anonymous routes take small forms only)."""
MIN_BODY_RATE = 1 << 20
"""Bytes per second a slow but honest client still reaches: a body's deadline is the read timeout plus its size
at this rate."""


def body_limit(method: str, path: str, has_credentials: bool, max_body_bytes: int) -> int:
    """The most bytes a request's body may hold, by route (one rule, used by `LimitsMiddleware`)."""
    lfs_put = _LFS_PUT_RE.search(path) if method == "PUT" else None
    if lfs_put:  # the grant in its query is its credential, checked before a byte is read
        return int(lfs_put.group(1))
    if method == "POST" and _CAS_UPLOAD_RE.match(path):  # a Xet token, checked before a byte is read
        return MAX_XORB_BYTES
    return max_body_bytes if has_credentials else min(max_body_bytes, ANONYMOUS_BODY_BYTES)


class LimitsMiddleware:
    """ASGI layer bounding request bodies (`body_limit`) and the time allowed to send them (``read_timeout_s``
    plus the body's size at `MIN_BODY_RATE`, counted from the request's start, not per chunk)."""

    def __init__(self, app: Any, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        has_credentials = any(k.lower() == b"authorization" for k, _ in headers)
        limit = body_limit(scope["method"], scope["path"], has_credentials, self.limits.max_body_bytes)
        declared = next((v for k, v in headers if k.lower() == b"content-length"), None)
        if declared is not None and (not declared.strip().isdigit() or int(declared) > limit):
            who = "" if has_credentials else " for a request without a token"
            await _refuse(
                send,
                413,
                f"The request body ({declared.decode('latin-1')[:20]} bytes) is over this hub's "
                f"limit of {limit} bytes{who}.",
            )
            return
        received = 0
        body_done = False
        allowed_s = self.limits.read_timeout_s + (int(declared) if declared is not None else limit) / MIN_BODY_RATE
        deadline = anyio.current_time() + allowed_s

        async def bounded_receive() -> dict:
            nonlocal received, body_done
            if body_done:  # later calls wait for a disconnect while the answer streams: no bound on those
                return await receive()
            try:
                with anyio.fail_after(max(deadline - anyio.current_time(), 0.0)):
                    message = await receive()
            except TimeoutError:
                raise HubError(
                    408,
                    f"The request body did not arrive within {allowed_s:.0f} s: send it without pauses.",
                    headers={"Connection": "close"},
                ) from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HubError(
                        413,
                        f"The request body is over this hub's limit of {limit} bytes.",
                        headers={"Connection": "close"},
                    )
            return message

        async def draining_send(message: dict) -> None:
            # An answer sent before a small body was read (a refusal: 401, 404 ...) reads the rest first, so the
            # client is not reset (TCP RST) by a close with its bytes unread; large bodies are not waited for.
            if (
                message["type"] == "http.response.start"
                and not body_done
                and declared is not None
                and int(declared) <= ANONYMOUS_BODY_BYTES
            ):
                try:
                    while not body_done:
                        await bounded_receive()
                except HubError:
                    pass
            await send(message)

        await self.app(scope, bounded_receive, draining_send)


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                (b"x-error-message", header_safe(message).encode("latin-1")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose next request's headers are not complete within
    ``timeout_s`` of the connection opening or of the previous answer (a trickle of bytes does not reset it)."""

    class HeaderTimeoutProtocol(H11Protocol):
        _header_timer: Any = None

        def connection_made(self, transport: Any) -> None:
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
