"""``reference.write.window`` end to end: Redis writes in flight, every record still in produce order."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import StoreUnavailableError
from gateway.testing import KafkaService, free_port
from stores import RedisStore
from tests.helpers import consume_all, payload, sha


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
    assert failed == 1 and isinstance(err, StoreUnavailableError)
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
