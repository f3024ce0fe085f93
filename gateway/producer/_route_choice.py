"""Which route a message takes: decided in one place, from its size where that is enough, else by the policy.

Most records are small, and for them the size alone answers (the policy's ``always_plain_up_to``),
without building the :class:`~gateway.policy.MessageInfo` a policy call takes. Above that the
policy answers, and two producer-wide rules have the last word: ``large.message.enabled=false``
turns chunks into plain records (LinkedIn's way: Kafka takes the record or refuses it), and a
compacted topic never gets chunks (:class:`~gateway.producer._compaction.CompactionGuard`).
"""

from __future__ import annotations

from gateway.core.outgoing import OutgoingMessage
from gateway.core.route_choice import Reroute, RouteDecision, RouteLimits, after_policy, asks_cleanup_policy, by_size
from gateway.policy import CHUNKED, PLAIN, MessageInfo, Policy, Route, RouteKind
from gateway.producer._compaction import CompactionGuard
from gateway.producer._config import ProducerSettings
from gateway.protocol.headers import Headers


class RouteChooser:
    """The route of each message, for the producer and for :meth:`HybridProducer.route_for`.

    It gathers the facts (the policy's answer, the topic's cleanup policy when it matters) and
    :mod:`gateway.core.route_choice` decides.
    """

    def __init__(self, settings: ProducerSettings, policy: Policy, compaction: CompactionGuard) -> None:
        self.settings = settings
        self.policy = policy
        self._compaction = compaction
        self.plain_up_to: int = policy.always_plain_up_to(settings.segment_bytes)
        """Values up to this size are plain for every topic (-1: the policy says nothing of the kind)."""
        fmt = settings.reference_format
        self.limits = RouteLimits(
            self.plain_up_to,
            settings.segment_bytes,
            settings.wrap_small,
            settings.chunking,
            fmt.value if fmt.pointer else None,
        )

    def route(self, topic: str, size: int, key: bytes | None, headers: Headers) -> Route:
        """The route of a value of ``size`` bytes, with ``key`` and ``headers`` already checked."""
        decided = by_size(self.limits, size, self.settings.segment_room(key, headers))
        return self._by_policy(topic, size, key, headers) if decided is None else route_of(decided)

    def of(self, message: OutgoingMessage) -> Route:
        """:meth:`route` of a message ``produce`` has already checked and converted."""
        return self.route(message.topic, message.size, message.key_bytes, message.header_list)

    def _by_policy(self, topic: str, size: int, key: bytes | None, headers: Headers) -> Route:
        settings, limits = self.settings, self.limits
        answer = self.policy.route(MessageInfo(topic, key, size, headers, settings.segment_size_for(key, headers)))
        if answer.kind is not RouteKind.CHUNKED:
            return answer  # the producer-wide rules change only chunks
        decision = RouteDecision(answer.kind, answer.store)
        chunk_size = settings.chunk_size_for(key, headers)
        compacted = asks_cleanup_policy(limits, decision, size, chunk_size) and self._compaction.compacted(topic)
        outcome = after_policy(limits, decision, size, chunk_size, compacted)
        if outcome is decision:
            return answer
        if isinstance(outcome, Reroute):
            outcome = self._compaction.store_route(outcome, topic, size, limits.pointer_format)
        return route_of(outcome)


def route_of(decision: RouteDecision) -> Route:
    """The core's decision as the policy's :class:`Route` (the shared constants for plain and chunked)."""
    if decision.kind is RouteKind.PLAIN:
        return PLAIN
    if decision.kind is RouteKind.CHUNKED:
        return CHUNKED
    return Route(decision.kind, decision.store)


def forced_route(route: Route | str) -> Route:
    """``produce(route=...)`` as a :class:`Route`."""
    if isinstance(route, Route):
        return route
    if isinstance(route, str):
        return Route.parse(route)
    raise TypeError(f"route must be a Route, 'plain', 'chunked' or 'reference:<store>', got {route!r:.80}")
