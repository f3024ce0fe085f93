"""Which route a message takes: decided in one place, from its size where that is enough, else by the policy.

Most records are small, and for them the size alone answers (the policy's ``always_plain_up_to``),
without building the :class:`~gateway.policy.MessageInfo` a policy call takes. Above that the
policy answers, and two producer-wide rules have the last word: ``large.message.enabled=false``
turns chunks into plain records (LinkedIn's way: Kafka takes the record or refuses it), and a
compacted topic never gets chunks (:class:`~gateway.producer._compaction.CompactionGuard`).
"""

from __future__ import annotations

from gateway.core.outgoing import OutgoingMessage
from gateway.errors import ReferenceFormatError
from gateway.policy import CHUNKED, PLAIN, MessageInfo, Policy, Route, RouteKind
from gateway.producer._compaction import CompactionGuard
from gateway.producer._config import ProducerSettings
from gateway.protocol.headers import Headers


class RouteChooser:
    """The route of each message, for the producer and for :meth:`HybridProducer.route_for`."""

    def __init__(self, settings: ProducerSettings, policy: Policy, compaction: CompactionGuard) -> None:
        self.settings = settings
        self.policy = policy
        self._compaction = compaction
        self.plain_up_to: int = policy.always_plain_up_to(settings.segment_bytes)
        """Values up to this size are plain for every topic (-1: the policy says nothing of the kind)."""

    def route(self, topic: str, size: int, key: bytes | None, headers: Headers) -> Route:
        """The route of a value of ``size`` bytes, with ``key`` and ``headers`` already checked."""
        return self._by_size(size, key, headers) or self._by_policy(topic, size, key, headers)

    def of(self, message: OutgoingMessage) -> Route:
        """:meth:`route` of a message ``produce`` has already checked and converted."""
        headers = message.header_list
        return self._by_size(message.size, message.key_bytes, headers) or self._by_policy(
            message.topic, message.size, message.key_bytes, headers
        )

    def _by_size(self, size: int, key: bytes | None, headers: Headers) -> Route | None:
        """The route the size alone decides, without asking the policy; None when it does not.

        The whole record counts: a value that fits ``always_plain_up_to`` but not one record beside
        its key and headers is the policy's to route (its ``segment_size`` is what is left of the
        record for the value), as it would be without this shortcut.
        """
        wrap_small = self.settings.wrap_small
        if size <= self.plain_up_to and not wrap_small and size <= self.settings.segment_room(key, headers):
            return PLAIN  # the policy says plain for any topic at this size
        if wrap_small and self.settings.chunking and 0 < size <= self.settings.segment_bytes:
            return CHUNKED
        return None

    def _by_policy(self, topic: str, size: int, key: bytes | None, headers: Headers) -> Route:
        segment_size = self.settings.segment_size_for(key, headers)
        route = self.policy.route(MessageInfo(topic, key, size, headers, segment_size))
        if route.kind is RouteKind.CHUNKED and not self.settings.chunking:
            return PLAIN  # large.message.enabled=false
        if route.kind is RouteKind.CHUNKED and self.settings.reference_format.pointer:
            return self._pointer_route(topic, size)  # a foreign reader reads no chunks
        return self._compaction.reroute(topic, size, self.settings.chunk_size_for(key, headers), route)

    def _pointer_route(self, topic: str, size: int) -> Route:
        """What the policy would chunk, by reference instead under ``reference.format=bakdata|aws``: to the
        policy's store for the topic (``store_for``), or its only store; else :class:`ReferenceFormatError`."""
        store = self.policy.store_for(topic)
        names = sorted(self.policy.store_names())
        if store is None and len(names) == 1:
            store = names[0]
        if store is None:
            fmt = self.settings.reference_format.value
            raise ReferenceFormatError(
                f"reference.format={fmt}: a {size}-byte message for {topic!r} would be chunked, which its reader"
                " cannot assemble, and the policy names no store to send it by reference instead"
                " (SizeThresholdPolicy(store=...))"
            )
        return Route.reference(store)


def forced_route(route: Route | str) -> Route:
    """``produce(route=...)`` as a :class:`Route`."""
    if isinstance(route, Route):
        return route
    if isinstance(route, str):
        return Route.parse(route)
    raise TypeError(f"route must be a Route, 'plain', 'chunked' or 'reference:<store>', got {route!r:.80}")
