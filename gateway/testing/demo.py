"""``gateway demo``: the main job, end to end on real local components.

It produces a realistic mix (log-normal sizes, a few percent large) through
:class:`HybridProducer` under :class:`SizeThresholdPolicy`, consumes it back with
:class:`HybridConsumer`, checks every byte by SHA-256 and prints what went where.

The embedded cluster keeps only about 5 MiB per partition and drops older data silently, so the
demo never lets more than ``window`` bytes sit unconsumed: it consumes while it produces, and on
the embedded cluster it caps chunked messages below that window (larger ones go to a store, or
are left out when no store is available). It says so on screen.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from gateway.command import kafka_logger, probe_kafka
from gateway.consumer import HybridConsumer
from gateway.policy import MessageInfo, Policy, Route, SizeThresholdPolicy
from gateway.producer import HybridProducer

MOCK_WINDOW = 4 * 1024 * 1024
"""Unconsumed bytes allowed on the embedded cluster: under its 5 MiB-per-partition ring."""


@dataclass
class DemoOptions:
    count: int = 200
    min_size: int = 1_000
    max_size: int = 50_000_000
    median_size: int = 20_000
    large_fraction: float = 0.04
    segment_bytes: int = 800_000
    reference_above: int = 4_000_000
    tier_above: int = 16_000_000
    seed: int = 7
    stores: tuple[str, ...] = ("redis", "s3")
    kafka: str = "mock"


@dataclass
class RouteStats:
    messages: int = 0
    payload_bytes: int = 0
    latencies_ms: list[float] = field(default_factory=list)


@dataclass
class DemoResult:
    produced: int
    verified: int
    mismatched: int
    missing: int
    skipped: int
    routes: dict[str, RouteStats]
    kafka_bytes: dict[str, int]
    store_bytes: dict[str, int]
    backend: str
    notes: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return self.produced > 0 and self.verified == self.produced and not self.mismatched and not self.missing


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
class TieredPolicy:
    """The demo's own policy: the size threshold policy, then a second store for the largest values.

    It shows what a custom policy looks like: one call per message, a ``Route`` back.
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


def run_demo(
    options: DemoOptions,
    bootstrap: str,
    client_config: Mapping[str, Any],
    stores: Mapping[str, Any],
    *,
    window: int | None,
    progress: Any = None,
) -> DemoResult:
    """Produce, consume and verify; ``window`` bounds unconsumed bytes (None: unbounded)."""
    notes: list[str] = []
    topic = f"gateway-demo-{uuid.uuid4().hex[:8]}"
    available = [s for s in options.stores if s in stores]
    store_name = available[0] if available else None
    base = SizeThresholdPolicy(reference_above=options.reference_above if store_name else None, store=store_name)
    policy: Policy = TieredPolicy(base, options.tier_above, available[1]) if len(available) > 1 else base
    max_inline = options.max_size if window is None else min(options.max_size, window - 256 * 1024)
    producer = HybridProducer(
        {
            **client_config,
            "bootstrap.servers": bootstrap,
            "message.max.bytes": 1_000_000,
            "linger.ms": 5,
            "max.message.segment.bytes": options.segment_bytes,
            "logger": kafka_logger(),
        },
        policy=policy,
        stores=stores,
    )
    consumer = HybridConsumer(
        {
            **client_config,
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "message.assembler.buffer.capacity": 64_000_000,
            "fetch.max.bytes": 52_428_800,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 20,
            "logger": kafka_logger(),
        },
        stores=stores,
    )
    consumer.subscribe([topic])
    expected: dict[bytes, tuple[str, str, float, int]] = {}
    routes: dict[str, RouteStats] = {}
    verified = mismatched = skipped = produced = 0
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
        else:
            mismatched += 1
        if progress is not None:
            progress(verified + mismatched, options.count)
        return True

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for index, size in enumerate(sizes(options)):
        if window is not None and size > max_inline and (store_name is None or size <= options.reference_above):
            skipped += 1
            continue
        value = payload_for(index, size, options.seed)
        key = f"demo-{index}".encode()
        inline = store_name is None or size <= options.reference_above
        cost = size if inline else 1024
        while window is not None and in_flight > 0 and in_flight + cost > window:
            producer.poll(0)
            take(0.2)
        route = producer.route_for(topic, size, key)
        producer.produce(topic, value, key=key, on_delivery=delivered, route=route)
        take(0)  # keep the consumer moving between sends
        name = str(route)
        expected[key] = (name, hashlib.sha256(value).hexdigest(), time.monotonic(), cost)
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
    if skipped:
        notes.append(
            f"{skipped} messages over {max_inline:,} bytes were left out: the embedded cluster keeps ~5 MiB per "
            "partition and no store was available for them"
        )
    notes.extend(f"delivery failure: {f}" for f in failures[:5])
    counters = producer.metrics()
    kafka_bytes = {
        k[: -len(".kafka.bytes")].replace(".", ":"): v for k, v in counters.items() if k.endswith(".kafka.bytes")
    }
    store_bytes = {name: int(store.metrics().get("bytes_written", 0)) for name, store in stores.items()}
    return DemoResult(
        produced,
        verified,
        mismatched,
        len(expected),
        skipped,
        routes,
        kafka_bytes,
        store_bytes,
        "",
        notes,
        time.monotonic() - started,
    )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, int(q) - 1))]


def render(result: DemoResult, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    # Text, never markup: a backend such as [::1]:9092 or a store name must print as written
    table = Table(title=Text(f"gateway demo on {result.backend} ({result.seconds:.1f} s)"))
    for column in ("route", "messages", "payload bytes", "Kafka bytes", "store bytes", "p50 ms", "p99 ms"):
        table.add_column(column, justify="left" if column == "route" else "right")
    for name, stats in sorted(result.routes.items()):
        kind = name.split(":")[0]
        store = name.split(":")[1] if ":" in name else None
        table.add_row(
            Text(name),
            f"{stats.messages:,}",
            f"{stats.payload_bytes:,}",
            f"{result.kafka_bytes.get(name, result.kafka_bytes.get(kind, 0)):,}",
            f"{result.store_bytes.get(store, 0):,}" if store else "-",
            f"{percentile(stats.latencies_ms, 50):.1f}",
            f"{percentile(stats.latencies_ms, 99):.1f}",
        )
    console.print(table)
    for note in result.notes:
        console.print(Text("note: ", style="yellow") + Text(note))
    verdict = "[green]every byte verified[/green]" if result.ok else "[red]VERIFICATION FAILED[/red]"
    console.print(
        f"{verdict}: {result.verified}/{result.produced} messages match by SHA-256"
        f" ({result.mismatched} mismatched, {result.missing} missing)"
    )


def main(options: DemoOptions) -> int:
    """Start what the demo needs, run it, print the report; exit status 0 only if every byte verified."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn
    from rich.text import Text

    from gateway import testing

    console = Console(width=max(110, Console().width))
    with ExitStack() as stack:
        if ":" in options.kafka:  # a bootstrap address: an existing cluster, which must answer first
            kafka = None
            probe_kafka(options.kafka)
            bootstrap, client_config, backend = options.kafka, {}, f"external {options.kafka}"
        else:
            kafka = stack.enter_context(testing.start_kafka(options.kafka))
            bootstrap, client_config = kafka.bootstrap_servers, dict(kafka.client_config)
            backend = f"{kafka.name} ({kafka.version})"
        window = MOCK_WINDOW if kafka is not None and kafka.name == "mock" else None
        stores, store_notes = open_stores(options, stack)
        for note in store_notes:
            console.print(Text("note: ", style="yellow") + Text(note))
        console.print(
            Text(
                f"Kafka: {backend}"
                + (
                    f"; at most {window:,} bytes left unconsumed (the embedded cluster keeps ~5 MiB per partition)"
                    if window
                    else ""
                )
            )
        )
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("producing and verifying", total=options.count)
            result = run_demo(
                options,
                bootstrap,
                client_config,
                stores,
                window=window,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
        result.backend = backend
        render(result, console)
        return 0 if result.ok else 1


def open_stores(options: DemoOptions, stack: ExitStack) -> tuple[dict[str, Any], list[str]]:
    """Real Redis and S3 servers when installed; in-process stand-ins otherwise, and the screen says which."""
    from gateway import testing

    stores: dict[str, Any] = {}
    notes: list[str] = []
    if "redis" in options.stores:
        try:
            import redis

            from stores import RedisStore

            server = stack.enter_context(testing.RedisServer())
            client = redis.Redis.from_url(server.url, socket_timeout=5, socket_connect_timeout=2)
            stores["redis"] = RedisStore(client, prefix=f"demo{uuid.uuid4().hex[:6]}")
            notes.append(f"Redis: redis-server {server.server_version()} at {server.url}")
        except (testing.ServiceUnavailable, ImportError) as exc:
            try:
                import fakeredis

                from stores import RedisStore

                stores["redis"] = RedisStore(fakeredis.FakeRedis(), prefix="demo")
                notes.append(f"Redis: in-process fakeredis stand-in ({exc})")
            except ImportError:
                notes.append(f"Redis: not available ({exc}); no Redis references")
    if "s3" in options.stores:
        try:
            from stores import S3Store

            s3 = stack.enter_context(testing.S3Server())
            bucket = s3.create_bucket(f"gateway-demo-{uuid.uuid4().hex[:8]}")
            stores["s3"] = S3Store(s3.client(), bucket=bucket, prefix="demo/")
            notes.append(f"S3: moto server at {s3.endpoint_url}, bucket {bucket}")
        except (testing.ServiceUnavailable, ImportError) as exc:
            notes.append(f"S3: not available ({exc}); no S3 references")
    if not stores:
        notes.append("no store available: large messages are chunked, or left out when they exceed the window")
    return stores, notes
