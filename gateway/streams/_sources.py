"""Where a :class:`gateway.PayloadStream`'s bytes come from, from any position: the layers of one read.

* :class:`WholeSource`: a payload already in memory (a store without ranged reads, an lz4 or a
  compressed and sealed payload). Seekable.
* :class:`RangedSource`: ranges of the stored bytes (:class:`~gateway.streams._ranges.RangeFetcher`),
  opened segment by segment when sealed (no byte of a segment before its tag is checked), and,
  when the read starts at byte 0, hashed as they pass: the digest and size are compared before the
  last range is handed out, so the read that reaches the end raises instead of returning it.

* :class:`CompressedSource`: a gzip or zstd payload's stored frame in ranges, decoded as they arrive
  (:mod:`gateway.core.streams.decoding`), its decoded bytes hashed and checked before the last goes out.

A ranged read that starts elsewhere (after a seek) cannot check a digest of what it skipped: it checks the
size (truncated or extended) and, when sealed, every segment's tag; a seek back to 0 checks again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator
from typing import Any, Protocol, TypeVar

import blake3

from gateway.core.streams.decoding import StreamDecoder
from gateway.core.streams.plan import sealed_start
from gateway.errors import PayloadAuthenticationError, PayloadIntegrityError
from gateway.protocol.encryption import TAG_BYTES, PayloadCipher
from gateway.protocol.envelope import CHECKSUM_BLAKE3, CHECKSUM_NAMES, Envelope
from gateway.streams._ranges import Fail, RangeFetcher

Chunk = bytes | bytearray | memoryview
_T = TypeVar("_T")


class StreamSource(Protocol):
    """The application's bytes of one payload from a position on."""

    seekable: bool

    def chunks(self, position: int) -> Generator[Chunk, None, None]:
        """The bytes from ``position`` to the end; raises the typed error of a bad payload in its turn."""
        ...

    def close(self) -> None: ...


class WholeSource:
    """A payload read and checked whole before the stream was handed out."""

    seekable = True

    def __init__(self, payload: bytes) -> None:
        self._payload: bytes | None = payload

    def chunks(self, position: int) -> Generator[Chunk, None, None]:
        if self._payload is not None and position < len(self._payload):
            yield memoryview(self._payload)[position:]

    def close(self) -> None:
        self._payload = None


class RangedSource:
    """A payload read in ranges from a store with ranged reads, opened per segment when sealed."""

    seekable = True

    def __init__(self, envelope: Envelope, fetcher: RangeFetcher, cipher: PayloadCipher | None, fail: Fail) -> None:
        self._envelope = envelope
        self._fetcher = fetcher
        self._cipher = cipher
        self._fail = fail

    def chunks(self, position: int) -> Generator[Chunk, None, None]:
        if self._cipher is None:
            ranges = self._fetcher.ranges(position)
            return self._verified(ranges) if position == 0 else ranges
        segment, stored_at, skip = sealed_start(self._envelope, position)
        return self._opened(self._fetcher.ranges(stored_at), self._cipher, segment, skip)

    def _verified(self, ranges: Generator[memoryview, None, None]) -> Generator[Chunk, None, None]:
        """The ranges, hashed; the last is handed out only once the digest matches the envelope's.

        The fetcher has checked every range's length, so the one that reaches the declared size is
        the last: it is held back by checking before yielding it, not by keeping a range in memory.
        """
        hasher = _hasher(self._envelope)
        seen = 0
        try:
            for data in ranges:
                hasher.update(data)
                seen += len(data)
                if seen == self._envelope.size:
                    self._check_digest(hasher.digest())
                yield data
        finally:
            ranges.close()
        if seen == 0:
            self._check_digest(hasher.digest())  # an empty payload has no range

    def _check_digest(self, digest: bytes) -> None:
        envelope = self._envelope
        if digest != envelope.digest:
            raise self._fail(
                f"the stored payload does not match its envelope's {CHECKSUM_NAMES[envelope.checksum]}: tampered"
            )

    def _opened(
        self, ranges: Generator[memoryview, None, None], cipher: PayloadCipher, segment: int, skip: int
    ) -> Generator[Chunk, None, None]:
        """Each sealed segment opened (its tag checked) before any of its bytes goes out."""
        sealed_segment = cipher.encryption.segment_size + TAG_BYTES
        index = segment
        try:
            for view in ranges:
                for at in range(0, len(view), sealed_segment):
                    piece = view[at : at + sealed_segment]
                    out = bytearray(max(0, len(piece) - TAG_BYTES))
                    try:
                        cipher.open_segment(index, piece, memoryview(out))
                    except PayloadAuthenticationError as exc:
                        raise self._fail(str(exc)) from exc
                    index += 1
                    if skip:
                        yield memoryview(out)[skip:]
                        skip = 0
                    else:
                        yield out
        finally:
            ranges.close()

    def close(self) -> None:
        self._fetcher.close()


class CompressedSource:
    """A compressed payload (``reference.compression`` gzip or zstd, not sealed) decoded as its ranges arrive.

    The envelope's size and digest are the application's bytes (the stored size is not in it), so
    the decoded bytes are hashed as they pass and the last decoded piece goes out only after the
    frame ended, the size matched and the digest did. A frame cannot be entered in its middle: a
    read from a position decodes from the start and drops what lies before it (seek costs a decode
    from byte 0, and every read, wherever it starts, checks the digest).
    """

    seekable = True

    def __init__(self, envelope: Envelope, fetcher: RangeFetcher, step: int, fail: Fail) -> None:
        assert envelope.compression is not None and envelope.encryption is None
        self._envelope = envelope
        self._codec = envelope.compression
        self._fetcher = fetcher
        self._step = step
        self._fail = fail

    def chunks(self, position: int) -> Generator[Chunk, None, None]:
        envelope = self._envelope
        decoder = StreamDecoder(self._codec, envelope.size, self._step)
        hasher = _hasher(envelope)
        ranges = self._fetcher.ranges(0)
        held: bytes | None = None  # the latest decoded piece: the last one waits for the digest
        try:
            for data in ranges:
                for piece in self._decoded(decoder, data):
                    hasher.update(piece)
                    if held is not None:
                        yield from _after(held, decoder.decoded - len(piece) - len(held), position)
                    held = piece
            self._checked(decoder.finish)
        finally:
            ranges.close()
        if hasher.digest() != envelope.digest:
            raise self._fail(
                f"the decoded payload does not match its envelope's {CHECKSUM_NAMES[envelope.checksum]}: tampered"
            )
        if held is not None:
            yield from _after(held, decoder.decoded - len(held), position)

    def _decoded(self, decoder: StreamDecoder, data: memoryview) -> Generator[bytes, None, None]:
        pieces = decoder.feed(data)
        while True:
            piece = self._checked(lambda: next(pieces, None))
            if piece is None:
                return
            yield piece

    def _checked(self, step: Callable[[], _T]) -> _T:
        try:
            return step()
        except PayloadIntegrityError as exc:
            raise self._fail(str(exc)) from exc

    def close(self) -> None:
        self._fetcher.close()


def _after(piece: bytes, piece_at: int, position: int) -> Generator[Chunk, None, None]:
    """What of ``piece`` (decoded bytes from ``piece_at``) lies at or after ``position``."""
    skip = position - piece_at
    if skip <= 0:
        yield piece
    elif skip < len(piece):
        yield memoryview(piece)[skip:]


def _hasher(envelope: Envelope) -> Any:
    return blake3.blake3() if envelope.checksum == CHECKSUM_BLAKE3 else hashlib.sha256()
