"""The local key ring and the seal/open calls: rotation, missing keys, moved envelopes, and no key in any repr."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

import pytest

from gateway.encryption import Binding, LocalKeyRing, open_sealed, seal
from gateway.errors import ConfigurationError, EnvelopeFormatError, KeyUnavailableError, PayloadAuthenticationError
from gateway.protocol.envelope import (
    FLAG_ENCRYPTED,
    MAX_ENCRYPTED_ENVELOPE_BYTES,
    Envelope,
    decode_envelope,
    encode_envelope,
)

K1 = bytes(range(32))
K2 = bytes(range(32, 64))
BINDING = Binding("orders", uuid.UUID(int=1), "s3", "s3://bucket/gw/orders/00000000-0000-0000-0000-000000000001")


def ring(current: str = "k1", **keys: bytes) -> LocalKeyRing:
    return LocalKeyRing(keys or {"k1": K1}, current)


def test_rotation_keeps_old_payloads_readable_and_new_ones_use_the_current_key() -> None:
    old = seal(ring(), BINDING, b"written before the rotation")
    rotated = ring("k2", k1=K1, k2=K2)
    new = seal(rotated, BINDING, b"written after")
    assert (old.encryption.key_id, new.encryption.key_id) == ("k1", "k2")
    assert bytes(open_sealed(rotated, old.encryption, BINDING, old.payload)) == b"written before the rotation"
    assert bytes(open_sealed(rotated, new.encryption, BINDING, new.payload)) == b"written after"


def test_a_key_ring_without_the_key_id_is_a_typed_error_naming_the_id() -> None:
    sealed = seal(ring("k2", k2=K2), BINDING, b"x")
    with pytest.raises(KeyUnavailableError, match="'k2'"):
        open_sealed(ring(), sealed.encryption, BINDING, sealed.payload)


def test_a_key_of_the_same_id_but_other_bytes_fails_authentication() -> None:
    sealed = seal(ring(), BINDING, b"x")
    with pytest.raises(PayloadAuthenticationError, match="wrapped"):
        open_sealed(ring(k1=K2), sealed.encryption, BINDING, sealed.payload)


def test_the_wrapped_key_is_bound_to_the_record() -> None:
    sealed = seal(ring(), BINDING, b"x")
    moved = Binding("payments", BINDING.message_id, BINDING.store, BINDING.locator)
    with pytest.raises(PayloadAuthenticationError):
        open_sealed(ring(), sealed.encryption, moved, sealed.payload)


def test_every_data_key_and_nonce_is_fresh() -> None:
    a, b = seal(ring(), BINDING, b"same"), seal(ring(), BINDING, b"same")
    assert a.encryption.wrapped_key != b.encryption.wrapped_key and a.encryption.nonce != b.encryption.nonce
    assert a.payload != b.payload


def test_the_envelope_carries_the_encryption_and_stays_well_under_1kb() -> None:
    sealed = seal(ring(), BINDING, os.urandom(3_000_000))
    env = Envelope.for_payload(
        sealed.payload, store="s3", locator=BINDING.locator, message_id=BINDING.message_id, encryption=sealed.encryption
    )
    value = encode_envelope(env)
    assert value[7] == FLAG_ENCRYPTED and len(value) < 300 < MAX_ENCRYPTED_ENVELOPE_BYTES
    decoded = decode_envelope(value)
    assert decoded == env and decoded.payload_size == 3_000_000 and decoded.size == len(sealed.payload)
    decoded.verify(sealed.payload)  # size and digest describe the stored (sealed) bytes
    # every truncation of the encrypted envelope is refused as a format error, not misread
    for cut in range(len(value) - 1):
        with pytest.raises(EnvelopeFormatError):
            decode_envelope(value[:cut])


def test_the_encrypted_envelope_is_bounded() -> None:
    sealed = seal(ring(), BINDING, b"x")
    encryption = type(sealed.encryption)("k" * 255, b"w" * 512, sealed.encryption.nonce)
    with pytest.raises(EnvelopeFormatError, match="at most 1000"):
        Envelope("s3", "x" * 300, len(sealed.payload), b"\0" * 32, BINDING.message_id, encryption=encryption)


def test_from_file_and_from_env(tmp_path: Path) -> None:
    text = {"k1": base64.b64encode(K1).decode(), "k2": LocalKeyRing.generate_key()}
    path = tmp_path / "ring.json"
    path.write_text(json.dumps({"current": "k2", "keys": text}))
    path.chmod(0o600)
    from_file = LocalKeyRing.from_file(path)
    assert from_file.current == "k2" and from_file.key_ids == ["k1", "k2"]
    env = {"GATEWAY_KEYRING_CURRENT": "k1", "GATEWAY_KEYRING_KEY_k1": text["k1"], "OTHER": "x"}
    from_env = LocalKeyRing.from_env(env)
    sealed = seal(from_env, BINDING, b"x")
    assert bytes(open_sealed(from_file, sealed.encryption, BINDING, sealed.payload)) == b"x"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"current": "k9", "keys": {"k1": base64.b64encode(K1).decode()}}, "current key 'k9'"),
        ({"current": "k1", "keys": {"k1": "not base64!"}}, "base64"),
        ({"current": "k1", "keys": {"k1": base64.b64encode(b"short").decode()}}, "32"),
        ({"keys": {}}, "current"),
    ],
)
def test_bad_key_rings_are_configuration_errors_without_the_key(tmp_path: Path, document: object, message: str) -> None:
    path = tmp_path / "ring.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigurationError, match=message) as caught:
        LocalKeyRing.from_file(path)
    assert base64.b64encode(K1).decode() not in str(caught.value)


def test_no_key_material_in_repr() -> None:
    keyring = ring(k1=K1)
    data_key = keyring.new_data_key(BINDING.key_context())
    shown = repr(keyring) + repr(data_key) + str(vars(type(keyring)))
    for secret in (K1, data_key.plaintext):
        assert (
            secret.hex() not in shown and repr(secret) not in shown and base64.b64encode(secret).decode() not in shown
        )
