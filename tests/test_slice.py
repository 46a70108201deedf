"""Per-arch slices of a CUDA variant: each module keeps one arch's SASS and the highest PTX, `hubkernels upload`
publishes one slice wheel per arch beside the fat variant, and the loader downloads the slice of the arch it sees
(HUBKERNELS_CUDA_ARCH rehearses a GPU on this CPU machine), far fewer bytes than the fat variant.

The CUDA module is a small one compiled here by nvcc for sm_80 and sm_90 (+ PTX of sm_90); no GPU is needed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from helpers import new_repo, run_python

from hubkernels import digest
from hubkernels.builder.slice import fatbin_entries, slice_variant
from hubkernels.metadata import Metadata

NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").is_file() else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit) to compile a CUDA module")
VARIANT = "torch-stable-abi211-cu130-x86_64-linux"
SASS, PTX = 2, 1
# Enough device code that it outweighs the host code, as in a real kernel (flash-attn runs to hundreds of MB).
KERNELS = "\n".join(
    f"""
__global__ void k{i}(float* x, int n) {{
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  float v = j < n ? x[j] : 0.f;
  #pragma unroll
  for (int r = 0; r < 64; ++r) v = v * {1 + i % 7}.0001f + __sinf(v + r);
  if (j < n) x[j] = v;
}}"""
    for i in range(24)
)


@pytest.fixture(scope="module")
def cuda_kernel(tmp_path_factory) -> Path:
    """A kernel root `mini-cuda` with one built CUDA variant (sm_80, sm_90 + PTX) and a digest."""
    root = tmp_path_factory.mktemp("mini-cuda")
    src = root / "k.cu"
    src.write_text(KERNELS + '\nextern "C" int mini_cuda_kernels() { return 24; }\n')
    vdir = root / "build" / VARIANT
    vdir.mkdir(parents=True)
    so = vdir / "_mini_cuda_cuda_abcdef0.abi3.so"
    subprocess.run(
        [
            NVCC,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-cudart",
            "shared",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90,code=sm_90",
            "-gencode",
            "arch=compute_90,code=compute_90",
            str(src),
            "-o",
            str(so),
        ],
        check=True,
        timeout=600,
    )
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    meta = Metadata(
        name="mini-cuda",
        id="_mini_cuda_cuda_abcdef0",
        version=1,
        license="Apache-2.0",
        backend={"type": "cuda", "archs": ["8.0", "9.0"]},
    )
    meta.digest = {"algorithm": "sha256", "files": digest.hash_variant(vdir)}
    meta.write(vdir)
    (root / "build.toml").write_text(
        textwrap.dedent("""\
        [general]
        name = "mini-cuda"
        version = 1
        edition = 5
        license = "Apache-2.0"
        backends = ["cuda"]

        [torch-noarch]
        """)
    )
    return root


@needs_nvcc
def test_a_slice_keeps_its_arch_sass_and_the_highest_ptx(cuda_kernel: Path, tmp_path: Path) -> None:
    fat = cuda_kernel / "build" / VARIANT
    so = next(fat.glob("*.so"))
    assert sorted({e for fb in fatbin_entries(so.read_bytes()) for e in fb}) == [(PTX, 90), (SASS, 80), (SASS, 90)]
    for arch, sm in (("8.0", 80), ("9.0", 90)):
        sliced = slice_variant(fat, arch, tmp_path / arch)
        data = next(sliced.glob("*.so")).read_bytes()
        assert sorted({e for fb in fatbin_entries(data) for e in fb}) == sorted({(SASS, sm), (PTX, 90)})
        assert len(data) == len(so.read_bytes())  # nothing moves: the zeroed bytes cost nothing once compressed
        meta = Metadata.read(sliced)
        assert meta.archs == [arch] and digest.violations(sliced, meta.digest) == []
        assert meta.id == Metadata.read(fat).id  # the same build, the same op namespace


@needs_nvcc
def test_upload_publishes_a_slice_per_arch_and_the_loader_downloads_only_its_arch(
    hub, cuda_kernel: Path, tmp_path: Path
) -> None:
    from huggingface_hub import HfApi, RepoFile

    from hubkernels.publish import upload

    repo_id = new_repo()
    result = upload(cuda_kernel, repo_id=repo_id, source=False)
    wheels = {
        f.path.rsplit("/", 1)[1]: f.size
        for f in HfApi().list_repo_tree(
            repo_id, path_in_repo=f"wheels/{VARIANT}", revision=result.commit, repo_type="kernel"
        )
        if isinstance(f, RepoFile)
    }
    tag = "cp310-abi3-manylinux_2_28_x86_64"
    fat, sm90 = f"mini_cuda-1-{tag}-cu130.whl", f"mini_cuda-1-{tag}-cu130_sm90.whl"
    assert set(wheels) == {fat, f"mini_cuda-1-{tag}-cu130_sm80.whl", sm90}
    assert wheels[sm90] < 0.85 * wheels[fat]  # measured: 21.3 KB against 27.4 KB (the PTX stays in both)

    received = {}
    for arch in ("9.0", None):  # the arch the loader sees, in a new process with its own Xet cache
        hub.reset_requests()
        cache = tmp_path / f"cache-{arch}"
        run_python(
            f"""
            from hubkernels.fetch import artifact, cache, remote
            from hubkernels.fetch.resolve import resolve_ref
            from hubkernels.fetch.download import download_and_verify
            state, remote = cache.RepoState({repo_id!r}), remote.Remote({repo_id!r})
            ref = resolve_ref(state, remote, 1, None)
            tree = artifact.listing(state, remote, ref.commit)
            download_and_verify(state, remote, ref, {VARIANT!r}, tree, False)
            print(open(state.variant_dir(ref.commit, {VARIANT!r}) / "metadata.json").read())
            """,
            cache,
            HF_XET_CACHE=str(cache / "xet"),
            **({"HUBKERNELS_CUDA_ARCH": arch} if arch else {}),
        )
        xorb_bytes = 0
        for r in hub.requests():
            if "/xorb-data/" in r["path"] and r["range"]:
                start, end = r["range"].removeprefix("bytes=").split("-")
                xorb_bytes += int(end) - int(start) + 1
        received[arch] = xorb_bytes
        archs = json.loads(next((cache / f"kernels--{repo_id.replace('/', '--')}").rglob("metadata.json")).read_text())[
            "backend"
        ]["archs"]
        assert archs == (["9.0"] if arch else ["8.0", "9.0"])
    print("bytes downloaded:", received)
    assert 0 < received["9.0"] < 0.85 * received[None]


@needs_nvcc
def test_an_arch_specific_target_shares_its_sms_slice(hub, cuda_kernel: Path, tmp_path: Path) -> None:
    """A variant that also lists `9.0a` (a kernel built for wgmma, like ltx-kernels' attention) gets one sm_90
    slice (sliced once), and the upload does not stop at an arch name it cannot read."""
    from huggingface_hub import HfApi

    from hubkernels.publish import upload

    root = tmp_path / "mini-cuda"
    shutil.copytree(cuda_kernel, root)
    meta = Metadata.read(root / "build" / VARIANT)
    meta.backend = {"type": "cuda", "archs": ["8.0", "9.0", "9.0a"]}
    meta.write(root / "build" / VARIANT)
    repo_id = new_repo()
    result = upload(root, repo_id=repo_id, source=False)
    wheels = HfApi().list_repo_files(repo_id, revision=result.commit, repo_type="kernel")
    labels = sorted(w.rsplit("-", 1)[1] for w in wheels if w.startswith(f"wheels/{VARIANT}/"))
    assert labels == ["cu130.whl", "cu130_sm80.whl", "cu130_sm90.whl"]


@pytest.mark.gpu
def test_the_sm90_slice_of_ltx_kernels_loads_and_runs_on_the_gpu(hub, ltx_build, tmp_path: Path) -> None:
    """On an sm_90 GPU: ltx-kernels' CUDA variant, uploaded with its slices, loads as the sm_90 slice and its ops
    match their formulas. Prints the sizes of the fat wheel and of the slice (BENCHMARKS.md)."""
    import uuid
    import warnings

    import torch
    from huggingface_hub import HfApi, RepoFile

    from hubkernels.fetch import get_kernel
    from hubkernels.fetch.install import install
    from hubkernels.publish import upload

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100, H200)")
    assert Metadata.read(ltx_build.path).backend_type == "cuda"
    repo_id = f"hubkernels/ltx-slices-{uuid.uuid4().hex[:8]}"
    root = Path(__file__).resolve().parent.parent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a checkout with local changes publishes a dirty build
        result = upload(root, repo_id=repo_id, variants=[ltx_build.path.name], source=False)
    sizes = {
        f.path.rsplit("-", 1)[1]: f.size
        for f in HfApi().list_repo_tree(
            repo_id, path_in_repo=f"wheels/{ltx_build.path.name}", revision=result.commit, repo_type="kernel"
        )
        if isinstance(f, RepoFile)
    }
    so = sum(p.stat().st_size for p in ltx_build.path.glob("*.so"))
    print(f"ltx-kernels {ltx_build.path.name}: .so {so} B; wheels {json.dumps(sizes)}")
    sm90 = next((k for k in sizes if k.endswith("_sm90.whl")), None)
    assert sm90 is not None and sizes[sm90] < sizes[next(k for k in sizes if "_" not in k)], sizes

    installed = install(repo_id, version=1, cache_dir=tmp_path)
    assert Metadata.read(installed.path).archs == ["9.0"]  # the slice, not the fat variant
    ltx = get_kernel(repo_id, version=1, cache_dir=tmp_path)
    torch.manual_seed(0)
    x = torch.randn(2, 333, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, device="cuda", dtype=torch.bfloat16)
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
    torch.testing.assert_close(ltx.rms_norm(x, w, 1e-6), ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(ltx.gelu_tanh(x), torch.nn.functional.gelu(x, approximate="tanh"), atol=2e-2, rtol=2e-2)
