"""A fresh producer's first Redis reference message and first chunked message, on every backend (issue 42.3).

Its envelope, the message's only record, is queued after the store write; librdkafka learned of the
topic only then and, its bootstrap connection already dropped, waited for its fast leader query (100
ms) before connecting to the leader. And the first reference to a topic waited for the topic's
cleanup.policy (an admin connection and two requests) although a Redis store without a TTL writes the
same bytes on any topic. A first chunked message waited for the cleanup.policy lookup and only then
looked its leader up. What is asserted is what the send path asks for, never a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import gateway.producer._outbox
import gateway.producer._parts
from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.testing import KafkaService
from stores import RedisStore, S3Store
from tests.helpers import consume_all, payload

SEGMENT = 100_000


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def _observe_lookups(
    monkeypatch: pytest.MonkeyPatch, on_metadata: Callable[[str], None], on_describe: Callable[[str], None]
) -> None:
    """librdkafka's metadata requests and the cleanup.policy lookups of the producers made from here on, each
    reported before it runs; every lookup answers "delete"."""
    list_topics = gateway.producer._outbox.Outbox.list_topics

    def counted_list_topics(self: Any, topic: str | None = None, timeout: float = -1) -> Any:
        on_metadata(str(topic))
        return list_topics(self, topic, timeout)

    def describer(conf: Any, **_: Any) -> Callable[[str], str]:
        def answer(topic: str) -> str:
            on_describe(topic)
            return "delete"

        return answer

    monkeypatch.setattr(gateway.producer._outbox.Outbox, "list_topics", counted_list_topics)
    monkeypatch.setattr(gateway.producer._parts, "AdminDescriber", describer)


@pytest.fixture
def looked_up(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Topics asked of librdkafka (``list_topics``) and of the brokers' configs (cleanup.policy), in order."""
    asked: dict[str, list[str]] = {"metadata": [], "cleanup.policy": []}
    _observe_lookups(monkeypatch, asked["metadata"].append, asked["cleanup.policy"].append)
    return asked


def test_a_fresh_producer_learns_a_topic_when_its_first_reference_starts_and_asks_no_cleanup_policy(
    kafka: KafkaService, topic: str, redis_client: Any, looked_up: dict[str, list[str]]
) -> None:
    other = f"{topic}-b"
    kafka.create_topic(other, 1)
    try:
        store = RedisStore(redis_client, prefix=topic)
        config = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
        policy = SizeThresholdPolicy(reference_above=SEGMENT, store="redis")
        values = [payload(3 * SEGMENT, seed=i) for i in range(4)]
        with HybridProducer(config, policy=policy, stores={"redis": store}) as producer:
            producer.produce(topic, values[0], key=b"k0")  # by reference (the policy)
            producer.produce(topic, values[1], key=b"k1", route="reference:redis")
            producer.produce(other, values[2], key=b"k2", route="reference:redis")
            producer.produce(other, b"small", key=b"k3")  # plain: librdkafka learns its topic from the record itself
            producer.produce(f"{topic}-plain", b"small", key=b"k4")
            assert producer.flush(30) == 0
            metrics = producer.metrics()
            _wait_for(lambda: len(looked_up["metadata"]) >= 2)  # off the send path: it may still be under way
        assert sorted(looked_up["metadata"]) == sorted([topic, other]), "once per topic, for references only"
        assert looked_up["cleanup.policy"] == [], "a store without a TTL writes the same on any topic"
        assert metrics["reference.messages"] == 3
        with HybridConsumer(kafka.consumer_config(), stores={"redis": store}) as consumer:
            consumer.subscribe([topic, other])
            got, errors = consume_all(consumer, 4)
        assert errors == []
        assert sorted(m.value() for m in got) == sorted([values[0], values[1], values[2], b"small"])
    finally:
        kafka.delete_topic(other)


def test_a_topic_prepared_ahead_is_not_looked_up_again_by_its_first_reference(
    kafka: KafkaService, topic: str, redis_client: Any, looked_up: dict[str, list[str]]
) -> None:
    """``prepare_topics`` asked librdkafka for the topic on the caller's thread: the first send asks no more."""
    store = RedisStore(redis_client, prefix=topic)
    policy = SizeThresholdPolicy(reference_above=SEGMENT, store="redis")
    value = payload(3 * SEGMENT, seed=3)
    with HybridProducer(kafka.producer_config(), policy=policy, stores={"redis": store}) as producer:
        producer.prepare_topics([topic])
        producer.produce(topic, value, key=b"k")
        assert producer.flush(30) == 0
    assert looked_up["metadata"] == [topic], "asked once, by prepare_topics"
    with HybridConsumer(kafka.consumer_config(), stores={"redis": store}) as consumer:
        consumer.subscribe([topic])
        got, errors = consume_all(consumer, 1)
    assert errors == [] and [m.value() for m in got] == [value]


@pytest.fixture
def describe_waits_for_metadata(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """A cleanup.policy lookup that answers "delete" once librdkafka's metadata of the topic was asked for.

    It records, per lookup, whether that request had started by then (waiting up to 10 s for it, a bound
    that only keeps a regression from hanging) and on which thread it ran; no time is measured.
    """
    seen: dict[str, list[Any]] = {"overlapped": [], "threads": [], "metadata": []}
    started: dict[str, threading.Event] = {}

    def metadata(topic: str) -> None:
        seen["metadata"].append(topic)
        started.setdefault(topic, threading.Event()).set()

    def describe(topic: str) -> None:
        seen["threads"].append(threading.current_thread().name)
        seen["overlapped"].append(started.setdefault(topic, threading.Event()).wait(10))

    _observe_lookups(monkeypatch, metadata, describe)
    return seen


def test_the_first_chunked_message_looks_its_leader_up_while_its_cleanup_policy_is_asked(
    kafka: KafkaService, topic: str, describe_waits_for_metadata: dict[str, list[Any]]
) -> None:
    """Issue 42.3: the lookup and librdkafka's leader query run together, not one after the other."""
    seen = describe_waits_for_metadata
    value = payload(3 * SEGMENT, seed=7)
    config = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
    with HybridProducer(config) as producer:
        producer.produce(topic, value, key=b"k")  # chunked: three segments
        producer.produce(topic, value, key=b"k2")  # known now: neither asked again
        assert producer.flush(30) == 0
    assert seen["overlapped"] == [True], "the topic's metadata was not asked for while its cleanup.policy was"
    assert seen["metadata"] == [topic]
    with HybridConsumer(kafka.consumer_config()) as consumer:
        consumer.subscribe([topic])
        got, errors = consume_all(consumer, 2)
    assert errors == [] and [m.value() for m in got] == [value, value]


def test_warm_topics_asks_ahead_off_the_send_path_and_the_first_message_waits_for_that_answer(
    kafka: KafkaService, topic: str, describe_waits_for_metadata: dict[str, list[Any]]
) -> None:
    seen = describe_waits_for_metadata
    config = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
    with HybridProducer(config) as producer:
        producer.warm_topics([topic, topic])
        producer.produce(topic, payload(3 * SEGMENT, seed=8), key=b"k")
        assert producer.flush(30) == 0
        assert producer.prepare_topics([topic]) == {topic: "delete"}  # the answer warm_topics learned
    assert seen["overlapped"] == [True]
    assert len(seen["threads"]) == 1, "asked once: the send waited for the lookup warm_topics began"
    assert seen["threads"][0] != threading.current_thread().name


def _batch_markers(client: Any, bucket: str, prefix: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}_pending/")
    return sorted(entry["Key"] for entry in listed.get("Contents", []) if entry["Key"].endswith(".batch"))


def test_prepare_topics_journals_a_topics_next_ids_so_its_first_payload_writes_no_marker(
    kafka: KafkaService, topic: str, s3_client: Any, s3_bucket: str, s3_prefix: str
) -> None:
    """The batch marker of an object store, otherwise written by a topic's first payload, is written ahead."""
    store = S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix, journal_batch=8)
    policy = SizeThresholdPolicy(reference_above=1000, store="s3")
    values = [payload(5000, seed=i) for i in range(3)]
    with HybridProducer(kafka.producer_config(), policy=policy, stores={"s3": store}) as producer:
        producer.prepare_topics([topic])
        ahead = _batch_markers(s3_client, s3_bucket, s3_prefix)
        assert len(ahead) == 1, "prepare_topics wrote the topic's batch marker"
        producer.prepare_topics([topic])
        for i, value in enumerate(values):
            producer.produce(topic, value, key=b"k%d" % i)
        assert producer.flush(30) == 0
        assert _batch_markers(s3_client, s3_bucket, s3_prefix) == ahead, "the writes took their ids from it"
    assert _batch_markers(s3_client, s3_bucket, s3_prefix) == [], "settled and closed, the marker went"
    with HybridConsumer(kafka.consumer_config(), stores={"s3": store}) as consumer:
        consumer.subscribe([topic])
        got, errors = consume_all(consumer, 3)
    assert errors == [] and [m.value() for m in got] == values


def test_warm_topics_journals_ahead_in_the_background_but_not_for_a_peers_format(
    kafka: KafkaService, topic: str, s3_client: Any, s3_bucket: str, s3_prefix: str
) -> None:
    """AWS's pointer records take no ids from a batch: a marker written for them would name nothing written."""
    for fmt, expected in (("gateway", 1), ("aws", 0)):
        prefix = f"{s3_prefix}{fmt}/"
        store = S3Store(s3_client, bucket=s3_bucket, prefix=prefix)
        config = {**kafka.producer_config(), "reference.format": fmt}
        with HybridProducer(
            config, policy=SizeThresholdPolicy(reference_above=1000, store="s3"), stores={"s3": store}
        ) as producer:
            producer.warm_topics([topic])
            _wait_for(
                lambda prefix=prefix, expected=expected: len(_batch_markers(s3_client, s3_bucket, prefix)) >= expected
            )
            producer.prepare_topics([topic])  # the warm-up is done by the time this returns
            assert len(_batch_markers(s3_client, s3_bucket, prefix)) == expected, fmt
