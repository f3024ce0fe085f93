"""The local queue takes fewer records per fetch when they are large, so it never holds hundreds of segments."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message

from gateway.consumer._queue import RecordQueue
from gateway.consumer.config import FETCH_BATCH_BYTES, FETCH_QUEUE_BACKOFF_MS, QUEUED_MAX_KBYTES, parse_consumer_config
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.resolver import Resolver


class Librdkafka:
    """Stands in for the inner consumer: records of one size, and what ``consume`` was asked for."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.asked: list[int] = []
        self.offset = 0

    def _next(self) -> Message:
        self.offset += 1
        return Message(topic="t", partition=0, offset=self.offset, value=b"x" * self.size)

    def poll(self, timeout: float) -> Message:
        return self._next()

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.asked.append(num_messages)
        return [self._next() for _ in range(num_messages)]


@pytest.mark.parametrize(
    ("size", "taken"),
    [(100, 500), (16_000, 500), (16_001, 499), (100_000, 80), (1_000_000, 8), (8_000_000, 1), (30_000_000, 1)],
)
def test_a_fetch_holds_about_the_byte_bound(size: int, taken: int) -> None:
    inner = Librdkafka(size)
    queue = RecordQueue(inner, 500, ReferenceFetcher(Resolver({})), batch_bytes=8_000_000)
    assert queue.fetch(1.0)
    assert len(queue.raw) == taken
    assert inner.asked == ([taken - 1] if taken > 1 else [])


def test_librdkafkas_fetch_backoff_and_prefetch_are_small_unless_set() -> None:
    settings_default, conf = parse_consumer_config({"group.id": "g"})
    assert conf["fetch.queue.backoff.ms"] == FETCH_QUEUE_BACKOFF_MS == 3
    assert conf["queued.max.messages.kbytes"] == QUEUED_MAX_KBYTES == 12_288
    assert settings_default.batch_bytes == FETCH_BATCH_BYTES == 2_000_000
    settings, conf = parse_consumer_config(
        {"group.id": "g", "fetch.queue.backoff.ms": 500, "fetch.batch.bytes": 9, "queued.max.messages.kbytes": 65536}
    )
    assert conf["fetch.queue.backoff.ms"] == 500
    assert conf["queued.max.messages.kbytes"] == 65536
    assert settings.batch_bytes == 9
    assert "fetch.batch.bytes" not in conf


def test_linkedin_reset_keys_are_refused_with_the_way_out() -> None:
    with pytest.raises(ValueError, match=r"liclosest is LiKafkaConsumer's own policy.*use earliest"):
        parse_consumer_config({"group.id": "g", "auto.offset.reset": "liclosest"})
    with pytest.raises(ValueError, match=r"use auto\.offset\.reset=error"):
        parse_consumer_config({"group.id": "g", "exception.on.invalid.offset.reset": "true"})
    settings, conf = parse_consumer_config(
        {"group.id": "g", "exception.on.invalid.offset.reset": "false", "treat.bad.segments.as.payload": "true"}
    )
    assert settings.bad_segments_as_payload and "exception.on.invalid.offset.reset" not in conf
