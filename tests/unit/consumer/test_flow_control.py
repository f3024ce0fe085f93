"""Waiting for room on the librdkafka side (FlowControl): pause, seek back, resume; the app's pauses kept apart."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message, TopicPartition

from gateway.consumer._inbox import FlowControl, Inbox
from gateway.consumer.config import parse_consumer_config
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.resolver import Resolver
from gateway.core.flow import Wait
from gateway.core.pipeline import FlowChange

P0, P1 = ("t", 0), ("t", 1)


class Librdkafka:
    """Stands in for the inner consumer where flow control reaches it: what it was told, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("pause", sorted((tp.topic, tp.partition) for tp in partitions)))

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("resume", sorted((tp.topic, tp.partition) for tp in partitions)))

    def seek(self, partition: TopicPartition) -> None:
        self.calls.append(("seek", (partition.topic, partition.partition, partition.offset)))


def _flow() -> tuple[FlowControl, Librdkafka, Inbox]:
    settings, _ = parse_consumer_config({"group.id": "g"})
    pipeline = settings.pipeline(awaits_commits=True, pauses=True)
    inner = Librdkafka()
    queue = Inbox(inner, 500, ReferenceFetcher(Resolver({})), 2_000_000, pipeline)
    return FlowControl(queue, pipeline), inner, queue


def _record(partition: int, offset: int) -> Message:
    return Message(topic="t", partition=partition, offset=offset, value=b"v")


def test_a_waiting_partition_is_paused_sought_back_and_its_queued_records_dropped_then_resumed_from_there() -> None:
    flow, inner, queue = _flow()
    queue.enqueue([_record(1, 7), _record(0, 3), _record(1, 8)])
    flow.apply(FlowChange((Wait(P1, 5),), ()))
    assert inner.calls == [("pause", [P1]), ("seek", ("t", 1, 5))]
    assert [(m.partition(), m.offset()) for m in queue.raw] == [(0, 3)]  # read again from 5 instead
    inner.calls.clear()
    flow.apply(FlowChange((), (Wait(P1, 5),)))
    assert inner.calls == [("resume", [P1]), ("seek", ("t", 1, 5))]  # a resume may restart from the last handed out
    assert flow.paused == {}


def test_the_applications_own_pauses_are_kept_apart() -> None:
    flow, inner, _ = _flow()
    flow.user_pause([TopicPartition("t", 1)])
    flow.apply(FlowChange((Wait(P1, 5),), ()))
    flow.apply(FlowChange((Wait(P0, 2),), ()))
    inner.calls.clear()
    flow.user_resume([TopicPartition("t", 0)])  # paused for room: it goes on only once there is room
    assert inner.calls == []
    flow.apply(FlowChange((), (Wait(P0, 2), Wait(P1, 5))))
    assert inner.calls == [("resume", [P0]), ("seek", ("t", 0, 2)), ("seek", ("t", 1, 5))]  # P1 stays paused
    inner.calls.clear()
    flow.user_resume([TopicPartition("t", 1)])
    assert inner.calls == [("resume", [P1])]


def test_a_partition_paused_for_room_that_leaves_is_resumed_and_forgotten() -> None:
    flow, inner, _ = _flow()
    flow.apply(FlowChange((Wait(P1, 5),), ()))
    inner.calls.clear()
    flow.settle([P1, P0])  # revoked (or sought): nothing of it stays paused, in librdkafka or in our books
    assert inner.calls == [("resume", [P1])]
    assert flow.paused == {}
    flow.settle([P1])
    assert inner.calls == [("resume", [P1])]  # assigned again later: starts resumed, nothing to undo
