"""Publish built variants to a Hub kernel repo: `upload()`, which `hubkernels upload` (`hubkernels.cli.upload`) runs.

Layout on the Hub (kernel-builder's): the variants go to branch `v<version>` under `build/<variant>/`; `main` holds
the model card (README.md) generated from metadata.json and the package's `__all__`. Each upload replaces the files
of the variants it uploads (deleting files they no longer have) and leaves every other variant on the branch alone.
The kernel's source (build.toml and the files it names) goes to `source/` on the same branch, so a machine no
variant fits can build that commit (`get_kernel(..., build=True)`). Every upload is also tagged `v<version>-<first
7 hex of the commit>`, an immutable name for exactly what was published (uploading the same files again makes no
commit and so reuses the tag).

Each variant also goes to `wheels/<variant>/` on the branch as one artifact, in the same commit as its Hub-layout
files: its PEP 825 variant wheel (`hubkernels.builder.wheel`; a wheel without label for a variant PEP 825 cannot
describe), beside `wheels/<dist>-<version>-variants.json`, the index of every variant wheel on the branch.
`hubkernels serve` lists the labelled wheels as a package index; `get_kernel` downloads the one of the variant it
chose instead of its files one by one (`hubkernels.fetch.artifact`).
"""

from __future__ import annotations

import ast
import json
import logging
import re
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .builder.slice import slice_variant, sm_of
from .builder.wheel import WheelVariant, pack, slice_label, variant_json, variant_or_none, wheel_variant
from .config import BuildConfig, load_config
from .digest import violations
from .errors import HubkernelsError, UsageError
from .layout import (
    BUILD_DIR,
    SOURCE_DIR,
    WHEELS_DIR,
    hub_source_file,
    hub_under,
    hub_variant_file,
    hub_variant_of,
    hub_variant_path,
    hub_variants_index,
    hub_wheel_dir,
    hub_wheel_file,
    shipped_files,
    variant_dirs,
)
from .metadata import Metadata
from .system import Variant

logger = logging.getLogger("hubkernels.publish")

#: huggingface_hub accepts commits to `kernel` repos from 2.3 on (2.0-2.2 raise "Invalid repo type").
MIN_HUB_CLIENT = (2, 3)
#: The Hub rejects commits with more operations than this; bigger uploads are split into several commits.
MAX_OPERATIONS_PER_COMMIT = 1000

_HEADERS = {".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".inl", ".ipp"}

#: License ids the Hub's card metadata knows, by lowercase SPDX id (others are written as `other`).
_HUB_LICENSES = {
    "apache-2.0",
    "mit",
    "bsd-2-clause",
    "bsd-3-clause",
    "bsl-1.0",
    "gpl-2.0",
    "gpl-3.0",
    "lgpl-2.1",
    "lgpl-3.0",
    "agpl-3.0",
    "mpl-2.0",
    "cc-by-4.0",
    "cc-by-sa-4.0",
    "cc0-1.0",
    "unlicense",
    "isc",
}


class PublishError(HubkernelsError):
    """The build cannot be published as it is (the message says what to fix)."""


@dataclass(frozen=True)
class UploadResult:
    """What an upload did. `commit` is the head of `branch` afterwards; `changed` is False if nothing differed."""

    repo_id: str
    branch: str
    version: int
    commit: str
    tag: str | None
    variants: tuple[str, ...]
    deleted: tuple[str, ...]
    changed: bool
    url: str
    wheels: tuple[str, ...] = ()  # the artifacts committed under wheels/ (variant wheels and per-arch slices)


def check_client() -> None:
    """Raise if the installed huggingface_hub cannot write kernel repos."""
    from importlib.metadata import version

    installed = version("huggingface_hub")
    parts = tuple(int(p) for p in re.findall(r"\d+", installed)[:2])
    if parts < MIN_HUB_CLIENT:
        raise PublishError(
            f"uploading kernel repos needs huggingface_hub >= {MIN_HUB_CLIENT[0]}.{MIN_HUB_CLIENT[1]} "
            f"(installed: {installed}). Upgrade: pip install -U 'huggingface_hub>=2.3'"
        )


def _shipped_files(variant_dir: Path) -> list[Path]:
    return [p for _, p in shipped_files(variant_dir)]


def _batches(groups: list[list], limit: int = MAX_OPERATIONS_PER_COMMIT) -> list[list]:
    """Pack per-variant operation lists into commits of at most `limit`, keeping a variant whole when it fits."""
    out: list[list] = []
    current: list = []
    for group in groups:
        if current and len(current) + len(group) > limit:
            out.append(current)
            current = []
        for op in group:
            if len(current) == limit:
                out.append(current)
                current = []
            current.append(op)
    if current:
        out.append(current)
    return out


def upload(
    path: str | Path = ".",
    *,
    repo_id: str | None = None,
    variants: Sequence[str] | None = None,
    private: bool = False,
    create_tag: bool = True,
    source: bool = True,
) -> UploadResult:
    """Upload the built variants of the kernel at `path` (default: all of build/), its source (unless
    `source=False`) and the card; see the module doc.

    `repo_id` defaults to `[general.hub] repo-id` of build.toml. Returns what was committed and tagged.
    """

    from .hub import api as make_api

    check_client()
    config = load_config(path, validate_files=False)
    repo_id = repo_id or config.general.hub.repo_id
    if not repo_id:
        raise UsageError(
            f"no repo id: pass --repo-id ORG/NAME (or repo_id=) or set [general.hub] repo-id in {config.file}"
        )
    built = _built_variants(path, variants)
    metas = {name: Metadata.read(d) for name, d in built.items()}
    _check_builds(config, built, metas)
    branch = config.branch
    api = make_api()
    repo_url = api.create_repo(repo_id, repo_type="kernel", private=private, exist_ok=True)
    branches = {b.name: b.target_commit for b in api.list_repo_refs(repo_id, repo_type="kernel").branches}
    new_branch = branch not in branches
    if new_branch:
        api.create_branch(repo_id, branch=branch, revision="main", repo_type="kernel", exist_ok=True)
        branches[branch] = branches["main"]
    remote = _remote_files(api, repo_id, branch, BUILD_DIR)
    source_ops = _source_ops(api, repo_id, branch, config) if source else []
    wheels_tmp = tempfile.TemporaryDirectory(prefix="hubkernels-wheels-")
    try:
        return _commit_upload(
            api,
            config,
            repo_id,
            repo_url,
            branch,
            branches,
            new_branch,
            remote,
            source_ops,
            built,
            metas,
            Path(wheels_tmp.name),
            create_tag=create_tag,
        )
    finally:
        wheels_tmp.cleanup()


def _commit_upload(
    api,
    config: BuildConfig,
    repo_id: str,
    repo_url: str,
    branch: str,
    branches: dict[str, str],
    new_branch: bool,
    remote: list[str],
    source_ops: list,
    built: dict[str, Path],
    metas: dict[str, Metadata],
    wheel_dir: Path,
    *,
    create_tag: bool,
) -> UploadResult:
    """Commit the variants (with their wheels), the source and the card; tag the result."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import tqdm

    groups: list[list] = []
    deleted: list[str] = []
    remote_wheels = _remote_wheels(api, repo_id, branch)
    wheel_variants: dict[str, WheelVariant] = {}
    with tqdm(
        total=sum(len(_shipped_files(d)) for d in built.values()),
        desc=f"Hashing {len(built)} variant(s)",
        unit="file",
        leave=False,
    ) as bar:
        for name, vdir in built.items():
            local = {hub_variant_file(name, rel): p for rel, p in shipped_files(vdir)}
            ops: list = []
            for target, p in local.items():
                ops.append(CommitOperationAdd(path_in_repo=target, path_or_fileobj=str(p)))
                bar.update(1)
            stale = [r for r in remote if hub_under(r, hub_variant_path(name)) and r not in local]
            ops += [CommitOperationDelete(path_in_repo=r) for r in stale]
            deleted += stale
            targets = []
            for wheel, wv in _artifacts(vdir, metas[name], wheel_dir / name):
                targets.append(hub_wheel_file(name, wheel.name))
                ops.append(CommitOperationAdd(path_in_repo=targets[-1], path_or_fileobj=str(wheel)))
                if wv is not None:
                    wheel_variants[wheel.name] = wv
            if not new_branch:  # (on a new branch every remote wheel goes, below)
                stale = [r for r in remote_wheels if hub_under(r, hub_wheel_dir(name)) and r not in targets]
                ops += [CommitOperationDelete(path_in_repo=r) for r in stale]
                deleted += stale
            groups.append(ops)
    groups.append(source_ops)
    if new_branch:  # a fresh branch forked from main keeps no build (or wheel) of another version
        orphans = [r for r in remote if hub_variant_of(r) not in built] + list(remote_wheels)
        groups.append([CommitOperationDelete(path_in_repo=r) for r in orphans])
        deleted += orphans
    if wheel_variants:
        index = _variants_index({} if new_branch else remote_wheels, wheel_variants)
        index_path = hub_variants_index(config.python_name, config.general.version)
        groups.append([CommitOperationAdd(path_in_repo=index_path, path_or_fileobj=index)])
    head = branches[branch]
    start = head
    batches = _batches([g for g in groups if g])
    summary = f"Upload {', '.join(built)} ({config.name} v{config.general.version}) with hubkernels"
    for i, ops in enumerate(tqdm(batches, desc=f"Committing to {repo_id}@{branch}", unit="commit", leave=False)):
        suffix = f" (batch {i + 1}/{len(batches)})" if len(batches) > 1 else ""
        try:
            info = api.create_commit(
                repo_id, ops, commit_message=summary + suffix, revision=branch, repo_type="kernel", parent_commit=head
            )
        except HfHubHTTPError as e:
            if e.response is None or e.response.status_code != 412:
                raise
            raise PublishError(
                f"{repo_id}@{branch} changed while uploading (someone else pushed to it); nothing "
                "after that point was committed. Run the upload again."
            ) from None
        head = info.oid
    changed = head != start
    tag = None
    if create_tag:
        tag = f"v{config.general.version}-{head[:7]}"
        api.create_tag(
            repo_id,
            tag=tag,
            revision=head,
            repo_type="kernel",
            exist_ok=True,
            tag_message=f"{config.name} v{config.general.version}: {', '.join(built)}",
        )
    gone = set(deleted)
    on_branch = {v for r in remote if r not in gone and (v := hub_variant_of(r))} | set(built)
    card = render_card(config, repo_id, {**{n: None for n in sorted(on_branch)}, **metas})
    api.create_commit(
        repo_id,
        [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode())],
        commit_message=f"Update the card for {config.name} v{config.general.version}",
        revision="main",
        repo_type="kernel",
    )
    url = f"{repo_url}/tree/{branch}"
    logger.info(
        "%s: %s %s to %s (commit %s%s)",
        repo_id,
        "uploaded" if changed else "unchanged:",
        ", ".join(built),
        branch,
        head[:7],
        f", tag {tag}" if tag else "",
    )
    return UploadResult(
        repo_id,
        branch,
        config.general.version,
        head,
        tag,
        tuple(built),
        tuple(deleted),
        changed,
        url,
        tuple(
            op.path_in_repo
            for g in groups
            for op in g
            if isinstance(op, CommitOperationAdd) and op.path_in_repo.endswith(".whl")
        ),
    )


def _artifacts(vdir: Path, meta: Metadata, out: Path) -> list[tuple[Path, WheelVariant | None]]:
    """The variant's wheel, then for a CUDA variant of several archs one slice wheel per arch (`slice`), each
    with its wheel variant (None for a variant PEP 825 cannot describe)."""
    variant = Variant.parse(vdir.name)
    wv = variant_or_none(variant, meta)
    found: list[tuple[Path, WheelVariant | None]] = [(pack(vdir, out, any_variant=True), wv)]
    by_sm = {sm_of(a): a for a in reversed(meta.archs)}  # one slice per SM: `9.0` and `9.0a` both run on sm_90
    if wv is None or meta.backend_type != "cuda" or len(by_sm) < 2:
        return found
    for arch in sorted(by_sm.values(), key=sm_of):
        sliced = slice_variant(vdir, arch, out / "slices" / arch)
        props = wheel_variant(variant, Metadata.read(sliced)).properties
        found.append((pack(sliced, out / arch, sliced=True), WheelVariant(slice_label(wv.label, arch), props)))
    return found


def _remote_files(api, repo_id: str, branch: str, directory: str) -> list[str]:
    """Repo paths of every file under `directory` on `branch` (none when the directory or branch is missing)."""
    from huggingface_hub import RepoFile
    from huggingface_hub.errors import EntryNotFoundError, RevisionNotFoundError

    try:
        tree = api.list_repo_tree(repo_id, path_in_repo=directory, recursive=True, revision=branch, repo_type="kernel")
        return [f.path for f in tree if isinstance(f, RepoFile)]
    except (EntryNotFoundError, RevisionNotFoundError):
        return []


def _remote_wheels(api, repo_id: str, branch: str) -> dict[str, bytes | None]:
    """{path: None} of the wheels on `branch`, and {path: bytes} of its variants index (read to merge into)."""
    from huggingface_hub import hf_hub_download

    paths = _remote_files(api, repo_id, branch, WHEELS_DIR)
    out: dict[str, bytes | None] = {}
    for path in paths:
        out[path] = (
            Path(hf_hub_download(repo_id, path, repo_type="kernel", revision=branch)).read_bytes()
            if path.endswith("-variants.json")
            else None
        )
    return out


def _variants_index(remote: dict[str, bytes | None], uploaded: dict[str, WheelVariant]) -> bytes:
    """The branch's variants index: the variants it listed before, with those of this upload replacing theirs."""
    variants = {wv.label: wv for wv in uploaded.values()}
    for data in remote.values():
        for label, props in (json.loads(data).get("variants", {}) if data is not None else {}).items():
            variants.setdefault(
                label,
                WheelVariant(
                    label,
                    tuple(
                        sorted(
                            (ns, feature, value)
                            for ns, features in props.items()
                            for feature, values in features.items()
                            for value in values
                        )
                    ),
                ),
            )
    return (json.dumps(variant_json(list(variants.values())), indent=2, sort_keys=True) + "\n").encode()


def source_files(config: BuildConfig) -> dict[str, Path]:
    """{path relative to the kernel root: file} of what rebuilds the kernel elsewhere.

    build.toml, every `src` file of every table, the headers in their directories and in `include` directories,
    and the Python package (without bytecode and the generated `_ops.py`).
    """
    root = config.root
    files: dict[str, Path] = {"build.toml": config.file}
    named = [*(config.torch.src if config.torch else ()), *(config.tvm_ffi.src if config.tvm_ffi else ())]
    includes = [*(config.torch.include if config.torch else ())]
    for kernel in config.kernels.values():
        named += kernel.src
        includes += kernel.include
    dirs = {(root / rel).parent for rel in named} | {root / rel for rel in includes}
    for d in sorted(dirs):
        if d.is_dir() and d.resolve().is_relative_to(root.resolve()):
            walk = d.glob("*") if d.resolve() == root.resolve() else d.rglob("*")
            files.update({p.relative_to(root).as_posix(): p for p in walk if p.is_file() and p.suffix in _HEADERS})
    files.update({rel: root / rel for rel in named if (root / rel).is_file()})
    pkg = config.package_dir
    for p in sorted(pkg.rglob("*")) if pkg.is_dir() else []:
        rel = p.relative_to(pkg)
        if p.is_file() and "__pycache__" not in rel.parts and p.suffix != ".pyc" and rel.as_posix() != "_ops.py":
            files[p.relative_to(root).as_posix()] = p
    return dict(sorted(files.items()))


def _source_ops(api, repo_id: str, branch: str, config: BuildConfig) -> list:
    """Operations that make `source/` on `branch` exactly the kernel's source files (see fetch.source)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    local = {hub_source_file(rel): p for rel, p in source_files(config).items()}
    remote = _remote_files(api, repo_id, branch, SOURCE_DIR)
    return [CommitOperationAdd(path_in_repo=target, path_or_fileobj=str(p)) for target, p in local.items()] + [
        CommitOperationDelete(path_in_repo=r) for r in remote if r not in local
    ]


def _built_variants(path: str | Path, wanted: Sequence[str] | None) -> dict[str, Path]:
    try:
        _, found = variant_dirs(path)
    except HubkernelsError as e:
        raise PublishError(str(e)) from None
    if wanted is None:
        return found
    unknown = [v for v in wanted if v not in found]
    if unknown:
        raise UsageError(f"not built: {', '.join(unknown)} (built: {', '.join(found)}). Run `hubkernels build` first.")
    return {v: found[v] for v in wanted}


def _check_builds(config: BuildConfig, built: dict[str, Path], metas: dict[str, Metadata]) -> None:
    """Refuse stale or damaged builds; warn about dirty ones (they cannot be reproduced from a commit)."""
    for name, meta in metas.items():
        where = hub_variant_path(name)
        if meta.version != config.general.version or meta.name != config.name:
            raise PublishError(
                f"{where} is {meta.name} v{meta.version}, but {config.file} says {config.name} "
                f"v{config.general.version}. Rebuild it with `hubkernels build`."
            )
        problems = violations(built[name], meta.digest)
        if problems:
            raise PublishError(
                f"{where} does not match its metadata.json digest ({'; '.join(problems)}). "
                "Rebuild it with `hubkernels build` before uploading."
            )
        from .builder.loadcheck import variant_load_problems

        unloadable = variant_load_problems(built[name])
        if unloadable:
            raise PublishError(
                f"{where} would not load where its name says ({'; '.join(unloadable)}). "
                "Fix it and rebuild before uploading."
            )
        if meta.dirty:
            warnings.warn(
                f"{where} ({meta.id}) was built from a git tree with uncommitted changes, so nobody "
                "can rebuild it from a commit. Commit, rebuild and upload again for a reproducible release.",
                UserWarning,
                stacklevel=3,
            )


# -- the card ---------------------------------------------------------------------------------------------------


def package_api(package_dir: Path) -> tuple[str | None, list[tuple[str, str]]]:
    """(module docstring, [(name, first docstring line)] for `__all__`) read with `ast`, without importing."""
    init = package_dir / "__init__.py"
    try:
        tree = ast.parse(init.read_text(), filename=str(init))
    except (OSError, SyntaxError):
        return None, []
    exports: list[str] = []
    docs: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                try:
                    exports = [str(x) for x in ast.literal_eval(node.value)]
                except ValueError:
                    pass
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                docs[node.name] = doc.strip().splitlines()[0]
    return ast.get_docstring(tree), [(name, docs.get(name, "")) for name in exports]


def _license(spdx: str) -> str:
    lid = spdx.strip().lower()
    return f"license: {lid}" if lid in _HUB_LICENSES else f"license: other\nlicense_name: {spdx or 'unknown'}"


def _backend_of(variant: str) -> str:
    try:
        return Variant.parse(variant).backend
    except ValueError:
        return ""


def render_card(config: BuildConfig, repo_id: str, variants: dict[str, Metadata | None]) -> str:
    """The README.md of the repo's main branch: what the kernel is, its API, how to load it, its variants."""
    version = config.general.version
    doc, exports = package_api(config.package_dir)
    short = config.python_name.split("_")[0] if config.python_name else "kernel"
    lines = [
        "---",
        _license(config.general.license),
        "tags:",
        "- kernels",
        "- hubkernels",
        "---",
        "",
        f"# {config.name}",
        "",
    ]
    if doc:
        lines += [doc.strip(), ""]
    lines += [
        "## Load it",
        "",
        "```python",
        "import hubkernels",
        "",
        f'{short} = hubkernels.get_kernel("{repo_id}", version={version})',
        "```",
        "",
        "Hugging Face `kernels` loads it too:",
        "",
        "```python",
        "from kernels import get_kernel",
        "",
        f'{short} = get_kernel("{repo_id}", version={version})',
        "```",
        "",
        f"Version {version} lives on branch `v{version}`; every upload is also tagged "
        f"`v{version}-<commit>`. Pin a commit with `revision=` or lock it with "
        f"`hubkernels lock {repo_id}@v{version}`.",
        "",
    ]
    if exports:
        lines += ["## API", "", "| name | what |", "|---|---|"]
        lines += [f"| `{name}` | {what.replace('|', '/')} |" for name, what in exports]
        lines.append("")
    lines += [f"## Variants on `v{version}`", "", "| variant | backend | archs |", "|---|---|---|"]
    for name in sorted(variants):
        meta = variants[name]
        backend = meta.backend_type if meta else _backend_of(name)
        archs = ", ".join(meta.archs) if meta else ""
        lines.append(f"| `{name}` | {backend} | {archs} |")
    lines.append("")
    sources = [f"- Upstream: {config.general.upstream}"] if config.general.upstream else []
    sources += [f"- Source: {config.general.source}"] if config.general.source else []
    if sources:
        lines += ["## Source", "", *sources, ""]
    lines += [
        f"License: {config.general.license or 'unspecified'}. Built from `build.toml` and published with hubkernels.",
        "",
    ]
    return "\n".join(lines)
