"""The batched pending journal of the object stores (S3, GCS, Azure): one marker object for many writes (pure, no I/O).

No object store has a request that writes two objects at once, so a marker per payload costs a PUT
per message, before the payload's own: on a local S3 server about as long as the PUT of a 1 MB payload
(docs/stores.md, "Batched pending journal"), and on AWS one more round trip and one more billed
request. A *batch marker* instead names the next ``size`` message ids of a topic before any of them
is used. The producer takes its ids from the batch (``Store.next_message_id``) and writes those
payloads without a marker of their own, since their locators are already journalled. The ordering
guarantee is the same as with one marker per payload: no payload is visible before a marker naming
it.

A batch hands out ids for at most ``open_for_ms`` after its marker was written; then, or when its
ids run out, or when the store closes, it *closes*. A closed batch whose handed-out ids are all
*settled* (acknowledged, so the mark is cleared, or deleted) is *done*, and its marker can go.
Ids never handed out need nothing: no payload was written under them. A sweeper reads a batch
marker (:func:`decode_batch`) and judges each locator in it like any pending write. The marker's
LastModified understates when its last payload was written by up to ``open_for_ms``, so the marker
carries that window and :meth:`BatchJournal.listed` callers add it to the age.

This module decides the bookkeeping only; :class:`~stores.blob._pending.PendingJournal` makes the requests.
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

BATCH_SUFFIX = ".batch"
BATCH_FORMAT = 1


@dataclass(slots=True)
class JournalBatch:
    """One batch marker and what is still unsettled in it."""

    key: str
    topic: str
    opened_ms: int
    unused: deque[tuple[uuid.UUID, str]]
    """``(message id, locator)`` pairs not handed out yet."""
    outstanding: set[str] = field(default_factory=set)
    """Locators handed out (or, for a listed batch, named) and not settled."""
    closed: bool = False

    @property
    def done(self) -> bool:
        return self.closed and not self.outstanding


@dataclass(frozen=True, slots=True)
class BatchMarker:
    """What a batch marker object holds: the window it was open for and every locator it names."""

    open_for_ms: int
    locators: tuple[str, ...]


class BatchJournal:
    """Open batches by topic, batch membership by locator, and markers that may be deleted.

    ``size`` ids per batch; a batch hands out ids for ``open_for_ms`` after it was opened.
    """

    def __init__(self, size: int, open_for_ms: int) -> None:
        if size < 1:
            raise ValueError(f"a journal batch needs at least 1 id, got {size}")
        if open_for_ms < 1:
            raise ValueError(f"open_for_ms must be positive, got {open_for_ms}")
        self.size = size
        self.open_for_ms = open_for_ms
        self._open: dict[str, JournalBatch] = {}
        self._known: dict[str, JournalBatch] = {}
        self._of_locator: dict[str, JournalBatch] = {}
        self._doomed: set[str] = set()

    def has_ids(self, topic: str, now_ms: int) -> bool:
        """Whether an open batch of ``topic`` can hand out an id now; one that is used up or past its window closes."""
        batch = self._open.get(topic)
        if batch is not None and (not batch.unused or now_ms - batch.opened_ms >= self.open_for_ms):
            self._close(batch)
            return False
        return batch is not None

    def take(self, topic: str, now_ms: int) -> uuid.UUID | None:
        """The next journalled id of ``topic``, or ``None`` when a new batch must be opened first."""
        if not self.has_ids(topic, now_ms):
            return None
        batch = self._open[topic]
        message_id, locator = batch.unused.popleft()
        batch.outstanding.add(locator)
        self._of_locator[locator] = batch
        return message_id

    def opened(self, key: str, topic: str, now_ms: int, entries: Sequence[tuple[uuid.UUID, str]]) -> None:
        """Record a batch whose marker, naming every locator of ``entries``, was just written."""
        previous = self._open.get(topic)
        if previous is not None:
            self._close(previous)
        batch = JournalBatch(key, topic, now_ms, deque(entries))
        self._open[topic] = batch
        self._known[key] = batch

    def listed(self, key: str, topic: str, locators: Sequence[str]) -> list[str]:
        """The locators of a batch marker found in the bucket that are still pending as far as this journal knows.

        A marker this journal wrote or listed before keeps its state: only its unsettled locators
        are pending (ids never handed out are not). Any other marker is recorded as a closed batch
        with every locator it names still to settle, since its writer's state is lost.
        """
        if key in self._doomed:
            return []
        known = self._known.get(key)
        if known is not None:
            return [locator for locator in locators if locator in known.outstanding]
        batch = JournalBatch(key, topic, 0, deque(), set(locators), closed=True)
        self._known[key] = batch
        for locator in batch.outstanding:
            self._of_locator[locator] = batch
        if batch.done:
            self._retire(batch)
        return list(locators)

    def covers(self, locator: str) -> bool:
        """Whether a batch marker names ``locator`` and it is not settled: its write needs no marker of its own."""
        return locator in self._of_locator

    def settle(self, locators: Iterable[str]) -> list[str]:
        """Settle the batch-journalled ``locators``; returns the others (journalled one marker each)."""
        alone: list[str] = []
        for locator in locators:
            batch = self._of_locator.pop(locator, None)
            if batch is None:
                alone.append(locator)
                continue
            batch.outstanding.discard(locator)
            if batch.done:
                self._retire(batch)
        return alone

    def close_expired(self, now_ms: int) -> None:
        """Close open batches past their window, so that an idle producer's markers go too."""
        for batch in list(self._open.values()):
            if now_ms - batch.opened_ms >= self.open_for_ms:
                self._close(batch)

    def close_all(self) -> None:
        for batch in list(self._open.values()):
            self._close(batch)

    def doomed(self) -> list[str]:
        """Keys of done batch markers not yet deleted."""
        return sorted(self._doomed)

    def deleted(self, keys: Iterable[str]) -> None:
        """The markers at ``keys`` are gone."""
        for key in keys:
            self._doomed.discard(key)

    def _close(self, batch: JournalBatch) -> None:
        batch.closed = True
        batch.unused.clear()
        if self._open.get(batch.topic) is batch:
            del self._open[batch.topic]
        if batch.done:
            self._retire(batch)

    def _retire(self, batch: JournalBatch) -> None:
        self._known.pop(batch.key, None)
        self._doomed.add(batch.key)


def encode_batch(open_for_ms: int, locators: Sequence[str]) -> bytes:
    """The marker's body: JSON, so that a human (or ``aws s3 cp -``) can read what it names."""
    return json.dumps({"format": BATCH_FORMAT, "open_for_ms": open_for_ms, "locators": list(locators)}).encode()


def decode_batch(body: bytes) -> BatchMarker:
    """The marker's content; ``ValueError`` for anything but a batch marker of a known format."""
    data = json.loads(body)
    if not isinstance(data, dict) or data.get("format") != BATCH_FORMAT:
        raise ValueError("not a batch marker of a known format")
    window, locators = data.get("open_for_ms"), data.get("locators")
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"batch marker has an invalid open_for_ms {window!r}")
    if not isinstance(locators, list) or not all(isinstance(item, str) for item in locators):
        raise ValueError("batch marker's locators are not a list of strings")
    return BatchMarker(window, tuple(locators))


__all__ = ["BATCH_SUFFIX", "BatchJournal", "BatchMarker", "JournalBatch", "decode_batch", "encode_batch"]
