"""Kernel dependencies: dep-user `kernel-depends` on dep-base (tests/fixtures/deps), both published to the local
Hub. The pair loads through hubkernels and through HF `kernels` 0.17.2, online and offline (HF_HUB_OFFLINE=1 in
a new process after a warm-up), and a lock pins the dependency's commit as well as the dependent's.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import DEP_PLACEHOLDER as PLACEHOLDER
from helpers import api_requests as _api_requests
from helpers import deps_kernel as _kernel
from helpers import run_python

import hubkernels
from hubkernels.errors import KernelLoadError
from hubkernels.fetch import UntrustedKernelError, get_kernel, loaded_kernels, lock
from hubkernels.fetch.install import install
from hubkernels.fetch.kernel_deps import KernelDependencyError, get_kernel_dep
from hubkernels.publish import upload


@dataclass(frozen=True)
class Pair:
    base: str  # repo id of dep-base
    user: str  # repo id of dep-user, which kernel-depends on `base`
    base_commit: str


def publish_base(tmp: Path, org: str = "hubkernels", factor: int = 3, repo_id: str | None = None) -> tuple[str, str]:
    """dep-base (scale(x) = factor * x) uploaded as v1; returns (repo id, commit)."""
    repo_id = repo_id or f"{org}/dep-base-{uuid.uuid4().hex[:8]}"
    root = _kernel("base", tmp / f"base-{uuid.uuid4().hex[:6]}", {"FACTOR = 3": f"FACTOR = {factor}"})
    return repo_id, upload(root, repo_id=repo_id).commit


def publish_user(tmp: Path, base: str, *, extra: dict[str, str] | None = None, repo_id: str | None = None) -> str:
    """dep-user depending on `base` uploaded as v1; returns its repo id."""
    repo_id = repo_id or f"hubkernels/dep-user-{uuid.uuid4().hex[:8]}"
    root = _kernel("user", tmp / f"user-{uuid.uuid4().hex[:6]}", {**(extra or {}), PLACEHOLDER: base})
    upload(root, repo_id=repo_id)
    return repo_id


@pytest.fixture(scope="module")
def pair(hub, tmp_path_factory) -> Pair:
    tmp = tmp_path_factory.mktemp("deps")
    base, commit = publish_base(tmp)
    return Pair(base, publish_user(tmp, base), commit)


X = "torch.tensor([1.0, 2.0])"
_KERNELS_LOAD = """
    import torch, kernels
    k = kernels.get_kernel({repo!r}, version=1)
    print(k.scale_shift({x}).tolist(), k.base.__name__)
"""
_OURS_LOAD = """
    import torch, hubkernels
    k = hubkernels.get_kernel({repo!r}, version=1)
    print(k.scale_shift({x}).tolist(), k.base.__name__)
"""


def _base_id(pair: Pair, tmp: Path) -> str:
    return json.loads((install(pair.base, version=1, cache_dir=tmp).path / "metadata.json").read_text())["id"]


def test_dependent_loads_its_dependency_first_and_uses_it(pair, tmp_path: Path) -> None:
    user = get_kernel(pair.user, version=1, cache_dir=tmp_path)
    assert user.scale_shift(torch.tensor([1.0, 2.0])).tolist() == [4.0, 7.0]  # 3 * x + 1 through dep-base
    assert user.base.__name__ == _base_id(pair, tmp_path)
    ids = [k.metadata.id for k in loaded_kernels()]  # this pair's builds, whatever else the session loaded
    assert ids.index(user.base.__name__) < ids.index(user.__name__)
    installed = install(pair.user, version=1, cache_dir=tmp_path)
    assert [(d.repo_id, d.commit) for d in installed.deps] == [(pair.base, pair.base_commit)] and installed.warm


def test_hf_kernels_loads_the_same_pair(pair, tmp_path: Path) -> None:
    out = run_python(_KERNELS_LOAD.format(repo=pair.user, x=X), tmp_path / "theirs")
    assert out.stdout.split()[:2] == ["[4.0,", "7.0]"]
    assert out.stdout.split()[2] == _base_id(pair, tmp_path / "ours")


def test_offline_after_a_warm_up_in_both_loaders(hub, pair, tmp_path: Path) -> None:
    """HF kernels 0.17.2 downloads by commit and never writes `refs/v1`, so offline it finds `version=1` (of the
    dependent, and of the dependency its metadata names) only in a cache where something recorded the branch:
    ours does. So both loaders run offline from the cache our warm-up filled."""
    cache = tmp_path / "cache"
    run_python(_OURS_LOAD.format(repo=pair.user, x=X), cache)
    hub.reset_requests()
    for code in (_OURS_LOAD, _KERNELS_LOAD):
        out = run_python(code.format(repo=pair.user, x=X), cache, HF_HUB_OFFLINE="1", HUBKERNELS_VERSION_TTL="0")
        assert out.stdout.split()[:2] == ["[4.0,", "7.0]"], code
    assert _api_requests(hub) == []


def test_a_kernel_using_hubkernels_get_kernel_dep_loads_under_hf_kernels(pair, tmp_path: Path) -> None:
    swapped = {"from kernels import get_kernel_dep": "from hubkernels import get_kernel_dep"}
    repo = publish_user(tmp_path, pair.base, extra=swapped)
    assert get_kernel(repo, version=1, cache_dir=tmp_path / "ours").scale_shift(torch.ones(1)).tolist() == [4.0]
    out = run_python(_KERNELS_LOAD.format(repo=repo, x=X), tmp_path / "theirs")
    assert out.stdout.split()[:2] == ["[4.0,", "7.0]"]


def test_get_kernel_dep_outside_a_kernel_import_says_where_to_call_it() -> None:
    with pytest.raises(KernelDependencyError, match="only works while a kernel is being imported"):
        get_kernel_dep("hubkernels/dep-base")
    assert hubkernels.get_kernel_dep is get_kernel_dep


def test_asking_for_an_undeclared_dependency_names_the_declared_ones(pair, tmp_path: Path) -> None:
    ours = {
        "from kernels import get_kernel_dep": "from hubkernels import get_kernel_dep",
        'get_kernel_dep("' + PLACEHOLDER: 'get_kernel_dep("nobody/else',
    }
    repo = publish_user(tmp_path, pair.base, extra=ours)
    with pytest.raises(KernelLoadError, match=f"nobody/else is not a dependency .*kernel-depends: {pair.base}"):
        get_kernel(repo, version=1, cache_dir=tmp_path)


def test_a_lock_pins_the_dependency_too(hub, tmp_path: Path) -> None:
    base, first = publish_base(tmp_path)
    user = publish_user(tmp_path, base)
    lockfile = tmp_path / "kernels.lock"
    entries = lock([f"{user}@v1"], lockfile, cache_dir=tmp_path / "locking")  # dep-base is locked with it
    assert {e.repo_id: e.commit for e in entries}[base] == first
    _, second = publish_base(tmp_path, factor=5, repo_id=base)  # v1 moves on: scale is now 5 * x
    assert second != first
    locked = run_python(
        f"""
        import torch
        from hubkernels import load_locked
        print(load_locked({user!r}, lockfile={str(lockfile)!r}).scale_shift(torch.ones(1)).tolist())
        """,
        tmp_path / "a",
    )
    latest = run_python(_OURS_LOAD.format(repo=user, x="torch.ones(1)"), tmp_path / "b")
    assert locked.stdout.strip() == "[4.0]" and latest.stdout.split()[0] == "[6.0]"
    offline = run_python(locked.args[2], tmp_path / "a", HF_HUB_OFFLINE="1")  # the locked load, again offline
    assert offline.stdout.strip() == "[4.0]"


def test_a_dependency_pinned_by_commit_stays_there_in_both_loaders(hub, tmp_path: Path) -> None:
    base, first = publish_base(tmp_path)
    user = publish_user(tmp_path, base, extra={"version = 1 }": f'revision = "{first}" }}'})
    publish_base(tmp_path, factor=5, repo_id=base)  # v1 moves on; the dependent asked for the first commit
    for code, cache in ((_OURS_LOAD, "ours"), (_KERNELS_LOAD, "theirs")):
        out = run_python(code.format(repo=user, x=X), tmp_path / cache)
        assert out.stdout.split()[:2] == ["[4.0,", "7.0]"], code


def test_a_local_build_gets_its_dependencies_from_the_hub(pair, tmp_path: Path) -> None:
    root = _kernel("user", tmp_path / "user", {PLACEHOLDER: pair.base})
    assert hubkernels.get_local_kernel(root).scale_shift(torch.ones(1)).tolist() == [4.0]


def test_local_kernels_overrides_a_dependency(pair, tmp_path: Path) -> None:
    local = _kernel("base", tmp_path / "base", {"FACTOR = 3": "FACTOR = 10"})
    for code, cache in ((_OURS_LOAD, "ours"), (_KERNELS_LOAD, "theirs")):
        out = run_python(code.format(repo=pair.user, x=X), tmp_path / cache, LOCAL_KERNELS=f"{pair.base}={local}")
        assert out.stdout.split()[:2] == ["[11.0,", "21.0]"], code


def test_a_dependency_obeys_the_trust_policy(hub, tmp_path: Path) -> None:
    base, _ = publish_base(tmp_path, org="someone-else")
    user = publish_user(tmp_path, base)  # a trusted publisher's kernel pulling in an untrusted one
    with pytest.raises(UntrustedKernelError, match=f"while installing kernel dependency {base}@v1: .*someone-else"):
        get_kernel(user, version=1, cache_dir=tmp_path)
    trusted = get_kernel(user, version=1, cache_dir=tmp_path, trust_remote_code=["someone-else"])
    assert trusted.scale_shift(torch.zeros(1)).tolist() == [1.0]


def test_a_kernel_depending_on_itself_is_refused(hub, tmp_path: Path) -> None:
    repo = f"hubkernels/dep-loop-{uuid.uuid4().hex[:8]}"
    publish_user(tmp_path, repo, repo_id=repo)
    with pytest.raises(KernelDependencyError, match=f"cyclic kernel dependency: {repo} -> {repo}"):
        get_kernel(repo, version=1, cache_dir=tmp_path)
