"""The producer's routing on compacted topics, on every backend: the brokers' answer is replaced
by a describer that says which topics are compacted, so the mock cluster (which has no
DescribeConfigs) runs it too; tests/integration/test_compacted_topics.py asks Apache Kafka itself."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import gateway.producer._parts
from gateway import HybridProducer, SizeThresholdPolicy
from gateway.errors import StoreUnavailableError
from gateway.producer._compaction import CompactedTopicError
from gateway.testing import KafkaService
from stores import RedisStore, S3Store

SEGMENT = 100_000


@pytest.fixture
def asked() -> list[str]:
    """Every topic whose cleanup.policy the producer asked for, in order."""
    return []


@pytest.fixture
def compacted_topics(monkeypatch: pytest.MonkeyPatch, asked: list[str]) -> set[str]:
    """Topics the producer will be told are compact-only; ``<topic>-cd`` ones are ``compact,delete``."""
    compacted: set[str] = set()

    def answer(topic: str) -> str:
        asked.append(topic)
        return "compact" if topic in compacted else "compact,delete" if topic.endswith("-cd") else "delete"

    def describer(conf: Any, **_: Any) -> Callable[[str], str]:
        return answer

    monkeypatch.setattr(gateway.producer._parts, "AdminDescriber", describer)
    return compacted


def _producer(kafka: KafkaService, redis: RedisStore | None, **policy: Any) -> HybridProducer:
    return HybridProducer(
        {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT},
        policy=SizeThresholdPolicy(**policy),
        stores={"redis": redis} if redis is not None else None,
    )


def test_more_than_one_segment_goes_by_reference_and_one_segment_stays_as_it_is(
    kafka: KafkaService, topic: str, compacted_topics: set[str], redis_client: Any
) -> None:
    compacted_topics.add(topic)
    store = RedisStore(redis_client, prefix=topic, ttl_seconds=3600)
    with _producer(kafka, store, store="redis") as producer:
        assert producer.route_for(topic, SEGMENT).kind.value == "plain"
        assert producer.route_for(topic, SEGMENT + 1) == producer.route_for(topic, 50 * SEGMENT)
        assert str(producer.route_for(topic, SEGMENT + 1)) == "reference:redis"
        producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k")
        producer.produce(topic, None, key=b"k")  # a tombstone stays a null record
        with pytest.raises(CompactedTopicError, match="route=chunked"):
            producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k", route="chunked")
        assert producer.flush(30) == 0
        metrics = producer.metrics()
    assert metrics["chunked.messages"] == 0 and metrics["reference.messages"] == 1
    (locator, _), *rest = store.list_locators(topic)
    assert rest == [] and redis_client.ttl(locator.split("#")[0] + ":0") == -1


def test_on_compact_delete_topics_payloads_keep_the_stores_ttl(
    kafka: KafkaService, compacted_topics: set[str], redis_client: Any
) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}-cd"
    kafka.create_topic(topic, 1)
    store = RedisStore(redis_client, prefix=topic, ttl_seconds=3600)
    try:
        with _producer(kafka, store, store="redis") as producer:
            producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k")
            assert producer.flush(30) == 0
            assert producer.metrics()["chunked.messages"] == 0
        (locator, _), *rest = store.list_locators(topic)
        assert rest == [] and 0 < redis_client.ttl(locator.split("#")[0] + ":0") <= 3600
    finally:
        kafka.delete_topic(topic)


def test_without_a_store_the_message_fails_before_anything_is_sent(
    kafka: KafkaService, topic: str, compacted_topics: set[str]
) -> None:
    compacted_topics.add(topic)
    with _producer(kafka, None) as producer:
        with pytest.raises(CompactedTopicError, match="compaction keeps only the last segment"):
            producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k")
        assert producer.metrics()["chunked.messages"] == 0


def test_a_down_store_fails_fast_instead_of_chunking(
    kafka: KafkaService, topic: str, compacted_topics: set[str], redis_client: Any
) -> None:
    compacted_topics.add(topic)
    store = RedisStore(redis_client, prefix=topic)
    with _producer(kafka, store, store="redis") as producer:
        now = int(time.time() * 1000)
        for _ in range(3):  # three failures mark it unhealthy until the next probe, 5 s on
            producer.health["redis"].failure(now)
        with pytest.raises(StoreUnavailableError):
            producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k")
        assert producer.metrics()["chunked.messages"] == 0


def test_other_topics_chunk_as_before(kafka: KafkaService, topic: str, compacted_topics: set[str]) -> None:
    with _producer(kafka, None) as producer:
        producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k")
        assert producer.flush(30) == 0
        assert producer.metrics()["chunked.messages"] == 1


def test_an_object_stores_reference_is_written_without_asking_and_its_fallback_asks(
    kafka: KafkaService,
    topic: str,
    compacted_topics: set[str],
    asked: list[str],
    s3_client: Any,
    s3_bucket: str,
    s3_prefix: str,
) -> None:
    """Issue 42.3: a fresh producer's first reference to an object store waited for the topic's
    cleanup.policy (an admin connection and two requests), which changes nothing such a store writes;
    the fallback to chunks, which it does change, asks when it comes up and is refused as before."""
    compacted_topics.add(topic)
    store = S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix)
    config = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
    policy = SizeThresholdPolicy(reference_above=SEGMENT, store="s3")
    with HybridProducer(config, policy=policy, stores={"s3": store}) as producer:
        producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k")
        producer.produce(topic, b"w" * (3 * SEGMENT), key=b"k", route="reference:s3")
        assert producer.flush(30) == 0
        assert asked == [], "no cleanup.policy lookup before an object store's write"
        assert producer.metrics()["reference.messages"] == 2
        now = int(time.time() * 1000)
        for _ in range(3):  # three failures mark it unhealthy until the next probe, 5 s on
            producer.health["s3"].failure(now)
        with pytest.raises(StoreUnavailableError):  # three segments on a compacted topic: never chunks
            producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k")
        assert asked == [topic] and producer.metrics()["chunked.messages"] == 0
        other = f"{topic}-other"
        kafka.create_topic(other, 1)
        try:
            producer.produce(other, b"v" * (3 * SEGMENT), key=b"k")  # not compacted: falls back to chunks
            assert producer.flush(30) == 0
            assert asked == [topic, other] and producer.metrics()["chunked.messages"] == 1
        finally:
            kafka.delete_topic(other)
    assert len(list(store.list_locators(topic))) == 2


@pytest.mark.parametrize("ttl", [None, 3600], ids=["no-ttl", "ttl"])
def test_a_redis_reference_asks_for_the_cleanup_policy_only_when_the_store_has_a_ttl(
    kafka: KafkaService, topic: str, compacted_topics: set[str], asked: list[str], redis_client: Any, ttl: int | None
) -> None:
    """Issue 42.3: a fresh producer's first Redis reference waited for the topic's cleanup.policy (an
    admin connection and two requests, about 20 ms) although a store without a TTL writes a compacted
    topic's payload exactly as any other: it never expires either. With a TTL the answer decides the
    payload's expiry, so it is asked, once, and a compact-only topic's payload gets none."""
    compacted_topics.add(topic)
    store = RedisStore(redis_client, prefix=topic, ttl_seconds=ttl)
    with _producer(kafka, store, reference_above=SEGMENT, store="redis") as producer:
        producer.produce(topic, b"v" * (3 * SEGMENT), key=b"k")
        producer.produce(topic, b"w" * (3 * SEGMENT), key=b"k", route="reference:redis")
        assert producer.flush(30) == 0
        assert asked == ([] if ttl is None else [topic])
        assert producer.metrics()["reference.messages"] == 2
    locators = [locator for locator, _ in store.list_locators(topic)]
    assert len(locators) == 2
    assert all(redis_client.ttl(locator.split("#")[0] + ":0") == -1 for locator in locators), "kept forever"
