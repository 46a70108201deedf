"""Every Hub request the loader makes, through huggingface_hub, with retries and errors users can act on.

`api()` is the one place an `HfApi` is created (publish uses it too). Transient failures (5xx, 429, 408,
dropped connections) are retried a few times with a short back-off where huggingface_hub does not already
retry them (refs, the org overview, file bodies answered with 5xx); where it does (paginated listings, the
HEAD before a download, resuming a dropped transfer with Range) its own back-off is left alone, so they do not
stack. What still fails becomes a `DownloadError` naming the endpoint. huggingface_hub writes each file to
`<blob>.incomplete` and renames it only when complete, and the loader verifies every file afterwards, so an
interrupted download is never imported.
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..errors import HubkernelsError
from ..hub import api, endpoint  # noqa: F401  (re-exported: the loader's client)
from ..layout import BUILD_DIR
from ._local import TreeEntry

if TYPE_CHECKING:
    from huggingface_hub import HfApi

logger = logging.getLogger("hubkernels.fetch")

T = TypeVar("T")

#: Attempts per request (the first try included) and the wait before each retry, in seconds.
ATTEMPTS = 3
_BACKOFF = (0.25, 1.0, 2.0)
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


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
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - sorted below; anything else propagates unchanged
            dropped = isinstance(e, _transport_errors())
            retry = is_transient(e) and (retry_dropped or not dropped)
            if not retry and not dropped and not _unreachable(e) and not _xet_failure(e):
                raise  # not a network problem: the caller turns it into a precise error (404s and the like)
            if not retry or attempt + 1 == attempts:
                tries = f"failed {attempt + 1} times" if attempt else "failed"
                raise DownloadError(
                    f"{what} {tries} at {endpoint()} (last error: {_one_line(e)}). Nothing was loaded; files that "
                    "did not download completely are never used. Try again later, check HF_ENDPOINT and your "
                    "network, or load a copy already in the cache with HF_HUB_OFFLINE=1."
                ) from e
            wait = _BACKOFF[min(attempt, len(_BACKOFF) - 1)]
            logger.warning("%s: %s; retrying in %.2fs", what, _one_line(e), wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


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


def _etag_guard(response) -> None:  # type: ignore[no-untyped-def]
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


def _guard_client(client):  # type: ignore[no-untyped-def]
    hooks = client.event_hooks
    if _etag_guard not in hooks["response"]:
        client.event_hooks = {"request": list(hooks["request"]), "response": [*hooks["response"], _etag_guard]}
    return client


def install_etag_guard() -> None:
    """Add the ETag check to huggingface_hub's shared HTTP client, and to any it creates later (it makes a new
    one after a dropped connection). The check acts only inside `Remote.download`; other calls are untouched."""
    from huggingface_hub.utils import _http

    with _guard_lock:
        factory = getattr(_http, "_GLOBAL_CLIENT_FACTORY", None)
        if factory is not None and not getattr(factory, "hubkernels_guarded", False):

            def guarded():  # type: ignore[no-untyped-def]
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
        files = [e for e in entries if isinstance(e, RepoFile)]
        for e in files:
            if not _HASH.fullmatch(str(e.blob_id)) or (e.lfs and not _HASH.fullmatch(str(e.lfs.sha256))):
                raise DownloadError(
                    f"{endpoint()} listed {e.path} of {self.repo_id}@{commit[:7]} with a malformed "
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

        class _Quiet(tqdm):  # the per-file bars of hf_hub_download; ours counts files instead
            def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
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
