"""Every Hub request the loader makes, through huggingface_hub, with retries and errors users can act on.

`api()` is the one place an `HfApi` is created (publish uses it too). Transient failures (5xx, 429, 408,
dropped connections) are retried a few times with a short back-off where huggingface_hub does not already
retry them (refs, the org overview, file bodies answered with 5xx); where it does (paginated listings, the
HEAD before a download, resuming a dropped transfer with Range) its own back-off is left alone, so they do not
stack. What still fails becomes a `DownloadError` naming the endpoint, and so does an answer that is not one a
Hub sends (garbage behind a 200). Each call has a deadline (`settings.hub_deadline_s`, growing with the bytes
received) that its retries share, and no read waits longer than `settings.hub_read_timeout_s`: both enforced on
huggingface_hub's HTTP client, and passed to hf_xet as its own retry and timeout settings. huggingface_hub writes
each file to `<blob>.incomplete` and renames it only when complete, and the loader verifies every file
afterwards, so an interrupted download is never imported.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .. import settings
from ..errors import HubkernelsError
from ..hub import api, endpoint  # noqa: F401  (re-exported: the loader's client)
from ..layout import BUILD_DIR
from .cache import TreeEntry

if TYPE_CHECKING:
    from huggingface_hub import HfApi

logger = logging.getLogger("hubkernels.fetch")

T = TypeVar("T")

#: Attempts per request (the first try included) and the wait before each retry, in seconds.
ATTEMPTS = 3
_BACKOFF = (0.25, 1.0, 2.0)
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: Bytes per second a call must receive for them to extend its deadline by that second.
_MIN_RATE = 64 * 1024


class KernelNotFoundError(HubkernelsError, LookupError):
    """The repository, version or revision does not exist (the message lists what does)."""


class UntrustedKernelError(HubkernelsError, PermissionError):
    """The publisher is not trusted and the caller did not opt in (the message says how to)."""


class DownloadError(HubkernelsError, ConnectionError):
    """The Hub kept failing after retries; nothing partial was loaded."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):  # huggingface_hub 2.x uses httpx2, 1.x httpx
        try:
            found.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(found)


def is_transient(error: BaseException) -> bool:
    """Worth another try: a 5xx/429/408 answer, a dropped connection, or a download that came up short."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(error, (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError)):
        return False
    if isinstance(error, HfHubHTTPError):
        response = getattr(error, "response", None)
        return response is not None and response.status_code in _TRANSIENT_STATUS
    if isinstance(error, _transport_errors()):
        return True
    return isinstance(error, OSError) and "Consistency check failed" in str(error)


def _unreachable(error: BaseException) -> bool:
    """huggingface_hub already retried with its own back-off and gave up (the Hub could not be reached)."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    return isinstance(error, LocalEntryNotFoundError)


def call(what: str, fn: Callable[[], T], *, attempts: int = ATTEMPTS, retry_dropped: bool = True) -> T:
    """Run one Hub call, retrying transient failures; raise DownloadError naming `what` if they persist.

    What huggingface_hub already retries is not retried again, so back-offs don't stack: paginated listings
    pass `attempts=1`, and downloads `retry_dropped=False` (the client resumes a dropped transfer itself).
    """
    if _budget.get() is not None:  # inside another call: its deadline holds
        return _call(what, fn, attempts, retry_dropped)
    budget = _Budget(what)
    token = _budget.set(budget)
    try:
        return _within(budget, lambda: _call(what, fn, attempts, retry_dropped))
    finally:
        _budget.reset(token)


def _within(budget: _Budget, fn: Callable[[], T]) -> T:
    """Run `fn` in a worker thread and wait for it while `budget` lasts; past it, cancel hf_xet's transfers (its
    retries are its own, out of reach of the HTTP client's deadline) and raise the budget's DownloadError."""
    done = threading.Event()
    out: dict[str, object] = {}
    context = contextvars.copy_context()

    def work() -> None:
        try:
            out["value"] = context.run(fn)
        except BaseException as e:  # noqa: BLE001  (handed to the waiting thread)
            out["error"] = e
        finally:
            done.set()

    threading.Thread(target=work, name="hubkernels-hub-call", daemon=True).start()
    try:
        while not done.wait(min(1.0, max(0.01, budget.left()))):
            if budget.left() <= 0:
                _abort_xet()
                done.wait(5.0)  # the cancelled transfer lets go of its file locks, so a retry can start at once
                raise budget.error()
    except KeyboardInterrupt:
        _abort_xet()  # as huggingface_hub does on Ctrl-C in its own thread
        raise
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


def _abort_xet() -> None:
    """Cancel hf_xet's in-flight transfers (huggingface_hub's own way to stop them, as on Ctrl-C)."""
    try:
        from huggingface_hub.utils._xet import abort_xet_session
    except ImportError:
        return
    abort_xet_session()


def progress_bar():
    """huggingface_hub's tqdm, counting the bytes a download receives towards its call's deadline (a Xet transfer
    that keeps moving is not cut off)."""
    from huggingface_hub.utils import tqdm

    class Counting(tqdm):
        def __init__(self, *args, **kwargs):
            self._budget = _budget.get()
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            if self._budget is not None and n and n > 0:
                self._budget.received(int(n))
            return super().update(n)

    return Counting


def _call(what: str, fn: Callable[[], T], attempts: int, retry_dropped: bool) -> T:
    budget = _budget.get()
    for attempt in range(attempts):
        try:
            return fn()
        except HubkernelsError:
            raise
        except Exception as e:  # noqa: BLE001 - sorted below; anything else propagates unchanged
            if _malformed(e):
                raise DownloadError(
                    f"{endpoint()} answered {what} with something a Hub does not send ({_one_line(e)}). Nothing was "
                    "loaded. Check HF_ENDPOINT (a Hugging Face Hub, or `hubkernels serve`), or try again later."
                ) from e
            dropped = isinstance(e, _transport_errors())
            retry = is_transient(e) and (retry_dropped or not dropped)
            if not retry and not dropped and not _unreachable(e) and not _xet_failure(e):
                raise  # not a network problem: the caller turns it into a precise error (404s and the like)
            wait = _BACKOFF[min(attempt, len(_BACKOFF) - 1)]
            if budget is not None and budget.left() < wait:
                retry = False
            if not retry or attempt + 1 == attempts:
                tries = f"failed {attempt + 1} times" if attempt else "failed"
                raise DownloadError(
                    f"{what} {tries} at {endpoint()} (last error: {_one_line(e)}). Nothing was loaded; files that "
                    "did not download completely are never used. Try again later, check HF_ENDPOINT and your "
                    "network, or load a copy already in the cache with HF_HUB_OFFLINE=1."
                ) from e
            logger.warning("%s: %s; retrying in %.2fs", what, _one_line(e), wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def _malformed(error: BaseException) -> bool:
    """The Hub's answer could not be read as what a Hub sends (not JSON, or JSON of another shape); huggingface_hub's
    own errors (some are ValueErrors) are sorted by `call`."""
    return isinstance(error, (ValueError, KeyError, TypeError, AttributeError, IndexError)) and not type(
        error
    ).__module__.startswith("huggingface_hub")


class _Budget:
    """What is left of one Hub call's deadline: `settings.hub_deadline_s()` from its start, plus a second per
    `_MIN_RATE` bytes received (a large download that keeps moving goes on; a stall or a trickle does not)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.limit = settings.hub_deadline_s()
        self.end = time.monotonic() + self.limit

    def received(self, size: int) -> None:
        self.end += size / _MIN_RATE

    def left(self) -> float:
        return self.end - time.monotonic()

    def error(self) -> DownloadError:
        return DownloadError(
            f"{self.what} did not finish within {self.limit:g} s at {endpoint()}: the Hub stalled or answered too "
            "slowly. Nothing was loaded. Try again later, check HF_ENDPOINT and your network, or allow more time "
            "with HUBKERNELS_HUB_DEADLINE (seconds)."
        )


#: The deadline of the Hub call running in this thread (set by `call`); None outside the loader's calls.
_budget: ContextVar[_Budget | None] = ContextVar("hubkernels_hub_budget", default=None)


def _deadline_request(request) -> None:
    """httpx request hook: inside a call, refuse to start past its deadline, and wait no longer on the Hub than
    the read timeout or what is left of the deadline, whichever is shorter."""
    budget = _budget.get()
    if budget is None:
        return
    left = budget.left()
    if left <= 0:
        raise budget.error()
    cap = min(settings.hub_read_timeout_s(), left)
    asked = request.extensions.get("timeout") or {}
    request.extensions["timeout"] = {
        k: cap if asked.get(k) is None else min(asked[k], cap) for k in ("connect", "read", "write", "pool")
    }


def _deadline_response(response) -> None:
    """httpx response hook: inside a call, its body is read against the call's deadline."""
    budget = _budget.get()
    if budget is not None:
        response.stream = _budget_stream(type(response.stream).__mro__)(response.stream, budget)


def _budget_stream(_mro: tuple) -> type:
    """A byte stream of the client's httpx (httpx2 or httpx) that ends in the budget's error once it is spent."""
    base = next(c for c in _mro if c.__name__ == "SyncByteStream")
    cached = _STREAMS.get(base)
    if cached is None:

        class BudgetStream(base):  # type: ignore[misc, valid-type]
            def __init__(self, inner, budget: _Budget) -> None:
                self.inner, self.budget = inner, budget

            def __iter__(self):
                for chunk in self.inner:
                    self.budget.received(len(chunk))
                    if self.budget.left() <= 0:
                        raise self.budget.error()
                    yield chunk

            def close(self) -> None:
                self.inner.close()

        cached = _STREAMS[base] = BudgetStream
    return cached


_STREAMS: dict[type, type] = {}


def _xet_limits() -> None:
    """hf_xet's own timeouts and retries within the loader's deadline, unless HF_XET_* set them. hf_xet reads them
    once per process, when it starts, so they also hold for an upload later in the process: its read timeout is
    the whole deadline (30 s, not hub_read_timeout_s), which a server digesting a large xorb stays within."""
    deadline = f"{max(1, round(settings.hub_deadline_s()))}s"
    for name, value in (
        ("HF_XET_CLIENT_READ_TIMEOUT", deadline),
        ("HF_XET_CLIENT_CONNECT_TIMEOUT", f"{max(1, round(settings.hub_read_timeout_s()))}s"),
        ("HF_XET_CLIENT_RETRY_BASE_DELAY", "500ms"),
        ("HF_XET_CLIENT_RETRY_MAX_DURATION", deadline),
    ):
        os.environ.setdefault(name, value)


def _xet_failure(error: BaseException) -> bool:
    """hf_xet gave up on a transfer (it retries network faults itself; what is left is a broken answer)."""
    text = str(error)
    return isinstance(error, RuntimeError) and any(
        s in text for s in ("CAS Client Error", "File reconstruction", "Xet", "xet")
    )


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
#: (file, the ETag the listing says it has) while this thread downloads that file; None elsewhere.
_expected_etag: ContextVar[tuple[str, str | None] | None] = ContextVar("hubkernels_expected_etag", default=None)
_guard_lock = threading.Lock()


def _etag_guard(response) -> None:
    """httpx response hook: refuse a file's metadata answer whose ETag is not the file's hash, before
    huggingface_hub uses that ETag as a file name in the cache (it joins it to the blob folder unchecked)."""
    expected = _expected_etag.get()
    if expected is None or response.request.method != "HEAD":
        return
    raw = response.headers.get("X-Linked-Etag") or response.headers.get("ETag")
    if raw is None:
        return  # huggingface_hub refuses a missing ETag itself
    etag = raw.lstrip("W/").strip('"')  # exactly how huggingface_hub normalizes it
    path, want = expected
    if not _HASH.fullmatch(etag) or (want is not None and etag != want):
        raise DownloadError(
            f"{endpoint()} answered ETag {etag[:80]!r} for {path}, which is not the file's hash"
            + (f" ({want}, from the listing)" if want else "")
            + "; refusing to download it (huggingface_hub would "
            "use it as a file name and could write outside the cache). The server is broken or malicious: check "
            "HF_ENDPOINT."
        )


def _guard_client(client):
    hooks = client.event_hooks
    if _etag_guard not in hooks["response"]:
        client.event_hooks = {
            "request": [*hooks["request"], _deadline_request],
            "response": [*hooks["response"], _etag_guard, _deadline_response],
        }
    return client


def install_etag_guard() -> None:
    """Add the ETag check and the deadlines to huggingface_hub's shared HTTP client, and to any it creates later
    (it makes a new one after a dropped connection). They act only inside `call`; other requests are untouched."""
    from huggingface_hub.utils import _http

    with _guard_lock:
        factory = getattr(_http, "_GLOBAL_CLIENT_FACTORY", None)
        if factory is not None and not getattr(factory, "hubkernels_guarded", False):

            def guarded():
                return _guard_client(factory())

            guarded.hubkernels_guarded = True  # type: ignore[attr-defined]
            _http._GLOBAL_CLIENT_FACTORY = guarded
        _guard_client(_http.get_session())


class Remote:
    """The Hub side of one kernel repo; creates its HfApi on first use, so warm loads never import the client."""

    def __init__(self, repo_id: str) -> None:
        self.repo_id = repo_id
        self._api: HfApi | None = None

    @property
    def api(self) -> HfApi:
        if self._api is None:
            _xet_limits()
            install_etag_guard()
            self._api = api()
        return self._api

    def not_found(self, error: BaseException) -> KernelNotFoundError:
        return KernelNotFoundError(
            f"There is no kernel repository {self.repo_id} on {endpoint()} ({_one_line(error)}). Check the "
            "name (org/name) and HF_ENDPOINT; private repositories also need HF_TOKEN."
        )

    def refs(self) -> tuple[dict[str, str], dict[str, str]]:
        """(branches, tags) as {name: commit}: one request."""
        from huggingface_hub.errors import RepositoryNotFoundError

        try:
            refs = call(
                f"listing the versions of {self.repo_id}",
                lambda: self.api.list_repo_refs(self.repo_id, repo_type="kernel"),
            )
        except RepositoryNotFoundError as e:
            raise self.not_found(e) from None
        return ({b.name: b.target_commit for b in refs.branches}, {t.name: t.target_commit for t in refs.tags})

    def commit_of(self, revision: str) -> str | None:
        """The commit a revision (branch, tag, commit prefix) names, or None if the Hub does not know it."""
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

        try:
            info = call(
                f"resolving revision {revision!r} of {self.repo_id}",
                lambda: self.api.repo_info(self.repo_id, revision=revision, repo_type="kernel"),
            )
        except RevisionNotFoundError:
            return None
        except RepositoryNotFoundError as e:
            raise self.not_found(e) from None
        return info.sha

    def publisher_trusted(self, org: str) -> bool:
        """Does the Hub flag `org` as a trusted kernel publisher? (False if the org cannot be looked up.)"""
        from huggingface_hub.errors import HfHubHTTPError

        try:
            overview = call(
                f"checking whether {org} is a trusted publisher", lambda: self.api.get_organization_overview(org)
            )
        except HfHubHTTPError as e:  # e.g. 404 for a user namespace: not an organization, so not trusted
            logger.info("could not read the organization overview of %s: %s", org, _one_line(e))
            return False
        # huggingface_hub's Organization keeps unknown fields as attributes ("forward compatibility").
        return bool(getattr(overview, "trustedKernelPublisher", False))

    def build_tree(self, commit: str) -> dict[str, TreeEntry]:
        """Every file under build/ at `commit`, with size and hashes: one request for all variants."""
        return self.files_under(
            commit,
            BUILD_DIR,
            "the build variants",
            (
                f"{self.repo_id}@{commit[:7]} has no build/ directory, so it holds no kernel builds. Is this the right "
                "revision? Versions are the v<N> branches; `hubkernels upload` publishes there."
            ),
        )

    def files_under(self, commit: str, directory: str, what: str, missing: str) -> dict[str, TreeEntry]:
        """Every file under `directory` at `commit`, with size and hashes, in one listing; `missing` is the
        KernelNotFoundError's message when the directory does not exist. A malformed hash refuses the server."""
        files = self.list_files(commit, directory, what)
        if files is None:
            raise KernelNotFoundError(missing)
        return {e.path: TreeEntry(e.size, e.blob_id, e.lfs.sha256 if e.lfs else None) for e in files}

    def list_files(self, commit: str, directory: str, what: str) -> list | None:
        """The RepoFile entries under `directory` at `commit` (one request), None when it does not exist; a
        missing commit or repo is a KernelNotFoundError, a malformed hash a DownloadError."""
        from huggingface_hub import RepoFile
        from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

        def listing() -> list:
            return list(
                self.api.list_repo_tree(
                    self.repo_id, path_in_repo=directory, recursive=True, revision=commit, repo_type="kernel"
                )
            )

        try:
            entries = call(f"listing {what} of {self.repo_id}@{commit[:7]}", listing, attempts=1)
        except EntryNotFoundError:
            return None
        except RevisionNotFoundError:
            raise KernelNotFoundError(
                f"{self.repo_id} has no commit {commit} on {endpoint()}. Check the revision, or load a version: "
                "get_kernel(repo_id, version=N)."
            ) from None
        except RepositoryNotFoundError as e:
            raise self.not_found(e) from None
        files = [entry for entry in entries if isinstance(entry, RepoFile)]
        for file in files:
            if not _HASH.fullmatch(str(file.blob_id)) or (file.lfs and not _HASH.fullmatch(str(file.lfs.sha256))):
                raise DownloadError(
                    f"{endpoint()} listed {file.path} of {self.repo_id}@{commit[:7]} with a malformed "
                    "hash; refusing to download from it. The server is broken or malicious: check "
                    "HF_ENDPOINT."
                )
        return files

    def download(
        self,
        commit: str,
        paths: list[str],
        cache_dir: Path,
        *,
        force: bool,
        label: str,
        etags: Mapping[str, str] | None = None,
    ) -> None:
        """Fetch `paths` of `commit` into the cache (8 at a time), with one progress bar for all of them.

        Each file's ETag must be a 40/64-hex hash, and the one in `etags` (from the listing) where given."""
        from concurrent.futures import ThreadPoolExecutor

        from huggingface_hub.utils import tqdm

        bar: Any = progress_bar()

        class _Quiet(bar):  # the per-file bars of hf_hub_download; ours counts files instead
            def __init__(self, *args, **kwargs):
                kwargs["disable"] = True
                super().__init__(*args, **kwargs)

        def one(path: str) -> None:
            token = _expected_etag.set((path, (etags or {}).get(path)))
            try:
                call(
                    f"downloading {path} of {self.repo_id}@{commit[:7]}",
                    lambda: self.api.hf_hub_download(
                        self.repo_id,
                        path,
                        repo_type="kernel",
                        revision=commit,
                        cache_dir=cache_dir,
                        force_download=force,
                        tqdm_class=_Quiet,
                    ),
                    retry_dropped=False,
                )
            finally:
                _expected_etag.reset(token)

        install_etag_guard()

        with (
            tqdm(total=len(paths), desc=f"Downloading {label}", unit="file", leave=False) as bar,
            ThreadPoolExecutor(max_workers=min(8, max(1, len(paths)))) as pool,
        ):
            for future in [pool.submit(one, p) for p in paths]:
                future.result()
                bar.update(1)
