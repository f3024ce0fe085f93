"""LinkedIn's in-payload segment format (``DefaultSegmentSerializer`` / ``DefaultSegmentDeserializer``).

A P0/P1/P2 segment value is a 33-byte header followed by one chunk of the original value. The
decoder reproduces LinkedIn's checks in their order and answers ``None`` ("not a segment") for
every value LinkedIn would hand to the value deserializer unchanged: that is how plain legacy
records pass through a chunk-aware consumer.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from gateway.errors import InvalidSegmentError
from gateway.protocol.primitives import uuid_from_halves, uuid_halves
from gateway.protocol.slots import direct_init

SEGMENT_HEADER_SIZE = 33
"""``DefaultSegmentSerializer.PAYLOAD_HEADER_OVERHEAD``."""

SEGMENT_INFO_OVERHEAD = 28
"""``LargeMessageSegment.SEGMENT_INFO_OVERHEAD``, kept for parity with LinkedIn's constants."""

CURRENT_VERSION = 0

_HEADER = struct.Struct(">bIqqiii")


@direct_init
@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of a large message, however it travelled (payload header or ``_lm`` V3 header).

    ``payload`` is a view into the record value, never a copy.
    """

    message_id: uuid.UUID
    sequence_number: int
    number_of_segments: int
    message_size: int
    payload: memoryview

    def sanity_check(self) -> None:
        """``LargeMessageSegment.sanityCheck``: the only validation header-only (H3) segments get."""
        if self.message_size < 0:
            raise InvalidSegmentError(f"message size ({self.message_size}) should be >= 0")
        if len(self.payload) > self.message_size:
            raise InvalidSegmentError(
                f"segment size ({len(self.payload)}) should not be larger than message size ({self.message_size})"
            )
        if self.number_of_segments <= 0:
            raise InvalidSegmentError(f"number of segments should be > 0, got {self.number_of_segments}")
        if not 0 <= self.sequence_number < self.number_of_segments:
            raise InvalidSegmentError(
                f"sequence number {self.sequence_number} should be in [0, {self.number_of_segments - 1}]"
            )


def checksum(message_id: uuid.UUID) -> int:
    """``(int)(msb + lsb)``: LinkedIn's "checksum", which checks the id only and acts as a magic."""
    msb, lsb = uuid_halves(message_id)
    return (msb + lsb) & 0xFFFFFFFF


def encode_segment(
    message_id: uuid.UUID,
    sequence_number: int,
    number_of_segments: int,
    message_size: int,
    payload: bytes | bytearray | memoryview,
) -> bytes:
    """Header and chunk as one ``bytes``: the one copy the wire needs (``join`` sizes, then copies each part once)."""
    msb, lsb = uuid_halves(message_id)
    header = _HEADER.pack(
        CURRENT_VERSION,
        (msb + lsb) & 0xFFFFFFFF,
        msb,
        lsb,
        sequence_number,
        number_of_segments,
        message_size,
    )
    return b"".join((header, payload))


def decode_segment(value: bytes | bytearray | memoryview | None) -> Segment | None:
    """A segment, or ``None`` when LinkedIn's deserializer would say "not a segment".

    Never raises on arbitrary bytes: every failed check is an answer, not an error, exactly as in
    ``DefaultSegmentDeserializer`` (1.0.35+).
    """
    if value is None or len(value) < SEGMENT_HEADER_SIZE:
        return None
    version, check, msb, lsb, seq, nseg, size = _HEADER.unpack_from(value, 0)
    if version > CURRENT_VERSION:  # signed: 0x80-0xff are negative and accepted, as in Java
        return None
    if (check - msb - lsb) & 0xFFFFFFFF:  # the checksum is (int)(msb + lsb): equal modulo 2**32
        return None
    if seq < 0 or nseg <= 0 or seq >= nseg:
        return None
    payload_len = len(value) - SEGMENT_HEADER_SIZE
    if size < payload_len:
        return None
    view = value if isinstance(value, memoryview) else memoryview(value)
    return Segment(uuid_from_halves(msb, lsb), seq, nseg, size, view[SEGMENT_HEADER_SIZE:])
