"""Waiting for room (gateway.core.flow): which partitions must wait, and what is read again, without I/O."""

from __future__ import annotations

from gateway.core.assembler import MessageAssembler
from gateway.core.flow import Wait
from gateway.core.offsets import DeliveredOffsetTracker
from gateway.core.pipeline import ChunkCompleted, ConsumerPipeline, Event, FlowChange, MessageDropped, PlainMessage
from gateway.errors import LargeMessageDroppedError
from gateway.protocol.headers import Headers
from gateway.protocol.records import Record, TopicPartitionKey
from tests.helpers import payload, segments
from tests.pipelines import InspectedPipeline

P0: TopicPartitionKey = ("t", 0)
P1: TopicPartitionKey = ("t", 1)
A, B = payload(1200, 1), payload(1200, 2)


def pipeline(capacity: int = 1500, *, stall_s: float = 5.0, raise_on_drop: bool = True) -> InspectedPipeline:
    """Chunk bytes only (no bookkeeping), so that the arithmetic stays readable: 400-byte segments."""
    assembler = MessageAssembler(
        capacity,
        exception_on_message_dropped=raise_on_drop,
        message_bookkeeping=0,
        segment_bookkeeping=0,
        wait_for_room=True,
    )
    p = InspectedPipeline(assembler, DeliveredOffsetTracker(), hold_drops=True, stall_timeout_s=stall_s)
    for tp in (P0, P1):
        p.commits.load_commit(tp, None, None)
    return p


def feed(p: ConsumerPipeline, tp: TopicPartitionKey, offset: int, record: tuple[bytes | None, Headers]) -> list[Event]:
    value, headers = record
    return p.feed(tp, Record(offset, b"k", value, headers))


def plain(p: ConsumerPipeline, tp: TopicPartitionKey, offset: int) -> list[Event]:
    return p.feed(tp, Record(offset, b"k", b"plain", None))


def test_a_partition_not_needed_for_the_oldest_message_waits_then_is_read_again_without_repeats() -> None:
    p = pipeline()
    a, b = segments(A, 400), segments(B, 400)
    assert feed(p, P0, 0, a[0]) == []
    assert feed(p, P1, 0, b[0]) == []
    (delivered,) = plain(p, P1, 1)  # handed out while B is pending
    assert isinstance(delivered, PlainMessage)
    assert feed(p, P0, 1, a[1]) == []
    # B's second segment does not fit beside A: A is older, so P1 waits and gives up B's chunks
    assert feed(p, P1, 2, b[1]) == [FlowChange((Wait(P1, 0),), ())]
    assert p.assembler.buffered_bytes == 800 and p.metrics()["dropped.evicted"] == 0
    assert p.assembler.pending_start(P1) == 0  # B still bounds P1's commits
    assert feed(p, P1, 3, b[2]) == []  # fetched before the pause took effect: passed over
    events = feed(p, P0, 2, a[2])
    assert isinstance(events[-1], ChunkCompleted) and events[-1].value == A
    assert FlowChange((), (Wait(P1, 0),)) in events  # A is done: P1 goes on from B's first segment
    # P1 read again: B's segments are fed, the plain record handed out before is passed over
    assert feed(p, P1, 0, b[0]) == []
    assert plain(p, P1, 1) == []
    assert feed(p, P1, 2, b[1]) == []
    (whole,) = feed(p, P1, 3, b[2])
    assert isinstance(whole, ChunkCompleted) and whole.value == B
    assert p.metrics()["flow.replayed"] == 2  # the record fetched before the pause, and the plain one
    assert p.metrics()["dropped.evicted"] == 0


def test_the_oldest_message_takes_room_from_other_partitions_newest_first() -> None:
    p = pipeline()
    a, b = segments(A, 400), segments(B, 400)
    feed(p, P0, 0, a[0])
    feed(p, P1, 0, b[0])
    feed(p, P1, 1, b[1])
    p.commits.safe_offsets_to_commit({P1: (2, "")}, False)  # a commit at P1's position reads nothing there
    # A's next segment does not fit: A has priority, P1 gives B up and reads it again from 0
    assert feed(p, P0, 1, a[1]) == [FlowChange((Wait(P1, 0),), ())]
    assert p.assembler.buffered_bytes == 800
    (whole, change) = feed(p, P0, 2, a[2])
    assert isinstance(whole, ChunkCompleted) or isinstance(change, ChunkCompleted)
    assert feed(p, P1, 0, b[0]) == [] and feed(p, P1, 1, b[1]) == []  # below where P1 had got to: fed again
    (first,) = plain(p, P1, 2)  # never processed before the pause: delivered, not passed over
    assert isinstance(first, PlainMessage)
    (done,) = feed(p, P1, 3, b[2])
    assert isinstance(done, ChunkCompleted) and done.value == B


def test_segments_interleaved_beyond_the_capacity_in_one_partition_are_evicted_reported_and_held() -> None:
    for raise_on_drop in (True, False):
        p = pipeline(raise_on_drop=raise_on_drop)
        a, b = segments(A, 400), segments(B, 400)
        feed(p, P0, 0, a[0])
        feed(p, P0, 1, b[0])
        feed(p, P0, 2, a[1])
        events = feed(p, P0, 3, b[1])  # 1600 bytes of one partition: nothing to pause, A goes
        (dropped,) = [e for e in events if isinstance(e, MessageDropped)]
        assert (dropped.dropped.partition, dropped.dropped.starting_offset, dropped.dropped.last_offset) == (0, 0, 2)
        assert isinstance(dropped.exception, LargeMessageDroppedError) is raise_on_drop
        assert not any(isinstance(e, FlowChange) for e in events)
        (whole,) = feed(p, P0, 4, b[2])
        assert isinstance(whole, ChunkCompleted) and whole.value == B
        # no commit passes the dropped message: a restart reads it again
        (offset, metadata) = p.commits.safe_offsets_to_commit({P0: (5, "")}, False)[P0]
        assert offset == 0 and metadata.startswith("0,")


def test_a_message_that_cannot_finish_is_given_up_after_the_stall_timeout_of_idle_fetches() -> None:
    p = pipeline(stall_s=5.0)
    a, b = segments(A, 400), segments(B, 400)
    feed(p, P0, 0, a[0])
    feed(p, P0, 1, a[1])
    assert feed(p, P1, 0, b[0]) == []
    assert feed(p, P1, 1, b[1]) == [FlowChange((Wait(P1, 0),), ())]
    assert p.waiting
    assert p.idle(100.0) == [] and p.idle(104.0) == []
    p.fetched()  # a record came: the clock starts again
    assert p.idle(105.0) == [] and p.idle(109.0) == []
    events = p.idle(110.0)  # A's partition brought nothing for 5 s: A cannot finish
    dropped, change = events
    assert isinstance(dropped, MessageDropped) and dropped.record is None
    assert dropped.dropped.partition == 0 and isinstance(dropped.exception, LargeMessageDroppedError)
    assert change == FlowChange((), (Wait(P1, 0),))
    assert not p.waiting and p.metrics()["dropped.evicted"] == 1


def test_a_partition_that_leaves_takes_its_wait_with_it_and_releases_the_others() -> None:
    p = pipeline()
    a, b = segments(A, 400), segments(B, 400)
    feed(p, P0, 0, a[0])
    feed(p, P0, 1, a[1])
    feed(p, P1, 0, b[0])
    p.forget(P1)  # revoked while waiting: nothing of it waits any more
    assert not p.assembler.has_pending(P1) and p.flow_changes() == []
    feed(p, P1, 0, b[0])  # assigned again: read as new (here it fits beside A's two segments)
    assert feed(p, P1, 1, b[1]) == [FlowChange((Wait(P1, 0),), ())]
    p.forget(P0)  # the partition it waits for leaves: P1 goes on
    assert p.flow_changes() == [FlowChange((), (Wait(P1, 0),))]
