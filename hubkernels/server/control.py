"""Observability and fault injection for the local Hub.

Every request (except the ``/_hubkernels/`` control routes) is recorded as ``{method, path, query, status,
range, fault}``, so a test can assert "the second load made no request"; the log keeps the latest
``log_size`` requests, and a request to a private repository is recorded without its path or query. Faults
make matching requests fail on purpose: answer a status (500, 429 + ``Retry-After`` ...) or a body of their
own (garbage behind a 200), wait first, send the headers with the full ``Content-Length`` and then close the
connection mid-body (what a flaky network does to a download), stall mid-body with the connection open, trickle
the body a few bytes at a time, or send wrong headers (a ``Content-Length`` that is not the body's). A
fault's pattern is matched with a time bound; one that exceeds it is dropped.
"""

from __future__ import annotations

import collections
import itertools
import logging
import re
import sys
import threading
from dataclasses import asdict, dataclass, field, fields
from typing import Any
from urllib.parse import unquote

import anyio
import regex

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # Python 3.10: anyio's backport
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

    ``status``: answer this status with a JSON error instead of running the request; ``body``: answer this text
    instead (status 200 unless ``status`` says). ``truncate_after``: run the request but close the connection after
    this many body bytes; ``stall_after``: send this many body bytes, then hold the connection silent ``stall_s``
    seconds before closing it; ``trickle_s``: send the body 16 bytes at a time, this many seconds apart.
    ``headers``: added to the answer (replacing the app's own of the same name; a ``Content-Length`` also cuts the
    body to it, so the client gets a complete, short answer). ``delay_s``: wait this long first.
    ``times``: how many matching requests it hits (None: all of them). ``method``: only this method.
    """

    path_regex: str
    method: str | None = None
    status: int | None = None
    truncate_after: int | None = None
    delay_s: float = 0.0
    times: int | None = 1
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    stall_after: int | None = None
    stall_s: float = 300.0
    trickle_s: float = 0.0
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
        cuts = [k for k in ("truncate_after", "stall_after") if getattr(self, k) is not None]
        answers = self.status is not None or self.body is not None
        if not answers and not cuts and not self.delay_s and not self.trickle_s and not self.headers:
            raise ValueError(
                "A fault needs at least one of status, truncate_after or delay_s (or body, stall_after, trickle_s, "
                "headers)."
            )
        if answers and (cuts or self.trickle_s):
            raise ValueError("A fault either answers a status or body of its own or alters the app's, not both.")
        if len(cuts) > 1:
            raise ValueError("A fault either truncates the body or stalls it, not both.")
        if self.body is not None and (not isinstance(self.body, str) or len(self.body) > 1_000_000):
            raise ValueError("A fault's body is a string of at most 1,000,000 characters.")
        for name in ("stall_after", "truncate_after"):
            if getattr(self, name) is not None and int(getattr(self, name)) < 0:
                raise ValueError(f"{name} must be a number of bytes >= 0.")
        if not 0 <= float(self.stall_s) <= 3600 or not 0 <= float(self.trickle_s) <= 60:
            raise ValueError("stall_s must be between 0 and 3600 seconds, trickle_s between 0 and 60.")
        if self.status is not None and not 100 <= int(self.status) <= 599:
            raise ValueError(f"Invalid fault status {self.status}: use an HTTP status between 100 and 599.")
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


FAULT_KEYS = frozenset(f.name for f in fields(Fault)) - {"path_regex", "id"}
"""The keys a fault rule may have besides ``path_regex``."""


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

    def add_fault(self, path_regex: str, **rule: Any) -> Fault:
        """Install a fault rule (see `Fault` for the keys of ``rule``); rules are tried in the order they were added."""
        unknown = set(rule) - FAULT_KEYS
        if unknown:
            raise TypeError(
                f"Unknown fault keys {sorted(unknown)}; a fault has path_regex and some of {sorted(FAULT_KEYS)}."
            )
        rule["headers"] = dict(rule.get("headers") or {})
        for name in ("delay_s", "stall_s", "trickle_s"):
            if name in rule:
                rule[name] = float(rule[name])
        fault = Fault(path_regex, **rule)
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
        if fault is not None and (fault.status is not None or fault.body is not None):
            record.update(status=fault.status or 200, fault="status" if fault.body is None else "body")
            await _send_fault(send, fault)
            return
        cut_at = (
            None if fault is None else fault.truncate_after if fault.truncate_after is not None else fault.stall_after
        )
        sent = 0
        declared = _declared_length(fault)  # a Content-Length the fault sets: the body is cut to it
        ended = False

        async def send_wrapper(message: dict) -> None:
            nonlocal sent, ended
            if message["type"] == "http.response.start":
                record["status"] = message["status"]
                if fault is not None and fault.headers:
                    record["fault"] = record["fault"] or "headers"
                    message = dict(message, headers=_with_headers(message.get("headers", []), fault.headers))
            elif message["type"] == "http.response.body" and fault is not None:
                if ended:
                    return
                body = message.get("body", b"")
                if declared is not None:
                    body = body[: max(0, declared - sent)]
                    more = bool(message.get("more_body")) and sent + len(body) < declared
                    ended = not more
                    message = dict(message, body=body, more_body=more)
                if cut_at is not None and sent + len(body) >= cut_at and (body or not message.get("more_body")):
                    record["fault"] = "truncate" if fault.truncate_after is not None else "stall"
                    await send({"type": "http.response.body", "body": body[: cut_at - sent], "more_body": True})
                    if fault.stall_after is not None:
                        await anyio.sleep(fault.stall_s)
                    raise _Truncated()
                sent += len(body)
                if fault.trickle_s and body:
                    record["fault"] = "trickle"
                    for i in range(0, len(body), 16):
                        await send({"type": "http.response.body", "body": body[i : i + 16], "more_body": True})
                        await anyio.sleep(fault.trickle_s)
                    message = dict(message, body=b"")
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except BaseException as exc:
            if not _contains_truncated(exc):
                if record["status"] is None:
                    record["status"] = 500
                raise
            # Returning without finishing the body makes uvicorn close the connection.


def _declared_length(fault: Fault | None) -> int | None:
    """The Content-Length a fault puts on the app's answer, if it sets one."""
    for name, value in (fault.headers if fault is not None else {}).items():
        if name.lower() == "content-length" and value.strip().isdigit():
            return int(value)
    return None


def _with_headers(headers: list, extra: dict[str, str]) -> list:
    """The answer's headers with ``extra`` in place of any of the same names."""
    names = {k.lower().encode("latin-1") for k in extra}
    kept = [(k, v) for k, v in headers if k.lower() not in names]
    return kept + [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in extra.items()]


async def _send_fault(send: Any, fault: Fault) -> None:
    if fault.body is not None:
        body = fault.body.encode("utf-8", "surrogatepass")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    else:
        body = f'{{"error": "fault injected by the local hub (rule {fault.id})"}}'.encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-error-message", f"fault injected by the local hub (rule {fault.id})".encode()),
        ]
    headers = _with_headers(headers, fault.headers)
    await send({"type": "http.response.start", "status": int(fault.status or 200), "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _QuietInjectedTruncation(logging.Filter):
    """Drop uvicorn's error line for a response we cut short on purpose (our handlers always finish)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


def quiet_truncation_logs() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietInjectedTruncation) for f in logger.filters):
        logger.addFilter(_QuietInjectedTruncation())
