"""Where the local hub keeps Xet content: verified xorbs, file reconstructions, the sha256 -> Xet file map, and the
secret that signs Xet tokens and xorb URLs; all under ``<root>/xet``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import struct
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from starlette.requests import Request

from ...layout import write_atomic
from ..storage import HubError, Storage
from . import format as fmt

TOKEN_TTL_S = 3600
CAS_PREFIX = "/cas"
_RECORD = struct.Struct("<32sIII")  # chunk hash, byte start, byte end, raw size


class XetStore:
    """Xorbs, file reconstructions and the sha256 -> Xet file map, under ``<root>/xet``; and the token secret."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.dir = storage.root / "xet"
        for sub in ("xorbs", "files", "sha256"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self._secret = _load_secret(self.dir / "secret")

    # -- tokens -------------------------------------------------------------------------------------------------

    def issue_token(self, repo_type: str, repo_id: str, scope: str, digest: str | None) -> tuple[str, int]:
        """A signed token for one repo and scope, naming the hub token it was issued to (``digest``, None when
        anonymous) so that each use re-checks that token's access."""
        exp = int(time.time()) + TOKEN_TTL_S
        claims = json.dumps(
            {"t": repo_type, "r": repo_id, "s": scope, "e": exp, "k": digest}, separators=(",", ":")
        ).encode()
        body = base64.urlsafe_b64encode(claims).decode().rstrip("=")
        return f"xet_{body}.{self._sign(body)}", exp

    def check_token(self, request: Request, scope: str) -> dict[str, Any]:
        """The claims of the request's bearer token; 401 if absent, forged or expired, 403 if read-only for a write."""
        header = request.headers.get("authorization", "")
        value = header[7:].strip() if header.lower().startswith("bearer ") else ""
        body, _, sig = value.removeprefix("xet_").partition(".")
        if (
            not value.startswith("xet_")
            or not value.isascii()
            or not hmac.compare_digest(sig.encode(), self._sign(body).encode())
        ):
            raise HubError(
                401,
                "Missing or invalid Xet token: get one from /api/{type}s/{repo}/xet-"
                f"{scope}-token/{{revision}} on this hub and send it as a bearer token.",
            )
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        if claims["e"] < time.time():
            raise HubError(401, "The Xet token has expired: request a new one from the hub's xet-*-token route.")
        if scope == "write" and claims["s"] != "write":
            raise HubError(403, "This Xet token is read-only: uploads need a token from the xet-write-token route.")
        return claims

    def sign_url(self, xorb_hex: str) -> str:
        exp = int(time.time()) + TOKEN_TTL_S
        return f"{CAS_PREFIX}/v1/xorb-data/{xorb_hex}?e={exp}&s={self._sign(f'{xorb_hex}:{exp}')}"

    def _sign(self, text: str) -> str:
        digest = hmac.new(self._secret, text.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    # -- xorbs ----------------------------------------------------------------------------------------------------

    def xorb_path(self, xorb_hex: str) -> Path:
        fmt.hex_to_hash(xorb_hex)  # validates
        return self.dir / "xorbs" / xorb_hex

    def put_xorb(self, xorb_hex: str, data: bytes) -> bool:
        """Verify and store a xorb; False when it was already stored. The bytes are verified either way: posting
        a stored hash proves nothing unless the bytes hash to it (the repo is then linked to the xorb)."""
        path = self.xorb_path(xorb_hex)
        records = fmt.index_xorb(data, fmt.hex_to_hash(xorb_hex))
        if path.is_file():
            return False
        index = b"".join(_RECORD.pack(r.hash, r.byte_start, r.byte_end, r.size) for r in records)
        write_atomic(path.with_suffix(".idx"), index, tmp_dir=self.storage.tmp_dir)
        # last: a xorb counts as stored once its data is in place
        write_atomic(path, data, tmp_dir=self.storage.tmp_dir)
        return True

    def chunks(self, xorb_hex: str) -> list[fmt.ChunkRecord]:
        path = self.xorb_path(xorb_hex)
        if not path.is_file():
            raise HubError(400, f"Xorb {xorb_hex} was never uploaded: upload it before a shard that uses it.")
        raw = path.with_suffix(".idx").read_bytes()
        return [fmt.ChunkRecord(*_RECORD.unpack_from(raw, i)) for i in range(0, len(raw), _RECORD.size)]

    # -- files ----------------------------------------------------------------------------------------------------

    def put_shard(self, data: bytes, owns: Callable[[str], bool]) -> list[fmt.FileRecord]:
        """Check every file of a shard against the stored xorbs, which `owns` must say were uploaded to the
        shard's repository, and record it; returns the files."""
        files, xorbs = fmt.parse_shard(data)
        for xorb in xorbs:
            self.chunks(fmt.hash_to_hex(xorb.hash))  # 400 unless uploaded
        for file in files:  # chunks of another repository's upload: only with proof of knowing their content
            foreign = {x for x in _xorbs(file) if not owns(x)}
            if foreign and not file.verification:
                raise HubError(
                    403,
                    f"File {fmt.hash_to_hex(file.hash)} uses xorbs not uploaded to this repository "
                    "and its shard has no verification hashes: upload them with a current hf_xet.",
                )
        for file in files:
            self._check_file(file)
        for file in files:
            file_hex = fmt.hash_to_hex(file.hash)
            terms = [[fmt.hash_to_hex(t.xorb), t.size, t.start, t.end] for t in file.terms]
            if file.sha256 is not None:  # the claim is checked on the bytes before anyone is pointed at them
                self._store_claimed(file_hex, file.sha256, file.size, terms)
            record = {"size": file.size, "sha256": file.sha256, "terms": terms}
            write_atomic(self.dir / "files" / file_hex, json.dumps(record), tmp_dir=self.storage.tmp_dir)
            if file.sha256 is not None:
                write_atomic(self.dir / "sha256" / file.sha256, file_hex, tmp_dir=self.storage.tmp_dir)
        return files

    def _store_claimed(self, file_hex: str, sha256: str, size: int, terms: list[list[Any]]) -> None:
        """Rebuild a shard's file from its xorbs and check it hashes to the sha256 the shard claims (400 if not);
        the bytes land in the LFS store, so a commit naming the file needs no second rebuild."""
        writer = self.storage.lfs_writer(sha256, size)
        try:
            for raw in self._reconstruct(terms):
                writer.write(raw)
        except BaseException:
            writer.abort()
            raise
        try:
            writer.finish()
        except HubError:
            raise HubError(
                400,
                f"File {file_hex}: its chunks do not hash to the sha256 {sha256} its shard claims; "
                "a shard may only name content it uploads.",
            ) from None

    def _reconstruct(self, terms: list[list[Any]]) -> Iterator[bytes]:
        """The raw bytes of a file's terms, chunk by chunk."""
        for xorb_hex, _size, start, end in terms:
            chunks = self.chunks(xorb_hex)
            first, last = chunks[start].byte_start, chunks[end - 1].byte_end
            with open(self.xorb_path(xorb_hex), "rb") as f:  # only the term's bytes, not the whole xorb
                f.seek(first)
                data = f.read(last - first)
            for _, _, raw in fmt.iter_chunks(data, 0, len(data)):
                yield raw

    def _check_file(self, file: fmt.FileRecord) -> None:
        file_hex = fmt.hash_to_hex(file.hash)
        if file.verification and len(file.verification) != len(file.terms):
            raise HubError(
                400, f"File {file_hex} has {len(file.terms)} terms but {len(file.verification)} verification entries."
            )
        leaves: list[tuple[bytes, int]] = []
        for i, term in enumerate(file.terms):
            chunks = self.chunks(fmt.hash_to_hex(term.xorb))
            if term.end > len(chunks):
                raise HubError(
                    400, f"File {file_hex} uses chunks [{term.start}, {term.end}) of a xorb of {len(chunks)} chunks."
                )
            run = chunks[term.start : term.end]
            if sum(c.size for c in run) != term.size:
                raise HubError(
                    400,
                    f"File {file_hex}: term {i} says {term.size} bytes, its chunks hold {sum(c.size for c in run)}.",
                )
            if file.verification and fmt.verification_hash([c.hash for c in run]) != file.verification[i]:
                raise HubError(400, f"File {file_hex}: the verification hash of term {i} does not match its chunks.")
            leaves += [(c.hash, c.size) for c in run]
        if fmt.file_hash(leaves) != file.hash:
            raise HubError(400, f"File {file_hex}: its chunks do not hash to the file hash the shard gives.")

    def file(self, file_hex: str) -> dict[str, Any]:
        fmt.hex_to_hash(file_hex)
        path = self.dir / "files" / file_hex
        if not path.is_file():
            raise HubError(404, f"Xet file {file_hex} is not stored on this hub.")
        return json.loads(path.read_text())

    def file_for_sha256(self, sha256: str) -> str | None:
        """The Xet file hash of the content with this sha256, when it was uploaded through Xet."""
        path = self.dir / "sha256" / self.storage.lfs_path(sha256).name  # lfs_path validates the oid
        return path.read_text() if path.is_file() else None

    def fill_lfs(self, sha256: str) -> bool:
        """Rebuild a Xet-uploaded file into the LFS store (its sha256 checked); False if Xet never saw it."""
        file_hex = self.file_for_sha256(sha256)
        if file_hex is None:
            return False
        record = self.file(file_hex)
        writer = self.storage.lfs_writer(sha256, record["size"])
        try:
            for raw in self._reconstruct(record["terms"]):
                writer.write(raw)
        except BaseException:
            writer.abort()
            raise
        writer.finish()
        return True

    def plan(self, file_hex: str, first: int, last: int | None) -> dict[str, Any]:
        """The reconstruction of bytes ``[first, last]`` of a file: terms trimmed to whole chunks, and for each
        xorb the merged chunk ranges to fetch with their byte ranges (v2 shape, without URLs)."""
        record = self.file(file_hex)
        last = record["size"] - 1 if last is None else min(last, record["size"] - 1)
        if first > last:
            raise HubError(416, f"Range start {first} is past the end of the {record['size']}-byte file.")
        terms: list[dict[str, Any]] = []
        wanted: dict[str, tuple[Any, list[tuple[int, int]]]] = {}
        offset, pos = 0, 0
        for xorb_hex, size, start, end in record["terms"]:
            t_start, pos = pos, pos + size
            if pos <= first or t_start > last:
                continue
            chunks = self.chunks(xorb_hex)
            c, cpos = start, t_start
            while cpos + chunks[c].size <= first:
                cpos += chunks[c].size
                c += 1
            if not terms:
                offset = first - cpos
            e, epos = c, cpos
            while e < end and epos <= last:
                epos += chunks[e].size
                e += 1
            terms.append({"hash": xorb_hex, "unpacked_length": epos - cpos, "range": {"start": c, "end": e}})
            wanted.setdefault(xorb_hex, (chunks, []))[1].append((c, e))
        fetch = {}
        for xorb_hex, (chunks, ranges) in wanted.items():
            merged: list[list[int]] = []
            for s, e in sorted(ranges):
                if merged and s <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], e)
                else:
                    merged.append([s, e])
            fetch[xorb_hex] = [
                {
                    "chunks": {"start": s, "end": e},
                    "bytes": {"start": chunks[s].byte_start, "end": chunks[e - 1].byte_end - 1},
                }
                for s, e in merged
            ]
        return {"offset_into_first_range": offset, "terms": terms, "xorbs": fetch}


# -- helpers ------------------------------------------------------------------------------------------------------


def _load_secret(path: Path) -> bytes:
    """The per-server signing secret, created once (so tokens survive a restart on the same root)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    return path.read_bytes()


def _xorbs(file: fmt.FileRecord) -> set[str]:
    return {fmt.hash_to_hex(t.xorb) for t in file.terms}
