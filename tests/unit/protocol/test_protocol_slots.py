"""direct_init: the same instances as a frozen dataclass's own __init__ builds, only faster to build."""

from __future__ import annotations

import dataclasses
import inspect
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.assembler import Assembled
from gateway.protocol.classify import Classified, RecordKind
from gateway.protocol.headers import LargeMessageHeader
from gateway.protocol.segments import Segment
from gateway.protocol.slots import direct_init


@dataclasses.dataclass(frozen=True, slots=True)
class Generated:
    a: int
    b: str = "b"
    c: tuple[int, ...] | None = None


@direct_init
@dataclasses.dataclass(frozen=True, slots=True)
class Direct:
    a: int
    b: str = "b"
    c: tuple[int, ...] | None = None


@given(st.integers(), st.text(), st.none() | st.tuples(st.integers()))
def test_instances_hold_what_the_generated_init_stores(a: int, b: str, c: tuple[int, ...] | None) -> None:
    for args, kwargs in (((a,), {}), ((a, b), {}), ((a,), {"c": c}), ((), {"a": a, "b": b, "c": c})):
        direct, generated = Direct(*args, **kwargs), Generated(*args, **kwargs)
        assert dataclasses.astuple(direct) == dataclasses.astuple(generated)
        assert direct == Direct(*args, **kwargs) and hash(direct) == hash(Direct(*args, **kwargs))
        assert repr(direct).removeprefix("Direct") == repr(generated).removeprefix("Generated")


def test_instances_stay_frozen_and_arguments_are_checked_as_before() -> None:
    direct = Direct(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        direct.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        Direct()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Direct(1, "b", None, 4)  # type: ignore[call-arg]
    assert str(inspect.signature(Direct)) == "(a, b='b', c=None)"


def test_what_it_cannot_reproduce_is_refused() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None: ...

    for cls in (Mutable, Factory, PostInit):
        with pytest.raises(TypeError):
            direct_init(cls)


def test_the_protocols_values_are_built_through_it() -> None:
    mid = uuid.uuid4()
    view = memoryview(b"chunk")
    header = LargeMessageHeader(1, mid, 0, 2, 10)
    assert (header.type, header.message_id, header.segment_number, header.number_of_segments) == (1, mid, 0, 2)
    assert LargeMessageHeader(0, mid, 0, 1).message_size == -1
    segment = Segment(mid, 1, 2, 10, view)
    assert segment.payload is view and segment.sequence_number == 1
    assert Classified(RecordKind.SEGMENT, segment).segment is segment
    assert Classified(RecordKind.PLAIN) == Classified(RecordKind.PLAIN, None, None, False, None, False)
    assert Assembled(b"v", 3, 4, True) == Assembled(b"v", 3, 4, True, 1)
    for cls in (LargeMessageHeader, Segment, Classified, Assembled):  # each stores through its slots
        assert all(name.startswith("_store_") for name in cls.__init__.__code__.co_names)
