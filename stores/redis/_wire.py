"""The RESP bytes of :class:`stores.RedisStore`'s write transaction, built once (pure, no I/O).

redis-py's pipeline spends about as much Python on a five-command ``MULTI ... EXEC`` as the
server spends storing a 100 KB value: it packs each command through its encoder, reads each of the
seven replies through its response callbacks, and records observability data around the whole.
Packed here, the whole transaction costs the client less than a bare ``SET`` through redis-py
(measured in docs/stores.md, "Client work"). The bytes are the same commands, so the server sees no
difference; only the client's work shrinks.

The payload is never copied: it stays its own item in the list handed to ``sendall``, between the
small packed pieces around it, as redis-py itself does for values over 6 KB.
"""

from __future__ import annotations

from collections.abc import Sequence

_CRLF = b"\r\n"
_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_SMALL = 6000
"""Values at most this long are packed into the surrounding bytes rather than sent as their own item."""


Arg = str | bytes | bytearray | memoryview | int


def _small(value: str | int) -> bytes:
    return value.encode() if isinstance(value, str) else b"%d" % value


def packed_command(*args: Arg) -> list[bytes | memoryview]:
    """One command (no transaction) as the items of one socket write."""
    packed = PackedTransaction(transaction=False)
    packed.add(*args)
    return packed.items()


class PackedTransaction:
    """``MULTI``, the queued commands, ``EXEC``: as the items of one socket write, and how many replies come back."""

    def __init__(self, *, transaction: bool = True) -> None:
        self._items: list[bytes | memoryview] = []
        self._head = bytearray(_MULTI if transaction else b"")
        self._transaction = transaction
        self.commands = 0

    @classmethod
    def of(cls, commands: Sequence[tuple[Arg, ...]]) -> PackedTransaction:
        """``MULTI``, each of ``commands``, ``EXEC``."""
        packed = cls()
        for args in commands:
            packed.add(*args)
        return packed

    def add(self, *args: Arg) -> None:
        """Queue one command; a bytes-like argument over 6 KB becomes its own item, uncopied."""
        head = self._head
        head += b"*%d\r\n" % len(args)
        for arg in args:
            if isinstance(arg, (str, int)):
                arg = _small(arg)
            head += b"$%d\r\n" % len(arg)
            if len(arg) > _SMALL:
                self._items.append(bytes(head))
                self._items.append(arg if isinstance(arg, (bytes, memoryview)) else memoryview(arg))
                head = self._head = bytearray()
            else:
                head += arg
            head += _CRLF
        self.commands += 1

    def items(self) -> list[bytes | memoryview]:
        """What to send, in order; ``EXEC`` closes it."""
        return [*self._items, bytes(self._head + _EXEC if self._transaction else self._head)]

    @property
    def replies(self) -> int:
        """``+OK`` to ``MULTI``, ``+QUEUED`` per command, then ``EXEC``'s array."""
        return self.commands + 2


__all__ = ["Arg", "PackedTransaction", "packed_command"]
