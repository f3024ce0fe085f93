"""The consumer pipeline: one record in, typed events out, no I/O (LinkedIn's ``ConsumerRecordsProcessor``).

Both readers drive it: :class:`~gateway.consumer._hybrid_consumer.HybridConsumer` feeds it what librdkafka fetched,
and a Spark range task feeds it what it reads. It classifies each record once
(:func:`~gateway.protocol.classify.classify`), reassembles segments, tracks delivered offsets and
high watermarks, filters what was delivered before a restart, and answers with events
(:mod:`gateway.core.events`) that carry everything a driver needs, the safe offset included, so no
driver looks inside it. A group consumer's pipeline asks for a partition's commit with a
:class:`~gateway.core.events.CommitNeeded` event instead of relying on the driver to load it first.
Commit and seek translation is :attr:`ConsumerPipeline.commits`, a
:class:`~gateway.core.commits.CommitTranslator` the driver uses directly; messages dropped and partitions
that wait for room are reported by :class:`~gateway.core.pipeline._drops_and_waits.DropsAndWaits`.
"""

from __future__ import annotations

from gateway.core.assembler import INCOMPLETE, REFUSED, Assembled, MessageAssembler
from gateway.core.commits import CommitTranslator
from gateway.core.events import (
    ChunkCompleted,
    CommitNeeded,
    Event,
    FlowChange,
    InvalidRecord,
    MessageDropped,
    PlainMessage,
    ReferenceToResolve,
    WholeMessage,
    delivered_headers,
    error_text,
    peer_event,
    whole_message,
)
from gateway.core.flow import DEFAULT_STALL_TIMEOUT_S
from gateway.core.offsets import DeliveredOffsetTracker, Progress
from gateway.core.pipeline._drops_and_waits import DropsAndWaits
from gateway.core.plain_deliveries import PlainDeliveries
from gateway.errors import InvalidSegmentError, LargeMessageDroppedError
from gateway.protocol.classify import PLAIN_RECORD, Classified, classify
from gateway.protocol.peers import PeerReader
from gateway.protocol.records import Record, RouteKind, TopicPartitionKey
from gateway.protocol.segments import Segment

__all__ = [
    "ChunkCompleted",
    "CommitNeeded",
    "ConsumerPipeline",
    "Event",
    "FlowChange",
    "InvalidRecord",
    "MessageDropped",
    "PlainMessage",
    "ReferenceToResolve",
    "WholeMessage",
    "error_text",
    "peer_event",
]


_COUNTERS = (
    "records",
    "plain.messages",
    "chunked.messages",
    "segments",
    "duplicates.filtered",
    "invalid.records",
    "dropped.evicted",
    "dropped.expired",
)


class ConsumerPipeline:
    """Per-partition state of a chunk-aware reader; one per consumer or per Spark range task.

    ``counters`` counts records, messages by kind, segments, filtered duplicates, invalid records
    and drops; plain records that took the fast path are counted in ``fast_plain`` only (an int
    is cheaper than the dict on the hot path). ``awaits_commits=True`` (a group consumer) answers a
    partition's first record with :class:`CommitNeeded` until its commit is loaded.
    ``hold_drops=True`` keeps commits of a partition at the first segment of a message evicted
    from it, so a restart reads it again. An assembler made with ``wait_for_room`` answers a full
    buffer with :class:`FlowChange` events (:mod:`gateway.core.flow`).
    """

    def __init__(
        self,
        assembler: MessageAssembler | None = None,
        tracker: DeliveredOffsetTracker | None = None,
        *,
        bad_segments_as_payload: bool = False,
        peers: PeerReader | None = None,
        awaits_commits: bool = False,
        hold_drops: bool = False,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
    ) -> None:
        # a peer's pointer is an ordinary-looking value: every record must be looked at
        self._peers = peers
        self._bad_as_payload = bad_segments_as_payload
        self._assembler = assembler if assembler is not None else MessageAssembler()
        self._tracker = tracker if tracker is not None else DeliveredOffsetTracker()
        self._commits = CommitTranslator(self._assembler, self._tracker)
        self._awaits_commits = awaits_commits
        self._flow = self._assembler.flow
        self._high_watermarks = self._commits.high_watermarks
        plain = self._plain = PlainDeliveries(self._assembler, self._tracker, self._commits, runs=peers is None)
        # plain records by bookkeeping alone (gateway.core.plain_deliveries), bound here: the hot path makes one call
        self.plain_run_open = plain.run_open
        self.plain_run_delivered = plain.run_delivered
        self.deliver_plain = plain.deliver_one
        self.open_counted = plain.open_counted
        self.deliver_proven = plain.deliver_proven
        self.counters: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        drops = self._drops = DropsAndWaits(
            self._assembler, self._commits, self.counters, hold_drops=hold_drops, stall_timeout_s=stall_timeout_s
        )
        self._drain_dropped = drops.drain  # what the record path reports after every segment: one call
        self._replayed = drops.replayed

    @property
    def commits(self) -> CommitTranslator:
        """High watermarks, holds, commit and seek translation, for the driver to use directly.

        What the driver handed out by count is noted first
        (:class:`~gateway.core.plain_deliveries.PlainDeliveries`), so every answer counts it.
        """
        self._plain.note_counted()
        return self._commits

    # -- the record path ------------------------------------------------------------------------
    def feed(self, tp: TopicPartitionKey, record: Record) -> list[Event]:
        """One record of ``tp``, in offset order; drops first, then the message it completes, if any.

        No event for a buffered segment or for a message delivered before (high watermark filter);
        only :class:`CommitNeeded` while ``tp``'s commit is awaited (nothing is done with the record).
        """
        offset = record.offset
        if self._plain.open_batch is not None:  # what went by count is noted before anything newer
            self._plain.end_counted()
        if self._awaits_commits and tp not in self._high_watermarks:
            return [CommitNeeded(tp)]
        flow = self._flow
        if (flow.waiting or flow.replay) and self._replayed(tp, record):
            return []
        try:
            kind = classify(record.value, record.headers, offset)
        except InvalidSegmentError as exc:
            self.counters["records"] += 1
            return self._as_payload(tp, record) if self._bad_as_payload else self._invalid(tp, record, exc)
        if kind is PLAIN_RECORD and self.deliver_plain(tp, offset):
            # Bookkeeping reduces to "delivered at offset, safe at offset + 1" when nothing is pending,
            # held or filtered in the partition; otherwise the full path runs (same answer, slower).
            return [PlainMessage(record, record.value, record.headers, RouteKind.PLAIN, offset, offset + 1)]
        segment = kind.segment
        if segment is not None and segment.number_of_segments == 1:
            whole = self._single_segment(tp, record, kind, segment)
            if whole is not None:
                return [whole]
        self.counters["records"] += 1
        try:
            result = (
                self._assembler.add_segment(tp, offset, kind.segment)
                if kind.segment is not None
                else Assembled(record.value, offset, offset, False)
            )
        except InvalidSegmentError as exc:
            return self._as_payload(tp, record) if self._bad_as_payload else self._invalid(tp, record, exc)
        except LargeMessageDroppedError as exc:
            self._tracker.add_segment_offset(tp, offset)  # this segment is buffered; another message was dropped
            self.counters["segments"] += 1
            return self._drain_dropped(tp, record, exc)
        if result is REFUSED:  # not taken: the partition waits and reads it again
            self.counters["records"] -= 1
            return self._drain_dropped(tp, record, None)
        if result is INCOMPLETE:
            self._tracker.add_segment_offset(tp, offset)
            self.counters["segments"] += 1
            return self._drain_dropped(tp, record, None)
        message = self._track(tp, record, kind, result)
        events = self._drain_dropped(tp, record, None)
        if message is None:
            filtered = self._tracker.is_message_offset(tp, offset)
            self.counters["duplicates.filtered" if filtered else "segments"] += 1
        else:
            events.append(message)
        return events

    def _single_segment(
        self, tp: TopicPartitionKey, record: Record, kind: Classified, segment: Segment
    ) -> ChunkCompleted | None:
        """A one-segment message where a plain record would go by bookkeeping alone (the assembler holds
        nothing for it: the full path's answer without its calls); None otherwise."""
        offset = record.offset
        if not self._plain.note_one(tp, offset):
            return None
        counters = self.counters
        counters["records"] += 1
        counters["chunked.messages"] += 1
        headers = delivered_headers(record.headers, kind)
        return ChunkCompleted(record, bytes(segment.payload), headers, RouteKind.CHUNKED, offset, offset + 1, 1)

    def _track(
        self, tp: TopicPartitionKey, record: Record, kind: Classified, result: Assembled
    ) -> PlainMessage | ChunkCompleted | ReferenceToResolve | None:
        offset = record.offset
        hw = self._high_watermarks.get(tp)
        below = None if hw is None else hw.filter_below()
        skip = below is not None and below > offset
        self._assembler.passed(tp, offset)
        safe = min(offset + 1, self._assembler.safe_offset(tp, offset))
        self._tracker.track(tp, offset, safe, result.starting_offset, not skip)
        if skip:
            return None
        self._commits.set_high_watermark(tp, offset)
        current = self._commits.safe_offset(tp)
        safe_now = offset + 1 if current is None else current
        return whole_message(record, kind, result, safe_now, self._peers, self.counters)

    def _as_payload(self, tp: TopicPartitionKey, record: Record) -> list[Event]:
        """``treat.bad.segments.as.payload``: a record that fails segment validation is a plain message."""
        self.counters["bad.segments.as.payload"] = self.counters.get("bad.segments.as.payload", 0) + 1
        offset = record.offset
        message = self._track(tp, record, PLAIN_RECORD, Assembled(record.value, offset, offset, False))
        events = self._drain_dropped(tp, record, None)
        if message is not None:
            events.append(message)
        return events

    def _invalid(self, tp: TopicPartitionKey, record: Record, exc: InvalidSegmentError) -> list[Event]:
        self._tracker.add_segment_offset(tp, record.offset)  # consumed, never to be delivered
        self._assembler.passed(tp, record.offset)
        self.counters["invalid.records"] += 1
        events = self._drain_dropped(tp, record, None)
        events.append(InvalidRecord(record, exc, self._commits.safe_offset(tp)))
        return events

    # -- waiting for room (gateway.core.flow) ----------------------------------------------------------
    @property
    def waiting(self) -> bool:
        """Partitions wait for room, or the driver has a flow change to hear (:meth:`idle` matters only then)."""
        return self._drops.waiting

    def flow_changes(self) -> list[Event]:
        """Waits and resumes not yet handed to the driver (also after a partition left: :meth:`forget`)."""
        return self._drops.flow_changes()

    def fetched(self) -> None:
        """The driver fetched records: partitions that wait are not stalled."""
        self._drops.fetched()

    def idle(self, now: float) -> list[Event]:
        """Nothing could be fetched at ``now``: after ``stall_timeout_s`` of that with partitions waiting,
        the messages they wait for cannot finish (their partitions are caught up), so they go as drops."""
        return self._drops.idle(now)

    # -- partitions come and go -------------------------------------------------------------------
    def forget(self, tp: TopicPartitionKey) -> None:
        """Drop one partition's buffered segments, tracking, HW and holds (seek, revoke, lost)."""
        self._plain.end_counted()
        self._assembler.clear(tp)
        self._tracker.clear(tp)
        self._commits.clear(tp)

    def reset(self) -> None:
        """Forget every partition's segments, tracking and HWs (unassign, unsubscribe); holds stay."""
        self._plain.end_counted()
        self._assembler.clear()
        self._tracker.clear()
        self._commits.clear_high_watermarks()

    def trim(self, tp: TopicPartitionKey) -> None:
        """Forget ``tp``'s delivered-offset bookkeeping but keep its buffered segments.

        For a reader that never commits or seeks (a Spark range): keeps its memory flat.
        """
        self._plain.end_counted()
        self._tracker.clear(tp)

    def revoke(self, tps: list[TopicPartitionKey]) -> None:
        """Partitions leave (revoke, lost): their state goes, and every HW is re-read from Kafka."""
        for tp in tps:
            self.forget(tp)
        self._plain.end_counted()
        self._commits.clear_high_watermarks()

    def partitions(self) -> list[TopicPartitionKey]:  # those with delivered-offset state
        self._plain.note_counted()
        return self._tracker.partitions()

    def delivered(self, tp: TopicPartitionKey) -> int | None:
        self._plain.note_counted()  # the offset of the last message delivered from ``tp``
        return self._tracker.delivered(tp)

    def progress(self) -> dict[TopicPartitionKey, Progress]:
        """Every partition's safe, delivered and first offsets (:meth:`DeliveredOffsetTracker.progress`)."""
        self._plain.note_counted()
        return self._tracker.progress()

    def progress_of(self, tp: TopicPartitionKey) -> Progress | None:
        """One partition's :meth:`progress` entry, None when it has none yet."""
        self._plain.note_counted()
        return self._tracker.progress_of(tp)

    def metrics(self) -> dict[str, int]:
        """``counters`` with the fast path folded in, and what the assembler holds now."""
        self._plain.note_counted()
        return _metrics(self.counters, self._plain.fast_plain, self._assembler, self._tracker)

    def close_counted(self) -> None:
        """The driver stops counting (something else goes out first): what it counted out is noted."""
        self._plain.end_counted()

    @property
    def fast_plain(self) -> int:
        """Plain records that went by bookkeeping alone (not in ``counters``)."""
        return self._plain.fast_plain


def _metrics(
    counters: dict[str, int], fast_plain: int, assembler: MessageAssembler, tracker: DeliveredOffsetTracker
) -> dict[str, int]:
    out = dict(counters)
    out["records"] += fast_plain
    out["plain.messages"] += fast_plain
    out["assembler.buffered.bytes"] = assembler.buffered_bytes
    out["assembler.incomplete.messages"] = assembler.incomplete_count
    out["assembler.accounted.bytes"] = assembler.accounted_bytes
    out["tracker.entries.max"] = tracker.size()
    return out
