"""The Spark source's range logic without Spark or Kafka: read-back, ownership, planning, options.

The central property: however a partition is cut into ranges, the ranges together emit exactly
what one reader of the whole partition emits, in the same order, each message once.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.pipeline import WholeMessage
from gateway.protocol import LM_HEADER, SAFE_OFFSET_HEADER, split
from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.protocol.records import Record
from gateway.spark.assembly import (
    ROUTE_CHUNKED,
    ROUTE_PLAIN,
    ROUTE_REFERENCE,
    AssemblyLimits,
    RangeAssembler,
    earlier_start_needed,
    owned_messages,
)
from gateway.spark.options import EARLIEST, LATEST, OptionError, parse_offset_spec, parse_options
from gateway.spark.planning import (
    OffsetRange,
    batch_ranges,
    offsets_from_json,
    offsets_to_json,
    prorate,
    split_ranges,
)

TOPIC = "t"


def _segments(
    value: bytes, segment: int, *, header_only: bool = False, key: bytes | None = b"k"
) -> list[tuple[bytes | None, list[tuple[str, bytes | None]]]]:
    out = split(TOPIC, 0, 1, uuid.uuid4(), key, value, segment, [("u", b"1")], header_only=header_only)
    return [(None if r.value is None else bytes(r.value), list(r.headers)) for r in out]


def _envelope_record() -> tuple[bytes, list[tuple[str, bytes | None]]]:
    payload = uuid.uuid4().bytes
    env = Envelope.for_payload(
        payload, store="redis", locator=f"gw:{TOPIC}:{uuid.uuid4()}#1x64", message_id=uuid.uuid4()
    )
    return encode_envelope(env), [envelope_header()]


def _records(
    items: Sequence[tuple[bytes | None, list[tuple[str, bytes | None]] | None]], steps: Sequence[int], low: int
) -> list[Record]:
    out: list[Record] = []
    offset = low
    for i, (value, headers) in enumerate(items):
        out.append(Record(offset, b"key", value, headers, 0, 1_000 + offset))
        offset += steps[i % len(steps)] if steps else 1
    return out


def _fetcher(records: Sequence[Record], batch: int = 3, calls: list[tuple[int, int]] | None = None) -> Any:
    def fetch(start: int, until: int) -> Iterator[list[Record]]:
        if calls is not None:
            calls.append((start, until))
        chosen = [r for r in records if start <= r.offset < until]
        for i in range(0, len(chosen), batch):
            yield chosen[i : i + batch]

    return fetch


def _view(messages: Sequence[WholeMessage]) -> list[tuple[Any, ...]]:
    return [
        (
            m.record.offset,
            m.record.key,
            m.value,
            tuple(m.headers or ()),
            m.route,
            m.starting_offset,
            m.error,
            m.envelope,
        )
        for m in messages
    ]


def _owned(
    records: Sequence[Record],
    start: int,
    until: int,
    low: int,
    limits: AssemblyLimits,
    calls: list[tuple[int, int]] | None = None,
) -> list[WholeMessage]:
    return list(owned_messages(_fetcher(records, calls=calls), TOPIC, 0, start, until, low, limits))


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[Record], int]:
    """A partition's records: plain, chunked (interleaved, header-only or not), incomplete, envelopes, holes."""
    gap = draw(st.integers(2, 10))
    items: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = []
    open_messages: list[deque[tuple[bytes | None, list[tuple[str, bytes | None]]]]] = []
    for _ in range(draw(st.integers(1, 70))):
        action = draw(
            st.sampled_from(
                ["plain", "plain", "start", "next", "next", "next", "next", "abandon", "envelope", "tombstone"]
            )
        )
        if action == "plain":
            items.append((draw(st.binary(min_size=0, max_size=8)), draw(st.sampled_from([None, [("h", b"v")]]))))
        elif action == "envelope":
            items.append(_envelope_record())
        elif action == "tombstone":
            items.append((None, None))
        elif action == "start":
            value = draw(st.binary(min_size=1, max_size=12))
            open_messages.append(deque(_segments(value, draw(st.integers(1, 4)), header_only=draw(st.booleans()))))
        elif action == "next" and open_messages:
            i = draw(st.integers(0, len(open_messages) - 1))
            items.append(open_messages[i].popleft())
            if not open_messages[i]:
                del open_messages[i]
        elif action == "abandon" and open_messages:
            open_messages.pop(draw(st.integers(0, len(open_messages) - 1)))
    if draw(st.booleans()):
        for message in open_messages:
            items.extend(message)
    if not items:
        items.append((b"only", None))
    steps = draw(st.lists(st.sampled_from([1, 1, 1, 1, 2, 3]), min_size=1, max_size=8))
    return _records(items, steps, draw(st.integers(0, 3))), gap


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partitions(), st.data())
def test_any_tiling_emits_what_one_reader_emits(case: tuple[list[Record], int], data: st.DataObject) -> None:
    records, gap = case
    limits = AssemblyLimits(32_000_000, gap, 100_000)
    low = records[0].offset
    end = records[-1].offset + data.draw(st.integers(1, 3))
    whole = _owned(records, low, end, low, limits)
    cuts = sorted(data.draw(st.sets(st.integers(low + 1, max(low + 1, end - 1)), max_size=8)))
    bounds = [low, *[c for c in cuts if low < c < end], end]
    pieces: list[WholeMessage] = []
    for start, until in itertools.pairwise(bounds):
        got = _owned(records, start, until, low, limits)
        assert all(start <= m.record.offset < until for m in got)
        pieces.extend(got)
    assert _view(pieces) == _view(whole)


def test_a_message_completing_gap_plus_one_after_its_start_needs_gap_plus_one_read_back() -> None:
    gap = 4
    segs = _segments(b"abcdef", 2)  # three segments
    filler: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = [(b"p", None)] * 2
    # segments at 0, 3 and 5: the last one lands gap + 1 offsets after the first
    items = [segs[0], *filler, segs[1], filler[0], segs[2]]
    records = _records(items, [1], 0)
    limits = AssemblyLimits(32_000_000, gap, 100_000)
    whole = _owned(records, 0, 6, 0, limits)
    assert [m.value for m in whole if m.route == ROUTE_CHUNKED] == [b"abcdef"]
    # the default read-back (gap + 1) finds the first segment from a range starting at 5
    assert _view(_owned(records, 0, 5, 0, limits) + _owned(records, 5, 6, 0, limits)) == _view(whole)
    # one offset less of read-back, with the hole-check off, loses it: the off-by-one is real
    short = AssemblyLimits(32_000_000, gap, 100_000, lookback_offsets=gap)
    assert [m.value for m in _owned(records, 5, 6, 0, short)] == []


def test_a_message_spanning_more_than_the_gap_is_expired_by_every_reader() -> None:
    gap = 3
    segs = _segments(b"abcdef", 2)
    items = [segs[0], (b"p", None), (b"p", None), (b"p", None), segs[1], segs[2]]
    records = _records(items, [1], 0)
    limits = AssemblyLimits(32_000_000, gap, 100_000)
    assert [m.route for m in _owned(records, 0, 6, 0, limits)] == [ROUTE_PLAIN] * 3
    assert [m.route for m in _owned(records, 4, 6, 0, limits)] == []


def test_holes_before_the_range_make_the_task_read_further_back() -> None:
    gap = 3
    segs = _segments(b"abcdef", 2)
    records = [
        Record(0, b"k", *segs[0]),
        Record(1, b"k", b"p", None),
        Record(2, b"k", b"p", None),
        Record(3, b"k", *segs[1]),  # offsets 4..9 hold nothing visible (markers, compaction)
        Record(10, b"k", *segs[2]),
    ]
    limits = AssemblyLimits(32_000_000, gap, 100_000)
    whole = _owned(records, 0, 11, 0, limits)
    assert [m.value for m in whole if m.route == ROUTE_CHUNKED] == [b"abcdef"]
    calls: list[tuple[int, int]] = []
    got = _owned(records, 8, 11, 0, limits, calls)
    assert _view(got) == _view([m for m in whole if m.record.offset >= 8])
    assert calls[0] == (4, 11)  # the default read-back: 8 - (gap + 1)
    assert len(calls) >= 2 and calls[-1][0] <= 0


def test_earlier_start_needed() -> None:
    assert earlier_start_needed(10, 10, 14, None, 3) is None  # already at the log start
    assert earlier_start_needed(10, 0, 14, 13, 3) is None  # dense: 13 - 3 = 10
    assert earlier_start_needed(10, 0, 14, 12, 3) == 9  # one marker before the range
    assert earlier_start_needed(10, 0, 14, None, 3) == 6  # nothing seen: go back by gap + 1 at least
    assert earlier_start_needed(10, 8, 14, None, 3) == 8  # never below the log start
    assert earlier_start_needed(100, 0, 200, None, 3) == 0  # the distance doubles


def test_lm_is_rewritten_and_the_consumers_safe_offset_header_is_not_added() -> None:
    assembler = RangeAssembler(TOPIC, 0, 0, capacity=1_000_000, expiration_offset_gap=100, max_segments=10)
    first = _segments(b"abcd", 2)
    other = _segments(b"xyz", 2)
    out = [assembler.feed(Record(i, b"k", v, h)) for i, (v, h) in enumerate([first[0], other[0], first[1]])]
    assert out[:2] == [None, None]
    done = out[2]
    assert done is not None and done.value == b"abcd" and done.starting_offset == 0
    keys = [k for k, _ in done.headers or ()]
    assert keys == ["u", LM_HEADER]  # the consumer would append _so here: another message is still open
    plain = assembler.feed(Record(3, b"k", b"plain", [("h", b"1")]))
    assert plain is not None and plain.headers == [("h", b"1")]
    carried = assembler.feed(Record(4, b"k", b"plain", [(SAFE_OFFSET_HEADER, b"\0" * 8)]))
    assert carried is not None and carried.headers == [(SAFE_OFFSET_HEADER, b"\0" * 8)]


def test_envelopes_and_broken_envelopes() -> None:
    assembler = RangeAssembler(TOPIC, 0, 0, capacity=1_000_000, expiration_offset_gap=100, max_segments=10)
    value, headers = _envelope_record()
    ref = assembler.feed(Record(0, b"k", value, [("u", b"1"), *headers]))
    assert ref is not None and ref.route == ROUTE_REFERENCE and ref.envelope is not None
    assert ref.headers == [("u", b"1")] and ref.value is None
    broken = assembler.feed(Record(1, b"k", value[:-1], headers))
    assert broken is not None and broken.route == ROUTE_REFERENCE and broken.error and broken.envelope is None
    legacy = assembler.feed(Record(2, b"k", value[:-1], None))  # unmarked: a payload that only looks alike
    assert legacy is not None and legacy.route == ROUTE_PLAIN and legacy.value == value[:-1]


def test_invalid_segments_are_errors_only_inside_the_range() -> None:
    segs = _segments(b"abcdef", 2)  # three segments, more than this assembler accepts
    assembler = RangeAssembler(TOPIC, 0, 2, capacity=1_000_000, expiration_offset_gap=100, max_segments=1)
    assert assembler.feed(Record(0, b"k", *segs[0])) is None  # read-back: not this range's to report
    out = assembler.feed(Record(2, b"k", *segs[0]))
    assert out is not None and out.value is None and out.route == ROUTE_CHUNKED
    assert out.error is not None and "InvalidSegmentError" in out.error


# -- planning ------------------------------------------------------------------------------------


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 400)), min_size=1, max_size=5),
    st.one_of(st.none(), st.integers(1, 60)),
    st.one_of(st.none(), st.integers(1, 40)),
)
def test_split_ranges_tiles_each_partition(
    spans: list[tuple[int, int]], max_records: int | None, min_partitions: int | None
) -> None:
    ranges = [OffsetRange(TOPIC, p, start, start + size, start == 0) for p, (start, size) in enumerate(spans)]
    pieces = split_ranges(ranges, max_records=max_records, min_partitions=min_partitions)
    for rng in ranges:
        mine = [p for p in pieces if p.partition == rng.partition]
        if rng.size == 0:
            assert mine == []
            continue
        assert mine[0].from_offset == rng.from_offset and mine[-1].until_offset == rng.until_offset
        assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(mine))
        assert all(p.size > 0 for p in mine)
        assert [p.from_earliest for p in mine] == [rng.from_earliest] + [False] * (len(mine) - 1)
        if max_records is not None:
            assert all(p.size <= max_records for p in mine)
    if min_partitions is not None:
        assert len(pieces) >= min(min_partitions, sum(r.size for r in ranges))


@given(
    st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 100), st.integers(0, 1000)), min_size=1),
    st.integers(1, 500),
)
def test_prorate_shares_exactly_the_limit(backlog: dict[int, tuple[int, int]], limit: int) -> None:
    start = {(TOPIC, p): s for p, (s, _) in backlog.items()}
    end = {(TOPIC, p): s + n for p, (s, n) in backlog.items()}
    got = prorate(start, end, limit)
    moved = sum(got[tp] - start[tp] for tp in end)
    assert moved == min(limit, sum(end[tp] - start[tp] for tp in end))
    assert all(start[tp] <= got[tp] <= end[tp] for tp in end)


def test_offsets_json_round_trip_is_sparks_shape() -> None:
    offsets = {("b", 1): 5, ("a", 10): 7, ("a", 2): 0}
    data = offsets_to_json(offsets)
    assert data == {"a": {"2": 0, "10": 7}, "b": {"1": 5}}
    assert offsets_from_json(data) == offsets


def test_batch_ranges_resolve_earliest_latest_and_specific() -> None:
    marks = {(TOPIC, 0): (5, 50), (TOPIC, 1): (0, 10)}
    starting = parse_offset_spec('{"t": {"0": 20, "1": -2}}', name="startingOffsets", default_kind="earliest")
    ending = parse_offset_spec('{"t": {"0": -1}}', name="endingOffsets", default_kind="latest", allow_earliest=False)
    got = batch_ranges(starting, ending, marks, fail_on_data_loss=True)
    assert got == [OffsetRange(TOPIC, 0, 20, 50, False), OffsetRange(TOPIC, 1, 0, 10, True)]
    with pytest.raises(OptionError):
        batch_ranges(
            parse_offset_spec('{"t": {"1": 11}}', name="s", default_kind="earliest"),
            ending,
            marks,
            fail_on_data_loss=True,
        )


def test_options_are_parsed_strictly_and_kafka_keys_pass_through() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a, b"}
    opts = parse_options(
        {
            **base,
            "kafka.security.protocol": "SSL",
            "maxrecordsperpartition": "10",
            "message.assembler.expiration.offset.gap": "50",
            "failondataloss": "false",
        },
        streaming=False,
    )
    assert opts.topics == ("a", "b") and opts.kafka_config == {"security.protocol": "SSL"}
    assert opts.lookback_offsets == 51 and not opts.fail_on_data_loss and opts.max_records_per_partition == 10
    assert opts.starting_offsets.for_partition(("a", 0)) == EARLIEST
    assert parse_options(base, streaming=True).starting_offsets.for_partition(("a", 0)) == LATEST
    for bad in (
        {"maxoffsetspertrigger": "0"},
        {"startingoffsets": "yesterday"},
        {"endingoffsets": "earliest"},
        {"kafka.enable.auto.commit": "true"},
        {"failondataloss": "maybe"},
        {"s3.access.key": "x"},
    ):
        with pytest.raises(OptionError):
            parse_options({**base, **bad}, streaming=False)
    with pytest.raises(OptionError):
        parse_options({"subscribe": "a"}, streaming=False)


def test_arrow_schema_is_what_spark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from gateway.spark.schema import ENVELOPE_ARROW_SCHEMA, MESSAGE_ARROW_SCHEMA, envelope_schema, message_schema

    assert to_arrow_schema(message_schema(), timezone="UTC").equals(MESSAGE_ARROW_SCHEMA)
    assert to_arrow_schema(envelope_schema(), timezone="UTC").equals(ENVELOPE_ARROW_SCHEMA)


# -- subscription, timestamps and option names ------------------------------------------------------


def test_exactly_one_subscription_and_each_parses() -> None:
    from gateway.spark.options import OptionError, parse_options

    base = {"kafka.bootstrap.servers": "h:1"}
    with pytest.raises(OptionError, match="exactly one of subscribe, subscribePattern and assign"):
        parse_options(base, streaming=False)
    with pytest.raises(OptionError, match="subscribe and subscribepattern"):
        parse_options({**base, "subscribe": "a", "subscribePattern": "b.*"}, streaming=False)
    pattern = parse_options({**base, "subscribePattern": "ev-(a|b)"}, streaming=False).subscription
    assert pattern is not None and (pattern.kind, pattern.pattern) == ("subscribePattern", "ev-(a|b)")
    with pytest.raises(OptionError, match="not a regular expression"):
        parse_options({**base, "subscribePattern": "("}, streaming=False)
    assigned = parse_options({**base, "assign": '{"t": [2, 0], "u": [1]}'}, streaming=False).subscription
    assert assigned is not None and assigned.partitions == (("t", 0), ("t", 2), ("u", 1))
    for bad in ("[1]", '{"t": 0}', '{"t": ["0"]}', "{}"):
        with pytest.raises(OptionError, match="assign"):
            parse_options({**base, "assign": bad}, streaming=False)


def test_unknown_and_refused_options_are_named() -> None:
    from gateway.spark.options import OptionError, parse_options

    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    with pytest.raises(OptionError, match="unknown options bogusoption, startingoffset for hybrid-kafka"):
        parse_options({**base, "bogusOption": "1", "startingOffset": "earliest"}, streaming=False)
    with pytest.raises(OptionError, match="minOffsetsPerTrigger is not supported"):
        parse_options({**base, "minOffsetsPerTrigger": "10"}, streaming=True)
    accepted = parse_options(
        {**base, "fetchOffset.numRetries": "3", "groupIdPrefix": "etl", "kafka.client.id": "x"}, streaming=False
    )
    assert accepted.group_id.startswith("etl-")
    with pytest.raises(OptionError, match="for batch queries"):
        parse_options({**base, "endingTimestamp": "5"}, streaming=True)
    with pytest.raises(OptionError, match="error or latest"):
        parse_options({**base, "startingOffsetsByTimestampStrategy": "closest"}, streaming=False)


def test_timestamps_become_offsets_with_the_spark_precedence() -> None:
    from gateway.spark.options import LATEST, OptionError, parse_options
    from gateway.spark.planning import offsets_by_time, timestamps_wanted

    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    both = parse_options(
        {**base, "startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"t": {"0": 5}}'}, streaming=False
    )
    tps = [("t", 0), ("t", 1)]
    assert timestamps_wanted(both.starting_timestamps, tps) == {("t", 0): 1000, ("t", 1): 1000}
    by_partition = parse_options({**base, "startingOffsetsByTimestamp": '{"t": {"1": 7}}'}, streaming=False)
    assert timestamps_wanted(by_partition.starting_timestamps, tps) == {("t", 1): 7}
    spec = offsets_by_time(
        by_partition.starting_offsets, by_partition.starting_timestamps, {("t", 1): 42}, name="s", missing="error"
    )
    assert spec.for_partition(("t", 1)) == 42
    assert spec.for_partition(("t", 0)) == by_partition.starting_offsets.for_partition(("t", 0))
    with pytest.raises(OptionError, match=r"no record of t\[1\] has a timestamp at or after 7"):
        offsets_by_time(
            by_partition.starting_offsets, by_partition.starting_timestamps, {("t", 1): -1}, name="s", missing="error"
        )
    late = offsets_by_time(
        by_partition.starting_offsets, by_partition.starting_timestamps, {("t", 1): -1}, name="s", missing="latest"
    )
    assert late.for_partition(("t", 1)) == LATEST
