"""The sealed-payload format: sizes, segment boundaries, and every way a sealed payload can be altered."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import EnvelopeFormatError, PayloadAuthenticationError
from gateway.protocol.encryption import (
    TAG_BYTES,
    Binding,
    Encryption,
    PayloadCipher,
    plaintext_size_of,
    sealed_size,
    segment_count,
)

KEY = bytes(range(32))
SMALL = 12  # 4 KiB segments, so multi-segment payloads stay small
BINDING = Binding("orders", uuid.UUID(int=7), "redis", "gw:orders:00000000-0000-0000-0000-000000000007#1x4096")


def info(**changes: object) -> Encryption:
    fields: dict[str, object] = {"key_id": "k1", "wrapped_key": b"w" * 60, "nonce": b"n" * 12, "segment_log2": SMALL}
    fields.update(changes)
    return Encryption(**fields)  # type: ignore[arg-type]


def sealed(payload: bytes, encryption: Encryption | None = None, binding: Binding = BINDING) -> bytearray:
    return PayloadCipher(KEY, encryption or info(), binding, len(payload)).seal(payload)


def opened(
    stored: bytes | bytearray, size: int, encryption: Encryption | None = None, binding: Binding = BINDING
) -> bytes:
    return bytes(PayloadCipher(KEY, encryption or info(), binding, size).open(stored))


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 8192, 3 * 4096 + 5])
def test_round_trip_at_segment_boundaries(size: int) -> None:
    payload = os.urandom(size)
    stored = sealed(payload)
    assert len(stored) == sealed_size(size, SMALL) == size + TAG_BYTES * segment_count(size, SMALL)
    assert plaintext_size_of(len(stored), SMALL) == size
    assert size < 8 or payload not in stored  # a byte or two of plaintext turns up in random ciphertext by chance
    assert opened(stored, size) == payload


@given(st.integers(min_value=0, max_value=10**7), st.integers(min_value=0, max_value=2000), st.integers(1, 15))
def test_sizes_invert_and_impossible_sizes_are_none(size: int, full: int, into_tag: int) -> None:
    assert plaintext_size_of(sealed_size(size, SMALL), SMALL) == size
    # ``full`` whole segments and then less than a tag: no sealed payload has that size
    assert plaintext_size_of(full * (4096 + TAG_BYTES) + into_tag, SMALL) is None


def test_one_flipped_bit_anywhere_fails_and_yields_nothing() -> None:
    payload = os.urandom(2 * 4096 + 100)
    stored = sealed(payload)
    for at in (0, 4095, 4096 + 15, 4096 + 16, len(stored) - 1):
        tampered = bytearray(stored)
        tampered[at] ^= 1
        with pytest.raises(PayloadAuthenticationError, match="failed authentication"):
            opened(tampered, len(payload))


def test_truncated_at_a_segment_boundary_fails_on_the_missing_final_flag() -> None:
    payload = os.urandom(3 * 4096)
    stored = sealed(payload)
    two_segments = bytes(stored[: 2 * (4096 + TAG_BYTES)])
    # told the truncated size (an attacker who also rewrote the envelope's size), the last segment is not final
    with pytest.raises(PayloadAuthenticationError):
        opened(two_segments, 2 * 4096)
    with pytest.raises(PayloadAuthenticationError, match="truncated or extended"):
        opened(two_segments, 3 * 4096)


def test_reordered_segments_fail() -> None:
    payload = os.urandom(2 * 4096 + 1)
    stored = bytes(sealed(payload))
    width = 4096 + TAG_BYTES
    swapped = stored[width : 2 * width] + stored[:width] + stored[2 * width :]
    with pytest.raises(PayloadAuthenticationError, match="segment 1 of 3"):
        opened(swapped, len(payload))


@pytest.mark.parametrize(
    "other",
    [
        Binding("payments", BINDING.message_id, BINDING.store, BINDING.locator),
        Binding(BINDING.topic, uuid.UUID(int=8), BINDING.store, BINDING.locator),
        Binding(BINDING.topic, BINDING.message_id, "s3", BINDING.locator),
        Binding(BINDING.topic, BINDING.message_id, BINDING.store, BINDING.locator + "0"),
    ],
    ids=["topic", "message-id", "store", "locator"],
)
def test_a_payload_moved_to_another_record_fails(other: Binding) -> None:
    payload = b"salary: 100"
    with pytest.raises(PayloadAuthenticationError):
        opened(sealed(payload), len(payload), binding=other)


def test_another_nonce_key_id_or_segment_size_fails() -> None:
    payload = os.urandom(5000)
    stored = sealed(payload)
    for changed in (info(nonce=b"m" * 12), info(key_id="k2")):
        with pytest.raises(PayloadAuthenticationError):
            opened(stored, len(payload), changed)
    with pytest.raises(PayloadAuthenticationError):
        PayloadCipher(bytes(32), info(), BINDING, len(payload)).open(stored)


def test_encryption_fields_are_validated() -> None:
    for bad in (
        {"algorithm": 2},
        {"key_id": ""},
        {"key_id": "has space"},
        {"key_id": "x" * 256},
        {"wrapped_key": b""},
        {"wrapped_key": b"w" * 513},
        {"nonce": b"n" * 11},
        {"segment_log2": 11},
        {"segment_log2": 27},
    ):
        with pytest.raises(EnvelopeFormatError):
            info(**bad)
