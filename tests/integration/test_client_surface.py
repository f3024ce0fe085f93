"""confluent-kafka's methods beyond the core, on a real broker: context managers, close, produce_batch,
incremental assignment, stored offsets and timestamp lookups."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.testing import KafkaService
from stores import RedisStore
from tests.helpers import consume_all, payload, sha

SEGMENT = 100_000


def _producer(kafka: KafkaService, **kwargs: Any) -> HybridProducer:
    return HybridProducer({**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}, **kwargs)


def test_a_closed_producer_refuses_before_writing_anything(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    store = RedisStore(redis_client, prefix="surface")
    policy = SizeThresholdPolicy(reference_above=1_000, store="redis")
    with _producer(kafka, policy=policy, stores={"redis": store}) as producer:
        producer.produce(topic, payload(5_000), key=b"ref")
    assert len(list(store.list_locators(topic))) == 1
    for call in (lambda: producer.produce(topic, payload(5_000)), lambda: producer.flush(0), lambda: producer.poll(0)):
        with pytest.raises(RuntimeError, match="Producer has been closed"):
            call()
    assert len(list(store.list_locators(topic))) == 1, "no store write after close"
    assert producer.close() is False  # already closed
    with HybridConsumer(kafka.consumer_config(), stores={"redis": store}) as consumer:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, 1)
    assert errors == [] and sha(messages[0].value()) == sha(payload(5_000))
    with pytest.raises(RuntimeError):
        consumer.poll(0)


def test_a_closed_consumer_refuses_poll_with_records_still_queued(kafka: KafkaService, topic: str) -> None:
    with _producer(kafka) as producer:
        for i in range(5):
            producer.produce(topic, b"plain %d" % i)
    consumer = HybridConsumer(kafka.consumer_config())
    consumer.assign([TopicPartition(topic, 0, 0)])
    time.sleep(2)  # librdkafka prefetches all five, so the first fetch takes them together
    messages, _ = consume_all(consumer, 1)
    assert messages[0].value() == b"plain 0"
    assert len(consumer._inbox.raw) == 4  # fetched with it, waiting to be handed out
    consumer.close()
    for call in (lambda: consumer.poll(0), lambda: consumer.consume(5, 0)):
        with pytest.raises(RuntimeError):
            call()


def test_produce_batch_routes_each_message(kafka: KafkaService, topic: str) -> None:
    reports: list[Any] = []
    batch = [
        {"value": b"small", "key": b"a"},
        {"value": payload(350_000), "key": b"b", "headers": [("h", b"1")]},  # four segments
        {"value": b"own callback", "key": b"c", "callback": lambda err, msg: reports.append(("own", err))},
    ]
    with _producer(kafka) as producer:
        assert producer.produce_batch(topic, batch, on_delivery=lambda err, msg: reports.append(("batch", err))) == 3
        producer.flush(30)
    assert sorted(reports, key=str) == [("batch", None), ("batch", None), ("own", None)]
    assert all("_error" not in m for m in batch)
    with HybridConsumer(kafka.consumer_config()) as consumer:
        consumer.subscribe([topic])
        messages, _ = consume_all(consumer, 3)
    assert {m.key(): sha(m.value()) for m in messages} == {
        b"a": sha(b"small"),
        b"b": sha(payload(350_000)),
        b"c": sha(b"own callback"),
    }
    with pytest.raises(TypeError):
        HybridProducer(kafka.producer_config()).produce_batch(topic, "not a list")  # type: ignore[arg-type]


def test_stored_offsets_are_committed_as_safe_offsets(kafka: KafkaService, topic: str) -> None:
    with _producer(kafka) as producer:
        for key, value in ((b"p0", b"plain"), (b"c1", payload(250_000)), (b"p2", b"last")):
            producer.produce(topic, value, key=key)
        producer.flush(30)
    conf = kafka.consumer_config(**{"enable.auto.commit": False, "enable.auto.offset.store": False})
    with HybridConsumer(conf) as consumer:
        with pytest.raises(KafkaException):
            HybridConsumer(kafka.consumer_config()).store_offsets(offsets=[TopicPartition(topic, 0, 1)])
        consumer.incremental_assign([TopicPartition(topic, 0, 0)])
        messages, _ = consume_all(consumer, 3)
        assert [m.key() for m in messages] == [b"p0", b"c1", b"p2"]
        consumer.store_offsets(message=messages[1])  # the chunked one: its last segment's offset + 1
        assert consumer.commit(asynchronous=False) == [TopicPartition(topic, 0, messages[1].offset() + 1)]
        consumer.incremental_unassign([TopicPartition(topic, 0)])
        assert consumer.assignment() == []
        group = conf["group.id"]
    with HybridConsumer(kafka.consumer_config(group)) as again:  # the group resumes after the chunked message
        again.subscribe([topic])
        rest, _ = consume_all(again, 1)
        assert [m.key() for m in rest] == [b"p2"]
        assert again.consumer_group_metadata() is not None


@pytest.mark.requires("offsets_for_times")
def test_offsets_for_times_finds_the_first_segment_of_a_message(kafka: KafkaService, topic: str) -> None:
    base = int(time.time() * 1000) - 60_000
    with _producer(kafka) as producer:
        producer.produce(topic, b"early", key=b"e", timestamp=base)
        producer.produce(topic, payload(250_000), key=b"big", timestamp=base + 10_000)  # offsets 1..3
        producer.flush(30)
    with HybridConsumer(kafka.consumer_config()) as consumer:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 5_000)], timeout=30)
        assert [tp.offset for tp in found] == [1]
        assert consumer.cluster_id(30)
        consumer.assign([TopicPartition(topic, 0, found[0].offset)])
        messages, _ = consume_all(consumer, 1)
        assert [(m.key(), sha(m.value())) for m in messages] == [(b"big", sha(payload(250_000)))]


def test_a_consumer_not_given_the_store_gets_a_configuration_error_and_goes_on(
    kafka: KafkaService, topic: str, redis_client: Any
) -> None:
    """It raised ``StoreUnavailableError`` ("unavailable", and retried as an outage) for a missing ``stores=``."""
    from gateway.errors import ConfigurationError, StoreNotConfiguredError, StoreUnavailableError

    store = RedisStore(redis_client, prefix="unconfigured")
    policy = SizeThresholdPolicy(reference_above=1_000, store="redis")
    with _producer(kafka, policy=policy, stores={"redis": store}) as producer:
        producer.produce(topic, payload(5_000), key=b"ref")
        producer.produce(topic, b"plain after it", key=b"plain")
    conf = {**kafka.consumer_config(), "reference.error.max.attempts": 3}
    with HybridConsumer(conf) as consumer:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, 2)
    assert [type(e) for e in errors] == [StoreNotConfiguredError]
    assert isinstance(errors[0], ConfigurationError) and not isinstance(errors[0], StoreUnavailableError)
    assert "'redis'" in str(errors[0]) and "stores=" in str(errors[0])
    assert errors[0].kafka_message is not None and errors[0].kafka_message.offset() == 0
    assert [m.value() for m in messages] == [b"plain after it"]


def test_commit_with_nothing_delivered_and_after_close_behave_as_confluents(kafka: KafkaService, topic: str) -> None:
    """An idle consumer on a commit timer crashed on ``_NO_OFFSET``; after close, ``store_offsets`` was accepted."""
    with _producer(kafka) as producer:
        producer.produce(topic, b"one")
    heard: list[Any] = []
    conf = {**kafka.consumer_config(), "enable.auto.offset.store": False, "on_commit": lambda e, p: heard.append(e)}
    consumer = HybridConsumer(conf)
    consumer.assign([TopicPartition(topic, 0, 0)])
    assert consumer.commit() is None  # nothing delivered, nothing stored
    with pytest.raises(KafkaException) as info:
        consumer.commit(asynchronous=False)
    assert info.value.args[0].code() == KafkaError._NO_OFFSET
    messages, _ = consume_all(consumer, 1)
    assert heard and heard[0].code() == KafkaError._NO_OFFSET  # the asynchronous one, at the next poll
    consumer.store_offsets(messages[0])
    assert consumer.commit(asynchronous=False) == [TopicPartition(topic, 0, 1)]
    consumer.close()
    for call in (
        lambda: consumer.commit(),
        lambda: consumer.store_offsets(messages[0]),
        lambda: consumer.store_offsets(offsets=[TopicPartition(topic, 0, 1)]),
    ):
        with pytest.raises(RuntimeError, match=r"^Consumer closed$"):
            call()
