"""A Hugging Face Hub-compatible HTTP server, the default Hub of the demo and the tests.

Repositories (model, dataset, space, kernel) are bare git repos under a root directory, so commits, branches
and tags are real and file oids are git's; large files arrive through the Xet protocol (``huggingface_hub`` with
``hf_xet``, the default install) or the LFS batch API (clients without it) and are stored by sha256. The real
``huggingface_hub`` client (2.3+; reads also 1.33) talks to it unchanged when ``HF_ENDPOINT`` points at it. Any
bearer token is the owner's; a private repo (``create_repo(..., private=True)``, ``hubkernels upload --private``,
or its settings) answers requests without a token with the Hub's 401 RepoNotFound. It counts requests and injects faults, for tests of download behaviour.

This package imports nothing of hubkernels' other stages and never imports ``huggingface_hub``, so a test can
start it before the client reads ``HF_ENDPOINT``.
"""

from .app import create_app
from .background import BackgroundHub, serve
from .cli import register_cli
from .control import Fault, HubControl

__all__ = ["BackgroundHub", "Fault", "HubControl", "create_app", "register_cli", "serve"]
