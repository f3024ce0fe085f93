"""Reading an MGET reply straight into the payload, from a real socket fed the server's bytes in pieces."""

from __future__ import annotations

import itertools
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis import exceptions as rex

from gateway.core.buffers import BytesBuilder
from stores.redis._mget_reply import EntryShape, ReplyReader


def served(pieces: list[bytes]) -> socket.socket:
    """The reading end of a socket pair whose other end sends ``pieces`` one by one, then closes."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)

    def send() -> None:
        with theirs:
            for piece in pieces:
                theirs.sendall(piece)

    threading.Thread(target=send, daemon=True).start()
    return ours


def reply(entries: list[bytes | None], null: bytes = b"$-1\r\n") -> bytes:
    out = [b"*%d\r\n" % len(entries)]
    for entry in entries:
        out.append(null if entry is None else b"$%d\r\n%s\r\n" % (len(entry), entry))
    return b"".join(out)


def cut(data: bytes, at: list[int]) -> list[bytes]:
    points = sorted({min(max(p, 0), len(data)) for p in at} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=5),
    st.lists(st.integers(0, 2000), max_size=8),
    st.sampled_from([b"$-1\r\n", b"_\r\n"]),
)
def test_entries_land_in_the_value_however_the_bytes_arrive(entries: list[bytes], at: list[int], null: bytes) -> None:
    data = reply([*entries, None], null)
    sock = served(cut(data, at))
    builder = BytesBuilder(sum(map(len, entries)))
    reader = ReplyReader(sock)
    assert reader.read_entries(builder, [len(e) for e in entries], 1) is None
    assert builder.build() == b"".join(entries)
    assert reader.drained
    sock.close()


@pytest.mark.parametrize(
    ("entries", "lengths", "shape"),
    [
        ([b"abc", None, None], [3, 3], (3, None, None)),  # an entry missing
        ([b"abc", b"de", None], [3, 3], (3, 2, None)),  # an entry shorter than expected
        ([b"abc", b"def", b"x"], [3, 3], (3, 3, 1)),  # the sentinel exists
        ([None, b"defg", None], [3, 3], (None, 4, None)),
    ],
)
def test_other_lengths_are_read_past_and_reported(
    entries: list[bytes | None], lengths: list[int], shape: tuple[int | None, ...]
) -> None:
    data = reply(entries) + reply([b"next"])
    sock = served(cut(data, [5, 9]))
    reader = ReplyReader(sock)
    assert reader.read_entries(BytesBuilder(sum(lengths)), lengths, 1) == EntryShape(shape)
    builder = BytesBuilder(4)
    assert reader.read_entries(builder, [4], 0) is None, "the connection is still in step"
    assert builder.build() == b"next"
    sock.close()


def test_a_large_entry_skipped_in_pieces() -> None:
    big = bytes(range(256)) * 1000
    sock = served([reply([big, None])])
    assert ReplyReader(sock).read_entries(BytesBuilder(10), [10], 1) == EntryShape((len(big), None))
    sock.close()


def test_error_replies_and_closed_connections_raise_redis_exceptions() -> None:
    sock = served([b"-LOADING Redis is loading the dataset in memory\r\n"])
    with pytest.raises(rex.ResponseError, match=r"^LOADING"):
        ReplyReader(sock).read_entries(BytesBuilder(1), [1], 0)
    sock.close()
    sock = served([b"*2\r\n$5\r\nab"])
    with pytest.raises(rex.ConnectionError):
        ReplyReader(sock).read_entries(BytesBuilder(5), [5, 5], 0)
    sock.close()
    sock = served([b"+OK\r\n"])
    with pytest.raises(rex.InvalidResponse):
        ReplyReader(sock).read_entries(BytesBuilder(1), [1], 0)
    sock.close()


def test_bytes_beyond_the_reply_are_noticed() -> None:
    sock = served([reply([b"abc", None]) + b"+PUSHED\r\n"])
    reader = ReplyReader(sock)
    builder = BytesBuilder(3)
    assert reader.read_entries(builder, [3], 1) is None
    assert not reader.drained
    sock.close()
