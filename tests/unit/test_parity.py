"""Every public method of confluent-kafka's Producer and Consumer exists on ours, with its parameters.

The C classes expose no signatures; their docstrings open with ``.. py:function:: name(params)``,
which is what users read, so that is what ours is held to: every documented parameter, in order,
under the same name (ours may add keyword-only ones, such as ``route=``).
"""

from __future__ import annotations

import inspect
import re

import pytest
from confluent_kafka import Consumer, Producer

from gateway import HybridConsumer, HybridProducer

PENDING: set[str] = set()
"""Methods not built yet: listed so that the test says so, and fails once they exist."""

PAIRS = [(Producer, HybridProducer), (Consumer, HybridConsumer)]


def _public(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def _documented_params(method: object) -> list[str] | None:
    match = re.search(r"py:function:: \w+\((.*)\)", inspect.getdoc(method) or "")
    if match is None:
        return None
    names = []
    for item in match.group(1).replace("[", ",").replace("]", ",").split(","):
        name = item.split("=")[0].strip()
        if name and name != "*":
            names.append(name)
    return names


@pytest.mark.parametrize(("theirs", "ours"), PAIRS, ids=lambda c: c.__name__)
def test_every_public_method_exists(theirs: type, ours: type) -> None:
    missing = [n for n in _public(theirs) if not hasattr(ours, n) and n not in PENDING]
    assert missing == []
    assert [n for n in PENDING if hasattr(ours, n)] == [], "built: take it out of PENDING"
    assert hasattr(ours, "__enter__") and hasattr(ours, "__exit__")


@pytest.mark.parametrize(("theirs", "ours"), PAIRS, ids=lambda c: c.__name__)
def test_every_documented_parameter_is_taken_in_order(theirs: type, ours: type) -> None:
    checked = 0
    methods = [n for n in _public(theirs) if n not in PENDING]
    for name in methods:
        documented = _documented_params(getattr(theirs, name)) or []  # no signature line: no parameters
        params = [p for p in inspect.signature(getattr(ours, name)).parameters.values() if p.name != "self"]
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if any(p.kind is p.VAR_POSITIONAL for p in params):  # produce: the rest read by HybridProducer._positional
            positional += [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        if "callback" not in documented:  # confluent-kafka takes it before on_delivery; its docstring omits the alias
            positional = [n for n in positional if n != "callback"]
        assert positional[: len(documented)] == documented, f"{ours.__name__}.{name}{documented}"
        required = [p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        assert set(required) <= set(documented), f"{ours.__name__}.{name} requires {required}"
        checked += 1
    assert checked == len(methods), "every method's docstring was read"


def test_the_asyncio_clients_have_every_method_of_confluent_kafkas() -> None:
    from confluent_kafka.aio import AIOConsumer, AIOProducer

    from gateway.aio import AIOHybridConsumer, AIOHybridProducer

    for theirs, ours in ((AIOProducer, AIOHybridProducer), (AIOConsumer, AIOHybridConsumer)):
        missing = [n for n in [*_public(theirs), "__aenter__", "__aexit__"] if not hasattr(ours, n)]
        assert missing == [], f"{ours.__name__} lacks {missing}"
        for name in _public(theirs):
            assert inspect.iscoroutinefunction(getattr(ours, name)), f"{ours.__name__}.{name} must be awaitable"
