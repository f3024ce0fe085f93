"""Decompressing what a peer library stored compressed, with the output bounded.

bakdata compresses a stored blob with Kafka's own codecs (gzip; snappy in xerial's framing; the
LZ4 frame format; zstd frames) and kaf-s3 with gzip. A pointer comes from a Kafka record anyone
with write access can forge, so the output is capped: a small object must not expand into
gigabytes (gzip stops at the cap; the other codecs are checked block by block or after the fact
with the cap on the input side too). gzip needs only the standard library; the others need
``cramjam`` (``pip install 'kafka-hybrid-gateway[peers]'``), imported when first needed.
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
        else:
            out = bytes((cramjam.lz4 if codec == "lz4" else cramjam.zstd).decompress(data))
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
    return out


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
