"""The pending journal of :class:`~stores.blob.BlobStore`: S3Store's journal (``stores.s3.S3PendingJournal``),
its requests made through the cloud's backend."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from stores.base import StoreLifecycle
from stores.blob._backend import BlobBackend, BlobEntry
from stores.s3 import S3Locator, S3PendingJournal

MAX_BATCH_MARKER_BYTES = 1 << 20
_T = TypeVar("_T")


class BlobJournal(StoreLifecycle):
    """Pending marks of :class:`~stores.blob.BlobStore`, which this is mixed into."""

    backend: BlobBackend
    journal: S3PendingJournal

    if TYPE_CHECKING:  # provided by BlobStore and BlobReads

        def validate_locator(self, locator: str) -> S3Locator: ...
        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...
        def _iterate(self, prefix: str) -> Iterator[BlobEntry]: ...
        def _read(
            self, key: str, name: str, size_ok: Callable[[int], bool], expected: int | None, *, limit: int | None = None
        ) -> bytes: ...

    def mark_pending(self, locator: str, now_ms: int) -> None:
        parsed = self.validate_locator(locator)
        self._check_open()
        self.journal.mark(locator, parsed, now_ms)

    def clear_pending(self, locator: str) -> None:
        self.clear_pending_many([locator])

    def clear_pending_many(self, locators: Sequence[str]) -> None:
        for locator in locators:
            self.validate_locator(locator)
        self._check_open()
        self.journal.settle(locators)
        self._journaled("cleared", locators)

    def next_message_id(self, topic: str, now_ms: int) -> uuid.UUID:
        self._check_open()
        return self.journal.next_message_id(topic, now_ms)

    def end_journal_batches(self) -> None:
        if not self._closed:
            self.journal.end_batches()

    def journalled_in_batch(self, locator: str) -> bool:
        return self.journal.covers(locator)

    def list_pending(self, older_than_ms: int) -> list[str]:
        """Markers by their last-modified time, the server's clock: sweep with an age of minutes."""
        self._check_open()
        return self.journal.list_pending(older_than_ms)

    def _put_marker(self, key: str, body: bytes, since_ms: int) -> None:
        meta = {"pending-since-ms": str(since_ms)}
        self._call(lambda: self.backend.put(key, memoryview(body), meta, large=False))

    def _read_marker(self, key: str) -> bytes:
        return self._read(key, key, lambda n: n <= MAX_BATCH_MARKER_BYTES, None, limit=MAX_BATCH_MARKER_BYTES)

    def _listing(self, prefix: str) -> Iterator[dict[str, Any]]:
        """The journal's view of a listing (S3's field names)."""
        for entry in self._iterate(prefix):
            yield {"Key": entry.key, "LastModified": datetime.fromtimestamp(entry.modified_ms / 1000, timezone.utc)}
