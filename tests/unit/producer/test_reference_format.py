"""``reference.format=bakdata|aws`` in the producer: the writer's records, rollback and marks, routes, refusals."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError

from gateway import HybridProducer, SizeThresholdPolicy
from gateway.errors import ReferenceFormatError
from gateway.health import StoreHealth
from gateway.policy import Route
from gateway.producer._config import parse_producer_config
from gateway.producer._metrics import ProducerMetrics
from gateway.protocol.envelope import ENVELOPE_HEADER
from gateway.protocol.peers import BAKDATA_VALUE_HEADER
from gateway.protocol.peers.pointer_formats import AWS_POINTER_CLASS, ReferenceFormat, is_pointer_message_id
from gateway.testing.memory_store import MemoryStore
from tests.unit.fake_clock import ManualClock
from tests.unit.producer.reference.test_writer import Sent, message

NO_BROKER: dict[str, Any] = {"message.timeout.ms": 200, "large.message.compaction.check": False}


class S3LikeStore(MemoryStore):
    """A memory store whose locators are S3's, ``s3://<bucket>/gw/<topic>/<id>``, as a pointer needs."""

    scheme = "s3"
    bucket = "bucket-a"

    def put(self, topic: str, message_id: uuid.UUID, payload: Any, **kwargs: Any) -> str:
        inner = super().put(topic, message_id, payload, **kwargs)
        locator = f"s3://{self.bucket}/gw/{inner}"
        for table in (self.payloads, self.written_ms, self.pending):
            if inner in table:
                table[locator] = table.pop(inner)  # type: ignore[attr-defined]
        return locator


def _writer(fmt: ReferenceFormat) -> tuple[Any, Sent, S3LikeStore]:
    from gateway.producer.reference.writer import ReferenceWriter

    store, sent = S3LikeStore(name="s3"), Sent()
    health = {"s3": StoreHealth(2, 30_000, 5_000)}
    writer = ReferenceWriter(
        {"s3": store},
        health,
        sent,
        fallback_cap=0,
        metrics=ProducerMetrics(),
        clock=ManualClock().clock(),
        send_chunked=sent.chunked.append,
        reference_format=fmt,
    )
    return writer, sent, store


def test_the_reference_route_writes_a_bakdata_pointer_with_the_payload_stored_as_it_is() -> None:
    writer, sent, store = _writer(ReferenceFormat.BAKDATA)
    writer.send(Route.reference("s3"), False, message(b"payload bytes", key=b"k", headers=[("h", b"1")]))
    writer.drain()
    [(topic, kwargs)] = sent.records
    [locator] = store.payloads
    assert topic == "topic" and kwargs["value"] == locator.encode() and kwargs["key"] == b"k"
    assert kwargs["headers"] == [("h", b"1"), (BAKDATA_VALUE_HEADER, b"\x01")]  # no envelope header
    assert not any(name == ENVELOPE_HEADER for name, _ in kwargs["headers"])
    assert store.payloads[locator] == b"payload bytes"
    assert is_pointer_message_id(uuid.UUID(locator.rpartition("/")[2]))
    assert list(store.pending) == [locator]  # journalled until Kafka acknowledges the pointer
    sent.report(0, None)
    writer.clear_acked_marks()
    assert store.pending == {} and store.payloads[locator] == b"payload bytes"


def test_a_refused_pointer_record_rolls_the_object_back() -> None:
    writer, sent, store = _writer(ReferenceFormat.AWS)
    writer.send(Route.reference("s3"), False, message(b"text"))
    writer.drain()
    [(_, kwargs)] = sent.records
    [locator] = store.payloads
    key = locator.removeprefix("s3://bucket-a/")
    assert json.loads(kwargs["value"]) == [AWS_POINTER_CLASS, {"s3BucketName": "bucket-a", "s3Key": key}]
    sent.report(0, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert store.payloads == {} and store.pending == {}


def test_the_key_is_read_in_the_existing_manner() -> None:
    assert parse_producer_config({})[0].reference_format is ReferenceFormat.GATEWAY
    settings, rest = parse_producer_config({"reference.format": " AWS "})
    assert settings.reference_format is ReferenceFormat.AWS and "reference.format" not in rest
    with pytest.raises(ValueError, match=r"reference.format must be one of gateway, bakdata, aws, got 'linkedin'"):
        parse_producer_config({"reference.format": "linkedin"})


def test_the_producer_refuses_at_construction_what_the_format_cannot_carry() -> None:
    policy = SizeThresholdPolicy(reference_above=100, store="s3")
    with pytest.raises(ReferenceFormatError, match=r"store 's3' .MemoryStore. is not one its reader fetches from"):
        HybridProducer(
            {**NO_BROKER, "reference.format": "bakdata"}, policy=policy, stores={"s3": MemoryStore(name="s3")}
        )
    with pytest.raises(ReferenceFormatError, match=r"with reference.compression=zstd"):
        HybridProducer(
            {**NO_BROKER, "reference.format": "aws", "reference.compression": "zstd"},
            policy=policy,
            stores={"s3": S3LikeStore(name="s3")},
        )


def test_what_the_policy_would_chunk_goes_by_reference_and_a_forced_chunk_is_refused() -> None:
    store = S3LikeStore(name="s3")
    policy = SizeThresholdPolicy(reference_above=50_000_000, store="s3")
    conf = {**NO_BROKER, "reference.format": "bakdata", "reference.write.window": 1}
    producer = HybridProducer(conf, policy=policy, stores={"s3": store})
    try:
        assert producer.route_for("t", 300) == Route.plain()
        assert producer.route_for("t", 2_000_000) == Route.reference("s3")  # the policy said chunked
        with pytest.raises(ReferenceFormatError, match="route=chunked"):
            producer.produce("t", b"x" * 10, route="chunked")
        assert store.payloads == {}
    finally:
        producer.close(0)
    gateway = HybridProducer(NO_BROKER, policy=policy, stores={"s3": store})
    try:
        assert gateway.route_for("t", 2_000_000) == Route.chunked()  # the default format is unchanged
    finally:
        gateway.close(0)


def test_aws_refuses_a_binary_payload_before_the_store_write() -> None:
    store = S3LikeStore(name="s3")
    conf = {**NO_BROKER, "reference.format": "aws"}
    producer = HybridProducer(conf, policy=SizeThresholdPolicy(reference_above=10, store="s3"), stores={"s3": store})
    try:
        with pytest.raises(ReferenceFormatError, match="not UTF-8 text"):
            producer.produce("t", bytes(range(256)))
        assert store.payloads == {} and store.calls == []
    finally:
        producer.close(0)
