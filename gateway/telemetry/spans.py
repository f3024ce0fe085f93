"""The producer's and the consumer's spans (and metric points) for one logical message.

PRODUCER: ``send <topic>`` from ``produce`` to the delivery report. CONSUMER: ``process <topic>``,
child of the context the message's headers carry, started when ``poll``/``consume`` hands the
message out and ended when the application comes back for more (its next ``poll`` or
``consume``) or closes the consumer, so the span measures the time the application held the
message, as the conventions' process span does. Messages handed out together by one
``consume(n)`` end together. Both record the messaging metrics of :mod:`gateway.telemetry.meters`
when a meter provider is configured.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.telemetry.semconv import ClientInfo, error_type, message_key

if TYPE_CHECKING:
    from gateway.core.outgoing import DeliveryCallback, OutgoingMessage
    from gateway.telemetry.meters import Instruments

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the otel extra is not installed: nothing here is ever called
    trace = None  # type: ignore[assignment]


def carrier(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers or ():
        if value is not None:
            out[name] = value.decode("latin-1")
    return out


def _message_attributes(attrs: dict[str, Any], key: Any, value: Any, size: int) -> dict[str, Any]:
    attrs["messaging.message.body.size"] = size
    text = message_key(key)
    if text is not None:
        attrs["messaging.kafka.message.key"] = text
    if value is None:
        attrs["messaging.kafka.message.tombstone"] = True
    return attrs


def _fail(span: Any, err: Any) -> str:
    kind = error_type(err)
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, str(err)))
    return kind


class ProduceSpan:
    """One logical message's PRODUCER span: started in ``produce``, ended by its delivery report."""

    __slots__ = ("client", "instruments", "message", "span", "started")

    def __init__(
        self, message: OutgoingMessage, client: ClientInfo, tracer: Any, instruments: Instruments | None
    ) -> None:
        assert trace is not None
        self.client, self.instruments, self.started = client, instruments, time.monotonic()
        parent = propagate.extract(carrier(message.header_items))
        attrs = _message_attributes(client.common(message.topic, "send"), message.key, message.value, message.size)
        self.span = tracer.start_span(
            client.names.span_name("send", message.topic), context=parent, kind=SpanKind.PRODUCER, attributes=attrs
        )
        headers_out: dict[str, str] = {}
        propagate.inject(headers_out, context=trace.set_span_in_context(self.span))
        headers = [(n, v) for n, v in message.header_items if n not in headers_out]
        headers += [(n, v.encode("latin-1")) for n, v in headers_out.items()]
        traced = replace(message, headers=headers, header_items=tuple(headers)) if headers_out else message
        self.message = traced.with_callback(self._on_delivery(message.topic, message.on_delivery))

    def routed(self, route: str, store: str | None, segments: int) -> None:
        self.span.set_attributes(_route_attributes(route, store, segments))

    def failed(self, exc: BaseException) -> None:
        """``produce`` raised: nothing was sent."""
        self.span.record_exception(exc)
        self._record(self.message.topic, _fail(self.span, exc))
        self.span.end()

    def _record(self, topic: str, error: str | None) -> None:
        if self.instruments is not None:
            attrs = self.client.metric_attributes(topic, "send", error)
            self.instruments.sent.add(1, attrs)
            self.instruments.operation_duration.record(time.monotonic() - self.started, attrs)

    def _on_delivery(self, topic: str, on_delivery: DeliveryCallback | None) -> DeliveryCallback:
        def report(err: Any, msg: Any) -> None:
            error = None
            if err is not None:
                error = _fail(self.span, err)
            elif msg is not None:
                attrs: dict[str, Any] = {}
                self.client.names.put(attrs, "partition", msg.partition())
                self.client.names.put(attrs, "offset", msg.offset())
                self.span.set_attributes(attrs)
            self._record(topic, error)
            self.span.end()
            if on_delivery is not None:
                on_delivery(err, msg)

        return report


class ConsumerSpans:
    """The process spans of one consumer's messages the application holds, ended when it comes back."""

    __slots__ = ("client", "held")

    def __init__(self, conf: Any) -> None:
        self.client = ClientInfo.of(conf)
        self.held: list[tuple[Any, float, dict[str, Any] | None]] = []
        """(span, handed out at, metric attributes or None): the messages of the last poll/consume."""

    def consumed(
        self, message: Any, tracer: Any, instruments: Instruments | None, route: str, store: str | None, segments: int
    ) -> None:
        """A CONSUMER span for a message about to be handed out, child of the context its headers carry."""
        assert trace is not None
        topic = message.topic() or ""
        value = message.value()
        attrs = _message_attributes(
            self.client.common(topic, "process"), message.key(), value, 0 if value is None else len(value)
        )
        self.client.names.put(attrs, "partition", message.partition())
        self.client.names.put(attrs, "offset", message.offset())
        attrs.update(_route_attributes(route, store, segments))
        parent = propagate.extract(carrier(message.headers()))
        span = tracer.start_span(
            self.client.names.span_name("process", topic), context=parent, kind=SpanKind.CONSUMER, attributes=attrs
        )
        points = None
        if instruments is not None:
            points = self.client.metric_attributes(topic, "process")
            instruments.consumed.add(1, self.client.metric_attributes(topic, "poll"))
        self.held.append((span, time.monotonic(), points))

    def failed(self, message: Any, exc: BaseException, tracer: Any, instruments: Instruments | None) -> None:
        """A record that could not become a message: a process span with ``error.type``, ended at once."""
        assert trace is not None
        topic = message.topic() or ""
        attrs = self.client.common(topic, "process")
        self.client.names.put(attrs, "partition", message.partition())
        self.client.names.put(attrs, "offset", message.offset())
        parent = propagate.extract(carrier(message.headers()))
        span = tracer.start_span(
            self.client.names.span_name("process", topic), context=parent, kind=SpanKind.CONSUMER, attributes=attrs
        )
        span.record_exception(exc)
        kind = _fail(span, exc)
        span.end()
        if instruments is not None:
            instruments.consumed.add(1, self.client.metric_attributes(topic, "poll", kind))

    def release(self, instruments: Instruments | None) -> None:
        """The application is back (``poll``, ``consume`` or ``close``): the messages it held are processed."""
        held = list(self.held)
        self.held.clear()  # the same list: a façade may keep a reference to it for a cheap emptiness check
        now = time.monotonic()
        for span, started, points in held:
            span.end()
            if points is not None and instruments is not None:
                instruments.process_duration.record(now - started, points)


def _route_attributes(route: str, store: str | None, segments: int) -> dict[str, str | int]:
    """The gateway's own span attributes; ``gateway.store`` only where a store holds the payload.

    An empty string would read as "a store with no name" in a trace backend's filters, so routes
    with no store leave the attribute out, as OpenTelemetry's conventions do for what does not apply.
    """
    attributes: dict[str, str | int] = {"gateway.route": route, "gateway.segments": segments}
    if store:
        attributes["gateway.store"] = store
    return attributes
