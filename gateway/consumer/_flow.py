"""The librdkafka side of waiting for room: pause, seek back, resume (decided in :mod:`gateway.core.flow`).

When the assembler's buffer is full, the pipeline answers with a
:class:`~gateway.core.events.FlowChange`. A partition that must wait is paused and sought back to
the offset it is to be read again from; the seek is what makes librdkafka drop the records of it
already prefetched (a pause alone leaves them to be returned), and the records of it already in
the consumer's own queue are dropped here. Nothing of it is lost (it is read again) and nothing is
handed out twice (the pipeline passes over what it had handled). On resume the partition is sought
to the same offset again, since a resume may restart fetching from the last position handed out.

The application's own ``pause``/``resume`` are kept apart: a partition it paused stays paused
when the pipeline lets it go on, and its ``resume`` does not undo a pause for room.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from gateway.consumer._queue import RecordQueue
from gateway.core.events import Event, FlowChange
from gateway.core.flow import Wait
from gateway.core.pipeline import ConsumerPipeline
from gateway.protocol.records import TopicPartitionKey

log = logging.getLogger(__name__)


class FlowControl:
    """Partitions paused for room (ours) and partitions the application paused (its own)."""

    def __init__(self, consumer: Any, queue: RecordQueue, pipeline: ConsumerPipeline) -> None:
        self._consumer = consumer
        self._queue = queue
        self._pipeline = pipeline
        self.paused: dict[TopicPartitionKey, int] = {}
        """Paused for room, with the offset each is read again from."""
        self.user_paused: set[TopicPartitionKey] = set()

    def act(self, events: list[Event]) -> None:
        """Carry out the flow change among one record's events, if there is one."""
        for event in events:
            if type(event) is FlowChange:
                self.apply(event)

    def apply(self, change: FlowChange) -> None:
        if change.waits:
            for wait in change.waits:
                self._queue.drop(wait.tp)
            self._consumer.pause([TopicPartition(t, p) for (t, p), _ in _latest(change.waits)])
            for tp, at in _latest(change.waits):
                self._consumer.seek(TopicPartition(tp[0], tp[1], at))
                self.paused[tp] = at
                log.info("%s[%d] waits for room in the assembler; read again from %d", tp[0], tp[1], at)
        resumes = [(tp, at) for tp, at in _latest(change.resumes) if self.paused.pop(tp, None) is not None]
        if resumes:
            go = [TopicPartition(t, p) for (t, p), _ in resumes if (t, p) not in self.user_paused]
            if go:
                self._consumer.resume(go)
            for tp, at in resumes:
                self._consumer.seek(TopicPartition(tp[0], tp[1], at))

    def settle(self, keys: Iterable[TopicPartitionKey]) -> None:
        """Partitions left or were sought (their state is gone): ours are resumed as they are; then
        whatever the pipeline decided meanwhile for the others is carried out."""
        mine = [tp for tp in keys if self.paused.pop(tp, None) is not None]
        go = [TopicPartition(t, p) for t, p in mine if (t, p) not in self.user_paused]
        if go:
            try:
                self._consumer.resume(go)
            except KafkaException as exc:  # a partition no longer assigned: nothing stays paused anyway
                log.debug("resume of partitions that left: %s", exc)
        for change in self._pipeline.flow_changes():
            self.act([change])

    def reset(self) -> None:
        """Unassign, unsubscribe: no partition is ours to resume any more."""
        self.paused.clear()
        self._pipeline.flow_changes()  # nothing waits any more: the pipeline forgot them too

    # -- the application's own pause and resume -------------------------------------------------
    def user_pause(self, partitions: Sequence[TopicPartition]) -> None:
        self._consumer.pause(list(partitions))
        self.user_paused.update((tp.topic, tp.partition) for tp in partitions)

    def user_resume(self, partitions: Sequence[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self.user_paused.difference_update(keys)
        rest = [tp for tp, key in zip(partitions, keys, strict=True) if key not in self.paused]
        if rest:
            self._consumer.resume(rest)


def _latest(waits: Sequence[Wait]) -> list[tuple[TopicPartitionKey, int]]:
    """One entry per partition: the lowest offset given for it (a partition may be told twice)."""
    out: dict[TopicPartitionKey, int] = {}
    for wait in waits:
        out[wait.tp] = min(wait.resume_at, out.get(wait.tp, wait.resume_at))
    return list(out.items())
