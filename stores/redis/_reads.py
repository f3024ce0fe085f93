"""The read side of :class:`~stores.RedisStore`: one MGET per payload, judged entry by entry.

A read names every entry of a payload and the sentinel after them, computed from the locator
alone, and takes the answer apart: a missing entry means the payload is gone
(:class:`PayloadNotFoundError`), entries of the wrong length or a sentinel that exists mean the
locator does not describe what is stored (:class:`PayloadIntegrityError`). Large payloads on a
standalone server are received straight into their value (:mod:`stores.redis._mget_reply`); the rest,
and every read on a cluster, go through redis-py's parser and are judged the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

from gateway.core.buffers import BytesBuilder
from gateway.errors import GatewayError, PayloadIntegrityError, PayloadNotFoundError
from stores.base import StoreLifecycle
from stores.redis import _io as redis_io
from stores.redis._layout import RedisLocator
from stores.redis._mget_reply import EntryShape

if TYPE_CHECKING:
    from redis.client import Pipeline

_T = TypeVar("_T")

DIRECT_READ_FROM = 256 * 1024
"""Payloads from this size up are received straight into their final ``bytes`` (:mod:`stores.redis._mget_reply`)."""


class RedisReads(StoreLifecycle):
    """:meth:`get` and :meth:`get_many` of :class:`~stores.RedisStore`, which this is mixed into."""

    prefix: str
    _direct_reads: bool

    if TYPE_CHECKING:  # provided by RedisStore

        def validate_locator(self, locator: str, expected_size: int | None = None) -> RedisLocator: ...
        def _call(self, fn: Callable[[], _T]) -> _T: ...
        def _pipelined(self, commands: Sequence[Callable[[Pipeline], object]]) -> list[Any]: ...

    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        """All entries (and the sentinel after them) in one MGET, joined once.

        A missing entry means the payload is gone (expired, evicted, deleted, or lost with a master
        that failed before its replica had it). Entries of the wrong length, or a sentinel that
        exists, mean the locator does not describe what is stored.
        """
        parsed = self.validate_locator(locator, expected_size)
        self._check_open()
        started = time.perf_counter()
        if expected_size is not None and expected_size >= DIRECT_READ_FROM and self._direct_reads:
            return self._get_direct(locator, parsed, expected_size, started)
        reply = cast("list[bytes | None]", self._call(partial(self.client.mget, self._read_keys(parsed))))
        return self._payload_from(locator, parsed, reply, expected_size, started)

    def _get_direct(self, locator: str, parsed: RedisLocator, expected_size: int, started: float) -> bytes:
        """The MGET's entries received straight into the payload (:mod:`stores.redis._mget_reply`)."""
        request = (self._read_keys(parsed), _entry_lengths(parsed, expected_size))
        (got,) = self._call(partial(redis_io.read_entries, self.client.connection_pool, [request]))
        return self._direct_answer(locator, parsed, expected_size, got, started)

    def _direct_answer(
        self, locator: str, parsed: RedisLocator, expected_size: int, got: bytes | EntryShape, started: float
    ) -> bytes:
        """The payload, or the error :meth:`_payload_from` gives for entries not of the lengths expected."""
        if isinstance(got, EntryShape):
            *parts, beyond = got.lengths
            self._judge(locator, parsed, parts, beyond, expected_size)
            raise PayloadIntegrityError(f"the entries stored for {locator!r} do not have the shape it describes")
        self._done("get", started, locator, expected_size)
        return got

    def get_many(self, requests: Sequence[tuple[str, int | None]]) -> list[bytes | GatewayError]:
        """Several payloads in one pipelined round trip, for a reader fetching small payloads ahead.

        Each answer is the payload or the typed error :meth:`get` would raise for that locator, in
        order; only a failure of the connection itself raises, for all of them. Small payloads
        cost a round trip each when fetched one by one, which is most of their time on loopback.
        """
        answers: list[bytes | GatewayError] = []
        wanted: list[tuple[int, str, RedisLocator, int | None]] = []
        for locator, expected_size in requests:
            try:
                parsed = self.validate_locator(locator, expected_size)
            except GatewayError as exc:
                answers.append(exc)
                continue
            wanted.append((len(answers), locator, parsed, expected_size))
            answers.append(b"")
        self._check_open()
        if not wanted:
            return answers
        started = time.perf_counter()
        if self._direct_reads and all(size is not None for *_, size in wanted):
            self._get_many_direct(wanted, answers, started)
            return answers
        # one GET per key rather than an MGET per payload: a cluster pipeline refuses MGET
        keys = [self._read_keys(parsed) for _, _, parsed, _ in wanted]
        replies = self._pipelined([partial(redis_io.get_command, key) for group in keys for key in group])
        at_reply = 0
        for (at, locator, parsed, expected_size), group in zip(wanted, keys, strict=True):
            reply = replies[at_reply : at_reply + len(group)]
            at_reply += len(group)
            try:
                answers[at] = self._payload_from(locator, parsed, reply, expected_size, started)
            except GatewayError as exc:
                answers[at] = exc
        return answers

    def _get_many_direct(
        self,
        wanted: list[tuple[int, str, RedisLocator, int | None]],
        answers: list[bytes | GatewayError],
        started: float,
    ) -> None:
        """One MGET per payload, all in one write, each reply received into its own value."""
        requests = [
            (self._read_keys(parsed), _entry_lengths(parsed, cast("int", size))) for _, _, parsed, size in wanted
        ]
        replies = self._call(partial(redis_io.read_entries, self.client.connection_pool, requests))
        for (at, locator, parsed, size), got in zip(wanted, replies, strict=True):
            try:
                answers[at] = self._direct_answer(locator, parsed, cast("int", size), got, started)
            except GatewayError as exc:
                answers[at] = exc

    def _read_keys(self, parsed: RedisLocator) -> list[str]:
        return [*parsed.keys(self.prefix), parsed.sentinel(self.prefix)]

    def _payload_from(
        self,
        locator: str,
        parsed: RedisLocator,
        reply: list[bytes | None],
        expected_size: int | None,
        started: float,
    ) -> bytes:
        """The payload from an MGET of :meth:`_read_keys`, or the typed error for what came back."""
        *parts, beyond = reply
        chunks = [part for part in parts if part is not None]
        size = self._judge(
            locator,
            parsed,
            [None if p is None else len(p) for p in parts],
            None if beyond is None else len(beyond),
            expected_size,
        )
        value = chunks[0] if len(chunks) == 1 else _joined(chunks, size)
        self._done("get", started, locator, size)
        return value

    def _judge(
        self,
        locator: str,
        parsed: RedisLocator,
        lengths: Sequence[int | None],
        beyond: int | None,
        expected_size: int | None,
    ) -> int:
        """The payload's size from its entries' lengths (``None``: missing) and the sentinel's, or the typed error."""
        present = [n for n in lengths if n is not None]
        if len(present) != parsed.count:
            self._metrics.add("not_found")
            missing = parsed.count - len(present)
            raise PayloadNotFoundError(f"{missing} of {parsed.count} entries of {locator!r} are missing")
        last = present[-1]
        if (
            beyond is not None
            or any(n != parsed.entry_bytes for n in present[:-1])
            or last > parsed.entry_bytes
            or (parsed.count > 1 and last == 0)
        ):
            self._metrics.add("errors")
            raise PayloadIntegrityError(f"the entries stored for {locator!r} do not have the shape it describes")
        size = (parsed.count - 1) * parsed.entry_bytes + last
        if expected_size is not None and size != expected_size:
            self._metrics.add("errors")
            raise PayloadIntegrityError(f"payload at {locator!r} has {size} bytes, expected {expected_size}")
        return size


def _entry_lengths(parsed: RedisLocator, size: int) -> list[int]:
    """The length each entry of a ``size``-byte payload has (the locator's count was checked against it)."""
    step = parsed.entry_bytes
    return [step] * (parsed.count - 1) + [size - step * (parsed.count - 1)]


def _joined(chunks: list[bytes], size: int) -> bytes:
    """The entries as one value, each released once copied: one copy of the payload at the peak, not two."""
    builder = BytesBuilder(size)
    for i, chunk in enumerate(chunks):
        builder.append(chunk)
        chunks[i] = b""
    return builder.build()
