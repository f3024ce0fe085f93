"""Per-message routing: plain record, LinkedIn segments, or a reference to a named store.

A policy is a pure function of what the producer knows before writing anything (topic, key,
value size, headers), so it can be tested alone and swapped per application.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.protocol.headers import Header
from gateway.protocol.records import RouteKind as RouteKind  # the sans-IO core's type; its public name is here


@dataclass(frozen=True, slots=True)
class Route:
    """What one message becomes. ``store`` names the store for reference routes."""

    kind: RouteKind
    store: str | None = None

    def __post_init__(self) -> None:
        if (self.kind is RouteKind.REFERENCE) != (self.store is not None):
            raise ValueError("a reference route names a store, and only a reference route does")

    @classmethod
    def plain(cls) -> Route:
        """One ordinary record: what every Kafka client reads."""
        return PLAIN

    @classmethod
    def chunked(cls) -> Route:
        """Segments LinkedIn's client reads too; no store involved, the bytes stay in Kafka."""
        return CHUNKED

    @classmethod
    def reference(cls, store: str) -> Route:
        """The payload in the store named ``store``, a small envelope in Kafka pointing at it."""
        return cls(RouteKind.REFERENCE, store)

    @classmethod
    def parse(cls, text: str) -> Route:
        """``plain`` | ``chunked`` | ``reference:<store>``, as ``str(route)`` writes it."""
        kind, _, store = text.strip().partition(":")
        try:
            route_kind = RouteKind(kind)
        except ValueError as exc:
            raise ValueError(f"unknown route {text!r}: expected plain, chunked or reference:<store>") from exc
        return cls(route_kind, store or None)

    def __str__(self) -> str:
        return self.kind.value if self.store is None else f"{self.kind.value}:{self.store}"


PLAIN = Route(RouteKind.PLAIN)
CHUNKED = Route(RouteKind.CHUNKED)


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """Everything a policy may look at; the value itself is deliberately not offered."""

    topic: str
    key: bytes | None
    value_size: int
    headers: Sequence[Header] | None
    segment_size: int
    """The producer's effective segment size: values up to it fit in one record."""


class Policy(abc.ABC):
    """Chooses each message's route; the producer asks it once per message, so it can look at size,
    topic and headers (:class:`SizeThresholdPolicy` is the usual one).

    Subclass it and implement :meth:`route`; the other methods are what a policy may also know, each
    with the answer of a policy that does not, so the producer asks them of any policy and never asks
    what a policy can do (as :class:`~gateway.store.Store` declares its optional features). An object
    that only has a ``route`` method is a policy too: the producer wraps it (:func:`as_policy`), and
    it gets these defaults.
    """

    @abc.abstractmethod
    def route(self, message: MessageInfo) -> Route:
        """The route of ``message``; a policy must not raise for a message it does not expect."""

    def store_names(self) -> set[str]:
        """Every store this policy may route to, so that a producer refuses a missing one up front.

        The default names none: the producer then learns of a missing store when a message is routed there.
        """
        return set()

    def store_for(self, topic: str) -> str | None:
        """The store this policy names for ``topic``: where a compacted topic's large messages go.

        The default names none: the producer's only store takes them, if it has exactly one.
        """
        return None

    def always_plain_up_to(self, segment_size: int) -> int:
        """The largest value this policy sends plain on every topic: the producer skips the policy below it.

        The default, -1, promises nothing: the policy is asked for every message.
        """
        return -1


class Router(Protocol):
    """What a policy that does not subclass :class:`Policy` must have: a ``route`` method (for type checkers)."""

    def route(self, message: MessageInfo) -> Route: ...


class RouteOnlyPolicy(Policy):
    """An object with a ``route`` method and nothing declared, as a :class:`Policy` with the defaults."""

    def __init__(self, router: Router) -> None:
        try:
            self._route = router.route
        except AttributeError:
            raise TypeError(
                f"policy must be a gateway.Policy or have a route(MessageInfo) method, got {type(router).__name__}"
            ) from None
        self.router = router

    def route(self, message: MessageInfo) -> Route:
        return self._route(message)

    def __repr__(self) -> str:
        return f"RouteOnlyPolicy({self.router!r})"


def as_policy(policy: Policy | Router | None) -> Policy:
    """``policy=`` as a :class:`Policy`: itself, the default :class:`SizeThresholdPolicy` for None, or wrapped."""
    if policy is None:
        return SizeThresholdPolicy()
    if isinstance(policy, Policy):
        return policy
    return RouteOnlyPolicy(policy)


@dataclass(frozen=True, slots=True)
class TopicOverride:
    reference_above: int | None = None
    store: str | None = None
    chunk_above: int | None = None


@dataclass(frozen=True)
class SizeThresholdPolicy(Policy):
    """Plain up to the segment size, chunked up to ``reference_above``, a reference beyond it.

    ``reference_above=None`` never references (LinkedIn's behaviour); ``store=None`` likewise.
    ``chunk_above`` lowers the plain/chunked boundary below the segment size when set.
    ``overrides`` maps a topic to its own thresholds and store.
    """

    reference_above: int | None = None
    store: str | None = None
    chunk_above: int | None = None
    overrides: Mapping[str, TopicOverride] = field(default_factory=dict)

    def store_names(self) -> set[str]:
        """Every store this policy may route to, so a producer can refuse a missing one up front."""
        names = {self.store} if self.store is not None and self.reference_above is not None else set()
        for o in self.overrides.values():
            store = o.store or self.store
            if store is not None and (o.reference_above is not None or self.reference_above is not None):
                names.add(store)
        return names

    def store_for(self, topic: str) -> str | None:
        """The store this policy names for ``topic``: where a compacted topic's large messages go."""
        override = self.overrides.get(topic)
        return override.store if override is not None and override.store is not None else self.store

    def always_plain_up_to(self, segment_size: int) -> int:
        """The largest value this policy sends plain on every topic: the producer skips the policy below it."""
        limits = [segment_size]
        rules: list[tuple[int | None, int | None, str | None]] = [(self.chunk_above, self.reference_above, self.store)]
        rules += [(o.chunk_above, o.reference_above, o.store or self.store) for o in self.overrides.values()]
        for chunk_above, reference_above, store in rules:
            if chunk_above is not None:
                limits.append(chunk_above)
            if reference_above is not None and store is not None:
                limits.append(reference_above)
        return max(0, min(limits))

    def route(self, message: MessageInfo) -> Route:
        """By size, with the topic's override if it has one; an explicit ``route=`` on produce wins over this."""
        override = self.overrides.get(message.topic)
        reference_above = self.reference_above
        store = self.store
        chunk_above = self.chunk_above
        if override is not None:
            reference_above = override.reference_above if override.reference_above is not None else reference_above
            store = override.store if override.store is not None else store
            chunk_above = override.chunk_above if override.chunk_above is not None else chunk_above
        if store is not None and reference_above is not None and message.value_size > reference_above:
            return Route.reference(store)
        limit = message.segment_size if chunk_above is None else min(chunk_above, message.segment_size)
        if message.value_size > limit:
            return CHUNKED
        return PLAIN
