"""Sans-IO reassembly of LinkedIn segments (``MessageAssemblerImpl`` + ``LargeMessageBufferPool``).

Fed one record at a time, it answers "here is a whole message" or "incomplete", keeps at most
``capacity`` chunk bytes across all partitions (evicting the eldest incomplete message), expires
messages whose first segment lies more than ``expiration_offset_gap`` offsets behind the
partition's position, and knows each partition's *safe offset*: the smallest starting offset of
a message still being assembled, below which a restart must not commit.

With ``wait_for_room`` (a driver that can pause partitions), a full buffer is not a reason to
evict: the partitions not needed to finish the oldest incomplete message are told to wait
(:mod:`gateway.core.flow`), and eviction remains for what cannot be finished within the capacity
(segments of one partition interleaved beyond it).

Each chunk is copied into the message's value as soon as every chunk before it has arrived, so
the record it came from can go and a message is held once (:mod:`gateway.core.buffers`); a chunk that
arrives ahead of its turn is kept as a ``memoryview`` of its record until then.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from gateway.core.buffers import BytesBuilder
from gateway.core.flow import FlowState
from gateway.errors import InvalidSegmentError, LargeMessageDroppedError
from gateway.protocol.primitives import INT64_MAX
from gateway.protocol.records import TopicPartitionKey
from gateway.protocol.segments import Segment
from gateway.protocol.slots import direct_init
from gateway.settings import consumer as keys

DEFAULT_BUFFER_CAPACITY = keys.BUFFER_CAPACITY.default
DEFAULT_EXPIRATION_OFFSET_GAP = keys.EXPIRATION_OFFSET_GAP.default
DEFAULT_MAX_SEGMENTS = keys.MAX_SEGMENTS.default
MESSAGE_BOOKKEEPING_BYTES = 1024
"""What an incomplete message costs beyond its chunks (its record, id, dict entries), counted in the capacity."""
SEGMENT_BOOKKEEPING_BYTES = 256
"""What each buffered segment costs beyond its chunk bytes (the memoryview, the record value's header)."""


def buffered_cost(message_size: int, segments: int) -> int:
    """What a whole chunked message takes of a default assembler's capacity just before it completes.

    The producer refuses a message whose cost exceeds ``large.message.max.bytes`` (by default the
    capacity), since a consumer would evict it as the last of its segments arrived, every time.
    """
    return message_size + MESSAGE_BOOKKEEPING_BYTES + SEGMENT_BOOKKEEPING_BYTES * segments


@direct_init
@dataclass(frozen=True, slots=True)
class Assembled:
    """A complete message. ``value`` is the record value itself for plain records (no copy)."""

    value: bytes | None
    starting_offset: int
    ending_offset: int
    segmented: bool
    """True when the value came from segments (LinkedIn's ``_lm`` rewrite applies)."""
    number_of_segments: int = 1


INCOMPLETE: Assembled = Assembled(None, -1, -1, True, 0)
"""Sentinel compared by identity, as LinkedIn's ``INCOMPLETE_RESULT``: an empty message is not incomplete."""
REFUSED: Assembled = Assembled(None, -1, -1, True, 0)
"""Sentinel: the segment was not taken, its partition must wait (``flow.waits`` says from where)."""


@dataclass(frozen=True, slots=True)
class DroppedMessage:
    """An incomplete message the assembler gave up on, and why."""

    topic: str
    partition: int
    message_id: uuid.UUID
    starting_offset: int
    number_of_segments: int
    message_size: int
    buffered_bytes: int
    reason: str  # "evicted" | "expired" | "cleared"
    last_offset: int = -1
    """The offset of the last segment of it that was read (-1: none is held any more)."""


_Key = tuple[str, int, uuid.UUID]


@dataclass(slots=True)
class _Pending:
    tp: TopicPartitionKey
    message_id: uuid.UUID
    starting_offset: int
    size: int
    count: int
    value: BytesBuilder | None = None  # the in-order chunks, copied into the value as they arrive
    next_seq: int = 0  # the segment whose chunk the value takes next
    last_offset: int = -1
    chunks: dict[int, memoryview] = field(default_factory=dict)  # chunks that arrived ahead of their turn

    def holds(self, seq: int) -> bool:
        return seq < self.next_seq or seq in self.chunks

    def take(self, seq: int, chunk: memoryview) -> None:
        """Copy in-order chunks into the value at once (their records can go); keep the others aside."""
        if seq != self.next_seq:
            self.chunks[seq] = chunk
            return
        if self.value is None:
            self.value = BytesBuilder(self.size)
        self.value.append(chunk)
        self.next_seq += 1
        while self.next_seq in self.chunks:
            self.value.append(self.chunks.pop(self.next_seq))
            self.next_seq += 1

    buffered: int = 0
    bookkeeping: int = 0

    def dropped(self, reason: str) -> DroppedMessage:
        return DroppedMessage(
            self.tp[0],
            self.tp[1],
            self.message_id,
            self.starting_offset,
            self.count,
            self.size,
            self.buffered,
            reason,
            self.last_offset,
        )

    def release(self) -> None:
        """Give the chunks up (they are read again from Kafka); id, start and declared size stay."""
        self.value = None
        self.chunks = {}
        self.next_seq = 0
        self.buffered = 0


class _WaitingForRoom:
    """What :class:`MessageAssembler` does with a full buffer when its driver can pause partitions.

    Kept apart from the assembling itself; it reads and changes the assembler's own state.
    """

    capacity: int
    message_bookkeeping: int
    flow: FlowState
    dropped: list[DroppedMessage]
    _pending: OrderedDict[_Key, _Pending]
    _by_partition: dict[TopicPartitionKey, OrderedDict[uuid.UUID, int]]
    _used: int
    _bookkeeping: int

    def _remove(self, message: _Pending) -> None:
        raise NotImplementedError

    def _make_room(self, tp: TopicPartitionKey, offset: int, key: _Key, cost: int) -> bool:
        """Room for a segment of ``tp``: False when ``tp`` must wait; True once other partitions gave theirs up.

        The oldest incomplete message of a partition still fetched has priority. Its partition goes
        on; every other partition gives up its chunks, newest first, until the segment fits. What
        still does not fit is for eviction within that partition, as before.
        """
        flow = self.flow
        priority = next((k for k, m in self._pending.items() if m.tp not in flow.waiting), key)
        first = self._pending.get(priority)
        if first is not None and first.tp != tp:
            flow.blocker = priority
            self._release(tp, offset, offset)
            return False
        for other in self._partitions_newest_first():
            if self._used + self._bookkeeping + cost <= self.capacity:
                break
            if other == tp or other in flow.waiting or not self._holds_bytes(other):
                continue
            flow.blocker = priority
            reached = flow.seen.get(other, INT64_MAX)
            self._release(other, reached, reached)
        return True

    def _partitions_newest_first(self) -> list[TopicPartitionKey]:
        out: dict[TopicPartitionKey, None] = {}
        for message in reversed(self._pending.values()):
            out.setdefault(message.tp, None)
        return list(out)

    def _holds_bytes(self, tp: TopicPartitionKey) -> bool:
        return any(self._pending[(tp[0], tp[1], mid)].buffered for mid in self._by_partition.get(tp, ()))

    def _release(self, tp: TopicPartitionKey, resume_at: int, reached: int) -> None:
        """``tp`` waits: its incomplete messages give up their chunks and it is read again from the first of them."""
        for message_id, start in self._by_partition.get(tp, {}).items():
            message = self._pending[(tp[0], tp[1], message_id)]
            self._used -= message.buffered
            self._bookkeeping -= message.bookkeeping - self.message_bookkeeping
            message.bookkeeping = self.message_bookkeeping
            message.release()
            resume_at = min(resume_at, start)
        self.flow.wait(tp, resume_at, reached)

    def _resume_when_free(self) -> None:
        """The waiting partitions go on once the message they made room for has left the buffer."""
        flow = self.flow
        if flow.waiting and (flow.blocker is None or flow.blocker not in self._pending):
            flow.resume_all()

    def replayed(self, tp: TopicPartitionKey, offset: int, segment: Segment | None) -> bool:
        """True for a record to pass over: ``tp`` waits (a record fetched before it was told to), or it
        is read again and the record is not a segment of a message ``tp`` gave up."""
        flow = self.flow
        if tp in flow.waiting:
            return True
        if not flow.replaying(tp, offset):
            return False
        return segment is None or (tp[0], tp[1], segment.message_id) not in self._pending

    def give_up_waiting(self) -> None:
        """Nothing can be fetched and partitions still wait: the message they wait for goes, reported as a drop.

        Its partition is caught up, so only its producer could finish it. One message per stall
        (the oldest holding chunks in a partition still fetched): the waiting partitions resume,
        and if they still find no room the next stall gives up the next.
        """
        flow = self.flow
        if not flow.waiting:
            return
        blocker = self._pending.get(flow.blocker) if flow.blocker is not None else None
        if blocker is None or not blocker.buffered:
            blocker = next((m for m in self._pending.values() if m.tp not in flow.waiting and m.buffered), None)
        if blocker is not None:
            self._remove(blocker)
            self.dropped.append(blocker.dropped("evicted"))
        flow.resume_all()


class MessageAssembler(_WaitingForRoom):
    """Buffers segments keyed by (topic, partition, message id) and completes messages; no I/O, no clocks.

    The capacity bounds what is really held: chunk bytes plus ``message_bookkeeping`` per incomplete
    message and ``segment_bookkeeping`` per buffered segment, so many tiny incomplete messages
    cannot hold memory the capacity does not show (``buffered_bytes`` stays the chunk bytes).
    A message id is only unique within its partition: a topic and its mirror, read by one
    consumer, carry the same ids and are assembled apart.

    Deviations from LinkedIn, each a bound LinkedIn lacks: a message may not declare more than
    ``max_segments`` segments, more segments than bytes, or more bytes than ``max_message_bytes``
    (default: the buffer capacity, since a larger one could only be evicted after pushing every
    other message out). Such segments raise :class:`InvalidSegmentError` and buffer nothing.
    """

    def __init__(
        self,
        capacity: int = DEFAULT_BUFFER_CAPACITY,
        expiration_offset_gap: int = DEFAULT_EXPIRATION_OFFSET_GAP,
        *,
        exception_on_message_dropped: bool = False,
        max_segments: int = DEFAULT_MAX_SEGMENTS,
        max_message_bytes: int | None = None,
        message_bookkeeping: int = MESSAGE_BOOKKEEPING_BYTES,
        segment_bookkeeping: int = SEGMENT_BOOKKEEPING_BYTES,
        wait_for_room: bool = False,
    ) -> None:
        if capacity < 1:
            raise ValueError("message.assembler.buffer.capacity must be >= 1")
        self.capacity = capacity
        self.expiration_offset_gap = expiration_offset_gap
        self.exception_on_message_dropped = exception_on_message_dropped
        self.max_segments = max_segments
        self.max_message_bytes = capacity if max_message_bytes is None else max_message_bytes
        self.message_bookkeeping = message_bookkeeping
        self.segment_bookkeeping = segment_bookkeeping
        self._pending: OrderedDict[_Key, _Pending] = OrderedDict()  # creation order, all partitions
        self._by_partition: dict[TopicPartitionKey, OrderedDict[uuid.UUID, int]] = {}  # tracking order
        self._used = 0
        self._bookkeeping = 0
        self.dropped: list[DroppedMessage] = []
        """Every message given up since the caller last emptied this list (evictions and expiries)."""
        self.wait_for_room = wait_for_room
        self.flow = FlowState()
        """Partitions told to wait for room, and those read again (only with ``wait_for_room``)."""

    # -- queries -----------------------------------------------------------------------------
    @property
    def buffered_bytes(self) -> int:
        return self._used

    @property
    def accounted_bytes(self) -> int:
        """Chunk bytes plus bookkeeping: what the capacity bounds."""
        return self._used + self._bookkeeping

    @property
    def incomplete_count(self) -> int:
        return len(self._pending)

    def safe_offset(self, tp: TopicPartitionKey, current_offset: int) -> int:
        """Expire what ``current_offset`` has left behind, then the smallest pending start (or INT64_MAX)."""
        self._expire(tp, current_offset)
        tracked = self._by_partition.get(tp)
        if tracked:
            return next(iter(tracked.values()))
        return INT64_MAX

    def has_pending(self, tp: TopicPartitionKey) -> bool:
        """Something incomplete in ``tp``, or ``tp`` waits for room or is read again: no fast path."""
        if self._by_partition.get(tp):
            return True
        flow = self.flow
        return bool(flow.waiting or flow.replay) and (tp in flow.waiting or tp in flow.replay)

    def passed(self, tp: TopicPartitionKey, offset: int) -> None:
        """The record at ``offset`` of ``tp`` was handled (where ``tp`` is read again from, should it wait)."""
        if self.wait_for_room and tp in self._by_partition:
            self.flow.note(tp, offset)

    def pending_start(self, tp: TopicPartitionKey) -> int | None:
        """Smallest pending start in ``tp`` without expiring, or ``None`` when nothing is pending."""
        tracked = self._by_partition.get(tp)
        return next(iter(tracked.values())) if tracked else None

    def safe_offsets(self) -> dict[TopicPartitionKey, int]:
        """Smallest pending start per partition that has any, without expiring."""
        return {tp: next(iter(t.values())) for tp, t in self._by_partition.items() if t}

    # -- feeding -----------------------------------------------------------------------------
    def add_segment(self, tp: TopicPartitionKey, offset: int, segment: Segment) -> Assembled:
        """A record already known to be a segment (see :func:`~gateway.protocol.classify.classify`).

        A whole message or :data:`INCOMPLETE` out. Raises :class:`InvalidSegmentError` for segments
        LinkedIn would reject and, when configured, :class:`LargeMessageDroppedError` after an
        eviction (the current segment stays buffered).
        """
        if segment.number_of_segments == 1:
            return Assembled(bytes(segment.payload), offset, offset, True, 1)
        return self._add(tp, offset, segment)

    def _add(self, tp: TopicPartitionKey, offset: int, segment: Segment) -> Assembled:
        segment.sanity_check()
        self._check_declared(segment)
        key = (tp[0], tp[1], segment.message_id)
        message = self._pending.get(key)
        is_new = message is None
        if message is None:
            message = _Pending(tp, segment.message_id, offset, segment.message_size, segment.number_of_segments)
        if message.starting_offset > offset:
            raise InvalidSegmentError("Out of order segment offsets detected.")
        size = len(segment.payload)
        if size >= self.capacity:
            raise InvalidSegmentError(
                f"Saw single message segment size = {size}, which is larger than buffer capacity = {self.capacity}"
            )
        if size <= 0:
            raise InvalidSegmentError(f"segment {segment.sequence_number} of {segment.message_id} is empty")
        if message.size != segment.message_size or message.count != segment.number_of_segments:
            raise InvalidSegmentError(
                f"Detected UUID conflict: {segment.message_id} declared {message.count} segments / "
                f"{message.size} bytes, then {segment.number_of_segments} / {segment.message_size}"
            )
        seq = segment.sequence_number
        if self.wait_for_room and not message.holds(seq):
            cost = size + self.segment_bookkeeping + (self.message_bookkeeping if is_new else 0)
            if self._used + self._bookkeeping + cost > self.capacity and not self._make_room(tp, offset, key, cost):
                self._resume_when_free()
                return REFUSED
            self.flow.note(tp, offset)
        if is_new:  # inserted only once valid, so rejected segments leave nothing behind
            self._pending[key] = message
            message.bookkeeping = self.message_bookkeeping
            self._bookkeeping += self.message_bookkeeping
        if message.holds(seq):  # a resent segment: LinkedIn ignores it without comparing
            added = 0
        else:
            if message.buffered + size > message.size:
                raise InvalidSegmentError(
                    f"segments of {segment.message_id} hold more bytes than the message has "
                    f"({message.buffered + size} > {message.size})"
                )
            message.take(seq, segment.payload)
            message.last_offset = max(message.last_offset, offset)
            message.buffered += size
            message.bookkeeping += self.segment_bookkeeping
            self._bookkeeping += self.segment_bookkeeping
            added = size
        self._used += added
        result = INCOMPLETE
        if message.next_seq == message.count:
            self._remove(message)
            if message.buffered != message.size:
                raise InvalidSegmentError(f"buffered bytes {message.buffered} differ from message size {message.size}")
            assert message.value is not None  # every segment was taken, in order
            value = message.value.build()
            result = Assembled(value, message.starting_offset, offset, True, message.count)
        else:
            self._by_partition.setdefault(tp, OrderedDict()).setdefault(message.message_id, message.starting_offset)
        try:
            self._evict_for_space()
        finally:  # expiry runs even when an eviction is reported by raising
            self._expire(tp, offset)
            self._resume_when_free()
        return result

    def _check_declared(self, segment: Segment) -> None:
        if segment.number_of_segments > self.max_segments:
            raise InvalidSegmentError(
                f"message {segment.message_id} declares {segment.number_of_segments} segments, "
                f"more than message.assembler.max.segments.per.message={self.max_segments}"
            )
        if segment.number_of_segments > segment.message_size:
            raise InvalidSegmentError(
                f"message {segment.message_id} declares {segment.number_of_segments} segments "
                f"for {segment.message_size} bytes"
            )
        if segment.message_size > self.max_message_bytes:
            raise InvalidSegmentError(
                f"message {segment.message_id} declares {segment.message_size} bytes, more than "
                f"message.assembler.max.message.bytes={self.max_message_bytes}"
            )

    # -- removal -----------------------------------------------------------------------------
    def _forget(self, tp: TopicPartitionKey, message_id: uuid.UUID) -> _Pending | None:
        message = self._pending.pop((tp[0], tp[1], message_id), None)
        if message is not None:
            self._used -= message.buffered
            self._bookkeeping -= message.bookkeeping
        return message

    def _remove(self, message: _Pending) -> None:
        self._forget(message.tp, message.message_id)
        tracked = self._by_partition.get(message.tp)
        if tracked is not None:
            tracked.pop(message.message_id, None)

    def _evict_for_space(self) -> None:
        first_error: LargeMessageDroppedError | None = None
        waiting = self.flow.waiting
        while self._used + self._bookkeeping > self.capacity and self._pending:
            eldest = next((m for m in self._pending.values() if m.tp not in waiting), None)
            if eldest is None:  # only messages of waiting partitions are left: they hold no chunks
                break
            self._remove(eldest)
            info = eldest.dropped("evicted")
            self.dropped.append(info)
            if self.exception_on_message_dropped and first_error is None:
                first_error = LargeMessageDroppedError(
                    f"The following large message is dropped due to buffer full: {info}", info
                )
        if first_error is not None:
            raise first_error

    def _expire(self, tp: TopicPartitionKey, current_offset: int) -> None:
        tracked = self._by_partition.get(tp)
        limit = current_offset - self.expiration_offset_gap
        while tracked:
            message_id, start = next(iter(tracked.items()))
            if start >= limit:
                break
            del tracked[message_id]
            message = self._forget(tp, message_id)
            if message is not None:
                self.dropped.append(message.dropped("expired"))
                self._resume_when_free()

    def clear(self, tp: TopicPartitionKey | None = None) -> None:
        """Forget one partition's pending messages (seek, revoke), or everything."""
        if tp is None:
            self._pending.clear()
            self._by_partition.clear()
            self._used = self._bookkeeping = 0
            self.flow.forget()
            return
        for message_id in self._by_partition.pop(tp, {}):
            self._forget(tp, message_id)
        self.flow.forget(tp)
        self._resume_when_free()
