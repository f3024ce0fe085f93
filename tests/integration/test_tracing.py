"""OpenTelemetry spans: one per logical message on each side, joined by the context in its headers."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy, tracing
from gateway.protocol.envelope import ENVELOPE_HEADER
from gateway.testing import KafkaService
from stores import RedisStore
from tests.helpers import consume_all, payload

SIZES = {"plain": 2_000, "chunked": 1_500_000, "reference": 3_000_000}

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The SDK for this test only: the global provider, settable once per process, stays untouched
    so that other tests see no trace headers."""
    tracing.use_tracer_provider(_PROVIDER)
    _EXPORTER.clear()
    try:
        yield _EXPORTER
    finally:
        tracing.use_tracer_provider(None)
        _EXPORTER.clear()


def test_each_route_has_linked_producer_and_consumer_spans(
    spans: InMemorySpanExporter, kafka: KafkaService, topic: str, consumer_config: Any, redis_client: Any
) -> None:
    store = RedisStore(redis_client, prefix=f"gwtr{uuid.uuid4().hex[:6]}")
    policy = SizeThresholdPolicy(reference_above=2_000_000, store="redis")
    producer = HybridProducer(kafka.producer_config(), policy=policy, stores={"redis": store})
    for i, size in enumerate(SIZES.values()):
        producer.produce(topic, payload(size, i), key=b"k", headers=[("app", b"1")])
    assert producer.flush(60) == 0
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(SIZES))
    consumer.close()
    assert not errors and len(got) == len(SIZES)

    finished = spans.get_finished_spans()
    sent = {s.attributes["gateway.route"]: s for s in finished if s.kind is SpanKind.PRODUCER}
    received = {s.attributes["gateway.route"]: s for s in finished if s.kind is SpanKind.CONSUMER}
    assert set(sent) == set(received) == set(SIZES), finished
    for route, size in SIZES.items():
        out, back = sent[route], received[route]
        assert out.context.trace_id == back.context.trace_id, route
        assert back.parent is not None and back.parent.span_id == out.context.span_id, route
        for span in (out, back):
            assert span.attributes["messaging.system"] == "kafka"
            assert span.attributes["messaging.destination.name"] == topic
            assert span.attributes["messaging.message.body.size"] == size
            assert span.attributes.get("gateway.store") == ("redis" if route == "reference" else None)
        assert out.attributes["messaging.kafka.message.offset"] >= 0  # set by the delivery report (older names)
        assert (
            back.attributes["messaging.kafka.destination.partition"]
            == out.attributes["messaging.kafka.destination.partition"]
        )
    assert sent["chunked"].attributes["gateway.segments"] == received["chunked"].attributes["gateway.segments"] >= 2
    # the application's own headers arrive untouched beside the trace context
    for msg in got:
        names = [name for name, _ in msg.headers()]
        assert names[0] == "app" and names.count("traceparent") == 1 and ENVELOPE_HEADER not in names


def test_a_callers_traceparent_becomes_the_parent(spans: InMemorySpanExporter, kafka: KafkaService, topic: str) -> None:
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    producer = HybridProducer(kafka.producer_config())
    producer.produce(topic, b"x", headers=[("traceparent", caller.encode())])
    assert producer.flush(30) == 0
    (span,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert f"{span.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "b7ad6b7169203331"


def test_without_a_tracer_provider_no_header_is_added(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    """The API alone (no SDK configured) records nothing and writes no trace header."""
    producer = HybridProducer(kafka.producer_config())
    producer.produce(topic, b"x", headers=[("app", b"1")])
    assert producer.flush(30) == 0
    consumer = HybridConsumer(consumer_config())
    consumer.subscribe([topic])
    got, _ = consume_all(consumer, 1)
    consumer.close()
    assert [m.headers() for m in got] == [[("app", b"1")]]


def test_a_small_plain_record_without_headers_is_traced_too(
    spans: InMemorySpanExporter, kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    """Such records usually skip the general path; while a provider is set they take it, span and all."""
    with HybridProducer(kafka.producer_config()) as producer:
        producer.produce(topic, b"tiny", partition=0)
        assert producer.flush(30) == 0
    sent = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert [s.attributes["gateway.route"] for s in sent] == ["plain"]
    consumer = HybridConsumer(consumer_config())
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 1)
    consumer.close()
    assert not errors and got[0].value() == b"tiny"
    assert [name for name, _ in got[0].headers()] == ["traceparent"]


# -- messaging conventions: attributes, the process span, errors, metrics (issue 31) ---------------------

OLD_ONLY = {
    "messaging.kafka.destination.partition",
    "messaging.kafka.message.offset",
    "messaging.kafka.consumer.group",
    "messaging.client_id",
    "messaging.operation",
}
NEW_ONLY = {
    "messaging.destination.partition.id",
    "messaging.kafka.offset",
    "messaging.consumer.group.name",
    "messaging.client.id",
    "messaging.operation.name",
}


def _first_message(consumer: HybridConsumer, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            return msg
    pytest.fail("no message arrived")


@pytest.mark.parametrize(
    ("opt_in", "old", "new"), [(None, True, False), ("messaging", False, True), ("http,messaging/dup", True, True)]
)
def test_spans_carry_the_messaging_attributes_with_the_names_opt_in_selects(
    spans: InMemorySpanExporter,
    kafka: KafkaService,
    topic: str,
    consumer_config: Any,
    monkeypatch: pytest.MonkeyPatch,
    opt_in: str | None,
    old: bool,
    new: bool,
) -> None:
    if opt_in is None:
        monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    else:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", opt_in)
    host, port = kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    producer = HybridProducer({**kafka.producer_config(), "client.id": "orders-writer"})
    producer.produce(topic, b"v", key=b"user-42")
    producer.produce(topic, None, key=b"gone")  # a tombstone
    assert producer.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = HybridConsumer({**consumer_config(group), "client.id": "orders-reader"})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 2)
    consumer.close()
    assert not errors and len(got) == 2
    finished = spans.get_finished_spans()
    sent = {s.attributes["messaging.kafka.message.key"]: s for s in finished if s.kind is SpanKind.PRODUCER}
    received = {s.attributes["messaging.kafka.message.key"]: s for s in finished if s.kind is SpanKind.CONSUMER}
    assert set(sent) == set(received) == {"user-42", "gone"}
    for side, client_id in ((sent, "orders-writer"), (received, "orders-reader")):
        for key, span in side.items():
            attrs = dict(span.attributes or {})
            assert attrs["server.address"] == host and attrs["server.port"] == int(port)
            assert attrs.get("messaging.kafka.message.tombstone") is (True if key == "gone" else None)
            names = set(attrs)
            assert bool(names & (OLD_ONLY - {"messaging.kafka.consumer.group"})) is old, names
            assert bool(names & (NEW_ONLY - {"messaging.consumer.group.name"})) is new, names
            if old:
                assert attrs["messaging.client_id"] == client_id
            if new:
                assert attrs["messaging.client.id"] == client_id
                assert isinstance(attrs["messaging.destination.partition.id"], str)
    for span in received.values():
        attrs = dict(span.attributes or {})
        assert attrs.get("messaging.kafka.consumer.group") == (group if old else None)
        assert attrs.get("messaging.consumer.group.name") == (group if new else None)
        assert span.name == (f"process {topic}" if new else f"{topic} process")
    assert sent["user-42"].name == (f"send {topic}" if new else f"{topic} publish")


def test_the_process_span_lasts_while_the_application_holds_the_message(
    spans: InMemorySpanExporter, kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    producer = HybridProducer(kafka.producer_config())
    for value in (b"first", b"second"):
        producer.produce(topic, value, key=value)
    assert producer.flush(30) == 0
    consumer = HybridConsumer(consumer_config())
    consumer.subscribe([topic])
    first = _first_message(consumer)
    held = 0.3
    time.sleep(held)  # the application works on the message
    assert not [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER], "ended before it was done"
    second = _first_message(consumer)  # coming back for more ends the first message's span
    (done,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert done.attributes is not None and done.attributes["messaging.kafka.message.key"] == first.key().decode()
    assert done.end_time is not None and done.start_time is not None
    assert (done.end_time - done.start_time) / 1e9 >= held
    consumer.close()  # and closing ends the last one
    keys = [
        s.attributes["messaging.kafka.message.key"] for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER
    ]
    assert keys == [first.key().decode(), second.key().decode()]


def test_failures_carry_error_type(
    spans: InMemorySpanExporter, kafka: KafkaService, topic: str, consumer_config: Any, redis_client: Any
) -> None:
    producer = HybridProducer(kafka.producer_config())
    with contextlib.suppress(KafkaException):  # refused at once or by its delivery report: the span says which
        producer.produce(topic, b"x", partition=7)  # the topic has one partition
    producer.flush(30)
    (failed,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert failed.attributes is not None and failed.attributes["error.type"] == "_UNKNOWN_PARTITION"
    assert failed.status.status_code is StatusCode.ERROR
    store = RedisStore(redis_client, prefix=f"gwtr{uuid.uuid4().hex[:6]}")
    policy = SizeThresholdPolicy(reference_above=1_000, store="redis")
    with HybridProducer(kafka.producer_config(), policy=policy, stores={"redis": store}) as writer:
        writer.produce(topic, payload(5_000, 1), key=b"lost")
        assert writer.flush(30) == 0
    for locator, _ in store.list_locators(topic):
        store.delete(locator)  # the payload is gone: the reference cannot be resolved
    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 1)
    consumer.close()
    assert not got and [type(e).__name__ for e in errors] == ["PayloadNotFoundError"]
    (unresolved,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert unresolved.attributes is not None and unresolved.attributes["error.type"] == "PayloadNotFoundError"


def test_messaging_client_metrics_count_each_logical_message_once(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    reader = InMemoryMetricReader()
    tracing.use_meter_provider(MeterProvider(metric_readers=[reader]))
    try:
        producer = HybridProducer({**kafka.producer_config(), "max.message.segment.bytes": 100_000})
        for i, size in enumerate((100, 1_000, 350_000)):  # the last one in 4 segments
            producer.produce(topic, payload(size, i), key=f"k{i}".encode())
        assert producer.flush(30) == 0
        consumer = HybridConsumer(consumer_config())
        consumer.subscribe([topic])
        got, errors = consume_all(consumer, 3)
        consumer.close()
    finally:
        tracing.use_meter_provider(None)
    assert not errors and len(got) == 3
    points: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    assert sum(p.value for p in points["messaging.client.sent.messages"]) == 3
    assert sum(p.value for p in points["messaging.client.consumed.messages"]) == 3
    assert sum(p.count for p in points["messaging.client.operation.duration"]) == 3
    assert sum(p.count for p in points["messaging.process.duration"]) == 3
    (sent,) = points["messaging.client.sent.messages"]
    assert sent.attributes["messaging.destination.name"] == topic
    assert sent.attributes["messaging.operation.name"] == "send" and "error.type" not in sent.attributes
    (consumed,) = points["messaging.client.consumed.messages"]
    assert consumed.attributes["messaging.consumer.group.name"]
