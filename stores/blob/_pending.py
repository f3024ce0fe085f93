"""The pending journal of the object stores (S3, GCS, Azure): a marker object per payload, or one per batch of ids.

No object store has a transaction spanning two objects, so ordering does the journal's job: a marker naming a
payload is written before the payload, so no payload is ever visible without one; on delete the
payload goes first and its mark last, so an interrupted delete leaves a marker to retry from.

Two kinds of marker live under ``<prefix>_pending/<topic>/``: ``<message id>``, holding one locator,
and ``<batch id>.batch``, naming the next ids of a topic before any of them is used
(:mod:`stores.blob._batch_marker` keeps that bookkeeping, pure). This class makes the journal's requests
through the store's own request helpers (:class:`MarkerRequests`), so errors are translated in
one place and the journal never sees a cloud's client.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import LocatorError, PayloadIntegrityError, PayloadNotFoundError, StoreError
from stores.base import TOPIC_PATTERN, UUID_PATTERN, validate_topic
from stores.base import now_ms as wall_ms
from stores.blob._backend import BlobEntry
from stores.blob._batch_marker import BATCH_SUFFIX, BatchJournal, decode_batch, encode_batch

log = logging.getLogger(__name__)

PENDING_DIR = "_pending/"


class ParsedLocator(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def message_id(self) -> uuid.UUID: ...


@dataclass(frozen=True, slots=True)
class MarkerRequests:
    """What the journal asks of its store, each with the store's error translation."""

    put: Callable[[str, bytes, int], None]
    """``(key, body, pending since ms)``: write a marker object."""
    delete: Callable[[Sequence[str]], None]
    """Delete marker objects; absent ones are fine."""
    read: Callable[[str], bytes]
    """A batch marker's body; :class:`PayloadNotFoundError` when gone."""
    listing: Callable[[str], Iterator[BlobEntry]]
    """The objects under a prefix."""
    locator_for: Callable[[str, uuid.UUID], str]
    parse: Callable[[str], ParsedLocator]
    journaled: Callable[[str, Sequence[str]], None]
    """Metrics and debug log of marks written or cleared."""


class PendingJournal:
    """Markers under ``<store prefix>_pending/``; ``batch`` ids per batch marker (1: a marker per payload)."""

    def __init__(
        self, requests: MarkerRequests, bucket: str, store_prefix: str, *, batch: int, open_ms: int, scheme: str
    ) -> None:
        if batch < 1:
            raise ValueError(f"journal_batch must be at least 1, got {batch}")
        self.requests = requests
        self.prefix = f"{store_prefix}{PENDING_DIR}"
        self.batch = batch
        self._locator_base = f"{scheme}://{bucket}/{store_prefix}"
        """Locators in markers of one's own, in the store's scheme (``s3``, ``gs``, ``abs``)."""
        self._book = BatchJournal(batch, open_ms)
        """Batches this journal opened, and those its listings found (settled even with ``batch=1``)."""
        self._lock = threading.Lock()
        self._marker_re = re.compile(rf"{re.escape(self.prefix)}({TOPIC_PATTERN})/({UUID_PATTERN})")
        self._batch_re = re.compile(
            rf"{re.escape(self.prefix)}({TOPIC_PATTERN})/({UUID_PATTERN}){re.escape(BATCH_SUFFIX)}"
        )

    def marker_key(self, parsed: ParsedLocator) -> str:
        return f"{self.prefix}{parsed.topic}/{parsed.message_id}"

    def mark(self, locator: str, parsed: ParsedLocator, since_ms: int) -> None:
        """A marker of its own for ``locator`` (already parsed), unless a batch marker already names it."""
        if self.covers(locator):
            return
        self.requests.put(self.marker_key(parsed), locator.encode(), since_ms)
        self.requests.journaled("marked", [locator])

    def covers(self, locator: str) -> bool:
        """Whether a batch marker names ``locator`` and it is not settled (gc must prove its fate)."""
        with self._lock:
            return self._book.covers(locator)

    def next_message_id(self, topic: str, now_ms: int) -> uuid.UUID:
        """An id whose locator a batch marker already names, writing a new batch marker when none is open."""
        if self.batch == 1:
            return uuid.uuid4()
        validate_topic(topic)
        with self._lock:
            taken = self._book.take(topic, now_ms)
            if taken is None:
                self._open_batch(topic, now_ms)
                taken = self._book.take(topic, now_ms)
        assert taken is not None  # a batch just opened has ids
        return taken

    def open_batch(self, topic: str, now_ms: int) -> None:
        """Write ``topic``'s batch marker now unless one with ids is open, so that its next write waits for none.

        The lock is held while the marker is written: a write to the topic meanwhile waits for this
        marker rather than writing a second one.
        """
        if self.batch == 1:
            return
        validate_topic(topic)
        with self._lock:
            if not self._book.has_ids(topic, now_ms):
                self._open_batch(topic, now_ms)

    def _open_batch(self, topic: str, now_ms: int) -> None:
        key = f"{self.prefix}{topic}/{uuid.uuid4()}{BATCH_SUFFIX}"
        ids = [uuid.uuid4() for _ in range(self.batch)]
        entries = [(mid, self.requests.locator_for(topic, mid)) for mid in ids]
        locators = [locator for _, locator in entries]
        self.requests.put(key, encode_batch(self._book.open_for_ms, locators), now_ms)
        self._book.opened(key, topic, now_ms, entries)
        self.requests.journaled("marked", locators)

    def settle(self, locators: Sequence[str]) -> None:
        """The fates of ``locators`` are known: their own markers go, and so do batch markers now all settled.

        A marker whose delete fails is tried again with the next call.
        """
        with self._lock:
            alone = self._book.settle(locators)
            self._book.close_expired(wall_ms())
            doomed = self._book.doomed()
        keys = [self.marker_key(self.requests.parse(locator)) for locator in alone]
        if keys or doomed:
            self.requests.delete([*keys, *doomed])
        if doomed:
            with self._lock:
                self._book.deleted(doomed)

    def end_batches(self) -> None:
        """Close the open batches and delete the markers of those all settled (best effort: a marker
        left behind names acknowledged payloads, which gc proves and clears)."""
        with self._lock:
            self._book.close_all()
        with contextlib.suppress(StoreError):
            self.settle([])

    def list_pending(self, older_than_ms: int) -> list[str]:
        """Locators of markers older than ``older_than_ms`` (by LastModified, the server's clock at one
        second's resolution), a batch marker's once its whole window ended before it."""
        found = []
        for entry in self.requests.listing(self.prefix):
            key, modified = entry.key, entry.modified_ms
            if modified >= older_than_ms:
                continue
            if (alone := self._marker_re.fullmatch(key)) is not None:
                found.append(f"{self._locator_base}{alone[1]}/{alone[2]}")
            elif (batch := self._batch_re.fullmatch(key)) is not None:
                found.extend(self._listed_batch(key, batch[1], modified, older_than_ms))
        return found

    def _listed_batch(self, key: str, topic: str, modified_ms: int, older_than_ms: int) -> list[str]:
        """Locators of this store and of the marker's topic only (nothing else is ever deleted); a marker
        that does not decode is skipped with a warning, for a human."""
        try:
            marker = decode_batch(self.requests.read(key))
        except PayloadNotFoundError:
            return []  # settled and deleted since the listing
        except (ValueError, PayloadIntegrityError) as exc:
            log.warning("skipping pending batch marker %s: %s", key, exc)
            return []
        if modified_ms + marker.open_for_ms >= older_than_ms:
            return []
        mine = []
        for locator in marker.locators:
            with contextlib.suppress(LocatorError):
                if self.requests.parse(locator).topic == topic:
                    mine.append(locator)
        with self._lock:
            return self._book.listed(key, topic, mine)


__all__ = ["PENDING_DIR", "MarkerRequests", "PendingJournal"]
