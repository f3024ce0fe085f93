"""``gateway.PayloadStream``: a reference payload handed out as a readable stream, fetched as it is read.

With ``value.stream.threshold.bytes`` set, a reference message whose payload is at least that large
has one of these as its ``value()`` (:func:`gateway.core.streams.plan.streams` decides). What each
kind of payload guarantees while read (docs/stores.md, "Streams"):

* sealed (``reference.encryption``): every segment is authenticated before any of its bytes is
  returned, wherever the read starts; a tampered segment raises, a truncated payload raises.
* clear: the size is checked range by range, and a read from byte 0 to the end checks the digest
  before it returns the last range: the read that would reach the end raises
  :class:`~gateway.errors.PayloadStreamIntegrityError` instead. After a seek elsewhere, only the size
  is checked (``seek(0)`` and reading on checks again).
* compressed with gzip or zstd (not sealed): decoded as the ranges arrive, a bounded step at a time;
  the size and digest of the application's bytes are checked before the last decoded bytes are
  returned, wherever the read started (a seek decodes again from the start).
* compressed with lz4 or also sealed, or from a store without ranged reads: read and checked whole
  when the message is handed out, then served from memory (seekable).

The message counts as handed out when ``poll`` returns it, as any other: commits do not wait for
the stream, so reading it after its offset is committed is the application's concern (a crash then
does not redeliver it). Closing the consumer invalidates its open streams: their next read raises
:class:`~gateway.errors.PayloadStreamClosedError`, since their store clients and threads go with it.
"""

from __future__ import annotations

import io
from collections.abc import Generator, Hashable
from typing import Any

from gateway.errors import PayloadStreamClosedError, PayloadStreamIntegrityError
from gateway.streams._sources import Chunk, StreamSource


class PayloadStream(io.RawIOBase):
    """A payload read on demand: ``read``/``readinto``, ``seek``/``tell`` where ``seekable()``, ``size``.

    Not thread-safe (as any file object): one reader at a time. The bytes it returns are checked as
    described in the module's docstring; an error, once raised, is raised by every later read.
    """

    def __init__(self, source: StreamSource, size: int, where: Hashable = None) -> None:
        super().__init__()
        self._source = source
        self.size = size
        """The payload's size in bytes, as its envelope declares it."""
        self._where = _record_of(where)
        self._position = 0
        self._chunks: Generator[Chunk, None, None] | None = None
        self._pending = memoryview(b"")
        self._failed: BaseException | None = None
        self._invalidated = False

    def __repr__(self) -> str:
        topic, partition, offset = self._where
        return f"PayloadStream({topic}[{partition}]@{offset}, size={self.size}, position={self._position})"

    @property
    def topic(self) -> str | None:
        """The topic of the record whose value this is (``None`` for a Spark task's offset-only key)."""
        return self._where[0]

    @property
    def partition(self) -> int | None:
        """The record's partition."""
        return self._where[1]

    @property
    def offset(self) -> int | None:
        """The record's offset: what the integrity and closed errors name too."""
        return self._where[2]

    def readable(self) -> bool:
        """Always: a payload stream is read, never written."""
        return True

    def seekable(self) -> bool:
        """True for every stream this library makes (ranged reads, or a payload held whole); ``seek`` says so."""
        return self._source.seekable

    def tell(self) -> int:
        """The position of the next byte :meth:`read` returns."""
        return self._position

    def integrity_error(self, message: str) -> PayloadStreamIntegrityError:
        """The typed error of this stream's payload, naming its record."""
        topic, partition, offset = self._where
        where = f"{topic}[{partition}]@{offset}" if topic is not None else f"offset {offset}"
        return PayloadStreamIntegrityError(
            f"payload stream of {where}: {message}", topic=topic, partition=partition, offset=offset
        )

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` with the next checked bytes (fewer only at the end); ``0`` at the end of a good payload.

        A failure (integrity, store) after some bytes were filled returns those; the next read raises it.
        """
        self._check_usable()
        target = memoryview(buffer).cast("B")
        filled = 0
        try:
            while filled < len(target):
                if not self._pending:
                    if self._chunks is None:
                        self._chunks = self._source.chunks(self._position)
                    chunk = next(self._chunks, None)
                    if chunk is None:
                        break
                    self._pending = memoryview(chunk).cast("B")
                    continue
                n = min(len(target) - filled, len(self._pending))
                target[filled : filled + n] = self._pending[:n]
                self._pending = self._pending[n:]
                filled += n
                self._position += n
        except Exception as exc:
            self._failed = exc
            self._drop_chunks()
            if not filled:
                raise
        return filled  # bytes checked before the failure are returned; the next read raises

    def readall(self) -> bytes:
        """The rest of the payload in one ``bytes``: as large as what is left (the stream's point is to not do this)."""
        parts: list[bytes] = []
        while True:
            part = self.read(8 * 1024 * 1024)
            if not part:
                return b"".join(parts)
            parts.append(part)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to ``offset``; ranges ahead are dropped and the next read fetches from there (a sealed payload's
        from the segment holding it). Only a read from byte 0 checks the digest (module docstring)."""
        self._check_usable()
        if not self._source.seekable:
            raise io.UnsupportedOperation("this payload stream is not seekable")
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence!r}")
        target = base + offset
        if target < 0:
            raise ValueError(f"negative seek position {target}")
        if target != self._position:
            self._drop_chunks()
            self._position = target
        return target

    def close(self) -> None:
        """Drop the ranges ahead and stop this stream's read threads; later reads raise ``PayloadStreamClosedError``."""
        if not self.closed:
            self._drop_chunks()
            self._source.close()
        super().close()

    def invalidate(self) -> None:
        """The consumer that handed this stream out is closing: later reads raise :class:`PayloadStreamClosedError`."""
        self._invalidated = True
        self.close()

    def _drop_chunks(self) -> None:
        chunks, self._chunks = self._chunks, None
        self._pending = memoryview(b"")
        if chunks is not None:
            chunks.close()

    def _check_usable(self) -> None:
        if self._invalidated or self.closed:
            topic, partition, offset = self._where
            why = "the consumer that handed it out was closed" if self._invalidated else "it was closed"
            raise PayloadStreamClosedError(
                f"payload stream of {topic}[{partition}]@{offset} read after {why}",
                topic=topic,
                partition=partition,
                offset=offset,
            )
        if self._failed is not None:
            raise self._failed


def _record_of(key: Hashable) -> tuple[str | None, int | None, int | None]:
    """``(topic, partition, offset)`` from the reader's key of the record: the consumer's triple, or an offset."""
    if isinstance(key, tuple) and len(key) == 3:
        topic, partition, offset = key
        return str(topic), int(partition), int(offset)
    if isinstance(key, int):
        return None, None, key
    return None, None, None
