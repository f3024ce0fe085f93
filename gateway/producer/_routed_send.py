"""``produce``'s general path: a message whose route is chosen, sent by that route's writer.

What the topic's cleanup policy allows the route is asked first (it raises for chunks that
compaction would lose), then a peer's pointer format is checked, then the route's writer sends it
through the outbox; auditing and tracing wrap the send. ``HybridProducer`` keeps the arguments and
the direct path of small plain records; this is what every other record takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from gateway import tracing
from gateway.auditing import Auditor, AuditType
from gateway.clock import Clock
from gateway.core.outgoing import OutgoingMessage
from gateway.policy import Route, RouteKind
from gateway.producer._audited import audited as _audited
from gateway.producer._config import ProducerSettings
from gateway.producer._parts import ProducerParts
from gateway.protocol.peers.pointer_formats import check_payload, check_route
from gateway.store import Store


class RoutedSend:
    """Sends one message by its chosen route (see the module's docstring); made once per producer."""

    def __init__(
        self,
        settings: ProducerSettings,
        stores: Mapping[str, Store],
        parts: ProducerParts,
        auditor: Auditor | None,
        clock: Clock,
        telemetry: tracing.ClientInfo,
    ) -> None:
        self._settings = settings
        self._stores = stores
        self._parts = parts
        self._auditor = auditor
        self._clock = clock
        self._warmup = parts.warmup
        """librdkafka told of a topic when its first reference message starts (its envelope comes last)."""
        self._telemetry = telemetry
        """Span and metric attributes (client.id, first broker)."""
        self._pointer = settings.reference_format if settings.reference_format.pointer else None
        """``reference.format`` when it is a peer's pointer (bakdata, aws), read once: it is fixed per producer."""

    def send(self, message: OutgoingMessage, chosen: Route, forced: bool) -> None:
        """Send ``message`` by ``chosen`` (``forced``: by ``route=``), audited and traced around the send."""
        persistent = self._kept_forever(message, chosen)  # raises for lost chunks
        auditor = self._auditor
        if auditor is not None:
            # stamp the record ourselves, so producer and consumer audit the same time bucket
            message = message.stamped(self._clock.wall_ms)
            auditor.record(message.topic, message.timestamp, 1, message.key_size + message.size, AuditType.ATTEMPT)
            message = message.with_callback(_audited(auditor, message))
        metrics = self._parts.metrics
        span = tracing.start_produce(message, self._telemetry)  # None without the otel extra
        if span is not None:
            message, segments_before = span.message, metrics.chunked_segments
        try:
            chosen = self._by_route(message, chosen, forced, persistent)
        except BaseException as exc:
            if auditor is not None:
                auditor.record(message.topic, message.timestamp, 1, message.size, AuditType.FAILURE)
            if span is not None:
                span.failed(exc)
            raise
        if span is not None:
            segments = metrics.chunked_segments - segments_before if chosen.kind is RouteKind.CHUNKED else 1
            span.routed(chosen.kind.value, chosen.store, segments)

    def _kept_forever(self, message: OutgoingMessage, chosen: Route) -> bool:
        """Whether the store must keep the payload forever (what the topic's cleanup policy allows the route);
        raises for chunks that compaction would lose."""
        plain = chosen.kind is RouteKind.PLAIN  # no segments: what key and headers leave of one does not matter
        segment_size = None if plain else self._settings.chunk_size_for(message.key_bytes, message.header_list)
        store = self._stores.get(chosen.store or "") if chosen.kind is RouteKind.REFERENCE else None
        if store is not None:
            self._warmup.touch(message.topic)  # before any wait of this message's own: the store write, the lookup
        expires = store is None or store.expires_per_payload
        allowed = self._parts.compaction.cleanup_allowance(
            message.topic, message.size, chosen, segment_size, expires_per_payload=expires
        )
        return allowed.persistent

    def _by_route(self, message: OutgoingMessage, chosen: Route, forced: bool, persistent: bool) -> Route:
        """The route's writer, through the outbox; the route taken (a reference may go chunked instead)."""
        parts = self._parts
        fmt = self._pointer
        if fmt is not None:  # what bakdata's or AWS's reader could not read is refused before any write
            check_route(fmt, chosen.kind is RouteKind.CHUNKED)
            if chosen.kind is RouteKind.REFERENCE and message.payload is not None:
                check_payload(fmt, message.payload)
        if chosen.kind is RouteKind.REFERENCE:  # sent by reference, or chunked where the store is down
            parts.admission.check(message)  # what Kafka would refuse, refused before the store write
            send = partial(parts.references.send, chosen, forced, persistent=persistent)
            return parts.outbox.join(send, message) or chosen
        if chosen.kind is RouteKind.PLAIN:
            parts.outbox.produce_plain(message)
            parts.metrics.plain(message)
        elif chosen.kind is RouteKind.CHUNKED:
            parts.outbox.send_message(parts.chunks.send, message)
        return chosen


__all__ = ["RoutedSend"]
