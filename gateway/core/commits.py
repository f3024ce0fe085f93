"""Commit and seek translation (LinkedIn's ``ConsumerRecordsProcessor`` minus the record path).

Kafka stores a *safe* offset (where a restart must resume, possibly the first segment of a
message still being assembled) with the user-visible high watermark in its metadata
(``"<HW>,<meta>"``). This module turns user offsets into such commits and back, plans seeks, and
keeps the per-partition high watermarks and holds. The driver does every network call and hands
the answers in (:meth:`CommitTranslator.load_commit`), so this stays testable without Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.core.assembler import MessageAssembler
from gateway.core.offsets import DeliveredOffsetTracker, HighWatermark
from gateway.protocol.metadata import StoredMetadata, wrap_metadata
from gateway.protocol.records import TopicPartitionKey


@dataclass(frozen=True, slots=True)
class SeekPlan:
    """How to carry out a user's ``seek(tp, offset)``: where the inner consumer goes and what HW follows."""

    noop: bool
    target: int
    high_watermark: int
    to_committed: bool = False


class CommitFloors:
    """Offsets no commit of a partition may pass for messages the driver handed out that have not reached
    the application: ``kept`` back for its next call (the inbox's), ``lent`` to a thread that may not
    deliver them (:mod:`gateway.consumer.handoff`).

    The driver sets them here as they change, so the translator reads them without asking it. Unlike
    holds they bound commits only, never the ``_so`` a record carries.
    """

    __slots__ = ("_kept", "_lent")

    def __init__(self) -> None:
        self._kept: dict[TopicPartitionKey, int] = {}
        self._lent: dict[TopicPartitionKey, int] = {}

    def keep(self, tp: TopicPartitionKey, floor: int) -> None:
        """A message of ``tp`` kept back: commits stay at ``floor`` (the lowest given) until :meth:`unkeep`."""
        self._kept[tp] = min(floor, self._kept.get(tp, floor))

    def unkeep(self, tp: TopicPartitionKey | None = None) -> None:
        """The messages kept back of ``tp`` (of every partition for None) went out or were dropped."""
        if tp is None:
            self._kept.clear()
        else:
            self._kept.pop(tp, None)

    def kept(self, tp: TopicPartitionKey) -> int | None:
        return self._kept.get(tp) if self._kept else None

    def lend(self, floors: Mapping[TopicPartitionKey, int]) -> None:
        """What is lent out now bounds commits at ``floors`` (replacing what was lent before)."""
        self._lent = dict(floors)

    def lent(self, tp: TopicPartitionKey) -> int | None:
        return self._lent.get(tp) if self._lent else None

    def lowest(self, tp: TopicPartitionKey) -> int | None:
        kept, lent = self.kept(tp), self.lent(tp)
        return kept if lent is None else lent if kept is None else min(lent, kept)


class CommitTranslator:
    """High watermarks, holds and the commit/seek translations; reads the pipeline's assembler and tracker."""

    def __init__(self, assembler: MessageAssembler, tracker: DeliveredOffsetTracker) -> None:
        self.assembler = assembler
        self.tracker = tracker
        self.high_watermarks: dict[TopicPartitionKey, HighWatermark] = {}
        """Loaded per partition by :meth:`load_commit`; read directly on the pipeline's hot path."""
        self._holds: dict[TopicPartitionKey, set[int]] = {}
        self.busy: set[TopicPartitionKey] = set()
        """Partitions with holds: never on the fast path. Changed only here."""
        self.floors = CommitFloors()
        """Where commits of a partition must stay for what was handed out but has not reached the
        application; the driver sets them (:class:`CommitFloors`)."""

    # -- holds: delivered offsets that must be read again after a restart ------------------
    def hold(self, tp: TopicPartitionKey, offset: int) -> None:
        """Pin commits at or below ``offset``: a message there could not be resolved.

        Commits then stop at ``offset`` and the high watermark they carry does too, so a restart
        reads the message again instead of filtering it as already delivered (at the price of
        re-delivering what followed it: at least once, never lost).
        """
        self._holds.setdefault(tp, set()).add(offset)
        self.busy.add(tp)

    def release(self, tp: TopicPartitionKey, offset: int) -> None:
        """The application took responsibility for the held record at ``offset`` (it committed that message).

        Only that one: committing a later message does not release an earlier unresolved one, so
        ``commit(message=...)`` after each message never commits past a record it did not get.
        """
        held = self._holds.get(tp)
        if held:
            held.discard(offset)
        if not held:
            self.busy.discard(tp)

    def floor(self, tp: TopicPartitionKey) -> int | None:
        held = self._holds.get(tp)
        return min(held) if held else None

    # -- high watermarks -------------------------------------------------------------------
    def needs_commit(self, tp: TopicPartitionKey) -> bool:
        """True until :meth:`load_commit` was called for ``tp`` (LinkedIn reads it lazily, blocking)."""
        return tp not in self.high_watermarks

    def load_commit(self, tp: TopicPartitionKey, offset: int | None, high_watermark: int | None) -> None:
        """Hand in what Kafka stores for ``tp``: the offset (None when nothing is committed) and the
        high watermark its metadata carries (None unless it is LinkedIn's form, :func:`read_metadata`)."""
        self.high_watermarks[tp] = HighWatermark.from_commit(offset, high_watermark)

    def high_watermark(self, tp: TopicPartitionKey) -> HighWatermark:
        return self.high_watermarks.setdefault(tp, HighWatermark())

    def set_high_watermark(self, tp: TopicPartitionKey, offset: int) -> None:
        self.high_watermark(tp).current = offset

    def clear_high_watermarks(self) -> None:
        self.high_watermarks.clear()

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
            elif position >= 0 and (tp in self.high_watermarks or self.tracker.earliest_tracked_offset(tp) is not None):
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
            pending = self.assembler.pending_start(tp)
            if pending is not None:  # never past an incomplete message, even one the tracker forgot
                safe = min(safe, pending)
            floor = self._commit_floor(tp)
            if floor is not None:
                safe = min(safe, floor)
                hw_to_commit = min(hw_to_commit, floor)
            out[tp] = (min(safe, orig), wrap_metadata(hw_to_commit, metadata))
        return out

    def _commit_floor(self, tp: TopicPartitionKey) -> int | None:
        """The lowest of the holds and of what is kept back or lent out: no commit of ``tp`` goes past it."""
        floor = self.floor(tp)
        lent = self.floors.lowest(tp)
        if lent is None:
            return floor
        return lent if floor is None else min(floor, lent)

    @staticmethod
    def user_view_of_commit(offset: int, metadata: StoredMetadata) -> tuple[int, str | None]:
        """What ``committed()`` shows: the HW hidden in the metadata and the user's part, or the raw commit."""
        if metadata.high_watermark is None:
            return offset, metadata.user
        return metadata.high_watermark, metadata.user

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
        """Drop one partition's HW and holds (seek, revoke, lost)."""
        self.high_watermarks.pop(tp, None)
        self._holds.pop(tp, None)
        self.busy.discard(tp)
