"""ReferenceEncryption, the object the writer and the resolver call: config, store checks, seal then open."""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any

import pytest

from gateway.encryption import LocalKeyRing, ReferenceEncryption
from gateway.errors import ConfigurationError, KeyUnavailableError, PayloadAuthenticationError, PayloadIntegrityError
from gateway.protocol.envelope import Envelope, decode_envelope, encode_envelope
from gateway.store import Store
from gateway.testing import MemoryStore

RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")
LIMIT = 64 << 20  # a consumer's reference.max.payload.bytes


def written(enc: ReferenceEncryption, store: MemoryStore, payload: bytes, topic: str = "t") -> Envelope:
    """What the writer does: seal, put the sealed bytes, build the envelope from them."""
    message_id = uuid.uuid4()
    sealed = enc.seal(store, topic, message_id, payload)
    assert sealed is not None
    locator = store.put(topic, message_id, sealed.payload)
    assert locator == sealed.locator
    envelope = Envelope.for_payload(
        sealed.payload, store=store.name, locator=locator, message_id=message_id, encryption=sealed.encryption
    )
    return decode_envelope(encode_envelope(envelope))


def test_config_values() -> None:
    conf: dict[str, Any] = {"reference.encryption": "AES256-GCM", "other": 1}
    assert ReferenceEncryption.from_config(conf, RING).enabled and conf == {"other": 1}
    assert not ReferenceEncryption.from_config({}, None).enabled
    with pytest.raises(ConfigurationError, match="none, aes256-gcm"):
        ReferenceEncryption.from_config({"reference.encryption": "aes128"}, RING)
    with pytest.raises(ConfigurationError, match="needs key_provider"):
        ReferenceEncryption.from_config({"reference.encryption": "aes256-gcm"}, None)
    with pytest.raises(TypeError, match="KeyProvider"):
        ReferenceEncryption(object(), enabled=True)  # type: ignore[arg-type]


def test_a_store_that_cannot_name_its_locator_first_is_refused() -> None:
    class Opaque(MemoryStore):
        def locator_for(self, topic: str, message_id: uuid.UUID, size: int) -> str | None:
            return Store.locator_for(self, topic, message_id, size)

    enc = ReferenceEncryption(RING, enabled=True)
    enc.check_stores({"mem": MemoryStore()})
    with pytest.raises(ConfigurationError, match="'opaque'"):
        enc.check_stores({"opaque": Opaque()})
    ReferenceEncryption(None).check_stores({"opaque": Opaque()})  # disabled: any store


def test_sealed_in_the_store_opened_for_the_consumer() -> None:
    store = MemoryStore()
    payload = os.urandom(3 << 20)
    envelope = written(ReferenceEncryption(RING, enabled=True), store, payload)
    stored = store.payloads[envelope.locator]
    assert payload[:64] not in stored and envelope.payload_size == len(payload)
    opened = ReferenceEncryption(RING).open(envelope, store, stored, limit=LIMIT)
    assert type(opened) is bytes and opened == payload


def test_clear_envelopes_pass_and_a_consumer_without_keys_gets_a_typed_error() -> None:
    store = MemoryStore()
    clear = Envelope.for_payload(b"abc", store="mem", locator="t/" + str(uuid.uuid4()), message_id=uuid.uuid4())
    assert ReferenceEncryption(RING).open(clear, store, b"abc", limit=LIMIT) == b"abc"
    with pytest.raises(PayloadIntegrityError):  # a clear payload is still checked by its digest
        ReferenceEncryption(RING).open(clear, store, b"abd", limit=LIMIT)
    envelope = written(ReferenceEncryption(RING, enabled=True), store, b"secret")
    with pytest.raises(KeyUnavailableError, match=r"'k1'.*no key_provider"):
        ReferenceEncryption(None).open(envelope, store, store.payloads[envelope.locator], limit=LIMIT)


def test_a_payload_swapped_between_two_records_fails() -> None:
    store = MemoryStore()
    enc = ReferenceEncryption(RING, enabled=True)
    first, second = written(enc, store, b"first"), written(enc, store, b"second")
    with pytest.raises(PayloadAuthenticationError):
        enc.open(first, store, store.payloads[second.locator], limit=LIMIT)
    # the other record's wrapped key and nonce with this record's locator: the key is bound to its record
    assert second.encryption is not None
    forged = dataclasses.replace(first, encryption=second.encryption)
    with pytest.raises(PayloadAuthenticationError):
        enc.open(forged, store, store.payloads[second.locator], limit=LIMIT)


def test_the_stored_size_is_what_the_envelope_declares() -> None:
    """The producer checks reference.max.payload.bytes against it, as consumers check the envelope's size."""
    assert ReferenceEncryption(None).stored_size(3 << 20) == 3 << 20
    assert ReferenceEncryption(RING, enabled=True).stored_size(3 << 20) == (3 << 20) + 3 * 16
    envelope = written(ReferenceEncryption(RING, enabled=True), MemoryStore(), b"x" * ((1 << 20) + 1))
    assert envelope.size == ReferenceEncryption(RING, enabled=True).stored_size((1 << 20) + 1)


def test_a_compressed_then_sealed_payload_opens_decoded_and_bounded_by_the_readers_limit() -> None:
    from gateway.protocol.payload_encoding import encode_payload

    store = MemoryStore()
    payload = b"abc" * 400_000
    encoded = bytes(encode_payload(payload, "zstd"))
    message_id = uuid.uuid4()
    sealed = ReferenceEncryption(RING, enabled=True).seal(store, "t", message_id, encoded)
    assert sealed is not None
    locator = store.put("t", message_id, sealed.payload)
    envelope = Envelope.for_payload(
        sealed.payload, store=store.name, locator=locator, message_id=message_id, encryption=sealed.encryption
    )
    envelope = decode_envelope(encode_envelope(dataclasses.replace(envelope, compression="zstd")))
    assert envelope.compression == "zstd" and envelope.encryption is not None
    assert envelope.stored_size == envelope.size == len(sealed.payload) < len(payload) // 100
    opened = ReferenceEncryption(RING).open(envelope, store, store.payloads[locator], limit=LIMIT)
    assert opened == payload
    with pytest.raises(PayloadIntegrityError, match="limit"):
        ReferenceEncryption(RING).open(envelope, store, store.payloads[locator], limit=len(payload) - 1)
