"""Variant resolution makes the same choice as HF `kernels` on machines this test does not run on, and says why
where it differs on purpose (`hubkernels.variants.DIFFERENCES`)."""

from __future__ import annotations

import itertools

import pytest
from packaging.version import Version

from hubkernels.system import System
from hubkernels.variants import DIFFERENCES, KERNELS_COMPAT, Accepted, archs_support, minver_reason, resolve

CPU_SYS = System(torch_version=(2, 13), backend="cpu", backend_version=None, cpu="x86_64", os="linux")

# -- the same choice as HF `kernels` ----------------------------------------------------------------------------
#
# `kernels.variants._resolve_variant_for_system` is kernels' resolver with the system passed in rather than read
# from this process, so both resolvers can be asked about machines this test does not run on.

kvariants = pytest.importorskip("kernels.variants")
kbackends = pytest.importorskip("kernels.backends")

ARCHES = [("x86_64", "linux"), ("aarch64", "linux")]


def _sys(
    torch: str,
    backend: str,
    bver: tuple[int, int] | None = None,
    cpu: str = "x86_64",
    os_: str = "linux",
    cxx11: bool = True,
    macos: tuple[int, int] | None = None,
) -> System:
    major, minor = (int(p) for p in torch.split("."))
    return System((major, minor), backend, bver, cpu, os_, cxx11_abi=cxx11, macos_version=macos)


def kernels_choice(
    names: list[str], system: System, backend: str | None = None, tvm_ffi: str | None = None
) -> str | None:
    """What kernels' own resolver picks for `system` from a repository holding `names`."""
    want = backend or system.backend
    bver = (
        Version("{}.{}".format(*system.backend_version)) if system.backend_version and want == system.backend else None
    )
    selected = {
        "cpu": kbackends.CPU(),
        "metal": kbackends.Metal(),
        "neuron": kbackends.Neuron(),
        "tpu": kbackends.TPU(),
        "cuda": bver and kbackends.CUDA(bver),
        "rocm": bver and kbackends.ROCm(bver),
        "xpu": bver and kbackends.XPU(bver),
        "cann": bver and kbackends.CANN(bver),
    }[want]
    chosen, _ = kvariants._resolve_variant_for_system(
        variants=[kvariants.parse_variant(n) for n in names],
        selected_backend=selected,
        cpu=system.cpu,
        os=system.os,
        torch_version=Version("{}.{}".format(*system.torch_version)),
        torch_cxx11_abi=system.cxx11_abi if system.os == "linux" else None,
        tvm_ffi_version=Version(tvm_ffi) if tvm_ffi else None,
        macos_version=Version("{}.{}".format(*system.macos_version)) if system.macos_version else None,
    )
    return chosen[0].variant_str if chosen else None


def our_choice(names: list[str], system: System, backend: str | None = None) -> str | None:
    chosen = resolve(names, system, backend).chosen
    return str(chosen) if chosen else None


def _arch(fws: list[str], computes: list[str], platforms: list[tuple[str, str]] = ARCHES) -> list[str]:
    return [f"{fw}-{c}-{cpu}-{os_}" for fw in fws for c in computes for cpu, os_ in platforms]


#: Repositories shaped like the ones on the Hub: kernel-builder's matrix at different moments, and mixes.
REPOS: dict[str, list[str]] = {
    "builder-2.12-2.13-cxx11": _arch(
        ["torch212-cxx11", "torch213-cxx11"], ["cpu", "cu126", "cu130", "rocm71", "xpu20253"]
    )
    + ["torch212-metal-aarch64-darwin", "torch213-metal-aarch64-darwin", "torch213-cpu-aarch64-darwin"],
    "tagless-2.13-2.15": _arch(["torch213", "torch214", "torch215"], ["cpu", "cu126", "cu128", "cu130", "rocm72"])
    + ["torch214-cu130-x86_64-windows", "torch214-cpu-x86_64-windows", "torch215-metal-aarch64-darwin"],
    "stable-abi-only": _arch(
        ["torch-stable-abi210", "torch-stable-abi211", "torch-stable-abi213"], ["cpu", "cu126", "cu130"]
    ),
    "noarch-only": ["torch-cpu", "torch-cuda", "torch-rocm", "torch-xpu", "torch-metal", "torch-npu"],
    "universal": ["torch-universal"],
    "universal-and-cuda": ["torch-universal", "torch-cuda"],
    "tvm-ffi-and-torch": _arch(["tvm-ffi01", "torch213-cxx11"], ["cu130", "cpu"]) + ["torch-cuda"],
    "cxx98-legacy": _arch(["torch211-cxx98", "torch211-cxx11", "torch212-cxx98"], ["cpu", "cu126"]),
    "neuron-tpu-npu": [
        "torch213-cxx11-neuron-x86_64-linux",
        "torch213-tpu-x86_64-linux",
        "torch-neuron",
        "torch-tpu",
        "torch-stable-abi212-cann80-aarch64-linux",
        "torch213-cann81-aarch64-linux",
        "torch-npu",
        "torch-universal",
    ],
    "windows-and-mac": [
        "torch213-cu130-x86_64-windows",
        "torch213-cpu-x86_64-windows",
        "torch213-cpu-aarch64-darwin",
        "torch213-metal-aarch64-darwin",
        "torch-stable-abi212-metal-aarch64-darwin",
    ],
}

#: Five repositories holding both stable-ABI and exact-torch builds (the issue's case): cxx11 and tagless names.
BOTH_KINDS: dict[str, list[str]] = {
    "both-cxx11": _arch(["torch212-cxx11", "torch213-cxx11", "torch-stable-abi211"], ["cpu", "cu126", "cu130"]),
    "both-tagless": _arch(["torch213", "torch214", "torch-stable-abi212"], ["cpu", "cu128", "cu130"]),
    "both-tagless-and-cxx11": _arch(["torch213", "torch213-cxx11", "torch-stable-abi213"], ["cpu", "cu130"]),
    "both-old-stable": _arch(["torch214-cxx11", "torch215-cxx11", "torch-stable-abi29"], ["cpu", "cu126", "cu128"])
    + ["torch-cpu", "torch-cuda"],
    "both-rocm-xpu-metal": _arch(["torch213-cxx11", "torch-stable-abi211"], ["rocm71", "xpu20253", "cpu"])
    + ["torch213-metal-aarch64-darwin", "torch-stable-abi211-metal-aarch64-darwin"],
}

#: Eight machines, from torch 2.11 to 2.15.
SYSTEMS: dict[str, System] = {
    "cpu-2.13": _sys("2.13", "cpu"),
    "cu130-2.13": _sys("2.13", "cuda", (13, 0)),
    "cu128-2.14-arm": _sys("2.14", "cuda", (12, 8), cpu="aarch64"),
    "cu126-2.11-cxx98": _sys("2.11", "cuda", (12, 6), cxx11=False),
    "rocm71-2.13": _sys("2.13", "rocm", (7, 1)),
    "xpu20253-2.12": _sys("2.12", "xpu", (2025, 3)),
    "metal-2.15": _sys("2.15", "metal", cpu="aarch64", os_="darwin", macos=(26, 1)),
    "cpu-2.15": _sys("2.15", "cpu"),
}

#: More machines for the wider grid: other torch minors, Windows, an old macOS, aarch64 CPU, CUDA 12.9.
MORE_SYSTEMS: dict[str, System] = {
    "cpu-2.11": _sys("2.11", "cpu"),
    "cpu-2.12-arm": _sys("2.12", "cpu", cpu="aarch64"),
    "cpu-2.14-cxx98": _sys("2.14", "cpu", cxx11=False),
    "cu129-2.12": _sys("2.12", "cuda", (12, 9)),
    "cu130-2.15": _sys("2.15", "cuda", (13, 0)),
    "cu130-2.14-windows": _sys("2.14", "cuda", (13, 0), os_="windows"),
    "cpu-2.13-windows": _sys("2.13", "cpu", os_="windows"),
    "metal-2.13-macos15": _sys("2.13", "metal", cpu="aarch64", os_="darwin", macos=(15, 4)),
    "cpu-2.13-mac": _sys("2.13", "cpu", cpu="aarch64", os_="darwin", macos=(26, 0)),
    "rocm72-2.14": _sys("2.14", "rocm", (7, 2)),
    "neuron-2.13": _sys("2.13", "neuron"),
    "tpu-2.13": _sys("2.13", "tpu"),
    "cann80-2.13-arm": _sys("2.13", "cann", (8, 0), cpu="aarch64"),
    "cann81-2.13-arm": _sys("2.13", "cann", (8, 1), cpu="aarch64"),
}

GRID = [(s, r) for s in {**SYSTEMS, **MORE_SYSTEMS} for r in {**REPOS, **BOTH_KINDS}]


def _orders(names: list[str]) -> list[list[str]]:
    return [sorted(names), sorted(names, reverse=True), sorted(names, key=lambda n: n[::-1])]


def test_the_grid_is_wide() -> None:
    assert len(GRID) >= 60
    names = {n for r in {**REPOS, **BOTH_KINDS}.values() for n in r}
    for part in (
        "torch211",
        "torch212",
        "torch213",
        "torch214",
        "torch215",
        "-cpu-",
        "cu126",
        "cu130",
        "rocm",
        "xpu",
        "metal",
        "neuron",
        "tpu",
        "cann",
        "torch-npu",
        "torch-universal",
        "torch-cpu",
        "stable-abi",
        "-cxx11-",
        "torch213-cu130",
    ):
        assert any(part in n for n in names), part


@pytest.mark.parametrize("system,repo", GRID)
def test_we_choose_what_kernels_chooses(system: str, repo: str) -> None:
    names = {**REPOS, **BOTH_KINDS}[repo]
    sys_ = {**SYSTEMS, **MORE_SYSTEMS}[system]
    theirs = {kernels_choice(order, sys_) for order in _orders(names)}
    assert len(theirs) == 1, f"kernels' choice depends on listing order here: {theirs}"
    assert our_choice(names, sys_) == theirs.pop()


def test_the_issue_s_forty_cases_holding_both_kinds_have_no_difference() -> None:
    cases = [(s, r) for s in SYSTEMS for r in BOTH_KINDS]
    assert len(cases) == 40
    differ = [
        (s, r) for s, r in cases if our_choice(BOTH_KINDS[r], SYSTEMS[s]) != kernels_choice(BOTH_KINDS[r], SYSTEMS[s])
    ]
    assert differ == []
    # where an exact-torch build also fits, the stable-ABI one is taken (an exact-torch-first order picks otherwise)
    both_fit = [
        (s, r)
        for s, r in cases
        if {e.variant.kind for e in resolve(BOTH_KINDS[r], SYSTEMS[s]).trace if isinstance(e, Accepted)}
        >= {"torch", "stable-abi"}
    ]
    assert len(both_fit) >= 8
    assert all(resolve(BOTH_KINDS[r], SYSTEMS[s]).chosen.kind == "stable-abi" for s, r in both_fit)


@pytest.mark.parametrize("system", ["cu130-2.13", "cpu-2.13"])
def test_backend_cpu_on_any_system_matches_kernels(system: str) -> None:
    for names in {**REPOS, **BOTH_KINDS}.values():
        assert our_choice(names, SYSTEMS[system], "cpu") == kernels_choice(names, SYSTEMS[system], "cpu")


def test_cuda_family_and_specific_archs_match_kernels() -> None:
    from kernels.archs import _supports_cuda_capability

    archs = [
        "7.5",
        "8.0",
        "8.6",
        "9.0",
        "9.0a",
        "10.0",
        "10.0a",
        "10.0f",
        "10.3f",
        "12.0",
        "12.0f",
        "12.0a",
        "8.0+PTX",
        "9.0a+PTX",
        "10.0f+PTX",
        "sm_90",
        "weird",
    ]
    caps = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]
    checked = 0
    for cap in caps:
        for n in (1, 2):
            for combo in itertools.combinations(archs, n):
                assert archs_support(list(combo), cap) is _supports_cuda_capability(list(combo), cap), (combo, cap)
                checked += 1
    assert checked > 1000
    assert archs_support(["10.0f"], (10, 3)) and archs_support(["12.0f"], (12, 1))


@pytest.mark.parametrize("minver", [None, "0.1.0", "0.17.2", "0.17.3", "0.18.0", "1.0.0", "0.18", "soon"])
def test_kernels_minver_refuses_what_kernels_refuses(minver: str | None, tmp_path) -> None:
    import json

    import kernels
    from kernels._rust import Metadata as KMetadata
    from kernels.validate import MinverValidator

    assert tuple(int(p) for p in kernels.__version__.split(".")[:3]) == KERNELS_COMPAT
    raw = {
        "name": "tiny-k",
        "id": "_tiny_k_cpu_1",
        "version": 1,
        "license": "MIT",
        "python-depends": [],
        "kernel-depends": [],
        "backend": {"type": "cpu"},
        **({"kernels-minver": minver} if minver else {}),
    }
    (tmp_path / "metadata.json").write_text(json.dumps(raw))
    try:
        MinverValidator().validate_metadata(
            metadata=KMetadata.read_from_file(tmp_path / "metadata.json"), variant="torch-cpu"
        )
        kernels_refuses = False
    except (RuntimeError, ValueError):
        kernels_refuses = True
    assert (minver_reason(minver) is not None) is kernels_refuses


# Each knowing difference, shown.


def test_difference_tvm_ffi_is_never_chosen() -> None:
    assert "tvm-ffi" in DIFFERENCES[0]
    names = REPOS["tvm-ffi-and-torch"]
    cu130 = SYSTEMS["cu130-2.13"]
    assert kernels_choice(names, cu130) == our_choice(names, cu130) == "torch213-cxx11-cu130-x86_64-linux"
    only_tvm = ["tvm-ffi01-cu130-x86_64-linux", "torch-cuda"]
    theirs = {kernels_choice(order, cu130, tvm_ffi="0.1") for order in (only_tvm, only_tvm[::-1])}
    assert theirs == {"tvm-ffi01-cu130-x86_64-linux", "torch-cuda"}  # the tie: the listing order decides
    assert our_choice(only_tvm, cu130) == "torch-cuda"


def test_difference_equal_preference_is_ordered_by_name() -> None:
    assert "by name" in DIFFERENCES[1]
    repo = ["torch213-cxx11-cpu-x86_64-linux", "torch213-cpu-x86_64-linux", "torch-cpu", "torch-universal"]
    for perm in itertools.permutations(repo):
        assert resolve(perm, CPU_SYS) == resolve(repo, CPU_SYS)


def test_difference_any_visible_gpu_counts() -> None:
    from hubkernels.fetch.importer import check_capability
    from hubkernels.metadata import Metadata

    assert "any visible GPU" in DIFFERENCES[2]
    meta = Metadata(name="k", id="_k_cuda_x", version=1, license="MIT", backend={"type": "cuda", "archs": ["9.0"]})
    check_capability(meta, System((2, 13), "cuda", (13, 0), "x86_64", "linux", capabilities=((8, 6), (9, 0))))


def test_difference_minver_is_compared_with_the_release_we_follow() -> None:
    assert "0.17.2" in DIFFERENCES[3] and KERNELS_COMPAT == (0, 17, 2)
    assert minver_reason("0.17.2") is None and "kernels>=0.17.3" in (minver_reason("0.17.3") or "")


def test_every_difference_is_listed_once() -> None:
    assert len(DIFFERENCES) == 4 and len(set(DIFFERENCES)) == 4


def test_the_variants_command_lists_every_difference(capsys) -> None:
    from pathlib import Path

    from hubkernels import cli

    assert cli.main(["variants", str(Path(__file__).parent / "fixtures" / "mini")]) == 0
    out = capsys.readouterr().out
    assert "The same choice as HF kernels 0.17.2, except:" in out
    assert all(f"  - {line}\n" in out for line in DIFFERENCES)
