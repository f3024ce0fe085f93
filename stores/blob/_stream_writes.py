"""Streams written part by part to an object store (:meth:`~gateway.store.Store.put_stream`): S3's multipart upload.

The producer hands the parts one at a time from a buffer it reuses, so the store sends each part
before it asks for the next and never holds more than the part in flight. The order of a stream's
write is :meth:`~stores.blob.BlobStore.put`'s: the pending mark first (a process that dies mid-upload
leaves the mark, and on S3 an incomplete upload that ``gateway gc`` lists and aborts), the parts,
then the one request that makes the object visible (S3's CompleteMultipartUpload). Whatever fails
in between, the source included, aborts the upload and removes the mark, then is raised.

A stream whose size is known and fits its first part is one PutObject, as ``put`` would write it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from gateway.errors import StoreError
from stores.base import StoreLifecycle
from stores.blob._backend import BlobBackend
from stores.blob._locator import ObjectLocator
from stores.blob._pending import PendingJournal

_T = TypeVar("_T")


class PartUpload(Protocol):
    """One object going up in parts; the object exists only once :meth:`complete` returned."""

    def add(self, part: memoryview) -> None:
        """Send the next part (its bytes are sent before this returns: the caller reuses the buffer)."""
        ...

    def complete(self) -> None:
        """Make the object of the parts sent so far visible."""
        ...

    def abort(self) -> None:
        """Discard the parts sent; an upload already gone counts as done."""
        ...


class PartUploads(Protocol):
    """A backend that writes objects in parts, as they arrive."""

    def open_upload(self, key: str, metadata: Mapping[str, str]) -> PartUpload: ...


class BlobStreamWrites(StoreLifecycle):
    """``put_stream`` of :class:`~stores.blob.BlobStore` (mixed into the stores whose backend has part uploads)."""

    backend: BlobBackend
    bucket: str
    journal: PendingJournal
    uploads: PartUploads
    """The backend's part uploads (S3's multipart upload)."""

    streams_puts = True

    if TYPE_CHECKING:  # provided by BlobStore

        def key_for(self, topic: str, message_id: uuid.UUID) -> str: ...
        def locator_for(self, topic: str, message_id: uuid.UUID, size: int = 0) -> str: ...
        def delete(self, locator: str) -> None: ...
        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...

    def put_stream(
        self,
        topic: str,
        message_id: uuid.UUID,
        parts: Iterable[memoryview],
        *,
        size: int | None,
        size_bound: int,
        part_bytes: int,
        pending_since_ms: int | None = None,
        persistent: bool = False,
    ) -> str:
        """The mark, the parts as they come, the completion; on any failure the upload is aborted and the mark goes.

        ``persistent`` changes nothing, as for :meth:`put` (objects expire by a lifecycle rule on the prefix).
        """
        del persistent, size_bound, part_bytes
        self._check_open()
        locator = self.locator_for(topic, message_id)
        parsed = ObjectLocator(self.bucket, self.key_for(topic, message_id), topic, message_id)
        metadata = {"message-id": str(message_id), "topic": topic}
        if size is not None:
            metadata["size"] = str(size)
        started = time.perf_counter()
        if pending_since_ms is not None:
            self.journal.mark(locator, parsed, pending_since_ms)
        upload: PartUpload | None = None
        written = 0
        try:
            for part in parts:
                if upload is None and size is not None and len(part) == size:  # the whole payload: one PUT
                    self._call(partial(self.backend.put, parsed.key, part, metadata, large=False))
                    written = size
                    continue
                if upload is None:
                    upload = self._call(lambda: self.uploads.open_upload(parsed.key, metadata))
                self._call(partial(upload.add, part))
                written += len(part)
            if size is not None and written != size:
                raise StoreError(f"the stream for {locator!r} gave {written} bytes, its size is {size}")
            if upload is not None:
                self._call(upload.complete)
            elif written == 0:
                self._call(lambda: self.backend.put(parsed.key, memoryview(b""), metadata, large=False))
        except BaseException:
            if upload is not None:
                with contextlib.suppress(StoreError):
                    self._call(upload.abort)
            with contextlib.suppress(StoreError):
                self.delete(locator)  # an object a single PUT made, and the mark (last)
            raise
        self._done("put", started, locator, written)
        return locator
