"""OpenTelemetry's messaging client metrics, through ``opentelemetry-api``'s meter.

The four instruments the messaging conventions define for a client (semconv 1.26+):
``messaging.client.sent.messages`` (one per logical message whose delivery is known, with
``error.type`` when it failed), ``messaging.client.consumed.messages`` (one per message handed to
the application), ``messaging.client.operation.duration`` (a send: from ``produce`` to its
delivery report, in seconds) and ``messaging.process.duration`` (the time the application held a
consumed message, the consumer's process span). One logical message counts once, whatever its route.
"""

from __future__ import annotations

from typing import Any

try:
    from opentelemetry import metrics
    from opentelemetry.metrics import NoOpMeterProvider
except ImportError:  # the otel extra is not installed: nothing here is ever called
    metrics = None  # type: ignore[assignment]

_SCOPE = "kafka-hybrid-gateway"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
"""The bucket boundaries the conventions advise for messaging durations (seconds)."""
_provider: Any = None
_instruments: tuple[Any, Any] | None = None  # (provider the instruments belong to, Instruments)
_global_real = False
on = False
"""Whether points are recorded: a provider was passed in or a real global one was seen.

Read on every message by :func:`gateway.tracing.enabled`, which also decides when to look the
global provider up again (:func:`recheck`), with the tracer provider, on one clock reading.
"""


class Instruments:
    """The four instruments of one meter."""

    __slots__ = ("consumed", "operation_duration", "process_duration", "sent")

    def __init__(self, meter: Any) -> None:
        self.sent = meter.create_counter(
            "messaging.client.sent.messages", unit="{message}", description="Messages the producer sent"
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages", unit="{message}", description="Messages handed to the application"
        )
        self.operation_duration = _histogram(
            meter, "messaging.client.operation.duration", "Duration of a messaging operation (send: to its delivery)"
        )
        self.process_duration = _histogram(
            meter, "messaging.process.duration", "Time the application held a consumed message"
        )


def _histogram(meter: Any, name: str, description: str) -> Any:
    try:
        return meter.create_histogram(
            name, unit="s", description=description, explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS)
        )
    except TypeError:  # opentelemetry-api before 1.23 takes no advisory
        return meter.create_histogram(name, unit="s", description=description)


def use_meter_provider(provider: Any) -> None:
    """Record with ``provider`` instead of the global one (``None``: the global one again)."""
    global _provider, _instruments, on
    _provider = provider
    _instruments = None
    on = metrics is not None and (provider is not None or _global_real)


def recheck() -> None:
    """Look the global meter provider up (OpenTelemetry lets it be set once: a real one is believed for good)."""
    global _global_real, on
    if metrics is None or _global_real:
        return
    provider = metrics.get_meter_provider()
    _global_real = not isinstance(provider, NoOpMeterProvider) and type(provider).__name__ != "_ProxyMeterProvider"
    on = on or _global_real


def enabled() -> bool:
    """True when points would be recorded: the API is installed and a real meter provider is configured."""
    return on


def instruments() -> Instruments:
    """The instruments of the provider in use (created once per provider)."""
    global _instruments
    provider = _provider if _provider is not None else metrics.get_meter_provider()
    if _instruments is None or _instruments[0] is not provider:
        _instruments = (provider, Instruments(provider.get_meter(_SCOPE)))
    return _instruments[1]
