"""``reference.write.window`` end to end: Redis writes in flight, every record still in produce order."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from typing import Any

import redis
from confluent_kafka import KafkaError
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import StoreUnavailableError
from gateway.gc.sweeper import kafka_verifier, sweep
from gateway.testing import KafkaService, free_port
from stores import RedisStore
from tests.helpers import consume_all, payload, sha


class SlowRepliesRedisStore(RedisStore):
    """A Redis whose replies come 2 ms late, as over a real network: the window's writes wait on the wire."""

    def put_pipeline(self) -> Any:
        pipeline = super().put_pipeline()
        assert pipeline is not None
        confirm = pipeline.confirm

        def late_confirm() -> str:
            time.sleep(0.002)
            return confirm()

        pipeline.confirm = late_confirm  # type: ignore[method-assign]
        return pipeline


def windowed_producer(kafka: KafkaService, store: RedisStore, window: int = 4, **extra: Any) -> HybridProducer:
    config = {**kafka.producer_config(), "reference.write.window": window, **extra}
    policy = SizeThresholdPolicy(reference_above=50_000, store="redis")
    return HybridProducer(config, policy=policy, stores={"redis": store})


def test_records_of_every_route_arrive_in_produce_order(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: redis.Redis
) -> None:
    store = RedisStore(redis_client, prefix=f"win{uuid.uuid4().hex[:6]}")
    producer = windowed_producer(kafka, store)
    sizes = [100_000, 100_000, 10, 200_000, 1_500_000, 100_000, 20, 100_000, 100_000, 100_000, 3_000_000]
    routes = {1_500_000: "chunked"}
    reports: list[Any] = []
    for i, size in enumerate(sizes):
        producer.produce(
            topic,
            payload(size, i),
            key=b"%d" % i,
            partition=0,
            route=routes.get(size),
            on_delivery=lambda err, msg: reports.append(err),
        )
    assert len(producer) >= 1, "writes in flight count as messages in flight"
    assert producer.flush(60) == 0
    assert reports == [None] * len(sizes)
    assert store.list_pending(2**62) == [], "every mark cleared once its envelope was acknowledged"
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(sizes), timeout=60)
    consumer.close()
    assert not errors
    assert [m.key() for m in got] == [b"%d" % i for i in range(len(sizes))]
    assert [sha(m.value()) for m in got] == [sha(payload(s, i)) for i, s in enumerate(sizes)]
    metrics = producer.metrics()
    assert metrics["reference.messages"] == 8 and metrics["plain.messages"] == 2
    producer.close()


def test_poll_alone_sends_the_envelopes_in_flight(kafka: KafkaService, topic: str, redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, prefix=f"win{uuid.uuid4().hex[:6]}")
    producer = windowed_producer(kafka, store, window=16)
    reports: list[Any] = []
    producer.produce(topic, payload(100_000), on_delivery=lambda err, msg: reports.append((err, msg.value())))
    deadline = time.monotonic() + 30
    while not reports and time.monotonic() < deadline:
        producer.poll(0.1)
    assert reports == [(None, payload(100_000))]
    assert len(producer) == 0
    producer.close()


def test_a_store_down_after_produce_returned_falls_back_or_reports(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    dead = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 1))
    store = RedisStore(dead, prefix="nowhere")
    producer = windowed_producer(kafka, store, window=4, **{"reference.fallback.inline.max.bytes": 150_000})
    reports: list[tuple[int, Any]] = []
    sizes = [100_000, 300_000, 120_000]  # the middle one is over the fallback cap
    for i, size in enumerate(sizes):
        producer.produce(
            topic,
            payload(size, i),
            key=b"%d" % i,
            partition=0,
            on_delivery=lambda err, msg, i=i: reports.append((i, err)),
        )
    assert producer.flush(60) == 0
    assert sorted(i for i, err in reports if err is None) == [0, 2], "fell back to chunked"
    [(failed, err)] = [(i, err) for i, err in reports if err is not None]
    assert failed == 1 and isinstance(err.cause, StoreUnavailableError) and err.code() == KafkaError._TRANSPORT
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 2, timeout=60)
    consumer.close()
    assert not errors and [m.key() for m in got] == [b"0", b"2"]
    assert [m.value() for m in got] == [payload(100_000, 0), payload(120_000, 2)]
    assert producer.metrics()["fallbacks"] == 2
    producer.close()


def test_poll_from_another_thread_while_producing(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: redis.Redis
) -> None:
    """The confluent-kafka habit of serving reports on a thread of its own: the window is drained under its lock."""
    store = RedisStore(redis_client, prefix=f"win{uuid.uuid4().hex[:6]}")
    producer = windowed_producer(kafka, store, window=4)
    stop, failures = threading.Event(), []

    def serve() -> None:
        try:
            while not stop.is_set():
                producer.poll(0.001)
        except BaseException as exc:
            failures.append(exc)

    server = threading.Thread(target=serve)
    server.start()
    reports: list[Any] = []
    count = 150
    try:
        for i in range(count):
            producer.produce(
                topic, payload(60_000, i), key=b"%d" % i, partition=0, on_delivery=lambda err, msg: reports.append(err)
            )
    finally:
        stop.set()
        server.join()
    assert failures == []
    assert producer.flush(60) == 0 and reports == [None] * count
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, count, timeout=60)
    consumer.close()
    assert not errors and [m.key() for m in got] == [b"%d" % i for i in range(count)]
    assert all(m.value() == payload(60_000, i) for i, m in enumerate(got))
    producer.close()


def test_a_quiet_producer_still_sends_its_envelopes_so_gc_never_deletes_a_live_payload(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: redis.Redis
) -> None:
    """A write left in the window by a producer that makes no call is not an orphan for gc, at any moment.

    The producer's timeouts are short (2 s to deliver, 1 s to queue), the grace just above their sum
    plus the linger, as docs/stores.md advises; the producer then stays idle for longer than all of
    them while gc --delete runs at several moments, and only then is flushed.
    """
    store = RedisStore(redis_client, prefix=f"win{uuid.uuid4().hex[:6]}")
    extra = {"message.timeout.ms": 2000, "large.message.block.ms": 1000}
    producer = windowed_producer(kafka, store, window=16, **extra)
    reports: list[Any] = []
    count = 3
    for i in range(count):
        producer.produce(topic, payload(100_000, i), key=b"%d" % i, on_delivery=lambda err, msg: reports.append(err))
    grace_ms = 2000 + 1000 + 500
    verifier = kafka_verifier(kafka.client_conf(), timeout_s=30)
    deleted = []
    for wait in (0.5, 2.0, 2.0):  # idle, with gc running at 0.5 s, 2.5 s and 4.5 s
        time.sleep(wait)
        report = sweep({"redis": store}, grace_ms=grace_ms, verifier=verifier, dry_run=False)
        deleted += report.deleted
    assert deleted == [], "gc deleted the payload of a message the producer still held"
    assert producer.flush(30) == 0 and reports == [None] * count
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, count, timeout=60)
    consumer.close()
    assert errors == []
    assert [m.value() for m in got] == [payload(100_000, i) for i in range(count)]
    producer.close()


def test_every_record_leaves_in_produce_order_with_several_threads_and_a_poller(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: redis.Redis
) -> None:
    """Per producing thread, messages of every route arrive in the order that thread produced them.

    Three threads produce to one partition, each alternating reference messages (in the window),
    small plain records and now and then a chunked one, while a fourth thread polls. A record that
    overtook a reference message's envelope shows as an inversion of that thread's sequence.
    """
    store = SlowRepliesRedisStore(redis_client, prefix=f"win{uuid.uuid4().hex[:6]}")
    producer = windowed_producer(kafka, store, window=8, **{"max.message.segment.bytes": 100_000})
    stop, failures = threading.Event(), []
    threads, per_thread = 3, 120

    def serve() -> None:
        try:
            while not stop.is_set():
                producer.poll(0)
        except BaseException as exc:
            failures.append(exc)

    def size_of(i: int) -> int:
        return 30 if i % 2 else (250_000 if i % 17 == 0 else 60_000)

    def write(t: int) -> None:
        try:
            for i in range(per_thread):
                route = "chunked" if i % 17 == 0 else None
                producer.produce(topic, payload(size_of(i), i), key=b"%d:%d" % (t, i), partition=0, route=route)
        except BaseException as exc:
            failures.append(exc)

    server = threading.Thread(target=serve)
    writers = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns between any two bytecodes: every interleaving gets its chance
    try:
        server.start()
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
    finally:
        stop.set()
        server.join()
        sys.setswitchinterval(switch_interval)
    assert failures == []
    assert producer.flush(60) == 0
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, threads * per_thread, timeout=90)
    consumer.close()
    assert errors == []
    seen: dict[int, list[int]] = {t: [] for t in range(threads)}
    for message in got:
        t, i = map(int, message.key().split(b":"))
        assert message.value() == payload(size_of(i), i)
        seen[t].append(i)
    inversions = sum(a > b for t in seen for a, b in zip(seen[t], seen[t][1:], strict=False))
    assert inversions == 0
    assert seen == {t: list(range(per_thread)) for t in range(threads)}
    producer.close()
