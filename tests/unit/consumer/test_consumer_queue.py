"""The local queue takes fewer records per fetch when they are large, so it never holds hundreds of segments."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message

from gateway.consumer._inbox import Inbox
from gateway.consumer.config import FETCH_BATCH_BYTES, FETCH_QUEUE_BACKOFF_MS, QUEUED_MAX_KBYTES, parse_consumer_config
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.resolver import Resolver
from gateway.core.pipeline import ConsumerPipeline


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
    queue = Inbox(inner, 500, ReferenceFetcher(Resolver({})), 8_000_000, ConsumerPipeline())
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


def _proven_queue() -> tuple[Inbox, ConsumerPipeline]:
    """A queue holding a fetched batch of 40 plain records, proven: its first record handed out."""
    pipeline = ConsumerPipeline()
    pipeline.commits.load_commit(("t", 0), None, None)
    queue = Inbox(Librdkafka(10), 40, ReferenceFetcher(Resolver({})), 8_000_000, pipeline)
    assert queue.fetch(1.0)
    first = queue.open_plain_batch()
    assert first is not None and first.offset() == 1 and queue.counted.left == 39
    return queue, pipeline


def _hand_out_by_count(queue: Inbox, n: int) -> None:
    """What ``poll()``'s hottest path does: no offset noted."""
    for _ in range(n):
        queue.take_counted()


def test_every_reader_of_delivered_offsets_sees_what_was_handed_out_by_count() -> None:
    """The queue owns the proven batch: the pipeline settles it before any answer, no caller has to."""
    queue, pipeline = _proven_queue()
    _hand_out_by_count(queue, 9)  # offsets 2..10
    assert pipeline.delivered(("t", 0)) == 10
    _hand_out_by_count(queue, 5)
    assert pipeline.commits.safe_offset(("t", 0)) == 16
    _hand_out_by_count(queue, 1)
    assert pipeline.progress()[("t", 0)][:2] == (17, 16)
    _hand_out_by_count(queue, 1)
    positions = pipeline.commits.current_positions({("t", 0): 999})
    assert positions == {("t", 0): 18}
    _hand_out_by_count(queue, 1)
    assert pipeline.metrics()["plain.messages"] == 18
    assert queue.counted.left == 22  # reading keeps the proof


def test_the_proof_ends_before_anything_else_changes_the_queue_or_a_partition() -> None:
    queue, pipeline = _proven_queue()
    _hand_out_by_count(queue, 4)
    pipeline.revoke([("t", 1)])  # another partition leaves: every HW is re-read, the proof ends first
    assert queue.counted.left == 0
    assert pipeline.delivered(("t", 0)) == 5  # noted before the HWs went
    queue, pipeline = _proven_queue()
    _hand_out_by_count(queue, 2)
    assert queue.pop().offset() == 4  # the full path takes the next record: what went before is noted first
    assert queue.counted.left == 0 and pipeline.delivered(("t", 0)) == 3
    queue, pipeline = _proven_queue()
    queue.drop(("t", 0))
    assert queue.counted.left == 0 and not queue.raw and pipeline.delivered(("t", 0)) == 1
