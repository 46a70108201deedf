"""Where kernels live, one rule each, and the only module that spells these paths: the files a build variant
ships, the `build/<variant>/` directories of a kernel root (and of a Hub version branch), `wheels/<variant>/` and
`source/` on the branch, a kernel's `torch-ext/`, the Hub's `org/name` repo ids, and how a file is put in place
(`write_atomic`).

A variant directory holds a `metadata.json`; it ships every file in it except bytecode caches (`__pycache__/`,
`*.pyc`), whether it is built, uploaded, digested, packed as a wheel, downloaded or verified.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import TypeGuard

from .errors import UsageError, VariantNotFoundError

#: The directory of a kernel root (and of a Hub version branch) that holds one directory per build variant.
BUILD_DIR = "build"
#: Where a version branch keeps its variant wheels (`<dist>-<version>-<tag>-<label>.whl`) and their variants index.
WHEELS_DIR = "wheels"
#: Where a version branch keeps the kernel's source: build.toml and the files it names (`hubkernels.fetch.source`).
SOURCE_DIR = "source"
#: The directory of a kernel root that holds its Python package when build.toml names no binding source.
TORCH_EXT_DIR = "torch-ext"
#: The file that makes a directory a variant (kernel-builder's metadata, with the digest).
METADATA = "metadata.json"


def ships(relpath: str) -> bool:
    """Whether the file at `relpath` (posix, relative to a variant directory or a repo) is shipped: every file but
    bytecode caches."""
    return "__pycache__" not in relpath.split("/") and not relpath.endswith(".pyc")


def shipped_files(variant_dir: str | Path) -> list[tuple[str, Path]]:
    """(posix relative path, path) of every file the variant at `variant_dir` ships, sorted by path."""
    root = Path(variant_dir)
    found: list[tuple[str, Path]] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                path = Path(entry.path)
                rel = path.relative_to(root).as_posix()
                if not ships(rel):
                    continue
                if entry.is_dir():
                    stack.append(path)
                else:
                    found.append((rel, path))
    return sorted(found, key=lambda item: item[1])


def build_dir(root: str | Path) -> Path:
    """`<root>/build`: the variants of the kernel at `root` (or of a downloaded snapshot), one directory each."""
    return Path(root) / BUILD_DIR


def write_atomic(
    path: str | Path,
    data: bytes | str,
    *,
    mode: int | None = None,
    durable: bool = False,
    tmp_dir: str | Path | None = None,
) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one, never a part: a temporary
    file (beside `path`, or in `tmp_dir` on the same file system) renamed into place. `durable` syncs it to disk
    first; `mode` sets its permissions before it appears (default: those of the file it replaces, else 0o644)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except OSError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=tmp_dir or path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def variant_dir(root: str | Path, variant: object) -> Path:
    """`<root>/build/<variant>`: where `hubkernels build` writes a variant of the kernel at `root` (and where a
    snapshot of a Hub version branch holds it)."""
    return build_dir(root) / str(variant)


def torch_ext_dir(root: str | Path) -> Path:
    """`<root>/torch-ext`: where a kernel keeps its Python package when build.toml names no binding source."""
    return Path(root) / TORCH_EXT_DIR


def source_dir(root: str | Path) -> Path:
    """`<root>/source`: the kernel's published source in a snapshot of a Hub version branch."""
    return Path(root) / SOURCE_DIR


# -- paths in a Hub kernel repo (posix, relative to the repo root) ----------------------------------------------


def hub_variant_path(variant: object) -> str:
    """`build/<variant>`: the directory of a variant on a version branch."""
    return f"{BUILD_DIR}/{variant}"


def hub_variant_file(variant: object, rel: str) -> str:
    """`build/<variant>/<rel>`: a file of a variant on a version branch (`rel` posix, relative to the variant)."""
    return f"{hub_variant_path(variant)}/{rel}"


def hub_wheel_dir(variant: object) -> str:
    """`wheels/<variant>`: where a version branch keeps a variant's wheel and its per-arch slices."""
    return f"{WHEELS_DIR}/{variant}"


def hub_wheel_file(variant: object, wheel_name: str) -> str:
    """`wheels/<variant>/<wheel_name>`: one artifact of a variant on a version branch."""
    return f"{hub_wheel_dir(variant)}/{wheel_name}"


def hub_source_file(rel: str) -> str:
    """`source/<rel>`: a source file on a version branch (`rel` posix, relative to the kernel root)."""
    return f"{SOURCE_DIR}/{rel}"


def hub_variant_of(path: str) -> str | None:
    """The variant a repo path belongs to (`build/<variant>/...` or `wheels/<variant>/...`), None for any other path
    (the card, `source/`, the variants index beside the wheel directories)."""
    parts = path.split("/")
    return parts[1] if len(parts) >= 3 and parts[0] in (BUILD_DIR, WHEELS_DIR) and parts[1] else None


def hub_under(path: str, directory: str) -> bool:
    """Whether repo path `path` lies under `directory` (`build`, `wheels/<variant>`, ...)."""
    return path.startswith(directory.rstrip("/") + "/")


def variant_dirs(path: str | Path) -> tuple[Path, dict[str, Path]]:
    """Where a local kernel's variants live: `path/build/*`, `path/*`, or `path` itself if it is one."""
    root = Path(path).expanduser().resolve()
    if (root / METADATA).is_file():
        return root.parent, {installed_variant(root) or root.name: root}
    for base in (root / BUILD_DIR, root):
        found = {p.name: p for p in sorted(base.iterdir()) if (p / METADATA).is_file()} if base.is_dir() else {}
        if found:
            return base, found
    raise VariantNotFoundError(
        f"No build variants under {root} (looked for */{METADATA} in {root / BUILD_DIR} and {root}). "
        f"Run `hubkernels build {path}` first."
    )


#: The file of an installed variant wheel's dist-info that names the Hub variant its package directory is.
VARIANT_RECORD = "HUBKERNELS_VARIANT"


def installed_variant(package_dir: Path) -> str | None:
    """The Hub variant name of a kernel package a variant wheel installed (`site-packages/ltx_kernels`), read from
    its dist-info's `VARIANT_RECORD`; None for anything else."""
    for info in sorted(package_dir.parent.glob(f"{package_dir.name}-*.dist-info")):
        try:
            name = (info / VARIANT_RECORD).read_text().strip()
        except OSError:
            continue
        if name and "/" not in name and name not in (".", ".."):
            return name
    return None


_REPO_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?$")
#: The Hub's rule for each part of `org/name`, in words (for error messages).
REPO_NAME_RULE = "letters, digits, '-', '_' and '.', at most 96 characters, no '--' or '..', not ending in '.git'"


def is_repo_name(part: object) -> TypeGuard[str]:
    """Whether `part` is a name the Hub accepts for an organization, a user or a repository (`REPO_NAME_RULE`)."""
    return (
        isinstance(part, str)
        and bool(_REPO_NAME.match(part))
        and "--" not in part
        and ".." not in part
        and not part.endswith(".git")
    )


def is_repo_id(repo_id: object) -> TypeGuard[str]:
    """Whether `repo_id` is a Hub repo id: `org/name`, both parts `is_repo_name`."""
    return isinstance(repo_id, str) and repo_id.count("/") == 1 and all(map(is_repo_name, repo_id.split("/")))


def check_repo_id(repo_id: object) -> str:
    """`repo_id` if it is the Hub's `org/name` (`is_repo_id`); a UsageError saying so otherwise."""
    if not is_repo_id(repo_id):
        raise UsageError(f"repo_id must look like 'org/name' ({REPO_NAME_RULE}), got {repo_id!r}")
    return repo_id


def wheel_label(name: str) -> str | None:
    """The PEP 825 variant label of a wheel file name (`...-manylinux_2_28_x86_64-cu130.whl` -> `cu130`), None for a
    wheel without one."""
    stem = name.removesuffix(".whl")
    parts = stem.split("-")
    return parts[-1] if name.endswith(".whl") and len(parts) == 6 and not parts[2][:1].isdigit() else None


def plain_name(name: str) -> str:
    """A variant wheel's name without its label: the name installers without variant support accept."""
    return name.removesuffix(".whl").rsplit("-", 1)[0] + ".whl" if wheel_label(name) else name


def variants_index_name(dist: str, version: int | str) -> str:
    """`<dist>-<version>-variants.json`: PEP 825's file describing every variant wheel of one version."""
    return f"{dist}-{version}-variants.json"


def hub_variants_index(dist: str, version: int | str) -> str:
    """`wheels/<dist>-<version>-variants.json`: the variants index of a version branch."""
    return f"{WHEELS_DIR}/{variants_index_name(dist, version)}"
