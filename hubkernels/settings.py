"""Every environment variable hubkernels reads, in one place, read at call time (not import time)."""

from __future__ import annotations

import os
from pathlib import Path


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def cache_dir() -> Path | None:
    """`HUBKERNELS_CACHE`, else `KERNELS_CACHE` (HF kernels' name), else None (the huggingface_hub cache)."""
    value = os.environ.get("HUBKERNELS_CACHE") or os.environ.get("KERNELS_CACHE")
    return Path(value).expanduser() if value else None


def local_kernels() -> dict[str, Path]:
    """`LOCAL_KERNELS`: `org/name=/path` entries separated by `os.pathsep` (':' on POSIX, as HF kernels reads it;
    ';' works everywhere, so Windows drive letters survive)."""
    raw = os.environ.get("LOCAL_KERNELS", "")
    out: dict[str, Path] = {}
    for entry in raw.replace(";", os.pathsep).split(os.pathsep):
        if "=" in entry:
            repo_id, path = entry.split("=", 1)
            out[repo_id.strip()] = Path(path.strip()).expanduser()
    return out


def offline() -> bool:
    """`HF_HUB_OFFLINE`: never touch the network; load from the cache."""
    return _flag("HF_HUB_OFFLINE")


def disable_kernel_mapping() -> bool:
    """`DISABLE_KERNEL_MAPPING=1`: kernelize restores original forwards (HF kernels' switch)."""
    return _flag("DISABLE_KERNEL_MAPPING")


def trusted_orgs() -> set[str]:
    """`HUBKERNELS_TRUSTED_ORGS`: comma-separated organizations whose kernels load without trust_remote_code."""
    return {o.strip() for o in os.environ.get("HUBKERNELS_TRUSTED_ORGS", "").split(",") if o.strip()}


def version_freshness_s() -> float:
    """`HUBKERNELS_VERSION_TTL`: seconds a resolved version->commit answers loads without asking the Hub. Unset
    (0): every online load asks for the branch's current commit (one request), as HF `kernels` does, so a
    re-uploaded `v1` is seen at once; set it to trade that for zero-request warm loads."""
    try:
        return float(os.environ.get("HUBKERNELS_VERSION_TTL", "0"))
    except ValueError:
        return 0.0


def trust_freshness_s() -> float:
    """Seconds a publisher's trusted-publisher flag is reused: `HUBKERNELS_VERSION_TTL` when set, else 600 (a
    refusal is never cached)."""
    return version_freshness_s() if "HUBKERNELS_VERSION_TTL" in os.environ else 600.0


def build_from_source() -> bool:
    """`HUBKERNELS_BUILD=auto`: when no published variant fits this machine, build the published source here."""
    return os.environ.get("HUBKERNELS_BUILD", "").strip().lower() in {"auto", "1", "true", "yes", "on"}


def toolchain_dir() -> Path:
    """`HUBKERNELS_TOOLCHAINS`: where isolated build toolchains are cached (default ~/.cache/hubkernels/toolchains)."""
    value = os.environ.get("HUBKERNELS_TOOLCHAINS")
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hubkernels" / "toolchains"


def cuda_home() -> Path | None:
    """`CUDA_HOME`: the CUDA toolkit a build compiles with, as set (torch's cpp_extension reads it too); None
    when unset."""
    value = os.environ.get("CUDA_HOME", "").strip()
    return Path(value) if value else None


def cuda_arch() -> str | None:
    """HUBKERNELS_CUDA_ARCH (e.g. `9.0`): the GPU arch the loader assumes when it picks a per-arch slice, instead
    of asking torch (so a CPU machine can rehearse a GPU's download); None when unset."""
    return os.environ.get("HUBKERNELS_CUDA_ARCH", "").strip() or None


def backend() -> str | None:
    """HUBKERNELS_BACKEND=cpu: treat a CUDA or ROCm build of torch as CPU-only (a machine without a GPU)."""
    value = os.environ.get("HUBKERNELS_BACKEND", "").strip().lower()
    if value not in ("", "cpu"):
        raise ValueError(f"HUBKERNELS_BACKEND={value!r}: only 'cpu' can be forced; unset it to detect the backend")
    return value or None


def aten_cpu_capability() -> str:
    """`ATEN_CPU_CAPABILITY` (torch's own switch: `default`, `avx2`, `avx512`...): the widest ISA torch's CPU
    kernels may use, lowercase; '' when unset."""
    return os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()


def hub_read_timeout_s() -> float:
    """`HF_HUB_DOWNLOAD_TIMEOUT` (huggingface_hub's own, default 10): the longest the loader waits on a silent Hub
    connection, to connect or between two reads of an answer (and hf_xet's connect timeout, unless HF_XET_* say)."""
    try:
        return max(0.1, float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT") or 10))
    except ValueError:
        return 10.0


def hub_deadline_s() -> float:
    """`HUBKERNELS_HUB_DEADLINE` (default 30): seconds one Hub call of the loader (a listing, one file's download)
    may take with its retries, plus one second per 64 KiB received, so a stall or a trickle ends in a
    DownloadError while a large download that keeps moving is never cut off."""
    try:
        return max(0.1, float(os.environ.get("HUBKERNELS_HUB_DEADLINE") or 30))
    except ValueError:
        return 30.0
