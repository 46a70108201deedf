"""Build from source when no published variant fits this machine.

`hubkernels upload` publishes, next to `build/`, the kernel's source under `source/` on the same version branch:
build.toml, every file its tables name, the headers beside them and the Python package
(`hubkernels.publish.source_files`).
HF `kernels` reads only `build/`, so it never sees it. `get_kernel(..., build=True)` (or HUBKERNELS_BUILD=auto),
when nothing published fits, downloads `source/` of the very commit it resolved, checks every file against the
Hub's listing, builds it with `hubkernels.builder.build` and keeps the result in the cache:

    <cache>/kernels--org--name/hubkernels/builds/<commit>/<variant>/

The build runs in a temporary directory next to that and is renamed into place when complete, under a file
lock, so concurrent processes build once and all load that build. Its digest (metadata.json) is checked at every
load. The trust check runs before any of this (`install` does it first), exactly as for a published binary.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import digest as _digest
from .. import settings
from ..errors import DigestError, VariantNotFoundError
from ..layout import SOURCE_DIR
from ..metadata import Metadata
from ..variants import Resolution, resolve
from .cache import RepoState
from .remote import KernelNotFoundError, Remote

logger = logging.getLogger("hubkernels.fetch")


@dataclass(frozen=True)
class Built:
    """A variant built here from the published source, verified."""

    variant: str
    path: Path
    metadata_sha256: str
    warm: bool  # True when an earlier build was reused


def build_wanted(build: bool | None) -> bool:
    """`build=` if given, else HUBKERNELS_BUILD."""
    return settings.build_from_source() if build is None else bool(build)


def install_from_source(
    state: RepoState,
    remote: Remote,
    ref_commit: str,
    resolution: Resolution,
    *,
    backend: str | None,
    build: bool | None,
    force: bool,
    asked: tuple[int | None, str],
) -> Built:
    """The variant built here from `ref_commit`'s source (reusing an earlier build), or, when building was not
    asked for, a VariantNotFoundError with the trace and the one-line way to build."""
    where = f"{state.repo_id}@{asked[1]}" + ("" if asked[1] == ref_commit else f" (commit {ref_commit[:7]})")
    build_call = _build_call(state.repo_id, *asked)
    if not build_wanted(build):
        raise VariantNotFoundError(
            f"No published variant of {where} fits this machine:\n{resolution.describe()}\n"
            f"Build it here from the source published with it: {build_call} "
            "(or set HUBKERNELS_BUILD=auto)."
        )
    builds = state.root / "builds" / ref_commit
    if not force:
        found = _existing(builds, backend)
        if found is not None:
            return found
    if settings.offline():
        raise KernelNotFoundError(
            f"HF_HUB_OFFLINE=1 and {where} was never built on this machine; building it "
            f"needs its source from the Hub. Run {build_call} online once."
        )
    from filelock import FileLock

    builds.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(builds.parent / f"{ref_commit}.lock")):
        found = None if force else _existing(builds, backend)  # another process may have built it meanwhile
        if found is not None:
            return found
        if not force:
            _refuse_unloadable(builds, backend, where)
        source = _download_source(state, remote, ref_commit)
        logger.warning("%s: no published variant fits this machine; building it from source (%s)", where, source)
        variant = _build(source, builds, backend)
    built = _existing(builds, backend, variant)
    if built is None:
        _refuse_unloadable(builds, backend, where)  # raises: the build is there, but not for this machine
        raise AssertionError("unreachable")
    return Built(built.variant, built.path, built.metadata_sha256, False)


def _refuse_unloadable(builds: Path, backend: str | None, where: str) -> None:
    """Raise if an earlier build exists that this machine does not load (say, a CPU-only kernel on a GPU host)."""
    names = [p.name for p in builds.iterdir() if (p / "metadata.json").is_file()] if builds.is_dir() else []
    if names:
        raise VariantNotFoundError(
            f"{where} was built here from source as {', '.join(sorted(names))}, which this machine does not load:\n"
            f"{resolve(names, None, backend).describe()}\nThe source builds no other variant here; pass the backend "
            "it was built for (for example backend='cpu') to load it."
        )


def _build_call(repo_id: str, version: int | None, label: str) -> str:
    """The one line that loads what was asked for, building it: `hubkernels.get_kernel(..., build=True)`."""
    at = f"version={version}" if version is not None and label == f"v{version}" else f"revision={label!r}"
    return f"hubkernels.get_kernel({repo_id!r}, {at}, build=True)"


def _existing(builds: Path, backend: str | None, only: str | None = None) -> Built | None:
    """An earlier build of this commit that loads here, verified against its digest."""
    names = [p.name for p in builds.iterdir() if (p / "metadata.json").is_file()] if builds.is_dir() else []
    chosen = resolve([n for n in names if only in (None, n)], None, backend).chosen
    if chosen is None:
        return None
    path = builds / str(chosen)
    raw = (path / "metadata.json").read_bytes()
    meta = Metadata.read(path)
    problems = _digest.violations(path, meta.digest) if meta.digest else ["metadata.json has no digest"]
    if problems:
        raise DigestError(
            f"{path} (built here from source) does not match its metadata.json digest: "
            f"{'; '.join(problems)}. Delete {path} and load again to rebuild it."
        )
    return Built(str(chosen), path, hashlib.sha256(raw).hexdigest(), True)


def _download_source(state: RepoState, remote: Remote, commit: str) -> Path:
    """`source/` of `commit` in the cache, every file checked against the Hub's listing; returns its directory."""
    tree = remote.files_under(
        commit,
        SOURCE_DIR,
        "the source",
        (
            f"{state.repo_id}@{commit[:7]} publishes no source (no {SOURCE_DIR}/ directory), so it cannot be built "
            "here. Ask the publisher to upload again with `hubkernels upload`, which publishes it."
        ),
    )
    snapshot = state.repo_dir / "snapshots" / commit
    remote.download(commit, sorted(tree), state.cache, force=False, label=f"{state.repo_id} source")
    bad = [p for p, e in tree.items() if not e.matches((snapshot / p).read_bytes())]
    if bad:
        raise DigestError(
            f"the source of {state.repo_id}@{commit[:7]} in the cache differs from the Hub's listing "
            f"({', '.join(bad)}); delete {state.repo_dir} and load again."
        )
    return snapshot / SOURCE_DIR


def _build(source: Path, builds: Path, backend: str | None) -> str:
    """Build a copy of `source` in a temporary directory and rename the variant into `builds`; returns its name."""
    from ..builder import build

    with tempfile.TemporaryDirectory(dir=builds.parent, prefix=f".{builds.name}.") as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(source, work)  # real files, not the cache's symlinks: the builder writes next to them
        result = build(work, backend=backend, out_dir=Path(tmp) / "out")
        target = builds / str(result.variant)
        builds.mkdir(exist_ok=True)
        if target.exists():
            shutil.rmtree(target)  # force=True: replace the earlier build
        os.replace(result.path, target)
    return str(result.variant)
