"""Optional OpenTelemetry spans and messaging metrics for each logical message, the trace context in its headers.

Off unless ``opentelemetry-api`` is importable (the ``otel`` extra) and a tracer or meter provider
is configured; then every ``produce`` gets a PRODUCER span, ended when the message's delivery is
known, and every message ``poll``/``consume`` hands out gets a CONSUMER span whose parent is the
context found in the message's headers, ended when the application next calls ``poll``,
``consume`` or ``close`` (the time it held the message). The context goes into the *user's*
headers (W3C ``traceparent``, plus whatever the global propagator writes), so it travels the way
those headers do on every route: on the plain record, on every segment of a chunked message (the
consumer reads the reassembled message's headers) and on the envelope of a reference.
``traceparent`` is not a reserved name, and LinkedIn's consumer ignores headers it does not know,
so interoperability is unchanged.

Attribute names follow OpenTelemetry's messaging conventions, old or new as
``OTEL_SEMCONV_STABILITY_OPT_IN`` says (:mod:`gateway.telemetry.semconv`); the gateway's own are
under ``gateway.*``. The messaging client metrics are in :mod:`gateway.telemetry.meters`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.telemetry import meters
from gateway.telemetry.meters import use_meter_provider
from gateway.telemetry.semconv import ClientInfo
from gateway.telemetry.spans import ConsumerSpans, ProduceSpan

try:
    from opentelemetry import trace
except ImportError:  # the otel extra is not installed: every hook below is a no-op
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from gateway.core.outgoing import OutgoingMessage

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
    """True when spans or metric points would be recorded: the API is installed and a real provider configured.

    With the API alone (no SDK set up), every span would be a no-op; checking first keeps the
    per-message cost of the plain route to one lookup. Looking the global providers up reads the
    process environment, which costs most of what a small record's produce does (docs/policy.md,
    "Tracing and OpenTelemetry metrics"), so "none yet" is remembered for :data:`GLOBAL_RECHECK_S`,
    for the tracer and the meter provider alike; one passed to :func:`use_tracer_provider` or
    :func:`use_meter_provider` counts at once.
    """
    global _global_real, _global_recheck_at
    if trace is None:
        return False
    if _provider is not None or _global_real or meters.on:
        return True
    now = time.monotonic()
    if now < _global_recheck_at:
        return False
    _global_real = not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    meters.recheck()
    _global_recheck_at = now + GLOBAL_RECHECK_S
    return _global_real or meters.on


def _instruments() -> meters.Instruments | None:
    return meters.instruments() if meters.on else None


def client_info(conf: Mapping[str, Any]) -> ClientInfo:
    """What a client's spans and metric points carry (ids, first broker, which names), from its config."""
    return ClientInfo.of(conf)


def start_produce(message: OutgoingMessage, client: ClientInfo | None = None) -> ProduceSpan | None:
    """The PRODUCER span of a message about to be sent, or None when nothing is recorded."""
    if not enabled():
        return None
    return ProduceSpan(message, client or ClientInfo.of({}), _tracer(), _instruments())


class ConsumerTelemetry:
    """One consumer's process spans: a message's span is ended when the application comes back.

    ``held`` is non-empty while the application holds traced messages; the consumer checks it (a
    list's truth value, nothing more) at the start of ``poll``, ``consume`` and ``close``.
    """

    __slots__ = ("_spans", "held")

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._spans = ConsumerSpans(conf) if trace is not None else None
        self.held: list[Any] = self._spans.held if self._spans is not None else []

    def consumed(self, message: Any, route: str, store: str | None, segments: int) -> None:
        if self._spans is None or message.error() is not None:
            return
        self._spans.consumed(message, _tracer(), _instruments(), route, store, segments)

    def failed(self, message: Any, exc: BaseException) -> None:
        if self._spans is not None and message is not None:
            self._spans.failed(message, exc, _tracer(), _instruments())

    def release(self) -> None:
        if self._spans is not None:
            self._spans.release(_instruments())


__all__ = [
    "GLOBAL_RECHECK_S",
    "ClientInfo",
    "ConsumerTelemetry",
    "ProduceSpan",
    "client_info",
    "enabled",
    "start_produce",
    "use_meter_provider",
    "use_tracer_provider",
]
