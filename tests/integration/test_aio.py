"""gateway.aio on a real broker: every route round trip, rollback, safe offsets, and a store that takes
its time without holding up the event loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import KafkaException, Message, TopicPartition

from gateway import SizeThresholdPolicy
from gateway.aio import AIOHybridConsumer, AIOHybridProducer
from gateway.testing import KafkaService
from stores import RedisStore
from tests.helpers import payload, sha

SEGMENT = 100_000
SIZES = {b"plain": 1_000, b"chunked": 350_000, b"reference": 1_500_000}


def _producer(kafka: KafkaService, store: Any) -> AIOHybridProducer:
    conf = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
    return AIOHybridProducer(
        conf, policy=SizeThresholdPolicy(reference_above=1_000_000, store="redis"), stores={"redis": store}
    )


async def _read(kafka: KafkaService, store: Any, topic: str, want: int) -> tuple[list[Any], AIOHybridConsumer]:
    consumer = AIOHybridConsumer({**kafka.consumer_config(), "enable.auto.commit": False}, stores={"redis": store})
    await consumer.subscribe([topic])
    got: list[Any] = []
    for _ in range(60):
        got += await consumer.consume(10, 1.0)
        if len(got) >= want:
            break
    return got, consumer


def test_every_route_round_trips_and_commits_safe_offsets(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    store = RedisStore(redis_client, prefix="aio")

    async def main() -> None:
        async with _producer(kafka, store) as producer:
            delivered = await asyncio.gather(*(producer.produce(topic, payload(n), key) for key, n in SIZES.items()))
            assert sorted(m.key() for m in delivered) == sorted(SIZES)
            assert all(m.error() is None and m.offset() >= 0 for m in delivered)
        got, consumer = await _read(kafka, store, topic, len(SIZES))
        assert {m.key(): sha(m.value()) for m in got} == {k: sha(payload(n)) for k, n in SIZES.items()}
        await consumer.commit(asynchronous=False)
        committed = await consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed[0].offset == max(m.offset() for m in got) + 1
        await consumer.close()

    asyncio.run(main())


def test_a_refused_envelope_rolls_the_store_write_back(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    store = RedisStore(redis_client, prefix="aiofail")

    async def main() -> None:
        async with _producer(kafka, store) as producer:
            with pytest.raises(KafkaException):
                await producer.produce(topic, payload(1_500_000), b"k", partition=7)  # the topic has one partition

    asyncio.run(main())
    assert list(store.list_locators(topic)) == []


class SlowStore(RedisStore):
    """A store whose writes take half a second, as a distant S3 might."""

    def put(self, *args: Any, **kwargs: Any) -> str:
        time.sleep(0.5)
        return super().put(*args, **kwargs)

    def put_pipeline(self) -> None:
        return None  # like S3: each write is answered inside produce(), whatever the window


def test_a_slow_store_write_does_not_hold_up_the_event_loop(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    store = SlowStore(redis_client, prefix="aioslow")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    async def main() -> int:
        task = asyncio.get_running_loop().create_task(ticker())
        async with _producer(kafka, store) as producer:
            await asyncio.sleep(0)
            before = ticks
            await producer.produce(topic, payload(1_500_000), b"slow")
            during = ticks - before
        task.cancel()
        return during

    # the loop ran its other task while the write slept on the worker thread (half a second: ~50 ticks)
    assert asyncio.run(main()) >= 10


def test_confluents_two_step_produce_and_its_constructor_arguments(kafka: KafkaService, topic: str) -> None:
    """``fut = await producer.produce(...); msg = await fut``, with confluent_kafka.aio's batch_size/buffer_timeout."""

    async def main() -> None:
        conf = {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}
        async with AIOHybridProducer(conf, max_workers=2, batch_size=10, buffer_timeout=0.5) as producer:
            fut = await producer.produce(topic, b"two-step", b"k")
            msg = await fut
            assert msg.value() == b"two-step" and msg.error() is None and msg.offset() >= 0
            direct = await producer.produce(topic, payload(350_000), b"chunked")  # ours: one await is enough
            assert isinstance(direct, Message) and direct.key() == b"chunked" and len(direct.value()) == 350_000

    asyncio.run(main())


@pytest.mark.parametrize("bad", [{"max_workers": 0}, {"batch_size": 0}, {"buffer_timeout": -1.0}])
def test_a_producer_refuses_an_impossible_worker_or_buffer_setting(kafka: KafkaService, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="at least"):
        AIOHybridProducer(kafka.producer_config(), **bad)
