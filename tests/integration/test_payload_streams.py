"""``value.stream.threshold.bytes`` end to end on every store: a large reference payload read as a stream.

For Redis, S3 (moto), GCS (fake-gcs-server) and Azure (Azurite), through Kafka: what the stream
reads equals what was produced (odd-sized reads, ``readinto``, seeks); a payload tampered with or
truncated in the store behind a good envelope raises :class:`PayloadStreamIntegrityError` no later
than its end (never ``b""`` first); a sealed one yields no byte of the tampered segment; a payload
below the threshold stays ``bytes``; commits are what they are for any message; closing the consumer
invalidates its streams.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from gateway import HybridConsumer, HybridProducer, PayloadStream, SizeThresholdPolicy
from gateway.encryption import LocalKeyRing
from gateway.errors import PayloadStreamClosedError, PayloadStreamIntegrityError
from gateway.protocol.envelope import decode_envelope
from gateway.store import Store
from gateway.testing import KafkaService
from stores import AzureBlobStore, GCSStore, RedisStore, S3Store
from stores.blob import BlobStore
from tests.helpers import consume_all, payload, sha
from tests.kafkautil import read_partition

STORES = ["redis", "s3", "gcs", "azure"]
RANGE = 64 * 1024
THRESHOLD = 1_000_000
BIG = 1_300_001  # 20 ranges and a bit: not a multiple of the range, nor of a Redis entry
RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")
SEGMENT = 1 << 20  # the sealing's default segment size


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, s3_prefix: str) -> Store:
    kind = request.param
    if kind == "redis":
        client = request.getfixturevalue("redis_client")
        return RedisStore(client, prefix=f"gw{uuid.uuid4().hex[:6]}", entry_bytes=256 * 1024)
    if kind == "s3":
        client, bucket = request.getfixturevalue("s3_client"), request.getfixturevalue("s3_bucket")
        return S3Store(client, bucket=bucket, prefix=s3_prefix)
    if kind == "gcs":
        client, bucket = request.getfixturevalue("gcs_client"), request.getfixturevalue("gcs_bucket")
        return GCSStore(client, bucket=bucket, prefix=s3_prefix)
    client, container = request.getfixturevalue("azure_client"), request.getfixturevalue("azure_container")
    return AzureBlobStore(client, container=container, prefix=s3_prefix)


def produce(kafka: KafkaService, topic: str, store: Store, values: list[bytes], *, sealed: bool = False) -> None:
    conf: dict[str, Any] = {**kafka.producer_config()}
    if sealed:
        conf["reference.encryption"] = "aes256-gcm"
    with HybridProducer(
        conf,
        policy=SizeThresholdPolicy(reference_above=0, store=store.name),
        stores={store.name: store},
        key_provider=RING if sealed else None,
    ) as producer:
        for i, value in enumerate(values):
            producer.produce(topic, value, key=f"k{i}".encode())
        assert producer.flush(60) == 0


def consumer(consumer_config: Any, store: Store, group: str | None = None, **conf: Any) -> HybridConsumer:
    settings = {"value.stream.threshold.bytes": THRESHOLD, "value.stream.range.bytes": RANGE, **conf}
    return HybridConsumer(consumer_config(group, **settings), stores={store.name: store}, key_provider=RING)


def stored(store: Store, locator: str, size: int) -> bytes:
    return store.get(locator, size)


def overwrite(store: Store, locator: str, data: bytes) -> None:
    """Replace the stored bytes behind ``locator`` with the store's raw client, envelope untouched."""
    if isinstance(store, RedisStore):
        parsed = store.validate_locator(locator)
        keys = parsed.keys(store.prefix)
        step = parsed.entry_bytes
        for i, key in enumerate(keys):
            part = data[i * step : (i + 1) * step]
            if part:
                store.client.set(key, part)
            else:
                store.client.delete(key)
        return
    assert isinstance(store, BlobStore)
    key = store.validate_locator(locator).key
    if isinstance(store, S3Store):
        store.client.put_object(Bucket=store.bucket, Key=key, Body=data)
    elif isinstance(store, GCSStore):
        store.backend.bucket.blob(key).upload_from_string(data)  # type: ignore[attr-defined]
    else:
        store.backend.put(key, memoryview(data), {}, large=False)


def read_in(stream: io.RawIOBase, step: int) -> bytes:
    out = hashlib.sha256()
    while True:
        part = stream.read(step)
        assert part is not None
        if not part:
            return out.hexdigest()  # type: ignore[return-value]
        out.update(part)


def test_a_large_payload_reads_as_a_stream_equal_to_what_was_produced_and_a_small_one_stays_bytes(
    kafka: KafkaService, topic: str, consumer_config: Any, store: Store
) -> None:
    big, small = payload(BIG, 1), payload(THRESHOLD - 1, 2)
    produce(kafka, topic, store, [big, small])
    reading = consumer(consumer_config, store)
    reading.subscribe([topic])
    got, errors = consume_all(reading, 2)
    try:
        assert not errors
        stream, plain = got[0].value(), got[1].value()
        assert isinstance(stream, PayloadStream) and stream.size == BIG and stream.seekable()
        assert isinstance(plain, bytes) and sha(plain) == sha(small)
        assert read_in(stream, 12_345) == sha(big)  # odd reads across ranges, the digest checked at the end
        assert stream.read(10) == b""
        stream.seek(0)
        buffer = bytearray(100_003)
        collected = bytearray()
        while n := stream.readinto(buffer):
            collected += buffer[:n]
        assert sha(collected) == sha(big)
        for at in (RANGE * 3 + 7, 5, BIG - 10):
            assert stream.seek(at) == at and stream.read(RANGE + 1) == big[at : at + RANGE + 1]
        assert stream.seek(-4, io.SEEK_END) == BIG - 4 and stream.read() == big[-4:]
        assert (stream.topic, stream.partition, stream.offset) == (topic, 0, got[0].offset())
    finally:
        reading.close()
    with pytest.raises(PayloadStreamClosedError):  # closing the consumer invalidated its stream
        stream.seek(0)
        stream.read(1)


def test_a_tampered_or_truncated_payload_raises_no_later_than_its_end(
    kafka: KafkaService, topic: str, consumer_config: Any, store: Store
) -> None:
    values = [payload(BIG, 3), payload(BIG, 4), payload(BIG, 5)]
    produce(kafka, topic, store, values)
    envelopes = [decode_envelope(r.value()) for r in read_partition(consumer_config(), topic, 0, 3)]
    tampered = bytearray(values[0])
    tampered[BIG // 2] ^= 1
    overwrite(store, envelopes[0].locator, bytes(tampered))
    overwrite(store, envelopes[1].locator, values[1][: BIG - 1000])  # truncated
    overwrite(store, envelopes[2].locator, values[2] + b"x")  # extended
    reading = consumer(consumer_config, store)
    reading.subscribe([topic])
    got, errors = consume_all(reading, 3)
    try:
        assert not errors and len(got) == 3
        for msg in got:
            stream = msg.value()
            assert isinstance(stream, PayloadStream)
            seen = 0
            with pytest.raises(PayloadStreamIntegrityError) as caught:
                while part := stream.read(50_001):
                    seen += len(part)
                pytest.fail("the stream ended without an error")
            assert seen < BIG
            assert (caught.value.topic, caught.value.partition, caught.value.offset) == (topic, 0, msg.offset())
            with pytest.raises(PayloadStreamIntegrityError):
                stream.read(1)  # the error stays
    finally:
        reading.close()


def test_a_sealed_payload_yields_no_byte_of_a_tampered_segment(
    kafka: KafkaService, topic: str, consumer_config: Any, store: Store
) -> None:
    value = payload(2 * SEGMENT + 12_345, 6)  # three sealed segments
    produce(kafka, topic, store, [value, value], sealed=True)
    first, _ = (decode_envelope(r.value()) for r in read_partition(consumer_config(), topic, 0, 2))
    sealed = bytearray(stored(store, first.locator, first.size))
    sealed[SEGMENT + 16 + 100] ^= 1  # a byte of the second segment's ciphertext
    overwrite(store, first.locator, bytes(sealed))
    reading = consumer(consumer_config, store)
    reading.subscribe([topic])
    got, errors = consume_all(reading, 2)
    try:
        assert not errors
        stream = got[0].value()
        assert isinstance(stream, PayloadStream) and stream.size == len(value)
        seen = bytearray()
        with pytest.raises(PayloadStreamIntegrityError):
            while part := stream.read(70_001):
                seen += part
        assert bytes(seen) == value[:SEGMENT]  # the first segment, authenticated; nothing of the second
        good = got[1].value()
        assert isinstance(good, PayloadStream)
        good.seek(SEGMENT + 5)  # lands inside a segment: opened from its start
        assert good.read(100) == value[SEGMENT + 5 : SEGMENT + 105]
        good.seek(0)
        assert read_in(good, 99_999) == sha(value)
    finally:
        reading.close()


def test_a_streamed_message_is_redelivered_only_when_not_committed(
    kafka: KafkaService, topic: str, consumer_config: Any, store: Store
) -> None:
    value = payload(BIG, 7)
    produce(kafka, topic, store, [value])
    group = f"g{uuid.uuid4().hex[:8]}"
    extra = {"enable.auto.commit": False, "auto.offset.reset": "earliest"}
    for commit in (False, True):
        reading = consumer(consumer_config, store, group, **extra)
        reading.subscribe([topic])
        got, errors = consume_all(reading, 1)
        assert not errors and len(got) == 1
        stream = got[0].value()
        assert isinstance(stream, PayloadStream) and read_in(stream, 1 << 20) == sha(value)
        if commit:
            reading.commit(got[0], asynchronous=False)
        reading.close()
    marker = payload(1000, 8)
    produce(kafka, topic, store, [marker])  # after the committed stream message: what a restart reads first
    reading = consumer(consumer_config, store, group, **extra)
    try:
        reading.subscribe([topic])
        got, errors = consume_all(reading, 1)
        assert not errors and [sha(m.value()) for m in got] == [sha(marker)]
        assert reading.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 1
    finally:
        reading.close()


def test_the_aio_consumer_hands_out_the_same_stream_read_off_the_event_loop(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: Any
) -> None:
    import asyncio

    from gateway.aio import AIOHybridConsumer

    store = RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}", entry_bytes=256 * 1024)
    value = payload(BIG, 9)
    produce(kafka, topic, store, [value])

    async def main() -> str:
        conf = consumer_config(None, **{"value.stream.threshold.bytes": THRESHOLD, "value.stream.range.bytes": RANGE})
        reading = AIOHybridConsumer(conf, stores={store.name: store})
        try:
            await reading.subscribe([topic])
            msg = None
            while msg is None or msg.error() is not None:
                msg = await reading.poll(0.5)
            stream = msg.value()
            assert isinstance(stream, PayloadStream)
            return await asyncio.to_thread(read_in, stream, 100_001)  # its reads block: off the loop
        finally:
            await reading.close()

    assert asyncio.run(main()) == sha(value)


def test_get_range_answers_parts_fewer_bytes_at_the_end_and_not_found_for_a_gone_payload(store: Store) -> None:
    from gateway.errors import PayloadNotFoundError

    value = payload(600_001, 10)  # three Redis entries of 256 KiB
    locator = store.put("ranges", uuid.uuid4(), value)
    assert store.reads_ranges
    edge = 256 * 1024
    for start, length in ((0, 10), (edge - 5, 10), (edge - 1, 2 * edge + 2), (0, 600_001), (600_000 - 4, 100)):
        assert store.get_range(locator, start, length) == value[start : start + length]
    assert store.get_range(locator, 600_001, 10) == b""
    store.delete(locator)
    with pytest.raises(PayloadNotFoundError):
        store.get_range(locator, 0, 10)


def test_get_range_into_receives_the_same_bytes_into_the_callers_buffer(store: Store) -> None:
    from gateway.errors import PayloadNotFoundError

    value = payload(600_001, 11)  # three Redis entries of 256 KiB
    locator = store.put("ranges", uuid.uuid4(), value)
    edge = 256 * 1024
    buffer = bytearray(2 * edge + 10)
    for start, length in ((0, 10), (edge - 5, 10), (edge - 1, 2 * edge + 2), (600_000 - 4, 100), (600_001, 10)):
        buffer[:] = bytes(len(buffer))
        got = store.get_range_into(locator, start, memoryview(buffer)[:length])
        assert got == len(value[start : start + length]) and bytes(buffer[:got]) == value[start : start + length]
        assert not any(buffer[got:length]), "nothing written past what came"
    store.delete(locator)
    with pytest.raises(PayloadNotFoundError):
        store.get_range_into(locator, 0, memoryview(buffer)[:10])
