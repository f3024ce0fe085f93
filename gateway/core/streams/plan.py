"""Whether a reference payload is handed out as a stream, and how a stream lays its ranges (pure, no I/O).

``value.stream.threshold.bytes`` is off by default (``None``), not 0: 0 would be a threshold every
payload is at or above, so "off" needs a value of its own, and an application that never asked for
streams keeps getting ``bytes`` from ``value()``. :func:`streams` is the one place the choice is made:
the consumer's resolver asks it before fetching ahead (a streamed payload is never fetched whole) and
again when the record's turn comes.

A stream reads the stored bytes in ranges of ``range_bytes``; a sealed payload's ranges are whole
sealed segments (:func:`range_step`), so every range opens on its own and a seek lands on a segment's
start, whatever ``range_bytes`` says. Memory is then bounded by ``(read_ahead + 1)`` range buffers (those in
flight and the one being read, refilled: the digest is checked before the last range is handed out, so
none is held back), not by the payload.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocol.encryption import TAG_BYTES
from gateway.protocol.envelope import Envelope

DEFAULT_RANGE_BYTES = 8 * 1024 * 1024
"""8 MiB ranges: the object stores' multipart part size (S3's default part), large enough that a request's
latency is a small part of its transfer on a LAN, small enough that three in memory stay far below 128 MiB."""
DEFAULT_READ_AHEAD = 2
"""Ranges fetched ahead of the reader: two keep a reader that consumes as fast as the store sends busy."""


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """``value.stream.threshold.bytes`` (``None``: off), ``value.stream.range.bytes``, ``value.stream.read.ahead``."""

    threshold: int | None = None
    range_bytes: int = DEFAULT_RANGE_BYTES
    read_ahead: int = DEFAULT_READ_AHEAD

    def streams(self, envelope: Envelope) -> bool:
        return streams(envelope, self.threshold)


OFF = StreamSettings()


def streams(envelope: Envelope, threshold: int | None) -> bool:
    """Whether ``envelope``'s payload is handed out as a :class:`gateway.PayloadStream` rather than ``bytes``.

    The size compared is the one the application is handed where the envelope knows it: the plaintext
    of a sealed payload, the application's bytes of a compressed one (:attr:`Envelope.payload_size`).
    """
    return threshold is not None and envelope.payload_size >= threshold


def range_step(envelope: Envelope, range_bytes: int) -> int:
    """Stored bytes per range: ``range_bytes``, or for a sealed payload the whole sealed segments it covers
    (at least one), so that no range splits a segment and each opens alone."""
    if envelope.encryption is None:
        return max(1, range_bytes)
    sealed_segment = envelope.encryption.segment_size + TAG_BYTES
    return max(1, range_bytes // sealed_segment) * sealed_segment


def sealed_start(envelope: Envelope, position: int) -> tuple[int, int, int]:
    """Where reading a sealed payload from plaintext ``position`` starts: ``(segment, stored offset, skip)``:
    the segment holding it, that segment's first stored byte, and the plaintext bytes to drop before it."""
    assert envelope.encryption is not None
    log2 = envelope.encryption.segment_log2
    segment = position >> log2
    return segment, segment * ((1 << log2) + TAG_BYTES), position - (segment << log2)


__all__ = [
    "DEFAULT_RANGE_BYTES",
    "DEFAULT_READ_AHEAD",
    "OFF",
    "StreamSettings",
    "range_step",
    "sealed_start",
    "streams",
]
