"""A default producer never writes what a default consumer cannot read, on every route.

Before: the default producer chunked a 300 MB value in 1.35 s, and the default consumer refused
anything over its 32 MB buffer on every poll, so the message was never delivered. Now the chunked
route's ``large.message.max.bytes`` and the consumer's ``message.assembler.buffer.capacity`` share
one default, as do both ends' ``reference.max.payload.bytes``; a value above its route's limit is
refused by ``produce`` before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from confluent_kafka import TopicPartition

from gateway import HybridConsumer, HybridProducer, MessageTooLargeError, SizeThresholdPolicy
from gateway.config import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_PAYLOAD_BYTES
from gateway.consumer.config import parse_consumer_config
from gateway.core.assembler import buffered_cost
from gateway.producer._config import parse_producer_config
from gateway.protocol.headers import TIMESTAMP_HEADER
from gateway.testing import KafkaService, RedisServer
from stores import RedisStore
from tests.helpers import consume_all, payload, sha


def test_both_ends_share_their_defaults() -> None:
    producer, _ = parse_producer_config({})
    consumer, _ = parse_consumer_config({"group.id": "g"})
    assert producer.max_chunked_bytes == consumer.max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES
    assert consumer.reference_rules.max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES


def _end_offset(kafka: KafkaService, consumer_conf: dict[str, Any], topic: str) -> int:
    from confluent_kafka import Consumer

    probe = Consumer({**consumer_conf, "group.id": "probe"})
    try:
        return int(probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        probe.close()


def _largest_accepted(config: dict[str, Any], key: bytes) -> int:
    """The largest value whose segments and bookkeeping fit a default consumer's buffer, found by search."""
    settings, _ = parse_producer_config(config)
    segment = settings.segment_size_for(key, [(TIMESTAMP_HEADER, b"\0" * 8)])
    fits = [s for s in range(DEFAULT_MAX_MESSAGE_BYTES - 20_000, DEFAULT_MAX_MESSAGE_BYTES + 1)
            if buffered_cost(s, -(-s // segment)) <= DEFAULT_MAX_MESSAGE_BYTES]  # fmt: skip
    return max(fits)


# the mock cluster hands out one 800 KB segment every few seconds (one batch per fetch, then a full
# fetch wait), so 40 of them do not arrive within a minute there: bulk fetch is what "benchmarks" marks
@pytest.mark.requires("benchmarks")
def test_the_largest_chunked_value_a_default_producer_accepts_reaches_a_default_consumer(
    kafka: KafkaService, topic: str, producer_config: dict[str, Any], consumer_config: Callable[..., dict[str, Any]]
) -> None:
    producer = HybridProducer(producer_config)  # SizeThresholdPolicy(): chunks everything over a segment
    size = _largest_accepted(producer_config, b"largest")
    largest = payload(size, seed=3)
    producer.produce(topic, largest, key=b"largest")
    assert producer.flush(60) == 0
    end = _end_offset(kafka, consumer_config(), topic)
    with pytest.raises(MessageTooLargeError, match=r"large\.message\.max\.bytes=32000000.*message\.assembler"):
        producer.produce(topic, b"\0" * (size + 1), key=b"largest")
    assert producer.flush(10) == 0
    producer.close()
    assert _end_offset(kafka, consumer_config(), topic) == end  # not one segment of it was written

    consumer = HybridConsumer(consumer_config())  # every default: a 32 MB buffer
    consumer.subscribe([topic])
    try:
        got, errors = consume_all(consumer, 1, timeout=60)
    finally:
        consumer.close()
    assert errors == []
    assert [(m.key(), sha(m.value())) for m in got] == [(b"largest", sha(largest))]


def test_the_reference_route_refuses_what_consumers_would_refuse_before_the_store_write(
    topic: str,
    producer_config: dict[str, Any],
    consumer_config: Callable[..., dict[str, Any]],
    redis_server: RedisServer,
) -> None:
    """Both ends at one lowered ``reference.max.payload.bytes`` (2 GB is too much for a test machine)."""
    limit = 3_000_000
    client = redis.Redis.from_url(redis_server.url)
    prefix = f"limits-{topic}"
    stores = {"redis": RedisStore(client, prefix=prefix)}
    producer = HybridProducer(
        {**producer_config, "reference.max.payload.bytes": limit},
        policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
        stores=stores,
    )
    largest = payload(limit, seed=5)
    producer.produce(topic, largest, key=b"largest")
    with pytest.raises(MessageTooLargeError, match=r"reference\.max\.payload\.bytes=3000000"):
        producer.produce(topic, b"\0" * (limit + 1), key=b"too-large")
    assert producer.flush(30) == 0
    producer.close()
    payloads = [k for k in client.scan_iter(f"{prefix}:{topic}:*")]
    assert len(payloads) == 1 and client.strlen(payloads[0]) == limit  # the refused one was never written
    assert client.zcard(f"{prefix}:pending") == 0  # nor marked pending

    consumer = HybridConsumer({**consumer_config(), "reference.max.payload.bytes": limit}, stores=stores)
    consumer.subscribe([topic])
    try:
        got, errors = consume_all(consumer, 1, timeout=30)
    finally:
        consumer.close()
    assert errors == []
    assert [(m.key(), sha(m.value())) for m in got] == [(b"largest", sha(largest))]
