"""The read side of the object stores (S3, GCS, Azure): reads bounded by the envelope's size, large ones in
parallel ranges straight into the value, and peers' objects inside the store's bucket and prefix.

Peers' objects (bakdata, kaf-s3, AWS pointers) are read only inside this store's bucket and prefix:
configuring a store for a peer's bucket is how a reader grants access to what a peer wrote there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, TypeVar

from gateway.core.buffers import BytesBuilder
from gateway.errors import LocatorError, PayloadIntegrityError
from stores.base import StoreLifecycle
from stores.blob._backend import BlobBackend
from stores.blob._locator import ObjectLocator

_T = TypeVar("_T")


class BlobReads(StoreLifecycle):
    """:meth:`get` and the peer reads of :class:`~stores.blob.BlobStore`, which this is mixed into."""

    backend: BlobBackend
    scheme: str
    bucket: str
    prefix: str
    part_bytes: int
    parallel_read_bytes: int
    max_concurrency: int
    _pool: ThreadPoolExecutor | None

    if TYPE_CHECKING:  # provided by BlobStore

        def validate_locator(self, locator: str) -> ObjectLocator: ...
        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...

    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        """The payload; a size the envelope gives bounds the read (:meth:`_read`)."""
        parsed = self.validate_locator(locator)
        self._check_open()
        started = time.perf_counter()
        data = self._read(parsed.key, locator, expected_size)
        self._done("get", started, locator, len(data))
        return data

    def holds_object(self, bucket: str, key: str) -> bool:
        """True when ``<scheme>://bucket/key`` lies in this store's bucket and prefix: the confinement rule."""
        return (
            bucket == self.bucket
            and key.startswith(self.prefix)
            and len(key.encode("utf-8", "surrogatepass")) <= 1024
            and not any(seg in (".", "..") for seg in key.split("/"))
            and key.isprintable()
        )

    def get_object(
        self, key: str, max_bytes: int, admit: Callable[[Mapping[str, str]], None] | None = None
    ) -> tuple[bytes, str | None]:
        """A peer's object and its ETag (S3; ``None`` elsewhere); :class:`LocatorError` outside this store, no I/O then.

        ``admit`` judges the object's metadata (the reference rules: is it one of ours?) before any of
        its bytes are read; what it raises is raised."""
        name = f"{self.scheme}://{self.bucket}/{key}"
        if not self.holds_object(self.bucket, key):
            raise LocatorError(f"{name[:300]!r} is outside store {self.name!r} (prefix {self.prefix!r})")
        self._check_open()
        started = time.perf_counter()
        head = self._call(lambda: self.backend.head(key), missing=name)
        if admit is not None:
            admit(head.metadata)
        if not 0 <= head.size <= max_bytes:
            self._refuse(f"object {name!r} has {head.size} bytes, more than the limit of {max_bytes}")
        data = self._read_sized(key, name, head.size)
        self._done("get", started, name, len(data))
        return data, head.etag

    def _read(self, key: str, name: str, expected: int | None) -> bytes:
        """One request when it can be: a range of ``expected + 1`` bytes (so an object larger than announced is
        refused without reading it), or the whole object when no size is given; from ``parallel_read_bytes``
        on, the size is asked first and the object read in parallel ranges."""
        if expected is None:
            return self._call(lambda: self.backend.get(key, None), missing=name)
        if 0 < expected < self.parallel_read_bytes:
            data = self._call(lambda: self.backend.get(key, expected + 1), missing=name)
            if len(data) != expected:
                self._refuse(f"object {name!r} has {'more than ' if len(data) > expected else ''}{len(data)} bytes,"
                             f" expected {expected}")  # fmt: skip
            return data
        size = self._call(lambda: self.backend.head(key), missing=name).size
        if size != expected:
            self._refuse(f"object {name!r} has {size} bytes, expected {expected}")
        return self._read_sized(key, name, size)

    def _read_sized(self, key: str, name: str, size: int) -> bytes:
        """An object whose size a metadata request gave: one range of ``size + 1`` bytes, or parallel ranges."""
        if size < self.parallel_read_bytes:
            data = self._call(lambda: self.backend.get(key, size + 1 if size else None), missing=name)
        else:
            data = self._parallel_read(key, name, size)
        if len(data) != size:
            self._refuse(f"object {name!r}: read {len(data)} bytes, its size was {size}")
        return data

    def _parallel_read(self, key: str, name: str, size: int) -> bytes:
        """Ranges of ``part_bytes``, ``max_concurrency`` at a time, each streamed into its place in the value."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=f"{self.name}-read")
        pool = self._pool
        part = self.part_bytes

        def read_into(view: memoryview) -> None:
            def fetch(start: int) -> None:
                end = min(size, start + part)
                got = self._call(lambda: self.backend.read_into(key, start, view[start:end]), missing=name)
                if got != end - start:
                    self._refuse(f"object {name!r} changed while read: range {start}-{end} gave {got} bytes")

            futures = [pool.submit(fetch, start) for start in range(0, size, part)]
            wait(futures)  # every part done or failed before the view goes: none writes into it later
            for future in futures:
                future.result()

        builder = BytesBuilder(size)
        builder.fill(size, read_into)
        return builder.build()

    def _refuse(self, message: str) -> None:
        self._metrics.add("errors")
        raise PayloadIntegrityError(message)
