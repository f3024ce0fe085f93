"""A full assembler buffer pauses partitions instead of dropping a message (issue 39, point 1).

Before: two chunked messages of two partitions that together exceeded the consumer's
``message.assembler.buffer.capacity`` (two 16.5 MB ones against the default 32 MB) were assembled
side by side, the eldest was evicted, and the application saw nothing but ``dropped.evicted == 1``
and a log line. Now the partitions not needed to finish the oldest incomplete message are paused,
sought back and read again once it is done; eviction is left for a message that cannot be finished
within the capacity (segments interleaved beyond it in one partition), which raises
``LargeMessageDroppedError`` by default, stays silent with LinkedIn's
``exception.on.message.dropped=false``, and never lets a commit pass over it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from gateway import HybridConsumer, LargeMessageDroppedError
from gateway.aio import AIOHybridConsumer
from gateway.testing import KafkaService
from tests.helpers import payload, sha
from tests.integration.test_chunked_e2e import plain_record, raw_segments
from tests.kafkautil import produce_records

CAPACITY = 700_000
SIZE = 400_000  # two of them, from two partitions, do not fit side by side
SEGMENT = 40_000
INTERLEAVED = {"message.assembler.buffer.capacity": CAPACITY, "max.partition.fetch.bytes": 50_000}
"""A fetch brings about one segment per partition (as 1 MB does for 16 MB messages): partitions interleave."""
ONE_BATCH_A_SEGMENT = {"batch.size": 1, "enable.idempotence": True}
"""A broker hands out whole record batches: one per segment (and in order) so that fetches interleave."""


def _interleaved(topic: str, partitions: int, per_partition: int) -> tuple[list[dict[str, Any]], dict[bytes, str]]:
    """Chunked messages on every partition, one after the other in each, written round-robin across
    partitions (a producer per partition); their digests by key."""
    digests: dict[bytes, str] = {}
    messages: list[list[dict[str, Any]]] = [[] for _ in range(partitions)]
    for p in range(partitions):
        for i in range(per_partition):
            key = f"m{p}-{i}".encode()
            value = payload(SIZE, p * 100 + i)
            digests[key] = sha(value)
            messages[p] += raw_segments(topic, value, SEGMENT, partition=p, key=key)
    records: list[dict[str, Any]] = []
    while any(messages):
        for parts in messages:
            if parts:
                records.append(parts.pop(0))
    return records, digests


def _read(consumer: HybridConsumer, want: int, use_consume: bool, timeout: float = 120) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        batch = consumer.consume(10, 0.5) if use_consume else [consumer.poll(0.5)]
        got += [m for m in batch if m is not None and m.error() is None]
    return got


@pytest.mark.parametrize("use_consume", [False, True], ids=["poll", "consume"])
def test_partitions_wait_instead_of_evicting_and_every_message_arrives(
    kafka: KafkaService, consumer_config: Callable[..., dict[str, Any]], use_consume: bool
) -> None:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(topic, partitions=3)
    records, digests = _interleaved(topic, 3, 2)  # 2.4 MB against a 0.7 MB buffer
    produce_records({**kafka.producer_config(), **ONE_BATCH_A_SEGMENT}, records)
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = consumer_config(group, **{**INTERLEAVED, "enable.auto.commit": False})
    consumer = HybridConsumer(conf)
    consumer.subscribe([topic])
    half = _read(consumer, 3, use_consume)  # some now, the rest after a commit and a restart
    consumer.commit(asynchronous=False)
    metrics = consumer.metrics()
    consumer.close()
    restarted = HybridConsumer(conf)
    restarted.subscribe([topic])
    rest = _read(restarted, len(digests) - len(half), use_consume)
    extra = _read(restarted, 1, use_consume, timeout=3)  # nothing more: nothing read twice
    metrics2 = restarted.metrics()
    restarted.close()
    got = half + rest + extra
    assert sorted(m.key() for m in got) == sorted(digests)
    assert all(sha(m.value()) == digests[m.key()] for m in got)
    assert metrics["dropped.evicted"] == metrics2["dropped.evicted"] == 0
    assert metrics.get("flow.waits", 0) + metrics2.get("flow.waits", 0) > 0  # the buffer really was full


def _two_in_one_partition(topic: str) -> tuple[list[dict[str, Any]], bytes, bytes]:
    """Two messages of one partition whose segments alternate: together beyond the capacity."""
    a, b = payload(SIZE, 1), payload(SIZE, 2)
    first = raw_segments(topic, a, SEGMENT, key=b"a")
    second = raw_segments(topic, b, SEGMENT, key=b"b")
    records = [r for pair in zip(first, second, strict=True) for r in pair]
    return [*records, plain_record(topic, 7)], a, b


@pytest.mark.parametrize("raise_on_drop", [None, False], ids=["default", "linkedin-silent"])
def test_an_unavoidable_eviction_is_reported_and_never_committed_past(
    kafka: KafkaService, topic: str, consumer_config: Callable[..., dict[str, Any]], raise_on_drop: bool | None
) -> None:
    records, a, b = _two_in_one_partition(topic)
    produce_records(kafka.producer_config(), records)
    group = f"g-{uuid.uuid4().hex[:8]}"
    extra = {} if raise_on_drop is None else {"exception.on.message.dropped": raise_on_drop}
    conf = consumer_config(group, **{"message.assembler.buffer.capacity": CAPACITY, **extra})
    consumer = HybridConsumer(conf)
    consumer.subscribe([topic])
    got: list[Any] = []
    errors: list[LargeMessageDroppedError] = []
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:  # b and the plain record: the loop goes on
        try:
            msg = consumer.poll(0.5)
        except LargeMessageDroppedError as exc:
            errors.append(exc)
            continue
        if msg is not None and msg.error() is None:
            got.append(msg)
    consumer.commit(asynchronous=False)
    stored = consumer.committed_safe_offsets([TopicPartition(topic, 0)])[0].offset
    metrics = consumer.metrics()
    consumer.close()
    assert [m.key() for m in got] == [b"b", b"p7"] and sha(got[0].value()) == sha(b)
    assert metrics["dropped.evicted"] == 1
    if raise_on_drop is None:
        assert len(errors) == 1
        dropped = errors[0].dropped
        assert (dropped.topic, dropped.partition, dropped.starting_offset) == (topic, 0, 0)
        assert dropped.last_offset > 0 and isinstance(dropped.message_id, uuid.UUID)
        assert errors[0].kafka_message is not None
    else:
        assert errors == []
    assert stored == 0  # the commit stays at the dropped message's first segment
    # a consumer of the same group with room for both reads the dropped message again
    again = HybridConsumer({**conf, "message.assembler.buffer.capacity": 2 * CAPACITY})
    again.subscribe([topic])
    reread = _read(again, 3, use_consume=False, timeout=60)
    again.close()
    assert {m.key(): sha(m.value()) for m in reread}[b"a"] == sha(a)


def test_a_rebalance_while_partitions_wait_loses_nothing_and_leaves_nothing_paused(
    kafka: KafkaService, consumer_config: Callable[..., dict[str, Any]]
) -> None:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(topic, partitions=3)
    records, digests = _interleaved(topic, 3, 2)
    produce_records({**kafka.producer_config(), **ONE_BATCH_A_SEGMENT}, records)
    conf = consumer_config(f"g-{uuid.uuid4().hex[:8]}", **INTERLEAVED)
    first = HybridConsumer(conf)
    first.subscribe([topic])
    got: dict[bytes, str] = {}
    deadline = time.monotonic() + 60
    while not (got and first.metrics().get("flow.waits", 0)) and time.monotonic() < deadline:
        msg = first.poll(0.5)  # until a partition waits for room
        if msg is not None and msg.error() is None:
            got[msg.key()] = sha(msg.value())
    assert first.metrics().get("flow.waits", 0) > 0
    second = HybridConsumer(conf)  # joins: the partitions move, some of them while paused for room
    second.subscribe([topic])
    deadline = time.monotonic() + 120
    while len(got) < len(digests) and time.monotonic() < deadline:
        for consumer in (first, second):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[msg.key()] = sha(msg.value())
    evicted = first.metrics()["dropped.evicted"] + second.metrics()["dropped.evicted"]
    first.close()
    second.close()
    assert got == digests
    assert evicted == 0


def test_the_asyncio_consumer_waits_for_room_too(
    kafka: KafkaService, consumer_config: Callable[..., dict[str, Any]]
) -> None:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(topic, partitions=3)
    records, digests = _interleaved(topic, 3, 2)
    produce_records({**kafka.producer_config(), **ONE_BATCH_A_SEGMENT}, records)

    async def read() -> tuple[dict[bytes, str], dict[str, int]]:
        consumer = AIOHybridConsumer(consumer_config(None, **INTERLEAVED))
        await consumer.subscribe([topic])
        got: dict[bytes, str] = {}
        deadline = time.monotonic() + 120
        while len(got) < len(digests) and time.monotonic() < deadline:
            msg = await consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got[msg.key()] = sha(msg.value())
        metrics = consumer.inner.metrics()
        await consumer.close()
        return got, metrics

    got, metrics = asyncio.run(read())
    assert got == digests
    assert metrics["dropped.evicted"] == 0 and metrics.get("flow.waits", 0) > 0
