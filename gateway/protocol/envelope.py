"""The reference envelope: the small Kafka record value that stands in for a payload kept in a store.

Layout of version 1 (every integer big-endian, 904 bytes at most)::

    offset  size  field
         0     6  magic            b"\\x1bGWREF"
         6     1  version          1
         7     1  flags            bits 0-1: how the store keeps the payload (0 as is, 1 zstd, 2 lz4,
                                   3 gzip: ``reference.compression``); bit 2: encrypted (the block
                                   below follows the locator); any other set bit is refused
         8     8  payload_size     u64, at most 2**53
        16     1  checksum_alg     1 = SHA-256, 2 = BLAKE3 (the algorithm fixes the digest length)
        17    32  checksum         the whole payload's digest by that algorithm
        49    16  message_id       UUID bytes
        65     1  store_len        1..64
        66     n  store            ASCII [a-z0-9_.-]
      66+n     2  locator_len      1..768
      68+n     m  locator          UTF-8, no control characters
    68+n+m     4  crc32            zlib.crc32 of every byte before it

With flag bit 2 (``reference.encryption``, :mod:`gateway.protocol.encryption`) the locator is
followed, before the CRC, by::

         0     1  algorithm        1 = AES-256-GCM in segments
         1     1  segment_log2     12..26 (segment size 2**k plaintext bytes)
         2    12  nonce            base nonce; segment i uses nonce XOR (i << 8 | final)
        14     1  key_id_len       1..255
        15     k  key_id           printable ASCII: the key provider's id of the wrapping key
      15+k     2  wrapped_len      1..512
      17+k     w  wrapped_key      the data key, wrapped by the key provider

and ``payload_size`` / ``checksum`` describe the *stored* (sealed) bytes, so every store-side check
(size, S3's SHA-256) works on what the store holds and the envelope says nothing about the
plaintext beyond its size. An encrypted envelope is at most 1 000 bytes (a KMS one with a 100-byte
locator is about 450). A reader from before encryption refuses it by its flag, by name, rather than
handing the ciphertext to the application; unencrypted envelopes are byte for byte what they were.
With both flags (``reference.compression`` and ``reference.encryption``) the payload was compressed,
then sealed: ``payload_size`` and ``checksum`` still describe the sealed bytes, and the opened bytes
are the compressed stream, decoded no further than the reader's ``reference.max.payload.bytes``.

The record also carries the header ``_gw.ref`` whose value is the version byte. The header is the
primary marker (cheap, and invisible to code that only reads values); the magic and version in the
value are the fallback for a consumer that lost the headers: bakdata/kafka-large-message-serde#179
shows DLQ and replay paths that keep the bytes but drop or rewrite headers, and MirrorMaker or
Connect pipelines can be configured the same way.

Why the magic cannot be mistaken for anything we also carry:

* LinkedIn segments. ``DefaultSegmentDeserializer`` reads byte 0 as a signed version and rejects the
  value as "not a segment" when it is > 0. 0x1b is 27, so an envelope is never a segment, whatever
  follows; this does not rest on the UUID "checksum" being unlikely to match. The other way round, a
  segment starts with 0x00 (or, for a value LinkedIn accepts, 0x80..0xff), never 0x1b.
* Legacy plain payloads. The first byte is ESC, a C0 control that does not begin JSON (which starts
  with whitespace, ``{ [ "``, a digit, ``-``, ``t f n`` or a BOM), XML/CSV/log text, Confluent
  Schema Registry framing (magic 0x00), bakdata's byte flag (0x00/0x01), or any common container
  (gzip 1f 8b, zstd 28 b5, lz4 04 22, snappy-framed ff 06, PNG, JPEG, PDF, Parquet, Arrow). A
  protobuf message cannot begin ``\\x1bG``: 0x1b is a group-start tag for field 3 and the next tag,
  0x47, has the invalid wire type 7. ESC does begin ANSI-coloured text (``\\x1b[``), Lua bytecode
  (``\\x1bLua``) and printer streams (PCL ``\\x1bE``); none continues with ``GWREF``. What remains is
  an arbitrary binary payload whose first six bytes happen to be these six: 2**-48 for random data.
  A payload that *is* an envelope (an envelope re-sent as a plain value) is indistinguishable by
  construction, so producers must not send such values on the plain route.

Two checks with two jobs: CRC-32 over the envelope catches a garbled pointer before it reaches a
store (every single-byte error and every burst up to 32 bits is detected), and a cryptographic
digest of the payload catches a wrong payload behind a good pointer. Cryptographic rather than a
CRC or xxhash because a store is a separate system that someone else may write to: it resists
deliberate substitution, not only corruption. Two algorithms are read, both 256-bit:

* SHA-256 (``checksum_alg`` 1): the slower of the two even with SHA-NI; anyone can check it with
  ``sha256sum`` or ``aws s3api`` metadata, and it is what kaf-s3 records. A store that keeps the
  digest in its own metadata (S3) is written with it.
* BLAKE3 (``checksum_alg`` 2): as strong, and several times faster on the same core, which is the
  difference between hashing costing as much as a loopback Redis transfer and costing a small part
  of it (rates measured in docs/protocol.md §8). The producer's default for every store.

The algorithm byte is why a new digest needs no new version; a reader that does not know an
algorithm refuses the envelope by name rather than accepting an unchecked payload.
"""

from __future__ import annotations

import hashlib
import re
import struct
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import blake3

from gateway.errors import EnvelopeFormatError, PayloadIntegrityError
from gateway.protocol.encryption import Encryption, plaintext_size_of
from gateway.protocol.payload_encoding import CODEC_IDS, CODECS_BY_ID, decode_payload

ENVELOPE_HEADER = "_gw.ref"
"""Reserved record header marking an envelope; its value is the 1-byte format version."""

MAGIC = b"\x1bGWREF"
_CODEC_MASK = 0x03
"""The flags bits that name the payload's codec; every other bit is reserved."""
VERSION = 1
SUPPORTED_VERSIONS = frozenset({VERSION})

CHECKSUM_SHA256 = 1
CHECKSUM_BLAKE3 = 2
_DIGEST_SIZES = {CHECKSUM_SHA256: 32, CHECKSUM_BLAKE3: 32}
CHECKSUM_NAMES = {CHECKSUM_SHA256: "SHA-256", CHECKSUM_BLAKE3: "BLAKE3"}
DEFAULT_CHECKSUM = CHECKSUM_BLAKE3

MAX_PAYLOAD_SIZE = 2**53
"""Exact in a float64, so sizes survive JSON, JavaScript and metrics systems; far above any store's limit."""

MAX_STORE_NAME = 64
MAX_LOCATOR_BYTES = 768
"""Room for ``s3://<63-char bucket>/<prefix><249-char topic>/<uuid>`` with a 400-byte prefix, while the
whole envelope stays under 1 000 bytes (a 1 024-byte locator would have pushed it to 1 160)."""

_FIXED = struct.Struct(">6sBBQB32s16sB")  # magic .. store_len: 66 bytes
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_CRC_SIZE = _U32.size

FLAG_ENCRYPTED = 0x04
_KNOWN_FLAGS = _CODEC_MASK | FLAG_ENCRYPTED
_CRYPTO_FIXED = struct.Struct(">BB12sB")  # algorithm, segment_log2, nonce, key_id_len
MAX_ENCRYPTED_ENVELOPE_BYTES = 1000
"""An encrypted envelope's bound, checked when it is built: realistic ones are 250 (key ring) to 450 (KMS) bytes."""

MIN_ENVELOPE_BYTES = _FIXED.size + 1 + _U16.size + 1 + _CRC_SIZE
MAX_ENVELOPE_BYTES = _FIXED.size + MAX_STORE_NAME + _U16.size + MAX_LOCATOR_BYTES + _CRC_SIZE
assert MAX_ENVELOPE_BYTES < 1000

_STORE_NAME = re.compile(r"[a-z0-9_.-]{1,64}")
# C0, DEL and C1 controls: a locator ends up in logs and error messages, where they would let a
# crafted record forge lines or hide characters.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

Value = bytes | bytearray | memoryview


def digest_of(checksum: int, payload: Value) -> bytes:
    """The payload's digest by algorithm ``checksum`` (both release the GIL on large inputs)."""
    if checksum == CHECKSUM_BLAKE3:
        hasher = blake3.blake3()
        hasher.update(payload)  # a method call, so profiles show hashing apart from its caller
        return hasher.digest()
    if checksum == CHECKSUM_SHA256:
        return hashlib.sha256(payload).digest()
    raise EnvelopeFormatError(f"unknown checksum algorithm {checksum}")


def validate_store_name(name: str) -> str:
    """The store name as the envelope can carry it; raises :class:`EnvelopeFormatError` otherwise."""
    if not isinstance(name, str) or _STORE_NAME.fullmatch(name) is None:
        raise EnvelopeFormatError(f"store name must be 1..{MAX_STORE_NAME} chars of [a-z0-9_.-], got {name!r}")
    return name


def _validate_locator(locator: str) -> bytes:
    if not isinstance(locator, str):
        raise EnvelopeFormatError(f"locator must be a str, got {type(locator).__name__}")
    try:
        raw = locator.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        raise EnvelopeFormatError("locator is not encodable as UTF-8") from exc
    if not 1 <= len(raw) <= MAX_LOCATOR_BYTES:
        raise EnvelopeFormatError(f"locator must be 1..{MAX_LOCATOR_BYTES} UTF-8 bytes, got {len(raw)}")
    if _CONTROL.search(locator):
        raise EnvelopeFormatError("locator contains control characters")
    return raw


@dataclass(frozen=True, slots=True)
class Envelope:
    """A pointer to a payload: which store, where in it, and what the payload must hash to (by ``checksum``).

    Construction validates every field, so an ``Envelope`` that exists can always be encoded and an
    invalid one cannot travel; the error is :class:`EnvelopeFormatError`, a ``ValueError``.
    """

    store: str
    locator: str
    size: int
    digest: bytes
    message_id: uuid.UUID
    version: int = VERSION
    checksum: int = CHECKSUM_SHA256
    compression: str | None = None
    """How the store keeps the payload (:mod:`gateway.protocol.payload_encoding`); ``size`` and ``digest``
    are always those of the application's bytes. An older reader refuses a compressed envelope (unknown
    flags) rather than hand out compressed bytes."""
    encryption: Encryption | None = None
    """Set when the stored payload is sealed; ``size`` and ``digest`` then describe the sealed bytes."""

    def __post_init__(self) -> None:
        if self.version not in SUPPORTED_VERSIONS:
            raise EnvelopeFormatError(f"unsupported envelope version {self.version}")
        validate_store_name(self.store)
        _validate_locator(self.locator)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 0 <= self.size <= MAX_PAYLOAD_SIZE:
            raise EnvelopeFormatError(f"payload size must be an int in [0, 2**53], got {self.size!r}")
        if self.checksum not in _DIGEST_SIZES:
            raise EnvelopeFormatError(f"unknown checksum algorithm {self.checksum!r}")
        size = _DIGEST_SIZES[self.checksum]
        if not isinstance(self.digest, bytes) or len(self.digest) != size:
            raise EnvelopeFormatError(f"a {CHECKSUM_NAMES[self.checksum]} digest must be {size} bytes")
        if not isinstance(self.message_id, uuid.UUID):
            raise EnvelopeFormatError(f"message_id must be a uuid.UUID, got {type(self.message_id).__name__}")
        if self.compression is not None and self.compression not in CODEC_IDS:
            raise EnvelopeFormatError(f"unknown payload compression {self.compression!r}")
        if self.encryption is not None:
            self._check_encryption(self.encryption)

    def _check_encryption(self, encryption: Encryption) -> None:
        if not isinstance(encryption, Encryption):
            raise EnvelopeFormatError(f"encryption must be an Encryption, got {type(encryption).__name__}")
        if plaintext_size_of(self.size, encryption.segment_log2) is None:
            raise EnvelopeFormatError(
                f"{self.size} bytes cannot be a sealed payload in 2**{encryption.segment_log2}-byte segments"
            )
        length = _encoded_length(self)
        if length > MAX_ENCRYPTED_ENVELOPE_BYTES:
            raise EnvelopeFormatError(
                f"the encrypted envelope would have {length} bytes, at most {MAX_ENCRYPTED_ENVELOPE_BYTES}:"
                " shorten the locator prefix or the key id"
            )

    @property
    def payload_size(self) -> int:
        """The application's payload size: ``size`` less the tags when the stored payload is sealed (then, if
        it is compressed too, the compressed size: the application's is known once decoded)."""
        if self.encryption is None:
            return self.size
        plaintext = plaintext_size_of(self.size, self.encryption.segment_log2)
        assert plaintext is not None  # checked at construction
        return plaintext

    @classmethod
    def for_payload(
        cls,
        payload: Value,
        *,
        store: str,
        locator: str,
        message_id: uuid.UUID,
        checksum: int = DEFAULT_CHECKSUM,
        encryption: Encryption | None = None,
    ) -> Envelope:
        """The envelope describing stored ``payload``: size and digest are computed here so they cannot disagree."""
        return cls(
            store, locator, len(payload), digest_of(checksum, payload), message_id, VERSION, checksum, None, encryption
        )

    @property
    def stored_size(self) -> int | None:
        """The size to ask the store for: the payload's, or ``None`` when compressed (bounded by :meth:`open`).

        A sealed payload's size is the stored one, compressed or not.
        """
        return self.size if self.compression is None or self.encryption is not None else None

    def open(self, stored: bytes) -> bytes:
        """The application's payload from what the store returned: decoded (never past ``size``), then verified."""
        payload = decode_payload(stored, self.compression, self.size)
        self.verify(payload)
        return payload

    def verify(self, payload: Value) -> None:
        """Raise :class:`PayloadIntegrityError` unless ``payload`` is the one this envelope was made for.

        The size is compared first: it is free and catches truncation without hashing gigabytes.
        """
        if len(payload) != self.size:
            raise PayloadIntegrityError(
                f"payload at {self.locator!r} has {len(payload)} bytes, the envelope says {self.size}"
            )
        if digest_of(self.checksum, payload) != self.digest:
            raise PayloadIntegrityError(
                f"payload at {self.locator!r} does not match the envelope's {CHECKSUM_NAMES[self.checksum]}"
            )


def envelope_header(version: int = VERSION) -> tuple[str, bytes]:
    """The ``(key, value)`` header that marks a record as an envelope."""
    if version not in SUPPORTED_VERSIONS:
        raise EnvelopeFormatError(f"unsupported envelope version {version}")
    return ENVELOPE_HEADER, bytes((version,))


def _encryption_block(encryption: Encryption) -> bytes:
    key_id = encryption.key_id.encode("ascii")
    return b"".join(
        (
            _CRYPTO_FIXED.pack(encryption.algorithm, encryption.segment_log2, encryption.nonce, len(key_id)),
            key_id,
            _U16.pack(len(encryption.wrapped_key)),
            encryption.wrapped_key,
        )
    )


def _encoded_length(env: Envelope) -> int:
    crypto = 0 if env.encryption is None else len(_encryption_block(env.encryption))
    return _FIXED.size + len(env.store) + _U16.size + len(env.locator.encode("utf-8")) + crypto + _CRC_SIZE


def _decode_encryption(data: bytes, at: int, end: int) -> Encryption:
    """The encryption block in ``data[at:end]``; its lengths are checked against ``end`` before use."""
    if end - at < _CRYPTO_FIXED.size + 1 + _U16.size + 1:
        raise EnvelopeFormatError("truncated envelope: the encryption block is too short")
    algorithm, segment_log2, nonce, key_id_len = _CRYPTO_FIXED.unpack_from(data, at)
    at += _CRYPTO_FIXED.size
    if key_id_len == 0 or at + key_id_len + _U16.size > end:
        raise EnvelopeFormatError(f"key id length {key_id_len} does not fit the envelope")
    try:
        key_id = data[at : at + key_id_len].decode("ascii")
    except UnicodeDecodeError as exc:
        raise EnvelopeFormatError("the key id is not ASCII") from exc
    at += key_id_len
    (wrapped_len,) = _U16.unpack_from(data, at)
    at += _U16.size
    if at + wrapped_len != end:
        raise EnvelopeFormatError(f"wrapped key length {wrapped_len} does not match the envelope's length")
    return Encryption(key_id, data[at:end], nonce, segment_log2, algorithm)


def encode_envelope(env: Envelope) -> bytes:
    """The record value for ``env``: between :data:`MIN_ENVELOPE_BYTES` and :data:`MAX_ENVELOPE_BYTES`
    bytes, or at most :data:`MAX_ENCRYPTED_ENVELOPE_BYTES` when it is encrypted."""
    store = env.store.encode("ascii")
    locator = _validate_locator(env.locator)
    body = b"".join(
        (
            _FIXED.pack(
                MAGIC,
                env.version,
                CODEC_IDS.get(env.compression or "", 0) | (0 if env.encryption is None else FLAG_ENCRYPTED),
                env.size,
                env.checksum,
                env.digest,
                env.message_id.bytes,
                len(store),
            ),
            store,
            _U16.pack(len(locator)),
            locator,
            b"" if env.encryption is None else _encryption_block(env.encryption),
        )
    )
    return body + _U32.pack(zlib.crc32(body))


def looks_like_envelope(value: Value | None) -> bool:
    """Whether ``value`` starts with the envelope magic: a six-byte compare, for the per-record hot path.

    It says nothing about validity; :func:`decode_envelope` does. A value that passes here and then
    fails to decode is a broken envelope, not a payload, since no payload we carry starts this way.
    """
    if value is None or len(value) < len(MAGIC):
        return False
    if isinstance(value, bytes):
        return value.startswith(MAGIC)
    return bytes(value[: len(MAGIC)]) == MAGIC


def is_envelope_record(value: Value | None, headers: Sequence[tuple[str, bytes | None]] | None) -> bool:
    """Whether a record must be resolved as an envelope: it has the header, or its value has the magic.

    A record with the header but a value that does not decode is reported by :func:`decode_envelope`
    rather than passed through, because the producer said it was a pointer and handing the pointer's
    bytes to the application as its payload would be silent corruption. Check ``_lm`` first: the raw
    chunk of a header-only LinkedIn segment is arbitrary payload bytes.
    """
    if headers:
        for key, _ in headers:
            if key == ENVELOPE_HEADER:
                return True
    return looks_like_envelope(value)


def _framed_envelope_bytes(value: Value | None) -> bytes:
    """``value`` as ``bytes``, once its frame says it is an envelope this reader can lay its fields over.

    Present, the magic, no larger than an envelope can be (checked before copying: a hostile value
    may be large), a version this reader knows, and at least :data:`MIN_ENVELOPE_BYTES`. A ``bytes``
    value is returned as it is, not copied.
    """
    if value is None:
        raise EnvelopeFormatError("envelope value is missing (null record value)")
    if not looks_like_envelope(value):
        raise EnvelopeFormatError(f"not an envelope: value does not start with the magic {MAGIC!r}")
    limit = MAX_ENCRYPTED_ENVELOPE_BYTES if len(value) > 7 and value[7] & FLAG_ENCRYPTED else MAX_ENVELOPE_BYTES
    if len(value) > limit:
        raise EnvelopeFormatError(f"envelope has {len(value)} bytes, at most {limit} are possible")
    data = value if isinstance(value, bytes) else bytes(value)
    if len(data) < len(MAGIC) + 1:
        raise EnvelopeFormatError("truncated envelope: no version byte")
    version = data[len(MAGIC)]
    if version not in SUPPORTED_VERSIONS:
        raise EnvelopeFormatError(
            f"unsupported envelope version {version} (this reader knows {sorted(SUPPORTED_VERSIONS)});"
            " the producer is newer than this consumer"
        )
    if len(data) < MIN_ENVELOPE_BYTES:
        raise EnvelopeFormatError(f"truncated envelope: {len(data)} bytes, at least {MIN_ENVELOPE_BYTES} needed")
    return data


def decode_envelope(value: Value | None) -> Envelope:
    """Parse and check an envelope; every defect raises :class:`EnvelopeFormatError`, never anything else.

    The framing (magic, version, exact length) and the CRC are checked before any field is trusted,
    so a flipped bit is reported as corruption rather than as a strange store name or size.
    """
    data = _framed_envelope_bytes(value)
    version = data[len(MAGIC)]
    _, _, flags, size, algorithm, digest, raw_id, store_len = _FIXED.unpack_from(data, 0)
    locator_at = _FIXED.size + store_len + _U16.size
    if len(data) < locator_at:
        raise EnvelopeFormatError(f"truncated envelope: {len(data)} bytes, the store name ends at {locator_at}")
    (locator_len,) = _U16.unpack_from(data, locator_at - _U16.size)
    locator_end = locator_at + locator_len
    expected = locator_end + _CRC_SIZE
    if len(data) < expected:
        raise EnvelopeFormatError(f"truncated envelope: {len(data)} bytes, the layout needs {expected}")
    encrypted = flags & FLAG_ENCRYPTED
    if len(data) > expected and not encrypted:
        raise EnvelopeFormatError(f"envelope has {len(data) - expected} trailing bytes after the CRC")
    (crc,) = _U32.unpack_from(data, len(data) - _CRC_SIZE)
    if zlib.crc32(memoryview(data)[: len(data) - _CRC_SIZE]) != crc:
        raise EnvelopeFormatError("envelope CRC-32 mismatch: the value was corrupted")
    if flags & ~_KNOWN_FLAGS:
        raise EnvelopeFormatError(f"envelope sets unknown flags 0x{flags & ~_KNOWN_FLAGS:02x}")
    if algorithm not in _DIGEST_SIZES:
        raise EnvelopeFormatError(f"unknown checksum algorithm {algorithm}")
    if size > MAX_PAYLOAD_SIZE:
        raise EnvelopeFormatError(f"payload size {size} exceeds 2**53")
    if store_len == 0 or store_len > MAX_STORE_NAME:
        raise EnvelopeFormatError(f"store name length {store_len} is outside 1..{MAX_STORE_NAME}")
    if locator_len == 0 or locator_len > MAX_LOCATOR_BYTES:
        raise EnvelopeFormatError(f"locator length {locator_len} is outside 1..{MAX_LOCATOR_BYTES}")
    try:
        store = data[_FIXED.size : _FIXED.size + store_len].decode("ascii")
        locator = data[locator_at:locator_end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvelopeFormatError(f"envelope text field is not valid: {exc.reason}") from exc
    compression = CODECS_BY_ID.get(flags & _CODEC_MASK)
    encryption = _decode_encryption(data, locator_end, len(data) - _CRC_SIZE) if encrypted else None
    return Envelope(store, locator, size, digest, uuid.UUID(bytes=raw_id), version, algorithm, compression, encryption)


__all__ = [
    "CHECKSUM_BLAKE3",
    "CHECKSUM_NAMES",
    "CHECKSUM_SHA256",
    "DEFAULT_CHECKSUM",
    "ENVELOPE_HEADER",
    "FLAG_ENCRYPTED",
    "MAGIC",
    "MAX_ENCRYPTED_ENVELOPE_BYTES",
    "MAX_ENVELOPE_BYTES",
    "MAX_LOCATOR_BYTES",
    "MAX_PAYLOAD_SIZE",
    "MIN_ENVELOPE_BYTES",
    "VERSION",
    "Envelope",
    "decode_envelope",
    "digest_of",
    "encode_envelope",
    "envelope_header",
    "is_envelope_record",
    "looks_like_envelope",
    "validate_store_name",
]
