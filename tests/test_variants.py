"""Variant names round-trip, and resolution follows the Hub's rules with a readable reason per rejection."""

from __future__ import annotations

import itertools

import pytest

from hubkernels.errors import UsageError, VariantNotFoundError
from hubkernels.system import System, Variant
from hubkernels.variants import Accepted, Rejected, require, resolve, system_variants

CUDA_SYS = System(
    torch_version=(2, 11), backend="cuda", backend_version=(13, 0), cpu="x86_64", os="linux", capabilities=((9, 0),)
)
CPU_SYS = System(torch_version=(2, 13), backend="cpu", backend_version=None, cpu="x86_64", os="linux")


@pytest.mark.parametrize(
    "name",
    [
        f"{fw}-{compute}-{cpu}-{os_}"
        for fw, compute, cpu, os_ in itertools.product(
            ["torch29", "torch213", "torch213-cxx11", "torch26-cxx98", "torch-stable-abi211", "tvm-ffi01"],
            ["cpu", "cu126", "cu130", "rocm71", "xpu20253", "metal"],
            ["x86_64", "aarch64"],
            ["linux", "darwin", "windows"],
        )
    ]
    + ["torch-cpu", "torch-cuda", "torch-universal", "torch-metal", "torch-rocm", "torch-xpu"],
)
def test_variant_names_round_trip(name: str) -> None:
    assert str(Variant.parse(name)) == name


@pytest.mark.parametrize(
    "bad",
    [
        "torch",
        "torch213",
        "torch213-cxx11-cu130",
        "pytorch213-cpu-x86_64-linux",
        "torch213-cxx11-gpu-x86_64-linux",
        "torch-quantum",
        "torch21x-cpu-x86_64-linux",
    ],
)
def test_bad_names_say_what_is_wrong(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        Variant.parse(bad)


def test_build_variant_names_follow_the_hub_grammar() -> None:
    assert str(CPU_SYS.build_variant()) == "torch213-cxx11-cpu-x86_64-linux"
    assert str(CUDA_SYS.build_variant()) == "torch211-cxx11-cu130-x86_64-linux"
    assert str(CUDA_SYS.build_variant("cpu")) == "torch211-cxx11-cpu-x86_64-linux"


def test_system_order_stable_abi_then_exact_torch_tagless_first_then_noarch() -> None:
    names = [str(v) for v in system_variants(CUDA_SYS)]
    assert names[0] == "torch-stable-abi211-cu130-x86_64-linux"
    assert names.index("torch-stable-abi211-cu130-x86_64-linux") < names.index("torch-stable-abi210-cu130-x86_64-linux")
    assert names.index("torch-stable-abi29-cu130-x86_64-linux") < names.index("torch211-cu130-x86_64-linux")
    assert names.index("torch211-cu130-x86_64-linux") < names.index("torch211-cxx11-cu130-x86_64-linux")
    assert names[-2:] == ["torch-cuda", "torch-universal"]
    assert not any("cpu" in n for n in names)  # a CUDA system asks for cpu only when told to


def test_cuda_same_major_and_minor_not_newer_than_torch() -> None:
    sys129 = System((2, 13), "cuda", (12, 9), "x86_64", "linux")
    repo = [
        "torch213-cxx11-cu126-x86_64-linux",
        "torch213-cxx11-cu128-x86_64-linux",
        "torch213-cxx11-cu130-x86_64-linux",
        "torch213-cxx11-cu129-x86_64-linux",
    ]
    res = resolve(repo, sys129)
    assert str(res.chosen) == "torch213-cxx11-cu129-x86_64-linux"
    accepted = [str(e.variant) for e in res.trace if isinstance(e, Accepted)]
    assert accepted == [
        "torch213-cxx11-cu129-x86_64-linux",
        "torch213-cxx11-cu128-x86_64-linux",
        "torch213-cxx11-cu126-x86_64-linux",
    ]
    (rej,) = [e for e in res.trace if isinstance(e, Rejected)]
    assert rej.name.endswith("cu130-x86_64-linux") and "CUDA 13.0" in rej.reason and "12.9" in rej.reason


def test_every_rejection_has_a_reason() -> None:
    repo = [
        "torch212-cxx11-cpu-x86_64-linux",
        "torch213-cxx11-cpu-aarch64-linux",
        "torch213-cpu-aarch64-darwin",
        "torch213-cxx98-cpu-x86_64-linux",
        "torch213-cxx11-cu130-x86_64-linux",
        "torch-cuda",
        "not-a-variant",
        "torch-stable-abi214-cpu-x86_64-linux",
        "tvm-ffi01-cpu-x86_64-linux",
    ]
    res = resolve(repo, CPU_SYS)
    reasons = {e.name: e.reason for e in res.trace if isinstance(e, Rejected)}
    assert set(reasons) == set(repo)
    assert (
        "torch 2.12" in reasons["torch212-cxx11-cpu-x86_64-linux"]
        and "2.13" in reasons["torch212-cxx11-cpu-x86_64-linux"]
    )
    assert "aarch64" in reasons["torch213-cxx11-cpu-aarch64-linux"]
    assert "cxx98" in reasons["torch213-cxx98-cpu-x86_64-linux"]
    assert "CUDA 13.0" in reasons["torch213-cxx11-cu130-x86_64-linux"]
    assert "not a variant name" in reasons["not-a-variant"]
    assert ">= 2.14" in reasons["torch-stable-abi214-cpu-x86_64-linux"]
    with pytest.raises(VariantNotFoundError) as e:
        require(res, "org/repo")
    msg = str(e.value)
    assert "org/repo" in msg and "torch212-cxx11-cpu-x86_64-linux: built for torch 2.12" in msg


def test_noarch_is_taken_after_arch_builds_and_stable_abi_is_forward_compatible() -> None:
    assert (
        str(resolve(["torch-cpu", "torch213-cxx11-cpu-x86_64-linux"], CPU_SYS).chosen)
        == "torch213-cxx11-cpu-x86_64-linux"
    )
    assert (
        str(resolve(["torch-cpu", "torch-stable-abi211-cpu-x86_64-linux"], CPU_SYS).chosen)
        == "torch-stable-abi211-cpu-x86_64-linux"
    )
    assert (
        str(resolve(["torch-stable-abi28-cpu-x86_64-linux"], CPU_SYS).chosen) == "torch-stable-abi28-cpu-x86_64-linux"
    )


def test_a_repo_holding_both_kinds_gives_the_stable_abi_build_and_prefers_tagless_names() -> None:
    repo = ["torch213-cxx11-cpu-x86_64-linux", "torch213-cpu-x86_64-linux", "torch-stable-abi212-cpu-x86_64-linux"]
    assert str(resolve(repo, CPU_SYS).chosen) == "torch-stable-abi212-cpu-x86_64-linux"
    assert str(resolve(repo[:2], CPU_SYS).chosen) == "torch213-cpu-x86_64-linux"


def test_abi_tags_never_match_off_linux() -> None:
    mac = System((2, 13), "cpu", None, "aarch64", "darwin")
    res = resolve(["torch213-cxx11-cpu-aarch64-darwin", "torch213-cpu-aarch64-darwin"], mac)
    assert str(res.chosen) == "torch213-cpu-aarch64-darwin"
    assert res.trace[-1] == Rejected(
        "torch213-cxx11-cpu-aarch64-darwin", "tagged with the cxx11 C++ ABI, which only Linux torch builds have"
    )
    assert str(resolve(["torch-universal", "torch-cpu"], CPU_SYS).chosen) == "torch-cpu"


def test_backend_argument() -> None:
    repo = ["torch211-cxx11-cu130-x86_64-linux", "torch211-cxx11-cpu-x86_64-linux"]
    assert str(resolve(repo, CUDA_SYS).chosen) == "torch211-cxx11-cu130-x86_64-linux"
    assert str(resolve(repo, CUDA_SYS, backend="cpu").chosen) == "torch211-cxx11-cpu-x86_64-linux"
    with pytest.raises(UsageError, match="rocm"):
        resolve(repo, CUDA_SYS, backend="rocm")


def test_resolution_is_deterministic() -> None:
    repo = ["torch-cpu", "torch-universal", "torch213-cpu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"]
    first = resolve(repo, CPU_SYS)
    for perm in itertools.permutations(repo):
        assert resolve(perm, CPU_SYS) == first


def test_hubkernels_backend_cpu_makes_a_gpu_build_of_torch_pick_cpu_variants(monkeypatch) -> None:
    """A CUDA build of torch on a machine without a GPU (a CI box): HUBKERNELS_BACKEND=cpu picks CPU variants."""
    import torch

    from hubkernels.system import System

    monkeypatch.delenv("HUBKERNELS_BACKEND", raising=False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert System.current().backend == "cuda"
    monkeypatch.setenv("HUBKERNELS_BACKEND", "cpu")
    system = System.current()
    assert (system.backend, system.backend_version, system.capabilities) == ("cpu", None, ())
    assert system.build_variant().backend == "cpu"
    monkeypatch.setenv("HUBKERNELS_BACKEND", "cuda")
    with pytest.raises(ValueError, match="only 'cpu' can be forced"):
        System.current()
