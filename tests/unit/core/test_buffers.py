"""BytesBuilder: the value built piece by piece equals the joined pieces, on both of its paths."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.buffers import BytesBuilder

pieces = st.lists(st.binary(max_size=300), max_size=12)


@pytest.mark.parametrize("use_c_api", [True, False], ids=["c-api", "bytearray"])
@given(parts=pieces)
def test_built_value_is_the_joined_pieces(use_c_api: bool, parts: list[bytes]) -> None:
    whole = b"".join(parts)
    builder = BytesBuilder(len(whole), use_c_api=use_c_api)
    for i, part in enumerate(parts):  # every kind of buffer a chunk may come as
        builder.append(memoryview(b"##" + part)[2:] if i % 2 else part)
    value = builder.build()
    assert type(value) is bytes
    assert value == whole
    assert hash(value) == hash(whole)


@pytest.mark.parametrize("use_c_api", [True, False], ids=["c-api", "bytearray"])
def test_overfilling_and_underfilling_are_refused(use_c_api: bool) -> None:
    builder = BytesBuilder(4, use_c_api=use_c_api)
    builder.append(b"abc")
    with pytest.raises(ValueError, match="5 bytes written into a value of 4"):
        builder.append(b"de")
    with pytest.raises(ValueError, match="only 3 of 4"):
        builder.build()
    builder.append(b"d")
    assert builder.build() == b"abcd"
    with pytest.raises(ValueError, match="already"):
        builder.build()
    with pytest.raises(ValueError, match="after build"):
        builder.append(b"x")


def test_small_values_never_touch_shared_objects() -> None:
    """CPython shares b"" and every one-byte bytes: writing into those would change them everywhere."""
    for size in (0, 1):
        builder = BytesBuilder(size)
        assert builder._value is None  # the bytearray path: no shared object is ever written
        builder.append(b"z" * size)
        assert builder.build() == b"z" * size
    assert len(b"".join([])) == 0
    assert bytes([0])[0] == 0


def test_a_built_value_is_independent_of_its_pieces() -> None:
    source = bytearray(b"hello world")
    builder = BytesBuilder(len(source))
    builder.append(source)
    value = builder.build()
    source[:5] = b"HELLO"
    assert value == b"hello world"


def test_partial_is_what_was_written() -> None:
    builder = BytesBuilder(6)
    builder.append(b"abc")
    assert builder.partial() == b"abc"


@pytest.mark.parametrize("use_c_api", [True, False])
def test_fill_lets_a_reader_write_in_place(use_c_api: bool) -> None:
    builder = BytesBuilder(10, use_c_api=use_c_api)
    builder.append(b"ab")

    def read_into(view: memoryview) -> None:
        view[:] = b"cdefg"

    builder.fill(5, read_into)
    assert builder.filled == 7

    def failing(view: memoryview) -> None:
        view[:1] = b"X"
        raise OSError("connection reset")

    with pytest.raises(OSError):
        builder.fill(3, failing)
    assert builder.filled == 7, "bytes of a failed read do not count as written"
    with pytest.raises(ValueError, match="11 bytes"):
        builder.fill(4, read_into)
    builder.fill(3, lambda view: view.__setitem__(slice(None), b"hij"))
    assert builder.build() == b"abcdefghij"
