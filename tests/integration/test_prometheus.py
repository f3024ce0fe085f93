"""The Prometheus exporter, scraped over HTTP after real traffic on all three routes."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.prometheus import METRICS, GatewayCollector
from gateway.telemetry.statistics import LibrdkafkaStatistics
from gateway.testing import KafkaService, free_port
from stores import RedisStore
from tests.helpers import consume_all, payload

SIZES = (1_000, 1_500_000, 3_000_000)  # plain, chunked, reference


def _scrape(components: dict[str, Any], statistics: dict[str, LibrdkafkaStatistics] | None = None) -> str:
    registry = CollectorRegistry()
    registry.register(GatewayCollector(components, statistics))
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return str(response.read().decode())
    finally:
        server.shutdown()
        thread.join(10)


def test_scrape_follows_prometheus_conventions(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: Any
) -> None:
    store = RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}")
    policy = SizeThresholdPolicy(reference_above=2_000_000, store="redis")
    producer = HybridProducer(kafka.producer_config(), policy=policy, stores={"redis": store})
    for i, size in enumerate(SIZES):
        producer.produce(topic, payload(size, i), key=b"k")
    assert producer.flush(60) == 0
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(SIZES))
    assert len(got) == len(SIZES) and not errors
    try:
        text = _scrape({"orders": producer, "reader": consumer, "redis": store})
    finally:
        consumer.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # text format 0.0.4 names a counter's TYPE line with its _total suffix; the family name lacks it
    types = {n.removesuffix("_total"): k for n, k in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE)}
    assert types

    # names: prefix, snake_case, no store or route inside a name, units as suffixes
    for name in types:
        assert re.fullmatch(r"gateway_[a-z0-9_]+", name), name
        assert not re.search(r"_(ms|millis|redis|s3|plain|chunked)(_|$)", name), name
    # every exported family is in the documented table, with its type
    table = {spec.name.removesuffix("_total"): spec for spec in METRICS}
    for name, kind in types.items():
        assert name in table, name
        assert kind == table[name].kind, (name, kind)

    def value(sample_name: str, **labels: str) -> float:
        return sum(
            s.value
            for f in families.values()
            for s in f.samples
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    for route in ("plain", "chunked", "reference"):
        assert value("gateway_producer_messages_total", client="orders", route=route) == 1
        assert value("gateway_consumer_messages_total", client="reader", route=route) == 1
    assert value("gateway_producer_payload_bytes_total", route="reference") == SIZES[2]
    assert value("gateway_producer_segments_total", client="orders") >= 2
    assert value("gateway_producer_store_healthy", store="redis") == 1
    assert value("gateway_producer_store_kafka_bytes_total", store="redis") > 0
    # histograms: sizes by route and store, latencies in seconds
    assert types["gateway_producer_message_bytes"] == "histogram"
    assert value("gateway_producer_message_bytes_count", route="reference", store="redis") == 1
    assert value("gateway_producer_message_bytes_sum", route="chunked") == SIZES[1]
    assert value("gateway_producer_message_bytes_bucket", route="plain", le="1000.0") == 1
    assert types["gateway_producer_store_put_seconds"] == "histogram"
    put_seconds = value("gateway_producer_store_put_seconds_sum", store="redis")
    assert 0 < put_seconds < 60, "seconds, not milliseconds"
    assert value("gateway_store_operations_total", store="redis", op="put") == 1
    assert value("gateway_store_operations_total", store="redis", op="get") == 1
    assert value("gateway_store_operation_seconds_count", store="redis", op="get") == 1
    assert value("gateway_store_written_bytes_total", store="redis") == SIZES[2]
    assert types["gateway_consumer_buffered_bytes"] == "gauge"
    assert types["gateway_consumer_records"] == "counter"
    assert "# TYPE gateway_consumer_records_total counter" in text


def test_every_metrics_key_is_exported_or_carried_by_a_histogram(
    kafka: KafkaService, consumer_config: Any, redis_client: Any
) -> None:
    """A counter added to ``metrics()`` without a place in the table would vanish from the scrape."""
    from gateway.prometheus import _kind, _series

    store = RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}")
    producer = HybridProducer(kafka.producer_config(), stores={"redis": store})
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    carried_by_histograms = re.compile(r"^(store\.put\.ms|last_(\w+_)?latency_ms)$")
    try:
        for obj in (producer, consumer, store):
            lost = [k for k in obj.metrics() if _series(_kind(obj), k) is None and not carried_by_histograms.match(k)]
            assert lost == [], (_kind(obj), lost)
        # keys that appear only once their event happened
        for key in ("peer.bakdata.messages", "peer.errors", "bad.segments.as.payload", "dropped.evicted"):
            assert _series("consumer", key) is not None, key
    finally:
        consumer.close()


# families that appear only once their event happened (a peer's record, an evicted message...)
EVENT_ONLY = {
    "gateway_producer_store_kafka_bytes_total",
    "gateway_consumer_dropped_messages_total",
    "gateway_consumer_peer_messages_total",
    "gateway_consumer_peer_errors_total",
    "gateway_consumer_bad_segments_as_payload_total",
    "gateway_librdkafka_consumer_lag",
}


def test_each_family_has_one_meaning_counters_agree_and_librdkafka_statistics_are_exported(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: Any
) -> None:
    store = RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}")
    policy = SizeThresholdPolicy(reference_above=2_000_000, store="redis")
    writer_stats, reader_stats = LibrdkafkaStatistics(), LibrdkafkaStatistics()
    every = {"statistics.interval.ms": 100}
    producer = HybridProducer(
        {**kafka.producer_config(), **every, "stats_cb": writer_stats}, policy=policy, stores={"redis": store}
    )
    producer.produce(topic, payload(3_000_000, 7), key=b"ref")  # one reference write
    assert producer.flush(60) == 0
    consumer = HybridConsumer({**consumer_config(), **every, "stats_cb": reader_stats}, stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 1)
    assert len(got) == 1 and not errors
    deadline = time.monotonic() + 20
    while (writer_stats.latest() is None or reader_stats.latest() is None) and time.monotonic() < deadline:
        producer.poll(0.1)  # statistics arrive through the clients' callbacks, served by poll
        consumer.poll(0.1)
    try:
        text = _scrape(
            {"orders": producer, "reader": consumer, "redis": store},
            {"orders": writer_stats, "reader": reader_stats},
        )
    finally:
        consumer.close()
        producer.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    types = {n.removesuffix("_total"): k for n, k in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE)}

    def value(sample_name: str, **labels: str) -> float:
        return sum(
            s.value
            for f in families.values()
            for s in f.samples
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    # every documented family is in the scrape (unless its event did not happen), with its type and labels
    for spec in METRICS:
        name = spec.name.removesuffix("_total")
        if spec.name in EVENT_ONLY:
            continue
        assert types.get(name) == spec.kind, spec.name
        samples = [s for s in families[name].samples if not s.name.endswith(("_bucket", "_created"))]
        assert samples, spec.name
        for sample in samples:
            assert set(sample.labels) - {"le"} == set(spec.labels), (spec.name, sample.labels)
    # one meaning per family: no family keeps an "event" label a sum() would mix
    assert not [n for n in types if n.endswith("_events")] and not re.search(r'event="', text)
    # consistent counters: the reference write marked its payload pending once, the delivery cleared it
    assert value("gateway_store_pending_marked_total", store="redis") == 1
    assert value("gateway_store_pending_cleared_total", store="redis") == 1
    assert value("gateway_store_operations_total", store="redis", op="put") == 1
    assert value("gateway_consumer_resolver_fetches_total", client="reader") == 1
    assert value("gateway_consumer_resolver_errors_total", client="reader") == 0
    # librdkafka's statistics: bytes on the wire, queues, each broker's round trip
    assert value("gateway_librdkafka_tx_bytes_total", client="orders") > 0
    assert value("gateway_librdkafka_rx_bytes_total", client="reader") > 0
    assert types["gateway_librdkafka_queue_messages"] == "gauge"
    rtts = [s for s in families["gateway_librdkafka_broker_rtt_seconds"].samples if s.labels["client"] == "orders"]
    assert rtts and all(0 <= s.value < 60 for s in rtts), "seconds, not microseconds"
