"""The stored bytes of a payload read as a stream: range after range, a bounded number fetched ahead.

Each range is one store request (:meth:`gateway.store.Store.get_range`) on the stream's own worker
threads, ``read_ahead`` of them in flight ahead of the reader, so memory is a few ranges whatever the
payload's size. The size the envelope declares is checked range by range: a range shorter than asked
is a truncated payload, and the last range asks one byte past the declared end, which only an
extended payload has; either is :class:`~gateway.errors.PayloadStreamIntegrityError` in the reader's
turn, before any byte of the bad range is handed out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor

from gateway.errors import PayloadStreamIntegrityError

Fail = Callable[[str], PayloadStreamIntegrityError]
"""Makes the stream's integrity error for a message (it adds the record's topic, partition and offset)."""


class RangeFetcher:
    """Reads ``[start, size)`` of a stored payload of ``size`` bytes in ranges of ``step`` through ``read``."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, step: int, read_ahead: int, fail: Fail) -> None:
        self._read = read
        self.size = size
        self.step = max(1, step)
        self.read_ahead = max(0, read_ahead)
        self._fail = fail
        self._pool: ThreadPoolExecutor | None = None

    def ranges(self, start: int) -> Generator[bytes, None, None]:
        """The stored bytes from ``start`` to the end, a range at a time; closing the iterator cancels what is ahead."""
        end = self.size
        inflight: deque[tuple[int, int, Future[bytes]]] = deque()
        at = start
        try:
            while True:
                while at < end and len(inflight) <= self.read_ahead:
                    length = min(self.step, end - at)
                    asked = length + 1 if at + length == end else length  # one past the end shows an extended payload
                    inflight.append((at, length, self._executor().submit(self._read, at, asked)))
                    at += length
                if not inflight:
                    return
                got_at, length, future = inflight.popleft()
                data = future.result()
                if len(data) != length:
                    if len(data) > length:
                        raise self._fail(f"the stored payload has more than the {end} bytes its envelope declares")
                    raise self._fail(
                        f"the stored payload ends at byte {got_at + len(data)}, its envelope declares {end}: truncated"
                    )
                yield data
        finally:
            for _, _, future in inflight:
                future.cancel()

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, self.read_ahead), thread_name_prefix="gateway-stream")
        return self._pool

    def close(self) -> None:
        """Stop the workers; a range being read finishes unobserved."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
