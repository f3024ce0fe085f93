"""poll() hands out a batch proven plain by count alone: what it handed out is still exactly what
every offset question answers, and what changes a partition drops the proof.

Batches of 20 records (``fetch.batch.records``): the first record of a partition takes the full
path, which loads its commit, so the batches after the first one are proven.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Message, Producer, TopicPartition
from confluent_kafka.error import ValueDeserializationError

from gateway import HybridConsumer
from gateway.core.inbox_states import InboxState
from gateway.testing import KafkaService

RECORDS = 100
BATCH = 20


def _produce(kafka: KafkaService, topic: str, values: list[bytes] | None = None) -> None:
    producer = Producer(kafka.producer_config())
    for value in values or [b"plain %d" % i for i in range(RECORDS)]:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _consumer(kafka: KafkaService, topic: str, group: str | None = None, **conf: Any) -> HybridConsumer:
    consumer = HybridConsumer(
        kafka.consumer_config(group, **{"fetch.batch.records": BATCH, "enable.auto.commit": False, **conf})
    )
    consumer.subscribe([topic])
    return consumer


def _poll(consumer: HybridConsumer, n: int) -> list[int]:
    """The offsets of the next ``n`` messages; a pause after the first lets librdkafka prefetch the rest."""
    out: list[int] = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            out.append(msg.offset())
            if len(out) == 1:
                time.sleep(1)
    assert len(out) == n, f"{len(out)} of {n} messages"
    return out


def _proven(consumer: HybridConsumer) -> bool:
    """Whether the path under test is the one handing out records now (else the test proves nothing)."""
    return consumer._inbox.counted.left > 0


def _committed(kafka: KafkaService, topic: str, group: str) -> int:
    with HybridConsumer(kafka.consumer_config(group)) as reader:
        return int(reader.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)


def test_commit_position_and_safe_offsets_count_what_poll_handed_out(kafka: KafkaService, topic: str) -> None:
    _produce(kafka, topic)
    group = f"proven-{topic}"
    consumer = _consumer(kafka, topic, group)
    assert _poll(consumer, 30) == list(range(30))
    assert _proven(consumer)
    tp = [TopicPartition(topic, 0)]
    assert consumer.position(tp)[0].offset == 30
    assert [o.offset for o in consumer.safe_offsets()] == [30]
    assert consumer.safe_offset(tp[0]) == 30
    assert consumer.metrics()["plain.messages"] == 30
    assert consumer.commit(asynchronous=False) is not None
    assert _proven(consumer), "a commit keeps the proof"
    assert _poll(consumer, 15) == list(range(30, 45))
    consumer.commit(asynchronous=False)
    consumer.close()
    assert _committed(kafka, topic, group) == 45
    with _consumer(kafka, topic, group) as again:  # resumes exactly after what was handed out
        assert _poll(again, RECORDS - 45) == list(range(45, RECORDS))


def test_close_auto_commits_what_poll_handed_out(kafka: KafkaService, topic: str) -> None:
    _produce(kafka, topic)
    group = f"proven-close-{topic}"
    consumer = _consumer(kafka, topic, group, **{"enable.auto.commit": True})
    assert _poll(consumer, 37) == list(range(37))
    assert _proven(consumer)
    consumer.close()
    assert _committed(kafka, topic, group) == 37


def test_seek_back_inside_a_proven_batch_delivers_from_there(kafka: KafkaService, topic: str) -> None:
    _produce(kafka, topic)
    consumer = _consumer(kafka, topic)
    assert _poll(consumer, 27) == list(range(27))
    assert _proven(consumer)
    consumer.seek(TopicPartition(topic, 0, 22))
    assert not _proven(consumer)
    assert _poll(consumer, RECORDS - 22) == list(range(22, RECORDS))
    consumer.close()


def test_consume_goes_on_where_poll_left_a_proven_batch(kafka: KafkaService, topic: str) -> None:
    _produce(kafka, topic)
    consumer = _consumer(kafka, topic)
    offsets = _poll(consumer, 25)
    assert _proven(consumer)
    offsets += [m.offset() for m in consumer.consume(3, 5)]  # part of the batch
    while len(offsets) < RECORDS:
        offsets += [m.offset() for m in consumer.consume(500, 1)]
    assert offsets == list(range(RECORDS))
    assert consumer.metrics()["plain.messages"] == RECORDS
    consumer.close()


@pytest.mark.parametrize("first_polls, per_call", [(25, 5), (0, BATCH)], ids=["poll-then-consume", "consume-only"])
def test_a_refused_value_inside_a_proven_batch_keeps_the_order(
    kafka: KafkaService, topic: str, first_polls: int, per_call: int
) -> None:
    values = [b"%d" % i for i in range(RECORDS)]
    values[33] = b"not a number"
    _produce(kafka, topic, values)

    def to_int(value: bytes | None, ctx: Any) -> int:
        return int(value or b"")

    consumer = _consumer(kafka, topic, **{"value.deserializer": to_int})
    seen = _poll(consumer, first_polls) if first_polls else []
    assert not first_polls or _proven(consumer)
    refused: list[Message] = []
    deadline = time.monotonic() + 60
    while len(seen) < RECORDS and time.monotonic() < deadline:
        try:
            seen += [m.offset() for m in consumer.consume(per_call, 1)]  # a refusal may leave part of a batch
        except ValueDeserializationError as exc:
            assert exc.kafka_message is not None
            refused.append(exc.kafka_message)
            seen.append(exc.kafka_message.offset())
        if not first_polls and len(seen) == 1:
            time.sleep(1)  # librdkafka prefetches the rest: the batches after the first are proven
    assert [m.offset() for m in refused] == [33]
    assert seen == list(range(RECORDS))
    consumer.close()


def test_consume_after_poll_emptied_a_proven_batch_commits_everything_delivered(
    kafka: KafkaService, topic: str
) -> None:
    _produce(kafka, topic)
    group = f"proven-end-{topic}"
    consumer = _consumer(kafka, topic, group)
    assert _poll(consumer, 2 * BATCH) == list(range(2 * BATCH))  # the second batch proven, all of it handed out
    assert consumer._inbox.state is InboxState.COUNTED and consumer._inbox.counted.left == 0
    got: list[int] = []
    while len(got) < BATCH:
        got += [m.offset() for m in consumer.consume(BATCH, 1)]
    assert got == list(range(2 * BATCH, 3 * BATCH))
    consumer.commit(asynchronous=False)
    assert consumer.position([TopicPartition(topic, 0)])[0].offset == 3 * BATCH
    consumer.close()
    assert _committed(kafka, topic, group) == 3 * BATCH


@pytest.mark.parametrize("first_polls, per_call", [(25, 15), (0, BATCH)], ids=["poll-then-consume", "consume-only"])
def test_a_commit_after_a_refused_value_never_covers_what_consume_kept_back(
    kafka: KafkaService, topic: str, first_polls: int, per_call: int
) -> None:
    """consume() returns what came before a refused value and keeps the rest for its next calls; an
    application that commits after catching the error, then stops, must find those again."""
    values = [b"%d" % i for i in range(RECORDS)]
    values[33] = b"not a number"
    _produce(kafka, topic, values)

    def to_int(value: bytes | None, ctx: Any) -> int:
        return int(value or b"")

    group = f"refused-{topic}"
    consumer = _consumer(kafka, topic, group, **{"value.deserializer": to_int})
    seen = _poll(consumer, first_polls) if first_polls else []
    deadline = time.monotonic() + 60
    while 33 not in seen and time.monotonic() < deadline:
        try:
            seen += [m.offset() for m in consumer.consume(per_call, 1)]
        except ValueDeserializationError as exc:
            assert exc.kafka_message is not None
            seen.append(exc.kafka_message.offset())
            consumer.commit(asynchronous=False)  # the error is handled: commit what was received
        if not first_polls and len(seen) == 1:
            time.sleep(1)  # librdkafka prefetches the rest: the batches after the first are proven
    assert seen == list(range(34)), "received up to the refused value, in order"
    assert consumer._inbox.kept, "consume() kept messages behind the refused one (else the test proves nothing)"
    consumer.close()  # the application stops before taking them
    assert _committed(kafka, topic, group) <= 34, "a commit covered messages the application never received"
    restarted = _consumer(kafka, topic, group)
    again: list[int] = []
    while (not again or again[-1] < RECORDS - 1) and time.monotonic() < deadline:
        again += [m.offset() for m in restarted.consume(RECORDS, 1)]
    restarted.close()
    assert set(range(34, RECORDS)) <= set(again), "the messages consume() kept back were lost"
