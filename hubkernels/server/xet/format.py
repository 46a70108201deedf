"""The Xet storage formats the local hub reads: hashes, xorbs (compressed chunk containers) and shards.

Hashes are 32 bytes. Chunk hashes are blake3 keyed with ``DATA_KEY``; a xorb hash is the root of Xet's aggregated
merkle tree over ``(chunk hash, chunk size)`` pairs (internal nodes hash the text ``"{hex} : {size}\\n"`` per child,
keyed with ``INTERNAL_NODE_KEY``; a group closes after a child whose last 8 bytes, read as a little-endian integer,
are divisible by 4, with 2 to 9 children per group); a file hash is that root hashed again with an all-zero key.
In URLs and JSON a hash is written as four little-endian u64 words in hex (each 8-byte group reversed).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import lz4.frame
from blake3 import blake3

from ...errors import HubkernelsError  # noqa: E402

DATA_KEY = bytes(
    [
        102,
        151,
        245,
        119,
        91,
        149,
        80,
        222,
        49,
        53,
        203,
        172,
        165,
        151,
        24,
        28,
        157,
        228,
        33,
        16,
        155,
        235,
        43,
        88,
        180,
        208,
        176,
        75,
        147,
        173,
        242,
        41,
    ]
)
INTERNAL_NODE_KEY = bytes(
    [
        1,
        126,
        197,
        199,
        165,
        71,
        41,
        150,
        253,
        148,
        102,
        102,
        180,
        138,
        2,
        230,
        93,
        221,
        83,
        111,
        55,
        199,
        109,
        210,
        248,
        99,
        82,
        230,
        74,
        83,
        113,
        63,
    ]
)
VERIFICATION_KEY = bytes(
    [
        127,
        24,
        87,
        214,
        206,
        86,
        237,
        102,
        18,
        127,
        249,
        19,
        231,
        165,
        195,
        243,
        164,
        205,
        38,
        213,
        181,
        219,
        73,
        230,
        65,
        36,
        152,
        127,
        40,
        251,
        148,
        195,
    ]
)
SHARD_HEADER_TAG = b"HFRepoMetaData\x00" + bytes(
    [85, 105, 103, 69, 106, 123, 129, 87, 131, 165, 189, 217, 92, 205, 209, 74, 169]
)
XORB_FOOTER_IDENT = b"XETBLOB"
MAX_XORB_BYTES = 65 << 20
"""The largest serialized xorb or shard accepted: 64 MiB of chunk data (xet-core's cap) plus chunk headers and the
footer (hf_xet's reach 67,117,208 bytes, just over 64 MiB)."""
MAX_CHUNK_BYTES = 128 << 10
_BOOKEND = b"\xff" * 32
_FLAG_VERIFICATION = 1 << 31
_FLAG_METADATA_EXT = 1 << 30
_ENTRY = 48  # every shard record is 48 bytes


class XetFormatError(HubkernelsError, ValueError):
    """A xorb or shard that does not follow the Xet format (the message says what is wrong)."""


def hash_to_hex(h: bytes) -> str:
    """The string form of a Xet hash: each 8-byte word reversed, then hex."""
    return "".join(h[i : i + 8][::-1].hex() for i in range(0, 32, 8))


def hex_to_hash(text: str) -> bytes:
    """Inverse of `hash_to_hex`; XetFormatError unless ``text`` is 64 hex digits."""
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != 32 or len(text) != 64:
        raise XetFormatError(f"{text!r} is not a Xet hash (64 hex digits).")
    return b"".join(raw[i : i + 8][::-1] for i in range(0, 32, 8))


def chunk_hash(data: bytes) -> bytes:
    return blake3(data, key=DATA_KEY).digest()


def merkle_root(nodes: list[tuple[bytes, int]]) -> bytes:
    """The aggregated merkle root of ``(hash, size)`` leaves (all zeros for none), as xet-core computes it."""
    if not nodes:
        return bytes(32)
    level = list(nodes)
    while len(level) > 1:
        merged: list[tuple[bytes, int]] = []
        start = 0
        while start < len(level):
            end = start + _next_cut(level[start:])
            group = level[start:end]
            text = "".join(f"{hash_to_hex(h)} : {size}\n" for h, size in group).encode()
            merged.append((blake3(text, key=INTERNAL_NODE_KEY).digest(), sum(size for _, size in group)))
            start = end
        level = merged
    return level[0][0]


def xorb_hash(chunks: list[tuple[bytes, int]]) -> bytes:
    return merkle_root(chunks)


def file_hash(chunks: list[tuple[bytes, int]]) -> bytes:
    """A file's Xet hash from its chunks (all zeros for an empty file)."""
    if not chunks:
        return bytes(32)
    return blake3(merkle_root(chunks), key=bytes(32)).digest()


def verification_hash(chunk_hashes: list[bytes]) -> bytes:
    """The range hash a shard's FileVerificationEntry must hold for a term over these chunks."""
    return blake3(b"".join(chunk_hashes), key=VERIFICATION_KEY).digest()


def _next_cut(nodes: list[tuple[bytes, int]]) -> int:
    if len(nodes) <= 2:
        return len(nodes)
    end = min(9, len(nodes))
    for i in range(2, end):
        if int.from_bytes(nodes[i][0][24:32], "little") % 4 == 0:
            return i + 1
    return end


# -- xorbs ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk of a stored xorb: its hash, where its serialized bytes sit, and its raw size."""

    hash: bytes
    byte_start: int  # offset of the chunk header in the xorb
    byte_end: int  # exclusive end of its compressed data
    size: int  # uncompressed length


def decompress_chunk(scheme: int, payload: bytes, size: int) -> bytes:
    """Raw bytes of one chunk: scheme 0 none, 1 LZ4 (frame format), 2 byte-grouping-4 then LZ4."""
    if scheme == 0:
        data = payload
    elif scheme in (1, 2):
        try:  # never more than the header's size + 1: an LZ4 bomb costs no more memory than an honest chunk
            data = lz4.frame.LZ4FrameDecompressor().decompress(payload, max_length=size + 1)
        except RuntimeError as exc:
            raise XetFormatError(f"A chunk's LZ4 data is corrupt: {exc}.") from None
        if scheme == 2:
            data = _bg4_regroup(data)
    else:
        raise XetFormatError(f"Unknown chunk compression scheme {scheme} (known: 0 none, 1 LZ4, 2 BG4-LZ4).")
    if len(data) != size:
        raise XetFormatError(f"A chunk decompressed to {len(data)} bytes; its header says {size}.")
    return data


def _bg4_regroup(grouped: bytes) -> bytes:
    n = len(grouped)
    split, rem = divmod(n, 4)
    sizes = [split + (rem > 0), split + (rem > 1), split + (rem > 2), split]
    out = bytearray(n)
    pos = 0
    for lane, size in enumerate(sizes):
        out[lane::4] = grouped[pos : pos + size]
        pos += size
    return bytes(out)


def chunk_data_end(xorb: bytes) -> int:
    """Where a serialized xorb's chunks end: before its ``XETBLOB`` footer when it has one."""
    if len(xorb) >= 4:
        info_length = struct.unpack_from("<I", xorb, len(xorb) - 4)[0]
        start = len(xorb) - 4 - info_length
        if 0 <= start and xorb[start : start + 7] == XORB_FOOTER_IDENT:
            return start
    return len(xorb)


def iter_chunks(xorb: bytes, start: int = 0, end: int | None = None):
    """Yield ``(header offset, end offset, raw data)`` for each chunk serialized in ``xorb[start:end]``."""
    end = chunk_data_end(xorb) if end is None else end
    pos = start
    while pos < end:
        if end - pos < 8:
            raise XetFormatError(f"Truncated chunk header at byte {pos} of the xorb.")
        version, c0, c1, c2, scheme, u0, u1, u2 = xorb[pos : pos + 8]
        if version != 0:
            raise XetFormatError(f"Chunk header version {version} at byte {pos}; only version 0 exists.")
        csize = c0 | c1 << 8 | c2 << 16
        usize = u0 | u1 << 8 | u2 << 16
        if usize > MAX_CHUNK_BYTES or pos + 8 + csize > end:
            raise XetFormatError(f"Chunk at byte {pos} is larger than 128 KiB or runs past the xorb's end.")
        yield pos, pos + 8 + csize, decompress_chunk(scheme, xorb[pos + 8 : pos + 8 + csize], usize)
        pos += 8 + csize


def index_xorb(xorb: bytes, expected_hash: bytes) -> list[ChunkRecord]:
    """Parse and verify an uploaded xorb: every chunk decompresses and the chunks hash to ``expected_hash``."""
    if len(xorb) > MAX_XORB_BYTES:
        raise XetFormatError(f"The xorb is {len(xorb)} bytes; the limit is {MAX_XORB_BYTES}.")
    records = [ChunkRecord(chunk_hash(data), a, b, len(data)) for a, b, data in iter_chunks(xorb)]
    if not records:
        raise XetFormatError("The xorb holds no chunk.")
    actual = xorb_hash([(r.hash, r.size) for r in records])
    if actual != expected_hash:
        raise XetFormatError(
            f"The xorb's chunks hash to {hash_to_hex(actual)}, not {hash_to_hex(expected_hash)} (the hash in the URL)."
        )
    return records


# -- shards -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """A run of chunks ``[start, end)`` of one xorb that a file's content continues with."""

    xorb: bytes
    size: int  # unpacked bytes of the run
    start: int
    end: int


@dataclass(frozen=True)
class FileRecord:
    """A file a shard declares: its Xet hash, its terms, their verification hashes and its sha256 (hex, if given)."""

    hash: bytes
    terms: tuple[Term, ...]
    verification: tuple[bytes, ...]
    sha256: str | None

    @property
    def size(self) -> int:
        return sum(t.size for t in self.terms)


@dataclass(frozen=True)
class XorbRecord:
    """A xorb a shard declares (its CAS info block): hash and chunk hashes."""

    hash: bytes
    chunk_hashes: tuple[bytes, ...]


def parse_shard(data: bytes) -> tuple[list[FileRecord], list[XorbRecord]]:
    """The file and xorb records of a shard (an upload body: header, file info, CAS info, optional footer)."""
    if len(data) < _ENTRY or data[:32] != SHARD_HEADER_TAG:
        raise XetFormatError("The body is not a Xet shard (its header tag is wrong).")
    version, _footer_size = struct.unpack_from("<QQ", data, 32)
    if version != 2:
        raise XetFormatError(f"Shard header version {version}; this hub reads version 2.")
    pos = _ENTRY
    files: list[FileRecord] = []
    while True:
        head = _record(data, pos)
        pos += _ENTRY
        if head[:32] == _BOOKEND:
            break
        flags, count = struct.unpack_from("<II", head, 32)
        terms = []
        for _ in range(count):
            entry = _record(data, pos)
            pos += _ENTRY
            _cas_flags, size, start, end = struct.unpack_from("<IIII", entry, 32)
            if end <= start:
                raise XetFormatError(f"A file term has an empty chunk range [{start}, {end}).")
            terms.append(Term(entry[:32], size, start, end))
        checks = []
        if flags & _FLAG_VERIFICATION:
            for _ in range(count):
                checks.append(_record(data, pos)[:32])
                pos += _ENTRY
        sha256 = None
        if flags & _FLAG_METADATA_EXT:  # the sha256 is stored like a Xet hash (8-byte words reversed)
            sha256 = hash_to_hex(_record(data, pos)[:32])
            pos += _ENTRY
        files.append(FileRecord(head[:32], tuple(terms), tuple(checks), sha256))
    xorbs: list[XorbRecord] = []
    while True:
        head = _record(data, pos)
        pos += _ENTRY
        if head[:32] == _BOOKEND:
            break
        _flags, count, _raw, _disk = struct.unpack_from("<IIII", head, 32)
        hashes = []
        for _ in range(count):
            hashes.append(_record(data, pos)[:32])
            pos += _ENTRY
        xorbs.append(XorbRecord(head[:32], tuple(hashes)))
    return files, xorbs


def _record(data: bytes, pos: int) -> bytes:
    if pos + _ENTRY > len(data):
        raise XetFormatError(f"The shard ends inside a record at byte {pos} (a bookend is missing).")
    return data[pos : pos + _ENTRY]
