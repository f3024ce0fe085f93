"""OpenTelemetry (spans and messaging metrics) and librdkafka statistics for the clients.

``gateway.tracing`` is the façade the producer and the consumer call; the modules here decide the
attribute names (:mod:`~gateway.telemetry.semconv`), the spans (:mod:`~gateway.telemetry.spans`),
the metrics (:mod:`~gateway.telemetry.meters`) and what librdkafka's statistics JSON becomes
(:mod:`~gateway.telemetry.statistics`); :mod:`~gateway.telemetry.logs` keeps repeated warnings
short. All of it needs only ``opentelemetry-api`` (the ``otel`` extra), or nothing at all for the
statistics and the logs.
"""
