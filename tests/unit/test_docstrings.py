"""Every public class and method of the API says what it is for (``help()``, IDEs, the docs' readers).

The public API is ``gateway.__all__`` and ``stores.__all__``; a method counts as documented when
our own class or one of our own bases (a protocol such as ``gateway.store.Store``) gives it a
docstring. A docstring inherited from confluent-kafka does not count: a method we override does
something else (safe offsets, envelopes), and its help must say what.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import pytest

import gateway
import stores


def _ours(obj: object) -> bool:
    return (getattr(obj, "__module__", "") or "").split(".")[0] in ("gateway", "stores")


def _function(member: Any) -> Any:
    return member.fget if isinstance(member, property) else getattr(member, "__func__", member)


def _documented(member: Any) -> bool:
    return bool((getattr(_function(member), "__doc__", None) or "").strip())


def _public(module: ModuleType) -> dict[str, Any]:
    found = {name: getattr(module, name) for name in module.__all__}
    kept = {name: obj for name, obj in found.items() if inspect.isclass(obj) or inspect.isfunction(obj)}
    return {name: obj for name, obj in kept.items() if _ours(obj)}


def undocumented(module: ModuleType) -> list[str]:
    missing: list[str] = []
    for name, obj in _public(module).items():
        if not _documented(obj) or (inspect.isclass(obj) and obj.__doc__ is None):
            missing.append(f"{module.__name__}.{name}")
        if not inspect.isclass(obj):
            continue
        ours = [klass for klass in obj.__mro__ if _ours(klass)]
        for attr in sorted({attr for klass in ours for attr in vars(klass) if not attr.startswith("_")}):
            owners = [klass for klass in obj.__mro__ if attr in vars(klass)]
            member = vars(owners[0])[attr]
            if not _ours(owners[0]) or not inspect.isfunction(_function(member)):
                continue  # confluent-kafka's own method, or a plain attribute
            if not any(_documented(vars(klass)[attr]) for klass in owners if _ours(klass)):
                missing.append(f"{module.__name__}.{name}.{attr} (defined in {owners[0].__qualname__})")
    return missing


@pytest.mark.parametrize("module", [gateway, stores], ids=["gateway", "stores"])
def test_every_public_class_and_method_has_a_docstring(module: ModuleType) -> None:
    assert undocumented(module) == []


def test_the_check_sees_the_classes_the_issue_named() -> None:
    public = _public(gateway)
    for name in ("HybridConsumer", "HybridProducer", "Policy", "RouteKind"):
        assert name in public, name
    assert {"RedisStore", "S3Store"} <= set(_public(stores))


def test_an_override_of_a_confluent_kafka_method_needs_our_own_docstring() -> None:
    from confluent_kafka import Consumer

    class Undocumented(Consumer):  # type: ignore[misc]
        def poll(self, timeout: float = -1) -> Any:  # confluent-kafka's docstring must not count
            return None

    Undocumented.__module__ = "gateway.example"
    module = ModuleType("gateway.example")
    module.__all__ = ["Undocumented"]  # type: ignore[attr-defined]
    module.Undocumented = Undocumented  # type: ignore[attr-defined]
    Undocumented.__doc__ = "A consumer for the test."
    assert undocumented(module) == ["gateway.example.Undocumented.poll (defined in " + Undocumented.__qualname__ + ")"]
