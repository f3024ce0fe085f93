"""Cancelling ``gateway.aio`` calls loses nothing: sweeps of ``asyncio.wait_for`` timeouts over poll,
consume and produce, with a commit after every message received, and a restarted group as the judge."""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.aio import AIOHybridConsumer, AIOHybridProducer
from gateway.protocol.envelope import decode_envelope, looks_like_envelope
from gateway.testing import KafkaService
from stores import RedisStore
from tests.helpers import payload, sha

SEGMENT = 1_000
REFERENCE_ABOVE = 5_000
SIZES = (200, 2_500, 200, 6_000, 200, 200)
"""Plain, chunked (3 segments) and reference messages, mixed in one partition."""
COUNT = 600
TIMEOUTS = (*(i * 0.000005 for i in range(16)), 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03)
"""``wait_for`` timeouts taken in turn. A queued message's ``poll`` round trip takes ~45 us, so the
fine steps land before the worker starts, while it works and after it returned; the longer ones
land while it waits for librdkafka to fetch."""
SENTINEL = b"end"


def _conf(kafka: KafkaService) -> dict[str, Any]:
    return {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}


def _policy() -> SizeThresholdPolicy:
    return SizeThresholdPolicy(reference_above=REFERENCE_ABOVE, store="redis")


def _produce(kafka: KafkaService, store: RedisStore, topic: str, keys: list[bytes]) -> dict[bytes, str]:
    sent: dict[bytes, str] = {}
    producer = HybridProducer(_conf(kafka), policy=_policy(), stores={"redis": store})
    for i, key in enumerate(keys):
        value = payload(SIZES[i % len(SIZES)], seed=i)
        producer.produce(topic, value, key)
        sent[key] = sha(value)
    producer.close()
    return sent


def _end_with_sentinel(kafka: KafkaService, topic: str) -> None:
    producer = HybridProducer(_conf(kafka))
    producer.produce(topic, b"sentinel", SENTINEL)
    producer.close()


class Gate:
    """A key deserializer that, once armed, stops the worker on the next message it hands out.

    The worker's ``poll``/``consume`` then holds that message (taken from the queue, payload read,
    not yet returned): driving that state with events, rather than hoping a timeout lands in it,
    makes a call cancelled there happen on every run, however loaded the machine is. Messages
    handed out again pass no deserializer, so the gate stops only fresh ones.
    """

    def __init__(self) -> None:
        self._armed: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._open = threading.Event()
        self._open.set()
        self.held: list[bytes] = []
        """The key of each message the worker held at the gate."""

    def arm(self) -> asyncio.Event:
        """The next message waits until :meth:`release`; the returned event is set once the worker holds it."""
        entered = asyncio.Event()
        self._armed = (asyncio.get_running_loop(), entered)
        self._open.clear()
        return entered

    def release(self) -> None:
        self._armed = None
        self._open.set()

    def __call__(self, key: bytes, ctx: Any) -> bytes:  # on the worker thread
        armed, self._armed = self._armed, None
        if armed is not None:
            self.held.append(key)
            loop, entered = armed
            loop.call_soon_threadsafe(entered.set)
            self._open.wait()
        return key


async def _cancel_when_held(gate: Gate, call: asyncio.Task[Any]) -> tuple[bool, Any]:
    """``(True, None)`` when ``call`` was cancelled while its worker held a message at the gate, else
    ``(False, its result)``."""
    entered = gate.arm()
    held = asyncio.ensure_future(entered.wait())
    try:
        await asyncio.wait({call, held}, return_when=asyncio.FIRST_COMPLETED)
        if not call.done():  # the worker is in the gate with a message: cancel the call now
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            return True, None
        return False, call.result()
    finally:
        held.cancel()
        gate.release()


@dataclass
class FirstRun:
    received: dict[bytes, str] = field(default_factory=dict)
    calls: int = 0
    cancelled: int = 0
    held: int = 0  # calls cancelled while their worker held a message
    handed_again: int = -1  # what came back through the consumer's handoff (-1: no handoff to ask)


async def _read_cancelling(
    kafka: KafkaService, store: RedisStore, gate: Gate, topic: str, group: str, last: bytes
) -> FirstRun:
    """Poll and consume under ever-changing timeouts, committing after each message that arrives.

    Each sweep of :data:`TIMEOUTS` starts with calls that are not timed out: they return (so every
    sweep makes progress, however slow the machine) until one is cancelled while its worker holds a
    fresh message (:class:`Gate`).
    """
    conf = {**kafka.consumer_config(group), "enable.auto.commit": False, "key.deserializer": gate}
    run = FirstRun()
    async with AIOHybridConsumer(conf, stores={"redis": store}) as consumer:
        await consumer.subscribe([topic])

        async def arrived(out: Any) -> None:
            for msg in out if isinstance(out, list) else [] if out is None else [out]:
                assert msg.error() is None, msg.error()
                run.received[msg.key()] = sha(msg.value())
                await consumer.commit(asynchronous=False)

        for i in itertools.count():
            if last in run.received:
                break
            run.calls += 1
            call = consumer.consume(3, 2.0) if i % 3 == 2 else consumer.poll(2.0)
            if i % len(TIMEOUTS) == 0:
                await consumer.assignment()  # the calls cancelled before have left the worker
                while last not in run.received:
                    held, out = await _cancel_when_held(gate, asyncio.ensure_future(call))
                    if held:
                        run.held += 1
                        run.cancelled += 1
                        await _commit(consumer)  # while what the cancelled call got is on its way back
                        break
                    await arrived(out)
                    run.calls += 1
                    call = consumer.poll(2.0)
                else:
                    call.close()  # never awaited: the last message came
                continue
            try:
                await arrived(await asyncio.wait_for(call, TIMEOUTS[i % len(TIMEOUTS)]))
            except asyncio.TimeoutError:
                run.cancelled += 1
                if run.cancelled % 2:
                    await _commit(consumer)
        run.handed_again = getattr(getattr(consumer.inner, "handoff", None), "returned_total", -1)
    return run


async def _commit(consumer: AIOHybridConsumer) -> None:
    try:
        await consumer.commit(asynchronous=False)
    except KafkaException as exc:  # nothing delivered yet
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def _read_to_sentinel(consumer: Any, *, digest: bool = True) -> dict[bytes, Any]:
    """Every message up to the sentinel (its value's digest, or the value itself); a poll that waits 30 s
    for nothing means the sentinel is not coming."""
    out: dict[bytes, Any] = {}
    while SENTINEL not in out:
        msg = consumer.poll(30)  # a payload missing behind an envelope would raise here
        assert msg is not None, f"nothing more after {len(out)} messages: the sentinel was not read"
        if msg.error() is None:
            out[msg.key()] = sha(msg.value()) if digest else msg.value()
    del out[SENTINEL]
    return out


def _judge(kafka: KafkaService, store: RedisStore, topic: str, group: str) -> dict[bytes, str]:
    """A restarted member of the group: everything from its committed offsets up to the sentinel."""
    consumer = HybridConsumer(kafka.consumer_config(group), stores={"redis": store})
    consumer.subscribe([topic])
    try:
        return _read_to_sentinel(consumer)
    finally:
        consumer.close()


def test_cancelled_polls_and_consumes_lose_no_message(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    store = RedisStore(redis_client, prefix="aiocancel")
    gate = Gate()
    keys = [f"{i:04d}".encode() for i in range(COUNT)]
    sent = _produce(kafka, store, topic, keys)
    group = f"g-{topic}"
    first = asyncio.run(_read_cancelling(kafka, store, gate, topic, group, keys[-1]))
    _end_with_sentinel(kafka, topic)
    reread = _judge(kafka, store, topic, group)

    lost = sorted(k for k in sent if k not in first.received and k not in reread)
    summary = (
        f"{first.calls} calls, {first.cancelled} cancelled ({first.held} holding a message),"
        f" {first.handed_again} handed out again,"
        f" {len(first.received)} received, {len(reread)} re-read by the restarted group, {len(lost)} lost"
    )
    print(summary)
    assert lost == [], f"{summary}: {[k.decode() for k in lost[:20]]}"
    assert first.held == len(gate.held) > 0, summary  # calls were cancelled while their worker held a message
    assert first.handed_again >= first.held, summary  # and each handed its message(s) out again
    assert set(gate.held) <= set(first.received), summary  # to the first run
    assert len(first.received) == COUNT, summary  # and every one of them reached the first run in the end
    assert all(first.received[k] == sent[k] for k in sent)  # whole
    assert all(reread[k] == sent[k] for k in reread)


async def _produce_cancelling(
    kafka: KafkaService, store: RedisStore, gate: Gate, topic: str
) -> tuple[dict[bytes, str], set[bytes]]:
    """Produce under a sweep of timeouts: every value tried, and the keys whose ``produce`` resolved.

    Each sweep starts with a ``produce`` cancelled while the worker holds it (:class:`Gate`, as the
    key serializer) and one that is not timed out, so both outcomes happen on every run.
    """
    sent: dict[bytes, str] = {}
    delivered: set[bytes] = set()
    conf = {**_conf(kafka), "key.serializer": gate}
    async with AIOHybridProducer(conf, policy=_policy(), stores={"redis": store}) as producer:
        for i in range(3 * len(TIMEOUTS)):
            key, value = f"p{i:03d}".encode(), payload(SIZES[i % len(SIZES)] + 4_000, seed=i)  # chunked or reference
            sent[key] = sha(value)
            produced = producer.produce(topic, value, key)
            if i % len(TIMEOUTS) == 0:
                held, _ = await _cancel_when_held(gate, asyncio.ensure_future(produced))
                assert held  # every produce goes through the key serializer
                continue
            try:
                await (
                    produced if i % len(TIMEOUTS) == 1 else asyncio.wait_for(produced, TIMEOUTS[i % len(TIMEOUTS)] * 20)
                )
            except asyncio.TimeoutError:
                continue
            delivered.add(key)
    return sent, delivered


def _raw_envelope_locators(kafka: KafkaService, topic: str) -> set[str]:
    consumer = Consumer({**kafka.consumer_config(), "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        values = _read_to_sentinel(consumer, digest=False)
    finally:
        consumer.close()
    return {decode_envelope(value).locator for value in values.values() if looks_like_envelope(value)}


def test_cancelled_produces_leave_no_orphan_payload(kafka: KafkaService, topic: str, redis_client: Any) -> None:
    store = RedisStore(redis_client, prefix="aioproduce")
    gate = Gate()
    sent, delivered = asyncio.run(_produce_cancelling(kafka, store, gate, topic))
    _end_with_sentinel(kafka, topic)
    assert 0 < len(delivered) < len(sent)  # some produces were cancelled, at different points
    stored = {locator for locator, _ in store.list_locators(topic)}
    referenced = _raw_envelope_locators(kafka, topic)
    assert stored - referenced == set()  # every payload written has its envelope in Kafka
    consumer = HybridConsumer(kafka.consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    try:
        got = _read_to_sentinel(consumer)
    finally:
        consumer.close()
    assert delivered <= set(got)
    assert len(gate.held) == 3 and set(gate.held) <= set(got) - delivered  # cancelled once the worker had them: landed
    assert all(got[k] == sent[k] for k in got)  # one cancelled after its job started still lands, whole


@pytest.mark.parametrize("call", ["poll", "consume"])
def test_a_commit_after_a_cancelled_call_stays_below_what_it_got(
    kafka: KafkaService, topic: str, redis_client: Any, call: str
) -> None:
    """Cancelled while its worker holds a message: a commit stops before it, the next call hands it out first."""
    store = RedisStore(redis_client, prefix="aiofloor")
    gate = Gate()
    sent = _produce(kafka, store, topic, [b"a", b"b", b"c", b"r", b"d"])  # r is the reference (6 000 bytes)
    group = f"g-{topic}"
    tp = TopicPartition(topic, 0)

    async def main() -> tuple[int, int, bytes | None]:
        conf = {**kafka.consumer_config(group), "enable.auto.commit": False, "key.deserializer": gate}
        async with AIOHybridConsumer(conf, stores={"redis": store}) as consumer:
            await consumer.subscribe([topic])
            for want in (b"a", b"b", b"c"):
                first = await consumer.poll(30)
                assert first is not None and first.key() == want
            before = (await consumer.commit(asynchronous=False))[0].offset  # r's offset: r is next
            pending = consumer.poll(10) if call == "poll" else consumer.consume(10, 10)
            held, _ = await _cancel_when_held(gate, asyncio.ensure_future(pending))
            assert held and gate.held == [b"r"]  # cancelled while its worker held r
            await consumer.commit(asynchronous=False)  # runs once the cancelled call's worker is done
            after = (await consumer.committed([tp], timeout=30))[0].offset
            again = await consumer.poll(10)
            return before, after, None if again is None else again.key()

    before, after, again = asyncio.run(main())
    assert after == before  # the commit after the cancelled call stayed below what the call got
    assert again == b"r"  # which came first next time
    consumer = HybridConsumer(kafka.consumer_config(group), stores={"redis": store})
    consumer.subscribe([topic])
    try:
        msg = consumer.poll(30)
    finally:
        consumer.close()
    assert msg is not None and msg.key() == b"r" and sha(msg.value()) == sent[b"r"]  # the group reads it again
