"""Download what is missing of one variant and verify all of it against what was published; write the receipt."""

from __future__ import annotations

import base64
import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from .. import digest as _digest
from ..errors import DigestError, VariantNotFoundError
from ..layout import hub_variant_path, ships
from ..metadata import Metadata
from .cache import RepoState, TreeEntry, Verified, compile_sources
from .remote import KernelNotFoundError, Remote

if TYPE_CHECKING:
    from .resolve import Ref

logger = logging.getLogger("hubkernels.fetch")


def download_and_verify(
    state: RepoState, remote: Remote, ref: Ref, variant: str, tree: dict[str, TreeEntry] | None, force: bool
) -> tuple[str, Verified]:
    """Fetch what is missing of the variant, verify all of it, write the receipt; returns metadata's sha256 and
    what was verified."""
    if tree is not None:  # the variant's artifact where one is published (`artifact`), else its files one by one
        from .artifact import install_artifact

        unpacked, tree = install_artifact(state, remote, ref, variant, tree, force)
        if unpacked:
            return _verify(state, ref, variant, tree)
    vdir = state.variant_dir(ref.commit, variant)
    prefix = hub_variant_path(variant) + "/"
    if tree is not None:
        wanted = {p: e for p, e in tree.items() if p.startswith(prefix) and ships(p)}
        if prefix + "metadata.json" not in wanted:
            raise VariantNotFoundError(
                f"{state.repo_id}@{ref.commit[:7]}: {hub_variant_path(variant)} has no metadata.json, "
                "so it is not a loadable variant. Ask the publisher to re-upload it."
            )
        missing = [
            p
            for p, e in wanted.items()
            if force or not _has_size(state.variant_dir(ref.commit, variant) / p[len(prefix) :], e.size)
        ]
        if missing:
            remote.download(
                ref.commit,
                sorted(missing),
                state.cache,
                force=force,
                label=f"{state.repo_id} {variant}",
                etags={p: wanted[p].lfs_sha256 or wanted[p].blob_id for p in missing},
            )
    elif not (vdir / "metadata.json").is_file():
        raise KernelNotFoundError(f"HF_HUB_OFFLINE=1 and {vdir} is not in the cache. Load it once online first.")
    return _verify(state, ref, variant, tree)


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _verify(state: RepoState, ref: Ref, variant: str, tree: dict[str, TreeEntry] | None) -> tuple[str, Verified]:
    vdir = state.variant_dir(ref.commit, variant)
    repair = (
        f"Repair it with get_kernel({state.repo_id!r}, revision={ref.commit!r}, force_download=True) "
        f"(CLI: `hubkernels download {state.repo_id}@{ref.commit} --force`), or delete {state.repo_dir}."
    )
    state.drop_receipt(ref.commit, variant)
    prefix = hub_variant_path(variant) + "/"
    try:
        raw = (vdir / "metadata.json").read_bytes()
    except OSError as e:
        raise DigestError(f"{vdir}/metadata.json cannot be read ({e}). {repair}") from None
    meta_sha = hashlib.sha256(raw).hexdigest()
    entry = tree.get(prefix + "metadata.json") if tree is not None else None
    if entry is not None and not entry.matches(raw):
        raise DigestError(
            f"{vdir}/metadata.json differs from the one the Hub lists for commit {ref.commit[:7]}. {repair}"
        )
    metadata = Metadata.parse(raw, f"{vdir}/metadata.json")
    if metadata.digest:
        algorithm = metadata.digest.get("algorithm", "sha256")
        problems, hashes = _digest.check(vdir, metadata.digest)
    elif tree is not None:
        logger.warning(
            "%s %s: metadata.json has no digest; checking the files against the Hub's listing instead",
            state.repo_id,
            variant,
        )
        algorithm = "sha256"
        listed = {p[len(prefix) :]: e for p, e in tree.items() if p.startswith(prefix) and ships(p)}
        problems, hashes = _tree_violations(
            vdir, {p: e for p, e in listed.items() if p not in _digest.EXCLUDED_TOP_LEVEL}
        )
    else:
        problems = ["metadata.json has no digest, and offline there is no Hub listing to check the files against"]
    if problems:
        raise DigestError(
            f"{vdir} does not match what was published; refusing to load it:\n  - "
            + "\n  - ".join(problems)
            + f"\n{repair}"
        )
    if base64.b64decode(_digest.hash_file(vdir / "metadata.json", memo=True)).hex() != meta_sha:
        raise DigestError(f"{vdir}/metadata.json changed while it was being verified. {repair}")
    verified = Verified(algorithm, hashes)
    verified = Verified(algorithm, hashes, compile_sources(vdir, verified))
    state.save_receipt(ref.commit, variant, meta_sha, verified)
    return meta_sha, verified


def _tree_violations(vdir: Path, expected: dict[str, TreeEntry]) -> tuple[list[str], dict[str, str]]:
    """Check the files against the Hub's listing; returns (violations, sha256 of each file as it was checked)."""
    actual = dict(_digest.files(vdir))
    problems = [f"missing file {p}" for p in sorted(set(expected) - set(actual))]
    problems += [f"unexpected file {p}" for p in sorted(set(actual) - set(expected))]
    hashes: dict[str, str] = {}
    for p in sorted(set(expected) & set(actual)):
        data = actual[p].read_bytes()
        hashes[p] = _digest.hash_bytes(data)
        if not expected[p].matches(data):
            problems.append(f"{p} has been modified (hash mismatch)")
    return problems, hashes
