"""Integer keys: a value that is not a whole number is refused by name, never cut to one."""

from __future__ import annotations

import pytest

from gateway.config import parse_int, peek_int, pop_int
from gateway.producer import HybridProducer


@pytest.mark.parametrize(("value", "expected"), [(800_000, 800_000), (800_000.0, 800_000), ("800000", 800_000)])
def test_whole_numbers_in_any_spelling_are_taken(value: object, expected: int) -> None:
    assert parse_int("max.message.segment.bytes", value) == expected


@pytest.mark.parametrize("value", [800_000.5, "800000.5", True, "1e6", None, "eight"])
def test_anything_else_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(ValueError, match=r"max\.message\.segment\.bytes must be"):
        parse_int("max.message.segment.bytes", value)


def test_pop_and_peek_share_the_rule() -> None:
    with pytest.raises(ValueError, match="whole number"):
        pop_int({"k": 1.5}, "k", 0)
    with pytest.raises(ValueError, match="whole number"):
        peek_int({"k": 1.5}, "k", 0)


def test_a_fractional_segment_size_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"max\.message\.segment\.bytes must be a whole number, got 800000\.5"):
        HybridProducer({"bootstrap.servers": "127.0.0.1:1", "max.message.segment.bytes": 800_000.5})
