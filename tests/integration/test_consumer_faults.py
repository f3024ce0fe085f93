"""Consumer defects of issue 13 that cross Kafka: each test failed before its fix.

Real broker (or the librdkafka mock) and a real redis-server; no fakes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from gateway import HybridConsumer
from gateway.consumer._errors import DLQ_ERROR_HEADER, DLQ_OFFSET_HEADER, DLQ_TOPIC_HEADER
from gateway.errors import GatewayError, InvalidSegmentError, PayloadNotFoundError
from gateway.protocol.envelope import ENVELOPE_HEADER, Envelope, encode_envelope, envelope_header
from gateway.protocol.headers import LM_HEADER
from gateway.testing import KafkaService
from stores import RedisStore
from tests.helpers import consume_all, payload, segments
from tests.kafkautil import produce_records, read_partition


@pytest.fixture
def redis_store(redis_client: redis.Redis) -> RedisStore:
    return RedisStore(redis_client, prefix=f"gw{uuid.uuid4().hex[:6]}")


@pytest.fixture
def second_topic(kafka: KafkaService) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(name, partitions=1)
    yield name
    kafka.delete_topic(name)


def missing_envelope(store: RedisStore, topic: str) -> bytes:
    """A well-formed envelope whose payload is gone (expired, swept, deleted by someone else)."""
    data = payload(2000)
    message_id = uuid.uuid4()
    locator = store.put(topic, message_id, data)
    store.delete(locator)
    return encode_envelope(Envelope.for_payload(data, store="redis", locator=locator, message_id=message_id))


def drain(consumer: HybridConsumer, seconds: float = 2.0) -> list[Any]:
    """What else the consumer hands out within ``seconds`` (errors included)."""
    out: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            msg = consumer.poll(0.2)
        except GatewayError as exc:
            out.append(exc)
            continue
        if msg is not None and msg.error() is None:
            out.append(msg)
    return out


def committed(consumer: HybridConsumer, topic: str) -> int:
    return int(consumer.committed_safe_offsets([TopicPartition(topic, 0)], timeout=10)[0].offset)


def test_tombstone_with_unreadable_lm_header_raises_invalid_segment_with_its_record(
    kafka: KafkaService, topic: str, consumer_config: Any
) -> None:
    """Defect 4: it raised HeaderFormatError without ``kafka_message`` and was not counted."""
    produce_records(
        kafka.producer_config(),
        [
            {"topic": topic, "partition": 0, "key": b"dead", "value": None, "headers": [(LM_HEADER, b"\x01\x02")]},
            {"topic": topic, "partition": 0, "key": b"next", "value": b"next"},
        ],
    )
    consumer = HybridConsumer(consumer_config(**{"enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, errors = consume_all(consumer, 2)
        assert [type(e) for e in errors] == [InvalidSegmentError]
        assert errors[0].kafka_message is not None and errors[0].kafka_message.key() == b"dead"
        assert [m.value() for m in got] == [b"next"]
        assert consumer.metrics()["invalid.records"] == 1
    finally:
        consumer.close()


def test_a_topic_and_its_mirror_each_deliver_their_chunked_message(
    kafka: KafkaService, topic: str, second_topic: str, consumer_config: Any
) -> None:
    """Defect 6: the same message id in two topics was matched across them; one copy expired unseen.

    Pausing makes the order deterministic: the original's first two segments, then the whole
    mirror, then the original's last segment.
    """
    value = payload(30_000)
    parts = segments(value, 10_000)

    def records(name: str, chosen: list[tuple[bytes | None, Any]]) -> list[dict[str, Any]]:
        return [{"topic": name, "partition": 0, "key": b"k", "value": v, "headers": h} for v, h in chosen]

    produce_records(kafka.producer_config(), records(topic, parts[:2]) + records(second_topic, parts))
    original, mirror = TopicPartition(topic, 0, OFFSET_BEGINNING), TopicPartition(second_topic, 0, OFFSET_BEGINNING)
    consumer = HybridConsumer(consumer_config(**{"enable.auto.commit": False}))
    try:
        consumer.assign([original, mirror])
        consumer.pause([mirror])
        deadline = time.monotonic() + 30
        while consumer.metrics()["segments"] < 2 and time.monotonic() < deadline:
            assert consumer.poll(0.2) is None
        consumer.pause([original])
        consumer.resume([mirror])
        got, errors = consume_all(consumer, 1, timeout=30)
        assert not errors and [(m.topic(), m.value()) for m in got] == [(second_topic, value)]
        produce_records(kafka.producer_config(), records(topic, parts[2:]))
        consumer.resume([original])
        got, errors = consume_all(consumer, 1, timeout=30)
        assert not errors and [(m.topic(), m.value()) for m in got] == [(topic, value)]
        assert consumer.metrics()["assembler.incomplete.messages"] == 0
    finally:
        consumer.close()


def test_commit_message_never_commits_past_an_unresolved_record(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_store: RedisStore
) -> None:
    """Defect 8: ``commit(message=)`` after each message released every earlier hold (49 of 49 lost)."""
    produce_records(
        kafka.producer_config(),
        [
            {
                "topic": topic,
                "partition": 0,
                "key": b"gone",
                "value": missing_envelope(redis_store, topic),
                "headers": [envelope_header()],
            },
            {"topic": topic, "partition": 0, "key": b"a", "value": b"a"},
            {"topic": topic, "partition": 0, "key": b"b", "value": b"b"},
        ],
    )
    consumer = HybridConsumer(consumer_config(**{"enable.auto.commit": False}), stores={"redis": redis_store})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, errors = consume_all(consumer, 3)
        assert [type(e) for e in errors] == [PayloadNotFoundError]
        for msg in got:  # the usual loop: commit each message received
            consumer.commit(message=msg, asynchronous=False)
        assert committed(consumer, topic) == 0, "the unresolved record at offset 0 is read again after a restart"
        consumer.commit(message=errors[0].kafka_message, asynchronous=False)  # the application took it on
        consumer.commit(message=got[-1], asynchronous=False)
        assert committed(consumer, topic) == 3
    finally:
        consumer.close()


def test_skip_policy_passes_a_poison_record_over_counted_and_logged_once(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect 8: one unresolvable record pinned the partition's commits for good."""
    produce_records(
        kafka.producer_config(),
        [
            {
                "topic": topic,
                "partition": 0,
                "key": b"gone",
                "value": missing_envelope(redis_store, topic),
                "headers": [envelope_header()],
            },
            {"topic": topic, "partition": 0, "key": b"after", "value": b"after"},
        ],
    )
    conf = consumer_config(
        **{"enable.auto.commit": False, "reference.error.policy": "skip", "reference.error.max.attempts": 3}
    )
    consumer = HybridConsumer(conf, stores={"redis": redis_store})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        with caplog.at_level(logging.WARNING, logger="gateway"):
            got, errors = consume_all(consumer, 1)
            assert not errors and [m.value() for m in got] == [b"after"]
            assert drain(consumer, 1.0) == []
        skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
        assert len(skipped) == 1 and "PayloadNotFoundError" in skipped[0].getMessage()
        metrics = consumer.metrics()
        assert metrics["reference.skipped"] == 1 and metrics["reference.errors"] == 1
        consumer.commit(asynchronous=False)
        assert committed(consumer, topic) == 2
    finally:
        consumer.close()


def test_dead_letter_policy_writes_the_record_with_its_headers_then_goes_on(
    kafka: KafkaService, topic: str, second_topic: str, consumer_config: Any, redis_store: RedisStore
) -> None:
    envelope = missing_envelope(redis_store, topic)
    produce_records(
        kafka.producer_config(),
        [
            {
                "topic": topic,
                "partition": 0,
                "key": b"gone",
                "value": envelope,
                "headers": [envelope_header(), ("trace", b"t1")],
            },
            {"topic": topic, "partition": 0, "key": b"after", "value": b"after"},
        ],
    )
    conf = consumer_config(
        **{
            "enable.auto.commit": False,
            "reference.error.policy": "dead-letter",
            "reference.dead.letter.topic": second_topic,
        }
    )
    consumer = HybridConsumer(conf, stores={"redis": redis_store})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, errors = consume_all(consumer, 1)
        assert not errors and [m.value() for m in got] == [b"after"]
        assert consumer.metrics()["reference.dead.lettered"] == 1
        consumer.commit(asynchronous=False)
        assert committed(consumer, topic) == 2
    finally:
        consumer.close()
    (dead,) = read_partition(kafka.consumer_config(), second_topic, 0, 1)
    headers = dict(dead.headers())
    assert dead.key() == b"gone" and dead.value() == envelope
    assert ENVELOPE_HEADER in headers and headers["trace"] == b"t1"
    assert headers[DLQ_TOPIC_HEADER] == topic.encode() and headers[DLQ_OFFSET_HEADER] == b"0"
    assert b"PayloadNotFoundError" in headers[DLQ_ERROR_HEADER]


def test_expiry_warnings_are_rate_limited_and_counted(
    kafka: KafkaService, topic: str, consumer_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect 8: one WARNING line per expired message (9 000 lines in one run)."""
    records = [
        {
            "topic": topic,
            "partition": 0,
            "key": b"k",
            "value": segments(payload(3000, i), 1000)[0][0],
            "headers": segments(payload(3000, i), 1000)[0][1],
        }
        for i in range(30)
    ]
    records += [{"topic": topic, "partition": 0, "key": b"p", "value": b"plain"} for _ in range(5)]
    produce_records(kafka.producer_config(), records)
    conf = consumer_config(**{"enable.auto.commit": False, "message.assembler.expiration.offset.gap": 1})
    consumer = HybridConsumer(conf)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        with caplog.at_level(logging.WARNING, logger="gateway"):
            got, errors = consume_all(consumer, 5)
        assert not errors and len(got) == 5
        lines = [r for r in caplog.records if "dropped" in r.getMessage()]
        metrics = consumer.metrics()
        assert metrics["dropped.expired"] == 30
        assert len(lines) == 1
        assert metrics["warnings.suppressed"] == 29
    finally:
        consumer.close()


def test_payloads_fetched_ahead_for_duplicates_after_a_restart_are_released(
    kafka: KafkaService, topic: str, consumer_config: Any, redis_store: RedisStore
) -> None:
    """Defect 2: payloads fetched ahead for records filtered as duplicates held the budget for good.

    A chunked message left incomplete keeps the committed safe offset at its first segment, so the
    second consumer re-reads the ten references delivered before and filters them.
    """
    size = 100_000

    def envelope(i: int) -> dict[str, Any]:
        data = payload(size, i)
        message_id = uuid.uuid4()
        locator = redis_store.put(topic, message_id, data)
        value = encode_envelope(Envelope.for_payload(data, store="redis", locator=locator, message_id=message_id))
        return {"topic": topic, "partition": 0, "key": f"r{i}".encode(), "value": value, "headers": [envelope_header()]}

    first_segment = segments(payload(30_000), 10_000)[0]
    produce_records(
        kafka.producer_config(),
        [
            {"topic": topic, "partition": 0, "key": b"x", "value": first_segment[0], "headers": first_segment[1]},
            *(envelope(i) for i in range(10)),
        ],
    )
    conf = consumer_config(**{"enable.auto.commit": False, "reference.fetch.budget.bytes": 3 * size})
    group = conf["group.id"]
    first = HybridConsumer(conf, stores={"redis": redis_store})
    try:
        first.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, errors = consume_all(first, 10)
        assert not errors and len(got) == 10
        first.commit(asynchronous=False)
        assert committed(first, topic) == 0, "the incomplete message keeps the safe offset at its first segment"
    finally:
        first.close()
    produce_records(kafka.producer_config(), [envelope(i) for i in range(10, 20)])
    second = HybridConsumer(
        consumer_config(group, **{"enable.auto.commit": False, "reference.fetch.budget.bytes": 3 * size}),
        stores={"redis": redis_store},
    )
    try:
        second.subscribe([topic])
        got, errors = consume_all(second, 10)
        assert not errors and [m.key() for m in got] == [f"r{i}".encode() for i in range(10, 20)]
        metrics = second.metrics()
        assert metrics["duplicates.filtered"] == 10
        assert metrics["resolver.ahead.bytes"] == 0, "nothing fetched ahead is left behind"
        assert metrics["resolver.prefetched"] > 10, "the new references were fetched ahead too"
    finally:
        second.close()
