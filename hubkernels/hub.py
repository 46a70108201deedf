"""The one place hubkernels makes its Hub client: an `HfApi` with our name, and the endpoint it talks to.

Every stage that talks to the Hub (publish, fetch) takes its client here, so the endpoint and token always come
from huggingface_hub's own settings (`HF_ENDPOINT`, `HF_TOKEN`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._version import __version__

if TYPE_CHECKING:
    from huggingface_hub import HfApi


def api() -> HfApi:
    """The HfApi every hubkernels Hub call goes through (endpoint and token from huggingface_hub's settings)."""
    from huggingface_hub import HfApi

    return HfApi(library_name="hubkernels", library_version=__version__)


def endpoint() -> str:
    """The Hub endpoint huggingface_hub was pointed at (read when it was first imported)."""
    from huggingface_hub import constants

    return constants.ENDPOINT
