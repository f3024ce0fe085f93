"""The full path of one raw record: commits loaded first, the pipeline's events acted on, nothing lost on an error."""

from __future__ import annotations

import logging
import uuid
from collections import deque
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from gateway import tracing
from gateway.consumer._commits import GroupCommits
from gateway.consumer._events import EventHandler
from gateway.consumer._inbox import FlowControl
from gateway.consumer._offsets import OffsetDriver
from gateway.consumer._record_processor import RecordProcessor
from gateway.consumer.config import parse_consumer_config
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.resolver import Resolver
from gateway.core.pipeline import ConsumerPipeline
from gateway.errors import InvalidSegmentError
from gateway.librdkafka.group_offsets import BindingGroupOffsets
from gateway.protocol.splitter import iter_split

PAYLOAD = bytes(range(256)) * 40


class Librdkafka:
    """Stands in for the inner consumer where the record path reaches it: the committed offsets it is asked for."""

    def __init__(self) -> None:
        self.asked: list[list[tuple[str, int]]] = []

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.asked.append(sorted((tp.topic, tp.partition) for tp in partitions))
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]


class Released:
    """Stands in for the fetch-ahead: which records were released."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, int, int]] = []

    def done(self, key: tuple[str, int, int]) -> None:
        self.keys.append(key)


class Queue:
    """The parts of :class:`~gateway.consumer._inbox.Inbox` the record path reads: what is queued, the fetcher."""

    def __init__(self) -> None:
        self.raw: deque[Message] = deque()
        self.refs = Released()


def _path(stores: dict[str, Any] | None = None) -> tuple[RecordProcessor, Librdkafka, Queue, ConsumerPipeline]:
    settings, conf = parse_consumer_config({"group.id": "g"})
    pipeline = settings.pipeline(awaits_commits=True)  # as the consumer's: it asks for each partition's commit
    inner, queue = Librdkafka(), Queue()
    flow = FlowControl(queue, pipeline)  # type: ignore[arg-type]
    offsets = OffsetDriver(pipeline, queue, GroupCommits(BindingGroupOffsets(inner), pipeline, None), flow)  # type: ignore[arg-type]
    events = EventHandler.for_consumer(
        settings, conf, pipeline, ReferenceFetcher(Resolver({})), None, logging.getLogger("test")
    )
    spans = tracing.ConsumerTelemetry({})
    path = RecordProcessor(pipeline, events, offsets, queue, stores or {}, flow, spans, keys_read=False)  # type: ignore[arg-type]
    return path, inner, queue, pipeline


def _segments(topic: str = "t", partition: int = 0, first_offset: int = 0) -> list[Message]:
    records = iter_split(topic, partition, 1, uuid.uuid4(), b"k", PAYLOAD, 4000, [("app", b"1")])
    return [
        Message(
            topic=topic,
            partition=partition,
            offset=first_offset + i,
            key=None if r.key is None else bytes(r.key),
            value=bytes(r.value or b""),
            headers=[(k, v) for k, v in r.headers or ()],
        )
        for i, r in enumerate(records)
    ]


def test_a_chunked_message_comes_out_of_its_last_segment_whole() -> None:
    path, inner, queue, _ = _path()
    first, *rest = _segments()
    queue.raw.extend(rest)  # what is queued behind the first record is loaded with it
    assert path.handle(first) is None
    assert inner.asked == [[("t", 0)]]
    outs = [path.handle(queue.raw.popleft()) for _ in range(len(rest))]
    assert outs[:-1] == [None] * (len(rest) - 1)
    whole = outs[-1]
    assert whole is not None
    assert whole.value() == PAYLOAD
    assert whole.offset() == len(rest)
    assert ("app", b"1") in (whole.headers() or [])
    assert inner.asked == [[("t", 0)]]  # once per partition, not per record


def test_an_error_event_is_handed_back_as_it_came_and_feeds_nothing() -> None:
    path, inner, _, pipeline = _path()
    eof = Message(topic="t", partition=0, offset=5, error=KafkaError(KafkaError._PARTITION_EOF))
    assert path.handle(eof) is eof
    assert inner.asked == []
    assert pipeline.metrics()["records"] == 0


def test_an_invalid_record_raises_carrying_it_and_the_next_record_goes_on() -> None:
    path, _, queue, _ = _path(stores={"redis": object()})
    bad = Message(topic="t", partition=0, offset=0, value=b"v", headers=[("_lm", b"\x01\x02")])
    with pytest.raises(InvalidSegmentError) as raised:
        path.handle(bad)
    assert raised.value.kafka_message is bad
    plain = Message(topic="t", partition=0, offset=1, value=b"plain")
    out = path.handle(plain)
    assert out is plain and out.value() == b"plain"
    assert queue.refs.keys == [("t", 0, 0), ("t", 0, 1)]  # the raise did not skip releasing the record's fetch-ahead


def test_without_stores_nothing_is_released() -> None:
    path, _, queue, _ = _path()
    path.handle(Message(topic="t", partition=0, offset=0, value=b"plain"))
    assert queue.refs.keys == []
