"""Plain runs: the bulk path gives the same messages and offsets as feeding records one by one."""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any

from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.pipeline import ChunkCompleted, ConsumerPipeline, PlainMessage, ReferenceToResolve
from gateway.core.plain_runs import BATCH_FROM, take_plain_batch, take_plain_run
from gateway.protocol import encode_segment
from gateway.protocol.classify import PLAIN_RECORD, are_plainly_plain, classify, is_plainly_plain
from gateway.protocol.envelope import MAGIC
from gateway.protocol.records import Record

header_st = st.tuples(st.sampled_from(["a", "_lm", "_gw.ref"]), st.binary(max_size=8))
headers_st = st.none() | st.lists(header_st, max_size=2)
value_st = st.none() | st.binary(max_size=60) | st.builds(lambda t: MAGIC + t, st.binary(max_size=40))


@given(value=value_st, headers=headers_st)
def test_plainly_plain_is_never_wrong(value: bytes | None, headers: list[tuple[str, bytes]] | None) -> None:
    if is_plainly_plain(value, headers):
        assert classify(value, headers) is PLAIN_RECORD


def test_segments_and_envelopes_are_not_plainly_plain() -> None:
    segment = encode_segment(uuid.uuid4(), 0, 2, 10, b"12345")
    assert not is_plainly_plain(segment, None)
    assert not is_plainly_plain(MAGIC + b"rest", None)
    assert not is_plainly_plain(b"plain", [("k", b"v")])
    assert is_plainly_plain(b"plain", None)
    assert is_plainly_plain(b"", None)
    assert is_plainly_plain(None, None)


def _msg(partition: int, offset: int, value: bytes | None, headers: Any = None) -> Message:
    return Message(topic="t", partition=partition, offset=offset, value=value, headers=headers)


def _loaded(*partitions: int) -> ConsumerPipeline:
    pipeline = ConsumerPipeline()
    for p in partitions:
        pipeline.commits.load_commit(("t", p), None, None)
    return pipeline


def test_a_run_stops_at_another_partition_at_a_header_and_at_the_limit() -> None:
    raw = deque(
        [_msg(0, 0, b"a"), _msg(0, 1, b"b"), _msg(1, 0, b"c"), _msg(1, 1, b"d", [("h", b"1")]), _msg(1, 2, b"e")]
    )
    pipeline = _loaded(0, 1)
    out: list[Any] = []
    assert take_plain_run(raw, pipeline, out, 10) == 2
    assert take_plain_run(raw, pipeline, out, 10) == 1
    assert take_plain_run(raw, pipeline, out, 10) == 0  # a record with headers takes the full path
    raw.popleft()
    assert take_plain_run(raw, pipeline, out, 3) == 0  # out is full
    assert take_plain_run(raw, pipeline, out, 4) == 1
    assert [m.value() for m in out] == [b"a", b"b", b"c", b"e"]
    assert pipeline.delivered(("t", 0)) == 1
    assert pipeline.delivered(("t", 1)) == 2
    assert pipeline.metrics()["plain.messages"] == 4


def test_no_run_before_the_commit_is_loaded_or_while_a_message_is_pending() -> None:
    raw = deque([_msg(0, 5, b"x")])
    fresh = ConsumerPipeline()
    assert take_plain_run(raw, fresh, [], 10) == 0
    pending = _loaded(0)
    segment = encode_segment(uuid.uuid4(), 0, 2, 10, b"12345")
    pending.feed(("t", 0), Record(4, None, segment, None))
    assert take_plain_run(raw, pending, [], 10) == 0  # the full path adds the _so header
    assert take_plain_run(raw, _loaded(0), [], 10) == 1


def _messages(events: list[Any]) -> int:
    return sum(isinstance(e, (PlainMessage, ChunkCompleted, ReferenceToResolve)) for e in events)


@given(st.lists(st.tuples(st.integers(0, 2), value_st), max_size=40), st.integers(1, 7))
def test_bulk_and_one_by_one_agree(records: list[tuple[int, bytes | None]], limit: int) -> None:
    offsets = {0: 0, 1: 0, 2: 0}
    msgs = []
    for p, value in records:
        msgs.append((p, offsets[p], value))
        offsets[p] += 1
    slow, fast = _loaded(0, 1, 2), _loaded(0, 1, 2)
    slow_out = [(p, o, v) for p, o, v in msgs if _messages(slow.feed(("t", p), Record(o, None, v, None)))]
    raw = deque(_msg(p, o, v) for p, o, v in msgs)
    fast_out: list[Any] = []
    while raw:
        batch: list[Any] = []
        if not take_plain_run(raw, fast, batch, limit):
            m = raw.popleft()
            if _messages(fast.feed(("t", m.partition()), Record(m.offset(), None, m.value(), None))):
                batch = [m]
        fast_out.extend((m.partition(), m.offset(), m.value()) for m in batch)
    assert fast_out == slow_out
    for p in (0, 1, 2):
        assert fast.delivered(("t", p)) == slow.delivered(("t", p))
        assert fast.commits.safe_offset(("t", p)) == slow.commits.safe_offset(("t", p))


@given(st.lists(st.tuples(st.integers(0, 2), value_st), max_size=40))
def test_deliver_plain_one_by_one_agrees_with_feed(records: list[tuple[int, bytes | None]]) -> None:
    """poll()'s hot path: a plainly plain record delivered by deliver_plain, the rest fed."""
    offsets = {0: 0, 1: 0, 2: 0}
    slow, fast = _loaded(0, 1, 2), _loaded(0, 1, 2)
    slow_out, fast_out = [], []
    for p, value in records:
        o = offsets[p]
        offsets[p] += 1
        if _messages(slow.feed(("t", p), Record(o, None, value, None))):
            slow_out.append((p, o))
        quick = is_plainly_plain(value, None) and fast.deliver_plain(("t", p), o)
        if quick or _messages(fast.feed(("t", p), Record(o, None, value, None))):
            fast_out.append((p, o))
    assert fast_out == slow_out
    for p in (0, 1, 2):
        assert fast.delivered(("t", p)) == slow.delivered(("t", p))
        assert fast.commits.safe_offset(("t", p)) == slow.commits.safe_offset(("t", p))


def test_deliver_plain_refuses_what_needs_the_full_path() -> None:
    tp = ("t", 0)
    assert not ConsumerPipeline().deliver_plain(tp, 0)  # commit not loaded yet
    pipeline = _loaded(0)
    assert pipeline.deliver_plain(tp, 3)
    assert not pipeline.deliver_plain(tp, 2)  # behind what was delivered (a re-read after a seek)
    pipeline.feed(tp, Record(4, None, encode_segment(uuid.uuid4(), 0, 2, 10, b"12345"), None))
    assert not pipeline.deliver_plain(tp, 5)  # a message is pending: the full path adds _so
    assert pipeline.delivered(tp) == 3


@given(st.lists(st.tuples(value_st, headers_st), max_size=30))
def test_a_plainly_plain_batch_is_plainly_plain_record_by_record(records: list[Any]) -> None:
    values = [v for v, _ in records]
    headers = [h for _, h in records]
    if are_plainly_plain(values, headers):
        assert all(is_plainly_plain(v, h) for v, h in records)
        assert all(classify(v, h) is PLAIN_RECORD for v, h in records)


def test_the_batch_test_refuses_what_it_cannot_vouch_for() -> None:
    assert are_plainly_plain([b"a", b"", b"{json}"], [None, None, None])
    assert not are_plainly_plain([b"a", None], [None, None])  # a tombstone goes one by one
    assert not are_plainly_plain([b"", None], [None, None])  # also after an empty value
    assert not are_plainly_plain([b"a"], [[("h", b"1")]])
    assert not are_plainly_plain([b"a"], [[]])  # an empty header list is not "no headers"
    assert not are_plainly_plain([MAGIC + b"x"], [None])
    assert not are_plainly_plain([b"\x00abc"], [None])
    assert not are_plainly_plain([b"\x80"], [None])


@given(st.lists(st.tuples(st.integers(0, 1), value_st), min_size=0, max_size=60), st.integers(1, 80))
def test_batch_then_runs_agree_with_feeding_one_by_one(records: list[tuple[int, bytes | None]], limit: int) -> None:
    offsets = {0: 0, 1: 0}
    msgs = []
    for p, value in records:
        msgs.append((p, offsets[p], value))
        offsets[p] += 1
    slow, fast = _loaded(0, 1), _loaded(0, 1)
    slow_out = [(p, o, v) for p, o, v in msgs if _messages(slow.feed(("t", p), Record(o, None, v, None)))]
    raw = deque(_msg(p, o, v) for p, o, v in msgs)
    fast_out: list[Any] = []
    fresh = True
    while raw:
        batch: list[Any] = []
        moved = take_plain_batch(raw, fast, batch, limit) if fresh else 0
        fresh = False
        if not moved and not take_plain_run(raw, fast, batch, limit):
            m = raw.popleft()
            if _messages(fast.feed(("t", m.partition()), Record(m.offset(), None, m.value(), None))):
                batch = [m]
        fast_out.extend((m.partition(), m.offset(), m.value()) for m in batch)
    assert fast_out == slow_out
    for p in (0, 1):
        assert fast.delivered(("t", p)) == slow.delivered(("t", p))
        assert fast.commits.safe_offset(("t", p)) == slow.commits.safe_offset(("t", p))


def test_a_plain_batch_of_one_partition_moves_whole_or_not_at_all() -> None:
    pipeline = _loaded(0, 1)
    raw = deque(_msg(0, i, b"v%d" % i) for i in range(40))
    out: list[Any] = []
    assert take_plain_batch(raw, pipeline, out, 25) == 25 and len(raw) == 15
    assert [m.offset() for m in out] == list(range(25))
    assert pipeline.delivered(("t", 0)) == 24 and pipeline.metrics()["plain.messages"] == 25
    assert take_plain_batch(raw, pipeline, out, 25 + BATCH_FROM - 1) == 0  # too few for a batch
    mixed = deque([*(_msg(0, 100 + i, b"a") for i in range(20)), _msg(1, 0, b"b")])
    assert take_plain_batch(mixed, pipeline, [], 100) == 0 and len(mixed) == 21  # two partitions: nothing moved


@given(st.lists(st.binary(max_size=8).map(lambda b: b"v" + b), max_size=60), st.lists(st.integers(0, 60), max_size=4))
def test_a_proven_batch_noted_at_any_points_agrees_with_feeding_one_by_one(
    values: list[bytes], stops: list[int]
) -> None:
    """poll()'s batch path: proven once, counted out by the driver, noted by the pipeline when asked (at ``stops``)."""
    tp = ("t", 0)
    slow, fast = _loaded(0), _loaded(0)
    raw = [_msg(0, o, v) for o, v in enumerate(values)]
    batch = fast.open_counted(raw)
    if len(values) < BATCH_FROM:
        assert batch is None
        return
    assert batch is not None and batch.records is raw  # the fetched list itself, not a copy
    handed = min(max(stops, default=0), len(values))
    slow_out = [o for o, v in enumerate(values[:handed]) if _messages(slow.feed(tp, Record(o, None, v, None)))]
    for stop in sorted(min(s, handed) for s in stops):
        batch.left = len(raw) - stop  # what the driver's hot path does, one record at a time
        assert fast.delivered(tp) == (stop - 1 if stop else None)
    assert [m.offset() for m in batch.records[:handed]] == slow_out
    assert fast.delivered(tp) == slow.delivered(tp)
    assert fast.commits.safe_offset(tp) == slow.commits.safe_offset(tp)
    assert fast.metrics()["plain.messages"] == slow.metrics()["plain.messages"]


def test_a_proven_batch_is_refused_where_one_record_would_be() -> None:
    plain = [_msg(0, i, b"v%d" % i) for i in range(20)]
    assert ConsumerPipeline().open_counted(plain) is None  # the commit is not loaded yet
    assert _loaded(0).open_counted(plain[: BATCH_FROM - 1]) is None  # too short to pay off
    assert _loaded(0).open_counted([*plain, _msg(0, 20, MAGIC + b"x")]) is None  # an envelope
    assert _loaded(0, 1).open_counted([*plain, _msg(1, 0, b"other")]) is None  # two partitions
    behind = _loaded(0)
    assert behind.deliver_plain(("t", 0), 30)
    assert behind.open_counted(plain) is None  # a re-read below what was delivered
    pipeline = _loaded(0)
    batch = pipeline.open_counted(plain)
    assert batch is not None and batch.tp == ("t", 0) and batch.left == 20
    assert pipeline.delivered(("t", 0)) is None
    batch.left -= 7
    assert pipeline.delivered(("t", 0)) == 6
    assert pipeline.delivered(("t", 0)) == 6 and pipeline.metrics()["plain.messages"] == 7  # noting again adds nothing


def test_the_pipeline_closes_a_counted_batch_itself_before_anything_newer() -> None:
    """No driver call needed: feeding a record, a partition leaving, or a new batch closes the open one,
    noting what was counted out first; a closed batch has nothing left to count."""
    plain = [_msg(0, i, b"v%d" % i) for i in range(20)]
    pipeline = _loaded(0)
    batch = pipeline.open_counted(plain)
    assert batch is not None
    batch.left -= 3
    pipeline.forget(("t", 1))
    assert batch.left == 0 and batch.noted == 3
    pipeline = _loaded(0)
    batch = pipeline.open_counted(plain)
    assert batch is not None
    batch.left -= 5
    assert _messages(pipeline.feed(("t", 0), Record(5, None, b"x", None)))
    assert batch.left == 0 and pipeline.delivered(("t", 0)) == 5
    assert pipeline.metrics()["plain.messages"] == 6
