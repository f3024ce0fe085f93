"""What is measured: the gateway's routes and, beside them, the baselines they are judged against.

Every variant is built in two steps. The builder creates the clients, connects them and prepares
whatever must exist before the clock starts (pre-built segment records, for instance); the ``run``
it returns is the only part that is timed. Every variant moves the same payloads, and MB/s is
always payload bytes (10^6 bytes/s), so any ratio between two variants is a ratio of times.

Produce side (``run`` ends when every record is acknowledged):

==================== ===========================================================================
``raw.record``        what users do instead: raw confluent-kafka, each payload ONE record, size
                      limits raised on producer (``message.max.bytes``) and consumer
``raw.segments``      the client ceiling for chunking: raw confluent-kafka sending the LinkedIn
                      segment records of the same payloads, built before the clock starts
``chunked``           ``HybridProducer`` with ``route="chunked"``
``redis.raw``         the store ceiling: redis-py ``SET`` of each payload, nothing else
``redis.raw+env``     the Redis route's ceiling: ``SET`` then a raw produce of an envelope-sized record
``redis``             ``HybridProducer`` with ``route="reference:redis"`` (``RedisStore``) and
                      ``reference.write.window=8``: up to 8 writes in flight on one connection
``s3.raw``            boto3 ``put_object`` of each payload
``s3.raw+env``        ``put_object`` then a raw envelope-sized produce
``s3``                ``HybridProducer`` with ``route="reference:s3"`` (``S3Store``)
``gcs.raw``,          google-cloud-storage ``upload_from_string`` of each payload, then (``+env``)
``gcs.raw+env``       a raw envelope-sized produce; ``gcs``: ``route="reference:gcs"`` (``GCSStore``)
``azure.raw``,        azure-storage-blob ``upload_blob`` of each payload, then (``+env``) a raw
``azure.raw+env``     envelope-sized produce; ``azure``: ``route="reference:azure"`` (``AzureBlobStore``)
==================== ===========================================================================

The GCS and Azure variants run in ``gateway bench --suite clouds`` (:mod:`benchmarks.clouds`), on the
emulators, beside the Redis and S3 routes; the routes suite measures the others.

The consume side of each variant reads back what its produce side wrote: raw consumers count raw
records (the segments consumer does not reassemble), store baselines ``GET``/``get_object`` each
key (after reading the envelope record, for ``+env``), and the gateway variants read whole
messages from ``HybridConsumer.poll``.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.protocol import split
from gateway.protocol.envelope import Envelope, encode_envelope
from gateway.protocol.headers import encode_timestamp
from gateway.testing import KafkaService, RedisServer, S3Server
from stores import AzureBlobStore, GCSStore, RedisStore, S3Store, Store

SEGMENT = 800_000
"""LinkedIn's default ``max.message.segment.bytes``."""
CHUNK_MESSAGE_MAX = 1_000_000
"""``message.max.bytes`` of the chunked producers: a real broker's default limit."""
RAISED_MESSAGE_MAX = 1_000_000_000
"""What users raise ``message.max.bytes`` to instead (librdkafka's maximum)."""

PRODUCER_CONF: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "acks": "all",
    "log.connection.close": False,
}
CONSUMER_CONF: dict[str, Any] = {
    "enable.auto.commit": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 10_485_760,
    "fetch.wait.max.ms": 10,
    "receive.message.max.bytes": 400_000_000,
    "log.connection.close": False,
}
RAISED_CONSUMER: dict[str, Any] = {"fetch.max.bytes": 200_000_000, "max.partition.fetch.bytes": 200_000_000}
HYBRID_CONSUMER: dict[str, Any] = {"message.assembler.buffer.capacity": 256_000_000}
RAW_TOPIC_CONFIG = {"max.message.bytes": "300000000"}
"""Topic config for ``raw.record`` topics: brokers that enforce limits (noida, real Kafka) need it."""

STALL_SECONDS = 60.0

PRODUCE_VARIANTS = (
    "raw.record",
    "raw.segments",
    "chunked",
    "redis.raw",
    "redis.raw+env",
    "redis",
    "s3.raw",
    "s3.raw+env",
    "s3",
)
CONSUME_VARIANTS = PRODUCE_VARIANTS
KAFKA_VARIANTS = frozenset(v for v in PRODUCE_VARIANTS if v not in ("redis.raw", "s3.raw"))
CEILING = {"chunked": "raw.segments", "redis": "redis.raw+env", "s3": "s3.raw+env"}
"""Each route and the baseline that bounds it."""
CLOUD_CEILING = {"redis": "redis.raw+env", "s3": "s3.raw+env", "gcs": "gcs.raw+env", "azure": "azure.raw+env"}
"""The four reference routes of ``gateway bench --suite clouds``, each with its ceiling."""
REFERENCE_KINDS = ("redis", "s3", "gcs", "azure")
LABELS = {
    "raw.record": "raw, one big record (limits raised)",
    "raw.segments": "raw, pre-built segments (client ceiling)",
    "chunked": "gateway: chunked",
    "redis.raw": "redis-py SET/GET only (store ceiling)",
    "redis.raw+env": "SET + raw envelope record (Redis ceiling)",
    "redis": "gateway: reference via Redis (write window 8)",
    "s3.raw": "boto3 put/get_object only (store ceiling)",
    "s3.raw+env": "put_object + raw envelope record (S3 ceiling)",
    "s3": "gateway: reference via S3",
    "gcs.raw": "google-cloud-storage upload/download only (store ceiling)",
    "gcs.raw+env": "upload + raw envelope record (GCS ceiling)",
    "gcs": "gateway: reference via GCS",
    "azure.raw": "azure-storage-blob upload/download only (store ceiling)",
    "azure.raw+env": "upload + raw envelope record (Azure ceiling)",
    "azure": "gateway: reference via Azure Blob",
}


@dataclass
class Services:
    """The running servers and the shared store clients."""

    kafka: KafkaService
    redis_server: RedisServer
    s3_server: S3Server
    bucket: str
    redis_prefix: str = "bench"
    s3_prefix: str = "bench/"
    gcs_server: Any = None
    """A :class:`gateway.testing.GCSServer` (``--suite clouds`` only), its bucket, and Azurite and its container."""
    gcs_bucket: str = ""
    azure_server: Any = None
    azure_container: str = ""
    _redis: redis.Redis | None = None
    _s3: Any = None
    _gcs: Any = None
    _azure: Any = None

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = self.redis_server.client()
        return self._redis

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            self._s3 = self.s3_server.client(max_pool_connections=16)
        return self._s3

    @property
    def gcs(self) -> Any:
        """The google-cloud-storage bucket handle of the GCS variants (one client, as the store's)."""
        if self._gcs is None:
            self._gcs = self.gcs_server.client().bucket(self.gcs_bucket)
        return self._gcs

    @property
    def azure(self) -> Any:
        """The azure-storage-blob container client of the Azure variants."""
        if self._azure is None:
            self._azure = self.azure_server.client().get_container_client(self.azure_container)
        return self._azure

    def redis_store(self) -> RedisStore:
        return RedisStore(self.redis, prefix=self.redis_prefix)

    def s3_store(self) -> S3Store:
        return S3Store(self.s3, bucket=self.bucket, prefix=self.s3_prefix)

    def gcs_store(self) -> GCSStore:
        return GCSStore(self.gcs.client, bucket=self.gcs_bucket, prefix=self.s3_prefix)

    def azure_store(self) -> AzureBlobStore:
        return AzureBlobStore(self.azure_server.client(), container=self.azure_container, prefix=self.s3_prefix)

    def store(self, kind: str) -> Store:
        """The gateway's store of a reference route, a fresh one per client as an application would make."""
        makers: dict[str, Callable[[], Store]] = {
            "redis": self.redis_store,
            "s3": self.s3_store,
            "gcs": self.gcs_store,
            "azure": self.azure_store,
        }
        return makers[kind]()

    def producer_conf(self, **extra: Any) -> dict[str, Any]:
        return self.kafka.client_conf(**{**PRODUCER_CONF, **extra})

    def consumer_conf(self, **extra: Any) -> dict[str, Any]:
        conf = self.kafka.client_conf(**CONSUMER_CONF)
        defaults = dict(self.kafka.consumer_defaults)
        receive = max(int(conf["receive.message.max.bytes"]), int(defaults.pop("receive.message.max.bytes", 0)))
        conf.update(defaults)
        conf.update(extra)
        conf["receive.message.max.bytes"] = max(receive, int(conf["receive.message.max.bytes"]))
        conf["group.id"] = f"bench-{uuid.uuid4().hex[:10]}"
        return conf

    def clear_stores(self) -> None:
        """Free what the stores hold between repetitions (the servers keep everything in memory).

        Only this run's keys go: an external Redis or bucket may hold other data.
        """
        names = list(self.redis.scan_iter(match=f"{self.redis_prefix}*", count=1000))
        for i in range(0, len(names), 1000):
            self.redis.unlink(*names[i : i + 1000])
        keys: list[dict[str, str]] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.s3_prefix):
            keys.extend({"Key": obj["Key"]} for obj in page.get("Contents", []))
        for i in range(0, len(keys), 1000):
            self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True})
        if self.gcs_server is not None:
            for blob in list(self.gcs.list_blobs(prefix=self.s3_prefix)):
                blob.delete()
        if self.azure_server is not None:
            for name in list(self.azure.list_blob_names(name_starts_with=self.s3_prefix)):
                self.azure.delete_blob(name)


@dataclass
class Work:
    """The payloads of one workload, with their keys; segment records are built on first use."""

    label: str
    values: list[bytes]
    keys: list[bytes]
    _segments: list[dict[str, Any]] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, label: str, values: list[bytes]) -> Work:
        return cls(label, values, [f"k{i:07d}".encode() for i in range(len(values))])

    def head(self, count: int) -> Work:
        """The first ``count`` payloads (all of them when there are fewer)."""
        if count >= len(self.values):
            return self
        return Work(self.label, self.values[:count], self.keys[:count])

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.values)

    @property
    def count(self) -> int:
        return len(self.values)

    def segments(self) -> list[dict[str, Any]]:
        """LinkedIn segment records of every payload, as ``HybridProducer`` would write them."""
        if self._segments is None:
            records: list[dict[str, Any]] = []
            for key, value in zip(self.keys, self.values, strict=True):
                ts = int(time.time() * 1000)
                parts = split("bench", 0, ts, uuid.uuid4(), key, value, SEGMENT, [("_t", encode_timestamp(ts))])
                records.extend(
                    {
                        "value": bytes(r.value or b""),
                        "key": r.key,
                        "partition": 0,
                        "headers": r.headers,
                        "timestamp": r.timestamp or 0,
                    }
                    for r in parts
                )
            self._segments = records
        return self._segments

    def drop_segments(self) -> None:
        self._segments = None


@dataclass
class Outcome:
    moved: int
    messages: int
    kafka_bytes: int = 0
    store_bytes: int = 0


@dataclass
class Job:
    run: Callable[[], Outcome]
    close: Callable[[], None] = lambda: None


class StallError(RuntimeError):
    """Nothing arrived for :data:`STALL_SECONDS`: a lost record or a wedged server."""


def _produce(producer: Any, topic: str, **kwargs: Any) -> None:
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.01)


def _flush(producer: Any) -> None:
    left = producer.flush(300)
    if left:
        raise RuntimeError(f"{left} messages still undelivered after 300 s")


def envelope_size(store: str, locator: str, size: int) -> int:
    """The length of the envelope the gateway would write, so the ``+env`` baselines send as much."""
    return len(encode_envelope(Envelope(store, locator, size, b"\0" * 32, uuid.uuid4())))


def raw_names(svc: Services, store: str, topic: str, count: int) -> list[str]:
    """Keys of the raw store baselines, under this run's prefix so that clearing finds them."""
    if store == "redis":
        return [f"{svc.redis_prefix}raw:{topic}:{i}" for i in range(count)]
    return [f"{svc.s3_prefix}raw/{topic}/{i}" for i in range(count)]  # S3, GCS and Azure: one prefix each run


def _padded(name: str, length: int) -> bytes:
    raw = name.encode()
    return raw + b" " * max(0, length - len(raw))


def _warm(client: Any, topic: str) -> None:
    """A metadata round trip so that connecting is not part of the timed run.

    A gateway producer also learns the topic's cleanup.policy (``prepare_topics``): a one-time
    lookup per topic that its first reference or multi-segment message would otherwise wait for.
    """
    prepare = getattr(client, "prepare_topics", None)
    if prepare is not None:
        prepare([topic])
    else:
        client.list_topics(topic, timeout=10)


# -- produce -----------------------------------------------------------------------------------


def _envelope_producer(svc: Services, topic: str) -> Producer:
    producer = Producer(svc.producer_conf(**{"message.max.bytes": CHUNK_MESSAGE_MAX}))
    _warm(producer, topic)
    return producer


def hybrid_policy(kind: str) -> SizeThresholdPolicy:
    """The policy used for mixes: plain up to the segment size, then the route's way."""
    if kind == "chunked":
        return SizeThresholdPolicy()
    return SizeThresholdPolicy(reference_above=SEGMENT, store=kind)


REDIS_WRITE_WINDOW = 8
"""``reference.write.window`` of the gateway's Redis producer: side by side at 100 KB, 4 and 8 gave the same."""


def hybrid_producer(svc: Services, kind: str, *, linger_ms: int | None = None) -> HybridProducer:
    extra: dict[str, Any] = {
        "message.max.bytes": CHUNK_MESSAGE_MAX,
        "max.message.segment.bytes": SEGMENT,
        "large.message.max.bytes": HYBRID_CONSUMER["message.assembler.buffer.capacity"],
    }
    if linger_ms is not None:
        extra["linger.ms"] = linger_ms
    stores: dict[str, Any] = {}
    if kind in REFERENCE_KINDS:
        stores[kind] = svc.store(kind)
    if kind == "redis":
        extra["reference.write.window"] = REDIS_WRITE_WINDOW
    return HybridProducer(svc.producer_conf(**extra), policy=hybrid_policy(kind), stores=stores)


def produce_job(svc: Services, variant: str, topic: str, work: Work, *, forced: bool = True) -> Job:
    """``forced``: every message takes the variant's route; otherwise the size policy picks (mixes)."""
    values, keys = work.values, work.keys
    moved = work.total
    if variant == "raw.record":
        producer = Producer(svc.producer_conf(**{"message.max.bytes": RAISED_MESSAGE_MAX}))
        _warm(producer, topic)

        def run_record() -> Outcome:
            for key, value in zip(keys, values, strict=True):
                _produce(producer, topic, value=value, key=key, partition=0)
            _flush(producer)
            return Outcome(moved, len(values), kafka_bytes=moved + sum(map(len, keys)))

        return Job(run_record)
    if variant == "raw.segments":
        records = work.segments()
        producer = Producer(svc.producer_conf(**{"message.max.bytes": CHUNK_MESSAGE_MAX}))
        _warm(producer, topic)

        def run_segments() -> Outcome:
            for rec in records:
                _produce(producer, topic, **rec)
            _flush(producer)
            return Outcome(moved, len(values), kafka_bytes=sum(len(r["value"]) + len(r["key"]) for r in records))

        return Job(run_segments)
    if variant == "chunked" or variant in REFERENCE_KINDS:
        hybrid = hybrid_producer(svc, variant)
        _warm(hybrid, topic)
        route = ("chunked" if variant == "chunked" else f"reference:{variant}") if forced else None
        stores = list(hybrid.stores.values())

        def run_hybrid() -> Outcome:
            for key, value in zip(keys, values, strict=True):
                hybrid.produce(topic, value, key=key, partition=0, route=route)
            _flush(hybrid)
            metrics = hybrid.metrics()
            kafka = sum(v for k, v in metrics.items() if k.endswith(".kafka.bytes"))
            stored = sum(int(s.metrics()["bytes_written"]) for s in stores)
            return Outcome(moved, len(values), kafka_bytes=kafka, store_bytes=stored)

        return Job(run_hybrid)
    if variant in ("redis.raw", "redis.raw+env"):
        client = svc.redis
        store = RedisStore(client, prefix=svc.redis_prefix)
        length = envelope_size("redis", store.locator_for(topic, uuid.uuid4(), max(map(len, values))), 0)
        return _raw_writes_job(svc, variant, topic, work, client.set, length)
    if variant in ("s3.raw", "s3.raw+env"):
        s3 = svc.s3
        length = envelope_size("s3", svc.s3_store().locator_for(topic, uuid.uuid4()), 0)
        return _raw_writes_job(
            svc,
            variant,
            topic,
            work,
            lambda name, value: s3.put_object(Bucket=svc.bucket, Key=name, Body=value),
            length,
        )
    if variant in ("gcs.raw", "gcs.raw+env", "azure.raw", "azure.raw+env"):
        kind = variant.partition(".")[0]
        blob_store = svc.gcs_store() if kind == "gcs" else svc.azure_store()
        length = envelope_size(kind, blob_store.locator_for(topic, uuid.uuid4()), 0)
        return _raw_writes_job(svc, variant, topic, work, _blob_put(svc, kind), length)
    raise ValueError(f"unknown variant {variant!r}")


def _blob_put(svc: Services, kind: str) -> Callable[[str, bytes], None]:
    """One SDK call per payload, each SDK's plain upload: what an application writes without the gateway."""
    if kind == "gcs":
        bucket = svc.gcs
        return lambda name, value: bucket.blob(name).upload_from_string(value)
    container = svc.azure
    return lambda name, value: container.upload_blob(name, value, overwrite=True)


def _blob_get(svc: Services, kind: str) -> Callable[[str], bytes]:
    if kind == "gcs":
        bucket = svc.gcs
        return lambda name: bytes(bucket.blob(name).download_as_bytes())
    container = svc.azure
    return lambda name: bytes(container.download_blob(name).readall())


def _raw_writes_job(
    svc: Services, variant: str, topic: str, work: Work, put: Callable[[str, bytes], object], length: int
) -> Job:
    """A store's ceiling: one raw write per payload, then (``+env``) a record of an envelope's size naming it."""
    kind = variant.partition(".")[0]
    values, keys = work.values, work.keys
    names = raw_names(svc, kind, topic, len(values))
    env_producer = _envelope_producer(svc, topic) if variant.endswith("+env") else None

    def run_raw_writes() -> Outcome:
        kafka = 0
        for name, key, value in zip(names, keys, values, strict=True):
            put(name, value)
            if env_producer is not None:
                record = _padded(name, length)
                _produce(env_producer, topic, value=record, key=key, partition=0)
                kafka += len(record) + len(key)
        if env_producer is not None:
            _flush(env_producer)
        return Outcome(work.total, len(values), kafka_bytes=kafka, store_bytes=work.total)

    return Job(run_raw_writes)


# -- consume -----------------------------------------------------------------------------------


def _raw_consumer(svc: Services, topic: str, raised: bool = False) -> Any:
    consumer = Consumer(svc.consumer_conf(**(RAISED_CONSUMER if raised else {})))
    _warm(consumer, topic)
    return consumer


def _drain_raw(consumer: Any, topic: str, records: int, each: Callable[[Message], None] | None = None) -> int:
    """Read ``records`` records from offset 0: wait for one, then take what is there (the fastest raw pattern)."""
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = moved = 0
    last = time.monotonic()
    while seen < records:
        first = consumer.poll(1.0)
        if first is None:
            if time.monotonic() - last > STALL_SECONDS:
                raise StallError(f"{topic}: {seen} of {records} records after a {STALL_SECONDS:.0f} s stall")
            continue
        last = time.monotonic()
        for msg in [first, *consumer.consume(499, 0)]:
            if msg.error() is None:
                seen += 1
                moved += len(msg.value() or b"")
                if each is not None:
                    each(msg)
    return moved


def hybrid_consumer(svc: Services, kind: str) -> HybridConsumer:
    stores: dict[str, Any] = {kind: svc.store(kind)} if kind in REFERENCE_KINDS else {}
    return HybridConsumer(svc.consumer_conf(**HYBRID_CONSUMER), stores=stores)


def read_hybrid(consumer: HybridConsumer, topic: str, messages: int) -> int:
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = moved = 0
    last = time.monotonic()
    while seen < messages:
        msg = consumer.poll(1.0)
        if msg is None:
            if time.monotonic() - last > STALL_SECONDS:
                raise StallError(f"{topic}: {seen} of {messages} messages after a {STALL_SECONDS:.0f} s stall")
            continue
        last = time.monotonic()
        if msg.error() is None:
            seen += 1
            moved += len(msg.value() or b"")
        msg = None  # dropped before the next poll, as the raw readers do: memory passes count the reader's copies only
    return moved


def _check(variant: str, got: int, expected: int) -> None:
    if got != expected:
        raise AssertionError(f"{variant}: read {got} payload bytes, expected {expected}")


def consume_job(svc: Services, variant: str, topic: str, work: Work) -> Job:
    moved, count = work.total, work.count
    if variant in ("raw.record", "raw.segments"):
        consumer = _raw_consumer(svc, topic, raised=variant == "raw.record")
        records = count if variant == "raw.record" else sum(segments_per_message(len(v)) for v in work.values)

        def run_raw() -> Outcome:
            got = _drain_raw(consumer, topic, records)
            if variant == "raw.record":
                _check(variant, got, moved)
            return Outcome(moved, count)

        return Job(run_raw, consumer.close)
    if variant == "chunked" or variant in REFERENCE_KINDS:
        hybrid = hybrid_consumer(svc, variant)
        _warm(hybrid, topic)

        def run_hybrid() -> Outcome:
            _check(variant, read_hybrid(hybrid, topic, count), moved)
            return Outcome(moved, count)

        return Job(run_hybrid, hybrid.close)
    if variant == "redis.raw":
        client = svc.redis
        names = raw_names(svc, "redis", topic, count)

        def run_get() -> Outcome:
            got = sum(len(client.get(name) or b"") for name in names)
            _check(variant, got, moved)
            return Outcome(moved, count)

        return Job(run_get)
    if variant == "s3.raw":
        s3 = svc.s3
        names = raw_names(svc, "s3", topic, count)

        def run_get_object() -> Outcome:
            got = sum(len(s3.get_object(Bucket=svc.bucket, Key=name)["Body"].read()) for name in names)
            _check(variant, got, moved)
            return Outcome(moved, count)

        return Job(run_get_object)
    if variant in ("gcs.raw", "azure.raw"):
        get = _blob_get(svc, variant.partition(".")[0])
        names = raw_names(svc, variant.partition(".")[0], topic, count)

        def run_blob_get() -> Outcome:
            _check(variant, sum(len(get(name)) for name in names), moved)
            return Outcome(moved, count)

        return Job(run_blob_get)
    if variant in ("redis.raw+env", "s3.raw+env", "gcs.raw+env", "azure.raw+env"):
        consumer = _raw_consumer(svc, topic)
        fetched = [0]
        if variant == "redis.raw+env":
            client = svc.redis

            def fetch(msg: Message) -> None:
                fetched[0] += len(client.get((msg.value() or b"").rstrip(b" ")) or b"")
        elif variant != "s3.raw+env":
            get = _blob_get(svc, variant.partition(".")[0])

            def fetch(msg: Message) -> None:
                fetched[0] += len(get((msg.value() or b"").rstrip(b" ").decode()))
        else:
            s3 = svc.s3

            def fetch(msg: Message) -> None:
                name = (msg.value() or b"").rstrip(b" ").decode()
                fetched[0] += len(s3.get_object(Bucket=svc.bucket, Key=name)["Body"].read())

        def run_env() -> Outcome:
            _drain_raw(consumer, topic, count, fetch)
            _check(variant, fetched[0], moved)
            return Outcome(moved, count)

        return Job(run_env, consumer.close)
    raise ValueError(f"unknown variant {variant!r}")


# -- latency -----------------------------------------------------------------------------------

LATENCY_VARIANTS = ("raw.record", "raw.segments", "chunked", "redis", "s3")


class LatencyPair:
    """One producer and one consumer of a variant in this thread: send, then poll until it is back.

    ``linger.ms=0`` on every producer, so no variant waits for a batch to fill.
    """

    def __init__(self, svc: Services, variant: str, topic: str) -> None:
        self.variant = variant
        self.topic = topic
        self._segments_left: dict[bytes, int] = {}
        self.producer: Any
        self.consumer: Any
        if variant in ("raw.record", "raw.segments"):
            limit = RAISED_MESSAGE_MAX if variant == "raw.record" else CHUNK_MESSAGE_MAX
            self.producer = Producer(svc.producer_conf(**{"message.max.bytes": limit, "linger.ms": 0}))
            self.consumer = Consumer(svc.consumer_conf(**(RAISED_CONSUMER if variant == "raw.record" else {})))
        elif variant in ("chunked", "redis", "s3"):
            self.producer = hybrid_producer(svc, variant, linger_ms=0)
            self.consumer = hybrid_consumer(svc, variant)
        else:
            raise ValueError(f"no latency pair for {variant!r}")
        _warm(self.producer, topic)
        _warm(self.consumer, topic)
        self.consumer.assign([TopicPartition(topic, 0, 0)])

    def send(self, key: bytes, value: bytes) -> None:
        if self.variant == "raw.record":
            _produce(self.producer, self.topic, value=value, key=key, partition=0)
        elif self.variant == "raw.segments":
            ts = int(time.time() * 1000)
            parts = split(self.topic, 0, ts, uuid.uuid4(), key, value, SEGMENT, [("_t", encode_timestamp(ts))])
            self._segments_left[key] = len(parts)
            for r in parts:
                _produce(
                    self.producer,
                    self.topic,
                    value=bytes(r.value or b""),
                    key=r.key,
                    partition=0,
                    headers=r.headers,
                    timestamp=r.timestamp or 0,
                )
        else:
            route = "chunked" if self.variant == "chunked" else f"reference:{self.variant}"
            self.producer.produce(self.topic, value, key=key, partition=0, route=route)

    def receive(self, timeout: float) -> bytes | None:
        """The key of a message that is now whole, or None."""
        self.producer.poll(0)
        msg = self.consumer.poll(timeout)
        if msg is None or msg.error() is not None:
            return None
        key: bytes = msg.key()
        if self.variant == "raw.segments":
            self._segments_left[key] -= 1
            if self._segments_left[key] > 0:
                return None
            del self._segments_left[key]
        return key

    def roundtrip(self, key: bytes, value: bytes) -> float:
        """Seconds from the produce call until the consumer hands the whole message back."""
        start = time.perf_counter()
        self.send(key, value)
        while True:
            got = self.receive(0.05)
            if got == key:
                return time.perf_counter() - start
            if time.perf_counter() - start > STALL_SECONDS:
                raise StallError(f"{self.variant}: {key!r} not back after {STALL_SECONDS:.0f} s")

    def close(self) -> None:
        self.producer.flush(30)
        self.consumer.close()


# -- passthrough -------------------------------------------------------------------------------

PASSTHROUGH_READERS = ("raw.poll", "hybrid.poll", "raw.consume", "hybrid.consume")


def passthrough_job(svc: Services, reader: str, topic: str, messages: int) -> Job:
    """Read ``messages`` small plain records one way; ``Outcome.messages`` is what was read."""
    kind, _, call = reader.partition(".")
    consumer: Any = (
        Consumer(svc.consumer_conf()) if kind == "raw" else HybridConsumer(svc.consumer_conf(**HYBRID_CONSUMER))
    )
    _warm(consumer, topic)

    def run() -> Outcome:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = moved = 0
        last = time.monotonic()
        while seen < messages:
            batch: Sequence[Any]
            if call == "poll":
                one = consumer.poll(1.0)
                batch = () if one is None else (one,)
            else:
                batch = consumer.consume(500, 1.0)
            if not batch:
                if time.monotonic() - last > STALL_SECONDS:
                    raise StallError(f"{reader}: {seen} of {messages} records after a stall")
                continue
            last = time.monotonic()
            for msg in batch:
                if msg.error() is None:
                    seen += 1
                    moved += len(msg.value() or b"")
        return Outcome(moved, seen)

    return Job(run, consumer.close)


PASSTHROUGH_WRITERS = ("raw.produce", "hybrid.produce")


def passthrough_produce_job(svc: Services, writer: str, topic: str, messages: int, size: int) -> Job:
    """Write ``messages`` small plain records one way, every one acknowledged (``flush``) before the clock stops."""
    producer: Any = Producer(svc.producer_conf()) if writer == "raw.produce" else HybridProducer(svc.producer_conf())
    _warm(producer, topic)
    value = b"x" * size

    def run() -> Outcome:
        for _ in range(messages):
            _produce(producer, topic, value=value, partition=0)
        _flush(producer)
        return Outcome(messages * size, messages)

    return Job(run)


def produce_small(svc: Services, topic: str, messages: int, size: int) -> None:
    producer = Producer(svc.producer_conf())
    value = b"x" * size
    for _ in range(messages):
        _produce(producer, topic, value=value, partition=0)
    _flush(producer)


def segments_per_message(size: int) -> int:
    return max(1, math.ceil(size / SEGMENT))
