"""OpenTelemetry spans: one per logical message on each side, joined by the context in its headers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

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
            assert span.attributes["gateway.store"] == ("redis" if route == "reference" else "")
        assert out.attributes["messaging.kafka.offset"] >= 0  # set by the delivery report
        assert (
            back.attributes["messaging.destination.partition.id"]
            == out.attributes["messaging.destination.partition.id"]
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
