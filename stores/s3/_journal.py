"""The pending journal's side of :class:`~stores.S3Store`: the Store contract's journal methods, and the
requests the journal makes through the store (:class:`~stores.s3._pending.MarkerRequests`).

The journal itself (:class:`~stores.s3._pending.S3PendingJournal`) decides which marker names a
payload and when one may go; this part validates locators, counts what was marked or cleared, and
makes the marker PUTs, DELETEs, GETs and listings with the store's client and error mapping.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.errors import StoreUnavailableError
from stores.base import StoreLifecycle
from stores.s3._locator import S3Locator
from stores.s3._pending import S3PendingJournal

_T = TypeVar("_T")

MAX_BATCH_MARKER_BYTES = 1 << 20


class S3StoreJournal(StoreLifecycle):
    """Pending marks of :class:`~stores.S3Store`, which this is mixed into."""

    bucket: str
    journal: S3PendingJournal
    _write_args: dict[str, Any]

    if TYPE_CHECKING:  # provided by S3Store and S3Reads

        def validate_locator(self, locator: str) -> S3Locator: ...
        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...
        def _get_object(
            self, key: str, name: str, size_ok: Callable[[int], bool], expected: str
        ) -> tuple[bytes, str | None]: ...

    # -- pending journal (stores.s3._pending) ------------------------------------------------
    def mark_pending(self, locator: str, now_ms: int) -> None:
        parsed = self.validate_locator(locator)
        self._check_open()
        self.journal.mark(locator, parsed, now_ms)

    def clear_pending(self, locator: str) -> None:
        self.clear_pending_many([locator])

    def clear_pending_many(self, locators: Sequence[str]) -> None:
        """DeleteObjects in batches of 1000 markers: the producer clears marks in batches.

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

        :meth:`put` then writes no marker of its own for it: one marker PUT per ``journal_batch``
        payloads instead of one per payload. A fresh, unjournalled id when batches are off.
        """
        self._check_open()
        return self.journal.next_message_id(topic, now_ms)

    def end_journal_batches(self) -> None:
        """Close the open batches and delete the markers of those all settled; a producer's close calls it."""
        if not self._closed:
            self.journal.end_batches()

    def journalled_in_batch(self, locator: str) -> bool:
        """Whether ``locator`` is named by a batch marker and not settled (gc must prove its fate)."""
        return self.journal.covers(locator)

    def list_pending(self, older_than_ms: int) -> list[str]:
        """Markers by their LastModified, which is the *server's* clock at one-second resolution.

        The ``now_ms`` given to :meth:`mark_pending` is kept in the marker's metadata for humans, but
        listing does not return metadata and reading every marker would cost a request each; a
        sweeper should use an age of minutes, far above the resolution and any clock skew.
        """
        self._check_open()
        return self.journal.list_pending(older_than_ms)

    # -- the requests the pending journal makes --------------------------------------------------
    def _put_marker(self, key: str, body: bytes, since_ms: int) -> None:
        self._call(
            lambda: self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, Metadata={"pending-since-ms": str(since_ms)}, **self._write_args
            )
        )

    def _delete_keys(self, keys: Sequence[str]) -> None:
        if len(keys) == 1:
            self._call(lambda: self.client.delete_object(Bucket=self.bucket, Key=keys[0]))
            return
        for start in range(0, len(keys), 1000):
            batch = [{"Key": key} for key in keys[start : start + 1000]]
            response = self._call(
                partial(self.client.delete_objects, Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            )
            errors = response.get("Errors") if isinstance(response, dict) else None
            if errors:
                raise StoreUnavailableError(f"could not delete {len(errors)} pending markers: {errors[0]}")

    def _read_marker(self, key: str) -> bytes:
        body, _ = self._get_object(key, key, lambda n: n <= MAX_BATCH_MARKER_BYTES, "too large for a batch marker")
        return body

    def _list(self, prefix: str) -> Iterator[dict[str, Any]]:
        pages = self._call(
            lambda: iter(
                self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket,
                    Prefix=prefix,
                )
            )
        )
        while True:
            page = self._call(lambda: next(pages, None))
            if page is None:
                return
            yield from page.get("Contents", [])
