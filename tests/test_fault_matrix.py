"""The fault matrix: what happens to every message when a server fails under a running producer or consumer.

Each scenario runs on a broker of its own (Apache Kafka, one KRaft node that the test can SIGKILL,
SIGSTOP and restart on the same ports and storage), so that a fault never leaks into other tests.
For each it counts messages sent, acknowledged, delivered, lost (acknowledged but never delivered:
must be 0), duplicated (delivered more than once) and orphaned (payloads in a store that no
envelope in Kafka points at, after ``gateway gc``: must be 0).

With ``FAULT_MATRIX_OUT=path.jsonl`` every scenario appends its row; ``docs/reliability.md`` shows
the figures of such a run.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaException

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import GatewayError, StoreError
from gateway.gc import envelope_locators, kafka_verifier, sweep
from gateway.testing import ApacheKafka, KafkaService, RedisServer, S3Server, ServiceUnavailable
from stores import RedisStore, S3Store
from tests.helpers import payload

pytestmark = pytest.mark.requires("broker_faults")

SEGMENT = 300_000
SIZES = (700_000, 1_200_000, 1_900_000)


# --------------------------------------------------------------------------------------------
# the tally


@dataclass
class Tally:
    """Per-scenario counts; ``lost`` and ``orphaned`` are the two that must be zero."""

    scenario: str
    expected: dict[str, str] = field(default_factory=dict)  # key -> sha256 of what was sent
    acknowledged: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # key -> error the producer reported
    delivered: Counter[str] = field(default_factory=Counter)
    wrong_bytes: int = 0
    consumer_errors: int = 0
    commit_failures: int = 0
    orphaned: int = 0
    orphaned_before_gc: int = 0
    note: str = ""

    @property
    def lost(self) -> set[str]:
        return self.acknowledged - set(self.delivered)

    @property
    def duplicated(self) -> int:
        return sum(n - 1 for n in self.delivered.values() if n > 1)

    def on_delivery(self, key: str) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                self.acknowledged.add(key)
            else:
                self.failed[key] = str(err)

        return report

    def take(self, msg: Any) -> None:
        key = msg.key().decode()
        self.delivered[key] += 1
        if hashlib.sha256(msg.value() or b"").hexdigest() != self.expected.get(key):
            self.wrong_bytes += 1

    def row(self) -> dict[str, Any]:
        out = {
            "scenario": self.scenario,
            "sent": len(self.expected),
            "acknowledged": len(self.acknowledged),
            "failed_to_producer": len(self.failed),
            "delivered": len(self.delivered),
            "lost": len(self.lost),
            "duplicated": self.duplicated,
            "wrong_bytes": self.wrong_bytes,
            "consumer_errors": self.consumer_errors,
            "orphaned_before_gc": self.orphaned_before_gc,
            "orphaned": self.orphaned,
            "note": self.note,
        }
        target = os.environ.get("FAULT_MATRIX_OUT")
        if target:
            with open(target, "a") as out_file:
                out_file.write(json.dumps(out) + "\n")
        return out

    def check(self) -> None:
        row = self.row()
        assert row["lost"] == 0, f"lost {sorted(self.lost)}: {row}"
        assert row["wrong_bytes"] == 0, row
        assert row["orphaned"] == 0, row
        assert row["acknowledged"] > 0, row


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture
def own_kafka() -> Iterator[ApacheKafka]:
    """A broker of this test's own, which it may kill, pause and restart."""
    try:
        node = ApacheKafka()
    except ServiceUnavailable as exc:
        pytest.fail(f"Apache Kafka is needed for fault tests: {exc.reason}")
    with node:
        yield node


@pytest.fixture
def redis_store(redis_server: RedisServer) -> Iterator[RedisStore]:
    client = redis_server.client(socket_timeout=2)
    yield RedisStore(client, prefix=f"fm{uuid.uuid4().hex[:6]}")
    client.close()


def producer_conf(own_kafka: KafkaService) -> dict[str, Any]:
    return own_kafka.producer_config(**{
        "enable.idempotence": True, "acks": "all", "message.timeout.ms": 60_000,
        "max.message.segment.bytes": SEGMENT, "linger.ms": 5,
    })  # fmt: skip


def consumer_conf(own_kafka: KafkaService, group: str) -> dict[str, Any]:
    return own_kafka.consumer_config(group, **{"enable.auto.commit": False, "fetch.wait.max.ms": 50})


def new_topic(own_kafka: KafkaService, partitions: int = 2) -> str:
    name = f"fm-{uuid.uuid4().hex[:10]}"
    own_kafka.create_topic(name, partitions=partitions)
    return name


def produce(tally: Tally, producer: HybridProducer, topic: str, count: int, *, start: int = 0,
            fault_at: int | None = None, fault: Callable[[], None] | None = None) -> None:
    """Send ``count`` messages of 0.7 to 1.9 MB, running ``fault`` once after message ``fault_at`` was queued."""
    for i in range(start, start + count):
        key = f"m{i:04d}"
        value = payload(SIZES[i % len(SIZES)], seed=i)
        tally.expected[key] = hashlib.sha256(value).hexdigest()
        while True:
            try:
                producer.produce(topic, value, key=key.encode(), on_delivery=tally.on_delivery(key))
                break
            except BufferError:
                producer.poll(0.1)
            except (GatewayError, StoreError) as exc:  # refused before anything was queued: the app knows
                tally.failed[key] = f"{type(exc).__name__}: {exc}"
                break
        producer.poll(0)
        if fault is not None and i == fault_at:
            fault()
    producer.flush(120)


def consume(tally: Tally, consumer: HybridConsumer, *, until: Callable[[], bool], timeout: float = 90,
            on_each: Callable[[int], None] | None = None, commit: bool = True) -> None:
    """Poll until ``until()`` holds or ``timeout``; typed errors are counted, never fatal."""
    deadline = time.monotonic() + timeout
    taken = 0
    while not until() and time.monotonic() < deadline:
        try:
            msg = consumer.poll(0.5)
        except GatewayError as exc:
            assert exc.kafka_message is not None, f"{type(exc).__name__} without its record"
            tally.consumer_errors += 1
            continue
        if msg is None or msg.error() is not None:
            continue
        tally.take(msg)
        taken += 1
        if commit:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:  # e.g. UNKNOWN_MEMBER_ID while the group re-forms: apps go on
                tally.commit_failures += 1
                tally.note = f"commit failed {tally.commit_failures}x during the outage ({exc.args[0].name()})"
        if on_each is not None:
            on_each(taken)


def everything_delivered(tally: Tally) -> Callable[[], bool]:
    return lambda: tally.acknowledged <= set(tally.delivered)


def sweep_orphans(tally: Tally, own_kafka: KafkaService, topic: str, stores: dict[str, Any]) -> None:
    """Count payloads no envelope points at, run gc against Kafka, and count again."""
    tally.orphaned_before_gc = _orphans(own_kafka, topic, stores)
    sweep(stores, grace_ms=0, landed=kafka_verifier(own_kafka.client_conf(), stores))
    tally.orphaned = _orphans(own_kafka, topic, stores)


def _orphans(own_kafka: KafkaService, topic: str, stores: dict[str, Any]) -> int:
    live = {locator for _, locator in envelope_locators(own_kafka.client_conf(), [topic])}
    return sum(1 for store in stores.values() for locator, _ in store.list_locators(topic) if locator not in live)


def kill_and_restart(own_kafka: ApacheKafka, down: float = 2.0) -> Callable[[], None]:
    def fault() -> None:
        own_kafka.kill()
        time.sleep(down)
        own_kafka.restart()

    return fault


# --------------------------------------------------------------------------------------------
# broker SIGKILLed and restarted


@pytest.mark.parametrize("route", ["chunked", "reference"])
def test_broker_killed_during_produce(own_kafka: ApacheKafka, redis_store: RedisStore, route: str) -> None:
    topic = new_topic(own_kafka)
    tally = Tally(f"broker SIGKILL + restart during {route} produce")
    stores: dict[str, Any] = {"redis": redis_store}
    policy = SizeThresholdPolicy(reference_above=500_000 if route == "reference" else 10**12, store="redis")
    producer = HybridProducer(producer_conf(own_kafka), policy=policy, stores=stores)
    produce(tally, producer, topic, 24, fault_at=8, fault=kill_and_restart(own_kafka))
    consumer = HybridConsumer(consumer_conf(own_kafka, f"g-{uuid.uuid4().hex[:8]}"), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=everything_delivered(tally))
    consumer.close()
    sweep_orphans(tally, own_kafka, topic, stores)
    tally.check()
    assert tally.duplicated == 0, tally.row()


@pytest.mark.parametrize("route", ["chunked", "reference"])
def test_broker_killed_during_consume(own_kafka: ApacheKafka, redis_store: RedisStore, route: str) -> None:
    topic = new_topic(own_kafka)
    tally = Tally(f"broker SIGKILL + restart during {route} consume")
    stores: dict[str, Any] = {"redis": redis_store}
    policy = SizeThresholdPolicy(reference_above=500_000 if route == "reference" else 10**12, store="redis")
    producer = HybridProducer(producer_conf(own_kafka), policy=policy, stores=stores)
    produce(tally, producer, topic, 24)
    assert len(tally.acknowledged) == 24, tally.failed
    fault = kill_and_restart(own_kafka)
    consumer = HybridConsumer(consumer_conf(own_kafka, f"g-{uuid.uuid4().hex[:8]}"), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=everything_delivered(tally), on_each=lambda n: fault() if n == 8 else None)
    consumer.close()
    sweep_orphans(tally, own_kafka, topic, stores)
    tally.check()  # duplicates are allowed here: a commit refused while the group re-formed is re-read


# --------------------------------------------------------------------------------------------
# the store fails


def test_redis_restarted_without_persistence(own_kafka: ApacheKafka, redis_server: RedisServer) -> None:
    """Payloads gone with the Redis that held them: one typed error per message, each carrying its record."""
    if redis_server.external:
        pytest.skip("REDIS_URL points at a Redis this test cannot restart")
    topic = new_topic(own_kafka, partitions=1)
    tally = Tally("Redis restarted without persistence between produce and consume")
    store = RedisStore(redis_server.client(socket_timeout=2), prefix=f"fm{uuid.uuid4().hex[:6]}")
    stores: dict[str, Any] = {"redis": store}
    producer = HybridProducer(producer_conf(own_kafka), policy=SizeThresholdPolicy(reference_above=500_000,
                                                                                store="redis"), stores=stores)
    produce(tally, producer, topic, 12)
    redis_server.stop()
    redis_server.start()
    consumer = HybridConsumer(consumer_conf(own_kafka, f"g-{uuid.uuid4().hex[:8]}"), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=lambda: tally.consumer_errors >= 12, timeout=60)
    consumer.close()
    tally.note = "payloads lost with the store: each reported as a typed error, none delivered silently"
    row = tally.row()
    assert row["delivered"] == 0 and row["consumer_errors"] == 12, row
    assert row["wrong_bytes"] == 0


def test_s3_unavailable_during_consume(own_kafka: ApacheKafka, s3_server: S3Server, s3_bucket: str,
                                       s3_prefix: str) -> None:
    """S3 hangs mid-stream: typed errors, commits held; a restarted consumer delivers the rest."""
    if s3_server.external:
        pytest.skip("S3_ENDPOINT_URL points at an S3 this test cannot pause")
    topic = new_topic(own_kafka, partitions=1)
    tally = Tally("S3 unavailable (SIGSTOP) during consume, consumer restarted after it returns")
    client = s3_server.client(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})
    stores: dict[str, Any] = {"s3": S3Store(client, bucket=s3_bucket, prefix=s3_prefix)}
    producer = HybridProducer(producer_conf(own_kafka), policy=SizeThresholdPolicy(reference_above=500_000, store="s3"),
                              stores=stores)
    produce(tally, producer, topic, 12)
    assert len(tally.acknowledged) == 12, tally.failed
    group = f"g-{uuid.uuid4().hex[:8]}"
    # no fetch-ahead: each payload is read when its envelope comes up, so the outage hits mid-stream
    consumer = HybridConsumer({**consumer_conf(own_kafka, group), "reference.fetch.budget.bytes": 0}, stores=stores)
    consumer.subscribe([topic])
    paused = threading.Event()

    def pause_s3(taken: int) -> None:
        if taken == 4 and not paused.is_set():
            s3_server.pause()
            paused.set()

    try:
        consume(tally, consumer, until=lambda: tally.consumer_errors >= 3, on_each=pause_s3, timeout=60)
    finally:
        s3_server.resume()
    consumer.close()
    assert tally.consumer_errors >= 3, tally.row()
    consumer = HybridConsumer(consumer_conf(own_kafka, group), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=everything_delivered(tally))
    consumer.close()
    sweep_orphans(tally, own_kafka, topic, stores)
    tally.note = "typed errors while S3 hung, commit held at the first; the restarted group read on from there"
    tally.check()


def test_s3_unavailable_during_produce(own_kafka: ApacheKafka, s3_server: S3Server, s3_bucket: str,
                                       s3_prefix: str) -> None:
    """S3 hangs while messages are sent by reference: each one lands (by fallback) or fails; gc leaves no orphan."""
    if s3_server.external:
        pytest.skip("S3_ENDPOINT_URL points at an S3 this test cannot pause")
    topic = new_topic(own_kafka, partitions=1)
    tally = Tally("S3 unavailable (SIGSTOP) during reference produce")
    client = s3_server.client(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})
    stores: dict[str, Any] = {"s3": S3Store(client, bucket=s3_bucket, prefix=s3_prefix)}
    producer = HybridProducer(producer_conf(own_kafka), policy=SizeThresholdPolicy(reference_above=500_000, store="s3"),
                              stores=stores)

    def outage() -> None:
        s3_server.pause()

    try:
        produce(tally, producer, topic, 6, fault_at=2, fault=outage)
    finally:
        s3_server.resume()
    produce(tally, producer, topic, 4, start=6)
    counters = producer.metrics()
    assert counters["store.put.failures"] >= 1, counters
    tally.note = f"{counters['fallbacks']} sent chunked while S3 was down (fallback), {len(tally.failed)} failed"
    consumer = HybridConsumer(consumer_conf(own_kafka, f"g-{uuid.uuid4().hex[:8]}"), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=everything_delivered(tally))
    consumer.close()
    time.sleep(1.0)  # requests moto queued while stopped finish now
    sweep_orphans(tally, own_kafka, topic, stores)
    tally.check()
