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
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.testing import ApacheKafka, RedisServer, S3Server, ServiceUnavailable
from stores import RedisStore, S3Store
from tests.faults import (
    Tally,
    consume,
    consumer_conf,
    envelope_locators,
    everything_delivered,
    kill_and_restart,
    new_topic,
    produce,
    producer_conf,
    sweep_orphans,
)
from tests.helpers import payload

pytestmark = pytest.mark.requires("broker_faults")

ROOT = Path(__file__).resolve().parents[2]


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


def test_broker_paused_past_the_delivery_timeout_during_reference_produce(
    own_kafka: ApacheKafka, redis_store: RedisStore
) -> None:
    """Envelopes that time out may still have been written: their payloads stay until gc reads the topic."""
    topic = new_topic(own_kafka, partitions=1)
    tally = Tally("broker paused (SIGSTOP) past message.timeout.ms during reference produce")
    stores: dict[str, Any] = {"redis": redis_store}
    conf = {**producer_conf(own_kafka), "message.timeout.ms": 4_000, "request.timeout.ms": 2_000}
    producer = HybridProducer(conf, policy=SizeThresholdPolicy(reference_above=500_000, store="redis"), stores=stores)
    produce(tally, producer, topic, 2)
    assert len(tally.acknowledged) == 2, tally.failed
    own_kafka.pause()
    try:
        produce(tally, producer, topic, 4, start=2)  # flush returns once each envelope has timed out
    finally:
        own_kafka.resume()
    timed_out = set(tally.failed)
    assert timed_out == {"m0002", "m0003", "m0004", "m0005"}, tally.failed
    counters = producer.metrics()
    assert (counters["rollbacks"], counters["rollbacks.skipped"]) == (0, 4), counters
    pending = redis_store.list_pending(2**62)
    assert len(pending) == 4, "each timed-out envelope keeps its payload and pending mark for gc"
    assert all(redis_store.get(locator) for locator in pending)
    produce(tally, producer, topic, 2, start=6)
    landed = len(envelope_locators(own_kafka, topic))
    consumer = HybridConsumer(consumer_conf(own_kafka, f"g-{uuid.uuid4().hex[:8]}"), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=lambda: len(tally.delivered) + tally.consumer_errors >= landed)
    consumer.close()
    written = timed_out & set(tally.delivered)
    assert tally.consumer_errors == 0, f"an envelope that landed lost its payload: {tally.error_types}"
    assert len(tally.delivered) == landed == 4 + len(written), (landed, tally.row())
    tally.note = (
        f"{len(timed_out)} envelopes timed out while paused, {len(written)} of them written anyway and "
        "delivered whole; payloads of the others removed by gc"
    )
    sweep_orphans(tally, own_kafka, topic, stores)
    tally.check()


def test_producer_killed_mid_send_then_gc(own_kafka: ApacheKafka, redis_server: RedisServer) -> None:
    """SIGKILL while payloads are being written: gc removes what no envelope names and keeps every live one."""
    topic = new_topic(own_kafka, partitions=1)
    tally = Tally("producer SIGKILLed mid-send (reference route), then gc against the topic")
    prefix = f"fm{uuid.uuid4().hex[:6]}"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.sending_child", "--bootstrap", own_kafka.bootstrap_servers,
         "--topic", topic, "--redis-url", redis_server.url, "--prefix", prefix],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    for line in child.stdout:
        tally.acknowledged.add(line.split()[1])
        if len(tally.acknowledged) >= 12:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    tally.acknowledged |= {line.split()[1] for line in child.stdout.read().splitlines() if line.startswith("ACK")}
    store = RedisStore(redis_server.client(socket_timeout=2), prefix=prefix)
    stores: dict[str, Any] = {"redis": store}
    sent = {loc for loc, _ in store.list_locators(topic)} | set(store.list_pending(2**62))
    landed = envelope_locators(own_kafka, topic)
    tally.expected = {f"m{i:05d}": hashlib.sha256(payload(700_000, seed=i)).hexdigest() for i in range(len(sent) + 50)}
    consumer = HybridConsumer(consumer_conf(own_kafka, f"g-{uuid.uuid4().hex[:8]}"), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=lambda: len(tally.delivered) + tally.consumer_errors >= len(landed))
    consumer.close()
    sweep_orphans(tally, own_kafka, topic, stores)
    assert {loc for loc, _ in store.list_locators(topic)} == {loc for _, loc in landed}, "gc kept exactly the live"
    tally.expected = {k: v for k, v in tally.expected.items() if k in tally.delivered or k in tally.acknowledged}
    tally.note = (
        f"killed after {len(tally.acknowledged)} acks; {len(sent)} payloads written, {len(landed)} envelopes "
        f"in the topic, {tally.orphaned_before_gc} orphans removed by gc"
    )
    tally.check()
    assert tally.consumer_errors == 0 and tally.duplicated == 0, tally.row()


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
    producer = HybridProducer(
        producer_conf(own_kafka), policy=SizeThresholdPolicy(reference_above=500_000, store="redis"), stores=stores
    )
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
    assert row["lost"] == 0 and row["reported_unrecoverable"] == 12, row
    assert tally.error_types == {"PayloadNotFoundError": 12}, tally.error_types
    assert row["wrong_bytes"] == 0


def test_s3_unavailable_during_consume(
    own_kafka: ApacheKafka, s3_server: S3Server, s3_bucket: str, s3_prefix: str
) -> None:
    """S3 hangs mid-stream: typed errors, commits held; a restarted consumer delivers the rest."""
    if s3_server.external:
        pytest.skip("S3_ENDPOINT_URL points at an S3 this test cannot pause")
    topic = new_topic(own_kafka, partitions=1)
    tally = Tally("S3 unavailable (SIGSTOP) during consume, consumer restarted after it returns")
    client = s3_server.client(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})
    stores: dict[str, Any] = {"s3": S3Store(client, bucket=s3_bucket, prefix=s3_prefix)}
    producer = HybridProducer(
        producer_conf(own_kafka), policy=SizeThresholdPolicy(reference_above=500_000, store="s3"), stores=stores
    )
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
    assert set(tally.error_types) == {"StoreUnavailableError"}, tally.error_types
    consumer = HybridConsumer(consumer_conf(own_kafka, group), stores=stores)
    consumer.subscribe([topic])
    consume(tally, consumer, until=everything_delivered(tally))
    consumer.close()
    sweep_orphans(tally, own_kafka, topic, stores)
    tally.note = "typed errors while S3 hung, commit held at the first; the restarted group read on from there"
    tally.check()


def test_s3_unavailable_during_produce(
    own_kafka: ApacheKafka, s3_server: S3Server, s3_bucket: str, s3_prefix: str
) -> None:
    """S3 hangs while messages are sent by reference: each one lands (by fallback) or fails; gc leaves no orphan."""
    if s3_server.external:
        pytest.skip("S3_ENDPOINT_URL points at an S3 this test cannot pause")
    topic = new_topic(own_kafka, partitions=1)
    tally = Tally("S3 unavailable (SIGSTOP) during reference produce")
    client = s3_server.client(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})
    stores: dict[str, Any] = {"s3": S3Store(client, bucket=s3_bucket, prefix=s3_prefix)}
    producer = HybridProducer(
        producer_conf(own_kafka), policy=SizeThresholdPolicy(reference_above=500_000, store="s3"), stores=stores
    )

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
