"""What ``produce`` and ``on_delivery`` promise on every route, as confluent-kafka's ``Producer`` promises it.

* ``on_delivery`` gets a ``confluent_kafka.KafkaError`` on every route's failure, answering the usual
  idioms (issue 38, point 6);
* what Kafka would refuse is refused by ``produce`` before any store write (issue 38, point 7);
* the route counts key, headers and value against the record limit (issue 39, point 5).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway import HybridConsumer, HybridProducer
from gateway.aio import AIOHybridProducer
from gateway.errors import ConfigurationError, LargeMessageSendError, StoreError, StoreUnavailableError
from gateway.testing import KafkaService, free_port
from stores import RedisStore, S3Store
from tests.helpers import consume_all, payload, sha

TOPIC_LIMIT = 20_000
"""The topic's ``max.message.bytes``: far below the producer's, so only the broker refuses."""


def idioms(err: Any) -> dict[str, Any]:
    """What delivery callbacks written for confluent-kafka ask of ``err`` (each raised AttributeError somewhere)."""
    assert isinstance(err, KafkaError), f"{type(err).__name__} is not a KafkaError: {err!r}"
    return {
        "code": err.code(),
        "name": err.name(),
        "str": err.str(),
        "text": str(err),
        "retriable": err.retriable(),
        "fatal": err.fatal(),
        "abort": err.txn_requires_abort(),
    }


def redis_keys(client: redis.Redis, prefix: str) -> list[bytes]:
    return [key for key in client.scan_iter(match=f"{prefix}*") if not key.endswith((b":pending", b":written"))]


def s3_objects(client: Any, bucket: str, prefix: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [obj["Key"] for obj in listed.get("Contents", []) if "/_pending/" not in obj["Key"]]


@pytest.fixture
def small_topic(kafka: KafkaService) -> Iterator[str]:
    name = f"small-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(name, config={"max.message.bytes": str(TOPIC_LIMIT)})
    yield name
    kafka.delete_topic(name)


@pytest.mark.requires("topic_configs_enforced")
def test_on_delivery_gets_a_kafka_error_on_every_route(
    kafka: KafkaService,
    small_topic: str,
    redis_client: redis.Redis,
    s3_client: Any,
    s3_bucket: str,
    s3_prefix: str,
) -> None:
    """Plain, chunked, Redis and S3 references refused by the broker (rolled back): the same idioms answer."""
    prefix = f"dr{uuid.uuid4().hex[:6]}"
    stores = {
        "redis": RedisStore(redis_client, prefix=prefix),
        "s3": S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix),
    }
    producer = HybridProducer(kafka.producer_config(), stores=stores)
    reports: dict[str, Any] = {}
    big_header = {"h": b"x" * (TOPIC_LIMIT + 1)}  # the envelope record goes over the topic's limit with it
    sends = {
        "plain": {"value": payload(TOPIC_LIMIT * 2), "route": "plain"},
        "chunked": {"value": payload(1_500_000), "route": "chunked"},
        "reference-redis": {"value": payload(50_000), "route": "reference:redis", "headers": big_header},
        "reference-s3": {"value": payload(50_000), "route": "reference:s3", "headers": big_header},
    }
    for name, kwargs in sends.items():
        producer.produce(small_topic, on_delivery=lambda err, msg, name=name: reports.__setitem__(name, err), **kwargs)
    assert producer.flush(60) == 0
    assert sorted(reports) == sorted(sends)
    for name, err in reports.items():
        seen = idioms(err)
        assert seen["code"] == KafkaError.MSG_SIZE_TOO_LARGE and err == KafkaError.MSG_SIZE_TOO_LARGE, (name, seen)
        assert seen["name"] == "MSG_SIZE_TOO_LARGE" and not seen["retriable"] and not seen["fatal"], (name, seen)
        assert "too large" in seen["text"].lower(), (name, seen)
    assert isinstance(reports["chunked"].cause, LargeMessageSendError), "the typed cause is reachable"
    assert "Sent 0 of 2 segments" in reports["chunked"].str()
    assert redis_keys(redis_client, prefix) == [] and s3_objects(s3_client, s3_bucket, s3_prefix) == [], "rolled back"
    producer.close()


def test_a_store_failure_after_produce_returned_reaches_on_delivery_as_a_kafka_error(
    kafka: KafkaService, topic: str
) -> None:
    """Redis refusing connections (``_TRANSPORT``) or never answering (``_MSG_TIMED_OUT``), through the window."""
    with socket.socket() as black_hole:  # accepts connections (the kernel's backlog), answers nothing
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen(8)
        dead = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 1))
        mute = redis.Redis(port=black_hole.getsockname()[1], socket_timeout=1, retry=Retry(NoBackoff(), 1))
        stores = {"dead": RedisStore(dead, prefix="nowhere"), "mute": RedisStore(mute, prefix="nowhere")}
        config = {**kafka.producer_config(), "reference.write.window": 4}
        producer = HybridProducer(config, stores=stores)
        reports: dict[str, Any] = {}
        for name in stores:
            producer.produce(
                topic,
                payload(10_000),
                key=name.encode(),
                route=f"reference:{name}",
                on_delivery=lambda err, msg, n=name: reports.update({n: (err, msg)}),
            )
        assert producer.flush(60) == 0
    assert sorted(reports) == ["dead", "mute"]
    for name, (err, msg) in reports.items():  # what confluent-kafka's examples print on a failure
        assert (msg.topic(), msg.key(), msg.value(), msg.error()) == (topic, name.encode(), payload(10_000), err)
        reports[name] = err
    expected = {"dead": KafkaError._TRANSPORT, "mute": KafkaError._MSG_TIMED_OUT}
    for name, err in reports.items():
        seen = idioms(err)
        assert err.code() == expected[name] and seen["retriable"] and not seen["fatal"], (name, seen)
        assert isinstance(err.cause, StoreUnavailableError), "the typed cause is reachable"
        assert type(err.cause).__name__ in seen["str"]  # FallbackRefusedError (a forced route) names itself
    producer.close()


def test_a_store_failure_in_produce_is_raised_on_the_s3_route(
    kafka: KafkaService, topic: str, s3_client: Any, s3_bucket: str
) -> None:
    """S3 writes are not pipelined: an outage is known inside ``produce`` and raised there, typed; no callback."""
    import boto3
    from botocore.config import Config

    unreachable = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    producer = HybridProducer(kafka.producer_config(), stores={"s3": S3Store(unreachable, bucket=s3_bucket)})
    reports: list[Any] = []
    with pytest.raises(StoreError):
        producer.produce(topic, payload(10_000), route="reference:s3", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0 and reports == []
    producer.close()


@pytest.mark.requires("topic_configs_enforced")
def test_aio_raises_kafka_exception_with_the_same_kafka_error(kafka: KafkaService, small_topic: str) -> None:
    async def main() -> tuple[Any, Any]:
        seen: list[Any] = []
        async with AIOHybridProducer(kafka.producer_config()) as producer:
            with pytest.raises(KafkaException) as raised:
                await producer.produce(
                    small_topic, payload(1_500_000), route="chunked", on_delivery=lambda err, msg: seen.append(err)
                )
        return raised.value, seen[0]

    raised, reported = asyncio.run(main())
    assert raised.args[0] is reported, "as confluent_kafka.aio raises it: KafkaException(the callback's KafkaError)"
    assert idioms(reported)["code"] == KafkaError.MSG_SIZE_TOO_LARGE


# -- refused in produce, before any store write (issue 38, point 7) ------------------------------


def test_a_key_no_record_can_carry_is_refused_in_produce_on_every_route_before_any_store_write(
    kafka: KafkaService, topic: str, redis_client: redis.Redis, s3_client: Any, s3_bucket: str, s3_prefix: str
) -> None:
    prefix = f"big{uuid.uuid4().hex[:6]}"
    stores = {
        "redis": RedisStore(redis_client, prefix=prefix),
        "s3": S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix),
    }
    producer = HybridProducer(kafka.producer_config(), stores=stores)
    reports: list[Any] = []
    key = b"k" * 2_000_000
    for route, size in [("plain", 100), ("chunked", 100_000), ("reference:redis", 100_000), ("reference:s3", 100_000)]:
        with pytest.raises(KafkaException) as raised:
            producer.produce(
                topic, payload(size), key=key, route=route, on_delivery=lambda err, msg: reports.append(err)
            )
        error = raised.value.args[0]
        assert isinstance(error, KafkaError) and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, (route, raised.value)
        if route != "plain":  # the gateway's own refusal: a ConfigurationError too, naming the sizes
            assert isinstance(raised.value, ConfigurationError) and "key (2000000 bytes)" in str(raised.value), route
    assert producer.flush(30) == 0
    assert reports == [], "refused in produce: no callback follows"
    assert list(redis_client.scan_iter(match=f"{prefix}*")) == [], "no payload, not even a pending mark"
    assert s3_objects(s3_client, s3_bucket, s3_prefix) == [] and stores["s3"].list_pending(2**62) == []
    producer.close()


def test_an_unknown_partition_is_refused_in_produce_before_any_store_write(
    kafka: KafkaService, topic: str, redis_client: redis.Redis
) -> None:
    prefix = f"part{uuid.uuid4().hex[:6]}"
    config = {**kafka.producer_config(), "reference.write.window": 4}
    producer = HybridProducer(config, stores={"redis": RedisStore(redis_client, prefix=prefix)})
    producer.list_topics(topic, timeout=10)  # the metadata is known: librdkafka refuses plain records itself
    reports: list[Any] = []
    for route in ("plain", "chunked", "reference:redis"):
        with pytest.raises(KafkaException) as raised:
            producer.produce(
                topic, payload(100_000), partition=3, route=route, on_delivery=lambda e, m: reports.append(e)
            )
        assert raised.value.args[0].code() == KafkaError._UNKNOWN_PARTITION, (route, raised.value)
    producer.produce(
        topic, payload(100_000), partition=0, route="reference:redis", on_delivery=lambda e, m: reports.append(e)
    )
    assert producer.flush(30) == 0
    assert reports == [None], "only the message to partition 0 was sent"
    assert len(redis_keys(redis_client, prefix)) == 1, "no payload written for the refused message"
    producer.close()


# -- the route counts the whole record (issue 39, point 5) ---------------------------------------


@pytest.mark.requires("retention")  # about 8 MB per partition: the mock keeps 5 MiB
@pytest.mark.parametrize(
    ("key_size", "headers"),
    [(16, {"h": b"x" * 250_000}), (300_000, None), (200_000, [(f"h{i}", b"y" * 1_000) for i in range(50)])],
    ids=["250-KB-header", "300-KB-key-direct-path", "200-KB-key-and-50-headers"],
)
def test_every_size_around_the_record_limit_is_delivered_with_large_keys_and_headers(
    kafka: KafkaService, topic: str, consumer_config: Any, key_size: int, headers: Any
) -> None:
    producer = HybridProducer(kafka.producer_config())
    key = b"k" * key_size
    header_list = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    room = producer.settings.segment_room(key, header_list)
    sizes = sorted({*range(room - 2, room + 3), 760_000, 780_000, 800_000, 800_001, 2 * room + 1})
    sizes = [s for s in sizes if s > 0]
    reports: list[tuple[int, Any]] = []
    for i, size in enumerate(sizes):
        producer.produce(
            topic,
            payload(size, i),
            key=key,
            headers=headers,
            on_delivery=lambda err, msg, size=size: reports.append((size, err)),
        )
    assert producer.flush(120) == 0
    assert sorted(reports) == [(size, None) for size in sizes], "none refused by the broker"
    consumer = HybridConsumer(consumer_config(), stores={})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(sizes), timeout=120)
    consumer.close()
    assert not errors
    assert [sha(m.value()) for m in got] == [sha(payload(size, i)) for i, size in enumerate(sizes)]
    assert all(m.key() == key for m in got)
    m = producer.metrics()
    assert m["plain.messages"] == sum(size <= room for size in sizes), "plain exactly where the record fits"
    producer.close()
