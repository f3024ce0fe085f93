"""Plain records delivered by bookkeeping alone: one at a time, in runs, or as a batch counted out.

Most records are small and plain. When nothing is pending, held or filtered in their partition,
delivering one reduces to "delivered at offset, safe at offset + 1": :class:`PlainDeliveries`
decides when that holds and notes it, for the pipeline (:class:`~gateway.core.pipeline.ConsumerPipeline`),
which hands every other record the full way.

Most fetched batches are small plain records of one partition. Proving a batch once (C-level
passes over it, :func:`plain_partition`) replaces the per-record test and offset note of
``poll()``'s one-record path. The batch belongs to the core (:meth:`PlainDeliveries.open_counted`):
the driver only counts ``left`` down as it hands records out, and the core notes what went as
delivered itself, before it answers anything about offsets and before any partition's state
changes. So nothing in the core has to ask the driver what it handed out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.assembler import MessageAssembler
from gateway.core.commits import CommitTranslator
from gateway.core.offsets import DeliveredOffsetTracker, HighWatermark
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


class PlainDeliveries:
    """When plain records may go by bookkeeping alone, and the notes they leave; one per pipeline.

    ``runs`` False (a reader of peers' formats, whose pointers look like plain values) sends every
    record the full way. ``fast_plain`` counts what went this way (an int is cheaper than the
    pipeline's counters dict on the hot path).
    """

    __slots__ = ("_assembler", "_busy", "_high_watermarks", "_tracker", "fast_plain", "open_batch", "runs")

    def __init__(
        self, assembler: MessageAssembler, tracker: DeliveredOffsetTracker, commits: CommitTranslator, *, runs: bool
    ) -> None:
        self._assembler = assembler
        self._tracker = tracker
        self._high_watermarks = commits.high_watermarks  # the hot path reads these two directly
        self._busy = commits.busy
        self.open_batch: ProvenBatch | None = None
        """The batch a driver hands out by count (:meth:`open_counted`); read-only outside."""
        self.runs = runs
        self.fast_plain = 0

    def run_open(self, tp: TopicPartitionKey, offset: int) -> bool:
        """Whether plain records of ``tp`` from ``offset`` on may go by bookkeeping alone: the commit is
        loaded, nothing is pending, held or filtered, ``offset`` is past what was delivered (until anything
        else is fed)."""
        return self._open_high_watermark(tp, offset) is not None

    def _open_high_watermark(self, tp: TopicPartitionKey, offset: int) -> HighWatermark | None:
        """``tp``'s high watermark when :meth:`run_open` holds, else None."""
        if self.open_batch is not None:  # what went by count is noted before anything newer
            self.end_counted()
        hw = self._high_watermarks.get(tp)
        if (
            hw is None
            or not self.runs
            or tp in self._busy
            or self._assembler.has_pending(tp)
            or (hw.current if hw.current != -1 else hw.initial) > offset
        ):
            return None
        return hw

    def run_delivered(self, tp: TopicPartitionKey, last_offset: int, count: int) -> None:
        """``count`` plain records of ``tp`` up to ``last_offset`` were handed out (see :meth:`run_open`)."""
        self._tracker.track_plain(tp, last_offset)
        self._high_watermarks[tp].current = last_offset
        self.fast_plain += count

    def deliver_one(self, tp: TopicPartitionKey, offset: int) -> bool:
        """``poll``'s hot path: one plain record by bookkeeping alone if :meth:`run_open` allows."""
        if not self.note_one(tp, offset):
            return False
        self.fast_plain += 1
        return True

    def note_one(self, tp: TopicPartitionKey, offset: int) -> bool:
        """Note ``offset`` as delivered at ``offset + 1`` when :meth:`run_open` allows it; else change nothing."""
        hw = self._open_high_watermark(tp, offset)
        if hw is None:
            return False
        self._tracker.track_plain(tp, offset)
        hw.current = offset
        return True

    # -- a batch handed out by count ---------------------------------------------------------------
    def open_counted(self, records: list[Any]) -> ProvenBatch | None:
        """``records`` (fetched, none handed out yet) as a batch the driver hands out by counting ``left``
        down, or None when they are few or any of them needs another look. A batch still open is closed
        first. What was counted out is noted here, before any offset is read or any partition changes:
        the driver never has to."""
        self.end_counted()
        tp = self._provable(records)
        if tp is None:
            return None
        batch = self.open_batch = ProvenBatch(records, tp, len(records))
        return batch

    def deliver_proven(self, records: list[Any]) -> bool:
        """``records`` noted as delivered at once, all of them, when they are proven plain (``consume()``'s
        whole batch); False, and nothing noted, when they are not."""
        self.end_counted()
        tp = self._provable(records)
        if tp is None:
            return False
        self.run_delivered(tp, records[-1].offset(), len(records))
        return True

    def _provable(self, records: list[Any]) -> TopicPartitionKey | None:
        if len(records) < BATCH_FROM:
            return None
        tp = plain_partition(records)
        if tp is None or not self.run_open(tp, records[0].offset()):
            return None
        return tp

    def note_counted(self) -> None:
        """What the open batch's driver counted out so far, noted as delivered: before any offset is read."""
        batch = self.open_batch
        if batch is not None:
            handed = len(batch.records) - batch.left
            if handed > batch.noted:
                self.run_delivered(batch.tp, batch.records[handed - 1].offset(), handed - batch.noted)
                batch.noted = handed

    def end_counted(self) -> None:
        """Note and close the open batch (``left`` 0: the driver counts no more of it): before any change."""
        batch = self.open_batch
        if batch is not None:
            self.note_counted()
            batch.left = 0
            self.open_batch = None
