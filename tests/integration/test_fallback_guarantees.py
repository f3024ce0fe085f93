"""The store-down fallback on a real broker and a real redis-server: no guarantee the user configured is dropped.

With ``reference.encryption`` set, a message whose store is down is refused (``FallbackRefusedError``),
never sent inline in clear: the topic, read raw with confluent-kafka's own consumer, holds no byte of
it. Without encryption the message still goes chunked, as before. Either way a warning and a counter
say so. (The warning's rate limit, with a clock moved by hand: tests/unit/producer/reference/test_fallback.py.)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.encryption import LocalKeyRing
from gateway.errors import FallbackRefusedError, StoreUnavailableError
from gateway.testing import KafkaService, RedisServer
from stores import RedisStore
from tests.helpers import consume_all

RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")
LOGGER = "gateway.producer.reference.writer"
SIZE = 2_500_000  # the payload: under the inline cap, so only the encryption rule can refuse it


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server this test may stop (the session's is shared)."""
    with RedisServer(from_env=False) as server:
        yield server


def producer(kafka: KafkaService, server: RedisServer, **conf: Any) -> HybridProducer:
    client = redis.Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    return HybridProducer(
        {**kafka.producer_config(), "store.failure.threshold": 1, "store.probe.interval.ms": 60_000, **conf},
        policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
        stores={"redis": RedisStore(client, prefix="gwfb")},
        key_provider=RING,
    )


def raw_topic(kafka: KafkaService, topic: str) -> list[Any]:
    """Every record of the topic's one partition, as confluent-kafka's own consumer reads it (no gateway code)."""
    consumer = Consumer({**kafka.consumer_config(None), "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + 60
        while (not out or out[-1].offset() < high - 1) and high > 0 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
        assert high == 0 or (out and out[-1].offset() == high - 1), f"read {len(out)} records of {high}"
        return out
    finally:
        consumer.close()


def holds_any_of(record: Any, value: bytes) -> bool:
    """Whether key, value or a header of ``record`` carries a 64-byte stretch of ``value`` from anywhere in it."""
    fields = [record.value() or b"", record.key() or b"", *(v or b"" for _, v in record.headers() or [])]
    stretches = {value[at : at + 64] for at in range(0, len(value) - 64, 4096)}
    return any(stretch in field for field in fields for stretch in stretches)


def refusal_of(error: Any) -> FallbackRefusedError | None:
    """The typed refusal, whether it came as itself or wrapped (a delivery callback's error, its cause)."""
    seen = 0
    while error is not None and seen < 5:
        if isinstance(error, FallbackRefusedError):
            return error
        error = getattr(error, "cause", None) or error.__cause__ or (error.args[0] if error.args else None)
        seen += 1
    return None


@pytest.mark.parametrize("window", [1, 8], ids=["write-in-produce", "write-window"])
def test_store_down_with_encryption_refuses_and_kafka_holds_no_plaintext(
    kafka: KafkaService, topic: str, own_redis: RedisServer, window: int, caplog: pytest.LogCaptureFixture
) -> None:
    sealed = os.urandom(SIZE)
    with producer(kafka, own_redis, **{"reference.encryption": "aes256-gcm", "reference.write.window": window}) as p:
        p.produce(topic, sealed, key=b"before")  # healthy: sealed in Redis
        assert p.flush(30) == 0 and p.metrics()["reference.messages"] == 1
        own_redis.stop()
        values = [os.urandom(SIZE) for _ in range(3)]  # the first write finds it down, then health does
        outcomes: list[Any] = []
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            for i, value in enumerate(values):
                try:
                    p.produce(topic, value, key=b"down%d" % i, on_delivery=lambda err, msg: outcomes.append(err))
                except StoreUnavailableError as exc:  # found down inside produce: raised there, nothing queued
                    outcomes.append(exc)
            # a plain record after them, so the scan below covers them
            p.produce(topic, b"marker", key=b"after", on_delivery=lambda err, msg: outcomes.append(err))
            assert p.flush(30) == 0
        refusals = [refusal_of(err) for err in outcomes]
        assert len(outcomes) == len(values) + 1 and outcomes[-1] is None, outcomes
        assert all(r is not None and r.reason == "encrypted" for r in refusals[:-1]), outcomes
        metrics = p.metrics()
    records = raw_topic(kafka, topic)
    assert [r.key() for r in records] == [b"before", b"after"], "nothing of the refused messages reached Kafka"
    assert not [r.key() for r in records for v in [sealed, *values] if holds_any_of(r, v)], "plaintext in Kafka"
    assert (metrics["fallbacks"], metrics["chunked.messages"]) == (0, 0)
    assert metrics["fallback.refused.encrypted"] == metrics["fallback.refused"] == len(values)
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert warnings and "refused" in warnings[0] and "reference.encryption" in warnings[0], warnings
    assert not any(v[:64].hex() in caplog.text for v in values)


def test_store_down_without_encryption_still_falls_back_with_a_warning(
    kafka: KafkaService, topic: str, consumer_config: Any, own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    with producer(kafka, own_redis, **{"reference.write.window": 1}) as p:
        own_redis.stop()
        values = [os.urandom(1_500_000) for _ in range(3)]  # chunked: 4.5 MB, kept whole by the mock cluster too
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            for i, value in enumerate(values):
                p.produce(topic, value, key=b"down%d" % i)
            assert p.flush(30) == 0
        metrics = p.metrics()
    assert (metrics["fallbacks"], metrics["chunked.messages"], metrics["fallback.refused"]) == (3, 3, 0)
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "sent inline (chunked) instead" in warnings[0], "one line, the rest rate-limited"
    assert metrics["warnings.suppressed"] == 2
    consumer = HybridConsumer(consumer_config(), stores={})
    consumer.subscribe([topic])
    try:
        got, errors = consume_all(consumer, len(values))
    finally:
        consumer.close()
    assert not errors and {m.key(): m.value() for m in got} == {b"down%d" % i: v for i, v in enumerate(values)}
