"""The consumer pipeline: one record in, typed events out, no I/O (LinkedIn's ``ConsumerRecordsProcessor``).

Both readers drive it: :class:`~gateway.consumer._hybrid.HybridConsumer` feeds it what librdkafka fetched,
and a Spark range task feeds it what it reads. It classifies each record once
(:func:`~gateway.protocol.classify.classify`), reassembles segments, tracks delivered offsets and
high watermarks, filters what was delivered before a restart, and answers with events that carry
everything a driver needs, the safe offset included, so no driver looks inside it. Commit and seek
translation live in :class:`~gateway.core.commits.CommitTranslator`, which it owns and fronts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.core.assembler import INCOMPLETE, Assembled, DroppedMessage, MessageAssembler
from gateway.core.commits import CommitTranslator, SeekPlan
from gateway.core.offsets import DeliveredOffsetTracker, HighWatermark, Progress
from gateway.errors import (
    EnvelopeFormatError,
    GatewayError,
    InvalidSegmentError,
    LargeMessageDroppedError,
    PeerFormatError,
)
from gateway.policy import RouteKind
from gateway.protocol.classify import PLAIN_RECORD, Classified, RecordKind, classify
from gateway.protocol.envelope import ENVELOPE_HEADER, Envelope, decode_envelope
from gateway.protocol.headers import LM_HEADER, Headers, delivered_lm_value, encode_delivered_lm, without
from gateway.protocol.peers import PeerReader, PeerRecord
from gateway.protocol.records import Record, TopicPartitionKey
from gateway.protocol.segments import Segment


@dataclass(slots=True)
class WholeMessage:
    """A whole message, ready for the application once a reference is resolved.

    Events are not frozen only because a frozen dataclass costs a microsecond more per record on
    the plain path; nothing changes them after the pipeline made them.

    ``record`` is the completing record: key, offset and timestamp come from it (LinkedIn's rule).
    ``headers`` are the headers to hand out; they *are* ``record.headers`` (same object) when
    nothing was rewritten, so a driver can skip the copy. ``safe_offset`` is where a restart must
    resume so that nothing delivered after this message is lost: LinkedIn's consumer shows it in a
    ``_so`` header when it differs from ``offset + 1``; that header is the driver's business.
    ``error`` describes what went wrong (``exception`` is the typed error behind it).
    """

    record: Record
    value: bytes | None
    headers: Headers | None
    route: RouteKind
    starting_offset: int
    safe_offset: int
    number_of_segments: int = 1
    envelope: Envelope | None = None
    error: str | None = None
    exception: GatewayError | None = field(default=None, compare=False)


@dataclass(slots=True)
class PlainMessage(WholeMessage):
    """A record that is its own message (including a legacy value that only looks like an envelope)."""


@dataclass(slots=True)
class ChunkCompleted(WholeMessage):
    """The last missing segment arrived: ``value`` is the joined message, ``_lm`` already rewritten."""


@dataclass(slots=True)
class ReferenceToResolve(WholeMessage):
    """An envelope: ``envelope`` names the payload to fetch, or ``error`` says why it cannot be read.

    ``value`` is ``None`` and ``headers`` no longer hold the envelope header. A record another
    library wrote (``large.message.peer.formats``) comes as ``peer`` instead of ``envelope``: its
    key and value as they resolve, and headers without that library's own.
    """

    peer: PeerRecord | None = None


@dataclass(slots=True)
class InvalidRecord:
    """A record LinkedIn would reject as a segment; it is consumed, tracked as no message, and reported."""

    record: Record
    exception: InvalidSegmentError
    safe_offset: int | None


@dataclass(slots=True)
class MessageDropped:
    """An incomplete message given up (buffer full, or expired) while ``record`` was processed.

    ``exception`` is set on the first one when the pipeline was configured to raise on drops
    (``exception.on.message.dropped``); the segment in ``record`` is buffered either way.
    """

    record: Record
    dropped: DroppedMessage
    exception: LargeMessageDroppedError | None
    safe_offset: int | None


Event = PlainMessage | ChunkCompleted | ReferenceToResolve | InvalidRecord | MessageDropped


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def peer_event(
    reader: PeerReader, record: Record, headers: Headers | None, safe_now: int, counters: dict[str, int]
) -> ReferenceToResolve | None:
    """A plain record in a peer library's format, to resolve like an envelope; ``None`` for an ordinary one."""
    offset = record.offset
    try:
        peer = reader.read(record.key, record.value, headers)
    except PeerFormatError as exc:
        counters["peer.errors"] = counters.get("peer.errors", 0) + 1
        return ReferenceToResolve(
            record, None, headers, RouteKind.REFERENCE, offset, safe_now, error=error_text(exc), exception=exc
        )
    if peer is None:
        return None
    key = f"peer.{peer.format.value}.messages"
    counters[key] = counters.get(key, 0) + 1
    return ReferenceToResolve(record, None, peer.headers, RouteKind.REFERENCE, offset, safe_now, peer=peer)


class ConsumerPipeline:
    """Per-partition state of a chunk-aware reader; one per consumer or per Spark range task.

    ``counters`` counts records, messages by kind, segments, filtered duplicates, invalid records
    and drops; plain records that took the fast path are counted in ``fast_plain`` only (an int
    is cheaper than the dict on the hot path). ``fast_path=False`` sends every record the full way,
    to show that both give the same answers.
    """

    def __init__(
        self,
        assembler: MessageAssembler | None = None,
        tracker: DeliveredOffsetTracker | None = None,
        *,
        fast_path: bool = True,
        bad_segments_as_payload: bool = False,
        peers: PeerReader | None = None,
    ) -> None:
        # a peer's pointer is an ordinary-looking value: every record must be looked at
        self._fast_path = fast_path and peers is None
        self._peers = peers
        self._bad_as_payload = bad_segments_as_payload
        self._assembler = assembler if assembler is not None else MessageAssembler()
        self._tracker = tracker if tracker is not None else DeliveredOffsetTracker()
        self._commits = CommitTranslator(self._assembler, self._tracker)
        self._high_watermarks = self._commits.high_watermarks  # the hot path reads these two directly
        self._busy = self._commits.busy
        self.fast_plain = 0
        self.counters: dict[str, int] = {
            "records": 0,
            "plain.messages": 0,
            "chunked.messages": 0,
            "segments": 0,
            "duplicates.filtered": 0,
            "invalid.records": 0,
            "dropped.evicted": 0,
            "dropped.expired": 0,
        }

    @property
    def assembler(self) -> MessageAssembler:
        """For inspection in tests; drivers use the pipeline's own methods."""
        return self._assembler

    @property
    def tracker(self) -> DeliveredOffsetTracker:
        """For inspection in tests; drivers use the pipeline's own methods."""
        return self._tracker

    # -- the record path ------------------------------------------------------------------------
    def feed(self, tp: TopicPartitionKey, record: Record) -> list[Event]:
        """One record of ``tp``, in offset order; drops first, then the message it completes, if any.

        No event for a buffered segment or for a message delivered before (high watermark filter).
        """
        offset = record.offset
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
        """A one-segment message where a plain record would go by bookkeeping alone; None otherwise.

        The assembler holds nothing for such a message, so it is tracked as a plain record is:
        the same answer as the full path, without its per-record calls.
        """
        offset = record.offset
        if not self._run_of_one(tp, offset):
            return None
        counters = self.counters
        counters["records"] += 1
        counters["chunked.messages"] += 1
        headers = _delivered_headers(record.headers, kind)
        return ChunkCompleted(record, bytes(segment.payload), headers, RouteKind.CHUNKED, offset, offset + 1, 1)

    def _track(
        self, tp: TopicPartitionKey, record: Record, kind: Classified, result: Assembled
    ) -> PlainMessage | ChunkCompleted | ReferenceToResolve | None:
        offset = record.offset
        hw = self._high_watermarks.get(tp)
        below = None if hw is None else hw.filter_below()
        skip = below is not None and below > offset
        safe = min(offset + 1, self._assembler.safe_offset(tp, offset))
        self._tracker.track(tp, offset, safe, result.starting_offset, not skip)
        if skip:
            return None
        self._commits.set_high_watermark(tp, offset)
        current = self._commits.safe_offset(tp)
        safe_now = offset + 1 if current is None else current
        return _whole_message(record, kind, result, safe_now, self._peers, self.counters)

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
        self.counters["invalid.records"] += 1
        events = self._drain_dropped(tp, record, None)
        events.append(InvalidRecord(record, exc, self._commits.safe_offset(tp)))
        return events

    def _drain_dropped(
        self, tp: TopicPartitionKey, record: Record, exc: LargeMessageDroppedError | None
    ) -> list[Event]:
        dropped = self._assembler.dropped
        if not dropped:
            return []
        safe = self._commits.safe_offset(tp)
        events: list[Event] = []
        for info in dropped:
            key = f"dropped.{info.reason}"
            self.counters[key] = self.counters.get(key, 0) + 1
            events.append(MessageDropped(record, info, exc if not events else None, safe))
        dropped.clear()
        return events

    # -- partitions come and go -------------------------------------------------------------------
    def forget(self, tp: TopicPartitionKey) -> None:
        """Drop one partition's buffered segments, tracking, HW and holds (seek, revoke, lost)."""
        self._assembler.clear(tp)
        self._tracker.clear(tp)
        self._commits.clear(tp)

    def reset(self) -> None:
        """Forget every partition's segments, tracking and HWs (unassign, unsubscribe); holds stay."""
        self._assembler.clear()
        self._tracker.clear()
        self._commits.clear_high_watermarks()

    def trim(self, tp: TopicPartitionKey) -> None:
        """Forget ``tp``'s delivered-offset bookkeeping but keep its buffered segments.

        For a reader that never commits or seeks (a Spark range): keeps its memory flat.
        """
        self._tracker.clear(tp)

    def partitions(self) -> list[TopicPartitionKey]:
        """Partitions with delivered-offset state."""
        return self._tracker.partitions()

    def delivered(self, tp: TopicPartitionKey) -> int | None:
        """The offset of the last message delivered from ``tp``."""
        return self._tracker.delivered(tp)

    def progress(self) -> dict[TopicPartitionKey, Progress]:
        """Every partition's safe, delivered and first offsets (:meth:`DeliveredOffsetTracker.progress`)."""
        return self._tracker.progress()

    def plain_run_open(self, tp: TopicPartitionKey, offset: int) -> bool:
        """True when plain records of ``tp`` from ``offset`` on may be delivered by bookkeeping alone.

        That is the fast path's condition: the partition's commit is loaded, nothing is pending,
        held back or filtered in it, and ``offset`` is past what was delivered. It stays true for
        the plain records that follow in the partition until anything else is fed.
        """
        return self._open_high_watermark(tp, offset) is not None

    def _open_high_watermark(self, tp: TopicPartitionKey, offset: int) -> HighWatermark | None:
        """``tp``'s high watermark when :meth:`plain_run_open` holds, else None."""
        hw = self._high_watermarks.get(tp)
        if (
            hw is None
            or not self._fast_path
            or tp in self._busy
            or self._assembler.has_pending(tp)
            or (hw.current if hw.current != -1 else hw.initial) > offset
        ):
            return None
        return hw

    def plain_run_delivered(self, tp: TopicPartitionKey, last_offset: int, count: int) -> None:
        """``count`` plain records of ``tp`` up to ``last_offset`` were handed out (see :meth:`plain_run_open`)."""
        self._tracker.track_plain(tp, last_offset)
        self._high_watermarks[tp].current = last_offset
        self.fast_plain += count

    def deliver_plain(self, tp: TopicPartitionKey, offset: int) -> bool:
        """One plain record handed out by bookkeeping alone, when :meth:`plain_run_open` allows it.

        ``poll``'s hot path: the check and the bookkeeping of a one-record run in a single call.
        False changes nothing, and the record takes the full path.
        """
        if not self._run_of_one(tp, offset):
            return False
        self.fast_plain += 1
        return True

    def _run_of_one(self, tp: TopicPartitionKey, offset: int) -> bool:
        """Note ``offset`` as delivered at ``offset + 1`` when :meth:`plain_run_open` allows it; else change nothing."""
        hw = self._open_high_watermark(tp, offset)
        if hw is None:
            return False
        self._tracker.track_plain(tp, offset)
        hw.current = offset
        return True

    def metrics(self) -> dict[str, int]:
        """``counters`` with the fast path folded in, and what the assembler holds now."""
        out = dict(self.counters)
        out["records"] += self.fast_plain
        out["plain.messages"] += self.fast_plain
        out["assembler.buffered.bytes"] = self._assembler.buffered_bytes
        out["assembler.incomplete.messages"] = self._assembler.incomplete_count
        out["assembler.accounted.bytes"] = self._assembler.accounted_bytes
        out["tracker.entries.max"] = self._tracker.size()
        return out

    # -- commits and seeks (see CommitTranslator) ------------------------------------------------
    def needs_commit(self, tp: TopicPartitionKey) -> bool:
        """True until the commit stored in Kafka for ``tp`` was handed in (:meth:`load_commit`)."""
        return tp not in self._high_watermarks

    def load_commit(self, tp: TopicPartitionKey, offset: int | None, high_watermark: int | None) -> None:
        self._commits.load_commit(tp, offset, high_watermark)

    def set_high_watermark(self, tp: TopicPartitionKey, offset: int) -> None:
        self._commits.set_high_watermark(tp, offset)

    def clear_high_watermarks(self) -> None:
        """Every HW is re-read from Kafka before the next record of its partition (after a rebalance)."""
        self._commits.clear_high_watermarks()

    def hold(self, tp: TopicPartitionKey, offset: int) -> None:
        self._commits.hold(tp, offset)

    def release(self, tp: TopicPartitionKey, offset: int) -> None:
        self._commits.release(tp, offset)

    def bound_commits(self, lent_floor: Callable[[TopicPartitionKey], int | None]) -> None:
        """Keep every commit of a partition at or below ``lent_floor(tp)`` (see :mod:`gateway.consumer.handoff`)."""
        self._commits.lent_floor = lent_floor

    def safe_offset(self, tp: TopicPartitionKey) -> int | None:
        return self._commits.safe_offset(tp)

    def current_positions(self, positions: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        return self._commits.current_positions(positions)

    def safe_offsets_to_commit(
        self, offsets: dict[TopicPartitionKey, tuple[int, str | None]], ignore_high_watermark: bool
    ) -> dict[TopicPartitionKey, tuple[int, str]]:
        return self._commits.safe_offsets_to_commit(offsets, ignore_high_watermark)

    def plan_seek(self, tp: TopicPartitionKey, offset: int, committed_view: int | None) -> SeekPlan:
        return self._commits.plan_seek(tp, offset, committed_view)

    user_view_of_commit = staticmethod(CommitTranslator.user_view_of_commit)


def _whole_message(
    record: Record,
    kind: Classified,
    result: Assembled,
    safe_now: int,
    peers: PeerReader | None,
    counters: dict[str, int],
) -> PlainMessage | ChunkCompleted | ReferenceToResolve | None:
    """What the record completing a message makes: chunked, a reference to resolve, a peer's pointer or plain.

    A delivered chunked message carries LinkedIn's delivered form of its ``_lm`` header.
    """
    headers = _delivered_headers(record.headers, kind)
    if result.segmented:
        counters["chunked.messages"] += 1
        return ChunkCompleted(
            record,
            result.value,
            headers,
            RouteKind.CHUNKED,
            result.starting_offset,
            safe_now,
            result.number_of_segments,
        )
    if kind.kind is RecordKind.ENVELOPE:
        reference = _reference(record, kind.marked, headers, safe_now)
        if reference is not None:
            return reference
    if peers is not None and kind.kind is RecordKind.PLAIN:
        peer = peer_event(peers, record, headers, safe_now, counters)
        if peer is not None:
            return peer
    counters["plain.messages"] += 1
    return PlainMessage(record, result.value, headers, RouteKind.PLAIN, result.starting_offset, safe_now)


def _delivered_headers(headers: Headers | None, kind: Classified) -> Headers | None:
    """``headers`` to hand out: a record with an ``_lm`` header gets LinkedIn's delivered form of it."""
    if not kind.has_lm:
        return headers
    out = without(headers, LM_HEADER)
    out.append((LM_HEADER, encode_delivered_lm(kind.lm) if kind.lm is not None else delivered_lm_value(kind.lm_raw)))
    return out


def _reference(record: Record, marked: bool, headers: Headers | None, safe_now: int) -> ReferenceToResolve | None:
    """The envelope in ``record``; None for a legacy value that merely starts like one (not ours: plain).

    A record marked as an envelope by its header that does not decode is still a reference, one
    that carries its error, so the consumer reports it instead of handing out the envelope's bytes.
    """
    try:
        envelope = decode_envelope(record.value)
    except EnvelopeFormatError as exc:
        if not marked:
            return None
        return ReferenceToResolve(
            record,
            None,
            without(headers, ENVELOPE_HEADER),
            RouteKind.REFERENCE,
            record.offset,
            safe_now,
            error=error_text(exc),
            exception=exc,
        )
    return ReferenceToResolve(
        record, None, without(headers, ENVELOPE_HEADER), RouteKind.REFERENCE, record.offset, safe_now, envelope=envelope
    )
