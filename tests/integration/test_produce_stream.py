"""produce_stream end to end on real stores (Redis, S3 on moto) and Kafka: what a HybridConsumer reads equals the
source byte for byte, and a source or store that fails leaves no object and no record.

Parts are 5 MiB (``reference.stream.part.bytes``'s minimum), so sizes of a few MiB span several parts
and Redis entries; one size is not a multiple of the part size, one is 0 bytes.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import KafkaError

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.encryption import LocalKeyRing
from gateway.errors import StreamRouteError, StreamSizeError, StreamSourceError, StreamUploadError
from gateway.protocol.envelope import decode_envelope
from gateway.testing import KafkaService
from stores import RedisStore, S3Store
from stores.redis import _io
from tests.helpers import consume_all, payload, random_payload, sha
from tests.kafkautil import read_partition

MiB = 1024 * 1024
PART = 5 * MiB
RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")
STORES = ["redis", "s3"]
MODES = ["plain", "zstd", "sealed"]


@pytest.fixture
def stores(redis_client: redis.Redis, s3_client: Any, s3_bucket: str, s3_prefix: str) -> dict[str, Any]:
    return {
        "redis": RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}", entry_bytes=3 * MiB),
        "s3": S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix, multipart_chunk_bytes=PART),
    }


def producer(
    kafka: KafkaService, stores: dict[str, Any], store: str, mode: str = "plain", **conf: Any
) -> HybridProducer:
    extra: dict[str, Any] = {"reference.stream.part.bytes": PART, **conf}
    if mode == "zstd":
        extra["reference.compression"] = "zstd"
    if mode == "sealed":
        extra["reference.encryption"] = "aes256-gcm"
    return HybridProducer(
        {**kafka.producer_config(), **extra},
        policy=SizeThresholdPolicy(reference_above=100_000, store=store),
        stores={store: stores[store]},
        key_provider=RING if mode == "sealed" else None,
    )


def leftovers(store: Any) -> list[Any]:
    """Everything the store holds under its prefix: data, marks, index entries, and (S3) incomplete uploads."""
    if isinstance(store, RedisStore):
        client = store.client
        keys = [k for k in client.scan_iter(match=f"{store.prefix}:*", count=1000)]
        return [k for k in keys if client.type(k) == b"string" or client.zcard(k)]
    listing = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix).get("Contents", [])
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix).get("Uploads", [])
    return [o["Key"] for o in listing if not o["Key"].endswith(".batch")] + [u["Key"] for u in uploads]


def chunks_of(data: bytes, step: int) -> Iterator[bytes]:
    for at in range(0, len(data), step):
        yield data[at : at + step]


def consume(consumer_config: Any, topic: str, stores: dict[str, Any], count: int, mode: str) -> list[Any]:
    consumer = HybridConsumer(consumer_config(), stores=stores, key_provider=RING if mode == "sealed" else None)
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, count, timeout=120)
    consumer.close()
    assert not errors, errors
    return got


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("store", STORES)
def test_a_stream_reads_back_byte_for_byte(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str, mode: str
) -> None:
    """File and iterator sources; several parts, a size that is no multiple of the part, one part, 0 bytes."""
    sizes = [2 * PART + 12_345, PART, 300_000, 0]
    values = [payload(size, i) for i, size in enumerate(sizes)]
    reports: list[Any] = []
    with producer(kafka, stores, store, mode) as sending:
        for i, value in enumerate(values):
            source: Any = io.BytesIO(value) if i % 2 == 0 else chunks_of(value, 777_777)
            sending.produce_stream(
                topic, source, len(value), key=f"k{i}".encode(), headers=[("h", b"v")], route=f"reference:{store}",
                on_delivery=lambda err, msg: reports.append((err, msg.key())),
            )  # fmt: skip
        assert sending.flush(60) == 0
    assert reports == [(None, f"k{i}".encode()) for i in range(len(values))]
    raw = read_partition(consumer_config(), topic, 0, len(values))
    envelopes = [decode_envelope(r.value()) for r in raw]
    assert all(e.store == store for e in envelopes)
    if mode == "zstd":
        assert [e.compression for e in envelopes[:3]] == ["zstd"] * 3, "the pattern compresses: stored zstd"
    if mode == "sealed":
        assert all(e.encryption is not None for e in envelopes)
    got = consume(consumer_config, topic, stores, len(values), mode)
    assert [sha(m.value()) for m in got] == [sha(v) for v in values]
    assert [m.key() for m in got] == [f"k{i}".encode() for i in range(len(values))]
    assert stores[store].list_pending(2**62) == [], "acknowledged: no pending marks"


@pytest.mark.parametrize("store", STORES)
def test_incompressible_stream_is_stored_as_is(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str
) -> None:
    value = random_payload(PART + 1000)
    with producer(kafka, stores, store, "zstd") as sending:
        sending.produce_stream(topic, io.BytesIO(value), len(value), route=f"reference:{store}")
        assert sending.flush(60) == 0
        assert sending.metrics()["compression.skipped"] == 1
    [record] = read_partition(consumer_config(), topic, 0, 1)
    assert decode_envelope(record.value()).compression is None, "decided on the first chunk"
    [got] = consume(consumer_config, topic, stores, 1, "zstd")
    assert sha(got.value()) == sha(value)


class Raising(io.RawIOBase):
    """A file that fails after ``fail_after`` bytes."""

    def __init__(self, data: bytes, fail_after: int) -> None:
        self._data, self._pos, self._fail_after = data, 0, fail_after

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._pos >= self._fail_after:
            raise OSError("disk went away")
        n = min(len(buffer), len(self._data) - self._pos, self._fail_after - self._pos + 1)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


FAILURES = {
    "short": (lambda v: io.BytesIO(v[:-1]), StreamSizeError),
    "long": (lambda v: chunks_of(v + b"x", PART), StreamSizeError),
    "long-file": (lambda v: io.BytesIO(v + b"x"), StreamSizeError),
    "raising": (lambda v: Raising(v, 2 * PART), StreamSourceError),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest.mark.parametrize("mode", ["plain", "sealed"])
@pytest.mark.parametrize("store", STORES)
def test_a_failing_source_leaves_nothing(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str, mode: str,
    failure: str,
) -> None:  # fmt: skip
    value = payload(3 * PART + 5)
    make, error = FAILURES[failure]
    with producer(kafka, stores, store, mode) as sending:
        with pytest.raises(error) as raised:
            sending.produce_stream(topic, make(value), len(value), key=b"the-key", route=f"reference:{store}")
        assert raised.value.topic == topic and raised.value.key == b"the-key"
        sending.produce(topic, b"after", key=b"next")  # the topic's only record: nothing of the stream was sent
        assert sending.flush(30) == 0
    assert leftovers(stores[store]) == [], "no object, no entry, no mark, no incomplete upload"
    [record] = read_partition(consumer_config(), topic, 0, 1)
    assert record.key() == b"next"


@pytest.mark.parametrize("store", STORES)
def test_a_store_failing_mid_upload_aborts_it(
    kafka: KafkaService, topic: str, stores: dict[str, Any], store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = stores[store]
    calls = {"n": 0}
    if store == "redis":
        original = target._write

        def failing(commands: Any) -> None:
            if any(c[0] == "APPEND" or (c[0] == "SET" and len(c[2]) > 0) for c in commands):
                calls["n"] += 1
                if calls["n"] == 3:
                    raise redis.ConnectionError("server gone")
            original(commands)

        def mapped(commands: Any) -> None:
            _io.mapped_errors(target._metrics, lambda: failing(commands))

        monkeypatch.setattr(target, "_write", mapped)
    else:
        original_part = target.s3.client.upload_part

        def failing_part(**kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 2:
                raise ConnectionError("endpoint gone")
            return original_part(**kwargs)

        monkeypatch.setattr(target.s3.client, "upload_part", failing_part)
    value = payload(3 * PART)
    with producer(kafka, stores, store) as sending:
        with pytest.raises(StreamUploadError) as raised:
            sending.produce_stream(topic, io.BytesIO(value), len(value), key=b"k", route=f"reference:{store}")
        assert raised.value.topic == topic and raised.value.key == b"k"
    monkeypatch.undo()
    assert leftovers(target) == [], "the upload was aborted and the mark removed"


@pytest.mark.requires("topic_configs_enforced")
@pytest.mark.parametrize("store", STORES)
def test_a_refused_envelope_deletes_the_streamed_payload(
    kafka: KafkaService, stores: dict[str, Any], store: str
) -> None:
    """The broker refuses the envelope (the topic's max.message.bytes): the payload is rolled back, as for produce."""
    name = f"tiny-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(name, config={"max.message.bytes": "100"})
    errors: list[Any] = []
    try:
        with producer(kafka, stores, store) as sending:
            value = payload(PART + 3)
            sending.produce_stream(
                name, io.BytesIO(value), len(value), route=f"reference:{store}",
                on_delivery=lambda err, msg: errors.append(err),
            )  # fmt: skip
            sending.flush(30)
            assert sending.metrics()["rollbacks"] == 1
    finally:
        kafka.delete_topic(name)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert leftovers(stores[store]) == []


@pytest.mark.parametrize("store", STORES)
def test_an_envelope_that_cannot_be_queued_deletes_the_streamed_payload(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """librdkafka refuses the envelope at once (a full queue): the payload goes before the error reaches the caller."""
    with producer(kafka, stores, store) as sending:

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise BufferError("Local: Queue full")

        monkeypatch.setattr(sending._references._outcomes, "_send", refuse)
        value = payload(2 * PART + 1)
        with pytest.raises(BufferError):
            sending.produce_stream(topic, io.BytesIO(value), len(value), route=f"reference:{store}")
        assert sending.metrics()["rollbacks"] == 1
        monkeypatch.undo()
        sending.produce(topic, b"after", key=b"next")
        assert sending.flush(30) == 0
    assert leftovers(stores[store]) == []
    [record] = read_partition(consumer_config(), topic, 0, 1)
    assert record.key() == b"next"


def test_routes_by_declared_size(kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any]) -> None:
    """Small streams go plain or chunked (read into memory, within the bound); forced chunked above it is refused."""
    conf = {"large.message.max.bytes": 4_000_000}
    small, middle = payload(50_000), payload(1_000_000)
    with HybridProducer(
        {**kafka.producer_config(), **conf},
        policy=SizeThresholdPolicy(reference_above=10_000_000, store="redis"),
        stores={"redis": stores["redis"]},
    ) as sending:
        sending.produce_stream(topic, io.BytesIO(small), len(small))
        sending.produce_stream(topic, chunks_of(middle, 100_000), len(middle))
        with pytest.raises(StreamRouteError):
            sending.produce_stream(topic, io.BytesIO(b""), 5_000_000, route="chunked")
        with pytest.raises(StreamSizeError):
            sending.produce_stream(topic, io.BytesIO(small), len(small) + 1)
        assert sending.flush(30) == 0
        metrics = sending.metrics()
    assert metrics["plain.messages"] == 1 and metrics["chunked.messages"] == 1
    got = consume(consumer_config, topic, stores, 2, "plain")
    assert [sha(m.value()) for m in got] == [sha(small), sha(middle)]


# -- GCS (fake-gcs-server) and Azure (Azurite) -----------------------------------------------------
@pytest.fixture(params=["gcs", "azure"])
def cloud_store(request: pytest.FixtureRequest, s3_prefix: str) -> Any:
    from stores import AzureBlobStore, GCSStore

    if request.param == "gcs":
        client, bucket = request.getfixturevalue("gcs_client"), request.getfixturevalue("gcs_bucket")
        return GCSStore(client, bucket=bucket, prefix=s3_prefix, part_bytes=PART)
    client, container = request.getfixturevalue("azure_client"), request.getfixturevalue("azure_container")
    return AzureBlobStore(client, container=container, prefix=s3_prefix, part_bytes=PART)


def cloud_objects(store: Any) -> list[str]:
    return [e.key for e in store.backend.list(store.prefix) if not e.key.endswith(".batch")]


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_reads_back_from_gcs_and_azure(
    kafka: KafkaService, topic: str, consumer_config: Any, cloud_store: Any, mode: str
) -> None:
    stores = {cloud_store.name: cloud_store}
    sizes = [2 * PART + 12_345, 300_000, 0]
    values = [payload(size, i) for i, size in enumerate(sizes)]
    with producer(kafka, stores, cloud_store.name, mode) as sending:
        for i, value in enumerate(values):
            source: Any = io.BytesIO(value) if i % 2 == 0 else chunks_of(value, 777_777)
            route = f"reference:{cloud_store.name}"
            sending.produce_stream(topic, source, len(value), key=f"k{i}".encode(), route=route)
        assert sending.flush(60) == 0
    got = consume(consumer_config, topic, stores, len(values), mode)
    assert [sha(m.value()) for m in got] == [sha(v) for v in values]
    assert cloud_store.list_pending(2**62) == []
    assert len(cloud_objects(cloud_store)) == len(values)


@pytest.mark.parametrize("failure", ["short", "raising"])
def test_a_failing_source_leaves_nothing_in_gcs_and_azure(
    kafka: KafkaService, topic: str, consumer_config: Any, cloud_store: Any, failure: str
) -> None:
    stores = {cloud_store.name: cloud_store}
    value = payload(3 * PART + 5)
    make, error = FAILURES[failure]
    with producer(kafka, stores, cloud_store.name) as sending:
        with pytest.raises(error):
            sending.produce_stream(topic, make(value), len(value), key=b"k", route=f"reference:{cloud_store.name}")
        sending.produce(topic, b"after", key=b"next")
        assert sending.flush(30) == 0
    assert cloud_objects(cloud_store) == [], "no object, no mark"
    [record] = read_partition(consumer_config(), topic, 0, 1)
    assert record.key() == b"next"
