"""Observability and fault injection for the local Hub.

Every request (except the ``/_hubkernels/`` control routes) is recorded as ``{method, path, query, status,
range, fault}``, so a test can assert "the second load made no request"; the log keeps the latest
``log_size`` requests, and a request to a private repository is recorded without its path or query. Faults
make matching requests fail on purpose: answer a status (500, 429 + ``Retry-After`` ...), wait first, or send
the headers with the full ``Content-Length`` and then close the connection mid-body, which is what a flaky
network does to a download. A fault's pattern is matched with a time bound; one that exceeds it is dropped.
"""

from __future__ import annotations

import collections
import itertools
import logging
import re
import threading
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote

import anyio
import regex

try:
    from builtins import BaseExceptionGroup
except ImportError:  # Python 3.10: anyio's backport
    from exceptiongroup import BaseExceptionGroup

CONTROL_PREFIX = "/_hubkernels/"
PRIVATE_PATH = "<private repo>"
"""What the request log holds instead of the path of a request to a private repository."""
MAX_FAULT_PATTERN = 256
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
_HEADER_VALUE_RE = re.compile(r"^[\x20-\x7e]{0,1000}$")
"""The longest ``path_regex`` a fault may have."""
_MATCH_TIMEOUT_S = 0.05

_fault_ids = itertools.count(1)


@dataclass
class Fault:
    """A rule that makes requests whose decoded path matches ``path_regex`` (``re.search``) misbehave.

    ``status``: answer this status with a JSON error instead of running the request. ``truncate_after``: run the
    request but close the connection after this many body bytes. ``delay_s``: wait this long first (alone or with
    either). ``times``: how many matching requests it hits (None: all of them). ``method``: only this method.
    """

    path_regex: str
    method: str | None = None
    status: int | None = None
    truncate_after: int | None = None
    delay_s: float = 0.0
    times: int | None = 1
    headers: dict[str, str] = field(default_factory=dict)
    id: int = field(default_factory=lambda: next(_fault_ids))

    def __post_init__(self) -> None:
        if not isinstance(self.path_regex, str) or len(self.path_regex) > MAX_FAULT_PATTERN:
            raise ValueError(f"path_regex must be a string of at most {MAX_FAULT_PATTERN} characters.")
        try:
            self._regex = regex.compile(self.path_regex)
        except (regex.error, TypeError, ValueError) as exc:
            raise ValueError(f"Invalid path_regex {self.path_regex!r}: {exc}") from None
        if self.method is not None:
            self.method = self.method.upper()
        if self.status is None and self.truncate_after is None and not self.delay_s:
            raise ValueError("A fault needs at least one of status, truncate_after or delay_s.")
        if self.status is not None and self.truncate_after is not None:
            raise ValueError("A fault either answers a status or truncates the body, not both.")
        if self.status is not None and not 100 <= int(self.status) <= 599:
            raise ValueError(f"Invalid fault status {self.status}: use an HTTP status between 100 and 599.")
        if self.truncate_after is not None and int(self.truncate_after) < 0:
            raise ValueError("truncate_after must be a number of bytes >= 0.")
        if self.times is not None and int(self.times) < 1:
            raise ValueError("times must be >= 1, or null for every matching request.")
        for name, value in (self.headers or {}).items():  # sent as they are: a bad one would break the answer
            if (
                not isinstance(name, str)
                or not isinstance(value, str)
                or not _HEADER_NAME_RE.match(name)
                or not _HEADER_VALUE_RE.match(value)
            ):
                raise ValueError(
                    f"Invalid fault header {name!r}: names are HTTP tokens, values printable ASCII (no newline)."
                )
        if self.method is not None and not _HEADER_NAME_RE.match(self.method):
            raise ValueError(f"Invalid fault method {self.method!r}: use an HTTP method such as GET.")
        if not 0 <= float(self.delay_s) <= 3600:
            raise ValueError("delay_s must be between 0 and 3600 seconds.")

    def matches(self, method: str, path: str) -> bool:
        """Whether the rule applies; raises TimeoutError when the pattern takes too long on this path."""
        return (self.method is None or self.method == method) and self._regex.search(
            path, timeout=_MATCH_TIMEOUT_S
        ) is not None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


class HubControl:
    """The request log and the fault rules of one hub; thread-safe, shared by the app and its Python handle."""

    def __init__(self, trusted_orgs: set[str] | None = None, log_size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=log_size)
        self._faults: list[Fault] = []
        self.trusted_orgs: set[str] = set(trusted_orgs or ())

    def requests(self) -> list[dict[str, Any]]:
        """The requests served since the last reset, oldest first."""
        with self._lock:
            return [dict(r) for r in self._requests]

    def reset_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def add_fault(
        self,
        path_regex: str,
        *,
        method: str | None = None,
        status: int | None = None,
        truncate_after: int | None = None,
        delay_s: float = 0.0,
        times: int | None = 1,
        headers: dict[str, str] | None = None,
    ) -> Fault:
        """Install a fault rule (see `Fault`); rules are tried in the order they were added."""
        fault = Fault(
            path_regex,
            method=method,
            status=status,
            truncate_after=truncate_after,
            delay_s=float(delay_s),
            times=times,
            headers=dict(headers or {}),
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in list(self._faults):
                try:
                    hit = fault.matches(method, path)
                except TimeoutError:  # a pattern that backtracks without end: it never slows a request again
                    logging.getLogger("uvicorn.error").warning(
                        "Dropped fault rule %s: its pattern took over %s s", fault.id, _MATCH_TIMEOUT_S
                    )
                    self._faults.remove(fault)
                    continue
                if hit:
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def _record(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._requests.append(record)


class _Truncated(Exception):
    """Raised inside the app's ``send`` to stop a response mid-body."""


def _contains_truncated(exc: BaseException) -> bool:
    if isinstance(exc, _Truncated):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_contains_truncated(e) for e in exc.exceptions)
    return False


class ControlMiddleware:
    """Outermost ASGI layer: routes on the raw (still percent-encoded) path, logs requests, injects faults.

    Routing on the raw path keeps ``%2F`` inside one segment, so a revision like ``refs%2Fpr%2F1`` or a branch
    ``feature%2Fx`` stays one route parameter; handlers unquote their parameters.
    """

    def __init__(self, app: Any, control: HubControl, is_private: Any = None) -> None:
        self.app = app
        self.control = control
        self.is_private = is_private or (lambda path: False)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("raw_path") or scope["path"].encode()
        scope = dict(scope, path=raw.decode("utf-8", "replace"))
        path = unquote(scope["path"])
        method = scope["method"]
        if path.startswith(CONTROL_PREFIX):
            await self.app(scope, receive, send)
            return
        headers = dict((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", []))
        private = self.is_private(path)
        record: dict[str, Any] = {
            "method": method,
            "path": PRIVATE_PATH if private else path,
            "query": "" if private else scope.get("query_string", b"").decode("latin-1"),
            "status": None,
            "range": headers.get("range"),
            "fault": None,
        }
        # Logged on arrival and updated before each part of the answer goes out, so a client that got its
        # answer always finds the request, with its status, in the log.
        self.control._record(record)
        fault = self.control._take_fault(method, path)
        if fault is not None and fault.delay_s:
            record["fault"] = "delay"
            await anyio.sleep(fault.delay_s)
        if fault is not None and fault.status is not None:
            record.update(status=fault.status, fault="status")
            await _send_fault(send, fault)
            return
        truncate_after = fault.truncate_after if fault is not None else None
        sent = 0

        async def send_wrapper(message: dict) -> None:
            nonlocal sent
            if message["type"] == "http.response.start":
                record["status"] = message["status"]
            elif message["type"] == "http.response.body" and truncate_after is not None:
                body = message.get("body", b"")
                if sent + len(body) >= truncate_after and (body or not message.get("more_body")):
                    record["fault"] = "truncate"
                    await send({"type": "http.response.body", "body": body[: truncate_after - sent], "more_body": True})
                    raise _Truncated()
                sent += len(body)
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except BaseException as exc:
            if not _contains_truncated(exc):
                if record["status"] is None:
                    record["status"] = 500
                raise
            # Returning without finishing the body makes uvicorn close the connection.


async def _send_fault(send: Any, fault: Fault) -> None:
    body = f'{{"error": "fault injected by the local hub (rule {fault.id})"}}'.encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-error-message", f"fault injected by the local hub (rule {fault.id})".encode()),
    ]
    headers += [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in fault.headers.items()]
    await send({"type": "http.response.start", "status": int(fault.status), "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _QuietInjectedTruncation(logging.Filter):
    """Drop uvicorn's error line for a response we cut short on purpose (our handlers always finish)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


def quiet_truncation_logs() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietInjectedTruncation) for f in logger.filters):
        logger.addFilter(_QuietInjectedTruncation())
