"""``AIOHybridProducer.produce_stream``'s source, as the worker thread reads it while the event loop runs on.

The upload runs on the producer's worker (store writes and the source's reads block); the source is
wrapped so that a cancelled call stops it at the next read: the synchronous writer then sees its
source fail, aborts the store's upload and removes the pending mark, and no envelope is sent. An
async iterable is read on the event loop, one chunk at a time, for the worker to take.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from gateway.producer.stream.source import check_source, is_file

WAKE_S = 0.05
"""How often a worker waiting for an async source's next chunk looks whether the call was cancelled."""


class UploadCancelled(Exception):
    """The awaiting call was cancelled: raised from the source's next read, so the writer rolls the upload back."""


def is_async(source: Any) -> bool:
    return isinstance(source, AsyncIterable)


class CancellableSource:
    """A stream's source for the worker, whose next read raises :class:`UploadCancelled` once :meth:`cancel` ran."""

    def __init__(self, source: Any, loop: asyncio.AbstractEventLoop) -> None:
        if not is_async(source):
            check_source(source)
        self._source = source
        self._loop = loop
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    def for_worker(self) -> Any:
        """What the synchronous writer reads: a file-like wrapper, or an iterable of chunks."""
        if is_async(self._source):
            return _AsyncChunks(self._source, self._loop, self._cancelled)
        if is_file(self._source):
            return _File(self._source, self._cancelled)
        return _Chunks(self._source, self._cancelled)


def _check(cancelled: threading.Event) -> None:
    if cancelled.is_set():
        raise UploadCancelled("the call was cancelled: the upload is rolled back")


class _File:
    """``readinto`` (or ``read``) of the caller's file, refused once cancelled."""

    def __init__(self, source: Any, cancelled: threading.Event) -> None:
        self._source = source
        self._cancelled = cancelled
        self._readinto = getattr(source, "readinto", None)

    def readinto(self, view: memoryview) -> int:
        _check(self._cancelled)
        if callable(self._readinto):
            return int(self._readinto(view) or 0)
        data = self._source.read(len(view))
        view[: len(data or b"")] = data or b""
        return len(data or b"")


class _Chunks(Iterable[Any]):
    def __init__(self, source: Iterable[Any], cancelled: threading.Event) -> None:
        self._source = source
        self._cancelled = cancelled

    def __iter__(self) -> Iterator[Any]:
        for chunk in self._source:
            _check(self._cancelled)
            yield chunk
        _check(self._cancelled)


class _AsyncChunks(Iterable[Any]):
    """An async iterable's chunks, each awaited on the event loop while the worker waits for it."""

    def __init__(self, source: AsyncIterable[Any], loop: asyncio.AbstractEventLoop, cancelled: threading.Event) -> None:
        self._source = source
        self._loop = loop
        self._cancelled = cancelled

    def __iter__(self) -> Iterator[Any]:
        chunks = self._source.__aiter__()
        try:
            while True:
                _check(self._cancelled)
                future = asyncio.run_coroutine_threadsafe(_next(chunks), self._loop)
                chunk = self._wait(future)
                if chunk is _END:
                    return
                yield chunk
        finally:
            close = getattr(chunks, "aclose", None)
            if callable(close) and not self._loop.is_closed():
                asyncio.run_coroutine_threadsafe(close(), self._loop)  # not awaited: the loop may be waiting on us

    def _wait(self, future: concurrent.futures.Future[Any]) -> Any:
        while True:
            try:
                return future.result(WAKE_S)
            except concurrent.futures.TimeoutError:
                if self._cancelled.is_set():
                    future.cancel()
                    _check(self._cancelled)


_END = object()


async def _next(chunks: AsyncIterator[Any]) -> Any:
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return _END
