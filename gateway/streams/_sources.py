"""Where a :class:`gateway.PayloadStream`'s bytes come from, from any position: the layers of one read.

* :class:`WholeSource`: a payload already in memory (a store without ranged reads, a compressed
  payload: its codec's frames do not decode in parts with the codecs this library has). Seekable.
* :class:`RangedSource`: ranges of the stored bytes (:class:`~gateway.streams._ranges.RangeFetcher`),
  opened segment by segment when sealed (no byte of a segment before its tag is checked), and,
  when the read starts at byte 0, hashed as they pass: the digest and size are compared before the
  last range is handed out, so the read that reaches the end raises instead of returning it.

A read that starts elsewhere (after a seek) cannot check a digest of what it skipped: it checks the
size (truncated or extended) and, when sealed, every segment's tag; a seek back to 0 checks again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from typing import Protocol

import blake3

from gateway.core.payload_streams import sealed_start
from gateway.errors import PayloadAuthenticationError
from gateway.protocol.encryption import TAG_BYTES, PayloadCipher
from gateway.protocol.envelope import CHECKSUM_BLAKE3, CHECKSUM_NAMES, Envelope
from gateway.streams._ranges import Fail, RangeFetcher

Chunk = bytes | bytearray | memoryview


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

    def _verified(self, ranges: Generator[bytes, None, None]) -> Generator[Chunk, None, None]:
        """The ranges, hashed; the last is handed out only once the digest matches the envelope's."""
        envelope = self._envelope
        hasher = blake3.blake3() if envelope.checksum == CHECKSUM_BLAKE3 else hashlib.sha256()
        held: bytes | None = None
        try:
            for data in ranges:
                hasher.update(data)
                if held is not None:
                    yield held
                held = data
        finally:
            ranges.close()
        if hasher.digest() != envelope.digest:
            raise self._fail(
                f"the stored payload does not match its envelope's {CHECKSUM_NAMES[envelope.checksum]}: tampered"
            )
        if held is not None:
            yield held

    def _opened(
        self, ranges: Generator[bytes, None, None], cipher: PayloadCipher, segment: int, skip: int
    ) -> Generator[Chunk, None, None]:
        """Each sealed segment opened (its tag checked) before any of its bytes goes out."""
        sealed_segment = cipher.encryption.segment_size + TAG_BYTES
        index = segment
        try:
            for data in ranges:
                view = memoryview(data)
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
