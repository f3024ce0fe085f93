"""Big-endian primitives and Java ``UUID`` halves.

LinkedIn's code writes every int and long big-endian (``ByteBuffer``'s default) and treats a
message id as two *signed* longs, so these helpers speak in Java's terms to keep the codecs
readable against the spec.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Callable

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_UINT64 = (1 << 64) - 1
_TWO64 = 1 << 64


def encode_long(value: int) -> bytes:
    """8 bytes, big-endian two's complement (``PrimitiveEncoderDecoder.encodeLong``)."""
    return _LONG.pack(value)


def decode_long(data: bytes | memoryview, offset: int = 0) -> int:
    return int(_LONG.unpack_from(data, offset)[0])


def encode_int(value: int) -> bytes:
    return _INT.pack(value)


def decode_int(data: bytes | memoryview, offset: int = 0) -> int:
    return int(_INT.unpack_from(data, offset)[0])


def uuid_halves(message_id: uuid.UUID) -> tuple[int, int]:
    """``(msb, lsb)`` as Java's ``getMostSignificantBits``/``getLeastSignificantBits`` return them."""
    value = message_id.int
    msb, lsb = value >> 64, value & _UINT64
    return msb - _TWO64 if msb >> 63 else msb, lsb - _TWO64 if lsb >> 63 else lsb


_new_object = object.__new__
_UUID = uuid.UUID
_store_int = _UUID.__dict__["int"].__set__  # the slots' own descriptors: no attribute lookup per store
_store_is_safe = _UUID.__dict__["is_safe"].__set__
_UNKNOWN = uuid.SafeUUID.unknown


def uuid_from_halves(msb: int, lsb: int) -> uuid.UUID:
    """The UUID whose Java halves are ``msb`` and ``lsb`` (each read as a signed long).

    Holds what ``uuid.UUID.__init__`` stores in its two slots, without that constructor's argument
    checks and stored through the slots directly: a third of the cost, and every segment and
    ``_lm`` header a consumer reads makes one.
    """
    out = _new_object(_UUID)
    _store_int(out, ((msb & _UINT64) << 64) | (lsb & _UINT64))
    _store_is_safe(out, _UNKNOWN)
    return out


_VERSION_4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_VERSION_4_SET = (4 << 76) | (0x8000 << 48)


def random_uuid4(random_bytes: Callable[[int], bytes] = os.urandom) -> uuid.UUID:
    """``uuid.uuid4()`` built the way :func:`uuid_from_halves` builds one: a fresh message id per chunked message.

    The same 122 random bits and the same version and variant bits as ``uuid.uuid4()``, which
    goes through ``UUID.__init__``'s argument checks; ``random_bytes`` is there for tests.
    """
    out = _new_object(_UUID)
    value = int.from_bytes(random_bytes(16), "big")
    _store_int(out, (value & _VERSION_4_CLEAR) | _VERSION_4_SET)
    _store_is_safe(out, _UNKNOWN)
    return out


def uuid_to_key(message_id: uuid.UUID) -> bytes:
    """The 16-byte key a keyless multi-segment message gets (``LiKafkaClientsUtils.uuidToBytes``)."""
    return message_id.bytes


def java_int(value: int) -> int:
    """Truncate to a signed 32-bit int, as a Java ``(int)`` cast does."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value
