"""Sealed payloads: AES-256-GCM over fixed-size segments, bound to the record they belong to.

A payload kept in a store under ``reference.encryption=aes256-gcm`` is the concatenation of its
segments, each ``segment_size`` bytes of plaintext (the last one 0..``segment_size``) sealed by
AES-256-GCM into the same length plus a 16-byte tag. Nothing else is stored: the data key (wrapped
by a key provider), its key id, the base nonce and the segment size travel in the envelope
(:class:`Encryption`, see :mod:`gateway.protocol.envelope`), so a reader of the store alone has
ciphertext and nothing to unwrap it with.

Why segments (the STREAM construction of Hoang, Reyhanitabar, Rogaway and Vizár, as in Tink's
streaming AEAD and age): a payload may be gigabytes, written and read in parts (S3 multipart, Redis
entries). One GCM message over all of it would have to be held whole before its single tag can be
checked, and GCM's counter limits one message to 64 GiB. Segments are sealed and opened one at a
time into a caller's buffer, so memory beyond the payload itself is one segment, and a reader that
streams can check each part as it arrives. Segment ``i`` uses the nonce ``base XOR (i << 8 | final)``
and authenticates ``header || u32 i || u8 final``: reordering segments changes ``i``, dropping the
tail leaves no segment with ``final = 1``, and appending one breaks the ``final`` of the old last.

The header in the authenticated data binds the ciphertext to its record: topic, message id, store
and locator, plus the plaintext size, segment size and key id. A payload moved to another key,
swapped with another record's payload, truncated or extended fails authentication with
:class:`~gateway.errors.PayloadAuthenticationError`, and no byte of it is returned.

Pure: no I/O and no clock; the key comes from a key provider (:mod:`gateway.encryption`). The
``cryptography`` package (the ``encryption`` extra) is imported only when a payload is sealed or
opened, so envelopes, sizes and their checks work without it.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from gateway.errors import ConfigurationError, EncryptionError, EnvelopeFormatError, PayloadAuthenticationError

AES256_GCM = 1
"""Algorithm byte of AES-256-GCM in segments (the only one so far); the name users configure is ``aes256-gcm``."""
ALGORITHM_NAMES = {AES256_GCM: "aes256-gcm"}
ALGORITHMS_BY_NAME = {name: number for number, name in ALGORITHM_NAMES.items()}

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16

DEFAULT_SEGMENT_LOG2 = 20
"""1 MiB segments: 16 bytes of tag per MiB (0.0015 %), ten GCM calls for a 10 MB payload, and one
segment of working memory for a reader that streams."""
MIN_SEGMENT_LOG2 = 12
MAX_SEGMENT_LOG2 = 26
MAX_SEGMENTS = 2**32
"""The segment index is a u32 in the nonce and the authenticated data."""

MAX_KEY_ID_BYTES = 255
MAX_WRAPPED_KEY_BYTES = 512
"""A KMS ``CiphertextBlob`` for a 256-bit data key is about 190 bytes; a local key ring's is 60."""

_KEY_ID = re.compile(r"[\x21-\x7e]{1,255}")
_HEADER_MAGIC = b"GWENC\x01"
_INDEX = struct.Struct(">IB")

Value = bytes | bytearray | memoryview


def _check_segment_log2(segment_log2: object) -> int:
    if isinstance(segment_log2, bool) or not isinstance(segment_log2, int):
        raise EnvelopeFormatError(f"segment size exponent must be an int, got {type(segment_log2).__name__}")
    if not MIN_SEGMENT_LOG2 <= segment_log2 <= MAX_SEGMENT_LOG2:
        raise EnvelopeFormatError(
            f"segment size exponent {segment_log2} is outside {MIN_SEGMENT_LOG2}..{MAX_SEGMENT_LOG2}"
        )
    return segment_log2


def validate_key_id(key_id: object) -> str:
    """``key_id`` if an envelope can carry it: 1..255 printable ASCII characters without spaces."""
    if not isinstance(key_id, str) or _KEY_ID.fullmatch(key_id) is None:
        raise EnvelopeFormatError(f"a key id must be 1..{MAX_KEY_ID_BYTES} printable ASCII characters, no spaces")
    return key_id


@dataclass(frozen=True, slots=True)
class Encryption:
    """What the envelope says about a sealed payload: how to unwrap its key and where its nonces start.

    Nothing here is secret: ``wrapped_key`` is the data key encrypted by the key provider, useless
    without the provider's key.
    """

    key_id: str
    wrapped_key: bytes
    nonce: bytes
    segment_log2: int = DEFAULT_SEGMENT_LOG2
    algorithm: int = AES256_GCM

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHM_NAMES:
            raise EnvelopeFormatError(f"unknown encryption algorithm {self.algorithm!r}")
        validate_key_id(self.key_id)
        if not isinstance(self.wrapped_key, bytes) or not 1 <= len(self.wrapped_key) <= MAX_WRAPPED_KEY_BYTES:
            raise EnvelopeFormatError(f"a wrapped key must be 1..{MAX_WRAPPED_KEY_BYTES} bytes")
        if not isinstance(self.nonce, bytes) or len(self.nonce) != NONCE_BYTES:
            raise EnvelopeFormatError(f"a nonce must be {NONCE_BYTES} bytes")
        _check_segment_log2(self.segment_log2)

    @property
    def segment_size(self) -> int:
        return 1 << self.segment_log2

    def sealed_size(self, plaintext_size: int) -> int:
        return sealed_size(plaintext_size, self.segment_log2)


@dataclass(frozen=True, slots=True)
class Binding:
    """The record a sealed payload belongs to; all of it is authenticated, none of it is encrypted."""

    topic: str
    message_id: uuid.UUID
    store: str
    locator: str

    def key_context(self) -> dict[str, str]:
        """What a key provider binds the wrapped data key to (KMS's encryption context): no secret, no payload."""
        return {"gateway.topic": self.topic, "gateway.message_id": str(self.message_id)}


def segment_count(plaintext_size: int, segment_log2: int) -> int:
    """Segments of a payload: at least one, so an empty payload still carries a final tag."""
    return max(1, -(-plaintext_size // (1 << segment_log2)))


def sealed_size(plaintext_size: int, segment_log2: int = DEFAULT_SEGMENT_LOG2) -> int:
    """The stored size of a sealed payload of ``plaintext_size`` bytes (what the store writes and the envelope says)."""
    if plaintext_size < 0:
        raise ValueError(f"a payload size cannot be negative: {plaintext_size}")
    return plaintext_size + TAG_BYTES * segment_count(plaintext_size, _check_segment_log2(segment_log2))


def plaintext_size_of(stored_size: int, segment_log2: int) -> int | None:
    """The plaintext size behind ``stored_size`` stored bytes, or ``None`` when no sealed payload has that size."""
    _check_segment_log2(segment_log2)
    full = (1 << segment_log2) + TAG_BYTES
    plaintext = stored_size - TAG_BYTES * max(1, -(-stored_size // full))
    if plaintext < 0 or sealed_size(plaintext, segment_log2) != stored_size:
        return None
    return plaintext


def load_aesgcm() -> tuple[Any, type[Exception]]:
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - the extra is installed wherever encryption is tested
        raise ConfigurationError(
            "reference.encryption needs the cryptography package: pip install 'kafka-hybrid-gateway[encryption]'"
        ) from exc
    return AESGCM, InvalidTag


def _header(encryption: Encryption, binding: Binding, plaintext_size: int) -> bytes:
    """The authenticated data every segment starts with: length-prefixed, so no two bindings encode alike."""
    topic = binding.topic.encode("utf-8")
    store = binding.store.encode("utf-8")
    locator = binding.locator.encode("utf-8")
    key_id = encryption.key_id.encode("ascii")
    return b"".join(
        (
            _HEADER_MAGIC,
            struct.pack(">BBQ", encryption.algorithm, encryption.segment_log2, plaintext_size),
            struct.pack(">B", len(key_id)),
            key_id,
            struct.pack(">H", len(topic)),
            topic,
            binding.message_id.bytes,
            struct.pack(">B", len(store)),
            store,
            struct.pack(">H", len(locator)),
            locator,
        )
    )


class PayloadCipher:
    """One payload's data key, nonces and binding: seals or opens its segments, one at a time or all at once.

    ``seal_segment`` / ``open_segment`` are the streaming form (a caller holds one segment at a
    time); ``seal`` / ``open`` run them over a whole buffer into one output buffer, with no copy
    beyond the one the cipher writes.
    """

    __slots__ = ("_aead", "_header", "_invalid_tag", "_nonce", "encryption", "locator", "plaintext_size", "segments")

    def __init__(self, data_key: bytes, encryption: Encryption, binding: Binding, plaintext_size: int) -> None:
        if len(data_key) != KEY_BYTES:
            raise EncryptionError(f"a data key must be {KEY_BYTES} bytes, the key provider gave {len(data_key)}")
        self.segments = segment_count(plaintext_size, encryption.segment_log2)
        if self.segments > MAX_SEGMENTS:
            raise EncryptionError(f"a payload of {plaintext_size} bytes needs more than 2**32 segments")
        aesgcm, self._invalid_tag = load_aesgcm()
        self._aead = aesgcm(data_key)
        self._nonce = int.from_bytes(encryption.nonce, "big")
        self._header = _header(encryption, binding, plaintext_size)
        self.encryption = encryption
        self.locator = binding.locator
        self.plaintext_size = plaintext_size

    def _segment_inputs(self, index: int) -> tuple[bytes, bytes]:
        final = 1 if index == self.segments - 1 else 0
        nonce = (self._nonce ^ (index << 8 | final)).to_bytes(NONCE_BYTES, "big")
        return nonce, self._header + _INDEX.pack(index, final)

    def segment_range(self, index: int) -> tuple[int, int]:
        """The plaintext offsets ``[start, end)`` of segment ``index``; the sealed ones add ``TAG_BYTES * index``."""
        size = self.encryption.segment_size
        return index * size, min(self.plaintext_size, (index + 1) * size)

    def seal_segment(self, index: int, plaintext: memoryview, out: memoryview) -> None:
        """Seal one segment into ``out`` (``len(plaintext) + TAG_BYTES`` bytes)."""
        nonce, aad = self._segment_inputs(index)
        self._aead.encrypt_into(nonce, plaintext, aad, out)

    def open_segment(self, index: int, sealed: memoryview, out: memoryview) -> None:
        """Open one segment into ``out`` (``len(sealed) - TAG_BYTES`` bytes), or :class:`PayloadAuthenticationError`."""
        nonce, aad = self._segment_inputs(index)
        try:
            self._aead.decrypt_into(nonce, sealed, aad, out)
        except self._invalid_tag:
            raise PayloadAuthenticationError(
                f"encrypted payload at {self.locator!r} failed authentication at segment {index + 1} of"
                f" {self.segments}: tampered, truncated, or written for another record or key"
            ) from None

    def seal(self, plaintext: Value) -> bytearray:
        """The whole sealed payload, written segment by segment into one buffer."""
        source = memoryview(plaintext).cast("B")
        if len(source) != self.plaintext_size:
            raise EncryptionError(f"the cipher was made for {self.plaintext_size} bytes, got {len(source)}")
        out = bytearray(sealed_size(self.plaintext_size, self.encryption.segment_log2))
        target = memoryview(out)
        for index in range(self.segments):
            start, end = self.segment_range(index)
            at = start + TAG_BYTES * index
            self.seal_segment(index, source[start:end], target[at : at + end - start + TAG_BYTES])
        return out

    def open(self, sealed: Value) -> bytearray:
        """The whole plaintext, or :class:`PayloadAuthenticationError` before any of it is returned."""
        out = bytearray(self.plaintext_size)
        target = memoryview(out)
        position = 0

        def into(size: int, write: Callable[[memoryview], None]) -> None:
            nonlocal position
            write(target[position : position + size])
            position += size

        self.open_into(sealed, into)
        return out

    def open_into(self, sealed: Value, fill: Callable[[int, Callable[[memoryview], None]], None]) -> None:
        """Open every segment in order into the next bytes of a caller's buffer.

        ``fill(n, write)`` lets ``write`` fill the buffer's next ``n`` bytes in place, as
        ``BytesBuilder.fill`` does, so the plaintext is written once, straight into the ``bytes`` the
        application gets. A segment that fails raises before the buffer is complete, and a caller
        hands out a buffer only when complete.
        """
        source = memoryview(sealed).cast("B")
        expected = sealed_size(self.plaintext_size, self.encryption.segment_log2)
        if len(source) != expected:
            raise PayloadAuthenticationError(
                f"encrypted payload at {self.locator!r} has {len(source)} bytes, its envelope needs {expected}:"
                " truncated or extended"
            )
        for index in range(self.segments):
            start, end = self.segment_range(index)
            at = start + TAG_BYTES * index
            segment = source[at : at + end - start + TAG_BYTES]
            fill(end - start, partial(self.open_segment, index, segment))


__all__ = [
    "AES256_GCM",
    "ALGORITHMS_BY_NAME",
    "ALGORITHM_NAMES",
    "DEFAULT_SEGMENT_LOG2",
    "KEY_BYTES",
    "MAX_KEY_ID_BYTES",
    "MAX_SEGMENT_LOG2",
    "MAX_WRAPPED_KEY_BYTES",
    "MIN_SEGMENT_LOG2",
    "NONCE_BYTES",
    "TAG_BYTES",
    "Binding",
    "Encryption",
    "PayloadCipher",
    "plaintext_size_of",
    "sealed_size",
    "segment_count",
    "validate_key_id",
]
