"""The pending journal's side of :class:`~stores.blob.BlobStore`: the Store contract's journal methods, and
the requests the journal makes (:class:`~stores.blob._pending.MarkerRequests`) through the cloud's backend.

The journal itself (:class:`~stores.blob._pending.PendingJournal`) decides which marker names a payload
and when one may go; this part validates locators, counts what was marked or cleared, and makes the
marker writes, deletes, reads and listings through the backend with the store's error counting.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from gateway.errors import PayloadIntegrityError
from stores.base import StoreLifecycle
from stores.blob._backend import BlobBackend, BlobEntry
from stores.blob._locator import ObjectLocator
from stores.blob._pending import MarkerRequests, PendingJournal

MAX_BATCH_MARKER_BYTES = 1 << 20
_T = TypeVar("_T")


class BlobJournal(StoreLifecycle):
    """Pending marks of :class:`~stores.blob.BlobStore`, which this is mixed into."""

    backend: BlobBackend
    bucket: str
    prefix: str
    journal: PendingJournal

    if TYPE_CHECKING:  # provided by BlobStore

        def validate_locator(self, locator: str) -> ObjectLocator: ...
        def locator_for(self, topic: str, message_id: uuid.UUID, size: int = 0) -> str: ...
        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...
        def _iterate(self, prefix: str) -> Iterator[BlobEntry]: ...

    def mark_pending(self, locator: str, now_ms: int) -> None:
        parsed = self.validate_locator(locator)
        self._check_open()
        self.journal.mark(locator, parsed, now_ms)

    def clear_pending(self, locator: str) -> None:
        self.clear_pending_many([locator])

    def clear_pending_many(self, locators: Sequence[str]) -> None:
        """One delete request per batch of markers where the cloud has one (S3: 1000 a request).

        Batch-journalled locators only settle their place in the batch; a batch marker is deleted
        once its batch is closed and all of it settled.
        """
        for locator in locators:
            self.validate_locator(locator)
        self._check_open()
        self.journal.settle(locators)
        self._journaled("cleared", locators)

    def next_message_id(self, topic: str, now_ms: int) -> uuid.UUID:
        """An id for the next payload of ``topic``, already journalled as pending in a batch marker.

        :meth:`put` then writes no marker of its own for it: one marker write per ``journal_batch``
        payloads instead of one per payload. A fresh, unjournalled id when batches are off.
        """
        self._check_open()
        return self.journal.next_message_id(topic, now_ms)

    def open_journal_batch(self, topic: str, now_ms: int) -> None:
        """Journal ``topic``'s next ``journal_batch`` ids now (one marker write), unless a batch with ids is open.

        A producer's ``prepare_topics``/``warm_topics`` call it, so that a topic's first payload does
        not wait for the marker: on a local S3 server a marker write costs about what a 1 MB payload's does.
        """
        self._check_open()
        self.journal.open_batch(topic, now_ms)

    def end_journal_batches(self) -> None:
        """Close the open batches and delete the markers of those all settled; a producer's close calls it."""
        if not self._closed:
            self.journal.end_batches()

    def journalled_in_batch(self, locator: str) -> bool:
        """Whether ``locator`` is named by a batch marker and not settled (gc must prove its fate)."""
        return self.journal.covers(locator)

    def list_pending(self, older_than_ms: int) -> list[str]:
        """Markers by their last-modified time, which is the *server's* clock (one second's resolution on S3).

        The ``now_ms`` given to :meth:`mark_pending` is kept in the marker's metadata for humans, but
        listings do not return metadata and reading every marker would cost a request each; a
        sweeper should use an age of minutes, far above the resolution and any clock skew.
        """
        self._check_open()
        return self.journal.list_pending(older_than_ms)

    def marker_key(self, parsed: ObjectLocator) -> str:
        """The key of the payload's own pending marker."""
        return self.journal.marker_key(parsed)

    # -- the requests the pending journal makes --------------------------------------------------
    def _open_journal(self, *, batch: int, open_ms: int) -> PendingJournal:
        """The journal of this store's bucket and prefix, its requests made through the backend."""
        requests = MarkerRequests(
            self._put_marker,
            self._delete_keys,
            self._read_marker,
            self._iterate,
            self.locator_for,
            self.validate_locator,
            self._journaled,
        )
        return PendingJournal(
            requests, self.bucket, self.prefix, batch=batch, open_ms=open_ms, scheme=self.backend.scheme
        )

    def _put_marker(self, key: str, body: bytes, since_ms: int) -> None:
        meta = {"pending-since-ms": str(since_ms)}
        self._call(lambda: self.backend.put(key, memoryview(body), meta, large=False))

    def _delete_keys(self, keys: Sequence[str]) -> None:
        self._call(lambda: self.backend.delete(keys))

    def _read_marker(self, key: str) -> bytes:
        """One ranged read of at most one byte more than a batch marker may hold."""
        body = self._call(lambda: self.backend.get(key, MAX_BATCH_MARKER_BYTES + 1), missing=key)
        if len(body) > MAX_BATCH_MARKER_BYTES:
            self._metrics.add("errors")
            raise PayloadIntegrityError(f"object {key!r} is too large for a batch marker")
        return body
