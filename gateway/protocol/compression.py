"""Decompressing what a peer library stored compressed, with the output bounded.

bakdata compresses a stored blob with Kafka's own codecs (gzip; snappy in xerial's framing; the
LZ4 frame format; zstd frames) and kaf-s3 with gzip. A pointer comes from a Kafka record anyone
with write access can forge, so the output is capped: a small object must not expand into
gigabytes (gzip stops at the cap; the other codecs are checked block by block or after the fact
with the cap on the input side too). gzip needs only the standard library; the others need
``cramjam`` (``pip install 'kafka-hybrid-gateway[peers]'``), imported when first needed.

bakdata's blobs carry zero padding after the compressed stream: it stores the whole backing array
of Kafka's output buffer, which is sized to the uncompressed input. Kafka's own decompressors stop
at the end of the stream and never look at it, so each codec here finds where its stream ends
(gzip member, xerial block list, LZ4 frame, zstd frame) and accepts only zeros after it.
"""

from __future__ import annotations

import struct
import zlib
from types import ModuleType

from gateway.errors import PayloadIntegrityError, PeerFormatError

CODECS = ("gzip", "snappy", "lz4", "zstd")
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, then two big-endian ints (version, compatible version)
_U32 = struct.Struct(">I")
_LE32 = struct.Struct("<I")


def decompress(data: bytes, codec: str | None, limit: int) -> bytes:
    """``data`` decoded by ``codec`` (``None`` = stored as is); more than ``limit`` bytes is an integrity error."""
    if codec is None:
        return data
    if codec == "gzip":
        return _gzip(data, limit)
    if codec not in CODECS:
        raise PeerFormatError(f"unknown compression {codec!r} (known: {', '.join(CODECS)})")
    cramjam = _cramjam()
    try:
        if codec == "snappy":
            out = _snappy(data, limit, cramjam)
        elif codec == "lz4":
            out = bytes(cramjam.lz4.decompress(_padded(data, _lz4_frame_end(data), codec)))
        else:
            out = bytes(cramjam.zstd.decompress(_padded(data, _zstd_frame_end(data), codec)))
    except cramjam.DecompressionError as exc:
        raise PayloadIntegrityError(f"{codec} payload does not decompress: {exc}") from exc
    _check(len(out), limit, codec)
    return out


def _check(size: int, limit: int, codec: str) -> None:
    if size > limit:
        raise PayloadIntegrityError(f"{codec} payload expands beyond the limit of {limit} bytes")


def _gzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise PayloadIntegrityError(f"gzip payload does not decompress: {exc}") from exc
    _check(len(out), limit, "gzip")
    if not inflater.eof:
        raise PayloadIntegrityError("gzip payload is truncated")
    if any(inflater.unused_data):
        raise PayloadIntegrityError("gzip payload has bytes after its stream that are not padding")
    return out


def _padded(data: bytes, end: int, codec: str) -> memoryview:
    """The stream ``data[:end]``, once everything after it is known to be zero padding."""
    view = memoryview(data)
    if end > len(view):
        raise PayloadIntegrityError(f"{codec} payload is truncated")
    if any(view[end:]):
        raise PayloadIntegrityError(f"{codec} payload has bytes after its frame that are not padding")
    return view[:end]


def _lz4_frame_end(data: bytes) -> int:
    """Where one LZ4 frame ends: header, blocks up to the end mark, then the optional content checksum."""
    if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
        raise PayloadIntegrityError("lz4 payload does not start with an LZ4 frame")
    flags = data[4]
    pos = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1  # FLG, BD, size, dict id, HC
    block_checksum = 4 if flags & 0x10 else 0
    while True:
        if pos + 4 > len(data):
            raise PayloadIntegrityError("lz4 payload is truncated")
        (size,) = _LE32.unpack_from(data, pos)
        pos += 4
        if size == 0:  # the end mark
            return pos + (4 if flags & 0x04 else 0)
        pos += (size & 0x7FFFFFFF) + block_checksum


def _zstd_frame_end(data: bytes) -> int:
    """Where one zstd frame ends: header, blocks up to the last one, then the optional checksum."""
    if len(data) < 6 or data[:4] != b"\x28\xb5\x2f\xfd":
        raise PayloadIntegrityError("zstd payload does not start with a zstd frame")
    descriptor = data[4]
    single_segment = descriptor & 0x20
    content_size = (0, 2, 4, 8)[descriptor >> 6] or (1 if single_segment else 0)
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03] + content_size
    while True:
        if pos + 3 > len(data):
            raise PayloadIntegrityError("zstd payload is truncated")
        header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        pos += 3 + (1 if (header >> 1) & 0x03 == 1 else header >> 3)  # an RLE block holds one byte
        if header & 0x01:  # the last block
            return pos + (4 if descriptor & 0x04 else 0)


def _snappy(data: bytes, limit: int, cramjam: ModuleType) -> bytes:
    """xerial's framing (what Kafka's snappy codec writes): a 16-byte header, then length-prefixed raw blocks."""
    codec = cramjam.snappy
    if not data.startswith(XERIAL_MAGIC):
        return bytes(codec.decompress(data))  # the standard framing, should a writer use it
    view, pos, parts, total = memoryview(data), _XERIAL_HEADER, [], 0
    while pos < len(view):
        if pos + 4 > len(view):
            raise PayloadIntegrityError("snappy payload is truncated")
        (size,) = _U32.unpack_from(view, pos)
        if size == 0 and not any(view[pos:]):  # bakdata's zero padding: the block list ended
            break
        block = view[pos + 4 : pos + 4 + size]
        if len(block) != size:
            raise PayloadIntegrityError("snappy payload is truncated")
        part = bytes(codec.decompress_raw(block))
        total += len(part)
        _check(total, limit, "snappy")
        parts.append(part)
        pos += 4 + size
    return b"".join(parts)


def _cramjam() -> ModuleType:
    try:
        import cramjam
    except ImportError as exc:
        raise PeerFormatError(
            "snappy, lz4 and zstd payloads need the cramjam package: pip install 'kafka-hybrid-gateway[peers]'"
        ) from exc
    return cramjam
