"""``await AIOHybridProducer.produce_stream(...)`` on a real broker with Redis and S3 (moto): every kind of
source round trips, the event loop runs while the worker uploads, and a cancelled or timed-out upload
leaves no object, no pending mark and no record.

Streams are above ``large.message.max.bytes`` (4 MiB here), so they go up in 5 MiB parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from gateway import HybridConsumer, SizeThresholdPolicy
from gateway.aio import AIOHybridProducer
from gateway.testing import KafkaService
from stores import RedisStore, S3Store
from tests.helpers import consume_all, payload, sha
from tests.integration.test_produce_stream import leftovers

MiB = 1024 * 1024
PART = 5 * MiB
STORES = ["redis", "s3"]
WAIT_S = 60
"""A bound on waits for the other side of a handshake, so a broken build fails instead of hanging."""


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, s3_prefix: str) -> Any:
    if request.param == "redis":
        return RedisStore(
            request.getfixturevalue("redis_client"), prefix=f"gwas{uuid.uuid4().hex[:6]}", entry_bytes=3 * MiB
        )
    client, bucket = request.getfixturevalue("s3_client"), request.getfixturevalue("s3_bucket")
    return S3Store(client, bucket=bucket, prefix=s3_prefix, multipart_chunk_bytes=PART)


def producer(kafka: KafkaService, store: Any) -> AIOHybridProducer:
    conf = {**kafka.producer_config(), "reference.stream.part.bytes": PART, "large.message.max.bytes": 4 * MiB}
    return AIOHybridProducer(
        conf, policy=SizeThresholdPolicy(reference_above=1_000_000, store=store.name), stores={store.name: store}
    )


def records_in(kafka: KafkaService, topic: str) -> int:
    consumer = Consumer(kafka.consumer_config(None))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
    return int(high - low)


def read_back(kafka: KafkaService, store: Any, topic: str, count: int) -> list[Any]:
    consumer = HybridConsumer(kafka.consumer_config(None), stores={store.name: store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, count, timeout=120)
    consumer.close()
    assert not errors
    return got


def chunks_of(data: bytes, step: int) -> Iterator[bytes]:
    for at in range(0, len(data), step):
        yield data[at : at + step]


async def async_chunks_of(data: bytes, step: int) -> AsyncIterator[bytes]:
    for at in range(0, len(data), step):
        await asyncio.sleep(0)
        yield data[at : at + step]


def test_every_kind_of_source_round_trips(kafka: KafkaService, topic: str, store: Any) -> None:
    values = [payload(2 * PART + 3, i) for i in range(3)]

    async def main() -> list[Any]:
        async with producer(kafka, store) as sending:
            return [
                await sending.produce_stream(topic, io.BytesIO(values[0]), len(values[0]), b"file"),
                await sending.produce_stream(topic, chunks_of(values[1], MiB + 1), len(values[1]), b"iterable"),
                await sending.produce_stream(topic, async_chunks_of(values[2], MiB - 1), len(values[2]), key=b"async"),
            ]

    delivered = asyncio.run(main())
    assert [m.key() for m in delivered] == [b"file", b"iterable", b"async"]
    assert all(m.error() is None and m.offset() >= 0 and m.value() is None for m in delivered)
    got = read_back(kafka, store, topic, 3)
    assert {m.key(): sha(m.value()) for m in got} == {
        b"file": sha(values[0]),
        b"iterable": sha(values[1]),
        b"async": sha(values[2]),
    }
    left = leftovers(store)  # the payloads, their marks cleared
    assert len(left) == 3 if isinstance(store, S3Store) else not [k for k in left if k.endswith(b":pending")]


def test_the_event_loop_runs_while_the_worker_uploads(kafka: KafkaService, topic: str, store: Any) -> None:
    """The source waits, on the worker thread, for a task on the loop: a blocked loop would never set it."""
    value = payload(2 * PART + 3)
    loop_ran = threading.Event()

    def source() -> Iterator[bytes]:
        yield value[:PART]
        assert loop_ran.wait(WAIT_S), "the event loop did not run while the upload was under way"
        yield value[PART:]

    async def main() -> Any:
        async with producer(kafka, store) as sending:
            upload = asyncio.ensure_future(sending.produce_stream(topic, source(), len(value), b"k"))
            await asyncio.sleep(0)
            loop_ran.set()
            return await upload

    assert asyncio.run(main()).error() is None
    assert [sha(m.value()) for m in read_back(kafka, store, topic, 1)] == [sha(value)]


def test_a_cancelled_upload_is_rolled_back(kafka: KafkaService, topic: str, store: Any) -> None:
    """Cancelled while the worker waits for a sync source's next chunk: no object, no mark, no record."""
    value = payload(3 * PART)
    first_sent, release = threading.Event(), threading.Event()

    def source() -> Iterator[bytes]:
        yield value[: 2 * PART]
        first_sent.set()
        release.wait(WAIT_S)
        yield value[2 * PART :]

    async def main() -> None:
        async with producer(kafka, store) as sending:
            upload = asyncio.ensure_future(sending.produce_stream(topic, source(), len(value), b"k"))
            assert await asyncio.to_thread(first_sent.wait, WAIT_S)
            upload.cancel()
            for _ in range(10):  # loop turns enough for the task to take its cancellation (no clock involved)
                await asyncio.sleep(0)
            release.set()  # the worker's next read finds the call cancelled
            with pytest.raises(asyncio.CancelledError):
                await upload
            assert leftovers(store) == [], "rolled back before the cancellation was raised"
            after = await sending.produce(topic, b"after", b"next")  # the producer goes on
            assert after.error() is None

    asyncio.run(main())
    assert leftovers(store) == []
    assert [m.key() for m in read_back(kafka, store, topic, 1)] == [b"next"]


def test_a_cancelled_or_timed_out_async_upload_is_rolled_back(kafka: KafkaService, topic: str, store: Any) -> None:
    """``asyncio.wait_for`` around an async source that stops giving chunks: the upload goes, nothing stays."""
    value = payload(3 * PART)
    started, release = asyncio.Event(), asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        yield value[: 2 * PART]
        started.set()
        await release.wait()
        yield value[2 * PART :]

    async def main() -> None:
        async with producer(kafka, store) as sending:
            upload = asyncio.ensure_future(
                asyncio.wait_for(sending.produce_stream(topic, source(), len(value), b"k"), timeout=WAIT_S)
            )
            await started.wait()
            upload.cancel()  # as the timeout would: wait_for cancels the call
            for _ in range(10):
                await asyncio.sleep(0)
            release.set()  # the source goes on: the cancelled call must not take its chunks
            with pytest.raises(asyncio.CancelledError):
                await upload
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(sending.produce_stream(topic, _stalled(value), len(value), b"t"), timeout=1)
            assert leftovers(store) == []

    asyncio.run(main())
    assert leftovers(store) == []
    assert records_in(kafka, topic) == 0


async def _stalled(value: bytes) -> AsyncIterator[bytes]:
    """Stalls longer than the call's timeout; then goes on, which a call that timed out must not take."""
    yield value[:PART]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.Event().wait(), WAIT_S)
    yield value[PART:]
