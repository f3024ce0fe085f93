"""``gateway demo``: the main job, end to end on real local components.

It produces a realistic mix (log-normal sizes, a few percent large) through
:class:`HybridProducer` under :class:`SizeThresholdPolicy`, consumes it back with
:class:`HybridConsumer`, checks every byte by SHA-256 and prints what went where.

The embedded cluster keeps only about 5 MiB per partition and drops older data silently, so the
demo never lets more than ``window`` bytes sit unconsumed: it consumes while it produces, and on
the embedded cluster it caps chunked messages below that window (larger ones go to a store, or
are left out when no store is available), and it spreads the messages over as many partitions as
their bytes need, so that the topic still holds all of them for the Spark stage. It says so on screen.

Then, when PySpark and Java are there, the Spark stage (:mod:`gateway.testing.demo._spark`) reads the
same topic through ``hybrid-kafka``, writes a copy through the sink and runs a stream with a restart.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import random
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.command import kafka_logger
from gateway.consumer import HybridConsumer
from gateway.policy import MessageInfo, Policy, Route, SizeThresholdPolicy
from gateway.producer import HybridProducer
from gateway.testing.demo._env import DemoEnv
from gateway.testing.demo._model import DemoOptions, DemoResult, RouteStats, Sent

MOCK_WINDOW = 4 * 1024 * 1024
"""Unconsumed bytes allowed on the embedded cluster: under its 5 MiB-per-partition ring."""
MOCK_PARTITION_BYTES = 4_400_000
"""Bytes the demo puts in one partition of the embedded cluster: its ring keeps 5 MiB (5,242,880) of
record batches, and the rest is left for the batches' own overhead."""
PARTITIONS = 4
"""Partitions of the demo's topics on a real broker; on the embedded cluster, as many as the bytes need."""
MOCK_MAX_PARTITIONS = 64
"""At most this many on the embedded cluster: a demo that needs more (a few thousand messages) does not
keep them all, and its Spark stage says so instead of running."""
DEMO_BUFFER_BYTES = 64_000_000
"""The demo consumer's buffer, and so the largest chunked message its producer may write."""


def sizes(options: DemoOptions) -> Iterator[int]:
    """Log-normal body with a heavy tail: mostly small messages, a few large, clipped to [min, max]."""
    rng = random.Random(options.seed)
    sigma = 1.6
    for _ in range(options.count):
        if rng.random() < options.large_fraction:
            size = int(math.exp(rng.uniform(math.log(1_000_000), math.log(options.max_size))))
        else:
            size = int(rng.lognormvariate(math.log(options.median_size), sigma))
        yield max(options.min_size, min(options.max_size, size))


def pattern_bytes(label: str, size: int) -> bytes:
    """``size`` deterministic bytes derived from ``label``: cheap at any size, reproducible, and without
    the long runs of one byte that would let a broker's compression flatter a measurement."""
    block = hashlib.sha256(label.encode()).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


def payload_for(index: int, size: int, seed: int) -> bytes:
    return pattern_bytes(f"{seed}:{index}", size)


@dataclass(frozen=True)
class Plan:
    """The messages to send, ``(index, size)`` in order, and the partition of each (empty: the key decides)."""

    messages: list[tuple[int, int]]
    skipped: int
    max_inline: int
    placement: dict[int, int]
    partitions: int
    kept: bool = True
    """False when the embedded cluster cannot keep every message until a later reader comes."""


def plan(options: DemoOptions, window: int | None, store: str | None, partitions: int | None = None) -> Plan:
    """Leave out what the embedded cluster cannot hold, and there give each message a partition by size."""
    max_inline = options.max_size if window is None else min(options.max_size, window - 256 * 1024)
    messages: list[tuple[int, int]] = []
    for index, size in enumerate(sizes(options)):
        inline = store is None or size <= options.reference_above
        if not (window is not None and inline and size > max_inline):
            messages.append((index, size))
    if window is None:
        return Plan(messages, options.count - len(messages), max_inline, {}, partitions or PARTITIONS)
    costs = [size if store is None or size <= options.reference_above else 1024 for _, size in messages]
    count, spread_over, kept = spread(costs, MOCK_PARTITION_BYTES, partitions)
    if not kept and partitions is None:  # more than the cluster keeps anyway: as on a real broker
        return Plan(messages, options.count - len(messages), max_inline, {}, PARTITIONS, kept=False)
    placement = dict(zip((i for i, _ in messages), spread_over, strict=True))
    return Plan(messages, options.count - len(messages), max_inline, placement, count, kept)


def spread(costs: Sequence[int], budget: int, partitions: int | None = None) -> tuple[int, list[int], bool]:
    """A partition per message, largest first into the emptiest, over the fewest partitions (from
    :data:`PARTITIONS` to :data:`MOCK_MAX_PARTITIONS`) that keep each under ``budget`` bytes;
    ``partitions`` fixes the count instead. Also whether each partition did stay under ``budget``.

    The embedded cluster silently drops the oldest batches of a partition past 5 MiB: spread this way,
    a topic keeps every message it was sent, and a later reader (the Spark stage) finds them all.
    """
    count = partitions or min(MOCK_MAX_PARTITIONS, max(PARTITIONS, -(-sum(costs) // budget)))
    order = sorted(range(len(costs)), key=lambda i: -costs[i])
    while True:
        emptiest = [(0, p) for p in range(count)]
        placement = [0] * len(costs)
        for i in order:
            filled, target = heapq.heappop(emptiest)
            heapq.heappush(emptiest, (filled + costs[i] + 512, target))  # 512: the record's and batch's bytes
            placement[i] = target
        kept = max(emptiest)[0] <= budget
        if kept or partitions is not None or count >= MOCK_MAX_PARTITIONS:
            return count, placement, kept
        count = min(MOCK_MAX_PARTITIONS, count + max(1, count // 8))


def demo_policy(options: DemoOptions, stores: Mapping[str, Any]) -> tuple[Policy, str | None]:
    """The demo's policy over the stores it has, and the store references go to first."""
    available = [s for s in options.stores if s in stores]
    store_name = available[0] if available else None
    base = SizeThresholdPolicy(reference_above=options.reference_above if store_name else None, store=store_name)
    policy: Policy = TieredPolicy(base, options.tier_above, available[1]) if len(available) > 1 else base
    return policy, store_name


def demo_producer(options: DemoOptions, env: DemoEnv) -> HybridProducer:
    policy, _ = demo_policy(options, env.stores)
    return HybridProducer(
        {
            **env.kafka.client_config,
            "bootstrap.servers": env.bootstrap,
            "message.max.bytes": 1_000_000,
            "linger.ms": 5,
            "max.message.segment.bytes": options.segment_bytes,
            "large.message.max.bytes": DEMO_BUFFER_BYTES,  # what demo_consumer's buffer holds
            "logger": kafka_logger(),
        },
        policy=policy,
        stores=env.stores,
    )


@dataclass(frozen=True)
class TieredPolicy(Policy):
    """The demo's own policy: the size threshold policy, then a second store for the largest values.

    It shows what a custom policy looks like: one call per message, a ``Route`` back, and what it
    declares beyond that (the stores it names, the sizes it always sends plain).
    """

    base: SizeThresholdPolicy
    above: int
    store: str

    def always_plain_up_to(self, segment_size: int) -> int:
        return min(self.base.always_plain_up_to(segment_size), self.above)

    def store_names(self) -> set[str]:
        return self.base.store_names() | {self.store}

    def route(self, message: MessageInfo) -> Route:
        if message.value_size > self.above:
            return Route.reference(self.store)
        return self.base.route(message)


def demo_consumer(env: DemoEnv) -> HybridConsumer:
    return HybridConsumer(
        {
            **env.kafka.client_config,
            "bootstrap.servers": env.bootstrap,
            "group.id": f"demo-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "message.assembler.buffer.capacity": DEMO_BUFFER_BYTES,
            "fetch.max.bytes": 52_428_800,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 20,
            "logger": kafka_logger(),
        },
        stores=env.stores,
    )


def run_demo(options: DemoOptions, env: DemoEnv, topic: str, sending: Plan, *, progress: Any = None) -> DemoResult:
    """Produce, consume and verify; ``env.window`` bounds unconsumed bytes (None: unbounded)."""
    notes: list[str] = []
    window = env.window
    _, store_name = demo_policy(options, env.stores)
    producer = demo_producer(options, env)
    consumer = demo_consumer(env)
    consumer.subscribe([topic])
    expected: dict[bytes, tuple[str, str, float, int]] = {}
    sent: dict[bytes, Sent] = {}
    routes: dict[str, RouteStats] = {}
    verified = mismatched = produced = 0
    in_flight = 0
    failures: list[str] = []
    started = time.monotonic()

    def take(timeout: float) -> bool:
        nonlocal verified, mismatched, in_flight
        msg = consumer.poll(timeout)
        if msg is None or msg.error() is not None:
            return False
        key = msg.key()
        entry = expected.pop(key, None) if isinstance(key, bytes) else None
        if entry is None:
            return True  # a record not from this run (never expected on a fresh topic)
        route_name, digest, sent_at, size = entry
        in_flight -= size
        stats = routes.setdefault(route_name, RouteStats())
        stats.latencies_ms.append((time.monotonic() - sent_at) * 1000)
        if hashlib.sha256(msg.value() or b"").hexdigest() == digest:
            verified += 1
            stats.verified += 1
        else:
            mismatched += 1
        if progress is not None:
            progress(verified + mismatched, len(sending.messages))
        return True

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for index, size in sending.messages:
        value = payload_for(index, size, options.seed)
        key = f"demo-{index}".encode()
        inline = store_name is None or size <= options.reference_above
        cost = size if inline else 1024
        while window is not None and in_flight > 0 and in_flight + cost > window:
            producer.poll(0)
            take(0.2)
        route = producer.route_for(topic, size, key)
        partition = sending.placement.get(index, -1)
        producer.produce(topic, value, key=key, partition=partition, on_delivery=delivered, route=route)
        take(0)  # keep the consumer moving between sends
        name = str(route)
        digest = hashlib.sha256(value).hexdigest()
        expected[key] = (name, digest, time.monotonic(), cost)
        sent[key] = Sent(name, digest, size, partition)
        stats = routes.setdefault(name, RouteStats())
        stats.messages += 1
        stats.payload_bytes += size
        produced += 1
        in_flight += cost
        producer.poll(0)
    producer.flush(60)
    deadline = time.monotonic() + 60
    while expected and time.monotonic() < deadline and not failures:
        take(0.5)
    consumer.close()
    if sending.skipped:
        notes.append(
            f"{sending.skipped} messages over {sending.max_inline:,} bytes were left out: the embedded cluster "
            "keeps ~5 MiB per partition and no store was available for them"
        )
    notes.extend(f"delivery failure: {f}" for f in failures[:5])
    counters = producer.metrics()
    kafka_bytes = {
        k[: -len(".kafka.bytes")].replace(".", ":"): v for k, v in counters.items() if k.endswith(".kafka.bytes")
    }
    store_bytes = {name: int(store.metrics().get("bytes_written", 0)) for name, store in env.stores.items()}
    result = DemoResult(
        produced, verified, mismatched, len(expected), sending.skipped, routes, kafka_bytes, store_bytes,
        env.backend, notes, time.monotonic() - started, topic, sent, sending.kept,
    )  # fmt: skip
    return result
