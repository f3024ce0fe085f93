"""Ranged reads of :class:`~stores.RedisStore`: a part of a payload from the entries it is split into.

A payload is kept in entries of ``entry_bytes`` each (the locator says how many and how large), so
bytes ``[start, start + length)`` are a GETRANGE on each entry they touch, all in one pipelined round
trip; :meth:`~RedisRanges.get_range_into` receives the replies straight into the caller's buffer (a
stream's reused one) on a standalone server.

The first entry missing is :class:`PayloadNotFoundError` (expired, evicted, deleted), as for
``get``; a later one missing, or a short entry, ends the answer there: the caller, who knows the size the
envelope declares, reports fewer bytes than asked as the truncated payload it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from gateway.errors import PayloadNotFoundError
from stores.base import StoreLifecycle
from stores.redis import _io as redis_io
from stores.redis._layout import RedisLocator

if TYPE_CHECKING:
    from redis.client import Pipeline

_T = TypeVar("_T")


class RedisRanges(StoreLifecycle):
    """:meth:`get_range` of :class:`~stores.RedisStore`, which this is mixed into."""

    reads_ranges: ClassVar[bool] = True
    prefix: str
    _direct_reads: bool

    if TYPE_CHECKING:  # provided by RedisStore

        def validate_locator(self, locator: str, expected_size: int | None = None) -> RedisLocator: ...
        def _pipelined(self, commands: Sequence[Callable[[Pipeline], object]]) -> list[Any]: ...
        def _call(self, fn: Callable[[], _T]) -> _T: ...

    def get_range_into(self, locator: str, start: int, view: memoryview) -> int:
        """As :meth:`get_range`, the replies received from the socket straight into ``view`` on a standalone
        server (:func:`stores.redis._io.read_ranges_into`); through redis-py's parser and a copy on a cluster."""
        if not self._direct_reads:
            return super().get_range_into(locator, start, view)
        parsed = self.validate_locator(locator)
        self._check_open()
        length = len(view)
        if start < 0 or length <= 0:
            return 0
        started = time.perf_counter()
        spans = _spans(parsed, start, length)
        if not spans:
            return 0
        keys = parsed.keys(self.prefix)
        ranges = [(keys[index], low, high) for index, low, high in spans]
        *lengths, present = self._call(
            partial(redis_io.read_ranges_into, self.client.connection_pool, ranges, keys[spans[0][0]], view)
        )
        if not present:
            self._metrics.add("not_found")
            raise PayloadNotFoundError(f"entry {spans[0][0]} of {parsed.count} of {locator!r} is missing")
        got = 0
        for (_, low, high), reply in zip(spans, lengths, strict=True):
            got += min(reply, high - low + 1)
            if reply != high - low + 1:
                break  # a short or missing entry: the payload ends there, which the caller judges
        self._done("get", started, locator, got)
        return got

    def get_range(self, locator: str, start: int, length: int) -> bytes:
        """One GETRANGE per entry the range touches, in one round trip; fewer bytes where the entries end."""
        parsed = self.validate_locator(locator)
        self._check_open()
        if start < 0 or length <= 0:
            return b""
        started = time.perf_counter()
        spans = _spans(parsed, start, length)
        if not spans:
            return b""
        keys = parsed.keys(self.prefix)
        commands: list[Callable[[Pipeline], object]] = [
            partial(_getrange, keys[index], low, high) for index, low, high in spans
        ]
        commands.append(partial(_exists, keys[spans[0][0]]))
        *replies, present = self._pipelined(commands)
        if not present:
            self._metrics.add("not_found")
            raise PayloadNotFoundError(f"entry {spans[0][0]} of {parsed.count} of {locator!r} is missing")
        parts: list[bytes] = []
        for (_, low, high), reply in zip(spans, replies, strict=True):
            piece = bytes(reply or b"")
            parts.append(piece)
            if len(piece) != high - low + 1:
                break  # a short or missing entry: the payload ends there, which the caller judges
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._done("get", started, locator, len(data))
        return data


def _spans(parsed: RedisLocator, start: int, length: int) -> list[tuple[int, int, int]]:
    """``(entry, low, high)`` for each entry bytes ``[start, start + length)`` touch (GETRANGE's inclusive bounds)."""
    step = parsed.entry_bytes
    first, last = start // step, min(parsed.count - 1, (start + length - 1) // step)
    return [
        (index, max(start - index * step, 0), min(start + length - index * step, step) - 1)
        for index in range(first, last + 1)
    ]


def _getrange(key: str, low: int, high: int, pipe: Pipeline) -> object:
    return pipe.getrange(key, low, high)


def _exists(key: str, pipe: Pipeline) -> object:
    return pipe.exists(key)
