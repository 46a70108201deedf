"""The typed errors hubkernels raises. Each message says what went wrong and what to do about it.

The rule: every error class derives from `HubkernelsError` (the CLI turns any of them into exit status 2 and
one line). The errors that several stages raise live here; an error only one stage raises lives in that stage's
module, next to the code that raises it, and the package face re-exports every one of them (`hubkernels.<Name>`):
`ConfigError` (config), `PublishError` (publish), `LockFileError` (lock), `KernelNotFoundError`,
`UntrustedKernelError`, `DownloadError` (fetch), `LayerNotFoundError` (layers), `ConfigEntryError`
(integrations.config), `SkillInstallError` (author.skill_install) and `HubError` (server: the Hub's HTTP error answers).
"""

from __future__ import annotations


class HubkernelsError(Exception):
    """Base class of every error hubkernels raises on purpose (the CLI turns these into exit status 2)."""


class BuildError(HubkernelsError):
    """A kernel could not be compiled or laid out; the message carries the compiler's own output."""


class VariantNotFoundError(HubkernelsError, FileNotFoundError):
    """No build variant fits this system; the message holds the full accept/reject trace."""


class DigestError(HubkernelsError):
    """Files of a variant do not match the digest recorded in its metadata.json."""


class KernelLoadError(HubkernelsError, ImportError):
    """A variant was found but could not be imported."""


class VariantImportError(KernelLoadError):
    """A variant's native module does not load on this machine (a missing symbol, library or symbol version)."""

    def __init__(self, message: str, *, variant: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.variant = variant
        self.reason = reason


class UsageError(HubkernelsError, ValueError):
    """An argument the library could only judge at run time (say, a backend this machine lacks)."""


class MetadataError(HubkernelsError, ValueError):
    """A variant's metadata.json is not valid: the message names the file and the key."""
