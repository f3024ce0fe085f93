"""reference.encryption end to end: sealed payloads in real Redis and S3, envelopes through Kafka.

A raw read of the store shows no plaintext; a payload swapped behind a re-forged envelope fails
authentication with the record attached and the next record is delivered; a key rotation keeps old
payloads readable; a consumer that lacks the key gets a typed error with the record; gc needs no key.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.encryption import KmsKeyProvider, LocalKeyRing
from gateway.errors import KeyUnavailableError, PayloadAuthenticationError, PayloadIntegrityError
from gateway.protocol.envelope import Envelope, decode_envelope, encode_envelope, envelope_header
from gateway.testing import KafkaService, S3Server
from stores import RedisStore, S3Store
from tests.helpers import consume_all, payload, sha
from tests.kafkautil import produce_records, read_partition

K1, K2 = bytes(range(32)), bytes(range(100, 132))
RING = LocalKeyRing({"k1": K1}, "k1")
STORES = ["redis", "s3"]


@pytest.fixture
def stores(redis_client: redis.Redis, s3_client: Any, s3_bucket: str, s3_prefix: str) -> dict[str, Any]:
    return {
        "redis": RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}", entry_bytes=1 << 20),
        "s3": S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix),
    }


def producer(kafka: KafkaService, stores: dict[str, Any], store: str, keys: Any = RING, **conf: Any) -> HybridProducer:
    return HybridProducer(
        {**kafka.producer_config(), "reference.encryption": "aes256-gcm", **conf},
        policy=SizeThresholdPolicy(reference_above=100_000, store=store),
        stores={store: stores[store]},
        key_provider=keys,
    )


def stored_bytes(store: Any) -> bytes:
    """Everything the store holds under its prefix, read raw (what an operator, a backup or a replica sees)."""
    if isinstance(store, RedisStore):
        client = store.client
        return b"".join(client.get(k) or b"" for k in client.scan_iter(match=f"{store.prefix}:*", count=1000)
                        if client.type(k) == b"string")  # fmt: skip
    listing = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix).get("Contents", [])
    return b"".join(store.client.get_object(Bucket=store.bucket, Key=o["Key"])["Body"].read() for o in listing)


def envelopes(consumer_config: Any, topic: str, count: int) -> list[Any]:
    return read_partition(consumer_config(), topic, 0, count)


@pytest.mark.parametrize("store", STORES)
def test_the_store_holds_ciphertext_and_the_consumer_gets_the_payload(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str
) -> None:
    sizes = [3_500_000, 200_000]  # several 1 MiB segments (and Redis entries); one segment
    values = [payload(size, i) for i, size in enumerate(sizes)]
    with producer(kafka, stores, store) as sending:
        for i, value in enumerate(values):
            sending.produce(topic, value, key=f"k{i}".encode(), headers=[("h", b"v")])
        assert sending.flush(60) == 0
    raw = stored_bytes(stores[store])
    assert len(raw) >= sum(sizes)
    for value in values:
        for at in (0, len(value) // 2, len(value) - 64):
            assert value[at : at + 64] not in raw, "plaintext found in the store"
    records = envelopes(consumer_config, topic, len(sizes))
    for record in records:
        envelope = decode_envelope(record.value())
        assert envelope.encryption is not None and envelope.encryption.key_id == "k1"
        assert len(record.value()) < 400 and record.headers()[-1] == envelope_header()
    consumer = HybridConsumer(consumer_config(), stores={store: stores[store]}, key_provider=RING)
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(sizes))
    consumer.close()
    assert not errors
    assert [sha(m.value()) for m in got] == [sha(v) for v in values]
    assert [(m.key(), m.headers()) for m in got] == [(f"k{i}".encode(), [("h", b"v")]) for i in range(len(values))]


@pytest.mark.parametrize("store", STORES)
def test_a_swapped_or_tampered_payload_is_a_typed_error_with_its_record_and_the_next_is_delivered(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str
) -> None:
    target = stores[store]
    with producer(kafka, stores, store) as sending:
        for i in range(3):
            sending.produce(topic, payload(300_000, i), key=f"genuine{i}".encode())
        assert sending.flush(60) == 0
    first, second, third = (decode_envelope(r.value()) for r in envelopes(consumer_config, topic, 3))
    # 1. the second record's sealed bytes copied over the first's, and an envelope with the first's
    #    locator and id but a size and digest that match them (a digest is no secret): only the
    #    AES-GCM binding to the record can tell
    stolen = target.get(second.locator, second.size)
    target.delete(first.locator)
    assert target.put(topic, first.message_id, stolen) == first.locator
    forged = Envelope.for_payload(
        stolen, store=store, locator=first.locator, message_id=first.message_id, encryption=second.encryption
    )
    # 2. one bit of the third record's sealed bytes flipped in place, and its envelope re-forged to
    #    the new digest: only the GCM tag can tell
    tampered = bytearray(target.get(third.locator, third.size))
    tampered[len(tampered) // 2] ^= 1
    target.delete(third.locator)
    assert target.put(topic, third.message_id, bytes(tampered)) == third.locator
    altered = Envelope.for_payload(
        bytes(tampered), store=store, locator=third.locator, message_id=third.message_id, encryption=third.encryption
    )
    produce_records(
        kafka.producer_config(),
        [
            {"topic": topic, "partition": 0, "key": b"forged", "value": encode_envelope(forged),
             "headers": [envelope_header()]},
            {"topic": topic, "partition": 0, "key": b"after-forged", "value": b"plain"},
            {"topic": topic, "partition": 0, "key": b"altered", "value": encode_envelope(altered),
             "headers": [envelope_header()]},
            {"topic": topic, "partition": 0, "key": b"after-altered", "value": b"plain"},
        ],
    )  # fmt: skip
    consumer = HybridConsumer(
        consumer_config(**{"enable.auto.commit": False}), stores={store: target}, key_provider=RING
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, errors = consume_all(consumer, 7)
    consumer.close()
    assert [m.key() for m in got] == [b"genuine1", b"after-forged", b"after-altered"]
    # genuine envelopes of changed bytes and re-forged envelopes alike: AES-GCM refuses them (a
    # PayloadAuthenticationError is a PayloadIntegrityError, so existing handlers catch it)
    assert [(type(e), e.kafka_message.key()) for e in errors] == [
        (PayloadAuthenticationError, b"genuine0"),
        (PayloadAuthenticationError, b"genuine2"),
        (PayloadAuthenticationError, b"forged"),
        (PayloadAuthenticationError, b"altered"),
    ]
    assert all(isinstance(e, PayloadIntegrityError) and "failed authentication" in str(e) for e in errors)


@pytest.mark.parametrize("store", STORES)
def test_rotation_keeps_old_payloads_readable_and_a_missing_key_is_a_typed_error(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str
) -> None:
    before, after = payload(250_000, 1), payload(250_000, 2)
    with producer(kafka, stores, store, keys=LocalKeyRing({"k1": K1}, "k1")) as old:
        old.produce(topic, before, key=b"before")
        assert old.flush(60) == 0
    with producer(kafka, stores, store, keys=LocalKeyRing({"k1": K1, "k2": K2}, "k2")) as rotated:
        rotated.produce(topic, after, key=b"after")
        assert rotated.flush(60) == 0
    assert [decode_envelope(r.value()).encryption.key_id for r in envelopes(consumer_config, topic, 2)] == ["k1", "k2"]  # type: ignore[union-attr]

    def read(keys: Any) -> tuple[list[Any], list[Any]]:
        consumer = HybridConsumer(
            consumer_config(**{"enable.auto.commit": False}), stores={store: stores[store]}, key_provider=keys
        )
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        try:
            return consume_all(consumer, 2)
        finally:
            consumer.close()

    got, errors = read(LocalKeyRing({"k1": K1, "k2": K2}, "k2"))
    assert not errors and [m.value() for m in got] == [before, after]
    got, errors = read(LocalKeyRing({"k2": K2}, "k2"))  # k1 retired too early
    assert [m.value() for m in got] == [after]
    assert [type(e) for e in errors] == [KeyUnavailableError] and "'k1'" in str(errors[0])
    assert errors[0].kafka_message.key() == b"before"
    got, errors = read(None)  # no key provider at all
    assert got == [] and [type(e) for e in errors] == [KeyUnavailableError] * 2


def test_kms_end_to_end_on_s3(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], s3_server: S3Server
) -> None:
    if s3_server.external:
        pytest.skip("KMS against moto only")
    kms_client = s3_server.kms_client()
    key = KmsKeyProvider(kms_client.create_key()["KeyMetadata"]["Arn"], client=kms_client)
    value = payload(2_000_000, 7)
    with producer(kafka, stores, "s3", keys=key) as sending:
        sending.produce(topic, value)
        assert sending.flush(60) == 0
    (record,) = envelopes(consumer_config, topic, 1)
    assert len(record.value()) < 700
    consumer = HybridConsumer(consumer_config(), stores={"s3": stores["s3"]}, key_provider=key)
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 1)
    consumer.close()
    assert not errors and got[0].value() == value


def test_gc_sweeps_encrypted_payloads_without_a_key(kafka: KafkaService, topic: str, stores: dict[str, Any]) -> None:
    from gateway.gc.sweeper import kafka_verifier, sweep

    store = stores["redis"]
    with producer(kafka, stores, "redis") as sending:
        sending.produce(topic, payload(300_000))
        assert sending.flush(60) == 0
    ((landed, _),) = list(store.list_locators())
    store.mark_pending(landed, 1)  # acknowledged, but the clear never happened
    orphan = store.put(topic, uuid.uuid4(), b"\0" * 1000, pending_since_ms=1)  # never got an envelope
    report = sweep({"redis": store}, grace_ms=0, verifier=kafka_verifier(kafka.client_conf()), dry_run=False)
    assert report.landed == [landed] and report.deleted == [orphan]


def test_a_store_that_cannot_name_its_locator_first_is_refused_at_construction(kafka: KafkaService) -> None:
    from gateway.errors import ConfigurationError
    from gateway.store import Store
    from gateway.testing import MemoryStore

    class Opaque(MemoryStore):
        def locator_for(self, topic: str, message_id: uuid.UUID, size: int) -> str | None:
            return Store.locator_for(self, topic, message_id, size)

    with pytest.raises(ConfigurationError, match="locator"):
        HybridProducer(
            {**kafka.producer_config(), "reference.encryption": "aes256-gcm"},
            stores={"mem": Opaque()},
            key_provider=RING,
        )


def test_the_aio_clients_seal_and_open(kafka: KafkaService, topic: str, stores: dict[str, Any]) -> None:
    import asyncio

    from gateway.aio import AIOHybridConsumer, AIOHybridProducer

    store = stores["redis"]
    value = payload(1_500_000, 3)

    async def main() -> None:
        conf = {**kafka.producer_config(), "reference.encryption": "aes256-gcm"}
        policy = SizeThresholdPolicy(reference_above=100_000, store="redis")
        async with AIOHybridProducer(conf, policy=policy, stores={"redis": store}, key_provider=RING) as sending:
            delivered = await sending.produce(topic, value, b"k")
            assert delivered.error() is None
        consumer = AIOHybridConsumer(
            {**kafka.consumer_config(), "enable.auto.commit": False}, stores={"redis": store}, key_provider=RING
        )
        await consumer.subscribe([topic])
        got: list[Any] = []
        for _ in range(60):
            got += await consumer.consume(10, 1.0)
            if got:
                break
        await consumer.close()
        assert [m.value() for m in got] == [value]

    asyncio.run(main())
    assert value[:64] not in stored_bytes(store)


@pytest.mark.parametrize("codec", ["zstd", "lz4", "gzip"])
@pytest.mark.parametrize("store", STORES)
def test_compressed_then_sealed_the_store_holds_fewer_bytes_of_ciphertext(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str, codec: str
) -> None:
    """Compression first (ciphertext does not compress), then sealing: the envelope declares the sealed bytes."""
    text = b"".join(
        b'{"order": %d, "sku": "A-%05d", "qty": %d, "note": "ok"},' % (i, i % 977, i % 13) for i in range(60_000)
    )
    values = [text, os.urandom(300_000)]  # JSON-like text, and random bytes that do not compress
    with producer(kafka, stores, store, **{"reference.compression": codec}) as sending:
        for i, value in enumerate(values):
            sending.produce(topic, value, key=f"k{i}".encode())
        assert sending.flush(60) == 0
    raw = stored_bytes(stores[store])
    assert len(raw) < len(text) // 3, f"{len(raw)} stored bytes: the text was not compressed before sealing"
    assert b'"sku": "A-' not in raw and values[1][:64] not in raw, "plaintext in the store"
    records = envelopes(consumer_config, topic, len(values))
    declared = [decode_envelope(r.value()) for r in records]
    assert all(e.encryption is not None for e in declared)
    assert [e.compression for e in declared] == [codec, None], "random bytes are stored (sealed) uncompressed"
    consumer = HybridConsumer(consumer_config(), stores={store: stores[store]}, key_provider=RING)
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(values))
    consumer.close()
    assert not errors and [sha(m.value()) for m in got] == [sha(v) for v in values]
    small = HybridConsumer(
        consumer_config(**{"reference.max.payload.bytes": len(text) // 2}),
        stores={store: stores[store]},
        key_provider=RING,
    )
    small.subscribe([topic])
    got, errors = consume_all(small, len(values))
    small.close()
    assert len(errors) == 1 and isinstance(errors[0], PayloadIntegrityError), errors  # decoded past its limit
    assert errors[0].kafka_message is not None and [m.value() for m in got] == [values[1]]
