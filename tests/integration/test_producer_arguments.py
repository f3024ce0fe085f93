"""Bad ``produce`` arguments on a real broker and a real Redis: a clear error naming the argument, nothing written.

Each of these once got through: headers converted after the store write (an orphaned payload), a
key that shrank segments to one byte, ``partition=-5`` sent to partition 0, reserved header names
that made a plain record undeliverable, and misleading errors for ``route=``, ``stores=`` and
``on_delivery=``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from gateway import HybridProducer
from gateway.errors import ConfigurationError
from gateway.testing import KafkaService
from stores import RedisStore
from tests.helpers import payload


@pytest.fixture
def redis_store(redis_client: redis.Redis) -> RedisStore:
    return RedisStore(redis_client, prefix=f"pa{uuid.uuid4().hex[:6]}")


@pytest.fixture
def producer(kafka: KafkaService, redis_store: RedisStore) -> HybridProducer:
    return HybridProducer(kafka.producer_config(), stores={"redis": redis_store})


def written(store: RedisStore) -> list[bytes]:
    client: redis.Redis = store.client
    return sorted(client.scan_iter(match=f"{store.prefix}:*", count=1000))


def high_watermark(kafka: KafkaService, topic: str) -> int:
    """Records in every partition of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.consumer_config(f"hw-{uuid.uuid4().hex[:6]}"))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]) for p in partitions)
    finally:
        consumer.close()


def test_a_reference_send_with_bad_headers_writes_nothing(
    producer: HybridProducer, redis_store: RedisStore, topic: str
) -> None:
    with pytest.raises(TypeError) as info:
        producer.produce(topic, payload(50_000), route="reference:redis", headers=[("ok", b"1"), ("h", 5)])
    assert written(redis_store) == [], "no payload and no pending mark left behind"
    assert "header 'h' must be bytes or str" in str(info.value)
    assert producer.metrics()["rollbacks"] == 0


@pytest.mark.parametrize("route", ["plain", "chunked", "reference:redis"])
@pytest.mark.parametrize("name", ["_gw.ref", "_lm", "_t", "_so"])
def test_reserved_header_names_are_refused_on_every_route(
    kafka: KafkaService, producer: HybridProducer, redis_store: RedisStore, topic: str, route: str, name: str
) -> None:
    with pytest.raises(ConfigurationError, match="reserved"):
        producer.produce(topic, b"v" * 100, route=route, headers=[(name, b"\x01")])
    producer.flush(10)
    assert written(redis_store) == []
    assert high_watermark(kafka, topic) == 0, "nothing reached the topic"


def test_a_negative_partition_is_refused_on_the_chunked_route(
    kafka: KafkaService, producer: HybridProducer, topic: str
) -> None:
    with pytest.raises(ConfigurationError, match="partition must be -1"):
        producer.produce(topic, payload(2_000_000), partition=-5)
    producer.flush(10)
    assert high_watermark(kafka, topic) == 0


def test_a_key_near_the_size_limit_is_refused_instead_of_one_byte_segments(
    kafka: KafkaService, producer: HybridProducer, topic: str
) -> None:
    with pytest.raises(ConfigurationError, match="bytes per segment"):
        producer.produce(topic, b"v" * 50, key=b"k" * 999_400, route="chunked")
    producer.flush(10)
    assert high_watermark(kafka, topic) == 0


@pytest.mark.parametrize(("kwargs", "error", "names"), [
    ({"route": 123}, TypeError, "route must be"),
    ({"on_delivery": 42}, TypeError, "on_delivery must be callable"),
    ({"key": 5}, TypeError, "key must be bytes or str"),
    ({"partition": "1"}, TypeError, "partition must be an int"),
])  # fmt: skip
def test_bad_arguments_name_themselves(
    producer: HybridProducer, topic: str, kwargs: dict[str, Any], error: type[Exception], names: str
) -> None:
    with pytest.raises(error, match=names):
        producer.produce(topic, b"v", **kwargs)


@pytest.mark.parametrize(("stores", "names"), [
    ("redis", "stores must be a mapping"),
    ({"redis": None}, r"stores\['redis'\] is not a store"),
])  # fmt: skip
def test_bad_stores_name_themselves(kafka: KafkaService, stores: Any, names: str) -> None:
    with pytest.raises(TypeError, match=names):
        HybridProducer(kafka.producer_config(), stores=stores)
