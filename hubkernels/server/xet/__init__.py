"""The Xet protocol of the local Hub: `format` reads xorbs and shards, `store` keeps them under ``<root>/xet``,
`routes` serves the token and CAS endpoints that ``huggingface_hub`` + ``hf_xet`` call."""

from .format import XetFormatError
from .routes import install, resolve_headers, xet_routes
from .store import XetStore

__all__ = ["XetFormatError", "XetStore", "install", "resolve_headers", "xet_routes"]
