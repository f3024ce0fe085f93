"""The consumer pipeline on its own: records in, typed events out, no broker, no store."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.consumer._events import with_safe_offset
from gateway.core.assembler import MessageAssembler
from gateway.core.offsets import DeliveredOffsetTracker
from gateway.core.pipeline import (
    ChunkCompleted,
    ConsumerPipeline,
    Event,
    InvalidRecord,
    MessageDropped,
    PlainMessage,
    ReferenceToResolve,
)
from gateway.errors import EnvelopeFormatError, InvalidSegmentError, LargeMessageDroppedError
from gateway.policy import RouteKind
from gateway.protocol.classify import RecordKind, classify
from gateway.protocol.envelope import ENVELOPE_HEADER, MAGIC, Envelope, encode_envelope, envelope_header
from gateway.protocol.headers import LM_HEADER, SAFE_OFFSET_HEADER, Headers, decode_lm, has_header, last_header
from gateway.protocol.primitives import decode_long
from gateway.protocol.records import Record
from tests.helpers import payload, segments
from tests.pipelines import InspectedPipeline

TP = ("t", 0)


def pipeline(
    capacity: int = 1_000_000,
    gap: int = 1000,
    *,
    raise_on_drop: bool = False,
    bookkeeping: bool = False,
    full_path: bool = False,
) -> InspectedPipeline:
    """``bookkeeping=False`` counts chunk bytes only, so that byte arithmetic in tests stays readable."""
    extra = {} if bookkeeping else {"message_bookkeeping": 0, "segment_bookkeeping": 0}
    p = InspectedPipeline(
        MessageAssembler(
            capacity, gap, exception_on_message_dropped=raise_on_drop, max_message_bytes=10_000_000, **extra
        ),
        DeliveredOffsetTracker(),
        full_path=full_path,
    )
    p.commits.load_commit(TP, None, None)
    return p


def feed(p: ConsumerPipeline, offset: int, value: bytes | None, headers: Headers | None = None) -> list[Event]:
    return p.feed(TP, Record(offset, b"k", value, headers))


def envelope_value() -> bytes:
    data = payload(5000)
    return encode_envelope(Envelope.for_payload(data, store="redis", locator="gw/x", message_id=uuid.uuid4()))


# -- classify ---------------------------------------------------------------------------------------


def test_classify_decides_plain_segment_and_envelope() -> None:
    seg_value, seg_headers = segments(payload(2000), 1000)[0]
    only_value, only_headers = segments(payload(2000), 1000, header_only=True)[0]
    env = envelope_value()
    assert classify(b"hello", None).kind is RecordKind.PLAIN
    assert classify(None, None).kind is RecordKind.PLAIN
    assert classify(b"\x00" * 40, None).kind is RecordKind.PLAIN  # version 0 but no valid checksum
    got = classify(seg_value, seg_headers)
    assert got.kind is RecordKind.SEGMENT and got.segment is not None and got.segment.number_of_segments == 2
    got = classify(only_value, only_headers)
    assert got.kind is RecordKind.SEGMENT and got.lm is not None and got.lm.header_only
    assert classify(env, None).kind is RecordKind.ENVELOPE
    assert not classify(env, None).marked
    marked = classify(env, [envelope_header()])
    assert marked.kind is RecordKind.ENVELOPE and marked.marked
    assert classify(None, [envelope_header()]).kind is RecordKind.ENVELOPE  # a marked tombstone is reported


def test_a_header_only_segment_whose_chunk_looks_like_an_envelope_is_a_segment() -> None:
    chunk = MAGIC + payload(994)
    value, headers = segments(chunk + payload(1000), 1000, header_only=True)[0]
    assert value is not None and value.startswith(MAGIC)
    assert classify(value, headers).kind is RecordKind.SEGMENT


def test_an_unreadable_lm_header_is_an_invalid_segment() -> None:
    with pytest.raises(InvalidSegmentError, match="at offset 7"):
        classify(b"value", [(LM_HEADER, b"\x01\x02")], 7)


# -- events -------------------------------------------------------------------------------------------


def test_plain_record_on_the_fast_path_is_handed_back_untouched() -> None:
    p = pipeline()
    headers: Headers = [("h", b"1")]
    record = Record(5, b"k", b"plain", headers)
    (event,) = p.feed(TP, record)
    assert isinstance(event, PlainMessage) and event.route is RouteKind.PLAIN
    assert event.value is record.value and event.headers is headers
    assert event.safe_offset == 6 and event.starting_offset == 5
    assert p.fast_plain == 1 and p.delivered(TP) == 5


def test_chunked_message_interleaved_with_plain_records_carries_safe_offsets() -> None:
    """0 = A.seg0, 1 = plain, 2 = A.seg1: the plain record is safe at 0 until A completes."""
    p = pipeline()
    a = segments(payload(2000), 1000)
    assert feed(p, 0, *a[0]) == []
    (plain,) = feed(p, 1, b"plain", [])
    assert isinstance(plain, PlainMessage) and plain.safe_offset == 0
    assert not has_header(plain.headers, SAFE_OFFSET_HEADER)  # the pipeline adds no _so header
    (done,) = feed(p, 2, *a[1])
    assert isinstance(done, ChunkCompleted) and done.route is RouteKind.CHUNKED
    assert done.value == payload(2000) and done.starting_offset == 0 and done.number_of_segments == 2
    assert done.safe_offset == 3 and done.record.offset == 2 and done.record.key == b"k"
    lm = decode_lm(last_header(done.headers, LM_HEADER))
    assert (lm.segment_number, lm.number_of_segments, lm.message_size) == (-1, 2, 2000)
    assert p.metrics()["chunked.messages"] == 1 and p.metrics()["segments"] == 1


def test_the_consumer_renders_the_safe_offset_as_one_so_header() -> None:
    p = pipeline()
    a = segments(payload(2000), 1000)
    feed(p, 0, *a[0])
    (plain,) = feed(p, 1, b"plain", None)
    assert isinstance(plain, PlainMessage)
    rendered = with_safe_offset(plain)
    assert rendered is not None and [k for k, _ in rendered] == [SAFE_OFFSET_HEADER]
    assert decode_long(last_header(rendered, SAFE_OFFSET_HEADER) or b"") == 0
    (done,) = feed(p, 2, *a[1])
    assert isinstance(done, ChunkCompleted)
    assert with_safe_offset(done) is done.headers  # safe offset 3 == offset + 1: nothing to add


def test_envelopes_broken_envelopes_and_lookalikes() -> None:
    p = pipeline()
    env = envelope_value()
    (ref,) = feed(p, 0, env, [("u", b"1"), envelope_header()])
    assert isinstance(ref, ReferenceToResolve) and ref.envelope is not None and ref.envelope.store == "redis"
    assert ref.value is None and ref.headers == [("u", b"1")] and ref.safe_offset == 1
    (broken,) = feed(p, 1, env[:-1], [envelope_header()])
    assert isinstance(broken, ReferenceToResolve) and broken.envelope is None
    assert isinstance(broken.exception, EnvelopeFormatError) and broken.error is not None
    assert not has_header(broken.headers, ENVELOPE_HEADER)
    (legacy,) = feed(p, 2, env[:-1], None)  # unmarked: a payload that only starts like an envelope
    assert isinstance(legacy, PlainMessage) and legacy.value == env[:-1]


def test_invalid_record_is_reported_and_tracked_as_no_message() -> None:
    p = pipeline()
    value, headers = segments(payload(2000), 1000)[0]
    (event,) = feed(p, 4, value, [*(headers or []), (LM_HEADER, b"\x00")])
    assert isinstance(event, InvalidRecord) and event.record.offset == 4
    assert p.metrics()["invalid.records"] == 1
    assert p.tracker.is_segment_offset(TP, 4)
    (after,) = feed(p, 5, b"plain")
    assert isinstance(after, PlainMessage)


def test_eviction_is_an_event_and_raises_only_when_asked() -> None:
    for raise_on_drop in (False, True):
        p = pipeline(capacity=1000, raise_on_drop=raise_on_drop)
        a = segments(payload(1800, 1), 600)
        b = segments(payload(1800, 2), 600)
        assert feed(p, 0, *a[0]) == []
        events = feed(p, 1, *b[0])
        assert len(events) == 1 and isinstance(events[0], MessageDropped)
        assert events[0].dropped.reason == "evicted" and events[0].dropped.starting_offset == 0
        assert isinstance(events[0].exception, LargeMessageDroppedError) is raise_on_drop
        assert p.metrics()["dropped.evicted"] == 1
        assert p.metrics()["assembler.incomplete.messages"] == 1  # B's first segment stays buffered


def test_expiry_is_an_event() -> None:
    p = pipeline(gap=2)
    a = segments(payload(2000), 1000)
    feed(p, 0, *a[0])
    feed(p, 1, b"p1")
    feed(p, 2, b"p2")
    events = feed(p, 3, b"p3")
    dropped = [e for e in events if isinstance(e, MessageDropped)]
    assert [d.dropped.reason for d in dropped] == ["expired"] and dropped[0].exception is None
    assert isinstance(events[-1], PlainMessage) and events[-1].safe_offset == 4


def test_stored_high_watermark_filters_what_was_delivered_before() -> None:
    p = ConsumerPipeline()
    p.commits.load_commit(TP, 3, 5)
    out = [feed(p, off, f"v{off}".encode()) for off in range(3, 7)]
    assert [len(e) for e in out] == [0, 0, 1, 1]
    assert p.metrics()["duplicates.filtered"] == 2


def test_forget_and_reset() -> None:
    p = pipeline()
    other = ("t", 1)
    a = segments(payload(2000), 1000)
    feed(p, 0, *a[0])
    p.commits.load_commit(other, None, None)
    p.feed(other, Record(0, None, b"x", None))
    p.commits.hold(other, 0)
    p.forget(TP)
    assert p.metrics()["assembler.buffered.bytes"] == 0 and p.commits.needs_commit(TP) and p.delivered(TP) is None
    assert p.delivered(other) == 0
    p.reset()
    assert p.partitions() == [] and p.commits.needs_commit(other)
    p.commits.load_commit(other, None, None)
    p.feed(other, Record(1, None, b"y", None))
    assert p.commits.safe_offset(other) == 0  # holds outlive a reset: only a commit of the message releases them


def test_fast_and_full_paths_give_the_same_events() -> None:
    a = segments(payload(3000), 1000)
    log: list[tuple[bytes | None, Headers | None]] = [
        (b"p0", None),
        a[0],
        (b"p2", []),
        a[1],
        (b"p4", None),
        a[2],
        (None, None),
        (b"p7", [("h", b"1")]),
    ]
    fast, full = pipeline(), InspectedPipeline(full_path=True)
    full.commits.load_commit(TP, None, None)
    got_fast = [feed(fast, off, *rec) for off, rec in enumerate(log)]
    got_full = [feed(full, off, *rec) for off, rec in enumerate(log)]
    assert got_fast == got_full
    assert fast.fast_plain > 0 and full.fast_plain == 0
    assert fast.metrics() == full.metrics()


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["plain", "single", "single-h3", "multi", "tombstone"]), min_size=1, max_size=30),
    high_watermark=st.none() | st.integers(0, 12),
)
def test_one_segment_messages_go_the_fast_way_with_the_full_ways_answers(
    kinds: list[str], high_watermark: int | None
) -> None:
    """A one-segment message where the partition allows a plain run: same events, metrics and commits."""
    log: list[tuple[bytes | None, Headers | None]] = []
    open_message: list[tuple[bytes | None, Headers]] = []
    for kind in kinds:
        if kind == "plain":
            log.append((b"p", None))
        elif kind == "tombstone":
            log.append((None, None))
        elif kind.startswith("single"):
            log.append(segments(payload(7), 10, header_only=kind == "single-h3")[0])
        else:  # the next segment of a three-segment message, started when none is open
            open_message = open_message or segments(payload(30), 10)
            log.append(open_message.pop(0))
    fast, full = pipeline(), pipeline(full_path=True)
    for p in (fast, full):
        p.forget(TP)
        p.commits.load_commit(TP, high_watermark, high_watermark)
    got_fast = [feed(fast, off, *rec) for off, rec in enumerate(log)]
    got_full = [feed(full, off, *rec) for off, rec in enumerate(log)]
    assert got_fast == got_full
    assert fast.metrics() == full.metrics()
    assert fast.commits.safe_offset(TP) == full.commits.safe_offset(TP)
    assert fast.delivered(TP) == full.delivered(TP)
    for position in range(len(log) + 1):  # a commit at any position: the same offset and metadata, or the same refusal
        assert _commit_at(fast, position) == _commit_at(full, position)


def _commit_at(p: ConsumerPipeline, position: int) -> object:
    try:
        return p.commits.safe_offsets_to_commit({TP: (position, "")}, False)
    except Exception as exc:
        return type(exc), str(exc)


def test_tombstone_with_unreadable_lm_header_is_an_invalid_record_and_counted() -> None:
    """Issue 13, defect 4: it raised HeaderFormatError half-way through, uncounted, after tracking it."""
    p = pipeline()
    events = p.feed(TP, Record(0, b"k", None, [(LM_HEADER, b"\x01\x02")]))
    assert len(events) == 1 and isinstance(events[0], InvalidRecord)
    assert isinstance(events[0].exception, InvalidSegmentError)
    assert events[0].record.offset == 0
    assert p.metrics()["invalid.records"] == 1
    assert p.delivered(TP) is None, "not delivered, so not committed past as delivered"
    # a tombstone with a readable _lm header is still delivered, its _lm rewritten
    lm = segments(b"abc", 3)[0][1][0][1]
    (ok,) = p.feed(TP, Record(1, b"k", None, [(LM_HEADER, lm)]))
    assert isinstance(ok, PlainMessage) and ok.value is None


def test_treat_bad_segments_as_payload_delivers_them_plain() -> None:
    """A record with an unreadable ``_lm`` header: an error, or a plain message when asked."""
    from gateway.core.pipeline import ConsumerPipeline as _Pipeline
    from gateway.core.pipeline import InvalidRecord as _InvalidRecord
    from gateway.core.pipeline import PlainMessage as _Plain
    from gateway.errors import InvalidSegmentError as _Invalid
    from gateway.protocol.records import Record as _Record

    bad, headers = b"payload", [("_lm", b"\x00\x01")]
    strict, lenient = _Pipeline(), _Pipeline(bad_segments_as_payload=True)
    for p in (strict, lenient):
        p.commits.load_commit(("t", 0), None, None)
    events = strict.feed(("t", 0), _Record(0, None, bad, headers))
    assert [type(e) for e in events] == [_InvalidRecord] and isinstance(events[0].exception, _Invalid)
    events = lenient.feed(("t", 0), _Record(0, None, bad, headers))
    assert [type(e) for e in events] == [_Plain] and events[0].value == bad
    assert lenient.metrics()["bad.segments.as.payload"] == 1


def test_a_group_consumers_pipeline_asks_for_the_commit_before_judging_a_partitions_first_record() -> None:
    """``CommitNeeded`` (h11's NEED_DATA): nothing is done with the record until the commit is handed in."""
    from gateway.core.pipeline import CommitNeeded

    p = ConsumerPipeline(awaits_commits=True)
    record = Record(7, b"k", b"plain", None)
    assert p.feed(TP, record) == [CommitNeeded(TP)]
    assert p.feed(TP, record) == [CommitNeeded(TP)]  # still nothing done: asked again
    assert p.metrics()["records"] == 0 and p.delivered(TP) is None
    p.commits.load_commit(TP, 8, 8)  # the group had delivered up to offset 7 before a restart
    assert p.feed(TP, record) == []  # filtered by the high watermark the commit carried
    (message,) = p.feed(TP, Record(8, b"k", b"next", None))
    assert isinstance(message, PlainMessage) and message.safe_offset == 9
    assert ConsumerPipeline().feed(TP, record)[0].__class__ is PlainMessage  # a Spark range never asks
