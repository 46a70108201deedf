"""Whether a kernel may run in this process: the caller's opt-in, HUBKERNELS_TRUSTED_ORGS, or the Hub's
trusted-publisher flag (cached for `settings.trust_freshness_s()` seconds; a refusal is never cached)."""

from __future__ import annotations

import time
from typing import Any, Union

from .. import settings
from ..errors import UsageError
from .cache import RepoState
from .remote import Remote, UntrustedKernelError, endpoint

#: What `trust_remote_code` accepts: True, False, or a list/tuple/set of the organizations (or repo ids) to trust.
#: A mapping such as {"org": False} is refused with UsageError (never read by its keys).
TrustRemoteCode = Union[bool, list[str], tuple[str, ...], set[str], frozenset[str]]


def check_trust(state: RepoState, remote: Remote, ref: Any, trust_remote_code: TrustRemoteCode) -> str:
    """Why this kernel may run here: an explicit opt-in, or the Hub's trusted-publisher flag (else raise)."""
    repo_id = state.repo_id
    org = repo_id.split("/", 1)[0]
    if trust_remote_code is True:
        return "trust_remote_code"
    if trust_remote_code is not False and trust_remote_code is not None:
        if org in _allow_list(trust_remote_code, org) or repo_id in _allow_list(trust_remote_code, org):
            return "allow-list"
    if org in settings.trusted_orgs():
        return "HUBKERNELS_TRUSTED_ORGS"
    record = state.trust()
    if ref.commit in (record.get("approved_commits") or []):
        return "publisher"  # this exact commit was loaded while its publisher was trusted; commits are immutable
    age = time.time() - float(record.get("checked_at") or 0.0)
    if record.get("publisher_trusted") is True and (settings.offline() or age < settings.trust_freshness_s()):
        trusted = True  # a refusal is never cached: an org the Hub starts trusting loads on the next call
    elif settings.offline():
        raise UntrustedKernelError(
            f"HF_HUB_OFFLINE=1, so whether {org!r} is a trusted kernel publisher cannot be checked. Load "
            f"{repo_id} once online, or opt in: trust_remote_code=[{org!r}] or HUBKERNELS_TRUSTED_ORGS={org}."
        )
    else:
        trusted = remote.publisher_trusted(org)
        state.save_trust(publisher_trusted=trusted)
    if trusted:
        return "publisher"
    raise UntrustedKernelError(
        f"{repo_id} is published by {org!r}, which {endpoint()} does not flag as a trusted kernel publisher, and "
        f"loading a kernel runs its code in this process. If you trust {org}, pass trust_remote_code=[{org!r}] "
        f"(or trust_remote_code=True), or set HUBKERNELS_TRUSTED_ORGS={org}."
    )


def _allow_list(trust_remote_code: object, org: str) -> frozenset[str]:
    """The organizations and repo ids a list/tuple/set `trust_remote_code` names; anything else is refused.

    A mapping is refused rather than read: `{"org": False}` reads as a refusal to a person but as the key "org"
    to `in`, and guessing which was meant is how code gets trusted by accident.
    """
    if isinstance(trust_remote_code, (list, tuple, set, frozenset)) and all(
        isinstance(x, str) for x in trust_remote_code
    ):
        return frozenset(trust_remote_code)
    raise UsageError(
        "trust_remote_code must be True, False, or a list of organizations or repo ids such as "
        f"[{org!r}], got {trust_remote_code!r}"
    )
