"""Plain confluent-kafka helpers for integration tests (no gateway code on the reading side)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def produce_records(conf: dict[str, Any], records: list[dict[str, Any]], timeout: float = 60) -> list[Any]:
    """Produce raw records and return each delivery's (err, partition, offset); raises on failure."""
    producer = Producer(conf)
    reports: list[Any] = [None] * len(records)
    for i, rec in enumerate(records):

        def report(err: Any, msg: Any, i: int = i) -> None:
            reports[i] = (err, msg.partition(), msg.offset())

        producer.produce(on_delivery=report, **rec)
        producer.poll(0)
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} records not delivered"
    errors = [r for r in reports if r is None or r[0] is not None]
    assert not errors, errors
    return reports


def read_partition(conf: dict[str, Any], topic: str, partition: int, count: int, timeout: float = 60) -> list[Any]:
    """Read ``count`` records from the start of one partition with assign() (no group join)."""
    consumer = Consumer({**conf, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consume error: {msg.error()}")
            out.append(msg)
    finally:
        consumer.close()
    assert len(out) == count, f"read {len(out)} of {count} records"
    return out
