"""The object stores' pending journal against an in-memory bucket: which markers are written and deleted, and when."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

from gateway.errors import PayloadNotFoundError, StoreUnavailableError
from stores.blob import BlobEntry, MarkerRequests, PendingJournal

BASE = "s3://bucket/gw/"


@dataclass(frozen=True)
class Parsed:
    topic: str
    message_id: uuid.UUID


def parse(locator: str) -> Parsed:
    topic, _, mid = locator.removeprefix(BASE).partition("/")
    return Parsed(topic, uuid.UUID(mid))


class Bucket:
    """Markers by key, with the LastModified each got; ``failing`` deletes raise as S3 being down does."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, int]] = {}
        self.now_ms = 1_000_000
        self.failing = False
        self.puts: list[str] = []

    def put(self, key: str, body: bytes, since_ms: int) -> None:
        self.objects[key] = (body, self.now_ms)
        self.puts.append(key)

    def delete(self, keys: Sequence[str]) -> None:
        if self.failing:
            raise StoreUnavailableError("S3 is failing")
        for key in keys:
            self.objects.pop(key, None)

    def read(self, key: str) -> bytes:
        if key not in self.objects:
            raise PayloadNotFoundError(key)
        return self.objects[key][0]

    def listing(self, prefix: str) -> Iterator[BlobEntry]:
        for key, (_, ms) in sorted(self.objects.items()):
            if key.startswith(prefix):
                yield BlobEntry(key, ms)


def journal(bucket: Bucket, batch: int = 3, open_ms: int = 10_000) -> PendingJournal:
    requests = MarkerRequests(
        bucket.put,
        bucket.delete,
        bucket.read,
        bucket.listing,
        lambda topic, mid: f"{BASE}{topic}/{mid}",
        parse,
        lambda action, locators: None,
    )
    return PendingJournal(requests, "bucket", "gw/", batch=batch, open_ms=open_ms, scheme="s3")


def test_one_batch_marker_per_batch_and_none_per_payload() -> None:
    bucket = Bucket()
    pending = journal(bucket)
    locators = [f"{BASE}t/{pending.next_message_id('t', 0)}" for _ in range(7)]
    for locator in locators:
        pending.mark(locator, parse(locator), 0)
    assert len(bucket.puts) == 3 and all(key.endswith(".batch") for key in bucket.puts)
    alone = f"{BASE}t/{uuid.uuid4()}"
    pending.mark(alone, parse(alone), 0)
    assert bucket.puts[-1] == f"gw/_pending/t/{alone.rsplit('/', 1)[1]}", "an id not taken from a batch gets its own"


def test_a_marker_whose_delete_failed_goes_with_the_next_settle() -> None:
    bucket = Bucket()
    pending = journal(bucket, batch=2)
    first, second = (f"{BASE}t/{pending.next_message_id('t', 0)}" for _ in range(2))
    pending.next_message_id("t", 0)  # the first batch is used up and closes; a second opens
    bucket.failing = True
    with pytest.raises(StoreUnavailableError):
        pending.settle([first, second])
    assert len(bucket.objects) == 2, "both batch markers are still there"
    bucket.failing = False
    pending.settle([])
    assert len(bucket.objects) == 1, "the settled batch's marker went on the next call"
    assert not pending.covers(first) and not pending.covers(second)


def test_listing_waits_for_a_batchs_whole_window_and_skips_what_it_cannot_read() -> None:
    bucket = Bucket()
    writer = journal(bucket, open_ms=60_000)
    taken = f"{BASE}t/{writer.next_message_id('t', 0)}"
    bucket.now_ms += 5_000
    bucket.put("gw/_pending/t/00000000-0000-4000-8000-000000000000.batch", b"not json", 0)
    sweeper = journal(bucket, batch=1)
    start = 1_000_000
    assert sweeper.list_pending(start + 30_000) == [], "written at the start, open for a minute"
    listed = sweeper.list_pending(start + 61_000)
    assert taken in listed and len(listed) == 3
    assert all(sweeper.covers(locator) for locator in listed)
    sweeper.settle(listed)
    assert list(bucket.objects) == ["gw/_pending/t/00000000-0000-4000-8000-000000000000.batch"], "kept for a human"


def test_a_batch_opened_ahead_serves_the_next_ids_and_opening_again_writes_nothing() -> None:
    bucket = Bucket()
    pending = journal(bucket, batch=3)
    pending.open_batch("t", 0)
    pending.open_batch("t", 0)
    assert len(bucket.puts) == 1, "a batch with ids left is not opened twice"
    taken = [pending.next_message_id("t", 0) for _ in range(3)]
    assert len(bucket.puts) == 1, "the ids came from the marker written ahead"
    assert all(pending.covers(f"{BASE}t/{mid}") for mid in taken)
    pending.open_batch("t", 0)  # used up: the next batch is written now, not by the next write
    assert len(bucket.puts) == 2
    pending.next_message_id("t", 0)
    assert len(bucket.puts) == 2


def test_a_batch_opened_ahead_past_its_window_is_replaced_and_an_unused_one_goes_at_the_end() -> None:
    bucket = Bucket()
    pending = journal(bucket, batch=3, open_ms=1_000)
    pending.open_batch("t", 0)
    pending.open_batch("t", 1_000)  # the window ended: a fresh batch, the old one closed with nothing handed out
    assert len(bucket.puts) == 2
    pending.end_batches()
    assert bucket.objects == {}, "batches that handed out no id leave no marker behind"


def test_no_batch_is_opened_ahead_when_each_write_has_its_own_marker() -> None:
    bucket = Bucket()
    pending = journal(bucket, batch=1)
    pending.open_batch("t", 0)
    assert bucket.puts == []
