"""The pure pieces of ``produce_stream``: cutting a byte stream into store parts, sealing it a segment at a time,
compressing it as it passes, and its digest as it goes (no I/O, no clock).

Every piece holds a bounded buffer and hands out views of it that stay valid only until it is fed
again: the producer's memory for a stream is a part, a segment and a read, whatever the stream's size.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator
from typing import Any, Protocol

import blake3

from gateway.errors import EncryptionError, EnvelopeFormatError
from gateway.protocol.encryption import TAG_BYTES, PayloadCipher
from gateway.protocol.envelope import CHECKSUM_BLAKE3, CHECKSUM_SHA256

Bytes = bytes | bytearray | memoryview


class PartPacker:
    """Bytes in, parts of exactly ``part_bytes`` out (the last one shorter), from one reused buffer."""

    __slots__ = ("_buffer", "_filled", "_view", "part_bytes", "parts")

    def __init__(self, part_bytes: int) -> None:
        if part_bytes < 1:
            raise ValueError(f"part_bytes must be positive, got {part_bytes}")
        self.part_bytes = part_bytes
        self._buffer = bytearray(part_bytes)
        self._view = memoryview(self._buffer)
        self._filled = 0
        self.parts = 0
        """Parts handed out so far."""

    def feed(self, data: Bytes) -> Iterator[memoryview]:
        """Copy ``data`` in; each time the buffer is full, the part (valid until the generator resumes)."""
        source = memoryview(data).cast("B")
        while len(source):
            room = self.part_bytes - self._filled
            take = min(room, len(source))
            self._view[self._filled : self._filled + take] = source[:take]
            self._filled += take
            source = source[take:]
            if self._filled == self.part_bytes:
                self._filled = 0
                self.parts += 1
                yield self._view

    def flush(self) -> Iterator[memoryview]:
        """The last, shorter part; an empty stream's one empty part only when no part was handed out."""
        if self._filled or self.parts == 0:
            filled, self._filled = self._filled, 0
            self.parts += 1
            yield self._view[:filled]


class SegmentSealer:
    """Plaintext in, sealed segments out (:class:`~gateway.protocol.encryption.PayloadCipher`, one segment at a time).

    The cipher was made for the stream's whole plaintext size, which every segment's authenticated
    data carries, so the last segment is known by its index: nothing is held back to find it.
    """

    __slots__ = ("_cipher", "_filled", "_index", "_out", "_plain", "segment_size")

    def __init__(self, cipher: PayloadCipher) -> None:
        self._cipher = cipher
        self.segment_size = cipher.encryption.segment_size
        self._plain = memoryview(bytearray(self.segment_size))
        self._out = memoryview(bytearray(self.segment_size + TAG_BYTES))
        self._filled = 0
        self._index = 0

    def feed(self, data: Bytes) -> Iterator[memoryview]:
        source = memoryview(data).cast("B")
        while len(source):
            if self._filled == self.segment_size:  # a full segment waits until more comes: it was not the last
                yield self._seal()
            take = min(self.segment_size - self._filled, len(source))
            self._plain[self._filled : self._filled + take] = source[:take]
            self._filled += take
            source = source[take:]

    def finish(self) -> Iterator[memoryview]:
        """The last segment (an empty payload's one empty segment included)."""
        yield self._seal()
        if self._index != self._cipher.segments:
            raise EncryptionError(f"sealed {self._index} segments of a payload that has {self._cipher.segments}")

    def _seal(self) -> memoryview:
        if self._index >= self._cipher.segments:
            raise EncryptionError(f"the payload has only {self._cipher.segments} segments")
        size = self._filled
        out = self._out[: size + TAG_BYTES]
        self._cipher.seal_segment(self._index, self._plain[:size], out)
        self._index += 1
        self._filled = 0
        return out


class StreamEncoder(Protocol):
    """A codec fed a stream in chunks: what each chunk makes so far, then the rest."""

    def feed(self, data: Bytes) -> Bytes: ...
    def finish(self) -> Bytes: ...


class Unencoded:
    """A stream stored as it is."""

    def feed(self, data: Bytes) -> Bytes:
        return data

    def finish(self) -> Bytes:
        return b""


class ZstdEncoder:
    """One zstd frame, as :func:`~gateway.protocol.payload_encoding.encode_payload` makes of a whole payload."""

    def __init__(self, level: int = 3) -> None:
        import cramjam

        self._compressor: Any = cramjam.zstd.Compressor(level=level)

    def feed(self, data: Bytes) -> Bytes:
        self._compressor.compress(data if isinstance(data, bytes) else bytes(data))  # it takes bytes only
        return memoryview(self._compressor.flush())

    def finish(self) -> Bytes:
        return memoryview(self._compressor.finish())


class GzipEncoder:
    """One gzip member."""

    def __init__(self, level: int = 6) -> None:
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, 31)

    def feed(self, data: Bytes) -> Bytes:
        return self._compressor.compress(data)

    def finish(self) -> Bytes:
        return self._compressor.flush()


STREAM_CODECS = ("zstd", "gzip")
"""The codecs a stream is compressed with as it passes; under another (lz4) a stream is stored as it is."""


def stream_encoder(codec: str | None) -> StreamEncoder:
    """The streaming form of ``codec``; :class:`Unencoded` for ``None``."""
    if codec is None:
        return Unencoded()
    if codec == "zstd":
        return ZstdEncoder()
    if codec == "gzip":
        return GzipEncoder()
    raise ValueError(f"{codec!r} is not one of the stream codecs {STREAM_CODECS}")


class StreamDigest:
    """The envelope's digest of a stream, fed as the bytes pass (BLAKE3 or SHA-256: the envelope's algorithm)."""

    __slots__ = ("_hasher", "checksum", "size")

    def __init__(self, checksum: int) -> None:
        hasher: Any
        if checksum == CHECKSUM_BLAKE3:
            hasher = blake3.blake3()
        elif checksum == CHECKSUM_SHA256:
            hasher = hashlib.sha256()
        else:
            raise EnvelopeFormatError(f"unknown checksum algorithm {checksum}")
        self._hasher = hasher
        self.checksum = checksum
        self.size = 0

    def update(self, data: Bytes) -> None:
        self._hasher.update(data)
        self.size += memoryview(data).nbytes

    def digest(self) -> bytes:
        result: bytes = self._hasher.digest()
        return result


def part_count(size: int, part_bytes: int) -> int:
    """Parts of a stream of ``size`` bytes: at least one, so an empty stream still has its (empty) part."""
    return max(1, -(-size // part_bytes))
