"""Decompressing what a peer library stored compressed, with the output bounded before it is made.

bakdata compresses a stored blob with Kafka's own codecs (gzip; snappy in xerial's framing; the
LZ4 frame format; zstd frames) and kaf-s3 with gzip. A pointer comes from a Kafka record anyone
with write access can forge, so the limit must bound memory, not be checked after the fact: a
16 KB zstd frame expands to a gigabyte, and a size a stream declares is no more trustworthy than
the stream. Every codec therefore decodes into output that can never grow past the limit: gzip
through ``zlib``'s ``max_length``; the others into one buffer sized by the smaller of the limit and
what the stream's own structure allows (its blocks' maximum sizes, or the sizes snappy declares),
which cramjam's decoders fill and never grow. A stream that does not fit stops the decoder there.
gzip needs only the standard library; the others need ``cramjam``
(``pip install 'kafka-hybrid-gateway[peers]'``), imported when first needed.

bakdata's blobs carry zero padding after the compressed stream: it stores the whole backing array
of Kafka's output buffer, which is sized to the uncompressed input. Kafka's own decompressors stop
at the end of the stream and never look at it, so each codec here finds where its stream ends
(gzip member, snappy block or chunk list, LZ4 frame, zstd frame) and accepts only zeros after it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gateway.errors import PayloadIntegrityError, PeerFormatError

CODECS = ("gzip", "snappy", "lz4", "zstd")
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, then two big-endian ints (version, compatible version)
_U32 = struct.Struct(">I")
_LE32 = struct.Struct("<I")
_LE64 = struct.Struct("<Q")
_LZ4_BLOCK_MAX = {4: 1 << 16, 5: 1 << 18, 6: 1 << 20, 7: 1 << 22}  # the frame descriptor's BD byte, bits 4-6
_ZSTD_BLOCK_MAX = 1 << 17  # no zstd block regenerates more than 128 KiB
_SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"
_ZERO_CHUNK = bytes(1 << 20)
_BUFFER_FULL = ("failed to write whole buffer", "Destination buffer is too small")
"""How cramjam's decoders report output that does not fit (its streaming decoders; zstd's one-shot decoder)."""


def decompress(data: bytes, codec: str | None, limit: int) -> bytes:
    """``data`` decoded by ``codec`` (``None`` = stored as is); more than ``limit`` bytes is an integrity error.

    The decoder stops at ``limit``: no codec makes more than ``limit`` bytes of output (plus
    the decoder's own window) whatever the stream holds or declares.
    """
    if codec is None:
        return data
    if codec == "gzip":
        return _gzip(data, limit)
    if codec not in CODECS:
        raise PeerFormatError(f"unknown compression {codec!r} (known: {', '.join(CODECS)})")
    cramjam = _cramjam()
    try:
        if codec == "snappy":
            return _snappy(data, limit, cramjam)
        if codec == "lz4":
            end, bound = _lz4_frame(data)
            return _decode_into(cramjam.lz4, _padded(data, end, codec), bound, limit, codec)
        end, bound = _zstd_frame(data)
        return _decode_into(cramjam.zstd, _padded(data, end, codec), bound, limit, codec)
    except cramjam.DecompressionError as exc:
        raise PayloadIntegrityError(f"{codec} payload does not decompress: {exc}") from exc


PROBE_SAMPLES = 4
PROBE_SAMPLE_BYTES = 16 * 1024
"""A payload is judged by four 16 KiB samples spread over it: about 1 % of a 1 MB payload's compression time."""
PROBE_MIN_SAVING = 0.05
"""Compress only when the samples shrink by at least 5 %: less saves the store a few bytes for a full
compression and decompression of the payload, each slower than the store write it would shorten."""


def pays_off(payload: bytes | bytearray | memoryview, codec: str) -> bool:
    """Whether ``codec`` is worth running on ``payload``, judged on samples before the payload is compressed.

    zstd finds incompressible input out only by trying: at level 3 it compressed 10 MB of random bytes
    at 55-80 MB/s on the benchmark machine, and its raw blocks then cost a copy on each side, for
    nothing saved. Samples
    spread over the payload (a compressed or encrypted payload is incompressible throughout, a text
    one compresses in every part) tell beforehand. A payload under four samples is compressed: its
    cost is small, and its samples would be the payload.
    """
    view = memoryview(payload).cast("B")
    if len(view) < PROBE_SAMPLES * PROBE_SAMPLE_BYTES:
        return True
    step = (len(view) - PROBE_SAMPLE_BYTES) // (PROBE_SAMPLES - 1)
    samples = [view[i * step : i * step + PROBE_SAMPLE_BYTES] for i in range(PROBE_SAMPLES)]
    compressed = sum(_compressed_size(codec, sample) for sample in samples)
    return compressed <= (1 - PROBE_MIN_SAVING) * PROBE_SAMPLES * PROBE_SAMPLE_BYTES


def _compressed_size(codec: str, sample: memoryview) -> int:
    """The sample's size compressed by ``codec``'s fastest setting (what the codec finds, not how hard it tries)."""
    if codec == "gzip":
        return len(zlib.compress(sample, 1))
    cramjam = _cramjam()
    if codec == "zstd":
        return len(cramjam.zstd.compress(sample, level=1))
    if codec == "lz4":
        return len(cramjam.lz4.compress_block(sample))
    raise PeerFormatError(f"unknown compression {codec!r} (known: {', '.join(CODECS)})")


def _check(size: int, limit: int, codec: str) -> None:
    if size > limit:
        raise PayloadIntegrityError(f"{codec} payload expands beyond the limit of {limit} bytes")


def _decode_into(module: ModuleType, stream: memoryview, bound: int, limit: int, codec: str) -> bytes:
    """``stream`` decoded by ``module.decompress_into`` into ``min(bound, limit)`` bytes, which it cannot grow.

    ``bound`` is what the stream's structure allows; a stream producing more, or more than
    ``limit``, stops the decoder when the buffer is full. The one copy is the result's.
    """
    out = bytearray(min(bound, limit))
    try:
        size: int = module.decompress_into(stream, out)
    except Exception as exc:
        if not any(text in str(exc) for text in _BUFFER_FULL):
            raise  # a stream that does not decode: the caller's error
        _check(bound, limit, codec)
        raise PayloadIntegrityError(f"{codec} payload expands beyond the {bound} bytes its frame allows") from exc
    return bytes(memoryview(out)[:size])


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
    if not _zeros(view[end:]):
        raise PayloadIntegrityError(f"{codec} payload has bytes after its frame that are not padding")
    return view[:end]


def _zeros(view: memoryview) -> bool:
    """Whether ``view`` holds only zeros: bakdata's padding, often most of a blob, compared in growing chunks."""
    pos, step = 0, 64
    while pos < len(view):
        chunk = view[pos : pos + step].tobytes()
        if chunk != _ZERO_CHUNK[: len(chunk)]:
            return False
        pos, step = pos + step, min(2 * step, len(_ZERO_CHUNK))
    return True


def _lz4_frame(data: bytes) -> tuple[int, int]:
    """Where one LZ4 frame ends, and the most it can decode to (its content size, or its blocks' maxima).

    Header, blocks up to the end mark, then the optional content checksum.
    """
    if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
        raise PayloadIntegrityError("lz4 payload does not start with an LZ4 frame")
    flags, block_max = data[4], _LZ4_BLOCK_MAX.get(data[5] >> 4 & 0x07)
    if block_max is None:
        raise PayloadIntegrityError(f"lz4 frame declares an unknown block size {data[5]:#04x}")
    content_size = _LE64.unpack_from(data, 6)[0] if flags & 0x08 and len(data) >= 14 else None
    pos = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1  # FLG, BD, size, dict id, HC
    block_checksum = 4 if flags & 0x10 else 0
    bound = 0
    while True:
        if pos + 4 > len(data):
            raise PayloadIntegrityError("lz4 payload is truncated")
        (size,) = _LE32.unpack_from(data, pos)
        pos += 4
        if size == 0:  # the end mark
            return pos + (4 if flags & 0x04 else 0), bound if content_size is None else min(bound, content_size)
        stored = size & 0x7FFFFFFF
        bound += stored if size & 0x80000000 else block_max  # the high bit: a block stored uncompressed
        pos += stored + block_checksum


def _zstd_frame(data: bytes) -> tuple[int, int]:
    """Where one zstd frame ends, and the most it can decode to (its content size, or its blocks' maxima).

    Header, blocks up to the last one, then the optional checksum.
    """
    if len(data) < 6 or data[:4] != b"\x28\xb5\x2f\xfd":
        raise PayloadIntegrityError("zstd payload does not start with a zstd frame")
    descriptor = data[4]
    single_segment = descriptor & 0x20
    size_bytes = (0, 2, 4, 8)[descriptor >> 6] or (1 if single_segment else 0)
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    content_size = None
    if size_bytes and pos + size_bytes <= len(data):
        content_size = int.from_bytes(data[pos : pos + size_bytes], "little") + (256 if size_bytes == 2 else 0)
    pos += size_bytes
    bound = 0
    while True:
        if pos + 3 > len(data):
            raise PayloadIntegrityError("zstd payload is truncated")
        header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        kind, size = (header >> 1) & 0x03, header >> 3
        bound += _ZSTD_BLOCK_MAX if kind == 2 else size  # raw and RLE blocks say what they regenerate
        pos += 3 + (1 if kind == 1 else size)  # an RLE block holds one byte
        if header & 0x01:  # the last block
            end = pos + (4 if descriptor & 0x04 else 0)
            return end, bound if content_size is None else min(bound, content_size)


def _snappy(data: bytes, limit: int, cramjam: ModuleType) -> bytes:
    """xerial's framing (what Kafka's snappy codec writes), or the standard framing should a writer use it.

    Both framings are lists of raw snappy blocks whose uncompressed sizes are written in their
    first bytes: the total is known, and held to the limit, before anything is decoded.
    """
    codec = cramjam.snappy
    if not data.startswith(XERIAL_MAGIC):
        end, total = _snappy_frames(data, codec.decompress_raw_len)
        _check(total, limit, "snappy")
        return _decode_into(codec, _padded(data, end, "snappy"), total, limit, "snappy")
    blocks, total = _xerial_blocks(data, codec.decompress_raw_len)
    _check(total, limit, "snappy")
    out, pos = bytearray(total), 0
    view = memoryview(out)
    for block, size in blocks:
        if codec.decompress_raw_into(block, view[pos : pos + size]) != size:
            raise PayloadIntegrityError("snappy block decodes to fewer bytes than it declares")
        pos += size
    return bytes(out)


def _xerial_blocks(data: bytes, declared: Callable[[Any], int]) -> tuple[list[tuple[memoryview, int]], int]:
    """xerial's length-prefixed raw blocks up to the end or bakdata's zero padding, each with its declared size."""
    view, pos, blocks, total = memoryview(data), _XERIAL_HEADER, [], 0
    while not _zeros(view[pos:]):  # only zeros left: bakdata's padding, the block list ended
        if pos + 4 > len(view):
            raise PayloadIntegrityError("snappy payload is truncated")
        (size,) = _U32.unpack_from(view, pos)
        block = view[pos + 4 : pos + 4 + size]
        if len(block) != size:
            raise PayloadIntegrityError("snappy payload is truncated")
        blocks.append((block, declared(block)))
        total += blocks[-1][1]
        pos += 4 + size
    return blocks, total


def _snappy_frames(data: bytes, declared: Callable[[Any], int]) -> tuple[int, int]:
    """Where a standard-framing stream ends (zeros after it are padding), and the total its chunks declare."""
    view, pos, total = memoryview(data), 0, 0
    while not _zeros(view[pos:]):  # only zeros left: bakdata's padding, the stream ended
        if pos + 4 > len(view):
            raise PayloadIntegrityError("snappy payload is truncated")
        kind, length = view[pos], int.from_bytes(view[pos + 1 : pos + 4], "little")
        chunk = view[pos + 4 : pos + 4 + length]
        if len(chunk) != length:
            raise PayloadIntegrityError("snappy payload is truncated")
        if pos == 0 and view[:10] != _SNAPPY_STREAM_ID:
            raise PayloadIntegrityError("snappy payload starts with neither xerial's nor the standard framing")
        if 0x02 <= kind <= 0x7F:
            raise PayloadIntegrityError(f"snappy stream holds a reserved chunk type {kind:#04x}")
        if kind in (0x00, 0x01) and length < 4:  # a checksum, then the data
            raise PayloadIntegrityError("snappy chunk is shorter than its checksum")
        if kind == 0x00:
            total += declared(chunk[4:])
        elif kind == 0x01:
            total += length - 4
        pos += 4 + length
    return pos, total


def _cramjam() -> ModuleType:
    try:
        import cramjam
    except ImportError as exc:
        raise PeerFormatError(
            "snappy, lz4 and zstd payloads need the cramjam package: pip install 'kafka-hybrid-gateway[peers]'"
        ) from exc
    return cramjam
