"""The sans-IO assembler against LinkedIn's documented behaviour (spec §10)."""

from __future__ import annotations

import uuid

import pytest

from gateway.core.assembler import INCOMPLETE, MessageAssembler
from gateway.errors import InvalidSegmentError, LargeMessageDroppedError
from gateway.protocol import encode_segment
from tests.assembling import assemble
from tests.helpers import lm_of, payload, segments

TP = ("t", 0)


def test_plain_and_null_values_pass_through_without_copy() -> None:
    value = b"plain value that is long enough to be checked as a segment........"
    result = assemble(MessageAssembler(), TP, 5, value)
    assert result.value is value and (result.starting_offset, result.ending_offset) == (5, 5)
    assert not result.segmented
    assert assemble(MessageAssembler(), TP, 6, None).value is None


def test_single_segment_skips_size_check() -> None:
    mid = uuid.uuid4()
    wrapped = encode_segment(mid, 0, 1, 100, b"hello")  # declares 100 bytes, carries 5
    result = assemble(MessageAssembler(), TP, 0, wrapped)
    assert result.value == b"hello" and result.segmented


def test_out_of_order_and_duplicate_segments() -> None:
    value = payload(3000)
    parts = segments(value, 1000)
    assembler = MessageAssembler()
    assert assemble(assembler, TP, 10, parts[2][0]) is INCOMPLETE
    assert assemble(assembler, TP, 11, parts[0][0]) is INCOMPLETE
    assert assemble(assembler, TP, 12, parts[0][0]) is INCOMPLETE  # resent: ignored
    assert assembler.buffered_bytes == 2000
    result = assemble(assembler, TP, 13, parts[1][0])
    assert result.value == value and result.starting_offset == 10 and result.ending_offset == 13
    assert assembler.buffered_bytes == 0 and assembler.incomplete_count == 0


def test_header_only_segments() -> None:
    value = payload(2500)
    parts = segments(value, 1000, header_only=True)
    assembler = MessageAssembler()
    out = [assemble(assembler, TP, i, v, lm_of(h)) for i, (v, h) in enumerate(parts)]
    assert out[-1].value == value and out[0] is INCOMPLETE


def test_eviction_of_eldest_respects_capacity_and_reports() -> None:
    assembler = MessageAssembler(capacity=8_000_000, message_bookkeeping=0, segment_bookkeeping=0)
    for i in range(20):
        first = segments(payload(1_000_000, i), 500_000)[0][0]
        assemble(assembler, ("t", i % 3), i, first)
        assert assembler.buffered_bytes <= 8_000_000
    assert assembler.buffered_bytes == 16 * 500_000  # 16 halves fit; 4 eldest evicted
    assert [d.reason for d in assembler.dropped] == ["evicted"] * 4
    assert [d.starting_offset for d in assembler.dropped] == [0, 1, 2, 3]


def test_eviction_raises_when_configured_and_keeps_current_segment() -> None:
    assembler = MessageAssembler(
        capacity=1000,
        exception_on_message_dropped=True,
        max_message_bytes=10_000,
        message_bookkeeping=0,
        segment_bookkeeping=0,
    )
    a = segments(payload(1800, 1), 600)
    b = segments(payload(1800, 2), 600)
    assert assemble(assembler, TP, 0, a[0][0]) is INCOMPLETE
    with pytest.raises(LargeMessageDroppedError) as info:
        assemble(assembler, TP, 1, b[0][0])  # 1200 > 1000: A, the eldest, goes
    assert info.value.dropped.starting_offset == 0
    assert assembler.buffered_bytes == 600  # B's first segment stays buffered
    assert assembler.safe_offsets() == {TP: 1}


def test_expiry_by_offset_gap_is_silent_and_moves_safe_offset() -> None:
    assembler = MessageAssembler(expiration_offset_gap=5, exception_on_message_dropped=True)
    parts = segments(payload(3000), 1000)
    assemble(assembler, TP, 0, parts[0][0])
    assemble(assembler, TP, 1, parts[1][0])
    assert assembler.safe_offset(TP, 5) == 0
    assert assembler.safe_offset(TP, 6) > 6  # expired: start 0 < 6 - 5
    assert assembler.buffered_bytes == 0
    assert [d.reason for d in assembler.dropped] == ["expired"]


def test_uuid_conflict_and_over_declared_bytes() -> None:
    mid = uuid.uuid4()
    assembler = MessageAssembler()
    assemble(assembler, TP, 0, encode_segment(mid, 0, 3, 30, b"x" * 10))
    with pytest.raises(InvalidSegmentError, match="UUID conflict"):
        assemble(assembler, TP, 1, encode_segment(mid, 1, 4, 30, b"x" * 10))
    with pytest.raises(InvalidSegmentError, match="more bytes"):
        assemble(assembler, TP, 2, encode_segment(mid, 1, 3, 30, b"x" * 25))


def test_out_of_order_offsets_rejected() -> None:
    mid = uuid.uuid4()
    assembler = MessageAssembler()
    assemble(assembler, TP, 10, encode_segment(mid, 0, 2, 20, b"x" * 10))
    with pytest.raises(InvalidSegmentError, match="Out of order"):
        assemble(assembler, TP, 9, encode_segment(mid, 1, 2, 20, b"x" * 10))


@pytest.mark.parametrize(
    ("count", "size", "match"),
    [(200_001, 10_000_000, "segments"), (50, 10, "segments for"), (2, 40_000_000, "bytes")],
)
def test_declared_bounds(count: int, size: int, match: str) -> None:
    assembler = MessageAssembler(capacity=32_000_000, max_segments=200_000)
    with pytest.raises(InvalidSegmentError, match=match):
        assemble(assembler, TP, 0, encode_segment(uuid.uuid4(), 0, count, size, b"x"))
    assert assembler.incomplete_count == 0 and assembler.buffered_bytes == 0


def test_segment_at_least_capacity_rejected() -> None:
    assembler = MessageAssembler(capacity=100, max_message_bytes=1000)
    with pytest.raises(InvalidSegmentError, match="buffer capacity"):
        assemble(assembler, TP, 0, encode_segment(uuid.uuid4(), 0, 2, 400, b"x" * 200))


def test_clear_partition_frees_only_that_partition() -> None:
    assembler = MessageAssembler()
    assemble(assembler, ("t", 0), 0, segments(payload(2000, 1), 1000)[0][0])
    assemble(assembler, ("t", 1), 0, segments(payload(2000, 2), 1000)[0][0])
    assembler.clear(("t", 0))
    assert assembler.buffered_bytes == 1000 and assembler.safe_offsets() == {("t", 1): 0}


def test_chunks_arriving_out_of_turn_are_placed_in_sequence_order() -> None:
    """Only in-order chunks are copied at once; the others wait, and the value is still in sequence order."""
    import uuid as _uuid

    from gateway.protocol.segments import decode_segment, encode_segment

    mid = _uuid.uuid4()
    parts = [b"aaaa", b"bbbb", b"cccc", b"dd"]
    size = sum(map(len, parts))
    segments = [decode_segment(encode_segment(mid, i, 4, size, p)) for i, p in enumerate(parts)]
    assembler = MessageAssembler(capacity=10_000)
    results = [assembler.add_segment(("t", 0), off, segments[seq]) for off, seq in enumerate([0, 2, 3, 2, 1])]
    assert [r is INCOMPLETE for r in results] == [True, True, True, True, False]
    assert results[-1].value == b"aaaabbbbccccdd"
    assert type(results[-1].value) is bytes


def test_the_library_feeds_segments_only() -> None:
    """Records are classified once, by the consumer; a value-taking entry point would be a second classifier."""
    assert not hasattr(MessageAssembler, "assemble")
