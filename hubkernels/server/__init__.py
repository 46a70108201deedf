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
start it before the client reads ``HF_ENDPOINT``.
"""

from .app import create_app
from .auth import Identity, TokenError, TokenSpec, TokenStore
from .background import BackgroundHub, ServeError, serve
from .common import Limits
from .control import Fault, HubControl

__all__ = [
    "BackgroundHub",
    "Fault",
    "HubControl",
    "Identity",
    "Limits",
    "ServeError",
    "TokenError",
    "TokenSpec",
    "TokenStore",
    "create_app",
    "serve",
]
