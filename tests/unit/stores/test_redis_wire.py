"""The Redis store's packed write transaction: the very bytes redis-py's own packer sends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from redis.connection import Connection

from stores.redis._wire import PackedTransaction

small = st.one_of(st.text(max_size=40), st.integers(-(2**63), 2**63 - 1))
value = st.one_of(
    st.binary(max_size=64),
    st.integers(5990, 6010).map(lambda n: b"v" * n),
    st.integers(6001, 70_000).map(lambda n: b"w" * n),
)
wrapped = st.sampled_from([bytes, bytearray, memoryview])
commands = st.lists(
    st.tuples(st.sampled_from(["SET", "ZADD", "ZREMRANGEBYSCORE"]), st.lists(st.one_of(small, value), max_size=4)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(commands, wrapped)
def test_the_bytes_are_redis_pys_own(cmds: list[tuple[str, list[object]]], wrap: type) -> None:
    calls = [(name, *(wrap(a) if isinstance(a, bytes) else a for a in args)) for name, args in cmds]
    packed = PackedTransaction()
    for call in calls:
        packed.add(*call)  # type: ignore[arg-type]
    reference = Connection().pack_commands([("MULTI",), *calls, ("EXEC",)])  # type: ignore[no-untyped-call]
    assert b"".join(bytes(item) for item in packed.items()) == b"".join(bytes(item) for item in reference)
    assert packed.replies == len(calls) + 2


def test_a_large_value_is_sent_as_it_is_not_copied() -> None:
    payload = memoryview(bytearray(b"x" * 100_000))
    packed = PackedTransaction()
    packed.add("SET", "k", payload, "EX", 60)
    packed.add("ZADD", "p", 1, "k#1x100000")
    items = packed.items()
    assert len(items) == 3 and items[1] is payload
    assert bytes(items[0]).endswith(b"$100000\r\n") and bytes(items[2]).startswith(b"\r\n$2\r\nEX\r\n$2\r\n60\r\n")
