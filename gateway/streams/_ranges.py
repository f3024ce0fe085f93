"""The stored bytes of a payload read as a stream: range after range, a bounded number fetched ahead.

Each range is one store request (:meth:`gateway.store.Store.get_range_into`) on the stream's own
worker threads, ``read_ahead`` of them in flight ahead of the reader. Each is received into one of
``read_ahead + 1`` buffers the read allocates once and refills: a new ``bytes`` per range left the
default allocator's heap growing by far more than the ranges in use (glibc keeps freed 8 MiB blocks
in its arena once its mmap threshold has risen past them), so memory is now those buffers whatever
the payload's size. A range handed out is a view valid until the reader asks for the next one.

The size the envelope declares is checked range by range: a range shorter than asked is a truncated
payload, and the last range asks one byte past the declared end, which only an extended payload
has; either is :class:`~gateway.errors.PayloadStreamIntegrityError` in the reader's turn, before any
byte of the bad range is handed out. A compressed payload's stored size is not in its envelope:
it is read until a range comes back short, and more than ``bound`` stored bytes is the error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor

from gateway.errors import PayloadStreamIntegrityError

Fail = Callable[[str], PayloadStreamIntegrityError]
"""Makes the stream's integrity error for a message (it adds the record's topic, partition and offset)."""
ReadInto = Callable[[int, memoryview], int]
"""Receives the stored bytes from an offset into a view; returns how many came (fewer only at the end)."""


class RangeFetcher:
    """Reads a stored payload in ranges of ``step`` through ``read_into``.

    ``size`` is the stored size when the envelope declares it; ``None`` (a compressed payload) reads
    until the stored bytes end, refusing more than ``bound`` of them.
    """

    def __init__(
        self, read_into: ReadInto, size: int | None, step: int, read_ahead: int, fail: Fail, bound: int = 0
    ) -> None:
        self._read_into = read_into
        self.size = size
        self.bound = bound
        self.step = max(1, step)
        self.read_ahead = max(0, read_ahead)
        self._fail = fail
        self._pool: ThreadPoolExecutor | None = None

    def ranges(self, start: int) -> Generator[memoryview, None, None]:
        """The stored bytes from ``start`` to the end, a range at a time; closing the iterator cancels what is ahead.

        Each range is a view of a buffer this read reuses once the reader resumes it; the buffers
        belong to this read alone, so a read a seek abandoned can finish into them harmlessly.
        """
        known = self.size is not None
        end = self.size if self.size is not None else self.bound + 1  # one past the bound shows an oversized one
        free: list[memoryview] = []
        inflight: deque[tuple[int, int, memoryview, Future[int]]] = deque()
        at = start
        try:
            while True:
                while at < end and len(inflight) <= self.read_ahead:
                    length = min(self.step, end - at)
                    asked = length + 1 if known and at + length == end else length  # one past the end: extended?
                    buffer = free.pop() if free else memoryview(bytearray(self.step + 1))
                    view = buffer[:asked]
                    inflight.append((at, length, buffer, self._executor().submit(self._read_into, at, view)))
                    at += length
                if not inflight:
                    return
                got_at, length, buffer, future = inflight.popleft()
                got = future.result()
                last = self._judge(got_at, length, got, known)
                yield buffer[:got]
                if last:
                    return
                free.append(buffer)
        finally:
            for _, _, _, future in inflight:
                future.cancel()

    def _judge(self, at: int, length: int, got: int, known: bool) -> bool:
        """Raise for a range of the wrong length; whether it is the last one of an unknown-size payload."""
        if known:
            if got > length:
                raise self._fail(f"the stored payload has more than the {self.size} bytes its envelope declares")
            if got < length:
                raise self._fail(
                    f"the stored payload ends at byte {at + got}, its envelope declares {self.size}: truncated"
                )
            return False
        if at + got > self.bound:
            raise self._fail(f"the stored payload has more than the {self.bound} bytes its codec makes of its size")
        return got < length

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, self.read_ahead), thread_name_prefix="gateway-stream")
        return self._pool

    def close(self) -> None:
        """Stop the workers; a range being read finishes unobserved."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
