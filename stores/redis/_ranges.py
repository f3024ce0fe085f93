"""Ranged reads of :class:`~stores.RedisStore`: a part of a payload from the entries it is split into.

A payload is kept in entries of ``entry_bytes`` each (the locator says how many and how large), so
bytes ``[start, start + length)`` are a GETRANGE on each entry they touch, all in one pipelined round
trip. The first entry missing is :class:`PayloadNotFoundError` (expired, evicted, deleted), as for
``get``; a later one missing, or a short entry, ends the answer there: the caller, who knows the size the
envelope declares, reports fewer bytes than asked as the truncated payload it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from gateway.errors import PayloadNotFoundError
from stores.base import StoreLifecycle
from stores.redis._layout import RedisLocator

if TYPE_CHECKING:
    from redis.client import Pipeline


class RedisRanges(StoreLifecycle):
    """:meth:`get_range` of :class:`~stores.RedisStore`, which this is mixed into."""

    reads_ranges: ClassVar[bool] = True
    prefix: str

    if TYPE_CHECKING:  # provided by RedisStore

        def validate_locator(self, locator: str, expected_size: int | None = None) -> RedisLocator: ...
        def _pipelined(self, commands: Sequence[Callable[[Pipeline], object]]) -> list[Any]: ...

    def get_range(self, locator: str, start: int, length: int) -> bytes:
        """One GETRANGE per entry the range touches, in one round trip; fewer bytes where the entries end."""
        parsed = self.validate_locator(locator)
        self._check_open()
        if start < 0 or length <= 0:
            return b""
        started = time.perf_counter()
        step = parsed.entry_bytes
        first, last = start // step, min(parsed.count - 1, (start + length - 1) // step)
        if first > last:
            return b""
        keys = parsed.keys(self.prefix)
        commands = []
        for index in range(first, last + 1):
            low = max(start - index * step, 0)
            high = min(start + length - index * step, step) - 1
            commands.append(partial(_getrange, keys[index], low, high))
        commands.append(partial(_exists, keys[first]))
        *replies, present = self._pipelined(commands)
        if not present:
            self._metrics.add("not_found")
            raise PayloadNotFoundError(f"entry {first} of {parsed.count} of {locator!r} is missing")
        parts: list[bytes] = []
        for index, reply in zip(range(first, last + 1), replies, strict=True):
            piece = bytes(reply or b"")
            parts.append(piece)
            wanted = min(start + length - index * step, step) - max(start - index * step, 0)
            if len(piece) != wanted:
                break  # a short or missing entry: the payload ends there, which the caller judges
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._done("get", started, locator, len(data))
        return data


def _getrange(key: str, low: int, high: int, pipe: Pipeline) -> object:
    return pipe.getrange(key, low, high)


def _exists(key: str, pipe: Pipeline) -> object:
    return pipe.exists(key)
