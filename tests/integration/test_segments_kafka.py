"""LinkedIn segments built by the codec cross a real Kafka-protocol broker byte-identical."""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from gateway.core.assembler import INCOMPLETE, MessageAssembler
from gateway.protocol import LM_HEADER, split
from gateway.protocol.headers import last_header
from gateway.testing import KafkaService
from tests.assembling import assemble
from tests.helpers import payload
from tests.kafkautil import produce_records, read_partition

SEGMENT = 1_000_000


def _round_trip(kafka: KafkaService, topic: str, consumer_config: Any, size: int, key: bytes | None) -> None:
    value = payload(size, seed=size)
    headers = [("app", b"demo"), ("trace", b"\x00\x01")]
    stamp = int(time.time() * 1000)  # recent: a broker may apply retention.ms to record timestamps
    records = split(topic, 0, stamp, uuid.uuid4(), key, value, SEGMENT, headers)
    assert len(records) == -(-size // SEGMENT)
    conf = kafka.producer_config(**{"message.max.bytes": 1_048_000})
    produce_records(
        conf,
        [
            {
                "topic": r.topic,
                "partition": r.partition,
                "key": r.key,
                "value": bytes(r.value or b""),
                "headers": r.headers,
                "timestamp": r.timestamp,
            }
            for r in records
        ],
    )
    got = read_partition(consumer_config(**{"fetch.max.bytes": 52_428_800}), topic, 0, len(records))
    for sent, msg in zip(records, got, strict=True):
        assert msg.key() == sent.key
        assert msg.value() == bytes(sent.value or b"")
        assert msg.headers() == sent.headers
        assert msg.timestamp()[1] == stamp
    if key is None:
        assert all(m.key() == records[0].key and len(m.key()) == 16 for m in got)
    assembler = MessageAssembler(capacity=64_000_000)
    results = [assemble(assembler, (topic, 0), m.offset(), m.value(), last_header(m.headers(), LM_HEADER)) for m in got]
    assert all(r is INCOMPLETE for r in results[:-1])
    assert hashlib.sha256(results[-1].value or b"").digest() == hashlib.sha256(value).digest()
    assert results[-1].starting_offset == got[0].offset()


def test_4mb_message_in_1mb_segments(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    _round_trip(kafka, topic, consumer_config, 4_000_000, key=b"user-42")


def test_4mb_keyless_message_gets_uuid_key(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    _round_trip(kafka, topic, consumer_config, 4_000_000, key=None)


@pytest.mark.requires("retention", "size_limit")
def test_20mb_message_on_a_broker_with_real_limits(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    _round_trip(kafka, topic, consumer_config, 20_000_000, key=b"big")


@pytest.mark.requires("size_limit")
def test_broker_refuses_oversize_plain_record(kafka: KafkaService, topic: str) -> None:
    producer = Producer(kafka.producer_config(**{"message.max.bytes": 2_000_000}))
    errors: list[Any] = []
    producer.produce(topic, value=b"x" * 1_100_000, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
