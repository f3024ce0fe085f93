"""The read side of :class:`~stores.blob.BlobStore`: reads bounded by the envelope's size, large ones in
parallel ranges straight into the value, and peers' objects inside the store's bucket and prefix."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, TypeVar

from gateway.core.buffers import BytesBuilder
from gateway.errors import LocatorError, PayloadIntegrityError
from stores.base import StoreLifecycle
from stores.blob._backend import BlobBackend

_T = TypeVar("_T")


class BlobReads(StoreLifecycle):
    """:meth:`_read` and the peer reads of :class:`~stores.blob.BlobStore`, which this is mixed into."""

    backend: BlobBackend
    scheme: str
    bucket: str
    prefix: str
    part_bytes: int
    parallel_read_bytes: int
    max_concurrency: int
    _pool: ThreadPoolExecutor | None

    if TYPE_CHECKING:  # provided by BlobStore

        def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T: ...

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
        """A peer's object (no ETag is used); :class:`LocatorError` outside this store, no I/O then.

        ``admit`` judges the object's metadata (the reference rules: is it one of ours?) before the
        object is read; what it raises is raised."""
        name = f"{self.scheme}://{self.bucket}/{key}"
        if not self.holds_object(self.bucket, key):
            raise LocatorError(f"{name[:300]!r} is outside store {self.name!r} (prefix {self.prefix!r})")
        self._check_open()
        started = time.perf_counter()
        if admit is not None:
            admit(self._call(lambda: self.backend.metadata(key), missing=name))
        data = self._read(key, name, lambda n: 0 <= n <= max_bytes, None, limit=max_bytes)
        self._done("get", started, name, len(data))
        return data, None

    def _read(
        self, key: str, name: str, size_ok: Callable[[int], bool], expected: int | None, *, limit: int | None = None
    ) -> bytes:
        """One ranged GET of ``expected + 1`` bytes when the size is known, else the size first; large ones in parts."""
        if expected is not None and 0 < expected < self.parallel_read_bytes:
            data = self._call(lambda: self.backend.get(key, expected + 1), missing=name)
            if len(data) != expected:
                self._refuse(f"object {name!r} has {'more than ' if len(data) > expected else ''}{len(data)} bytes,"
                             f" expected {expected}")  # fmt: skip
            return data
        size = self._call(lambda: self.backend.size(key), missing=name)
        if not size_ok(size):
            wanted = f"expected {expected}" if limit is None else f"more than the limit of {limit}"
            self._refuse(f"object {name!r} has {size} bytes, {wanted}")
        if size < self.parallel_read_bytes:
            data = self._call(lambda: self.backend.get(key, size + 1 if size else None), missing=name)
        else:
            data = self._parallel_read(key, name, size)
        if len(data) != size:
            self._refuse(f"object {name!r}: read {len(data)} bytes, its size was {size}")
        return data

    def _parallel_read(self, key: str, name: str, size: int) -> bytes:
        """Ranges of ``part_bytes``, ``max_concurrency`` at a time, each copied into its place in the value."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=f"{self.name}-read")
        pool = self._pool

        def read_into(view: memoryview) -> None:
            def fetch(start: int) -> None:
                end = min(size, start + self.part_bytes)
                got = self._call(lambda: self.backend.read_into(key, start, view[start:end]), missing=name)
                if got != end - start:
                    self._refuse(f"object {name!r} changed while read: range {start}-{end} gave {got} bytes")

            futures = [pool.submit(fetch, start) for start in range(0, size, self.part_bytes)]
            wait(futures)  # every part done or failed before the view goes: none writes into it later
            for future in futures:
                future.result()

        builder = BytesBuilder(size)
        builder.fill(size, read_into)
        return builder.build()

    def _refuse(self, message: str) -> None:
        self._metrics.add("errors")
        raise PayloadIntegrityError(message)
