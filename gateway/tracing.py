"""Optional OpenTelemetry spans for each logical message, with the trace context carried in its headers.

Off unless ``opentelemetry-api`` is importable (the ``otel`` extra); then every ``produce`` gets a
PRODUCER span, ended when the message's delivery is known, and every message ``poll`` hands out
gets a CONSUMER span whose parent is the context found in the message's headers. The context goes
into the *user's* headers (W3C ``traceparent``, plus whatever the global propagator writes), so it
travels the way those headers do on every route: on the plain record, on every segment of a
chunked message (the consumer reads the reassembled message's headers) and on the envelope of a
reference. ``traceparent`` is not a reserved name, and LinkedIn's consumer ignores headers it does
not know, so interoperability is unchanged. Attribute names follow OpenTelemetry's messaging
conventions; the gateway's own are under ``gateway.*``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the otel extra is not installed: every hook below is a no-op
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from gateway.producer.outgoing import DeliveryCallback, OutgoingMessage

_SCOPE = "kafka-hybrid-gateway"
_provider: Any = None


def use_tracer_provider(provider: Any) -> None:
    """Trace with ``provider`` instead of the global one (``None``: the global one again).

    OpenTelemetry's global provider can be set only once per process; tests, and applications that
    keep the gateway's spans apart, pass theirs here.
    """
    global _provider
    _provider = provider


def _tracer() -> Any:
    assert trace is not None
    return trace.get_tracer(_SCOPE, tracer_provider=_provider)


GLOBAL_RECHECK_S = 1.0
"""How long "no global provider" is believed: a provider set later is seen within this time."""
_global_real = False  # a real global provider was seen: OpenTelemetry lets it be set only once
_global_recheck_at = float("-inf")


def enabled() -> bool:
    """True when spans would be recorded: the API is installed and a real provider is configured.

    With the API alone (no SDK set up), every span would be a no-op; checking first keeps the
    per-message cost of the plain route to one lookup. Looking the global provider up reads the
    process environment, which costs most of what a small record's produce does (docs/policy.md,
    "Tracing"), so "none yet" is remembered for :data:`GLOBAL_RECHECK_S`; a provider passed to
    :func:`use_tracer_provider` counts at once.
    """
    global _global_real, _global_recheck_at
    if trace is None:
        return False
    if _provider is not None or _global_real:
        return True
    now = time.monotonic()
    if now < _global_recheck_at:
        return False
    _global_real = not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    _global_recheck_at = now + GLOBAL_RECHECK_S
    return _global_real


def _carrier(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers or ():
        if value is not None:
            out[name] = value.decode("latin-1")
    return out


class ProduceSpan:
    """One logical message's PRODUCER span: started in ``produce``, ended by its delivery report."""

    __slots__ = ("message", "span")

    def __init__(self, message: OutgoingMessage) -> None:
        assert trace is not None
        parent = propagate.extract(_carrier(message.header_items))
        self.span = _tracer().start_span(
            f"send {message.topic}",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.name": "send",
                "messaging.operation.type": "send",
                "messaging.destination.name": message.topic,
                "messaging.message.body.size": message.size,
            },
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))
        headers = [(n, v) for n, v in message.header_items if n not in carrier]
        headers += [(n, v.encode("latin-1")) for n, v in carrier.items()]
        traced = replace(message, headers=headers, header_items=tuple(headers)) if carrier else message
        self.message = traced.with_callback(self._on_delivery(message.on_delivery))

    def routed(self, route: str, store: str | None, segments: int) -> None:
        self.span.set_attributes({"gateway.route": route, "gateway.store": store or "", "gateway.segments": segments})

    def failed(self, exc: BaseException) -> None:
        self.span.record_exception(exc)
        self.span.set_status(Status(StatusCode.ERROR, str(exc)))
        self.span.end()

    def _on_delivery(self, on_delivery: DeliveryCallback | None) -> DeliveryCallback:
        span = self.span

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                span.set_status(Status(StatusCode.ERROR, str(err)))
            elif msg is not None:
                span.set_attributes(
                    {"messaging.destination.partition.id": str(msg.partition()), "messaging.kafka.offset": msg.offset()}
                )
            span.end()
            if on_delivery is not None:
                on_delivery(err, msg)

        return report


def start_produce(message: OutgoingMessage) -> ProduceSpan | None:
    return ProduceSpan(message) if enabled() else None


def consumed(message: Any, route: str, store: str | None, segments: int) -> None:
    """A CONSUMER span for a message ``poll`` hands out, child of the context its headers carry."""
    if not enabled() or message.error() is not None:
        return
    value = message.value()
    parent = propagate.extract(_carrier(message.headers()))
    span = _tracer().start_span(
        f"process {message.topic()}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "kafka",
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": message.topic() or "",
            "messaging.destination.partition.id": str(message.partition()),
            "messaging.kafka.offset": message.offset(),
            "messaging.message.body.size": 0 if value is None else len(value),
            "gateway.route": route,
            "gateway.store": store or "",
            "gateway.segments": segments,
        },
    )
    span.end()
