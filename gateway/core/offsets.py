"""Sans-IO offset bookkeeping: LinkedIn's ``DeliveredMessageOffsetTracker`` and consumer high watermarks.

A chunked message is delivered at the offset of its *last* segment but must be re-read from its
*first* one after a restart, and plain records interleave with its segments. The tracker keeps,
for the last ``max_tracked`` delivered messages of a partition, the offset that is safe to commit
when that message was handed out and where the message started, so that ``commit``, ``seek`` and
``safe_offset`` can be answered for any recently delivered offset.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field

from gateway.errors import OffsetNotTrackedError
from gateway.protocol.records import TopicPartitionKey

Progress = tuple[int, int, int]
"""``(current safe offset, last delivered offset, first offset seen)`` of a partition (its ``progress``)."""


DEFAULT_MAX_TRACKED = 500
SEGMENT_OFFSETS_PER_MESSAGE = 20
"""Non-message offsets (segments, invalid records) kept per tracked message before the oldest go."""


@dataclass(slots=True)
class _PartitionTracker:
    earliest: int
    max_tracked: int
    current_safe: int
    max_segments: int
    delivered: int = -1
    origin: int = -1  # the first offset seen since the partition was (re)started; never moves
    segment_offsets: list[int] = field(default_factory=list)  # sorted; offsets that are not messages
    entries: OrderedDict[int, tuple[int, int]] = field(default_factory=OrderedDict)  # offset -> (safe, start)

    def is_segment(self, offset: int) -> bool:
        i = bisect.bisect_left(self.segment_offsets, offset)
        return i < len(self.segment_offsets) and self.segment_offsets[i] == offset

    def add_segment(self, offset: int) -> None:
        if not self.segment_offsets or offset > self.segment_offsets[-1]:
            self.segment_offsets.append(offset)
        elif not self.is_segment(offset):
            bisect.insort(self.segment_offsets, offset)
        if len(self.segment_offsets) > self.max_segments:
            self._forget_oldest_segments()

    def _forget_oldest_segments(self) -> None:
        """Bound the list: the oldest quarter goes, and with it the range that could be answered.

        Offsets below the new ``earliest`` are then "not tracked" (a commit or seek there raises
        OffsetNotTrackedError) rather than wrongly taken for messages.
        """
        cut = max(1, len(self.segment_offsets) // 4)
        self.earliest = max(self.earliest, self.segment_offsets[cut - 1] + 1)
        del self.segment_offsets[:cut]
        while self.entries:
            oldest = next(iter(self.entries))
            if oldest >= self.earliest:
                break
            del self.entries[oldest]

    def put(self, offset: int, safe: int, start: int) -> None:
        self.entries[offset] = (safe, start)
        if len(self.entries) > self.max_tracked:
            eldest, _ = self.entries.popitem(last=False)
            self.earliest = eldest + 1
            cut = bisect.bisect_left(self.segment_offsets, eldest)
            del self.segment_offsets[:cut]

    def is_tracked_message(self, offset: int) -> bool:
        return self.earliest <= offset <= self.delivered and not self.is_segment(offset)

    def in_range(self, offset: int) -> bool:
        return self.earliest <= offset <= self.delivered

    def lookup(self, offset: int) -> tuple[int, int]:
        return self.entries.get(offset) or (offset + 1, offset)


class DeliveredOffsetTracker:
    """Safe and starting offsets of recently delivered messages, per partition; bounded in size.

    Per partition it holds at most ``max_tracked`` messages and ``max_segment_offsets`` offsets
    that are not messages (segments and invalid records): ``max_entries`` in all, whatever the
    traffic.
    """

    def __init__(self, max_tracked: int = DEFAULT_MAX_TRACKED, max_segment_offsets: int | None = None) -> None:
        if max_tracked < 1:
            raise ValueError("max.tracked.messages.per.partition must be >= 1")
        self.max_tracked = max_tracked
        self.max_segment_offsets = (
            max_tracked * SEGMENT_OFFSETS_PER_MESSAGE if max_segment_offsets is None else max(1, max_segment_offsets)
        )
        self._partitions: dict[TopicPartitionKey, _PartitionTracker] = {}

    def _get(self, tp: TopicPartitionKey, offset: int) -> _PartitionTracker:
        tracker = self._partitions.get(tp)
        if tracker is None:
            tracker = _PartitionTracker(offset, self.max_tracked, offset, self.max_segment_offsets, origin=offset)
            self._partitions[tp] = tracker
        return tracker

    def track(self, tp: TopicPartitionKey, offset: int, safe: int, start: int, delivered: bool) -> None:
        """Record a whole message seen at ``offset``; only entries that differ from the default are stored."""
        tracker = self._get(tp, offset)
        tracker.current_safe = safe
        if delivered:
            tracker.delivered = offset
        if start != offset or safe != offset + 1:
            tracker.put(offset, safe, start)

    def track_plain(self, tp: TopicPartitionKey, offset: int) -> None:
        """``track`` for a delivered record with nothing pending in its partition: the hot path, inlined."""
        tracker = self._partitions.get(tp)
        if tracker is None:
            tracker = _PartitionTracker(offset, self.max_tracked, offset, self.max_segment_offsets, origin=offset)
            self._partitions[tp] = tracker
        tracker.current_safe = offset + 1
        tracker.delivered = offset

    def add_segment_offset(self, tp: TopicPartitionKey, offset: int) -> None:
        """An offset that held a segment (or anything that is not a deliverable message)."""
        self._get(tp, offset).add_segment(offset)

    def _not_tracked(self, tp: TopicPartitionKey, offset: int, tracker: _PartitionTracker) -> OffsetNotTrackedError:
        return OffsetNotTrackedError(
            tp[0],
            tp[1],
            offset,
            f"Offset {offset} for partition {tp[0]}-{tp[1]} is either invalid or has been evicted. "
            f"Tracked offset range: [{tracker.earliest}, {tracker.delivered}], safe offset = {tracker.current_safe}",
        )

    def is_segment_offset(self, tp: TopicPartitionKey, offset: int) -> bool:
        tracker = self._partitions.get(tp)
        return tracker is not None and tracker.is_segment(offset)

    def is_message_offset(self, tp: TopicPartitionKey, offset: int) -> bool:
        """True when ``offset`` was tracked as a whole message (delivered or filtered)."""
        tracker = self._partitions.get(tp)
        return tracker is not None and tracker.earliest <= offset and not tracker.is_segment(offset)

    def current_safe_offset(self, tp: TopicPartitionKey) -> int | None:
        tracker = self._partitions.get(tp)
        return None if tracker is None else tracker.current_safe

    def safe_offset(self, tp: TopicPartitionKey, offset: int) -> int | None:
        """The safe offset at the time the message at ``offset`` was delivered."""
        tracker = self._partitions.get(tp)
        if offset < 0 or tracker is None:
            return None
        if not tracker.is_tracked_message(offset):
            raise self._not_tracked(tp, offset, tracker)
        return tracker.lookup(offset)[0]

    def starting_offset(self, tp: TopicPartitionKey, offset: int) -> int:
        tracker = self._partitions.get(tp)
        if tracker is None or tracker.delivered < 0:
            return offset
        if not tracker.is_tracked_message(offset):
            raise self._not_tracked(tp, offset, tracker)
        return tracker.lookup(offset)[1]

    def closest_delivered_up_to(self, tp: TopicPartitionKey, offset: int) -> int | None:
        tracker = self._partitions.get(tp)
        if tracker is None or tracker.delivered < 0:
            return None
        if not tracker.in_range(offset):
            raise self._not_tracked(tp, offset, tracker)
        while tracker.is_segment(offset):
            offset -= 1
        return None if offset < tracker.earliest else offset

    def progress_of(self, tp: TopicPartitionKey) -> Progress | None:
        """:meth:`progress` of one partition (None when it has no state yet): one lookup, not a dict of all."""
        t = self._partitions.get(tp)
        return None if t is None else (t.current_safe, t.delivered, t.origin)

    def delivered(self, tp: TopicPartitionKey) -> int | None:
        tracker = self._partitions.get(tp)
        return None if tracker is None or tracker.delivered < 0 else tracker.delivered

    def earliest_tracked_offset(self, tp: TopicPartitionKey) -> int | None:
        tracker = self._partitions.get(tp)
        return None if tracker is None else tracker.earliest

    def partitions(self) -> list[TopicPartitionKey]:
        return list(self._partitions)

    def progress(self) -> dict[TopicPartitionKey, Progress]:
        """Per partition: the current safe offset, the last delivered offset (-1: none) and the first offset seen.

        Compared before and after a call, it tells which partitions delivered in between and where
        a commit stood before they did (see :mod:`gateway.consumer.handoff`).
        """
        return {tp: (t.current_safe, t.delivered, t.origin) for tp, t in self._partitions.items()}

    @property
    def max_entries(self) -> int:
        """The most entries :meth:`size` can count for one partition."""
        return self.max_tracked + self.max_segment_offsets

    def size(self, tp: TopicPartitionKey | None = None) -> int:
        """Entries held for ``tp`` (the largest partition's when None): messages plus other offsets."""
        if tp is None:
            trackers = list(self._partitions.values())
        else:
            trackers = [self._partitions[tp]] if tp in self._partitions else []
        return max((len(t.entries) + len(t.segment_offsets) for t in trackers), default=0)

    def clear(self, tp: TopicPartitionKey | None = None) -> None:
        if tp is None:
            self._partitions.clear()
        else:
            self._partitions.pop(tp, None)


@dataclass(slots=True)
class HighWatermark:
    """A partition's consumer high watermark state; -1 means "not defined".

    ``initial`` and ``committed`` come from the commit stored in Kafka (``"<HW>,<meta>"`` and the
    broker offset); ``current`` follows every delivered offset and every seek.
    """

    initial: int = -1
    committed: int = -1
    current: int = -1

    @classmethod
    def from_commit(cls, committed_offset: int | None, high_watermark: int | None) -> HighWatermark:
        if high_watermark is None or committed_offset is None:
            return cls()
        return cls(initial=high_watermark, committed=committed_offset, current=high_watermark)

    def filter_below(self) -> int | None:
        """Offsets below this are re-read but not re-delivered; ``None`` when nothing is known."""
        if self.current != -1:
            return self.current
        if self.initial != -1:
            return self.initial
        return None
