"""produce_stream does around a message what produce does: audit counts, the PRODUCER span, the producer's
counters, the delivery report, and the policy's fallback inline where a stream is small enough to have one.

Each stream here goes by reference to a real Redis (or S3 on moto) through Kafka; what produce() records
for the same bytes is the yardstick.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy, tracing
from gateway.auditing import AuditType, CountingAuditor
from gateway.errors import MessageTooLargeError, StreamSourceError, StreamUploadError
from gateway.testing import KafkaService
from gateway.testing.processes import free_port
from stores import RedisStore
from tests.helpers import consume_all, payload, sha

MiB = 1024 * 1024
PART = 5 * MiB
BOUND = 4 * MiB
"""``large.message.max.bytes`` here: the streams of 2 parts and more are above it, so they go up by parts."""

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The SDK for this test only (the global provider stays untouched for other tests)."""
    tracing.use_tracer_provider(_PROVIDER)
    _EXPORTER.clear()
    try:
        yield _EXPORTER
    finally:
        tracing.use_tracer_provider(None)
        _EXPORTER.clear()


@pytest.fixture
def store(redis_client: redis.Redis) -> RedisStore:
    return RedisStore(redis_client, prefix=f"gwsp{uuid.uuid4().hex[:6]}", entry_bytes=3 * MiB)


def producer(kafka: KafkaService, store: Any, **kwargs: Any) -> HybridProducer:
    conf = {"reference.stream.part.bytes": PART, "large.message.max.bytes": BOUND}
    return HybridProducer(
        {**kafka.producer_config(), **conf},
        policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
        stores={"redis": store},
        **kwargs,
    )


def test_a_stream_is_audited_as_produce_audits_the_same_bytes(
    kafka: KafkaService, topic: str, consumer_config: Any, store: RedisStore
) -> None:
    value = payload(2 * PART + 7)
    streamed, produced = CountingAuditor(bucket_ms=60_000), CountingAuditor(bucket_ms=60_000)
    with producer(kafka, store, auditor=streamed) as sending:
        sending.produce_stream(topic, io.BytesIO(value), len(value), key=b"k1", timestamp=1_700_000_000_000)
        assert sending.flush(30) == 0
        assert sending.metrics()["reference.messages"] == 1
    with producer(kafka, store, auditor=produced) as sending:
        sending.produce(topic, value, key=b"k1", timestamp=1_700_000_000_000)
        assert sending.flush(30) == 0
    for kind in (AuditType.ATTEMPT, AuditType.SUCCESS):
        assert streamed.counts(kind) == produced.counts(kind) != {}, kind
    assert streamed.counts(AuditType.FAILURE) == {}
    [(count, size)] = streamed.counts(AuditType.SUCCESS).values()
    assert (count, size) == (1, len(value) + 2)

    consumed = CountingAuditor(bucket_ms=60_000)
    consumer = HybridConsumer(consumer_config(), stores={"redis": store}, auditor=consumed)
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 2, timeout=60)
    consumer.close()
    assert not errors and [sha(m.value()) for m in got] == [sha(value)] * 2
    [(count, size)] = consumed.counts(AuditType.SUCCESS).values()
    assert (count, size) == (2, 2 * (len(value) + 2)), "the consumer audits both as the producers did"


def test_a_failed_stream_is_audited_as_a_failure(kafka: KafkaService, topic: str, store: RedisStore) -> None:
    def broken() -> Iterator[bytes]:
        yield b"x" * PART
        raise OSError("disk gone")

    auditor = CountingAuditor(bucket_ms=60_000)
    with producer(kafka, store, auditor=auditor) as sending, pytest.raises(StreamSourceError):
        sending.produce_stream(topic, broken(), 2 * PART, key=b"k")
    assert sum(c for c, _ in auditor.counts(AuditType.ATTEMPT).values()) == 1
    assert sum(c for c, _ in auditor.counts(AuditType.FAILURE).values()) == 1
    assert auditor.counts(AuditType.SUCCESS) == {}


def test_a_stream_has_produces_span_covering_its_upload(
    spans: InMemorySpanExporter, kafka: KafkaService, topic: str, consumer_config: Any, store: RedisStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    uploads: list[tuple[int, int]] = []
    put_stream = store.put_stream

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.time_ns()
        locator = put_stream(*args, **kwargs)
        uploads.append((started, time.time_ns()))
        return locator

    monkeypatch.setattr(store, "put_stream", timed)
    value = payload(2 * PART + 7)
    with producer(kafka, store) as sending:
        sending.produce_stream(topic, io.BytesIO(value), len(value), key=b"the-key", headers=[("app", b"1")])
        assert sending.flush(30) == 0
    [sent] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    attrs = sent.attributes or {}
    assert attrs["gateway.route"] == "reference" and attrs["gateway.store"] == "redis"
    assert attrs["messaging.message.body.size"] == len(value)
    assert attrs["messaging.kafka.message.key"] == "the-key"
    assert "messaging.kafka.message.tombstone" not in attrs
    assert attrs["messaging.destination.name"] == topic
    [(upload_start, upload_end)] = uploads
    assert sent.start_time is not None and sent.end_time is not None
    assert sent.start_time <= upload_start and upload_end <= sent.end_time, "the span covers the upload"

    consumer = HybridConsumer(consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 1, timeout=60)
    consumer.close()
    assert not errors and sha(got[0].value()) == sha(value)
    [back] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert back.parent is not None and back.parent.span_id == sent.context.span_id
    assert [name for name, _ in got[0].headers()] == ["app", "traceparent"]


def test_a_failed_stream_ends_its_span_with_the_error(
    spans: InMemorySpanExporter, kafka: KafkaService, topic: str, store: RedisStore
) -> None:
    with producer(kafka, store) as sending, pytest.raises(StreamSourceError):
        sending.produce_stream(topic, io.BytesIO(b"short"), 2 * PART)
    [sent] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert sent.status.status_code is StatusCode.ERROR
    assert (sent.attributes or {})["error.type"] == "StreamSizeError"


def test_a_stream_counts_its_bytes_and_reports_its_headers(kafka: KafkaService, topic: str, store: RedisStore) -> None:
    value = payload(2 * PART + 7)
    reports: list[Any] = []
    with producer(kafka, store) as sending:
        sending.produce_stream(
            topic, io.BytesIO(value), len(value), key=b"k", headers=[("app", b"1")],
            on_delivery=lambda err, msg: reports.append((err, msg.value(), msg.headers(), msg.key())),
        )  # fmt: skip
        assert sending.flush(30) == 0
        metrics = sending.metrics()
    assert metrics["reference.messages"] == 1 and metrics["reference.bytes"] == len(value)
    assert reports == [(None, None, [("app", b"1")], b"k")], "the caller's headers, not the envelope's; no value"


def test_within_the_bound_a_stream_keeps_the_fallback_inline(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_client: redis.Redis
) -> None:
    """A stream produce() could carry goes through produce(): its store down, it is sent chunked instead."""
    down = RedisStore(redis.Redis(port=free_port(), socket_connect_timeout=1), prefix="gwdown")
    value = payload(2_000_000)
    with producer(kafka, down) as sending:
        sending.produce_stream(topic, io.BytesIO(value), len(value), key=b"k")
        assert sending.flush(30) == 0
        metrics = sending.metrics()
    assert metrics["fallbacks"] == 1 and metrics["chunked.messages"] == 1 and metrics["reference.messages"] == 0
    consumer = HybridConsumer(consumer_config(), stores={"redis": RedisStore(redis_client, prefix="gwdown")})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 1, timeout=60)
    consumer.close()
    assert not errors and sha(got[0].value()) == sha(value)


def test_above_the_bound_a_failing_store_says_there_is_no_fallback(kafka: KafkaService, topic: str) -> None:
    down = RedisStore(redis.Redis(port=free_port(), socket_connect_timeout=1), prefix="gwdown")
    value = payload(2 * PART)
    with producer(kafka, down) as sending:
        with pytest.raises(StreamUploadError, match="no fallback to the chunked route") as raised:
            sending.produce_stream(topic, io.BytesIO(value), len(value), key=b"k")
        assert f"large.message.max.bytes={BOUND}" in str(raised.value)
        assert sending.flush(30) == 0
        assert sending.metrics()["chunked.messages"] == 0


def test_a_stream_refused_before_its_upload_is_audited_as_a_failure(kafka: KafkaService, topic: str) -> None:
    """Refused by reference.max.payload.bytes before a byte is read: counted as produce counts such a refusal."""
    auditor = CountingAuditor(bucket_ms=60_000)
    unused = RedisStore(redis.Redis(port=free_port(), socket_connect_timeout=1), prefix="gwnever")
    sending = HybridProducer(
        {**kafka.producer_config(), "large.message.max.bytes": BOUND, "reference.max.payload.bytes": 2 * PART},
        policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"),
        stores={"redis": unused},
        auditor=auditor,
    )
    with sending, pytest.raises(MessageTooLargeError, match=r"reference\.max\.payload\.bytes"):
        sending.produce_stream(topic, io.BytesIO(b""), 3 * PART, key=b"k")
    assert [c for c, _ in auditor.counts(AuditType.ATTEMPT).values()] == [1]
    assert [c for c, _ in auditor.counts(AuditType.FAILURE).values()] == [1]
