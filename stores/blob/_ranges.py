"""Ranged reads of the object stores (S3, GCS, Azure): one ranged GET per part of a payload read as a stream.

A :class:`gateway.PayloadStream` asks for its payload a range at a time; each range is streamed
straight into the stream's reused buffer (:meth:`get_range_into`, the backend's ``read_into``), so a
range costs no memory of its own.
A range that starts at or past the object's end is an error to every cloud (HTTP 416); a truncated
object is not an error here but fewer bytes, which the stream, knowing the size the envelope
declares, reports as the integrity error it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, TypeVar

from gateway.core.buffers import BytesBuilder
from gateway.errors import PayloadNotFoundError, StoreError, StoreUnavailableError
from stores.base import StoreLifecycle
from stores.blob._backend import BlobBackend
from stores.blob._locator import ObjectLocator

_T = TypeVar("_T")


class BlobRanges(StoreLifecycle):
    """:meth:`get_range` of :class:`~stores.blob.BlobStore`, which this is mixed into."""

    reads_ranges: ClassVar[bool] = True
    backend: BlobBackend

    if TYPE_CHECKING:  # provided by BlobStore

        def validate_locator(self, locator: str) -> ObjectLocator: ...
        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...

    def get_range(self, locator: str, start: int, length: int) -> bytes:
        """Bytes ``[start, start + length)`` of the object in one ranged GET; fewer where the object ends."""
        self.validate_locator(locator)
        self._check_open()
        if start < 0 or length <= 0:
            return b""
        builder = BytesBuilder(length)
        got = 0

        def read_into(view: memoryview) -> None:
            nonlocal got
            got = self.get_range_into(locator, start, view)

        builder.fill(length, read_into)
        data = builder.build()
        return data if got == length else data[:got]

    def get_range_into(self, locator: str, start: int, view: memoryview) -> int:
        """One ranged GET streamed straight into ``view`` (the backend's ``read_into``); fewer where the object ends."""
        parsed = self.validate_locator(locator)
        self._check_open()
        if start < 0 or not len(view):
            return 0
        started = time.perf_counter()
        try:
            got = self._call(lambda: self.backend.read_into(parsed.key, start, view), missing=locator)
        except (PayloadNotFoundError, StoreUnavailableError):
            raise
        except StoreError:
            if start == 0 or self._call(lambda: self.backend.head(parsed.key), missing=locator).size > start:
                raise
            return 0  # the range lies past the object's end (HTTP 416): a truncated object
        self._done("get", started, locator, got)
        return got
