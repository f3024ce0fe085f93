"""Fuzzing the consumer pipeline (issue 13, build item 6); the long run is ``python -m tests.fuzzing``."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzzing import PARTITIONS, RESERVED, Item, check_stream, new_pipeline, stream

HEADERS = st.lists(st.tuples(st.sampled_from((*RESERVED, "app")), st.binary(max_size=40)), max_size=3)
RAW = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=80)), st.one_of(st.none(), HEADERS)), max_size=10)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 120), st.floats(0.0, 1.0), RAW)
def test_hostile_streams_raise_only_typed_errors_deliver_valid_messages_once_and_stay_bounded(
    seed: int, size: int, hostile_share: float, raw: list[tuple[bytes | None, list[tuple[str, bytes]] | None]]
) -> None:
    """Generated streams, with records drawn by hypothesis itself slipped in at random places."""
    rng = random.Random(seed)
    items = stream(rng, size, hostile_share)
    for value, headers in raw:
        items.insert(rng.randrange(len(items) + 1), Item(rng.choice(PARTITIONS), value, headers))
    check_stream(items)


def test_a_long_hostile_stream_keeps_memory_bounded() -> None:
    """Many thousands of records through one pipeline: state must not grow with the input."""
    rng = random.Random(13)
    pipeline = new_pipeline()
    offsets: dict[tuple[str, int], int] = {}
    outcome = check_stream(stream(rng, 5000, 0.9), pipeline, offsets=offsets)
    outcome = check_stream(stream(rng, 5000, 0.9), pipeline, outcome, offsets)
    assert outcome.inputs >= 10_000
    assert outcome.max_tracker_entries <= pipeline.tracker.max_entries
