"""Reference messaging end to end: envelopes through Kafka, payloads in real Redis and S3 servers."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import (
    EnvelopeFormatError,
    GatewayError,
    LocatorError,
    LocatorTopicError,
    PayloadIntegrityError,
    PayloadTooLargeError,
)
from gateway.protocol.envelope import ENVELOPE_HEADER, Envelope, encode_envelope, envelope_header
from gateway.testing import KafkaService, RedisServer, free_port
from gateway.testing.embedded import EmbeddedKafka
from stores import RedisStore, S3Store
from stores.redis._layout import REDIS_MAX_STRING, RedisLocator
from tests.helpers import consume_all, payload, sha
from tests.kafkautil import produce_records, read_partition

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def redis_store(redis_client: redis.Redis) -> RedisStore:
    return RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}")


@pytest.fixture
def s3_store(s3_client: Any, s3_bucket: str, s3_prefix: str) -> S3Store:
    return S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix)


def redis_keys(store: RedisStore) -> list[bytes]:
    return sorted(k for k in store_client(store).scan_iter(match=f"{store.prefix}:*", count=1000))


def store_client(store: RedisStore) -> redis.Redis:
    return store.client  # type: ignore[no-any-return]


def s3_objects(store: S3Store) -> list[str]:
    listing = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix)
    return [o["Key"] for o in listing.get("Contents", [])]


def round_trip(
    kafka: KafkaService, topic: str, consumer_config: Any, stores: dict[str, Any], store: str, sizes: list[int]
) -> None:
    producer = HybridProducer(
        kafka.producer_config(), policy=SizeThresholdPolicy(reference_above=1_000_000, store=store), stores=stores
    )
    reports: list[Any] = []
    for i, size in enumerate(sizes):
        producer.produce(
            topic,
            payload(size, i),
            key=f"r{i}".encode(),
            headers=[("trace", b"t1")],
            on_delivery=lambda err, msg: reports.append(err),
        )
    assert producer.flush(120) == 0
    assert reports == [None] * len(sizes)
    assert stores[store].list_pending(2**62) == [], "acknowledged writes are no longer pending"
    raw = read_partition(consumer_config(), topic, 0, len(sizes))
    assert all(len(m.value()) < 1024 for m in raw), "the Kafka record is the envelope only"
    assert all(m.headers()[-1] == envelope_header() for m in raw)
    consumer = HybridConsumer(consumer_config(), stores=stores)
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(sizes), timeout=120)
    consumer.close()
    assert not errors
    assert [sha(m.value()) for m in got] == [sha(payload(s, i)) for i, s in enumerate(sizes)]
    assert [m.key() for m in got] == [f"r{i}".encode() for i in range(len(sizes))]
    assert all(m.headers() == [("trace", b"t1")] for m in got)
    assert [m.offset() for m in got] == [m.offset() for m in raw]


@pytest.mark.parametrize("store", ["redis", "s3"])
def test_20mb_round_trip(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_store: RedisStore, s3_store: S3Store, store: str
) -> None:
    round_trip(kafka, topic, consumer_config, {"redis": redis_store, "s3": s3_store}, store, [20_000_000, 3_000_000])


@pytest.mark.slow
@pytest.mark.parametrize("store", ["redis", "s3"])
def test_200mb_round_trip(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_store: RedisStore, s3_store: S3Store, store: str
) -> None:
    round_trip(kafka, topic, consumer_config, {"redis": redis_store, "s3": s3_store}, store, [200_000_000])


def test_10mb_in_1mb_redis_entries(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: redis.Redis
) -> None:
    store = RedisStore(redis_client, prefix="gwsplit", entry_bytes=1_000_000)
    round_trip(kafka, topic, consumer_config, {"redis": store}, "redis", [10_000_000])
    data = [k for k in redis_keys(store) if k.count(b":") == 3 and not k.endswith((b"pending", b"written"))]
    assert len(data) == 10


# -- rollback -----------------------------------------------------------------------------------
def test_rollback_on_unknown_partition(
    kafka: KafkaService, topic: str, redis_store: RedisStore, s3_store: S3Store
) -> None:
    stores = {"redis": redis_store, "s3": s3_store}
    producer = HybridProducer({**kafka.producer_config(), "message.timeout.ms": 5000}, stores=stores)
    errors: list[Any] = []
    for name in stores:
        try:
            producer.produce(
                topic,
                payload(3_000_000),
                partition=9,
                route=f"reference:{name}",
                on_delivery=lambda err, msg: errors.append(err),
            )
        except Exception as exc:  # librdkafka may refuse the partition synchronously once metadata is known
            errors.append(exc)
    producer.flush(30)
    assert len(errors) == 2 and all(e is not None for e in errors)
    assert redis_keys(redis_store) == [], "rolled back: no data keys, no pending mark"
    assert s3_store.list_pending(2**62) == [], "rolled back: nothing pending"
    assert [key for key in s3_objects(s3_store) if not key.endswith(".batch")] == [], "rolled back: no object"
    producer.close()
    assert s3_objects(s3_store) == [], "the open batch's marker goes with the producer"
    # the brokers know the topic: refused in produce before the store write (issue 38.7), nothing to roll back
    assert all(isinstance(e, KafkaException) and e.args[0].code() == KafkaError._UNKNOWN_PARTITION for e in errors)
    assert producer.metrics()["rollbacks"] == 0


def test_a_timed_out_envelope_leaves_its_payload_for_gc(redis_store: RedisStore, s3_store: S3Store) -> None:
    """``_MSG_TIMED_OUT`` cannot tell a record never sent from one the broker wrote: gc decides, not the producer."""
    stores = {"redis": redis_store, "s3": s3_store}
    with EmbeddedKafka() as cluster:
        cluster.create_topic("gone", partitions=1)
        producer = HybridProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "message.timeout.ms": 2000}, stores=stores
        )
        producer.list_topics("gone", timeout=10)
        for broker in cluster.broker_ids:
            cluster.set_broker_down(broker)
        reports: list[Any] = []
        for name in stores:
            producer.produce(
                "gone",
                payload(2_000_000),
                route=f"reference:{name}",
                on_delivery=lambda err, msg: reports.append((err, msg.value())),
            )
        producer.flush(20)
        producer_metrics = producer.metrics()
        del producer  # before the cluster goes: no reconnect noise after the test
    assert len(reports) == 2
    assert all(err is not None and err.code() == KafkaError._MSG_TIMED_OUT for err, _ in reports)
    assert all(value == payload(2_000_000) for _, value in reports), "the callback sees the original value"
    assert len(redis_store.list_pending(2**62)) == 1 and len(s3_store.list_pending(2**62)) == 1
    assert producer_metrics["rollbacks"] == 0 and producer_metrics["rollbacks.skipped"] == 2


# -- crash window and gc --------------------------------------------------------------------------
def test_producer_killed_before_ack_leaves_an_orphan_that_gc_removes(
    kafka: KafkaService, topic: str, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    prefix = f"gwc{uuid.uuid4().hex[:6]}"
    store = RedisStore(redis_client, prefix=prefix)
    producer = HybridProducer(kafka.producer_config(), stores={"redis": store})
    for i in range(3):  # these land: gc must leave them alone
        producer.produce(topic, payload(1_500_000, i), key=f"ok{i}".encode(), route="reference:redis")
    assert producer.flush(30) == 0
    landed = sorted(loc for loc, _ in store.list_locators())
    assert len(landed) == 3 and store.list_pending(2**62) == []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.producer_child",
            "--redis-url",
            redis_server.url,
            "--prefix",
            prefix,
            "--topic",
            topic,
            "--dead-bootstrap",
            f"127.0.0.1:{free_port()}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "WRITTEN"
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    orphans = store.list_pending(2**62)
    assert len(orphans) == 1
    gc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "gc",
            "--redis-url",
            redis_server.url,
            "--redis-prefix",
            prefix,
            "--grace",
            "0",
            "--bootstrap",
            kafka.bootstrap_servers,
            "--delete",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gc.returncode == 0, gc.stderr
    assert "deleted 1" in gc.stdout
    assert store.list_pending(2**62) == []
    assert sorted(loc for loc, _ in store.list_locators()) == landed, "nothing else was removed"
    for locator in landed:
        assert len(store.get(locator)) == 1_500_000


def test_gc_keeps_a_payload_whose_envelope_landed(kafka: KafkaService, topic: str, redis_store: RedisStore) -> None:
    """The narrow case: acknowledged, but the process died before clearing the pending mark."""
    producer = HybridProducer(kafka.producer_config(), stores={"redis": redis_store})
    producer.produce(topic, payload(1_200_000), route="reference:redis")
    assert producer.flush(30) == 0
    ((locator, _),) = list(redis_store.list_locators())
    redis_store.mark_pending(locator, 1)  # as if the clear never happened
    from gateway.gc.sweeper import kafka_verifier, sweep

    report = sweep({"redis": redis_store}, grace_ms=0, verifier=kafka_verifier(kafka.client_conf()), dry_run=False)
    assert report.landed == [locator] and report.deleted == []
    assert len(redis_store.get(locator)) == 1_200_000


# -- hostile envelopes ------------------------------------------------------------------------------
def hostile_records(
    topic: str, redis_store: RedisStore, s3_store: S3Store, good_redis: str, good_s3: str, good_size: int
) -> list[tuple[str, bytes]]:
    mid = uuid.uuid4()
    digest = hashlib.sha256(payload(good_size)).digest()
    other_bucket = good_s3.replace(f"s3://{s3_store.bucket}/", "s3://someone-elses-bucket/")
    other_prefix = good_redis.replace(f"{redis_store.prefix}:", "other:", 1)
    cases = [
        ("s3 other bucket", encode_envelope(Envelope("s3", other_bucket, good_size, digest, mid))),
        (
            "s3 path trick",
            encode_envelope(
                Envelope("s3", f"s3://{s3_store.bucket}/{s3_store.prefix}../secret/x", good_size, digest, mid)
            ),
        ),
        ("redis other prefix", encode_envelope(Envelope("redis", other_prefix, good_size, digest, mid))),
        (
            "redis path trick",
            encode_envelope(Envelope("redis", f"{redis_store.prefix}:../canary#1x1000", good_size, digest, mid)),
        ),
        ("claims 1 GB", encode_envelope(Envelope("redis", good_redis, 1_000_000_000, digest, mid))),
        ("claims 10 GB", encode_envelope(Envelope("redis", good_redis, 10_000_000_000, digest, mid))),
        ("wrong checksum", encode_envelope(Envelope("redis", good_redis, good_size, b"\x01" * 32, mid))),
    ]
    valid = encode_envelope(Envelope("redis", good_redis, good_size, digest, mid))
    cases.append(("truncated", valid[: len(valid) // 2]))
    garbled = bytearray(valid)
    garbled[40] ^= 0xFF
    cases.append(("garbled", bytes(garbled)))
    cases.append(("unknown store", encode_envelope(Envelope("nope", good_redis, good_size, digest, mid))))
    return cases


def test_hostile_envelopes_get_typed_errors_and_the_consumer_goes_on(
    kafka: KafkaService,
    topic: str,
    consumer_config: Any,
    redis_store: RedisStore,
    s3_store: S3Store,
    redis_client: redis.Redis,
) -> None:
    good_size = 1_100_000
    good_redis = redis_store.put(topic, uuid.uuid4(), payload(good_size))
    good_s3 = s3_store.put(topic, uuid.uuid4(), payload(good_size))
    redis_client.set("canary", b"secret")
    cases = hostile_records(topic, redis_store, s3_store, good_redis, good_s3, good_size)
    records = []
    for i, (_, value) in enumerate(cases):
        records.append(
            {"topic": topic, "partition": 0, "key": f"bad{i}".encode(), "value": value, "headers": [envelope_header()]}
        )
        records.append({"topic": topic, "partition": 0, "key": f"ok{i}".encode(), "value": f"plain-{i}".encode()})
    produce_records(kafka.producer_config(), records)
    s3_requests: list[str] = []
    s3_store.client.meta.events.register("before-send.s3.*", lambda request, **_: s3_requests.append(request.url))
    stats_before = redis_client.info("commandstats")
    consumer = HybridConsumer(
        consumer_config(**{"enable.auto.commit": False}), stores={"redis": redis_store, "s3": s3_store}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, errors = consume_all(consumer, len(records))
    stats_after = redis_client.info("commandstats")
    assert [m.value() for m in got] == [f"plain-{i}".encode() for i in range(len(cases))], "the consumer went on"
    kinds = [type(e) for e in errors]
    assert kinds == [
        LocatorError,
        LocatorError,
        LocatorError,
        LocatorError,
        LocatorError,  # a size the locator's entries cannot hold
        PayloadTooLargeError,  # above reference.max.payload.bytes
        PayloadIntegrityError,
        EnvelopeFormatError,
        EnvelopeFormatError,
        type(errors[-1]),
    ]
    assert "nope" in str(errors[-1])
    assert all(
        e.kafka_message is not None and e.kafka_message.key() == f"bad{i}".encode() for i, e in enumerate(errors)
    )
    assert s3_requests == [], "no S3 request for locators outside the bucket/prefix"
    rejected = (redis_store.metrics()["locator_rejected"], s3_store.metrics()["locator_rejected"])
    assert rejected == (3, 2), "each refused locator is counted once"

    def calls(stats: dict[str, Any], command: str) -> int:
        return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))

    reads = sum(calls(stats_after, c) - calls(stats_before, c) for c in ("get", "mget", "getrange", "scan", "keys"))
    assert reads == 1, "only the wrong-checksum envelope, which points inside the prefix, was read"
    # commits stop at the first unresolved record until the application commits it itself
    view = consumer.commit(asynchronous=False)
    assert view is not None and view[0].offset == 0
    assert consumer.committed_safe_offsets([TopicPartition(topic, 0)], timeout=10)[0].offset == 0
    consumer.commit(message=errors[-1].kafka_message, asynchronous=False)
    consumer.close()


# -- an envelope belongs to its topic ---------------------------------------------------------------
def redis_reads(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("get", "mget", "getrange"))


def copy_envelope(kafka: KafkaService, store: RedisStore, source: str, into: str, value: bytes) -> None:
    """A reference message to ``source``, then its raw record (key, value, headers) copied into ``into``
    by a plain producer, as someone who can write to ``into`` (or MirrorMaker) would, and a plain record."""
    producer = HybridProducer(kafka.producer_config(), stores={"redis": store})
    producer.produce(source, value, key=b"copied", route="reference:redis")
    assert producer.flush(30) == 0
    producer.close()
    (raw,) = read_partition(kafka.consumer_config(), source, 0, 1)
    assert (ENVELOPE_HEADER, b"\x01") in (raw.headers() or [])
    copy = {"topic": into, "partition": 0, "key": raw.key(), "value": raw.value(), "headers": raw.headers()}
    produce_records(kafka.producer_config(), [copy, {"topic": into, "partition": 0, "value": b"the next record"}])


def read_copy(
    kafka: KafkaService, topic: str, store: RedisStore, **config: Any
) -> tuple[list[Any], list[GatewayError]]:
    consumer = HybridConsumer(kafka.consumer_config(**config), stores={"redis": store})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        return consume_all(consumer, 2, timeout=30)
    finally:
        consumer.close()


def test_an_envelope_copied_into_another_topic_is_refused_and_the_consumer_goes_on(
    kafka: KafkaService, topic: str, redis_store: RedisStore, redis_client: redis.Redis
) -> None:
    other = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(other, partitions=1)
    try:
        copy_envelope(kafka, redis_store, topic, other, payload(600_000, seed=7))
        reads_before = redis_reads(redis_client)
        got, errors = read_copy(kafka, other, redis_store)
        reads = redis_reads(redis_client) - reads_before
    finally:
        kafka.delete_topic(other)
    assert [type(e) for e in errors] == [LocatorTopicError], errors
    record = errors[0].kafka_message
    assert record is not None and (record.topic(), record.key()) == (other, b"copied"), "the error carries the record"
    assert repr(topic) in str(errors[0]) and repr(other) in str(errors[0])
    assert [m.value() for m in got] == [b"the next record"], "the consumer went on"
    assert reads == 0, "the other topic's payload was never read"


def test_a_mirrored_topic_serves_its_sources_envelopes_once_the_rename_is_named(
    kafka: KafkaService, topic: str, redis_store: RedisStore
) -> None:
    """MirrorMaker 2's default policy copies ``A`` of the cluster aliased ``source`` to ``source.A``."""
    mirror = f"source.{topic}"
    kafka.create_topic(mirror, partitions=1)
    value = payload(600_000, seed=8)
    try:
        copy_envelope(kafka, redis_store, topic, mirror, value)
        refused, refusals = read_copy(kafka, mirror, redis_store)
        served, errors = read_copy(kafka, mirror, redis_store, **{"reference.topic.renames": "source.${topic}"})
        elsewhere, others = read_copy(kafka, mirror, redis_store, **{"reference.topic.renames": "backup.${topic}"})
    finally:
        kafka.delete_topic(mirror)
    assert [type(e) for e in refusals] == [LocatorTopicError] and [m.value() for m in refused] == [b"the next record"]
    assert errors == []
    assert [(m.topic(), m.key()) for m in served] == [(mirror, b"copied"), (mirror, None)]
    assert sha(served[0].value()) == sha(value) and served[1].value() == b"the next record"
    assert [type(e) for e in others] == [LocatorTopicError], "another rename does not cover this mirror"
    assert [m.value() for m in elsewhere] == [b"the next record"]


# -- a declared size above the maximum ---------------------------------------------------------------
def forged_envelope(store: RedisStore | S3Store, topic: str, size: int) -> bytes:
    """An envelope whose locator the store accepts for ``size`` bytes, with no payload behind it."""
    mid = uuid.uuid4()
    if isinstance(store, S3Store):
        locator = store.locator_for(topic, mid)
    else:  # the fewest, largest entries a Redis string holds: a size past a default store's locator checks
        entry = REDIS_MAX_STRING - 1
        locator = RedisLocator(topic, mid, -(-size // entry), entry).text(store.prefix)
        store.validate_locator(locator, size)
    return encode_envelope(Envelope(store.name, locator, size, b"\x00" * 32, mid))


@pytest.mark.parametrize("kind", ["redis", "s3"])
def test_a_forged_2_tib_size_is_refused_before_any_read_and_the_consumer_goes_on(
    kafka: KafkaService,
    topic: str,
    redis_store: RedisStore,
    s3_store: S3Store,
    redis_client: redis.Redis,
    kind: str,
) -> None:
    store: RedisStore | S3Store = redis_store if kind == "redis" else s3_store
    # 2**41 for S3; a default Redis store's locator admits at most 4096 entries below 512 MiB, 4 KiB less
    size = 2**41 if kind == "s3" else 4096 * (REDIS_MAX_STRING - 1)
    produce_records(
        kafka.producer_config(),
        [
            {
                "topic": topic,
                "partition": 0,
                "value": forged_envelope(store, topic, size),
                "headers": [envelope_header()],
            },
            {"topic": topic, "partition": 0, "value": b"the next record"},
        ],
    )
    s3_requests: list[str] = []
    s3_store.client.meta.events.register("before-send.s3.*", lambda request, **_: s3_requests.append(request.url))
    reads_before = redis_reads(redis_client)
    consumer = HybridConsumer(kafka.consumer_config(), stores={"redis": redis_store, "s3": s3_store})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, errors = consume_all(consumer, 2, timeout=30)
    consumer.close()
    assert [type(e) for e in errors] == [PayloadTooLargeError], errors
    assert errors[0].kafka_message is not None and str(size) in str(errors[0])
    assert [m.value() for m in got] == [b"the next record"]
    assert s3_requests == [] and redis_reads(redis_client) == reads_before, "no store was asked"


def test_a_forged_size_above_the_maximum_allocates_nothing(
    kafka: KafkaService, topic: str, redis_store: RedisStore
) -> None:
    """3 GB, above the 2 GB default: an allocation the system would grant (its pages never touched), so
    only tracing shows whether it was made. A Redis read allocates the declared size before the reply."""
    produce_records(
        kafka.producer_config(),
        [
            {
                "topic": topic,
                "partition": 0,
                "value": forged_envelope(redis_store, topic, 3_000_000_000),
                "headers": [envelope_header()],
            },
            {"topic": topic, "partition": 0, "value": b"the next record"},
        ],
    )
    consumer = HybridConsumer(kafka.consumer_config(), stores={"redis": redis_store})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    tracemalloc.start()
    try:
        got, errors = consume_all(consumer, 2, timeout=30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        consumer.close()
    assert peak < 50_000_000, f"{peak} bytes allocated at the peak"
    assert [type(e) for e in errors] == [PayloadTooLargeError], errors
    assert [m.value() for m in got] == [b"the next record"]


def test_missing_payload_is_typed_and_can_be_delivered_as_an_error(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_store: RedisStore
) -> None:
    producer = HybridProducer(kafka.producer_config(), stores={"redis": redis_store})
    producer.produce(topic, payload(1_500_000), key=b"gone", route="reference:redis")
    producer.produce(topic, b"after", key=b"after")
    assert producer.flush(30) == 0
    for locator, _ in list(redis_store.list_locators()):
        redis_store.delete(locator)  # expired, swept or deleted by someone else
    consumer = HybridConsumer(consumer_config(**{"reference.error.mode": "deliver"}), stores={"redis": redis_store})
    consumer.subscribe([topic])
    got: list[Any] = []
    errors: list[Exception] = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            got.append(msg)
    consumer.close()
    assert got[0].error() is not None and got[0].error().code() == KafkaError._VALUE_DESERIALIZATION
    assert "PayloadNotFoundError" in got[0].error().str()
    assert got[0].key() == b"gone"
    assert got[1].value() == b"after" and got[1].error() is None
    assert not errors


def test_headers_lost_envelope_still_resolves_and_legacy_magic_passes(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_store: RedisStore
) -> None:
    locator = redis_store.put(topic, uuid.uuid4(), payload(1_000_000))
    env = encode_envelope(
        Envelope.for_payload(payload(1_000_000), store="redis", locator=locator, message_id=uuid.uuid4())
    )
    legacy = b"\x1bGWREF but just a legacy value that happens to start with the magic"
    produce_records(
        kafka.producer_config(),
        [
            {"topic": topic, "partition": 0, "value": env},  # no header: recognised from the value alone
            {"topic": topic, "partition": 0, "value": legacy},
        ],
    )
    consumer = HybridConsumer(consumer_config(), stores={"redis": redis_store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 2)
    consumer.close()
    assert not errors
    assert got[0].value() == payload(1_000_000)
    assert got[1].value() == legacy
    assert ENVELOPE_HEADER not in [k for k, _ in got[0].headers() or []]


def test_the_s3_route_journals_its_writes_in_batches(
    kafka: KafkaService, topic: str, consumer_config: Any, s3_client: Any, s3_bucket: str, s3_prefix: str
) -> None:
    """One marker PUT per eight messages instead of one per message, and none left once the producer closes."""
    store = S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix, journal_batch=8)
    puts: list[str] = []

    def count(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "PutObject":
            puts.append(params["Key"])

    s3_client.meta.events.register("before-parameter-build.s3.PutObject", count)
    try:
        producer = HybridProducer(kafka.producer_config(), stores={"s3": store})
        values = [payload(3000 + i, i) for i in range(20)]
        for i, value in enumerate(values):
            producer.produce(topic, value, key=f"k{i}".encode(), route="reference:s3")
        assert producer.flush(60) == 0
    finally:
        s3_client.meta.events.unregister("before-parameter-build.s3.PutObject", count)
    markers = [key for key in puts if key.startswith(store.pending_prefix)]
    assert len(puts) == 23 and len(markers) == 3 and all(key.endswith(".batch") for key in markers)
    assert store.list_pending(2**62) == [], "acknowledged writes are no longer pending"
    producer.close()
    listing = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix=store.pending_prefix)
    assert listing.get("KeyCount", 0) == 0, "the producer's close ended its open batch"

    consumer = HybridConsumer(consumer_config(), stores={"s3": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(values), timeout=60)
    consumer.close()
    assert errors == []
    assert sorted(sha(m.value()) for m in got) == sorted(sha(v) for v in values)
