"""The loader: every public way to load a kernel, from the Hub, a lock file or a local build.

    ltx = hubkernels.get_kernel("hubkernels/ltx-kernels")             # newest v<N> branch (logged, pin it)
    ltx = hubkernels.get_kernel("hubkernels/ltx-kernels", version=1)  # what libraries should write

Drawn like HF `kernels`, top to bottom: `load` (the public loaders, re-exported here) and `locking` (writing lock
files) use `install` (resolve a request to a commit, check trust, choose this machine's variant, download and
verify it: `resolve`, `trust`, `artifact`, `download`, `source`) and `importer` (import a verified variant under
its unique id: `native`, `kernel_deps`), over `remote` (every Hub request), `cache` (what is kept on disk) and
`lockfile` (the lock file format). No module imports one above it.

Verification is on by default: metadata.json must match the Hub's listing, and every file the per-file digest
in metadata.json. A receipt (the hash of each verified file) lets a warm load check content without the Hub: every
file is hashed again once per process (a few hundred microseconds for a small build) and compared with it.

A warm load of a `version` asks the Hub one thing, the branch's current commit (as HF `kernels` does, so a
re-uploaded `v1` is seen at once); everything else, a cached listing and a receipt, is answered from
`<cache>/kernels--org--name/hubkernels/` (see `cache`). A 40-hex `revision` or a lockfile makes no request at
all, and so does a `version` resolved within HUBKERNELS_VERSION_TTL seconds when the user sets one (offline, the
index answers whatever its age): then other ranks and later jobs sharing a node's cache ask the Hub nothing.
A receipt holds while every file keeps the content it recorded; the Python code runs from sources checked as they
are read (or code compiled from them at verification), never from `__pycache__`. `force_download=True`
re-downloads and re-verifies everything.
"""

from .importer import LoadedKernel, OpNamespaceError, loaded_kernels
from .install import Installed, resolve_local
from .kernel_deps import KernelDependencyError, get_kernel_dep
from .load import (
    KernelInfo,
    get_kernel,
    get_kernel_variants,
    get_local_kernel,
    has_kernel,
    install_kernel,
    install_locked,
    kernel_info,
    kernel_versions,
    load_locked,
)
from .lockfile import DEFAULT_LOCKFILE, LockEntry, LockFileError, read_lock
from .locking import lock, lock_kernel, lock_project
from .remote import DownloadError, KernelNotFoundError, UntrustedKernelError
from .resolve import parse_spec
from .trust import TrustRemoteCode

__all__ = [
    "DEFAULT_LOCKFILE",
    "DownloadError",
    "Installed",
    "KernelDependencyError",
    "KernelInfo",
    "KernelNotFoundError",
    "LoadedKernel",
    "LockEntry",
    "LockFileError",
    "OpNamespaceError",
    "TrustRemoteCode",
    "UntrustedKernelError",
    "get_kernel",
    "get_kernel_dep",
    "get_kernel_variants",
    "get_local_kernel",
    "has_kernel",
    "install_kernel",
    "install_locked",
    "kernel_info",
    "kernel_versions",
    "load_locked",
    "loaded_kernels",
    "lock",
    "lock_kernel",
    "lock_project",
    "parse_spec",
    "read_lock",
    "resolve_local",
]
