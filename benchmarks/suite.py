"""The route benchmark: every route beside its baselines, on fixed sizes, mixes, latency and passthrough.

One process, one broker, one Redis and one S3 server; variants of a cell run one after the other
(never at once), in alternating order between repetitions, each on its own fresh topic and store
keys, deleted again after the repetition. Figures are medians over the repetitions with their
min-max. :mod:`benchmarks.__main__` drives it and :mod:`benchmarks.report` renders the results.
"""

from __future__ import annotations

import cProfile
import importlib.metadata
import os
import platform
import pstats
import random
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from confluent_kafka import libversion
from confluent_kafka import version as ck_version

from benchmarks.common import MEMORY_METHOD, bench_kafka, malloc_mode, mbps, payload, percentile, stat, timed
from benchmarks.memory import measure_in_child, spec_for
from benchmarks.variants import (
    CEILING,
    CHUNK_MESSAGE_MAX,
    CONSUME_VARIANTS,
    KAFKA_VARIANTS,
    LATENCY_VARIANTS,
    PASSTHROUGH_READERS,
    PASSTHROUGH_WRITERS,
    PRODUCE_VARIANTS,
    RAISED_MESSAGE_MAX,
    RAW_TOPIC_CONFIG,
    SEGMENT,
    Job,
    LatencyPair,
    Outcome,
    Services,
    Work,
    consume_job,
    passthrough_job,
    passthrough_produce_job,
    produce_job,
    produce_small,
)
from gateway.testing import RedisServer, S3Server

TARGET_RATIO = 0.9
MIX_VARIANTS = ("raw.record", "chunked", "redis", "s3")
MEMORY_VARIANTS = ("raw.record", "raw.segments", "chunked", "redis", "s3")
PRODUCER_MEMORY_VARIANTS = ("raw.record", "raw.segments", "chunked", "redis", "s3")
S3_VARIANTS = frozenset({"s3.raw", "s3.raw+env", "s3"})
"""Consumers whose memory is measured; the store-only baselines hold one payload at a time."""
PROFILE_PASSTHROUGH_MESSAGES = 30_000
PROFILE_BYTES = 30_000_000


class UI(Protocol):
    """What the suite tells whoever watches: steps to expect, the current step, finished lines."""

    def add_steps(self, count: int) -> None: ...

    def step(self, text: str) -> None: ...

    def advance(self) -> None: ...

    def note(self, text: str) -> None: ...


class PlainUI:
    """Prints finished lines only (no live display)."""

    def add_steps(self, count: int) -> None:
        pass

    def step(self, text: str) -> None:
        pass

    def advance(self) -> None:
        pass

    def note(self, text: str) -> None:
        print(text, flush=True)


@dataclass
class Plan:
    mode: str
    sizes: dict[int, int]
    """payload size -> messages per repetition."""
    repeats: int
    mixes: list[tuple[str, float]]
    mix_large: int
    """large messages per mix; the mix's message count is ``mix_large / fraction``."""
    mix_small: int = 1_000
    mix_large_size: int = 5_000_000
    mix_repeats: int = 3
    latency: dict[int, int] = field(default_factory=dict)
    """payload size -> round trips per repetition."""
    latency_repeats: int = 3
    passthrough_messages: int = 100_000
    passthrough_size: int = 100
    passthrough_repeats: int = 3
    memory_passes: int = 3
    """consumer memory: reads per variant in the child process of a cell's last repetition."""
    s3_max_messages: int = 10
    """fixed sizes: the S3 variants move only this many of the cell's payloads (moto is slow per request)."""
    seed: int = 20261122

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            mode="quick",
            sizes={100_000: 200, 1_000_000: 30, 10_000_000: 3},
            repeats=5,
            s3_max_messages=10,
            mixes=[("1% large", 0.01), ("10% large", 0.10), ("50% large", 0.50)],
            mix_large=2,
            latency={100_000: 12, 1_000_000: 8, 10_000_000: 5},
            latency_repeats=3,
        )

    @classmethod
    def full(cls) -> Plan:
        return cls(
            mode="full",
            sizes={100_000: 1000, 1_000_000: 200, 10_000_000: 20, 100_000_000: 3},
            repeats=7,  # the ratios' medians: five moved by up to 0.3 between runs on the 2-core machine
            mixes=[("1% large", 0.01), ("10% large", 0.10), ("50% large", 0.50)],
            mix_large=20,
            mix_repeats=5,
            latency={100_000: 50, 1_000_000: 40, 10_000_000: 15, 100_000_000: 3},
            latency_repeats=5,
            passthrough_repeats=7,
            s3_max_messages=200,
        )


def _slug(variant: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", variant.lower()).strip("-")


def _order(items: tuple[str, ...] | list[str], rep: int) -> list[str]:
    """Alternate the order between repetitions, so warm-up and drift do not favour one side."""
    seq = list(items)
    return seq[::-1] if rep % 2 else seq


class Suite:
    def __init__(self, plan: Plan, backend: str, ui: UI) -> None:
        self.plan = plan
        self.backend = backend
        self.ui = ui
        self.run_id = uuid.uuid4().hex[:8]
        self.svc: Services
        self.kafka_label = backend
        self._topics: list[str] = []

    # -- plumbing ----------------------------------------------------------------------------
    def topic(self, what: str, raw_record: bool = False) -> str:
        name = f"bench-{self.run_id}-{_slug(what)}-{uuid.uuid4().hex[:6]}"
        self.svc.kafka.create_topic(name, partitions=1, config=RAW_TOPIC_CONFIG if raw_record else None)
        self._topics.append(name)
        return name

    def drop_topics(self) -> None:
        for name in self._topics:
            self.svc.kafka.delete_topic(name)
        self._topics.clear()

    def run_job(self, job: Job) -> tuple[float, Outcome]:
        try:
            return timed(job.run)
        finally:
            job.close()

    def memory(
        self, works: dict[str, Work], topics: dict[str, str], variants: tuple[str, ...], what: str
    ) -> dict[str, list[float]]:
        """Consumer peak RSS growth per variant, from a child process reading what the timed runs wrote."""
        self.ui.step(f"{what}: consumer memory ({self.plan.memory_passes} passes per variant, child process)")
        spec = spec_for(
            self.svc,
            {v: [len(x) for x in works[v].values] for v in variants},
            {v: topics[v] for v in variants},
            self.plan.memory_passes,
        )
        out = measure_in_child(spec)
        self.ui.advance()
        return out

    def producer_memory(self, works: dict[str, Work], what: str) -> dict[str, list[float]]:
        """Producer peak RSS growth per route and raw ``produce``, each sending the cell's payloads to a fresh topic."""
        self.ui.step(f"{what}: producer memory ({self.plan.memory_passes} passes per variant, child process)")
        topics = {v: self.topic(f"mem-{what}-{v}", v == "raw.record") for v in PRODUCER_MEMORY_VARIANTS}
        spec = spec_for(
            self.svc,
            {v: [len(x) for x in works[v].values] for v in PRODUCER_MEMORY_VARIANTS},
            topics,
            self.plan.memory_passes,
            side="produce",
        )
        out = measure_in_child(spec)
        self.ui.advance()
        return out

    @contextmanager
    def services(self) -> Iterator[dict[str, Any]]:
        with bench_kafka(self.backend) as kafka, RedisServer() as redis_server, S3Server() as s3_server:
            bucket = s3_server.bucket or s3_server.create_bucket(f"bench-{self.run_id}")
            self.svc = Services(
                kafka,
                redis_server,
                s3_server,
                bucket,
                redis_prefix=f"bench{self.run_id}",
                s3_prefix=f"bench-{self.run_id}/",
            )
            env = describe(kafka, redis_server, s3_server)
            self.kafka_label = env["kafka"]
            self.svc.redis.ping()  # connect both store clients before anything is timed
            self.svc.s3.head_bucket(Bucket=bucket)
            try:
                yield env
            finally:
                self.drop_topics()
                self.svc.clear_stores()

    # -- fixed sizes ---------------------------------------------------------------------------
    def fixed_size(self, size: int, count: int) -> dict[str, Any]:
        plan = self.plan
        work = Work.of(f"{size}", [payload(size, seed=i) for i in range(count)])
        work.segments()
        # moto answers each request in ~10 ms, so the S3 variants take only the first s3_max_messages payloads
        works = {v: work.head(plan.s3_max_messages) if v in S3_VARIANTS else work for v in PRODUCE_VARIANTS}
        produce: dict[str, list[float]] = {v: [] for v in PRODUCE_VARIANTS}
        consume: dict[str, list[float]] = {v: [] for v in CONSUME_VARIANTS}
        memory: dict[str, list[float]] = {}
        producer_memory: dict[str, list[float]] = {}
        kafka_bytes: dict[str, int] = {}
        store_bytes: dict[str, int] = {}
        label = _size_label(size)
        for rep in range(plan.repeats):
            topics = {v: self.topic(f"{label}-{v}", v == "raw.record") for v in PRODUCE_VARIANTS if v in KAFKA_VARIANTS}
            for v in PRODUCE_VARIANTS:
                topics.setdefault(v, f"bench-{self.run_id}-{_slug(label + '-' + v)}-{rep}")
            for v in _order(PRODUCE_VARIANTS, rep):
                self.ui.step(f"{label} x{count} rep {rep + 1}/{plan.repeats}: produce {v}")
                seconds, out = self.run_job(produce_job(self.svc, v, topics[v], works[v]))
                produce[v].append(mbps(seconds, out.moved))
                kafka_bytes[v], store_bytes[v] = out.kafka_bytes, out.store_bytes
                self.ui.advance()
            for v in _order(CONSUME_VARIANTS, rep):
                self.ui.step(f"{label} x{count} rep {rep + 1}/{plan.repeats}: consume {v}")
                seconds, out = self.run_job(consume_job(self.svc, v, topics[v], works[v]))
                consume[v].append(mbps(seconds, out.moved))
                self.ui.advance()
            if rep == plan.repeats - 1:
                memory = self.memory(works, topics, MEMORY_VARIANTS, label)
                producer_memory = self.producer_memory(works, label)
            self.drop_topics()
            self.svc.clear_stores()
        work.drop_segments()
        row: dict[str, Any] = {
            "size": size,
            "label": label,
            "messages": count,
            "bytes": work.total,
            "variant_messages": {v: w.count for v, w in works.items()},
            "variant_bytes": {v: w.total for v, w in works.items()},
            "produce": {v: stat(s) for v, s in produce.items()},
            "consume": {v: stat(s) for v, s in consume.items()},
            "memory": {v: stat(s) for v, s in memory.items()},
            "producer_memory": {v: stat(s) for v, s in producer_memory.items()},
            "kafka_bytes": kafka_bytes,
            "store_bytes": store_bytes,
        }
        # Route and ceiling run back to back in every repetition: the ratio is the median of the
        # per-repetition ratios, which cancels whatever slowed a whole repetition down.
        paired = {
            route: {
                side: stat(a / b for a, b in zip(measured[route], measured[base], strict=True))
                for side, measured in (("produce", produce), ("consume", consume))
            }
            for route, base in CEILING.items()
        }
        row["ratio_stats"] = paired
        row["ratios"] = {route: {side: x["median"] for side, x in sides.items()} for route, sides in paired.items()}
        ratios = " ".join(f"{r} {x['produce']:.2f}/{x['consume']:.2f}" for r, x in row["ratios"].items())
        self.ui.note(
            f"{label:>6}: produce/consume vs ceiling {ratios}  | raw.record "
            f"{row['produce']['raw.record']['median']:.0f}/{row['consume']['raw.record']['median']:.0f} "
            f"chunked {row['produce']['chunked']['median']:.0f}/{row['consume']['chunked']['median']:.0f} "
            f"redis {row['produce']['redis']['median']:.0f}/{row['consume']['redis']['median']:.0f} "
            f"s3 {row['produce']['s3']['median']:.0f}/{row['consume']['s3']['median']:.0f} MB/s "
            f"[{self.kafka_label}]"
        )
        return row

    # -- mixes -------------------------------------------------------------------------------
    def mix_work(self, name: str, fraction: float) -> Work:
        plan = self.plan
        count = max(plan.mix_large, round(plan.mix_large / fraction))
        rng = random.Random(plan.seed + int(fraction * 1000))
        large = set(rng.sample(range(count), plan.mix_large))
        values = [payload(plan.mix_large_size if i in large else plan.mix_small, seed=i) for i in range(count)]
        return Work.of(name, values)

    def mix(self, name: str, fraction: float) -> dict[str, Any]:
        plan = self.plan
        work = self.mix_work(name, fraction)
        produce: dict[str, list[float]] = {v: [] for v in MIX_VARIANTS}
        consume: dict[str, list[float]] = {v: [] for v in MIX_VARIANTS}
        memory: dict[str, list[float]] = {}
        producer_memory: dict[str, list[float]] = {}
        kafka_bytes: dict[str, int] = {}
        store_bytes: dict[str, int] = {}
        for rep in range(plan.mix_repeats):
            topics = {v: self.topic(f"mix-{v}", v == "raw.record") for v in MIX_VARIANTS}
            for v in _order(MIX_VARIANTS, rep):
                self.ui.step(f"mix {name} rep {rep + 1}/{plan.mix_repeats}: produce {v}")
                seconds, out = self.run_job(produce_job(self.svc, v, topics[v], work, forced=False))
                produce[v].append(mbps(seconds, out.moved))
                kafka_bytes[v], store_bytes[v] = out.kafka_bytes, out.store_bytes
                self.ui.advance()
            for v in _order(MIX_VARIANTS, rep):
                self.ui.step(f"mix {name} rep {rep + 1}/{plan.mix_repeats}: consume {v}")
                seconds, out = self.run_job(consume_job(self.svc, v, topics[v], work))
                consume[v].append(mbps(seconds, out.moved))
                self.ui.advance()
            if rep == plan.mix_repeats - 1:
                memory = self.memory({v: work for v in MIX_VARIANTS}, topics, MIX_VARIANTS, f"mix {name}")
            self.drop_topics()
            self.svc.clear_stores()
        row: dict[str, Any] = {
            "name": name,
            "fraction": fraction,
            "messages": work.count,
            "large": plan.mix_large,
            "small_size": plan.mix_small,
            "large_size": plan.mix_large_size,
            "bytes": work.total,
            "produce": {v: stat(s) for v, s in produce.items()},
            "consume": {v: stat(s) for v, s in consume.items()},
            "memory": {v: stat(s) for v, s in memory.items()},
            "producer_memory": {v: stat(s) for v, s in producer_memory.items()},
            "kafka_bytes": kafka_bytes,
            "store_bytes": store_bytes,
        }
        self.ui.note(
            f"mix {name:>9} ({work.count} msgs, {work.total / 1e6:.1f} MB): Kafka MB "
            + " ".join(f"{v} {kafka_bytes[v] / 1e6:.2f}" for v in MIX_VARIANTS)
            + f" [{self.kafka_label}]"
        )
        return row

    # -- latency -----------------------------------------------------------------------------
    def latency(self, size: int, count: int) -> dict[str, Any]:
        plan = self.plan
        pool = [payload(size, seed=1000 + i) for i in range(3)]
        p50: dict[str, list[float]] = {v: [] for v in LATENCY_VARIANTS}
        p99: dict[str, list[float]] = {v: [] for v in LATENCY_VARIANTS}
        label = _size_label(size)
        for rep in range(plan.latency_repeats):
            for v in _order(LATENCY_VARIANTS, rep):
                self.ui.step(f"latency {label} rep {rep + 1}/{plan.latency_repeats}: {v}")
                pair = LatencyPair(self.svc, v, self.topic(f"lat-{v}", v == "raw.record"))
                try:
                    pair.roundtrip(b"warm-up", pool[0])
                    samples = [pair.roundtrip(f"r{rep}-{i}".encode(), pool[i % len(pool)]) for i in range(count)]
                finally:
                    pair.close()
                p50[v].append(percentile(samples, 50) * 1000)
                p99[v].append(percentile(samples, 99) * 1000)
                self.ui.advance()
            self.drop_topics()
            self.svc.clear_stores()
        row: dict[str, Any] = {
            "size": size,
            "label": label,
            "round_trips": count,
            "p50_ms": {v: stat(s) for v, s in p50.items()},
            "p99_ms": {v: stat(s) for v, s in p99.items()},
        }
        self.ui.note(
            f"latency {label:>6}: p50/p99 ms "
            + " ".join(
                f"{v} {row['p50_ms'][v]['median']:.1f}/{row['p99_ms'][v]['median']:.1f}" for v in LATENCY_VARIANTS
            )
            + f" [{self.kafka_label}]"
        )
        return row

    # -- passthrough -------------------------------------------------------------------------
    def passthrough(self) -> dict[str, Any]:
        plan = self.plan
        n, size = plan.passthrough_messages, plan.passthrough_size
        topic = self.topic("passthrough")
        self.ui.step(f"passthrough: producing {n} x {size} B")
        produce_small(self.svc, topic, n, size)
        rates: dict[str, list[float]] = {r: [] for r in PASSTHROUGH_READERS}
        for rep in range(plan.passthrough_repeats):
            for reader in _order(PASSTHROUGH_READERS, rep):
                self.ui.step(f"passthrough rep {rep + 1}/{plan.passthrough_repeats}: {reader}")
                seconds, out = self.run_job(passthrough_job(self.svc, reader, topic, n))
                if out.messages != n:
                    raise AssertionError(f"{reader} read {out.messages} of {n}")
                rates[reader].append(n / seconds)
                self.ui.advance()
        self.drop_topics()
        for rep in range(plan.passthrough_repeats):
            for writer in _order(PASSTHROUGH_WRITERS, rep):
                self.ui.step(f"passthrough rep {rep + 1}/{plan.passthrough_repeats}: {writer}")
                written = self.topic(f"passthrough-{writer}")
                seconds, out = self.run_job(passthrough_produce_job(self.svc, writer, written, n, size))
                rates.setdefault(writer, []).append(n / seconds)
                self.ui.advance()
            self.drop_topics()
        row: dict[str, Any] = {
            "messages": n,
            "size": size,
            "same_topic": True,
            "msgs_per_s": {r: stat(s) for r, s in rates.items()},
        }
        med = {r: row["msgs_per_s"][r]["median"] for r in rates}
        row["ratios"] = {
            "poll": med["hybrid.poll"] / med["raw.poll"],
            "consume": med["hybrid.consume"] / med["raw.consume"],
            "poll_vs_fastest_raw": med["hybrid.poll"] / max(med["raw.poll"], med["raw.consume"]),
            "produce": med["hybrid.produce"] / med["raw.produce"],
        }
        self.ui.note(
            f"passthrough {n} x {size} B: msgs/s "
            + " ".join(f"{r} {med[r]:,.0f}" for r in med)
            + f" [{self.kafka_label}]"
        )
        return row

    # -- targets and profiles ----------------------------------------------------------------
    def profile(self, target: dict[str, Any]) -> dict[str, Any]:
        """Run the missed case once more under cProfile (the gateway side and its baseline)."""
        kind = target["kind"]
        out: dict[str, Any] = {"target": target["id"], "case": target["case"]}
        if kind == "passthrough":
            n = min(self.plan.passthrough_messages, PROFILE_PASSTHROUGH_MESSAGES)
            size = self.plan.passthrough_size
            topic = self.topic("prof-passthrough")
            produce_small(self.svc, topic, n, size)
            call = target["call"]
            for side, reader in (("gateway", f"hybrid.{call}"), ("baseline", f"raw.{call}")):
                self.ui.step(f"profiling {target['id']}: {reader}")
                out[side] = _profiled(reader, passthrough_job(self.svc, reader, topic, n))
                self.ui.advance()
        else:
            route, side_name, size = target["route"], target["side"], target["size"]
            # at least PROFILE_BYTES of payload, so that a profile of small messages has something to show
            count = max(self.plan.sizes[size], -(-PROFILE_BYTES // size))
            work = Work.of(str(size), [payload(size, seed=i) for i in range(count)])
            for side, variant in (("gateway", route), ("baseline", CEILING[route])):
                self.ui.step(f"profiling {target['id']} at {_size_label(size)}: {variant}")
                topic = self.topic(f"prof-{variant}")
                if side_name == "produce":
                    out[side] = _profiled(variant, produce_job(self.svc, variant, topic, work))
                else:
                    self.run_job(produce_job(self.svc, variant, topic, work))
                    out[side] = _profiled(variant, consume_job(self.svc, variant, topic, work))
                self.ui.advance()
            work.drop_segments()
        self.drop_topics()
        self.svc.clear_stores()
        return out

    def run(self) -> dict[str, Any]:
        plan = self.plan
        started = time.time()
        malloc_mode("fast")
        per_size = len(PRODUCE_VARIANTS) + len(CONSUME_VARIANTS)
        self.ui.add_steps(
            (plan.repeats * per_size + 2) * len(plan.sizes)
            + (plan.mix_repeats * 2 * len(MIX_VARIANTS) + 1) * len(plan.mixes)
            + plan.latency_repeats * len(LATENCY_VARIANTS) * len(plan.latency)
            + plan.passthrough_repeats * (len(PASSTHROUGH_READERS) + len(PASSTHROUGH_WRITERS))
        )
        results: dict[str, Any] = {
            "mode": plan.mode,
            "plan": asdict(plan),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        }
        self.ui.step("starting Kafka, Redis and S3 servers")
        with self.services() as env:
            results["env"] = env
            self.ui.note(
                f"Kafka: {env['kafka']} | Redis: {env['redis']} | S3: {env['s3']} | "
                f"confluent-kafka {env['confluent_kafka']} (librdkafka {env['librdkafka']})"
            )
            phases: dict[str, float] = {"servers": time.time() - started}
            clock = time.perf_counter()

            def lap(name: str) -> None:
                nonlocal clock
                now = time.perf_counter()
                phases[name] = now - clock
                clock = now

            results["sizes"] = [self.fixed_size(size, count) for size, count in plan.sizes.items()]
            lap("fixed sizes")
            results["mixes"] = [self.mix(name, fraction) for name, fraction in plan.mixes]
            lap("mixes")
            results["latency"] = [self.latency(size, count) for size, count in plan.latency.items()]
            lap("latency")
            results["passthrough"] = self.passthrough()
            lap("passthrough")
            results["targets"] = targets(results)
            missed = worst_misses(results["targets"])
            self.ui.add_steps(2 * len(missed))
            results["profiles"] = [self.profile(t) for t in missed]
            lap("profiles")
            results["phase_seconds"] = phases
        results["wall_seconds"] = time.time() - started
        return results


def _size_label(size: int) -> str:
    if size >= 1_000_000:
        return f"{size / 1e6:g} MB"
    return f"{size / 1e3:g} KB"


ROUTE_TARGETS = {"chunked": 0.95, "redis": 0.9, "s3": 0.9}
"""Each route's share of its ceiling's MB/s, at every size from its smallest (see ROUTE_TARGET_FROM)."""
ROUTE_TARGET_FROM = {"chunked": 100_000, "redis": 100_000, "s3": 1_000_000}
PASSTHROUGH_TARGETS = {"poll": 0.95, "consume": 0.9}
CONSUMER_MEMORY_TARGET = 1.25
"""Consumer peak RSS growth beyond the raw-segments consumer's, in copies of one message: one copy and a quarter."""
PRODUCER_MEMORY_TARGET = 0.1
"""Producer peak RSS growth beyond raw ``produce`` of the same bytes, in copies of one message: no copy."""
MEMORY_TARGET_FROM = 10_000_000
"""Smaller cells hold many messages at the peak (librdkafka prefetches 64 MiB): their growth per message is noise."""


def _target(tid: str, kind: str, case: str, ratio: float, threshold: float, at_most: bool = False) -> dict[str, Any]:
    met = ratio <= threshold if at_most else ratio >= threshold
    return {
        "id": tid,
        "kind": kind,
        "case": case,
        "ratio": ratio,
        "threshold": threshold,
        "at_most": at_most,
        "met": bool(met),
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of the brief, per size: measured ratio, threshold, met or not. Reported, never asserted."""
    rows: list[dict[str, Any]] = []
    for cell in results["sizes"]:
        for route, threshold in ROUTE_TARGETS.items():
            if cell["size"] < ROUTE_TARGET_FROM[route]:
                continue
            for side in ("produce", "consume"):
                case = f"{route} {side} at {cell['label']} vs {CEILING[route]}"
                row = _target(f"{route}.{side}", "route", case, cell["ratios"][route][side], threshold)
                rows.append({**row, "route": route, "side": side, "size": cell["size"]})
        rows.extend(_memory_targets(cell))
    passthrough = results["passthrough"]
    for call, threshold in PASSTHROUGH_TARGETS.items():
        case = f"{passthrough['messages']} x {passthrough['size']} B plain, HybridConsumer.{call} vs Consumer.{call}"
        row = _target(f"passthrough.{call}", "passthrough", case, passthrough["ratios"][call], threshold)
        rows.append({**row, "call": call, "size": passthrough["size"]})
    return rows


def _memory_targets(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """Peak RSS growth beyond the baseline's, in multiples of the cell's message size (lower is better)."""
    rows: list[dict[str, Any]] = []
    size, label = cell["size"], cell["label"]
    if size < MEMORY_TARGET_FROM:
        return rows
    for side, data, base, threshold in (
        ("consumer", cell.get("memory", {}), "raw.segments", CONSUMER_MEMORY_TARGET),
        ("producer", cell.get("producer_memory", {}), "raw.record", PRODUCER_MEMORY_TARGET),
    ):
        if base not in data:
            continue
        for route in ("chunked", "redis", "s3"):
            if route in data:
                excess = (data[route]["median"] - data[base]["median"]) / size
                case = f"{side} peak RSS growth at {label}, {route} minus {base}, in messages"
                rows.append(
                    {**_target(f"memory.{side}.{route}", "memory", case, excess, threshold, True), "size": size}
                )
    return rows


def worst_misses(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each target id that missed anywhere, the case with the lowest ratio."""
    worst: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["met"] or row["kind"] == "memory":  # memory is not a matter of where the time goes
            continue
        if row["id"] not in worst or row["ratio"] < worst[row["id"]]["ratio"]:
            worst[row["id"]] = row
    return list(worst.values())


# -- profiling ---------------------------------------------------------------------------------

_COMPONENTS: list[tuple[str, Callable[[str, str], bool]]] = [
    ("librdkafka (C: waiting in poll/flush, copying)", lambda f, n: "cimpl" in n or "confluent_kafka" in f),
    ("gateway code", lambda f, n: "/gateway/" in f),
    ("stores code", lambda f, n: "/stores/" in f),
    ("payload digest (SHA-256, BLAKE3)", lambda f, n: "sha256" in n or "hashlib" in f or "blake3" in n),
    ("redis-py", lambda f, n: "/redis/" in f or "hiredis" in n),
    (
        "boto3/botocore/urllib3",
        lambda f, n: any(
            s in f for s in ("/botocore/", "/boto3/", "/s3transfer/", "/urllib3/", "http/client", "/ssl.py")
        ),
    ),
    ("socket I/O", lambda f, n: "socket" in n or "socket" in f or "select" in n),
    (
        "waiting: locks, futures, idle worker queues",
        lambda f, n: "acquire" in n or "SimpleQueue" in n or "threading" in f or "concurrent/" in f,
    ),
    ("benchmark loop", lambda f, n: "/benchmarks/" in f),
]


_COUNTED_CALLS = [  # (label, function name contains - or equals, after "=" - , file name contains)
    ("socket sends", "'sendall' of '_socket.socket'", ""),
    ("socket receives", "'recv_into' of '_socket.socket'", ""),
    ("SHA-256 digests", "openssl_sha256", ""),
    ("BLAKE3 digests", "'update' of 'blake3.blake3.blake3'", ""),
    ("librdkafka produce calls", "'produce' of 'cimpl.Producer'", ""),
    ("librdkafka poll calls", "'poll' of 'cimpl.Consumer'", ""),
    ("waits on a future", "=result", "concurrent/futures/_base.py"),
]
"""Calls counted per message in a profile: round trips and hashing are what a share of time hides."""


def _component(filename: str, name: str) -> str:
    for label, match in _COMPONENTS:
        if match(filename, name):
            return label
    return "other Python / builtins"


def _where(filename: str, line: int, name: str) -> str:
    if filename == "~":
        return name
    for ours in ("/gateway/", "/stores/", "/benchmarks/"):
        if ours in filename and "/site-packages/" not in filename:
            return f"{ours[1:]}{filename.rsplit(ours, 1)[1]}:{line}({name})"
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            if marker == "/lib/python3":
                filename = filename.split("/", 1)[-1]
            break
    return f"{filename}:{line}({name})"


class _ThreadProfiles:
    """A cProfile of every Python thread started while active (the gateway consumer's fetch-ahead pool).

    ``threading.setprofile`` installs :meth:`hook` in each new thread; its first call replaces itself
    with a fresh ``cProfile.Profile`` for that thread. Collect only after those threads have ended
    (``Job.close`` shuts the pool down), since a profiler can only be switched off from its own thread.
    """

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        prof = cProfile.Profile()
        with self._lock:
            self.profiles.append(prof)
        prof.enable()

    def __enter__(self) -> _ThreadProfiles:
        threading.setprofile(self.hook)
        return self

    def __exit__(self, *exc: object) -> None:
        threading.setprofile(None)


def _stats(prof: cProfile.Profile) -> dict[tuple[str, int, str], tuple[int, int, float, float, Any]]:
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    return raw


def _profiled(variant: str, job: Job, top: int = 14) -> dict[str, Any]:
    prof = cProfile.Profile()
    threads = _ThreadProfiles()
    try:
        with threads:
            prof.enable()
            start = time.perf_counter()
            out = job.run()
            seconds = time.perf_counter() - start
            prof.disable()
    finally:
        job.close()
    merged: dict[tuple[str, int, str], list[float]] = {}
    main_total = thread_total = 0.0
    for index, profile in enumerate([prof, *threads.profiles]):
        for key, (_cc, ncalls, tottime, cumtime, _callers) in _stats(profile).items():
            row = merged.setdefault(key, [0.0, 0.0, 0.0])
            row[0] += ncalls
            row[1] += tottime
            row[2] += cumtime
            if index == 0:
                main_total += tottime
            else:
                thread_total += tottime
    total = (main_total + thread_total) or 1.0
    components: dict[str, float] = {}
    rows: list[dict[str, Any]] = []
    for (filename, line, name), (calls, self_time, cumulative) in merged.items():
        comp = _component(filename, name)
        components[comp] = components.get(comp, 0.0) + self_time
        rows.append(
            {
                "function": _where(filename, line, name),
                "ncalls": int(calls),
                "tottime": self_time,
                "cumtime": cumulative,
                "component": comp,
            }
        )
    rows.sort(key=lambda r: -float(r["tottime"]))
    own = sorted(
        (r for r in rows if str(r["function"]).startswith(("gateway/", "stores/"))), key=lambda r: -float(r["cumtime"])
    )
    counted: dict[str, int] = {}
    for (filename, _line, name), (n_calls, _self, _cum) in merged.items():
        for label, name_part, file_part in _COUNTED_CALLS:
            hit = name == name_part[1:] if name_part.startswith("=") else name_part in name
            if hit and file_part in filename:
                counted[label] = counted.get(label, 0) + int(n_calls)
    return {
        "variant": variant,
        "seconds_profiled": seconds,
        "messages": out.messages,
        "calls_per_message": {k: v / max(1, out.messages) for k, v in sorted(counted.items())},
        "MBps_profiled": mbps(seconds, out.moved) if out.moved else None,
        "msgs_per_s_profiled": out.messages / seconds if seconds else None,
        "profiled_total_s": total,
        "worker_threads": len(threads.profiles),
        "worker_share": thread_total / total,
        "components": dict(sorted(((k, v / total) for k, v in components.items()), key=lambda kv: -kv[1])),
        "top_self": rows[:top],
        "top_own_cumulative": own[:10],
    }


# -- environment -------------------------------------------------------------------------------


def _dist(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe(kafka: Any, redis_server: RedisServer, s3_server: S3Server) -> dict[str, Any]:
    try:
        redis_version = redis_server.server_version()
    except Exception:  # noqa: BLE001 - an external server that refuses INFO: still benchmark it
        redis_version = "redis (version unknown)"
    s3 = f"moto server {_dist('moto')}" if not s3_server.external else f"external S3 {s3_server.endpoint_url}"
    label = kafka.version if kafka.name in str(kafka.version).lower() else f"{kafka.name} {kafka.version}"
    return {
        "kafka": label,
        "kafka_backend": kafka.name,
        "kafka_version": kafka.version,
        "redis": redis_version + (" (external)" if redis_server.external else ""),
        "s3": s3,
        "confluent_kafka": str(ck_version()),
        "librdkafka": libversion()[0],
        "redis_py": _dist("redis"),
        "hiredis": _dist("hiredis"),
        "boto3": _dist("boto3"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_method": MEMORY_METHOD,
        "segment_bytes": SEGMENT,
        "chunk_message_max_bytes": CHUNK_MESSAGE_MAX,
        "raised_message_max_bytes": RAISED_MESSAGE_MAX,
        "argv": " ".join(["python -m benchmarks", *sys.argv[1:]]),  # no checkout path on the page
    }
