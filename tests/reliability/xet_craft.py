"""What an attacker with a Xet write token sends by hand: xorbs and shards built byte by byte, with any claim.

hf_xet never lies about a file's sha256; these helpers do, so the tests can try what a hostile client would.
The formats are the ones `hubkernels.server.xet.format` reads (uncompressed chunks, one file per shard).
"""

from __future__ import annotations

import json
import struct

from server_helpers import http

from hubkernels.server.xet import format as fmt

_PAD = bytes(16)


def xorb(data: bytes, chunk: int = 64 << 10) -> tuple[str, bytes, list[tuple[bytes, int]]]:
    """(hex hash, serialized bytes, chunk leaves) of a xorb holding ``data`` in uncompressed chunks."""
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] or [b""]
    body = b"".join(
        bytes([0]) + len(p).to_bytes(3, "little") + bytes([0]) + len(p).to_bytes(3, "little") + p for p in pieces
    )
    leaves = [(fmt.chunk_hash(p), len(p)) for p in pieces]
    return fmt.hash_to_hex(fmt.xorb_hash(leaves)), body, leaves


def shard(xorb_hex: str, leaves: list[tuple[bytes, int]], sha256: str | None, verification: bool = False) -> bytes:
    """A shard declaring one file made of every chunk of one xorb, claiming ``sha256`` (None: no claim)."""
    flags = (1 << 31 if verification else 0) | (1 << 30 if sha256 else 0)
    out = fmt.SHARD_HEADER_TAG + struct.pack("<QQ", 2, 0)
    out += fmt.file_hash(leaves) + struct.pack("<II", flags, 1) + bytes(8)
    out += fmt.hex_to_hash(xorb_hex) + struct.pack("<IIII", 0, sum(n for _, n in leaves), 0, len(leaves))
    if verification:
        out += fmt.verification_hash([h for h, _ in leaves]) + _PAD
    if sha256:
        out += fmt.hex_to_hash(sha256) + _PAD
    out += b"\xff" * 32 + _PAD  # end of file info
    out += b"\xff" * 32 + _PAD  # end of CAS info
    return out


def write_token(url: str, repo_id: str, token: str, repo_type: str = "kernels") -> tuple[str, str]:
    """(Xet write token, CAS url) for ``repo_id``, as hf_xet gets them."""
    status, _, body = http(f"{url}/api/{repo_type}/{repo_id}/xet-write-token/main", token=token)
    assert status == 200, body
    answer = json.loads(body)
    return answer["accessToken"], answer["casUrl"]


def push(cas: str, xet_token: str, xorb_hex: str, xorb_bytes: bytes, shard_bytes: bytes | None) -> tuple[int, int]:
    """POST the xorb, then the shard (when given); their two statuses (0 for a shard not sent)."""
    first = http(f"{cas}/v1/xorbs/default/{xorb_hex}", "POST", body=xorb_bytes, token=xet_token)[0]
    second = http(f"{cas}/v1/shards", "POST", body=shard_bytes, token=xet_token)[0] if shard_bytes else 0
    return first, second
