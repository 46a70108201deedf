"""Isolated, cached build toolchains made from the package index; the user's environment is never touched.

A toolchain is one torch release in its own virtual environment, plus, for CUDA builds, the CUDA compiler
from the `nvidia-cuda-*` wheels (or a local toolkit of the same version). Both live under
`settings.toolchain_dir()` (default `~/.cache/hubkernels/toolchains`) and are made once:

    py311-torch2.12/      venv: torch 2.12.*, ninja, setuptools and the few packages `hubkernels build` needs
    cuda13.0/             `pip install --target`: nvcc, cudart, cccl, crt and nvvm 13.0 (CUDA_HOME=cuda13.0/nvidia/cu13)

Each is written under a lock, and only a toolchain whose `.complete` marker exists is used, so an interrupted
install is redone, never half-used.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import settings
from ..errors import HubkernelsError

__all__ = ["Toolchain", "ToolchainError", "ToolchainUnavailable", "toolchain", "cuda_home", "torch_env"]

#: What a toolchain's venv needs besides torch to run `python -m hubkernels build` from our source tree.
BUILD_REQUIREMENTS = (
    "ninja",
    "setuptools>=68",
    "wheel",
    "packaging>=23",
    "tqdm",
    "filelock",
    "numpy",
    "pyelftools>=0.31",
    "kernel-abi-check>=0.14",
    "tomli>=2; python_version < '3.11'",  # hubkernels reads build.toml in the toolchain too
)
#: The nvidia-cuda-* wheels that make a CUDA_HOME (13.x wheels ship the whole nvcc; 12.x ones only ptxas).
CUDA_WHEELS = ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-nvvm")
_MARKER = ".complete"

Say = Callable[[str], None]
#: Where progress goes unless the caller passes `say` (the CLI prints it).
_log: Say = logging.getLogger("hubkernels.builder.toolchain").info


class ToolchainError(HubkernelsError):
    """A toolchain could not be made (the message holds the installer's own output)."""


class ToolchainUnavailable(ToolchainError):
    """This toolchain cannot be made from the package index on this machine (the message says what would do)."""


@dataclass(frozen=True)
class Toolchain:
    """Where a build for one (torch, CUDA) pair runs: its Python, its torch, and its CUDA_HOME if any."""

    python: Path
    torch_version: str
    torch_cuda: str | None
    cuda_home: Path | None = None

    def env(self) -> dict[str, str]:
        """The environment a build in this toolchain runs with (our source first on the path)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
        source = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = source + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PATH"] = str(self.python.parent) + os.pathsep + env.get("PATH", "")
        if self.cuda_home is not None:
            env["CUDA_HOME"] = str(self.cuda_home)
            env["PATH"] = str(self.cuda_home / "bin") + os.pathsep + env["PATH"]
        return env


def toolchain(torch: str, cuda: str | None = None, *, say: Say = _log) -> Toolchain:
    """The toolchain for `torch` (major.minor) and, for CUDA builds, `cuda` (major.minor): made on first use."""
    python, info = torch_env(torch, say=say)
    home = cuda_home(cuda, say=say) if cuda else None
    return Toolchain(python, info["torch"], info.get("cuda"), home)


def torch_env(version: str, *, say: Say = _log) -> tuple[Path, dict[str, str]]:
    """A venv with `torch==<version>.*` from the package index: (its python, {"torch": ..., "cuda": ...})."""
    _check_version("torch", version)
    root = settings.toolchain_dir() / f"py{sys.version_info[0]}{sys.version_info[1]}-torch{version}"
    python = root / "bin" / "python"

    def make() -> None:
        say(f"  toolchain torch {version}: creating a virtual environment in {root}")
        _run([_base_python(), "-m", "venv", str(root)], f"creating the venv for torch {version}")
        say(
            f"  toolchain torch {version}: installing torch=={version}.* and the build requirements (pip; a CUDA "
            "build of torch is several GB on a cold cache)"
        )
        _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--progress-bar=off",  # not -q: pip names the constraint that refused a release only without it
                f"torch=={version}.*",
                *BUILD_REQUIREMENTS,
            ],
            f"installing torch {version}",
            unavailable=_no_release(f"torch {version}"),
        )
        probe = (
            "import json, torch; print(json.dumps({'torch': torch.__version__.split('+')[0], "
            "'cuda': torch.version.cuda}))"
        )
        out = _run([str(python), "-c", probe], f"importing torch {version}")
        (root / "toolchain.json").write_text(out.strip().splitlines()[-1])
        (root / "requirements.txt").write_text("\n".join(BUILD_REQUIREMENTS))

    _once(root, make, say, f"torch {version}", usable=python.exists)
    _upgrade_requirements(root, python, say)
    return python, json.loads((root / "toolchain.json").read_text())


def _base_python() -> str:
    """The interpreter a toolchain's venv points at: the real one, never the venv we run in (which may go away).

    Python 3.10's venv links a venv made from inside another venv to that venv's python, so deleting the first
    venv broke every toolchain it had made; 3.11 and newer link the base interpreter themselves.
    """
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _upgrade_requirements(root: Path, python: Path, say: Say) -> None:
    """Install what `BUILD_REQUIREMENTS` gained since the toolchain was made (a newer hubkernels needs more)."""
    from filelock import FileLock

    record = root / "requirements.txt"
    wanted = "\n".join(BUILD_REQUIREMENTS)
    if record.is_file() and record.read_text() == wanted:
        return
    with FileLock(str(root) + ".lock"):
        if record.is_file() and record.read_text() == wanted:
            return
        say(f"  toolchain {root.name}: installing the build requirements of this hubkernels")
        _run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *BUILD_REQUIREMENTS],
            f"updating the build requirements in {root}",
        )
        record.write_text(wanted)


def cuda_home(version: str, *, say: Say = _log) -> Path:
    """A CUDA_HOME for CUDA `version`: a local toolkit of that version if there is one, else the nvidia wheels."""
    _check_version("cuda", version)
    local = _local_toolkit(version)
    if local is not None:
        return local
    if int(version.split(".")[0]) < 13:
        raise ToolchainUnavailable(
            f"CUDA {version}: no local toolkit of that version, and the package index's nvidia-cuda-nvcc-cu12 wheels "
            "(12.0-12.9) carry only ptxas and libnvvm (no nvcc, cicc, cudafe++, fatbinary or nvlink), while CUDA "
            "13's nvcc emits PTX a CUDA 12 ptxas cannot read and links libcudart.so.13. Install the CUDA "
            + version
            + " toolkit and point CUDA_HOME at it."
        )
    root = settings.toolchain_dir() / f"cuda{version}"

    def make() -> None:
        say(f"  toolchain CUDA {version}: installing {', '.join(CUDA_WHEELS)} {version}.* into {root}")
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                "--no-deps",
                "--target",
                str(root),
                *(f"{w}=={version}.*" for w in CUDA_WHEELS),
            ],
            f"installing CUDA {version}",
            unavailable=_no_release(f"CUDA {version}"),
        )
        home = _wheel_home(root)
        lib = home / "lib"
        for so in lib.glob("libcudart.so.*"):  # the linker wants the unversioned name
            link = lib / "libcudart.so"
            if not link.exists():
                link.symlink_to(so.name)

    _once(root, make, say, f"CUDA {version}")
    return _wheel_home(root)


# -- helpers -----------------------------------------------------------------------------------------------------


def _check_version(what: str, version: str) -> None:
    if not re.fullmatch(r"\d+\.\d+", str(version)):
        raise ToolchainError(f"{what} version {version!r}: write major.minor, e.g. 2.12 or 13.0")


def _once(
    root: Path, make: Callable[[], None], say: Say, label: str, usable: Callable[[], bool] = lambda: True
) -> None:
    """Run `make` unless `root` is complete and `usable`; under a lock, redoing a half-made or broken one."""
    from filelock import FileLock

    if (root / _MARKER).is_file() and usable():
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        if (root / _MARKER).is_file():
            if usable():
                return
            say(f"  toolchain {label}: {root} is broken (its interpreter is gone); making it again")
        shutil.rmtree(root, ignore_errors=True)
        start = time.monotonic()
        try:
            make()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        (root / _MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        say(f"  toolchain {label}: ready in {time.monotonic() - start:.0f} s")


def _run(cmd: list[str], what: str, unavailable: Callable[[str], str | None] | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log = (proc.stdout + proc.stderr).strip()
        reason = unavailable(log) if unavailable else None
        if reason:
            raise ToolchainUnavailable(reason)
        tail = "\n".join(line for line in log.splitlines() if not line.startswith("WARNING: Location"))[-3000:]
        raise ToolchainError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def _no_release(what: str) -> Callable[[str], str | None]:
    def reason(log: str) -> str | None:
        if "No matching distribution" in log or "Could not find a version" in log:
            return f"{what}: the package index has no matching release for this machine (pip: no matching distribution)"
        caps = re.findall(r"The user requested \(constraint\) (\S+)", log)
        if caps:
            return (
                f"{what}: a pip constraint on this machine refuses it ({', '.join(dict.fromkeys(caps))}); "
                "`pip config list` and PIP_CONSTRAINT show where it is set: lift it, or ask for a version it admits"
            )
        return None

    return reason


def _local_toolkit(version: str) -> Path | None:
    """A local CUDA toolkit whose nvcc reports `version` (CUDA_HOME, /usr/local/cuda-<v>, /usr/local/cuda)."""
    for candidate in (settings.cuda_home(), f"/usr/local/cuda-{version}", "/usr/local/cuda"):
        if not candidate:
            continue
        nvcc = Path(candidate) / "bin" / "nvcc"
        if nvcc.is_file():
            try:
                out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            if re.search(rf"release {re.escape(version)}\b", out):
                return Path(candidate)
    return None


def _wheel_home(root: Path) -> Path:
    homes = [p.parent.parent for p in (root / "nvidia").glob("*/bin/nvcc")]
    if not homes:
        raise ToolchainError(f"{root} holds no nvcc after installing the CUDA wheels; delete it and try again")
    return homes[0]
