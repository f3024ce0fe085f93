"""Bounds of the consumer's pure state: assembler memory, tracker size, assembly keys (issue 13)."""

from __future__ import annotations

import uuid

from gateway.core.assembler import INCOMPLETE, MESSAGE_BOOKKEEPING_BYTES, SEGMENT_BOOKKEEPING_BYTES, MessageAssembler
from gateway.core.offsets import DeliveredOffsetTracker
from gateway.core.pipeline import InvalidRecord, PlainMessage
from gateway.protocol import encode_segment
from gateway.protocol.headers import LM_HEADER
from gateway.protocol.records import Record
from tests.assembling import assemble
from tests.helpers import payload, segments
from tests.pipelines import InspectedPipeline

TP = ("t", 0)


def test_capacity_bounds_many_tiny_incomplete_messages() -> None:
    """Issue 13, defect 5: a message's bookkeeping (about 1.7 kB) lay outside the capacity."""
    assembler = MessageAssembler(capacity=100_000, expiration_offset_gap=1_000_000)
    for i in range(1000):
        assert assemble(assembler, TP, i, encode_segment(uuid.uuid4(), 0, 2, 2, b"x")) is INCOMPLETE
        assert assembler.accounted_bytes <= assembler.capacity
    assert assembler.incomplete_count <= 100_000 // (MESSAGE_BOOKKEEPING_BYTES + SEGMENT_BOOKKEEPING_BYTES)
    assert assembler.buffered_bytes == assembler.incomplete_count
    assert {d.reason for d in assembler.dropped} == {"evicted"}


def test_same_message_id_in_two_partitions_is_assembled_apart() -> None:
    """Issue 13, defect 6: a topic and its mirror carry the same ids; both copies are whole messages."""
    value = payload(3000)
    mid = uuid.uuid4()
    parts = segments(value, 1000, message_id=mid)
    assembler = MessageAssembler()
    results = []
    for i, (v, _) in enumerate(parts):  # interleaved, as one consumer reading both topics sees them
        results.append(assemble(assembler, ("t", 0), i, v))
        results.append(assemble(assembler, ("t-mirror", 0), i, v))
    whole = [r for r in results if r is not INCOMPLETE]
    assert [bytes(r.value or b"") for r in whole] == [value, value]
    assert assembler.incomplete_count == 0 and not assembler.dropped


def test_tracker_stays_bounded_under_invalid_records_between_plain_ones() -> None:
    """Issue 13, defect 5: every invalid record added a tracker entry that was never trimmed."""
    pipeline = InspectedPipeline(MessageAssembler(), DeliveredOffsetTracker(100))
    pipeline.commits.load_commit(TP, None, None)
    offset = 0
    for i in range(20_000):
        if i % 1000 == 0:
            (plain,) = pipeline.feed(TP, Record(offset, b"k", b"plain", None))
            assert isinstance(plain, PlainMessage)
            offset += 1
        (bad,) = pipeline.feed(TP, Record(offset, b"k", b"v", [(LM_HEADER, b"broken")]))
        assert isinstance(bad, InvalidRecord)
        offset += 1
    assert pipeline.tracker.size() <= pipeline.tracker.max_entries
    assert pipeline.tracker.max_entries < 20_000
    # what is still tracked still answers: the last plain record and commits after it
    (last,) = pipeline.feed(TP, Record(offset, b"k", b"plain", None))
    assert isinstance(last, PlainMessage)
    safe = pipeline.commits.safe_offsets_to_commit({TP: (offset + 1, "")}, False)
    assert safe[TP][0] == offset + 1


def test_a_commit_never_passes_an_incomplete_message_the_tracker_has_forgotten() -> None:
    """With the tracker bounded, its earliest offset can move past the start of a pending message."""
    pipeline = InspectedPipeline(MessageAssembler(), DeliveredOffsetTracker(1, max_segment_offsets=4))
    pipeline.commits.load_commit(TP, None, None)
    first, _ = segments(payload(2000), 1000)[0]
    assert pipeline.feed(TP, Record(0, b"k", first, None)) == []
    for offset in range(1, 21):
        (bad,) = pipeline.feed(TP, Record(offset, b"k", b"v", [(LM_HEADER, b"broken")]))
        assert isinstance(bad, InvalidRecord)
    assert pipeline.tracker.earliest_tracked_offset(TP) > 10
    translated = pipeline.commits.safe_offsets_to_commit({TP: (10, "")}, True)
    assert translated[TP][0] == 0, "the message started at offset 0 is still being assembled"
