"""``consume.max.bytes``: one ``consume()`` call holds whole messages up to the cap, at least one.

What a call does not return stays first in line for the next call, and a commit never covers it
before it is returned: a consumer restarted in the group reads every message exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from confluent_kafka import KafkaException, Message, Producer, TopicPartition

from gateway import HybridConsumer, HybridProducer
from gateway.aio import AIOHybridConsumer
from gateway.consumer._inbox import fit
from gateway.testing import KafkaService
from tests.helpers import payload, sha

CAP = 700_000
# chunked (100 kB segments). After two of 100 kB the third (650 kB) is assembled and found too large:
# it is kept back for the next call. After it, or two of 300 kB, a message like the last one would not
# fit, so the call ends before assembling the next. 1 MB exceeds the cap: it goes alone.
SIZES = [100_000, 100_000, 650_000, 1_000_000, 300_000, 300_000, 300_000, 100_000, 100_000]


def _produce_chunked(kafka: KafkaService, topic: str) -> None:
    producer = HybridProducer({**kafka.producer_config(), "max.message.segment.bytes": 100_000})
    for i, size in enumerate(SIZES):
        producer.produce(topic, payload(size, seed=i), b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    producer.close()


def _consumer(kafka: KafkaService, topic: str, group: str, **conf: Any) -> HybridConsumer:
    consumer = HybridConsumer(
        kafka.consumer_config(group, **{"enable.auto.commit": False, "consume.max.bytes": CAP, **conf})
    )
    consumer.subscribe([topic])
    return consumer


def _call(consumer: HybridConsumer, got: list[Message]) -> list[Message]:
    """One ``consume(500)``: whole messages within the cap, or one alone."""
    batch = [m for m in consumer.consume(500, 1.0) if m.error() is None]
    held = sum(len(m.value()) for m in batch)
    assert len(batch) <= 1 or held <= CAP, [len(m.value()) for m in batch]
    got.extend(batch)
    return batch


def _check(got: list[Message]) -> None:
    assert [int(m.key()) for m in got] == list(range(len(SIZES))), "in order, each once"
    assert [sha(m.value()) for m in got] == [sha(payload(n, seed=i)) for i, n in enumerate(SIZES)]


def _first_then_prefetched(consumer: HybridConsumer, got: list[Message]) -> None:
    """The first message alone, then a pause while librdkafka prefetches the rest: the next call finds the
    second 100 kB message and the 650 kB one both there (else which call meets which is up to timing)."""
    got.extend(m for m in consumer.consume(1, 30) if m.error() is None)
    assert len(got) == 1
    time.sleep(1)


def test_messages_larger_than_the_cap_come_across_calls_and_commits_cover_what_was_returned(
    kafka: KafkaService, topic: str
) -> None:
    _produce_chunked(kafka, topic)
    group = f"maxbytes-{topic}"
    got: list[Message] = []
    sizes: list[list[int]] = []
    consumer = _consumer(kafka, topic, group)
    _first_then_prefetched(consumer, got)
    consumer.commit(asynchronous=False)
    kept_back = False
    deadline = time.monotonic() + 60
    while not kept_back and len(got) < len(SIZES) and time.monotonic() < deadline:
        batch = _call(consumer, got)
        sizes.append([len(m.value()) for m in batch])
        if batch:
            consumer.commit(asynchronous=False)
        kept_back = bool(consumer._inbox.kept)  # a whole message found too large for the call waits for the next
    assert kept_back, f"no call kept a message back: {sizes}"
    consumer.close()  # what was kept back was never returned: the group must read it again
    with _consumer(kafka, topic, group) as again:
        while len(got) < len(SIZES) and time.monotonic() < deadline:
            batch = _call(again, got)
            sizes.append([len(m.value()) for m in batch])
            if batch:
                again.commit(asynchronous=False)
        assert again.consume(500, 1.0) == []
    _check(got)
    assert [1_000_000] in sizes, f"the message larger than the cap goes alone: {sizes}"
    with _consumer(kafka, topic, group) as last:  # everything returned was committed, nothing more
        assert last.consume(500, 2.0) == []


def test_one_consumer_reads_everything_in_order_within_the_cap(kafka: KafkaService, topic: str) -> None:
    _produce_chunked(kafka, topic)
    got: list[Message] = []
    calls = kept_back = 0
    with _consumer(kafka, topic, f"maxbytes1-{topic}") as consumer:
        _first_then_prefetched(consumer, got)
        deadline = time.monotonic() + 60
        while len(got) < len(SIZES) and time.monotonic() < deadline:
            calls += bool(_call(consumer, got))
            kept_back += bool(consumer._inbox.kept)
    _check(got)
    assert calls >= 5, "no more than 700 kB per call"
    # only the 650 kB message after two of 100 kB is assembled and kept back: after a large one the call
    # ends before assembling the next, so the consumer holds one large message at a time, as poll() does
    assert kept_back == 1


def test_a_cap_of_one_byte_returns_one_message_per_call(kafka: KafkaService, topic: str) -> None:
    producer = Producer(kafka.producer_config())
    for i in range(20):
        producer.produce(topic, b"plain %d" % i, partition=0)
    assert producer.flush(30) == 0
    offsets: list[int] = []
    with _consumer(kafka, topic, f"maxbytes2-{topic}", **{"consume.max.bytes": 1}) as consumer:
        deadline = time.monotonic() + 60
        while len(offsets) < 20 and time.monotonic() < deadline:
            batch = consumer.consume(500, 1.0)
            assert len(batch) <= 1
            offsets.extend(m.offset() for m in batch)
            if len(offsets) == 1:
                time.sleep(1)  # librdkafka prefetches the rest: a call could take them all
    assert offsets == list(range(20))


def test_consume_after_poll_takes_what_fits_of_a_proven_batch(kafka: KafkaService, topic: str) -> None:
    producer = Producer(kafka.producer_config())
    for i in range(100):
        producer.produce(topic, b"%0100d" % i, partition=0)  # 100 bytes each: ten fit in 1 000
    assert producer.flush(30) == 0
    conf = {"fetch.batch.records": 20, "consume.max.bytes": 1000}
    with _consumer(kafka, topic, f"maxbytes5-{topic}", **conf) as consumer:
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        while len(offsets) < 25 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                offsets.append(msg.offset())
                if len(offsets) == 1:
                    time.sleep(1)  # librdkafka prefetches the rest: the batches after the first are proven
        calls: list[int] = []
        while len(offsets) < 100 and time.monotonic() < deadline:
            batch = consumer.consume(500, 1.0)
            calls.append(len(batch))
            offsets.extend(m.offset() for m in batch)
    assert offsets == list(range(100))
    assert max(calls) == 10, calls


def test_small_plain_records_still_come_500_per_call_by_default(kafka: KafkaService, topic: str) -> None:
    producer = Producer(kafka.producer_config())
    for i in range(1200):
        producer.produce(topic, b"%0100d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = HybridConsumer(kafka.consumer_config(f"maxbytes3-{topic}", **{"enable.auto.commit": False}))
    consumer.subscribe([topic])
    try:
        first = consumer.consume(1, 30)
        assert len(first) == 1
        time.sleep(1)  # librdkafka prefetches the rest
        offsets = [m.offset() for m in first]
        sizes: list[int] = []
        deadline = time.monotonic() + 60
        while len(offsets) < 1200 and time.monotonic() < deadline:
            batch = consumer.consume(500, 1.0)
            sizes.append(len(batch))
            offsets.extend(m.offset() for m in batch)
        assert offsets == list(range(1200))
        assert max(sizes) == 500, sizes
    finally:
        consumer.close()


def test_the_aio_consumer_is_bounded_too(kafka: KafkaService, topic: str) -> None:
    _produce_chunked(kafka, topic)

    async def main() -> list[Message]:
        conf = kafka.consumer_config(f"maxbytes4-{topic}", **{"enable.auto.commit": False, "consume.max.bytes": CAP})
        consumer = AIOHybridConsumer(conf)
        await consumer.subscribe([topic])
        got: list[Message] = []
        deadline = time.monotonic() + 60
        while len(got) < len(SIZES) and time.monotonic() < deadline:
            batch = [m for m in await consumer.consume(500, 1.0) if m.error() is None]
            assert len(batch) <= 1 or sum(len(m.value()) for m in batch) <= CAP
            got.extend(batch)
        await consumer.close()
        return got

    _check(asyncio.run(main()))


def test_fit_counts_whole_records_and_one_at_least_when_first() -> None:
    values = [b"a" * 3, b"b" * 4, b"c" * 5]
    assert fit(values, 7) == [3, 7]
    assert fit(values, 6) == [3]
    assert fit(values, 2) == []
    assert fit(values, 2, first=True) == [3]
    assert fit(values, 100) == [3, 7, 12]
    assert fit([], 5, first=True) == []


def _holds_kept_back(consumer: HybridConsumer) -> bool:
    """Whether a whole message waits in the consumer for its next call (kept back, not yet returned)."""
    return bool(consumer._inbox.kept)


def _until_kept_back(consumer: HybridConsumer, seen: list[tuple[int, int]]) -> None:
    """Calls until one keeps a message back: the first message alone, then (prefetched) 100 kB and the 650 kB one."""
    first: list[Message] = []
    _first_then_prefetched(consumer, first)
    seen.extend((m.partition(), m.offset()) for m in first)
    consumer.commit(asynchronous=False)
    deadline = time.monotonic() + 60
    while not _holds_kept_back(consumer) and len(seen) < len(SIZES) and time.monotonic() < deadline:
        _deliveries(consumer, seen, 1.0)
    assert _holds_kept_back(consumer), seen


def _deliveries(consumer: HybridConsumer, seen: list[tuple[int, int]], timeout: float) -> None:
    """One ``consume(500)``; every delivered (partition, offset) noted; what it returned committed."""
    batch = [m for m in consumer.consume(500, timeout) if m.error() is None]
    seen.extend((m.partition(), m.offset()) for m in batch)
    if batch:
        with contextlib.suppress(KafkaException):  # refused while the group rebalances: the revoke commits
            consumer.commit(asynchronous=False)


@pytest.mark.requires("classic_revoke_commit")  # exactly once rests on the revoke-time commit
def test_a_kept_back_message_is_delivered_once_across_a_rebalance(kafka: KafkaService, topic: str) -> None:
    """A second consumer joins while the first holds a message kept back for its next call: the group as a
    whole delivers every (partition, offset) exactly once, whichever member ends up with the partition."""
    _produce_chunked(kafka, topic)
    group = f"maxbytes6-{topic}"
    seen: list[tuple[int, int]] = []
    first = _consumer(kafka, topic, group, **{"enable.auto.commit": True})
    _until_kept_back(first, seen)
    deadline = time.monotonic() + 60
    second = _consumer(kafka, topic, group, **{"enable.auto.commit": True})
    quiet = 0
    while quiet < 6 and time.monotonic() < deadline + 60:
        before = len(seen)
        for consumer in (second, first):
            _deliveries(consumer, seen, 0.5)
        quiet = quiet + 1 if len(seen) == before else 0
    first.close()
    second.close()
    counts = {tp: seen.count(tp) for tp in seen}
    assert len(counts) == len(SIZES), sorted(counts)
    assert all(n == 1 for n in counts.values()), {tp: n for tp, n in counts.items() if n != 1}


def test_a_seek_drops_the_message_kept_back_for_the_sought_partition(kafka: KafkaService, topic: str) -> None:
    """After ``seek`` the partition is read from the offset sought, in order: a message kept back before the
    seek is not handed out first (it is read again in its place)."""
    _produce_chunked(kafka, topic)
    seen: list[tuple[int, int]] = []
    with _consumer(kafka, topic, f"maxbytes7-{topic}") as consumer:
        _until_kept_back(consumer, seen)
        deadline = time.monotonic() + 60
        consumer.seek(TopicPartition(topic, 0, 0))
        keys: list[int] = []
        while len(keys) < len(SIZES) and time.monotonic() < deadline:
            keys.extend(int(m.key()) for m in consumer.consume(500, 1.0) if m.error() is None)
    assert keys == list(range(len(SIZES)))
