"""Sans-IO: turn the raw records of one offset range into the messages that range must emit.

A range task cannot simply reassemble what it reads: a chunked message may have begun before
the range, and a message begun inside it may finish after it. :class:`RangeAssembler` runs the
consumer's own pipeline (:class:`~gateway.core.pipeline.ConsumerPipeline`) over the range *and* a
read-back window in front of it, and emits only what completes at an offset inside the range,
so that every message has exactly one owner: the range holding its completing record.

:func:`earlier_start_needed` decides whether the read-back went far enough. A message can only
complete if its first segment is no more than ``expiration_offset_gap`` offsets behind the last
record seen before the completing one (the assembler expires older ones after adding each
segment); with dense offsets that is ``gap + 1`` before the range, but offsets have holes
(transaction markers, compaction), so the task checks the last visible offset it saw before the
range and reads further back when needed, before it has emitted anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gateway.core.assembler import MessageAssembler
from gateway.core.offsets import DeliveredOffsetTracker
from gateway.core.pipeline import (
    ConsumerPipeline,
    InvalidRecord,
    MessageDropped,
    WholeMessage,
    error_text,
)
from gateway.policy import RouteKind
from gateway.protocol.peers import PeerReader
from gateway.protocol.records import Record

ROUTE_PLAIN = RouteKind.PLAIN
ROUTE_CHUNKED = RouteKind.CHUNKED
ROUTE_REFERENCE = RouteKind.REFERENCE

log = logging.getLogger(__name__)

# The tracker remembers every segment offset until enough messages pass through; a range task
# never asks it about commits or seeks, so it is reset now and then to keep long ranges flat.
_TRACKER_RESET_EVERY = 10_000


@dataclass
class RangeCounters:
    records: int = 0
    read_back: int = 0
    emitted: int = 0
    invalid: int = 0
    dropped_expired: int = 0
    dropped_evicted: int = 0
    dropped: list[str] = field(default_factory=list)


class RangeAssembler:
    """Feeds one partition's records, from the read-back start on, to the consumer pipeline.

    ``emit_from`` is the range's first offset: records before it only rebuild the assembler's
    state (segments of messages still open at the boundary) and never produce output, so a
    message completed before the range, which the previous range emitted, is not repeated.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        emit_from: int,
        *,
        capacity: int,
        expiration_offset_gap: int,
        max_segments: int,
        max_message_bytes: int | None = None,
        peers: PeerReader | None = None,
    ) -> None:
        self.tp = (topic, partition)
        self.emit_from = emit_from
        self.pipeline = ConsumerPipeline(
            MessageAssembler(
                capacity, expiration_offset_gap, max_segments=max_segments, max_message_bytes=max_message_bytes
            ),
            DeliveredOffsetTracker(),
            peers=peers,
        )
        self.counters = RangeCounters()

    def feed(self, record: Record) -> WholeMessage | None:
        """One record, in offset order; the message it completes if this range owns it.

        An invalid record inside the range comes out as a chunked row with ``error`` set.
        """
        emit = record.offset >= self.emit_from
        self.counters.records += 1
        if not emit:
            self.counters.read_back += 1
        if self.counters.records % _TRACKER_RESET_EVERY == 0:
            self.pipeline.trim(self.tp)
        out: WholeMessage | None = None
        for event in self.pipeline.feed(self.tp, record):
            if isinstance(event, MessageDropped):
                if emit:  # read-back drops are the previous range's to report
                    self._count_dropped(event)
            elif isinstance(event, InvalidRecord):
                if emit:
                    self.counters.invalid += 1
                    out = WholeMessage(
                        record,
                        None,
                        record.headers,
                        RouteKind.CHUNKED,
                        record.offset,
                        event.safe_offset if event.safe_offset is not None else record.offset,
                        error=error_text(event.exception),
                        exception=event.exception,
                    )
            elif emit and isinstance(event, WholeMessage):  # a range never awaits commits
                self.counters.emitted += 1
                out = event
        return out

    def _count_dropped(self, event: MessageDropped) -> None:
        message = event.dropped
        if message.reason == "expired":
            self.counters.dropped_expired += 1
        else:
            self.counters.dropped_evicted += 1
        if len(self.counters.dropped) < 20:
            self.counters.dropped.append(
                f"{message.reason} {message.message_id} from offset {message.starting_offset} "
                f"({message.number_of_segments} segments)"
            )


def earlier_start_needed(
    start: int, low: int, emit_from: int, last_before: int | None, expiration_offset_gap: int
) -> int | None:
    """Where to restart reading when the read-back window was too short, or ``None`` when it sufficed.

    ``last_before`` is the last offset seen below ``emit_from`` (``None``: no record in
    ``[start, emit_from)``). A message completing at the range's first visible record may have
    begun ``gap`` offsets before that last record; with dense offsets it is ``emit_from - 1``
    and a read-back of ``gap + 1`` suffices. When nothing was visible, the distance doubles, so a
    long hole (a compacted stretch) costs a few cheap passes rather than one per ``gap``.
    """
    if start <= low:
        return None
    if last_before is None:
        return max(low, start - max(expiration_offset_gap + 1, emit_from - start))
    needed = last_before - expiration_offset_gap
    if needed < start:
        return max(low, needed)
    return None


Fetch = Callable[[int, int], Iterable[Sequence[Record]]]
"""``fetch(start, until)``: the partition's records from ``start`` up to ``until``, in batches."""


@dataclass(frozen=True, slots=True)
class AssemblyLimits:
    capacity: int
    expiration_offset_gap: int
    max_segments: int
    max_message_bytes: int | None = None
    lookback_offsets: int | None = None
    """Default ``expiration_offset_gap + 1``: the read-back that makes ranges agree with one consumer."""
    peers: PeerReader | None = None
    """``large.message.peer.formats``: records other libraries wrote, resolved like envelopes."""

    @property
    def lookback(self) -> int:
        return self.expiration_offset_gap + 1 if self.lookback_offsets is None else self.lookback_offsets


def owned_messages(
    fetch: Fetch,
    topic: str,
    partition: int,
    emit_from: int,
    until: int,
    low: int,
    limits: AssemblyLimits,
    *,
    on_batch: Callable[[Sequence[Record]], None] | None = None,
    on_restart: Callable[[], None] | None = None,
    counters: list[RangeCounters] | None = None,
) -> Iterator[WholeMessage]:
    """The messages range ``[emit_from, until)`` owns, reading back from ``emit_from - lookback``.

    ``low`` is the log's first offset. ``on_batch`` sees each fetched batch before its records are
    assembled (the reader starts reference fetches there); ``on_restart`` is called when the
    read-back proves too short and reading starts over further back, which always happens
    before anything was emitted. ``counters`` receives the final pass's counters.
    """
    gap = limits.expiration_offset_gap
    adaptive = limits.lookback >= gap + 1
    start = max(low, emit_from - limits.lookback)
    while True:
        assembler = RangeAssembler(
            topic,
            partition,
            emit_from,
            capacity=limits.capacity,
            expiration_offset_gap=gap,
            max_segments=limits.max_segments,
            max_message_bytes=limits.max_message_bytes,
            peers=limits.peers,
        )
        checked = not adaptive or start >= emit_from
        last_before: int | None = None
        restart: int | None = None
        for batch in fetch(start, until):
            if on_batch is not None:
                on_batch(batch)
            for record in batch:
                if record.offset >= until:
                    break
                if not checked and record.offset >= emit_from:
                    checked = True
                    restart = earlier_start_needed(start, low, emit_from, last_before, gap)
                    if restart is not None:
                        break
                if record.offset < emit_from:
                    last_before = record.offset
                message = assembler.feed(record)
                if message is not None:
                    yield message
            if restart is not None:
                break
        if restart is None:
            break
        log.info(
            "%s[%d] range %d..%d: read-back from %d was too short, reading from %d",
            topic,
            partition,
            emit_from,
            until,
            start,
            restart,
        )
        if on_restart is not None:
            on_restart()
        start = restart
    if counters is not None:
        counters.append(assembler.counters)
    c = assembler.counters
    if c.dropped_expired or c.dropped_evicted:
        log.warning(
            "%s[%d] range %d..%d dropped %d expired and %d evicted incomplete messages: %s",
            topic,
            partition,
            emit_from,
            until,
            c.dropped_expired,
            c.dropped_evicted,
            c.dropped,
        )
