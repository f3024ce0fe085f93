"""The consumer's sans-IO record pipeline (LinkedIn's ``ConsumerRecordsProcessor``).

It joins the assembler, the delivered-offset tracker and the high watermarks: each raw record in,
a decision out (deliver this value with these headers, or nothing), plus the translations the
consumer shell needs for ``commit``, ``committed`` and ``seek``. The shell does every network call
and hands the answers in (:meth:`RecordProcessor.load_commit`), so this stays testable without Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.assembler import INCOMPLETE, Assembled, MessageAssembler
from gateway.errors import LargeMessageDroppedError
from gateway.offsets import DeliveredOffsetTracker, HighWatermark, TopicPartitionKey
from gateway.protocol.headers import (
    LM_HEADER,
    SAFE_OFFSET_HEADER,
    Headers,
    decode_lm,
    delivered_lm,
    encode_lm,
    encode_safe_offset,
)
from gateway.protocol.metadata import offset_from_metadata, user_metadata_from, wrap_metadata


@dataclass(frozen=True, slots=True)
class Delivery:
    """What to hand the user for one record.

    ``value`` is the record's own value object for plain records; ``headers`` is ``None`` when the
    record's headers are to be left untouched (the plain fast path: no copy, no rewrite).
    """

    value: bytes | None
    headers: Headers | None
    starting_offset: int
    segmented: bool
    number_of_segments: int


@dataclass(frozen=True, slots=True)
class SeekPlan:
    """How to carry out a user's ``seek(tp, offset)``: where the inner consumer goes and what HW follows."""

    noop: bool
    target: int
    high_watermark: int
    to_committed: bool = False


class RecordProcessor:
    """Per-partition state of a chunk-aware consumer; one instance per consumer."""

    def __init__(self, assembler: MessageAssembler, tracker: DeliveredOffsetTracker) -> None:
        self.assembler = assembler
        self.tracker = tracker
        self._hw: dict[TopicPartitionKey, HighWatermark] = {}
        self._holds: dict[TopicPartitionKey, set[int]] = {}
        self._busy: set[TopicPartitionKey] = set()  # partitions with holds: never on the fast path

    # -- holds: delivered offsets that must be read again after a restart ------------------
    def hold(self, tp: TopicPartitionKey, offset: int) -> None:
        """Pin commits at or below ``offset``: a message there could not be resolved.

        Commits then stop at ``offset`` and the high watermark they carry does too, so a restart
        reads the message again instead of filtering it as already delivered (at the price of
        re-delivering what followed it: at least once, never lost).
        """
        self._holds.setdefault(tp, set()).add(offset)
        self._busy.add(tp)

    def release(self, tp: TopicPartitionKey, up_to: int) -> None:
        """The application took responsibility for held offsets up to ``up_to`` (it committed past them)."""
        held = self._holds.get(tp)
        if held:
            held.difference_update([o for o in held if o <= up_to])
        if not held:
            self._busy.discard(tp)

    def floor(self, tp: TopicPartitionKey) -> int | None:
        held = self._holds.get(tp)
        return min(held) if held else None

    # -- high watermarks -------------------------------------------------------------------
    def needs_commit(self, tp: TopicPartitionKey) -> bool:
        """True until :meth:`load_commit` was called for ``tp`` (LinkedIn reads it lazily, blocking)."""
        return tp not in self._hw

    def load_commit(self, tp: TopicPartitionKey, offset: int | None, metadata: str | None) -> None:
        """Hand in the offset and metadata stored in Kafka for ``tp`` (``offset`` None when nothing is committed)."""
        self._hw[tp] = HighWatermark.from_commit(offset, offset_from_metadata(metadata))

    def high_watermark(self, tp: TopicPartitionKey) -> HighWatermark:
        return self._hw.setdefault(tp, HighWatermark())

    def set_high_watermark(self, tp: TopicPartitionKey, offset: int) -> None:
        self.high_watermark(tp).current = offset

    def clear_high_watermarks(self) -> None:
        self._hw.clear()

    # -- the record pipeline ----------------------------------------------------------------
    def process(
        self,
        tp: TopicPartitionKey,
        offset: int,
        value: bytes | None,
        headers: Headers | None,
    ) -> Delivery | None:
        """One raw record in order; a delivery, or ``None`` for a segment or a filtered duplicate.

        Raises :class:`~gateway.errors.InvalidSegmentError` (the record is then neither tracked
        nor delivered) and, after buffering, :class:`~gateway.errors.LargeMessageDroppedError`.
        """
        lm_value: bytes | None = None
        has_lm = False
        if headers:
            for key, header_value in reversed(headers):
                if key == LM_HEADER:
                    lm_value, has_lm = header_value, True
                    break
        try:
            result = self.assembler.assemble(tp, offset, value, lm_value, has_lm_header=has_lm)
        except LargeMessageDroppedError:
            self.tracker.add_segment_offset(tp, offset)  # this segment is buffered; another message was dropped
            raise
        if result is INCOMPLETE:
            self.tracker.add_segment_offset(tp, offset)
            return None
        return self._track(tp, offset, result, headers, has_lm, lm_value)

    def deliver_plain(self, tp: TopicPartitionKey, offset: int) -> bool:
        """The plain-record fast path: True when the record was tracked and is to be handed out as is.

        Only for a record the caller has established is neither a segment nor an envelope. It applies
        when nothing is pending, held or filtered in the partition, which is when LinkedIn's pipeline
        reduces to "delivered at ``offset``, safe at ``offset + 1``"; otherwise it returns False and
        the caller takes :meth:`process`.
        """
        hw = self._hw.get(tp)
        if hw is None or tp in self._busy or self.assembler.has_pending(tp):
            return False
        if (hw.current if hw.current != -1 else hw.initial) > offset:
            return False
        self.tracker.track_plain(tp, offset)
        hw.current = offset
        return True

    def _track(
        self,
        tp: TopicPartitionKey,
        offset: int,
        result: Assembled,
        headers: Headers | None,
        has_lm: bool,
        lm_value: bytes | None,
    ) -> Delivery | None:
        hw = self._hw.get(tp)
        below = None if hw is None else hw.filter_below()
        skip = below is not None and below > offset
        safe = min(offset + 1, self.assembler.safe_offset(tp, offset))
        self.tracker.track(tp, offset, safe, result.starting_offset, not skip)
        if skip:
            return None
        self.high_watermark(tp).current = offset
        new_headers: Headers | None = None
        if has_lm:
            new_headers = [h for h in headers or () if h[0] != LM_HEADER]
            new_headers.append((LM_HEADER, encode_lm(delivered_lm(decode_lm(lm_value)))))
        current_safe = self.tracker.current_safe_offset(tp)
        floor = self.floor(tp)
        if floor is not None and current_safe is not None:
            current_safe = min(current_safe, floor)
        if current_safe is not None and current_safe != offset + 1:
            if new_headers is None:
                new_headers = list(headers or ())
            new_headers.append((SAFE_OFFSET_HEADER, encode_safe_offset(current_safe)))
        return Delivery(result.value, new_headers, result.starting_offset, result.segmented,
                        result.number_of_segments)

    def mark_not_a_message(self, tp: TopicPartitionKey, offset: int) -> None:
        """An offset consumed but never to be delivered (e.g. a record rejected as invalid)."""
        self.tracker.add_segment_offset(tp, offset)

    # -- commits ----------------------------------------------------------------------------
    def safe_offset(self, tp: TopicPartitionKey) -> int | None:
        """The partition's current safe offset, holds included (what ``_so`` carries)."""
        current = self.tracker.current_safe_offset(tp)
        floor = self.floor(tp)
        if current is None or floor is None:
            return current
        return min(current, floor)

    def current_positions(self, positions: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """LinkedIn's ``currentOffsetAndMetadataMap``: last delivered + 1, else the consumer position."""
        out: dict[TopicPartitionKey, int] = {}
        for tp, position in positions.items():
            delivered = self.tracker.delivered(tp)
            if delivered is not None:
                out[tp] = delivered + 1
            elif position >= 0 and (tp in self._hw or self.tracker.earliest_tracked_offset(tp) is not None):
                out[tp] = position
        return out

    def safe_offsets_to_commit(
        self, offsets: dict[TopicPartitionKey, tuple[int, str | None]], ignore_high_watermark: bool
    ) -> dict[TopicPartitionKey, tuple[int, str]]:
        """User offsets in, ``(broker offset, "<HW>,<meta>")`` out (``safeOffsetsToCommit``)."""
        out: dict[TopicPartitionKey, tuple[int, str]] = {}
        for tp, (orig, metadata) in offsets.items():
            hw = self.high_watermark(tp)
            safe = orig
            earliest = self.tracker.earliest_tracked_offset(tp)
            if earliest is not None and orig > earliest:
                previous = self.tracker.closest_delivered_up_to(tp, orig - 1)
                latest = self.tracker.delivered(tp)
                if previous == latest:
                    safe = self.assembler.safe_offset(tp, orig if latest is None else latest)
                elif previous is not None:
                    tracked = self.tracker.safe_offset(tp, previous)
                    safe = orig if tracked is None else tracked
                else:
                    safe = self.assembler.safe_offset(tp, latest if latest is not None else orig)
            if ignore_high_watermark:
                hw_to_commit = orig
            elif safe == orig and hw.initial != -1 and hw.committed != -1 and safe == hw.committed:
                hw_to_commit = max(hw.current, hw.initial)
            elif hw.current != -1:
                hw_to_commit = max(orig, hw.current)
            else:
                hw_to_commit = orig
            floor = self.floor(tp)
            if floor is not None:
                safe = min(safe, floor)
                hw_to_commit = min(hw_to_commit, floor)
            out[tp] = (min(safe, orig), wrap_metadata(hw_to_commit, metadata))
        return out

    @staticmethod
    def user_view_of_commit(offset: int, metadata: str | None) -> tuple[int, str | None]:
        """What ``committed()`` shows: the HW hidden in the metadata, or the raw commit if there is none."""
        hw = offset_from_metadata(metadata)
        if hw is None:
            return offset, metadata
        return hw, user_metadata_from(metadata)

    # -- seeks ------------------------------------------------------------------------------
    def plan_seek(self, tp: TopicPartitionKey, offset: int, committed_view: int | None) -> SeekPlan:
        """``LiKafkaConsumerImpl.seek`` translation; raises OffsetNotTrackedError below the tracked range.

        ``committed_view`` is the user-visible committed offset (HW) of ``tp``, or ``None``.
        """
        delivered = self.tracker.delivered(tp)
        if delivered is not None and offset == delivered + 1:
            return SeekPlan(True, offset, offset)
        if committed_view is not None and committed_view == offset:
            return SeekPlan(False, offset, offset, to_committed=True)
        target = offset
        if delivered is not None and offset <= delivered:
            closest = self.tracker.closest_delivered_up_to(tp, offset)
            if closest is None:
                earliest = self.tracker.earliest_tracked_offset(tp)
                target = offset if earliest is None else earliest
            elif closest == offset:
                start = self.tracker.starting_offset(tp, offset)
                safe = self.tracker.safe_offset(tp, offset)
                target = start if safe is None else min(start, safe)
            else:
                safe = self.tracker.safe_offset(tp, closest)
                target = closest if safe is None else safe
        return SeekPlan(False, target, offset)

    def clear(self, tp: TopicPartitionKey) -> None:
        """Drop one partition's buffered segments, tracking and HW (seek, revoke, lost)."""
        self.assembler.clear(tp)
        self.tracker.clear(tp)
        self._hw.pop(tp, None)
        self._holds.pop(tp, None)
        self._busy.discard(tp)

    def clear_partitions(self, tps: Iterable[TopicPartitionKey]) -> None:
        for tp in tps:
            self.clear(tp)
