"""``Policy`` declares what a policy may know besides routes; the producer asks, never sniffs.

A policy that subclasses :class:`~gateway.policy.Policy` is asked ``store_names``, ``store_for`` and
``always_plain_up_to`` and gets the defaults of a policy that knows nothing of the kind; an object with
only a ``route`` method (the duck-typed policies docs/policy.md has always accepted) is wrapped and
gets the same defaults.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.outgoing import OutgoingMessage
from gateway.errors import ConfigurationError
from gateway.policy import (
    CHUNKED,
    PLAIN,
    MessageInfo,
    Policy,
    Route,
    RouteOnlyPolicy,
    SizeThresholdPolicy,
    as_policy,
)
from gateway.producer import HybridProducer
from gateway.producer._compaction import CompactedTopicError, CompactionGuard, reference_route
from gateway.producer._config import parse_producer_config
from gateway.producer._route_choice import RouteChooser
from gateway.testing import MemoryStore
from tests.unit.test_layout import sniffed

ROOT = Path(__file__).resolve().parents[3]
CONF = {"bootstrap.servers": "127.0.0.1:1"}


class OnlyRoutes:
    """A policy as docs/policy.md describes a custom one: anything with ``route``."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def route(self, message: MessageInfo) -> Route:
        self.asked.append(message.value_size)
        return Route.reference("s3") if message.value_size > 100 else PLAIN


class Declaring(Policy):
    """A subclass that declares every capability."""

    def route(self, message: MessageInfo) -> Route:
        return CHUNKED

    def store_names(self) -> set[str]:
        return {"redis"}

    def store_for(self, topic: str) -> str | None:
        return "redis"

    def always_plain_up_to(self, segment_size: int) -> int:
        return 10


class RoutesOnly(Policy):
    def route(self, message: MessageInfo) -> Route:
        return PLAIN


def _chooser(policy: Policy) -> RouteChooser:
    settings, _ = parse_producer_config({})
    return RouteChooser(settings, policy, CompactionGuard(None, policy, {}, settings.segment_bytes))


def test_a_subclass_is_asked_what_it_declares() -> None:
    policy = Declaring()
    assert _chooser(policy).plain_up_to == 10
    assert reference_route(policy, {"redis": object(), "s3": object()}, "t", 5, "compact") == Route.reference("redis")
    with pytest.raises(ConfigurationError, match=r"routes to \['redis'\], but stores= has none"):
        HybridProducer(CONF, policy=policy)


def test_a_subclass_that_declares_nothing_gets_the_defaults() -> None:
    policy = RoutesOnly()
    assert (policy.store_names(), policy.store_for("t"), policy.always_plain_up_to(1000)) == (set(), None, -1)
    assert _chooser(policy).plain_up_to == -1, "asked for every message"
    assert reference_route(policy, {"only": object()}, "t", 5, "compact") == Route.reference("only")
    with pytest.raises(CompactedTopicError):
        reference_route(policy, {"a": object(), "b": object()}, "t", 5, "compact")


def test_an_object_with_only_route_still_routes_every_message() -> None:
    router = OnlyRoutes()
    producer = HybridProducer(CONF, policy=router, stores={"s3": MemoryStore(name="s3")})
    try:
        assert isinstance(producer.policy, RouteOnlyPolicy)
        assert producer.route_for("t", 10) == PLAIN
        assert producer.route_for("t", 101) == Route.reference("s3")
        assert router.asked == [10, 101], "no size shortcut: it promised nothing"
    finally:
        producer.close()


def test_the_default_and_a_subclass_are_taken_as_they_are() -> None:
    policy = SizeThresholdPolicy(reference_above=5, store="redis")
    assert as_policy(policy) is policy
    assert as_policy(None) == SizeThresholdPolicy()


def test_something_that_cannot_route_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match=r"policy must be a gateway\.Policy or have a route"):
        HybridProducer(CONF, policy=object())  # type: ignore[arg-type]


def test_no_module_sniffs_a_policy_for_its_methods() -> None:
    """``getattr(policy, "store_names", None)`` and the like: the producer asks what Policy declares instead."""
    names = frozenset({"route", "store_names", "store_for", "always_plain_up_to"})
    sniffs = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "gateway").rglob("*.py"))
        for line, _ in sniffed(names, path.read_text())
    ]
    assert sniffs == []


def test_the_chooser_of_a_wrapped_router_agrees_with_the_router() -> None:
    router = OnlyRoutes()
    routes = _chooser(as_policy(router))
    assert routes.of(OutgoingMessage.of("t", b"x" * 200)) == Route.reference("s3")
