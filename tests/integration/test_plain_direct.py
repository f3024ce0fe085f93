"""Small plain records skip the general path (``HybridProducer._produce_direct``): the same records,
callbacks, metrics and errors as the general path, which is forced here with ``route="plain"``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from gateway import HybridProducer
from gateway.errors import ConfigurationError
from gateway.testing import KafkaService


def _records(kafka: KafkaService, topic: str, n: int) -> list[tuple[Any, ...]]:
    consumer = Consumer(kafka.consumer_config(f"direct-{uuid.uuid4().hex[:6]}"))
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[Any, ...]] = []
    try:
        for _ in range(200):
            if len(out) == n:
                break
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


def _send_all(producer: HybridProducer, topic: str, reports: list[Any], **forced: Any) -> None:
    def report(err: Any, msg: Any) -> None:
        reports.append((err, msg.value(), msg.key()))

    producer.produce(topic, b"a", partition=0, **forced)
    producer.produce(topic, b"b", b"key", 0, report, 1_700_000_000_000, **forced)  # ../shared/API.md's order
    producer.produce(topic, b"", key=b"k", partition=0, callback=report, **forced)
    producer.produce(topic, value=b"d" * 1000, partition=0, timestamp=1_700_000_000_001, **forced)
    assert producer.flush(30) == 0


def test_the_direct_path_writes_what_the_general_path_writes(kafka: KafkaService) -> None:
    topics = [f"direct-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for topic in topics:
        kafka.create_topic(topic, 1)
    seen: dict[str, Any] = {}
    for topic, forced in zip(topics, ({}, {"route": "plain"}), strict=True):
        reports: list[Any] = []
        with HybridProducer(kafka.producer_config()) as producer:
            _send_all(producer, topic, reports, **forced)
            metrics, sizes = producer.metrics(), producer.histograms()["message_bytes"][("plain", "")]
        seen[topic] = (_records(kafka, topic, 4), reports, metrics, sizes)
    direct, general = seen[topics[0]], seen[topics[1]]
    records = direct[0]
    assert [r[:2] for r in records] == [(None, b"a"), (b"key", b"b"), (b"k", b""), (None, b"d" * 1000)]
    assert records[1][3] == 1_700_000_000_000 and records[3][3] == 1_700_000_000_001
    assert [r[:3] for r in records] == [r[:3] for r in general[0]]
    assert direct[1] == general[1] == [(None, b"b", b"key"), (None, b"", b"k")]
    for name in ("plain.messages", "plain.bytes", "plain.kafka.bytes"):
        assert direct[2][name] == general[2][name], name
    assert direct[2]["plain.messages"] == 4 and direct[2]["plain.bytes"] == 1002
    assert direct[3] == general[3]


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ({"partition": -2}, ConfigurationError, "partition must be -1"),
        ({"partition": True}, TypeError, "partition must be an int"),
        ({"timestamp": True}, TypeError, "timestamp must be an int"),
        ({"timestamp": 1.5}, TypeError, "timestamp must be an int"),
        ({"on_delivery": 5}, TypeError, "on_delivery must be callable"),
        ({"key": 12}, TypeError, "key"),
    ],
)
def test_bad_arguments_of_a_small_plain_record_raise_as_before(
    kafka: KafkaService, topic: str, args: dict[str, Any], error: type[Exception], match: str
) -> None:
    with HybridProducer(kafka.producer_config()) as producer:
        with pytest.raises(error, match=match):
            producer.produce(topic, b"small", **args)
        with pytest.raises(TypeError, match="topic must be a non-empty str"):
            producer.produce("", b"small")
        assert producer.metrics()["plain.messages"] == 0
