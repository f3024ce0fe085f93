"""A fetched batch proven plain, handed out by count: the core's record of what went out that way.

Most fetched batches are small plain records of one partition. Proving a batch once (C-level
passes over it, :func:`plain_partition`) replaces the per-record test and offset note of
``poll()``'s one-record path. The batch belongs to the pipeline that proved it
(:meth:`~gateway.core.pipeline.ConsumerPipeline.open_counted`): the driver only counts ``left``
down as it hands records out, and the pipeline notes what went as delivered itself, before it
answers anything about offsets and before any partition's state changes. So nothing in the core
has to ask the driver what it handed out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.protocol.classify import are_plainly_plain
from gateway.protocol.records import TopicPartitionKey

BATCH_FROM = 16
"""Fewer records than this go one by one: the batch test's fixed cost would not pay off."""


@dataclass(slots=True)
class ProvenBatch:
    """Records proven plain and of one partition; ``left`` of them (the last ones) are not handed out yet.

    The driver decrements ``left`` for each record it hands out (its hottest path: one attribute
    write); ``noted`` is how many the pipeline has noted as delivered. A closed batch has ``left``
    0 and is never counted again.
    """

    records: list[Any]
    tp: TopicPartitionKey
    left: int
    noted: int = 0

    @property
    def handed(self) -> int:
        return len(self.records) - self.left


CLOSED = ProvenBatch([], ("", -1), 0)
"""What a driver holds when no batch is counted out: ``left`` is 0, so its hot path needs no None test."""


def plain_partition(head: Any) -> TopicPartitionKey | None:
    """The partition of ``head`` when every record in it is plainly plain and of that one partition; else None.

    C-level passes over the records (one accessor each), not a Python loop: this is what lets a
    batch of small records cost little more than librdkafka's own ``consume``.
    """
    first = head[0]
    kind = type(first)  # the client's record type (one client fills one queue): its unbound accessors map at C speed
    if any(map(kind.error, head)):
        return None
    if not are_plainly_plain(list(map(kind.value, head)), list(map(kind.headers, head))):
        return None
    tp = (first.topic(), first.partition())
    n = len(head)
    # counted, not collected into sets: equal small ints and librdkafka's shared topic str compare by identity
    if list(map(kind.partition, head)).count(tp[1]) != n or list(map(kind.topic, head)).count(tp[0]) != n:
        return None
    return tp
