"""A value larger than memory end to end: written by ``produce_stream``, read back as a ``PayloadStream``.

The two halves were built apart (the producer's part uploads, the consumer's ranged reads); here each
store reads what the other half wrote: Redis entries of the stream's part size (named by the locator,
not the store's ``entry_bytes``), an S3 multipart object, a GCS resumable upload, Azure blocks; clear
and sealed. A byte changed in the store behind a stream-written object raises by the stream's end,
and a sealed one hands out no byte of the tampered segment.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from typing import Any

import pytest

from gateway import HybridConsumer, HybridProducer, PayloadStream, SizeThresholdPolicy
from gateway.encryption import LocalKeyRing
from gateway.errors import PayloadStreamIntegrityError
from gateway.protocol.envelope import decode_envelope
from gateway.store import Store
from gateway.testing import KafkaService
from stores import AzureBlobStore, GCSStore, RedisStore, S3Store
from tests.helpers import consume_all, payload, sha
from tests.kafkautil import read_partition

MiB = 1024 * 1024
PART = 5 * MiB  # reference.stream.part.bytes' minimum
SIZE = 2 * PART + 12_345  # three parts, the last short
SEGMENT = 1 << 20  # the sealing's default segment
RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")


@pytest.fixture(params=["redis", "s3", "gcs", "azure"])
def store(request: pytest.FixtureRequest, s3_prefix: str) -> Store:
    kind = request.param
    if kind == "redis":
        # entry_bytes unlike the part size: a reader must take the entry size from the locator
        return RedisStore(request.getfixturevalue("redis_client"), prefix=f"gw{uuid.uuid4().hex[:6]}", entry_bytes=MiB)
    if kind == "s3":
        client, bucket = request.getfixturevalue("s3_client"), request.getfixturevalue("s3_bucket")
        return S3Store(client, bucket=bucket, prefix=s3_prefix, multipart_chunk_bytes=PART)
    if kind == "gcs":
        client, bucket = request.getfixturevalue("gcs_client"), request.getfixturevalue("gcs_bucket")
        return GCSStore(client, bucket=bucket, prefix=s3_prefix, part_bytes=PART)
    client, container = request.getfixturevalue("azure_client"), request.getfixturevalue("azure_container")
    return AzureBlobStore(client, container=container, prefix=s3_prefix, part_bytes=PART)


def stream_in(kafka: KafkaService, topic: str, store: Store, values: list[bytes], *, sealed: bool) -> None:
    conf: dict[str, Any] = {**kafka.producer_config(), "reference.stream.part.bytes": PART}
    if sealed:
        conf["reference.encryption"] = "aes256-gcm"
    with HybridProducer(
        conf,
        policy=SizeThresholdPolicy(reference_above=100_000, store=store.name),
        stores={store.name: store},
        key_provider=RING if sealed else None,
    ) as producer:
        for i, value in enumerate(values):
            producer.produce_stream(topic, io.BytesIO(value), len(value), key=f"k{i}".encode())
        assert producer.flush(60) == 0


def streams_out(consumer_config: Any, topic: str, store: Store, count: int) -> tuple[HybridConsumer, list[Any]]:
    reading = HybridConsumer(
        consumer_config(None, **{"value.stream.threshold.bytes": MiB, "value.stream.range.bytes": 3 * MiB // 2}),
        stores={store.name: store},
        key_provider=RING,
    )
    reading.subscribe([topic])
    got, errors = consume_all(reading, count, timeout=120)
    assert not errors, errors
    return reading, got


def digest_of_reads(stream: PayloadStream, step: int) -> str:
    out = hashlib.sha256()
    while part := stream.read(step):
        out.update(part)
    return out.hexdigest()


def flip_byte(store: Store, locator: str, at: int) -> None:
    """Change one stored byte with the store's raw client; the envelope stays as it was."""
    if isinstance(store, RedisStore):
        parsed = store.validate_locator(locator)
        key = parsed.keys(store.prefix)[at // parsed.entry_bytes]
        entry = bytearray(store.client.get(key))
        entry[at % parsed.entry_bytes] ^= 1
        store.client.set(key, bytes(entry))
        return
    assert isinstance(store, S3Store)
    key = store.validate_locator(locator).key
    body = bytearray(store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read())
    body[at] ^= 1
    store.client.put_object(Bucket=store.bucket, Key=key, Body=bytes(body))


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
def test_a_streamed_value_reads_back_as_a_stream(
    kafka: KafkaService, topic: str, consumer_config: Any, store: Store, sealed: bool
) -> None:
    values = [payload(SIZE, 1), payload(SIZE - 7, 2)]
    stream_in(kafka, topic, store, values, sealed=sealed)
    reading, got = streams_out(consumer_config, topic, store, len(values))
    try:
        first, second = (m.value() for m in got)
        assert isinstance(first, PayloadStream) and isinstance(second, PayloadStream)
        assert (first.size, second.size) == (SIZE, SIZE - 7)
        assert digest_of_reads(first, 999_999) == sha(values[0])
        second.seek(PART + 3)  # inside the second part
        assert second.read(10_000) == values[1][PART + 3 : PART + 10_003]
        second.seek(0)
        assert digest_of_reads(second, 1_234_567) == sha(values[1])
    finally:
        reading.close()


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
@pytest.mark.parametrize("store", ["redis", "s3"], indirect=True)
def test_a_byte_changed_behind_a_streamed_value_is_caught_by_the_reading_stream(
    kafka: KafkaService, topic: str, consumer_config: Any, store: Store, sealed: bool
) -> None:
    value = payload(SIZE, 3)
    stream_in(kafka, topic, store, [value], sealed=sealed)
    [record] = read_partition(consumer_config(), topic, 0, 1)
    envelope = decode_envelope(record.value())
    # clear: a byte of the second part; sealed: a byte of the sixth sealed segment
    at = PART + 100 if not sealed else 5 * (SEGMENT + 16) + 100
    flip_byte(store, envelope.locator, at)
    reading, [msg] = streams_out(consumer_config, topic, store, 1)
    try:
        stream = msg.value()
        assert isinstance(stream, PayloadStream)
        seen = bytearray()
        with pytest.raises(PayloadStreamIntegrityError):
            while part := stream.read(400_001):
                seen += part
            pytest.fail("the stream ended without an error")
        assert len(seen) < SIZE
        if sealed:
            assert bytes(seen) == value[: len(seen)] and len(seen) <= 5 * SEGMENT, "no byte of the tampered segment"
    finally:
        reading.close()
