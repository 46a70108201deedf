"""Users, organizations and access tokens of the local Hub, the way the Hub scopes them.

A token belongs to a user and has a role, ``read`` or ``write``; the user owns the namespace of its own name and
belongs to organizations. Tokens live in ``<root>/tokens.json`` as sha256 digests only (written atomically, mode
0600) and are reloaded when the file changes, so ``hubkernels serve token create`` works while a server runs.
A token may also be given in memory (`TokenSpec`, for tests and the embedded demo). ``admin`` tokens may use
the test-mode control routes. LFS uploads carry a `GrantSigner` grant instead of a token (the client sends
none on the PUT).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from filelock import FileLock

from ..errors import HubkernelsError  # noqa: E402
from ..layout import is_repo_name, write_atomic  # noqa: E402

TOKENS_FILE = "tokens.json"
ROLES = ("read", "write")
_HEX64_RE = re.compile(r"^[0-9a-f]{64}$")


class TokenError(HubkernelsError, ValueError):
    """A token request that cannot be honoured (bad user or org name, unknown token id)."""


@dataclass(frozen=True)
class TokenSpec:
    """A token given in plain text (kept hashed in memory): its user, organizations, role and admin right."""

    token: str
    user: str
    orgs: tuple[str, ...] = ()
    write: bool = False
    admin: bool = False


@dataclass(frozen=True)
class Identity:
    """Who a request is: the token's user, the user's organizations and the token's role."""

    user: str
    orgs: tuple[str, ...] = ()
    role: str = "read"
    admin: bool = False

    def member_of(self, namespace: str) -> bool:
        """Whether ``namespace`` is the user's own or one of its organizations (exactly: this hub's names are
        case-sensitive, so ``ORG`` is not ``org``)."""
        return namespace == self.user or namespace in self.orgs


def hash_token(token: str) -> str:
    """What is stored for a token: the hex sha256 of its UTF-8 text."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(kind: str, name: str) -> str:
    if not is_repo_name(name):
        raise TokenError(f"Invalid {kind} name {name!r}: use letters, digits, '-', '_' and '.' (at most 96).")
    return name


@dataclass
class _Record:
    id: str
    sha256: str
    user: str
    role: str
    admin: bool
    created: int
    name: str = ""


@dataclass
class _State:
    records: dict[str, _Record] = field(default_factory=dict)  # by sha256
    users: dict[str, list[str]] = field(default_factory=dict)  # user -> orgs


class TokenStore:
    """The tokens of one hub: those in ``<root>/tokens.json`` (if ``root``) and those given as `TokenSpec`."""

    def __init__(self, root: Path | None, specs: Iterable[TokenSpec] = ()) -> None:
        self.path = Path(root) / TOKENS_FILE if root is not None else None
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._file = _State()
        self._memory: dict[str, Identity] = {}
        for spec in specs:
            self.add(spec)

    # -- reading ------------------------------------------------------------------------------------------------

    def lookup(self, token: str) -> Identity | None:
        """The identity of a token, or None when it is unknown or revoked."""
        return self.lookup_digest(hash_token(token))

    def lookup_digest(self, digest: str) -> Identity | None:
        """The identity of the token whose `hash_token` is ``digest`` (what Xet tokens and upload grants carry, so
        revoking the token revokes them at once), or None."""
        found = self._memory.get(digest)
        if found is not None:
            return found
        state = self._current()
        record = state.records.get(digest)
        if record is None:
            return None
        return Identity(record.user, tuple(state.users.get(record.user, ())), record.role, record.admin)

    def configured(self) -> bool:
        """Whether any token exists (in memory or on disk)."""
        return bool(self._memory) or bool(self._current().records)

    def list(self) -> list[dict[str, Any]]:
        """The stored tokens without their secrets: id, user, orgs, role, admin, created, name."""
        state = self._current()
        return [
            {
                "id": r.id,
                "user": r.user,
                "orgs": list(state.users.get(r.user, [])),
                "role": r.role,
                "admin": r.admin,
                "created": r.created,
                "name": r.name,
            }
            for r in state.records.values()
        ]  # in order of creation

    # -- writing ------------------------------------------------------------------------------------------------

    def add(self, spec: TokenSpec) -> None:
        """Register a plain-text token in memory only (never written to disk)."""
        check_name("user", spec.user)
        orgs = tuple(check_name("organization", o) for o in spec.orgs)
        self._memory[hash_token(spec.token)] = Identity(spec.user, orgs, "write" if spec.write else "read", spec.admin)

    def create(
        self, user: str, orgs: Iterable[str] = (), *, write: bool = False, admin: bool = False, name: str = ""
    ) -> str:
        """A new token for ``user`` (who joins ``orgs``), stored hashed; the plain text is returned only here."""
        if self.path is None:
            raise TokenError("This hub has no root directory to store tokens in; pass tokens= in memory instead.")
        check_name("user", user)
        orgs = [check_name("organization", o) for o in orgs]
        token = "hf_" + secrets.token_urlsafe(30)
        with self._lock, self._file_lock():
            state = self._load()
            known = state.users.setdefault(user, [])
            known.extend(o for o in orgs if o not in known)
            record = _Record(
                secrets.token_hex(4),
                hash_token(token),
                user,
                "write" if write else "read",
                admin,
                int(time.time()),
                name,
            )
            state.records[record.sha256] = record
            self._save(state)
        return token

    def revoke(self, token_or_id: str) -> bool:
        """Remove a stored token given by its id (from `list`) or its plain text; False when none matched."""
        if self.path is None:
            return False
        with self._lock, self._file_lock():
            state = self._load()
            digest = hash_token(token_or_id)
            doomed = [k for k, r in state.records.items() if r.id == token_or_id or k == digest]
            for key in doomed:
                del state.records[key]
            if doomed:
                self._save(state)
        return bool(doomed)

    # -- file ---------------------------------------------------------------------------------------------------

    def _file_lock(self) -> FileLock:
        """Serialises writers of the file across processes (two `token create` at once both land)."""
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.path) + ".lock", timeout=30)

    def _current(self) -> _State:
        if self.path is None:
            return self._file
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            with self._lock:
                self._file = self._load()
                self._stamp = stamp
        return self._file

    def _load(self) -> _State:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return _State()
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise TokenError(
                f"{self.path} is not valid JSON ({exc}): restore it or delete it and create tokens again."
            ) from None
        try:
            state = _State(users={str(u): [str(o) for o in orgs] for u, orgs in (data.get("users") or {}).items()})
            for item in data.get("tokens") or []:
                record = _Record(
                    str(item["id"]),
                    str(item["sha256"]),
                    str(item["user"]),
                    str(item.get("role", "read")),
                    bool(item.get("admin", False)),
                    int(item.get("created", 0)),
                    str(item.get("name", "")),
                )
                if record.role in ROLES:
                    state.records[record.sha256] = record
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise TokenError(
                f"{self.path} is not a tokens file of this hub ({type(exc).__name__}: {exc}): restore it "
                "or delete it and create tokens again."
            ) from None
        return state

    def _save(self, state: _State) -> None:
        assert self.path is not None
        data = {"users": state.users, "tokens": [r.__dict__ for r in state.records.values()]}
        write_atomic(self.path, json.dumps(data, indent=1), mode=0o600, durable=True)


class GrantSigner:
    """Time-limited HMAC grants that let one upload (PUT and verify) of one object into one repo through, on
    behalf of one token (its `hash_token` digest rides in the grant, so the route re-checks that token)."""

    def __init__(self, ttl_s: int = 3600) -> None:
        self._key = secrets.token_bytes(32)
        self.ttl_s = ttl_s

    def sign(self, repo_type: str, repo_id: str, oid: str, digest: str) -> str:
        expires = int(time.time()) + self.ttl_s
        return f"{expires}.{digest}.{self._mac(repo_type, repo_id, oid, digest, expires)}"

    def check(self, grant: str | None, repo_type: str, repo_id: str, oid: str) -> str | None:
        """The token digest of a valid, unexpired grant for this object and repo; None otherwise."""
        expires, _, rest = (grant or "").partition(".")
        digest, _, mac = rest.partition(".")
        if not expires.isdigit() or int(expires) < time.time() or not _HEX64_RE.match(digest):
            return None
        expected = self._mac(repo_type, repo_id, oid, digest, int(expires))
        return digest if hmac.compare_digest(mac.encode("utf-8", "replace"), expected.encode()) else None

    def _mac(self, repo_type: str, repo_id: str, oid: str, digest: str, expires: int) -> str:
        message = f"{repo_type}\0{repo_id}\0{oid}\0{digest}\0{expires}".encode("utf-8", "surrogatepass")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()
