"""Running the local Hub: blocking (`serve`, the CLI) or in a daemon thread of this process (`BackgroundHub`)."""

from __future__ import annotations

import ipaddress
import json
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterable

import uvicorn

from ..errors import HubkernelsError  # noqa: E402
from .app import create_app
from .auth import TokenSpec, TokenStore
from .common import Limits
from .control import Fault, HubControl
from .limits import header_timeout_protocol


class ServeError(HubkernelsError, RuntimeError):
    """The hub refuses to start as asked (one line saying what to do)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(
            f"Cannot listen on {host}:{port}: {exc.strerror}. Pick another --port (0 picks a free one)."
        ) from None
    sock.listen(2048)  # connections made before uvicorn runs wait in the backlog instead of being refused
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _config(app: Any, log_level: str) -> uvicorn.Config:
    timeout = app.state.hub.limits.read_timeout_s
    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=30,
        http=header_timeout_protocol(timeout),
    )


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    root: Path | None = None,
    trusted_orgs: Iterable[str] = (),
    log_level: str = "warning",
    lfs_threshold: int | None = 1024,
    *,
    tokens: Iterable[TokenSpec] = (),
    test_mode: bool = False,
    limits: Limits | None = None,
    on_listening: Callable[[str, Path, bool], None] | None = None,
) -> None:
    """Run the hub until interrupted (Ctrl-C / SIGTERM). ``port`` 0 picks a free port; ``root`` None keeps the
    repositories in a temporary directory deleted on exit. Once the socket is bound, ``on_listening(url, root,
    has_token)`` is called (the CLI prints the URL there). Raises `ServeError` for a non-loopback ``host`` while
    no token exists (anyone could write)."""
    tokens = list(tokens)
    with tempfile.TemporaryDirectory(prefix="hubkernels-hub-") as tmp:
        store = Path(root) if root is not None else Path(tmp)
        store.mkdir(parents=True, exist_ok=True)
        if not is_loopback(host) and not TokenStore(store, tokens).configured():
            where = f"--root {store}" if root is not None else "--root DIR (and serve that --root)"
            raise ServeError(
                f"Refusing to serve on {host} with no token configured: create one first with "
                f"`hubkernels serve token create --user NAME --write {where}`."
            )
        app = create_app(
            store,
            trusted_orgs=trusted_orgs,
            lfs_threshold=lfs_threshold,
            tokens=tokens,
            test_mode=test_mode,
            limits=limits,
        )
        sock = _bind(host, port)
        if on_listening is not None:
            on_listening(_url(host, sock.getsockname()[1]), store.resolve(), app.state.hub.tokens.configured())
        uvicorn.Server(_config(app, log_level)).run(sockets=[sock])


class BackgroundHub:
    """The local hub on ``host:port`` (port 0: a free one) in a daemon thread of this process.

    A context manager; ``url`` is what to give ``HF_ENDPOINT``/``endpoint=``. `create_token` makes a token for
    the client (HF_TOKEN). ``requests()``/``reset_requests()`` read the request log and
    ``add_fault(...)``/``clear_faults()`` inject failures, in process (over HTTP too with ``test_mode`` and an
    admin token). ``root`` None keeps the repositories in a temporary directory removed by `stop`.
    """

    def __init__(
        self,
        root: Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        trusted_orgs: Iterable[str] = (),
        lfs_threshold: int | None = 1024,
        log_level: str = "warning",
        start: bool = True,
        tokens: Iterable[TokenSpec] = (),
        test_mode: bool = False,
        limits: Limits | None = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="hubkernels-hub-") if root is None else None
        self.root = Path(self._tmp.name if self._tmp else str(root)).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.app = create_app(
            self.root,
            trusted_orgs=trusted_orgs,
            lfs_threshold=lfs_threshold,
            tokens=tokens,
            test_mode=test_mode,
            limits=limits,
        )
        self.control: HubControl = self.app.state.hub.control
        self.host = host
        self._sock = _bind(host, port)
        self.port: int = self._sock.getsockname()[1]
        self.url = _url(host, self.port)
        self._server = uvicorn.Server(_config(self.app, log_level))
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    def start(self, timeout: float = 15.0) -> BackgroundHub:
        """Start serving and wait until the hub answers (raises RuntimeError if it does not within ``timeout``)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name=f"hubkernels-hub-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"The local hub did not start on {self.url}; see the uvicorn log above.")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving, close the socket and remove a temporary root."""
        if self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout)
            self._thread = None
        self._sock.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> BackgroundHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the in-process handle -----------------------------------------------------------------------------------

    def create_token(self, user: str, orgs: Iterable[str] = (), *, write: bool = False, admin: bool = False) -> str:
        """A new token of ``user`` (a member of ``orgs``), stored hashed under the root; returns its text."""
        return self.app.state.hub.tokens.create(user, orgs, write=write, admin=admin)

    def requests(self) -> list[dict[str, Any]]:
        """Requests served since the last reset: ``{method, path, query, status, range, fault}``, oldest first."""
        return self.control.requests()

    def reset_requests(self) -> None:
        self.control.reset_requests()

    def add_fault(self, path_regex: str, **rule: Any) -> Fault:
        """Make the next ``times`` requests whose decoded path matches ``path_regex`` fail (see `Fault` for the
        keys of ``rule``: status, body, truncate_after, stall_after, trickle_s, delay_s, headers, method...)."""
        return self.control.add_fault(path_regex, **rule)

    def clear_faults(self) -> None:
        self.control.clear_faults()

    def trust(self, org: str, trusted: bool = True) -> None:
        """Mark ``org`` a trusted kernel publisher (or not) in its organization overview."""
        (self.control.trusted_orgs.add if trusted else self.control.trusted_orgs.discard)(org)

    def get_json(self, path: str) -> Any:
        """GET ``path`` on the hub and decode the JSON answer (a plain urllib call, for quick checks)."""
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def __repr__(self) -> str:
        return f"BackgroundHub(url={self.url!r}, root={str(self.root)!r})"
