"""The object stores' batched pending journal: which ids a batch hands out and when its marker may go."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stores.blob._batch_marker import BatchJournal, decode_batch, encode_batch

TOPIC = "orders"


def entries(count: int, topic: str = TOPIC) -> list[tuple[uuid.UUID, str]]:
    ids = [uuid.uuid4() for _ in range(count)]
    return [(mid, f"s3://b/gw/{topic}/{mid}") for mid in ids]


def locator(mid: uuid.UUID, topic: str = TOPIC) -> str:
    return f"s3://b/gw/{topic}/{mid}"


def two_taken(size: int) -> tuple[BatchJournal, list[tuple[uuid.UUID, str]], uuid.UUID, uuid.UUID]:
    """A journal with one batch ``m1`` of ``size`` ids opened at 0, and its first two ids handed out."""
    journal = BatchJournal(size, 1000)
    batch = entries(size)
    journal.opened("m1", TOPIC, 0, batch)
    first, second = journal.take(TOPIC, 0), journal.take(TOPIC, 0)
    assert first is not None and second is not None
    return journal, batch, first, second


def test_ids_come_from_the_open_batch_in_order_until_it_runs_out() -> None:
    journal = BatchJournal(3, 1000)
    assert journal.take(TOPIC, 0) is None, "no batch yet: the store must write a marker first"
    batch = entries(3)
    journal.opened("m1", TOPIC, 0, batch)
    taken = [journal.take(TOPIC, t) for t in (1, 2, 3)]
    assert taken == [mid for mid, _ in batch]
    assert all(journal.covers(loc) for _, loc in batch)
    assert journal.take(TOPIC, 4) is None, "exhausted"
    assert journal.take("other", 4) is None, "batches are per topic"


def test_a_batch_stops_handing_out_ids_when_its_window_ends() -> None:
    journal = BatchJournal(10, 1000)
    journal.opened("m1", TOPIC, 5000, entries(10))
    assert journal.take(TOPIC, 5999) is not None
    assert journal.take(TOPIC, 6000) is None


def test_a_marker_goes_only_once_its_batch_is_closed_and_all_handed_out_ids_are_settled() -> None:
    journal, batch, a, b = two_taken(4)
    assert journal.settle([locator(a)]) == []
    assert journal.doomed() == [], "the batch is still open"
    journal.close_expired(999)
    assert journal.doomed() == []
    journal.close_expired(1000)
    assert journal.doomed() == [], "closed, but one handed-out id is unsettled"
    assert not journal.covers(batch[2][1]), "ids never handed out are not journalled writes"
    assert journal.settle([locator(b), "s3://b/gw/orders/alone"]) == ["s3://b/gw/orders/alone"]
    assert journal.doomed() == ["m1"]
    journal.deleted(["m1"])
    assert journal.doomed() == []


def test_a_failed_marker_delete_is_tried_again() -> None:
    journal = BatchJournal(2, 1000)
    journal.opened("m1", TOPIC, 0, entries(2))
    mid = journal.take(TOPIC, 0)
    assert mid is not None
    journal.close_all()
    journal.settle([locator(mid)])
    assert journal.doomed() == ["m1"]
    assert journal.doomed() == ["m1"], "stays until deleted() says it is gone"
    assert journal.settle([locator(mid)]) == [locator(mid)], "settling twice is harmless"


def test_opening_a_new_batch_closes_the_previous_one() -> None:
    journal = BatchJournal(2, 1000)
    journal.opened("m1", TOPIC, 0, entries(2))
    journal.opened("m2", TOPIC, 0, entries(2))
    assert journal.doomed() == ["m1"], "nothing of m1 was handed out"


def test_a_listed_batch_is_closed_and_names_every_locator() -> None:
    journal = BatchJournal(2, 1000)
    names = ["s3://b/gw/t/1", "s3://b/gw/t/2"]
    assert journal.listed("m1", "t", names) == names
    assert all(journal.covers(n) for n in names)
    journal.settle(names[:1])
    assert journal.listed("m1", "t", names) == names[1:], "listing again keeps what was settled"
    assert journal.doomed() == []
    journal.settle(names[1:])
    assert journal.doomed() == ["m1"]
    assert journal.listed("m1", "t", names) == [], "a done batch is not resurrected by its marker"
    assert journal.listed("m2", "t", []) == []
    assert journal.doomed() == ["m1", "m2"]


def test_listing_its_own_batch_shows_only_unsettled_handed_out_ids() -> None:
    journal, batch, first, second = two_taken(3)
    journal.settle([locator(first)])
    assert journal.listed("m1", TOPIC, [loc for _, loc in batch]) == [locator(second)]


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BatchJournal(0, 1000)
    with pytest.raises(ValueError, match="positive"):
        BatchJournal(4, 0)


def test_marker_body_round_trips_and_anything_else_is_refused() -> None:
    names = ("s3://b/gw/t/1", "s3://b/gw/t/2")
    marker = decode_batch(encode_batch(30_000, names))
    assert marker.open_for_ms == 30_000 and marker.locators == names
    for body in (
        b"s3://b/gw/t/1",
        b"[]",
        b'{"format": 2, "open_for_ms": 1, "locators": []}',
        b'{"format": 1, "open_for_ms": -1, "locators": []}',
        b'{"format": 1, "open_for_ms": true, "locators": []}',
        b'{"format": 1, "open_for_ms": 1, "locators": [1]}',
    ):
        with pytest.raises(ValueError):
            decode_batch(body)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["take", "settle", "tick", "close"]), st.integers(0, 7)), max_size=60))
def test_no_marker_goes_while_a_handed_out_id_is_unsettled(ops: list[tuple[str, int]]) -> None:
    """The safety property: a marker is doomed only when every id it handed out was settled."""
    journal = BatchJournal(3, 100)
    now, handed, settled, marker_of = 0, [], set(), {}
    names = iter(f"m{i}" for i in range(1000))
    for op, n in ops:
        if op == "take":
            mid = journal.take(TOPIC, now)
            if mid is None:
                key, batch = next(names), entries(3)
                journal.opened(key, TOPIC, now, batch)
                marker_of.update({loc: key for _, loc in batch})
                mid = journal.take(TOPIC, now)
            assert mid is not None
            handed.append(locator(mid))
        elif op == "settle" and handed:
            loc = handed[n % len(handed)]
            journal.settle([loc])
            settled.add(loc)
        elif op == "tick":
            now += n * 20
            journal.close_expired(now)
        elif op == "close":
            journal.close_all()
        unsettled_markers = {marker_of[loc] for loc in handed if loc not in settled}
        assert not unsettled_markers & set(journal.doomed())
        for loc in handed:
            assert journal.covers(loc) == (loc not in settled)
