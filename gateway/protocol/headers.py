"""Reserved record headers: ``_lm`` (large message), ``_t`` (producer timestamp), ``_so`` (safe offset).

Headers travel as confluent-kafka's list of ``(key, value)`` tuples; order matters because
LinkedIn reads the *last* ``_lm`` and appends rewritten ones at the end.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from gateway.errors import HeaderFormatError
from gateway.protocol.primitives import encode_long, uuid_from_halves, uuid_halves
from gateway.protocol.slots import direct_init

LM_HEADER = "_lm"
TIMESTAMP_HEADER = "_t"
SAFE_OFFSET_HEADER = "_so"

Header = tuple[str, "bytes | None"]
Headers = list[Header]

INVALID_MESSAGE_SIZE = -1
_LM_SHORT = struct.Struct(">bqqii")  # 25 bytes
_LM_LONG = struct.Struct(">bqqiii")  # 29 bytes
NIL_UUID = uuid.UUID(int=0)


class LmType(IntEnum):
    """``_lm`` header types as ``LargeMessageHeaderValue`` names them."""

    LEGACY = 0
    LEGACY_V2 = 1
    V3 = 2


@direct_init
@dataclass(frozen=True, slots=True)
class LargeMessageHeader:
    """The decoded ``_lm`` value. ``message_size`` is -1 where the 25-byte form carries none."""

    type: int
    message_id: uuid.UUID
    segment_number: int
    number_of_segments: int
    message_size: int = INVALID_MESSAGE_SIZE

    @property
    def header_only(self) -> bool:
        """Type >= 2 (signed): the record value is the raw chunk, not a payload-header segment."""
        return self.type >= LmType.V3


def encode_lm(header: LargeMessageHeader) -> bytes:
    """``LargeMessageHeaderValue.toBytes``: type 0 gives 25 bytes, anything else 29.

    The size is written only for a positive type (a signed compare in Java), so a negative type
    yields the 29-byte form with a zero size field.
    """
    lsb_msb = uuid_halves(header.message_id)
    if header.type == LmType.LEGACY:
        return _LM_SHORT.pack(header.type, lsb_msb[1], lsb_msb[0], header.segment_number, header.number_of_segments)
    size = header.message_size if header.type >= 1 else 0
    return _LM_LONG.pack(header.type, lsb_msb[1], lsb_msb[0], header.segment_number, header.number_of_segments, size)


def _checked_lm(value: bytes | bytearray | memoryview | None) -> bytes | bytearray | memoryview:
    """``value`` when ``LargeMessageHeaderValue.fromBytes`` would read it; else :class:`HeaderFormatError`."""
    if value is None or len(value) == 0:
        raise HeaderFormatError("_lm header is empty")
    if len(value) < _LM_SHORT.size:
        raise HeaderFormatError(f"_lm header has {len(value)} bytes, at least 25 are needed")
    return value


def _lm_fields(value: bytes | bytearray | memoryview | None) -> tuple[int, int, int, int, int, int]:
    """Type, the id's two halves as written (low first), segment, count and size; size -1 in the 25-byte form."""
    value = _checked_lm(value)
    if len(value) == _LM_LONG.size:
        return _LM_LONG.unpack_from(value, 0)
    return (*_LM_SHORT.unpack_from(value, 0), INVALID_MESSAGE_SIZE)


def decode_lm(value: bytes | bytearray | memoryview | None) -> LargeMessageHeader:
    """``LargeMessageHeaderValue.fromBytes``: the size is read only when the value is exactly 29 bytes.

    Where Java throws (empty or shorter than 25 bytes) this raises :class:`HeaderFormatError`.
    """
    kind, lsb, msb, seg, nseg, size = _lm_fields(value)
    return LargeMessageHeader(kind, uuid_from_halves(msb, lsb), seg, nseg, size)


def lm_type(value: bytes | bytearray | memoryview | None) -> int:
    """The (signed) type of an ``_lm`` value, which raises as :func:`decode_lm` would: without decoding the rest."""
    first = _checked_lm(value)[0]
    return first - 256 if first > 127 else first


def delivered_lm(header: LargeMessageHeader) -> LargeMessageHeader:
    """What the consumer puts on an assembled record: nil id, segment -1, count kept, size -1 for type 0."""
    size = INVALID_MESSAGE_SIZE if header.type == LmType.LEGACY else header.message_size
    return LargeMessageHeader(header.type, NIL_UUID, -1, header.number_of_segments, size)


def encode_delivered_lm(header: LargeMessageHeader) -> bytes:
    """``encode_lm(delivered_lm(header))`` packed at once: every chunked message a consumer hands out needs it."""
    return _delivered(header.type, header.number_of_segments, header.message_size)


def delivered_lm_value(value: bytes | bytearray | memoryview | None) -> bytes:
    """``encode_delivered_lm(decode_lm(value))`` from the raw ``_lm`` value, without the typed header in between."""
    kind, _, _, _, nseg, size = _lm_fields(value)
    return _delivered(kind, nseg, size)


def _delivered(kind: int, number_of_segments: int, message_size: int) -> bytes:
    if kind == LmType.LEGACY:
        return _LM_SHORT.pack(kind, 0, 0, -1, number_of_segments)
    return _LM_LONG.pack(kind, 0, 0, -1, number_of_segments, message_size if kind >= 1 else 0)


def encode_timestamp(ms: int) -> bytes:
    return encode_long(ms)


def encode_safe_offset(offset: int) -> bytes:
    return encode_long(offset)


def last_header(headers: Sequence[Header] | None, key: str) -> bytes | None:
    """The value of the last header named ``key`` (``Headers.lastHeader``), or ``None``."""
    if headers:
        for k, v in reversed(headers):
            if k == key:
                return v
    return None


def has_header(headers: Sequence[Header] | None, key: str) -> bool:
    return bool(headers) and any(k == key for k, _ in headers)  # type: ignore[union-attr]


def without(headers: Sequence[Header] | None, key: str) -> Headers:
    """A copy of ``headers`` minus every header named ``key``; the input is never changed."""
    return [h for h in headers or () if h[0] != key]
