"""Transactions with large messages on a real broker: an abort takes the store writes with it, and a
consume-transform-produce loop hands the consumer's safe offsets to the transaction."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.testing import KafkaService
from stores import RedisStore
from tests.helpers import consume_all, payload, sha

pytestmark = pytest.mark.requires("transactions")

SEGMENT = 100_000


def _transactional(kafka: KafkaService, store: RedisStore) -> HybridProducer:
    conf = {
        **kafka.producer_config(),
        "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
        "max.message.segment.bytes": SEGMENT,
    }
    producer = HybridProducer(
        conf, policy=SizeThresholdPolicy(reference_above=500_000, store="redis"), stores={"redis": store}
    )
    producer.init_transactions(60)
    return producer


def _read_committed(
    kafka: KafkaService, store: RedisStore, topic: str, want: int, group: str | None = None
) -> list[Any]:
    conf = {**kafka.consumer_config(group), "isolation.level": "read_committed", "enable.auto.commit": False}
    with HybridConsumer(conf, stores={"redis": store}) as consumer:
        consumer.subscribe([topic])
        messages, errors = consume_all(consumer, want, timeout=60)
        messages += consumer.consume(50, 3)  # nothing more may come
    assert errors == []
    return messages


def test_an_abort_leaves_no_payload_and_no_visible_record(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    store = RedisStore(redis_client, prefix=f"txn{uuid.uuid4().hex[:6]}")
    with _transactional(kafka, store) as producer:
        producer.begin_transaction()
        producer.produce(topic, payload(300_000), key=b"chunked")
        producer.produce(topic, payload(900_000), key=b"reference")
        producer.produce(topic, b"plain", key=b"plain")
        producer.flush(30)
        assert len(list(store.list_locators(topic))) == 1
        producer.abort_transaction(60)
        assert list(store.list_locators(topic)) == []
        producer.begin_transaction()
        producer.produce(topic, payload(900_000, seed=1), key=b"kept")
        producer.produce(topic, payload(300_000, seed=2), key=b"kept-chunked")
        producer.commit_transaction(60)
        assert len(list(store.list_locators(topic))) == 1
    messages = _read_committed(kafka, store, topic, 2)
    assert {m.key(): sha(m.value()) for m in messages} == {
        b"kept": sha(payload(900_000, seed=1)),
        b"kept-chunked": sha(payload(300_000, seed=2)),
    }


def test_a_transform_loop_commits_the_consumers_safe_offsets_in_its_transaction(
    kafka: KafkaService, redis_client: Any
) -> None:
    store = RedisStore(redis_client, prefix=f"txn{uuid.uuid4().hex[:6]}")
    source, target = f"tx-in-{uuid.uuid4().hex[:8]}", f"tx-out-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(source, partitions=1)
    kafka.create_topic(target, partitions=1)
    inputs = {b"plain": b"small", b"chunked": payload(250_000), b"reference": payload(800_000)}
    with _transactional(kafka, store) as feeder:
        feeder.begin_transaction()
        for key, value in inputs.items():
            feeder.produce(source, value, key=key)
        feeder.commit_transaction(60)
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = {**kafka.consumer_config(group), "isolation.level": "read_committed", "enable.auto.commit": False}
    with HybridConsumer(conf, stores={"redis": store}) as consumer, _transactional(kafka, store) as producer:
        consumer.subscribe([source])
        messages, errors = consume_all(consumer, len(inputs), timeout=60)
        assert errors == []
        producer.begin_transaction()
        for msg in messages:
            producer.produce(target, msg.value(), key=msg.key())
        offsets = consumer.safe_offsets()
        assert [tp.offset for tp in offsets] == [messages[-1].offset() + 1]
        assert offsets[0].metadata  # LinkedIn's "<HW>,<metadata>"
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        assert consumer.committed([TopicPartition(source, 0)], timeout=30)[0].offset == messages[-1].offset() + 1
    out = _read_committed(kafka, store, target, len(inputs))
    assert {m.key(): sha(m.value()) for m in out} == {k: sha(v) for k, v in inputs.items()}
    assert _read_committed(kafka, store, source, 0, group) == [], "the group resumes after what was transformed"
