"""A Hugging Face Hub-compatible HTTP server, the default Hub of the demo and the tests.

Repositories (model, dataset, space, kernel) are bare git repos under a root directory, so commits, branches
and tags are real and file oids are git's; large files arrive through the Xet protocol (``huggingface_hub`` with
``hf_xet``, the default install) or the LFS batch API (clients without it) and are stored by sha256. The real
``huggingface_hub`` client (2.3+; reads also 1.33) talks to it unchanged when ``HF_ENDPOINT`` points at it.
Access is the Hub's: tokens (``hubkernels serve token create``, stored hashed) are read or write tokens of a user
who belongs to organizations; anonymous clients read public repos only, writing needs a write token of a member
of the repo's namespace, and a private repo answers only its members (anonymous clients get the Hub's 401
RepoNotFound). Bodies, paths and request times are bounded. In test mode it also serves its request log and
fault injection over HTTP, for tests of download behaviour.

This package imports nothing of hubkernels' other stages and never imports ``huggingface_hub``, so a test can
start it before the client reads ``HF_ENDPOINT``. Its dependencies are the ``serve`` extra
(``pip install 'hubkernels[serve]'``); without them, importing it raises `ServeExtraMissing`, which says so.
"""

import importlib.util

from ..errors import HubkernelsError

#: The serve extra's modules (pyproject.toml's `serve` extra installs them).
EXTRA_MODULES = ("starlette", "uvicorn", "regex", "blake3", "lz4")


class ServeExtraMissing(HubkernelsError, ImportError):
    """The local Hub's dependencies (the ``serve`` extra) are not installed; the message gives the pip command."""


_missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
if _missing:
    raise ServeExtraMissing(
        f"the local Hub needs the serve extra ({', '.join(_missing)} missing): pip install 'hubkernels[serve]'"
    )

from .app import create_app  # noqa: E402  (after the check: these import the extra's modules)
from .auth import Identity, TokenError, TokenSpec, TokenStore  # noqa: E402
from .background import BackgroundHub, ServeError, serve  # noqa: E402
from .common import Limits  # noqa: E402
from .control import Fault, HubControl  # noqa: E402

__all__ = [
    "BackgroundHub",
    "Fault",
    "HubControl",
    "Identity",
    "Limits",
    "ServeError",
    "ServeExtraMissing",
    "TokenError",
    "TokenSpec",
    "TokenStore",
    "create_app",
    "serve",
]
