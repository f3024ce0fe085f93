"""Reading ``produce_stream``'s source: a file into a reused buffer, or an iterable's chunks, held to its size.

The source is the application's and may fail in any way; whatever it raises becomes
:class:`~gateway.errors.StreamSourceError` (the cause chained), and a source that ends before
``size`` bytes or has more after them :class:`~gateway.errors.StreamSizeError`, before a byte past
the size is passed on. The views handed out are valid until the next one is asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from gateway.errors import StreamSizeError, StreamSourceError

READ_BYTES = 1 << 20
"""How much one read of a file source asks for: a unit small beside a part, large beside a call's cost."""


def is_file(source: Any) -> bool:
    """A readable binary file (``readinto`` or ``read``), as opposed to an iterable of chunks."""
    return callable(getattr(source, "readinto", None)) or callable(getattr(source, "read", None))


def check_source(source: Any) -> None:
    """``TypeError`` for a source that is neither a readable file nor an iterable of chunks."""
    if isinstance(source, (str, bytes, bytearray, memoryview)):
        raise TypeError(
            f"source must be a readable binary file or an iterable of bytes-like chunks, got {type(source).__name__}"
            " (for a value in memory, use produce())"
        )
    if not is_file(source) and not isinstance(source, Iterable):
        raise TypeError(
            f"source must be a readable binary file or an iterable of bytes-like chunks, got {type(source).__name__}"
        )


class SourceReader:
    """The chunks of one source, exactly ``size`` bytes of them; for errors, the message's topic and key."""

    def __init__(self, source: Any, size: int, *, topic: str, key: Any, read_bytes: int = READ_BYTES) -> None:
        check_source(source)
        self._source = source
        self.size = size
        self.read = 0
        """Bytes handed out so far."""
        self._topic = topic
        self._key = key
        self._read_bytes = max(1, min(read_bytes, size or 1))

    def chunks(self) -> Iterator[memoryview]:
        """The source's bytes in chunks; raises the typed errors above."""
        if is_file(self._source):
            yield from self._from_file()
        else:
            yield from self._from_iterable()
        if self.read < self.size:
            raise self._size_error(f"the source ended after {self.read} of the {self.size} bytes declared")

    def _from_file(self) -> Iterator[memoryview]:
        buffer = memoryview(bytearray(self._read_bytes))
        readinto = getattr(self._source, "readinto", None)
        while self.read < self.size:
            want = buffer[: min(len(buffer), self.size - self.read)]
            got = self._call(lambda w=want: _read_into(self._source, readinto, w))
            if got == 0:
                return
            self.read += got
            yield want[:got]
        extra = self._call(lambda: _read_into(self._source, readinto, memoryview(bytearray(1))))
        if extra:
            raise self._size_error(f"the source has more than the {self.size} bytes declared")

    def _from_iterable(self) -> Iterator[memoryview]:
        chunks = self._call(lambda: iter(self._source))
        while True:
            chunk = self._call(lambda: next(chunks, None))
            if chunk is None:
                return
            try:
                view = memoryview(chunk).cast("B")
            except TypeError as exc:
                raise StreamSourceError(
                    f"the source gave a {type(chunk).__name__}, not a bytes-like chunk",
                    topic=self._topic,
                    key=self._key,
                ) from exc
            if self.read + len(view) > self.size:
                raise self._size_error(f"the source has more than the {self.size} bytes declared")
            self.read += len(view)
            if len(view):
                yield view

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except (StreamSourceError, GeneratorExit):
            raise
        except Exception as exc:
            raise StreamSourceError(
                f"the source of a stream for {self._topic!r} raised {type(exc).__name__}: {exc}",
                topic=self._topic,
                key=self._key,
            ) from exc

    def _size_error(self, why: str) -> StreamSizeError:
        return StreamSizeError(f"stream for {self._topic!r}: {why}", topic=self._topic, key=self._key)


def _read_into(source: Any, readinto: Any, view: memoryview) -> int:
    """One read into ``view`` (``readinto`` where the file has it, else ``read`` and one copy)."""
    if readinto is not None:
        got = readinto(view)
        return 0 if got is None else int(got)
    data = source.read(len(view))
    if not data:
        return 0
    if len(data) > len(view):
        raise ValueError(f"read({len(view)}) returned {len(data)} bytes")
    view[: len(data)] = data
    return len(data)
