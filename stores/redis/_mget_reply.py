"""An ``MGET`` reply read from the socket straight into the payload's final ``bytes``: one copy, not three.

redis-py's pure-Python parser receives a large bulk reply in 64 KB pieces into a ``BytesIO``, reads
it back out as one ``bytes``, and the store then copied each entry into the payload: a 100 MB
payload crossed memory three times after the kernel's copy, and the baseline's bare ``GET`` twice.
Here the reply's small framing (``*N``, ``$len``, CRLF) goes through a small buffer and each entry's
bytes are received with ``recv_into`` into their place in a :class:`~gateway.core.buffers.BytesBuilder`.

The reader sees the same reply redis-py would, so its answers are the same: an entry that is
missing, or of another length than the expected size implies, is read past (into a scratch
buffer) so that the connection stays in step, and reported as :class:`EntryShape` for the store to
judge as it judges a parsed reply. Nothing here knows about keys or locators.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from redis import exceptions as rex

from gateway.core.buffers import BytesBuilder

_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class EntryShape:
    """The lengths the reply's entries had (``None`` for a missing one); set when they were not as expected."""

    lengths: tuple[int | None, ...]


class ReplyReader:
    """RESP2/RESP3 replies from ``sock``: framing through a small buffer, bulk data into the caller's memory.

    Starts on a connection with no reply pending; a socket error, a timeout or a reply of another
    shape raises redis-py's own exceptions, after which the connection must be dropped.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._pos = 0
        self._scratch: memoryview | None = None

    def read_entries(self, builder: BytesBuilder, lengths: list[int], extra: int) -> EntryShape | None:
        """Read an array reply of ``len(lengths) + extra`` bulk strings; those of ``lengths`` go into ``builder``.

        The ``extra`` ones after them must be missing (a sentinel key). Returns ``None`` when every
        entry had its length and every extra one was missing, else the lengths that came back
        (``builder`` is then incomplete and must be dropped).
        """
        count = len(lengths) + extra
        kind, size = self._header()
        if kind != b"*" or size != count:
            raise rex.InvalidResponse(f"expected an array of {count} replies, got {kind!r}{size}")
        seen: list[int | None] = []
        in_step = True
        for i in range(count):
            length = self._bulk_length()
            seen.append(length)
            wanted = lengths[i] if i < len(lengths) else None
            if in_step and length is not None and length == wanted:
                builder.fill(length, self._read_into)
            else:
                in_step = in_step and length is None and wanted is None
                if length is not None:
                    self._skip(length)
            if length is not None:
                self._crlf()
        return None if in_step else EntryShape(tuple(seen))

    def read_bulk_into(self, view: memoryview) -> int | None:
        """One bulk string reply received into the start of ``view``: its length, ``None`` when missing.

        One longer than ``view`` is read past (the connection stays in step) and its length returned,
        for the caller to judge; ``view`` is then partly written.
        """
        length = self._bulk_length()
        if length is None:
            return None
        if length <= len(view):
            self._read_into(view[:length])
        else:
            self._skip(length)
        self._crlf()
        return length

    def read_integer(self) -> int:
        """One integer reply (``EXISTS``)."""
        kind, value = self._header()
        if kind != b":":
            raise rex.InvalidResponse(f"expected an integer, got {kind!r}")
        return value

    @property
    def drained(self) -> bool:
        """Whether nothing was received beyond the replies read: the connection can be used again."""
        return self._pos == len(self._buf)

    # -- framing --------------------------------------------------------------------------------
    def _bulk_length(self) -> int | None:
        kind, size = self._header()
        if kind == b"$":
            return None if size < 0 else size
        if kind == b"_":  # RESP3 null
            return None
        raise rex.InvalidResponse(f"expected a bulk string, got {kind!r}")

    def _header(self) -> tuple[bytes, int]:
        line = self._line()
        kind = line[:1]
        if kind == b"-":
            raise rex.ResponseError(line[1:].decode(errors="replace"))
        if kind == b"_":
            return kind, -1
        try:
            return kind, int(line[1:])
        except ValueError as exc:
            raise rex.InvalidResponse(f"unexpected reply line {bytes(line[:40])!r}") from exc

    def _line(self) -> bytes:
        while True:
            end = self._buf.find(b"\r\n", self._pos)
            if end >= 0:
                line = bytes(self._buf[self._pos : end])
                self._pos = end + 2
                return line
            self._fill()

    def _crlf(self) -> None:
        while len(self._buf) - self._pos < 2:
            self._fill()
        if self._buf[self._pos : self._pos + 2] != b"\r\n":
            raise rex.InvalidResponse("a bulk string did not end with CRLF")
        self._pos += 2

    # -- data -----------------------------------------------------------------------------------
    def _read_into(self, view: memoryview) -> None:
        """Fill ``view``: first from what the framing buffer already holds, then from the socket itself."""
        have = min(len(self._buf) - self._pos, len(view))
        if have:
            view[:have] = self._buf[self._pos : self._pos + have]
            self._pos += have
        done = have
        while done < len(view):
            done += self._recv_into(view[done:])

    def _skip(self, length: int) -> None:
        if self._scratch is None:
            self._scratch = memoryview(bytearray(_CHUNK))
        while length:
            step = min(length, _CHUNK)
            self._read_into(self._scratch[:step])
            length -= step

    def _fill(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        chunk = bytearray(_CHUNK)
        got = self._recv_into(memoryview(chunk))
        self._buf += memoryview(chunk)[:got]

    def _recv_into(self, view: memoryview) -> int:
        try:
            got = self._sock.recv_into(view)
        except TimeoutError as exc:
            raise rex.TimeoutError(f"Timeout reading from socket: {exc}") from exc
        except OSError as exc:
            raise rex.ConnectionError(f"Error while reading from socket: {exc}") from exc
        if got == 0:
            raise rex.ConnectionError("Connection closed by server.")
        return got


__all__ = ["EntryShape", "ReplyReader"]
