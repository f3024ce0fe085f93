"""Streams written to Redis as they arrive (:meth:`~gateway.store.Store.put_stream`): the same split entries as ``put``.

A stream becomes the entries ``put`` would have written for its bytes (``P:T:M:0..N-1`` of
``entry_bytes`` each, the last one shorter), filled part by part: the first piece of an entry is a
``SET`` (with the TTL), the rest ``APPEND``, so the producer holds one part and Redis never sees a
value larger than an entry. The pending mark goes first, under the locator of the most entries the
stream can take (its size, or for a compressed stream the codec's bound); the last request writes
the index entry, and moves the mark to the final locator when the count came out smaller. A reader
sees the payload only through its envelope, which is sent after all of it is written.

On failure (the source's included) the entries of the provisional locator, which covers every entry
the stream could have written, are removed with the mark, then the error is raised. A process that
dies mid-stream leaves that mark, which ``gateway gc`` resolves as it resolves a ``put``'s.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from gateway.errors import StoreError
from stores.base import StoreLifecycle, now_ms
from stores.redis._layout import RedisLocator, entries_for
from stores.redis._wire import Arg


class RedisStreamWrites(StoreLifecycle):
    """``put_stream`` of :class:`~stores.RedisStore`, which this is mixed into."""

    prefix: str
    entry_bytes: int
    max_entries: int
    ttl_seconds: int | None

    streams_puts = True

    if TYPE_CHECKING:  # provided by RedisStore

        def _shape(self, topic: str, message_id: uuid.UUID, size: int) -> RedisLocator: ...
        def _write(self, commands: Sequence[tuple[Arg, ...]]) -> None: ...
        def delete(self, locator: str) -> None: ...

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
        """The mark under the provisional locator, the entries as the parts come, then the index entry."""
        self._check_open()
        entry = self._stream_entry_bytes(part_bytes)
        provisional = self._stream_shape(topic, message_id, size if size is not None else size_bound, entry)
        if provisional.count > self.max_entries:
            raise StoreError(
                f"a stream of up to {size if size is not None else size_bound} bytes needs {provisional.count} entries"
                f" of {entry}, more than max_entries ({self.max_entries}); raise entry_bytes or max_entries"
            )
        pending = provisional.text(self.prefix)
        started = time.perf_counter()
        if pending_since_ms is not None:
            self._write([("ZADD", provisional.pending_key(self.prefix), pending_since_ms, pending)])
        try:
            written = self._write_entries(provisional, parts, None if persistent else self.ttl_seconds)
            if size is not None and written != size:
                raise StoreError(f"the stream for {pending!r} gave {written} bytes, its size is {size}")
            final = self._stream_shape(topic, message_id, written, entry)
            locator = final.text(self.prefix)
            self._write(self._finish_commands(final, pending, pending_since_ms, persistent))
        except BaseException:
            with contextlib.suppress(StoreError):
                self.delete(pending)  # every entry the stream could have written, and the mark
            raise
        self.put_done(started, locator, written, journalled=pending_since_ms is not None)
        return locator

    def _write_entries(self, shape: RedisLocator, parts: Iterable[memoryview], ttl: int | None) -> int:
        """Each part into the entries it falls in; returns the bytes written (an empty stream: one empty entry)."""
        step = shape.entry_bytes
        keys = shape.keys(self.prefix)
        expiry: tuple[Arg, ...] = () if ttl is None else ("EX", ttl)
        written = 0
        for part in parts:
            view = part
            while len(view):
                index, offset = divmod(written, step)
                if index >= len(keys):
                    raise StoreError(f"the stream for {shape.text(self.prefix)!r} runs past its {len(keys)} entries")
                piece = view[: step - offset]
                command = ("SET", keys[index], piece, *expiry) if offset == 0 else ("APPEND", keys[index], piece)
                self._write([command])
                written += len(piece)
                view = view[len(piece) :]
        if written == 0:
            self._write([("SET", keys[0], b"", *expiry)])
        return written

    def stream_locator_for(self, topic: str, message_id: uuid.UUID, size: int, part_bytes: int) -> str:
        """The locator of ``size`` bytes streamed in parts of ``part_bytes``: entries of one part each."""
        return self._stream_shape(topic, message_id, size, self._stream_entry_bytes(part_bytes)).text(self.prefix)

    def _stream_entry_bytes(self, part_bytes: int) -> int:
        """A stream's entries are its parts (``entry_bytes`` at most): each part one SET of a new key.

        Filling larger entries a part at a time costs Redis a copy per part (``APPEND`` grows the string;
        even ``SETRANGE`` into a string made whole first was half the speed of SETs of the parts), while
        a SET of a new key takes the request's buffer as its value. The locator says the entry size, so
        readers need nothing of the writer's configuration.
        """
        return max(1, min(self.entry_bytes, part_bytes))

    def _stream_shape(self, topic: str, message_id: uuid.UUID, size: int, entry: int) -> RedisLocator:
        shape = self._shape(topic, message_id, size)
        return RedisLocator(shape.topic, shape.message_id, entries_for(size, entry), entry, shape.bucket)

    def _finish_commands(
        self, final: RedisLocator, pending: str, pending_since_ms: int | None, persistent: bool
    ) -> list[tuple[Arg, ...]]:
        """The index entry, and the mark moved to the final locator when the provisional one named more entries."""
        locator = final.text(self.prefix)
        written_ms = now_ms()
        commands: list[tuple[Arg, ...]] = []
        if pending_since_ms is not None and locator != pending:
            commands.append(("ZREM", final.pending_key(self.prefix), pending))
            commands.append(("ZADD", final.pending_key(self.prefix), pending_since_ms, locator))
        index_key = final.index_key(self.prefix)
        commands.append(("ZADD", final.kept_index_key(self.prefix) if persistent else index_key, written_ms, locator))
        if self.ttl_seconds is not None:
            commands.append(("ZREMRANGEBYSCORE", index_key, "-inf", f"({written_ms - self.ttl_seconds * 1000}"))
        return commands
