"""An optional Prometheus collector over the producer's, consumer's and stores' counters and histograms.

Needs the ``prometheus`` extra (``prometheus_client``). The counters stay plain dicts inside the
library (``metrics()``, whose dotted names are kept for existing users), so nothing is paid for
unless a collector is registered and scraped. This module translates them once, by one table
(:data:`METRICS`), into Prometheus's conventions: ``gateway_`` prefix, snake_case, seconds and
bytes as base units, ``_total`` on counters, histograms for latencies and sizes, and what varies
(route, store, operation) as labels, never inside a metric name. ``docs/policy.md`` lists the same
table, and a test holds the two together.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.errors import extra_required
from gateway.histogram import HistogramSnapshot
from gateway.store import Store

with extra_required("prometheus", "gateway.prometheus"):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
    from prometheus_client.registry import Collector
from gateway.telemetry.statistics import LibrdkafkaStatistics, statistics_points


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    kind: str  # counter, gauge or histogram
    labels: tuple[str, ...]
    help: str


def _spec(name: str, kind: str, labels: str, text: str) -> MetricSpec:
    return MetricSpec(name, kind, tuple(labels.split()) if labels else (), text)


#: Every series the collector exports. ``client`` is the key the component was registered under.
METRICS: tuple[MetricSpec, ...] = (
    _spec("gateway_producer_messages_total", "counter", "client route", "logical messages produced, by route"),
    _spec("gateway_producer_payload_bytes_total", "counter", "client route", "message value bytes produced"),
    _spec("gateway_producer_kafka_bytes_total", "counter", "client route", "bytes written to Kafka (keys included)"),
    _spec("gateway_producer_segments_total", "counter", "client", "chunk segments produced"),
    _spec("gateway_producer_store_kafka_bytes_total", "counter", "client store", "envelope bytes by store"),
    _spec("gateway_producer_delivery_failures_total", "counter", "client", "messages whose delivery failed"),
    _spec("gateway_producer_rollbacks_total", "counter", "client outcome", "store writes undone after a failure"),
    _spec("gateway_producer_fallbacks_total", "counter", "client outcome", "reference messages chunked instead"),
    _spec(
        "gateway_producer_fallback_refusals_total",
        "counter",
        "client reason",
        "fallbacks refused: route forced, payload encrypted, or over the inline cap",
    ),
    _spec("gateway_producer_warnings_suppressed_total", "counter", "client", "rate-limited warnings not logged"),
    _spec("gateway_producer_compression_skipped_total", "counter", "client", "payloads stored uncompressed: no saving"),
    _spec("gateway_producer_store_puts_total", "counter", "client outcome", "store puts by the producer"),
    _spec("gateway_producer_store_healthy", "gauge", "client store", "1 while the store is considered healthy"),
    _spec("gateway_producer_message_bytes", "histogram", "client route store", "sizes of produced messages"),
    _spec("gateway_producer_store_put_seconds", "histogram", "client store", "store put latency"),
    _spec("gateway_consumer_records_total", "counter", "client", "Kafka records read"),
    _spec("gateway_consumer_messages_total", "counter", "client route", "logical messages delivered, by route"),
    _spec("gateway_consumer_segments_total", "counter", "client", "chunk segments read"),
    _spec("gateway_consumer_dropped_messages_total", "counter", "client reason", "incomplete messages dropped"),
    _spec("gateway_consumer_duplicates_filtered_total", "counter", "client", "duplicate segments ignored"),
    _spec("gateway_consumer_invalid_records_total", "counter", "client", "records that failed to decode"),
    _spec("gateway_consumer_reference_errors_total", "counter", "client", "references that failed to resolve"),
    _spec("gateway_consumer_reference_skipped_total", "counter", "client", "records skipped by the error policy"),
    _spec("gateway_consumer_reference_dead_lettered_total", "counter", "client", "records sent to the DLQ"),
    _spec("gateway_consumer_warnings_suppressed_total", "counter", "client", "rate-limited warnings not logged"),
    _spec(
        "gateway_consumer_foreign_commit_metadata_total",
        "counter",
        "client",
        "committed offsets read whose metadata was not LinkedIn's (no high watermark)",
    ),
    _spec("gateway_consumer_resolver_fetches_total", "counter", "client", "payloads fetched from stores"),
    _spec("gateway_consumer_resolver_prefetches_total", "counter", "client", "payload fetches started ahead"),
    _spec("gateway_consumer_resolver_errors_total", "counter", "client", "payload fetches that failed"),
    _spec("gateway_consumer_resolver_peer_records_total", "counter", "client", "peer pointers resolved"),
    _spec("gateway_consumer_resolver_streams_total", "counter", "client", "payloads handed out as a PayloadStream"),
    _spec("gateway_consumer_peer_messages_total", "counter", "client format", "records other libraries wrote"),
    _spec("gateway_consumer_peer_errors_total", "counter", "client", "peer records that could not be read"),
    _spec(
        "gateway_consumer_bad_segments_as_payload_total",
        "counter",
        "client",
        "records failing segment checks, delivered as values",
    ),
    _spec("gateway_consumer_resolver_bytes_total", "counter", "client", "payload bytes fetched from stores"),
    _spec("gateway_consumer_buffered_bytes", "gauge", "client", "chunk bytes the assembler holds"),
    _spec("gateway_consumer_accounted_bytes", "gauge", "client", "bytes counted against the buffer capacity"),
    _spec("gateway_consumer_incomplete_messages", "gauge", "client", "chunked messages still assembling"),
    _spec("gateway_consumer_tracker_entries", "gauge", "client", "largest partition's tracked messages"),
    _spec("gateway_consumer_ahead_bytes", "gauge", "client", "payload bytes fetched ahead, not yet taken"),
    _spec("gateway_store_operations_total", "counter", "store op", "completed store operations"),
    _spec("gateway_store_written_bytes_total", "counter", "store", "payload bytes written"),
    _spec("gateway_store_read_bytes_total", "counter", "store", "payload bytes read"),
    _spec("gateway_store_errors_total", "counter", "store", "operations that failed"),
    _spec("gateway_store_not_found_total", "counter", "store", "reads of payloads that were not there"),
    _spec("gateway_store_locator_rejected_total", "counter", "store", "locators refused before any I/O"),
    _spec("gateway_store_pending_marked_total", "counter", "store", "writes marked pending in the journal"),
    _spec("gateway_store_pending_cleared_total", "counter", "store", "pending marks cleared"),
    _spec("gateway_store_operation_seconds", "histogram", "store op", "store operation latency"),
    _spec("gateway_librdkafka_queue_messages", "gauge", "client", "messages in librdkafka's queues (msg_cnt)"),
    _spec("gateway_librdkafka_queue_bytes", "gauge", "client", "bytes of the messages in librdkafka's queues"),
    _spec("gateway_librdkafka_reply_queue_ops", "gauge", "client", "callbacks and events waiting for poll (replyq)"),
    _spec("gateway_librdkafka_tx_bytes_total", "counter", "client", "bytes sent to brokers"),
    _spec("gateway_librdkafka_rx_bytes_total", "counter", "client", "bytes received from brokers"),
    _spec("gateway_librdkafka_broker_rtt_seconds", "gauge", "client broker", "average request round trip"),
    _spec("gateway_librdkafka_broker_waiting_requests", "gauge", "client broker", "requests awaiting a response"),
    _spec("gateway_librdkafka_consumer_lag", "gauge", "client topic partition", "messages behind the end"),
)
_SPECS = {spec.name: spec for spec in METRICS}
_ROUTE = re.compile(r"^(plain|chunked|reference)\.(messages|bytes|kafka\.bytes)$")

# dotted metrics() key -> (metric, label values after ``client``); keys handled by a pattern are below.
_PRODUCER = {
    "chunked.segments": ("gateway_producer_segments_total", ()),
    "delivery.failures": ("gateway_producer_delivery_failures_total", ()),
    "rollbacks": ("gateway_producer_rollbacks_total", ("done",)),
    "rollbacks.skipped": ("gateway_producer_rollbacks_total", ("skipped",)),
    "rollback.failures": ("gateway_producer_rollbacks_total", ("failed",)),
    "fallbacks": ("gateway_producer_fallbacks_total", ("chunked",)),
    "fallback.refused": ("gateway_producer_fallbacks_total", ("refused",)),
    "fallback.refused.forced": ("gateway_producer_fallback_refusals_total", ("forced",)),
    "fallback.refused.encrypted": ("gateway_producer_fallback_refusals_total", ("encrypted",)),
    "fallback.refused.oversize": ("gateway_producer_fallback_refusals_total", ("oversize",)),
    "warnings.suppressed": ("gateway_producer_warnings_suppressed_total", ()),
    "compression.skipped": ("gateway_producer_compression_skipped_total", ()),
    "store.puts": ("gateway_producer_store_puts_total", ("ok",)),
    "store.put.failures": ("gateway_producer_store_puts_total", ("failed",)),
}
_CONSUMER = {
    "records": ("gateway_consumer_records_total", ()),
    "segments": ("gateway_consumer_segments_total", ()),
    "dropped.evicted": ("gateway_consumer_dropped_messages_total", ("evicted",)),
    "dropped.expired": ("gateway_consumer_dropped_messages_total", ("expired",)),
    "duplicates.filtered": ("gateway_consumer_duplicates_filtered_total", ()),
    "invalid.records": ("gateway_consumer_invalid_records_total", ()),
    "reference.errors": ("gateway_consumer_reference_errors_total", ()),
    "reference.skipped": ("gateway_consumer_reference_skipped_total", ()),
    "reference.dead.lettered": ("gateway_consumer_reference_dead_lettered_total", ()),
    "warnings.suppressed": ("gateway_consumer_warnings_suppressed_total", ()),
    "commits.metadata.foreign": ("gateway_consumer_foreign_commit_metadata_total", ()),
    "peer.errors": ("gateway_consumer_peer_errors_total", ()),
    "bad.segments.as.payload": ("gateway_consumer_bad_segments_as_payload_total", ()),
    "resolver.fetched.bytes": ("gateway_consumer_resolver_bytes_total", ()),
    "resolver.fetched": ("gateway_consumer_resolver_fetches_total", ()),
    "resolver.prefetched": ("gateway_consumer_resolver_prefetches_total", ()),
    "resolver.errors": ("gateway_consumer_resolver_errors_total", ()),
    "resolver.peer.records": ("gateway_consumer_resolver_peer_records_total", ()),
    "resolver.streams": ("gateway_consumer_resolver_streams_total", ()),
    "assembler.buffered.bytes": ("gateway_consumer_buffered_bytes", ()),
    "assembler.accounted.bytes": ("gateway_consumer_accounted_bytes", ()),
    "assembler.incomplete.messages": ("gateway_consumer_incomplete_messages", ()),
    "tracker.entries.max": ("gateway_consumer_tracker_entries", ()),
    "resolver.ahead.bytes": ("gateway_consumer_ahead_bytes", ()),
}
_STORE = {
    "puts": ("gateway_store_operations_total", ("put",)),
    "gets": ("gateway_store_operations_total", ("get",)),
    "deletes": ("gateway_store_operations_total", ("delete",)),
    "bytes_written": ("gateway_store_written_bytes_total", ()),
    "bytes_read": ("gateway_store_read_bytes_total", ()),
    "errors": ("gateway_store_errors_total", ()),
    "not_found": ("gateway_store_not_found_total", ()),
    "locator_rejected": ("gateway_store_locator_rejected_total", ()),
    "pending_marked": ("gateway_store_pending_marked_total", ()),
    "pending_cleared": ("gateway_store_pending_cleared_total", ()),
}
_HISTOGRAMS = {
    "producer": {
        "message_bytes": "gateway_producer_message_bytes",
        "store_put_seconds": "gateway_producer_store_put_seconds",
    },
    "store": {"operation_seconds": "gateway_store_operation_seconds"},
}


def _kind(obj: Any) -> str:
    """Store by its class, producer or consumer by what the object does (no import of the clients needed)."""
    if isinstance(obj, Store):
        return "store"
    if hasattr(obj, "produce"):
        return "producer"
    if hasattr(obj, "poll"):
        return "consumer"
    return "store"


def _series(kind: str, key: str) -> tuple[str, tuple[str, ...]] | None:
    """Where one ``metrics()`` key goes; ``None`` for keys a histogram or another series already carries."""
    if kind == "producer":
        if match := _ROUTE.match(key):
            unit = {"messages": "messages", "bytes": "payload_bytes", "kafka.bytes": "kafka_bytes"}[match[2]]
            return f"gateway_producer_{unit}_total", (match[1],)
        if match := re.fullmatch(r"reference\.(.+)\.kafka\.bytes", key):
            return "gateway_producer_store_kafka_bytes_total", (match[1],)
        if match := re.fullmatch(r"store\.(.+)\.healthy", key):
            return "gateway_producer_store_healthy", (match[1],)
        return _PRODUCER.get(key)
    if kind == "consumer":
        if match := re.fullmatch(r"(plain|chunked|reference)\.messages", key):
            return "gateway_consumer_messages_total", (match[1],)
        if match := re.fullmatch(r"peer\.(.+)\.messages", key):
            return "gateway_consumer_peer_messages_total", (match[1],)
        return _CONSUMER.get(key)
    return _STORE.get(key)  # None for last_*_latency_ms: the operation_seconds histogram carries latencies


class GatewayCollector(Collector):
    """Exposes named producers, consumers and stores as the series of :data:`METRICS`.

    The mapping key becomes the ``client`` label of a producer or consumer and the ``store`` label
    of a store, so several clients of one process share the same metric names. ``statistics`` maps
    a client's key to the :class:`~gateway.telemetry.statistics.LibrdkafkaStatistics` given to it as
    ``stats_cb`` (with ``statistics.interval.ms``): its latest report becomes the
    ``gateway_librdkafka_*`` series, under the same ``client`` label.
    """

    def __init__(
        self, components: Mapping[str, Any], statistics: Mapping[str, LibrdkafkaStatistics] | None = None
    ) -> None:
        self.components = dict(components)
        self.statistics = dict(statistics or {})

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}

        def family(name: str) -> Metric:
            if name not in families:
                spec = _SPECS[name]
                cls = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}.get(spec.kind, HistogramMetricFamily)
                families[name] = cls(name.removesuffix("_total"), spec.help, labels=spec.labels)
            return families[name]

        for client, stats in self.statistics.items():
            for point in statistics_points(stats.latest() or {}):
                family(point.metric).add_metric([client, *point.labels], point.value)  # type: ignore[attr-defined]
        for component, obj in self.components.items():
            kind = _kind(obj)
            for key, value in sorted(obj.metrics().items()):
                target = _series(kind, key)
                if target is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                name, labels = target
                family(name).add_metric([component, *labels], float(value))  # type: ignore[attr-defined]
            histograms = obj.histograms if isinstance(obj, Store) else getattr(obj, "histograms", None)
            for hist_key, by_labels in (histograms() if histograms else {}).items():
                name = _HISTOGRAMS[kind][hist_key]
                for labels, snap in sorted(by_labels.items()):
                    _add_histogram(family(name), [component, *labels], snap)
        yield from families.values()


def _add_histogram(metric: Metric, labels: list[str], snap: HistogramSnapshot) -> None:
    if not isinstance(metric, HistogramMetricFamily):
        raise TypeError(f"{metric.name} is not a histogram in METRICS")
    buckets = [("+Inf" if bound == float("inf") else repr(float(bound)), float(n)) for bound, n in snap.buckets]
    metric.add_metric(labels, buckets, sum_value=snap.total)
