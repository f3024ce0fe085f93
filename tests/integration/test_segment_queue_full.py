"""A chunked message larger than librdkafka's local queue: ``large.message.block.ms`` decides whether the
producer waits for room (serving delivery reports) or says at once how many segments went out."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gateway import HybridProducer
from gateway.errors import LargeMessageSendError
from gateway.testing import KafkaService

SEGMENT = 10_000


def _producer(kafka: KafkaService, block_ms: int) -> HybridProducer:
    conf = kafka.producer_config(
        **{
            "queue.buffering.max.messages": 2,
            "max.message.segment.bytes": SEGMENT,
            "large.message.block.ms": block_ms,
            "linger.ms": 0,
        }
    )
    return HybridProducer(conf)


def test_a_full_queue_is_waited_out_within_the_block_time(kafka: KafkaService) -> None:
    topic = f"qfull-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1)
    reports: list[Any] = []
    value = bytes(range(256)) * 200  # 51 200 bytes: 6 segments through a queue of 2
    with _producer(kafka, 30_000) as producer:
        producer.produce(topic, value, partition=0, route="chunked", on_delivery=lambda e, m: reports.append((e, m)))
        assert producer.flush(30) == 0
        assert producer.metrics()["chunked.segments"] == 6
    [(err, msg)] = reports
    assert err is None and msg.value() == value


def test_no_block_time_raises_at_once_naming_what_went_out(kafka: KafkaService) -> None:
    topic = f"qfull-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1)
    with _producer(kafka, 0) as producer:
        with pytest.raises(LargeMessageSendError, match="Queued 2 of 6 segments") as info:
            producer.produce(topic, bytes(51_200), partition=0, route="chunked")
        assert isinstance(info.value.cause, BufferError)
        producer.flush(30)
