"""Offsets, safe offsets, high watermarks, commit and seek translation (spec §11), without Kafka."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gateway.consumer._events import with_safe_offset
from gateway.core.assembler import MessageAssembler
from gateway.core.offsets import DeliveredOffsetTracker
from gateway.core.pipeline import InvalidRecord, MessageDropped
from gateway.errors import LargeMessageDroppedError, OffsetNotTrackedError
from gateway.protocol import LM_HEADER, SAFE_OFFSET_HEADER, decode_lm
from gateway.protocol.headers import Headers, last_header
from gateway.protocol.metadata import read_metadata
from gateway.protocol.primitives import decode_long
from gateway.protocol.records import Record
from tests.helpers import payload, segments
from tests.pipelines import InspectedPipeline

TP = ("t", 0)


@dataclass(frozen=True)
class Delivery:
    """What the consumer hands out for one record: headers ``None`` when the record's are untouched."""

    value: bytes | None
    headers: Headers | None
    starting_offset: int


class RecordProcessor(InspectedPipeline):
    """The pipeline as the consumer drives it: events rendered the way ``HybridConsumer`` renders them."""

    def process(
        self, tp: tuple[str, int], offset: int, value: bytes | None, headers: Headers | None
    ) -> Delivery | None:
        out = None
        for event in self.feed(tp, Record(offset, None, value, headers)):
            if isinstance(event, (InvalidRecord, MessageDropped)):
                if event.exception is not None:
                    raise event.exception
                continue
            rendered = with_safe_offset(event)
            out = Delivery(event.value, None if rendered is event.record.headers else rendered, event.starting_offset)
        return out


def make(max_tracked: int = 500, gap: int = 1000, full_path: bool = False) -> RecordProcessor:
    proc = RecordProcessor(
        MessageAssembler(expiration_offset_gap=gap), DeliveredOffsetTracker(max_tracked), full_path=full_path
    )
    proc.commits.load_commit(TP, None, None)
    return proc


def plain(i: int) -> bytes:
    return f"plain-{i}".encode()


def test_javadoc_example() -> None:
    """0 = A.seg0, 1 = plain, 2 = A.seg1, 3 = plain."""
    proc = make()
    a = segments(payload(2000), 1000)
    assert proc.process(TP, 0, *a[0]) is None
    d1 = proc.process(TP, 1, plain(1), [])
    assert d1 is not None and decode_long(last_header(d1.headers, SAFE_OFFSET_HEADER) or b"") == 0
    d2 = proc.process(TP, 2, *a[1])
    assert d2 is not None and d2.value == payload(2000) and d2.starting_offset == 0
    lm = decode_lm(last_header(d2.headers, LM_HEADER))
    assert (lm.type, lm.segment_number, lm.number_of_segments, lm.message_size) == (1, -1, 2, 2000)
    assert lm.message_id.int == 0
    assert last_header(d2.headers, SAFE_OFFSET_HEADER) is None  # safe offset is 3 == offset + 1
    d3 = proc.process(TP, 3, plain(3), [])
    assert d3 is not None and d3.headers is None  # untouched plain record
    tracker = proc.tracker
    assert tracker.safe_offset(TP, 1) == 0
    assert tracker.safe_offset(TP, 2) == 3
    assert tracker.safe_offset(TP, 3) == 4
    with pytest.raises(OffsetNotTrackedError):
        tracker.safe_offset(TP, 0)
    with pytest.raises(OffsetNotTrackedError):
        tracker.safe_offset(TP, 4)
    assert tracker.starting_offset(TP, 2) == 0


def test_stored_high_watermark_filters_duplicates() -> None:
    proc = RecordProcessor(MessageAssembler(), DeliveredOffsetTracker())
    proc.commits.load_commit(TP, 3, 5)
    out = [proc.process(TP, off, plain(off), []) for off in range(3, 7)]
    assert [d is not None for d in out] == [False, False, True, True]


def test_commit_while_large_message_pending() -> None:
    proc = make()
    a = segments(payload(3000), 1000)
    assert proc.process(TP, 10, plain(10), []) is not None
    assert proc.process(TP, 11, *a[0]) is None
    assert proc.process(TP, 12, plain(12), []) is not None
    assert proc.process(TP, 13, plain(13), []) is not None
    positions = proc.commits.current_positions({TP: 14})
    assert positions == {TP: 14}
    assert proc.commits.safe_offsets_to_commit({TP: (14, "")}, False) == {TP: (11, "14,")}
    assert proc.commits.safe_offsets_to_commit({TP: (14, "m")}, True) == {TP: (11, "14,m")}
    # committing a mid-batch offset uses the safe offset recorded when that message was delivered
    assert proc.commits.safe_offsets_to_commit({TP: (11, "")}, True) == {TP: (11, "11,")}
    assert proc.commits.safe_offsets_to_commit({TP: (13, "")}, True) == {TP: (11, "13,")}


def test_commit_beyond_delivered_raises() -> None:
    proc = make()
    for off in range(10, 16):
        proc.process(TP, off, plain(off), [])
    with pytest.raises(OffsetNotTrackedError):
        proc.commits.safe_offsets_to_commit({TP: (20, "")}, True)


def test_commit_keeps_old_high_watermark_when_nothing_consumed() -> None:
    proc = RecordProcessor(MessageAssembler(), DeliveredOffsetTracker())
    proc.commits.load_commit(TP, 11, 14)
    assert proc.commits.safe_offsets_to_commit({TP: (11, "")}, False) == {TP: (11, "14,")}


def test_interleaved_messages_commit_at_oldest_incomplete() -> None:
    """LinkedIn issue #84: M1S1, M2S1, M1S2, M2S2."""
    proc = make()
    m1 = segments(payload(2000, 1), 1000)
    m2 = segments(payload(2000, 2), 1000)
    assert proc.process(TP, 0, *m1[0]) is None
    assert proc.process(TP, 1, *m2[0]) is None
    d = proc.process(TP, 2, *m1[1])
    assert d is not None and d.value == payload(2000, 1)
    assert proc.commits.safe_offsets_to_commit({TP: (3, "")}, False) == {TP: (1, "3,")}
    d = proc.process(TP, 3, *m2[1])
    assert d is not None and d.value == payload(2000, 2)
    assert proc.commits.safe_offsets_to_commit({TP: (4, "")}, False) == {TP: (4, "4,")}


def test_restart_from_safe_offset_with_high_watermark_delivers_each_once() -> None:
    m1 = segments(payload(2000, 1), 1000)
    m2 = segments(payload(2000, 2), 1000)
    log = [m1[0], m2[0], m1[1], (plain(3), []), m2[1]]
    first = make()
    got = [first.process(TP, off, *rec) for off, rec in enumerate(log[:4])]
    delivered_first = [d.value for d in got if d is not None]
    offset, meta = first.commits.safe_offsets_to_commit({TP: (4, "")}, False)[TP]
    assert (offset, meta) == (1, "4,")
    second = RecordProcessor(MessageAssembler(), DeliveredOffsetTracker())
    second.commits.load_commit(TP, offset, read_metadata(meta.encode()).high_watermark)
    got2 = [second.process(TP, off, *log[off]) for off in range(offset, len(log))]
    delivered_second = [d.value for d in got2 if d is not None]
    assert delivered_first == [payload(2000, 1), plain(3)]
    assert delivered_second == [payload(2000, 2)]


def test_tracker_bound_evicts_eldest_and_prunes_segments() -> None:
    proc = make(max_tracked=3)
    m = segments(payload(2000), 1000)
    proc.process(TP, 0, *m[0])
    for off in range(1, 6):  # plain records with safe offset 0: each one stored
        proc.process(TP, off, plain(off), [])
    assert proc.tracker.earliest_tracked_offset(TP) == 3
    with pytest.raises(OffsetNotTrackedError):
        proc.tracker.safe_offset(TP, 2)
    assert proc.tracker.safe_offset(TP, 5) == 0


def test_seek_translation() -> None:
    proc = make()
    a = segments(payload(2000), 1000)
    proc.process(TP, 0, *a[0])
    proc.process(TP, 1, plain(1), [])
    proc.process(TP, 2, *a[1])
    proc.process(TP, 3, plain(3), [])
    assert proc.commits.plan_seek(TP, 4, None).noop
    plan = proc.commits.plan_seek(TP, 2, None)  # back into the large message: its first segment
    assert (plan.target, plan.high_watermark) == (0, 2)
    plan = proc.commits.plan_seek(TP, 1, None)  # the plain record delivered while A was pending
    assert (plan.target, plan.high_watermark) == (0, 1)
    assert proc.commits.plan_seek(TP, 3, None).target == 3
    assert proc.commits.plan_seek(TP, 9, None).target == 9  # forward
    assert proc.commits.plan_seek(TP, 3, 3).to_committed


def test_seek_below_tracked_range_raises() -> None:
    proc = make(max_tracked=2)
    m = segments(payload(2000), 1000)
    proc.process(TP, 0, *m[0])
    for off in range(1, 6):
        proc.process(TP, off, plain(off), [])
    with pytest.raises(OffsetNotTrackedError):
        proc.commits.plan_seek(TP, 1, None)


def test_clear_partition_forgets_everything() -> None:
    proc = make()
    proc.process(TP, 0, *segments(payload(2000), 1000)[0])
    proc.forget(TP)
    assert proc.assembler.buffered_bytes == 0
    assert proc.tracker.delivered(TP) is None
    assert proc.commits.needs_commit(TP)


def test_evicting_segment_is_tracked_as_a_segment_and_expiry_still_runs() -> None:
    proc = RecordProcessor(
        MessageAssembler(
            capacity=1000,
            expiration_offset_gap=2,
            exception_on_message_dropped=True,
            max_message_bytes=10_000,
            message_bookkeeping=0,
            segment_bookkeeping=0,
        ),
        DeliveredOffsetTracker(),
    )
    proc.commits.load_commit(TP, None, None)
    a = segments(payload(1800, 1), 600)
    b = segments(payload(1800, 2), 600)
    assert proc.process(TP, 0, *a[0]) is None
    with pytest.raises(LargeMessageDroppedError):
        proc.process(TP, 1, *b[0])  # A is evicted to make room; B's first segment stays
    assert proc.tracker.is_segment_offset(TP, 1)
    assert proc.process(TP, 2, plain(2), []) is not None
    with pytest.raises(OffsetNotTrackedError):
        proc.tracker.safe_offset(TP, 1)


def test_holds_pin_safe_offset_commit_and_high_watermark() -> None:
    proc = make()
    for off in range(5):
        proc.process(TP, off, plain(off), [])
    proc.commits.hold(TP, 2)
    assert proc.commits.safe_offset(TP) == 2
    assert proc.commits.safe_offsets_to_commit({TP: (5, "")}, False) == {TP: (2, "2,")}
    proc.commits.release(TP, 2)
    assert proc.commits.safe_offset(TP) == 5
    assert proc.commits.safe_offsets_to_commit({TP: (5, "")}, False) == {TP: (5, "5,")}


def test_plain_fast_path_tracks_exactly_like_the_full_pipeline() -> None:
    """Same records through the plain fast path when possible and through the full path only: same answers."""
    m = segments(payload(3000), 1000)
    records: list[tuple[int, bytes | None, list[Any]]] = []
    for off in range(40):
        if off in (5, 12, 20):
            records.append((off, *m[(5, 12, 20).index(off)]))
        else:
            records.append((off, plain(off), []))
    fast, full = make(), make(full_path=True)
    fast.commits.load_commit(TP, 3, 4)
    full.commits.load_commit(TP, 3, 4)
    fast_out, full_out = [], []
    for off, value, headers in records[3:]:
        d = fast.process(TP, off, value, headers)
        if d is not None:
            fast_out.append(off)
        d = full.process(TP, off, value, headers)
        if d is not None:
            full_out.append(off)
    assert fast.fast_plain > 0 and full.fast_plain == 0
    assert fast_out == full_out
    for off in full_out:
        assert fast.tracker.safe_offset(TP, off) == full.tracker.safe_offset(TP, off)
        assert fast.tracker.starting_offset(TP, off) == full.tracker.starting_offset(TP, off)
    wanted: dict[tuple[str, int], tuple[int, str | None]] = {TP: (40, "")}
    assert fast.commits.safe_offsets_to_commit(wanted, False) == full.commits.safe_offsets_to_commit(wanted, False)
