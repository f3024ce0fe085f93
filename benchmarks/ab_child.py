"""One repetition of one A/B suite, for one side, in a fresh process: ``python -m benchmarks.ab_child < spec.json``.

:mod:`benchmarks.ab` starts this once per side and repetition, with ``PYTHONPATH`` naming the
harness first (this ``benchmarks`` package, the working tree's) and then the library under test
(the working tree or the ref's checkout). So both sides are measured by the same harness, and
what differs is only ``gateway`` and ``stores``. A fresh process per repetition means neither side
inherits the other's warm caches, allocator state or threads.

The harness runs against the ref's ``gateway``: it must use only names the ref has (this module and
:mod:`benchmarks.ab_compare` import nothing new from the library).

The parent creates the topics and removes them (and the Redis keys) afterwards; this process only
produces and consumes. It prints one JSON line: the figures per entry, and which ``gateway`` it
imported, so the parent can prove the two sides ran different code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from benchmarks.ab_compare import Entry
from benchmarks.common import malloc_mode, mbps, payload, timed
from benchmarks.variants import (
    Job,
    Services,
    Work,
    consume_job,
    passthrough_job,
    passthrough_produce_job,
    produce_job,
    produce_small,
)


@dataclass(frozen=True, slots=True)
class Workload:
    """``count`` payloads of ``size`` bytes sent by ``route`` (``chunked`` or ``redis``), then read back."""

    route: str
    size: int
    count: int

    @property
    def label(self) -> str:
        return f"{self.route} {self.count} x {_size(self.size)}"


@dataclass(frozen=True, slots=True)
class ABSuite:
    """What one repetition of a side measures; small enough that pairs, not volume, carry the statistics."""

    name: str
    workloads: tuple[Workload, ...] = ()
    passthrough: int = 0
    """Plain records read by ``poll()`` and by ``consume(500)``, and written by ``produce()`` (0: none)."""
    passthrough_size: int = 100
    batch_memory: Workload | None = None
    """Chunked messages written once, then read whole by ``poll()`` and by ``consume(500)``, each in a fresh
    process with default consumer settings: the peak RSS growth of each (issue 42 point 4)."""

    zstd_random: Workload | None = None
    """Random (incompressible) payloads through the Redis route with ``reference.compression=zstd``."""

    @property
    def needs_redis(self) -> bool:
        return self.zstd_random is not None or any(w.route == "redis" for w in self.workloads)

    def entries(self) -> list[Entry]:
        out: list[Entry] = []
        if self.batch_memory is not None:
            label = self.batch_memory.label
            out += [Entry(f"{label} {call} peak RSS growth", "MiB", False) for call in READ_CALLS]
        if self.zstd_random is not None:
            out += [Entry(f"{self.zstd_random.label} random, zstd, {side}", "MB/s") for side in ("produce", "consume")]
        for w in self.workloads:
            out += [Entry(f"{w.label} produce", "MB/s"), Entry(f"{w.label} consume", "MB/s")]
        if self.passthrough:
            shape = f"{self.passthrough} x {self.passthrough_size} B"
            out += [Entry(f"{shape} {call}", "msgs/s") for call in ("poll()", "consume(500)", "produce()")]
        return out

    def topics(self) -> list[str]:
        """The topic keys one repetition needs; the parent maps each to a fresh topic."""
        keys = [f"w{i}" for i in range(len(self.workloads))]
        keys += ["mem"] if self.batch_memory is not None else []
        return keys + (["pt-read", "pt-write"] if self.passthrough else [])


AB_SUITES: dict[str, ABSuite] = {
    # issue 42's regression: 6 x 8 MB chunked messages in 1 MB segments read back
    "chunked": ABSuite("chunked", (Workload("chunked", 8_000_000, 6),)),
    "redis": ABSuite("redis", (Workload("redis", 1_000_000, 20), Workload("redis", 10_000_000, 3))),
    "passthrough": ABSuite("passthrough", passthrough=50_000),
    "memory": ABSuite("memory", batch_memory=Workload("chunked", 10_000_000, 60)),
    "zstd": ABSuite("zstd", zstd_random=Workload("redis", 10_000_000, 6)),
    # the end-to-end test's: every kind of measurement, in seconds
    "tiny": ABSuite("tiny", (Workload("chunked", 2_000_000, 2),), passthrough=2_000),
}


def _size(n: int) -> str:
    return f"{n / 1e6:g} MB" if n >= 1_000_000 else f"{n / 1e3:g} KB"


READ_CALLS = ("poll()", "consume(500)")


def measure(svc: Services, suite: ABSuite, topics: dict[str, str], spec: dict[str, Any]) -> dict[str, float]:
    """The figures of one repetition, keyed by entry name."""
    out: dict[str, float] = {}
    if suite.batch_memory is not None:
        out.update(batch_memory(svc, suite.batch_memory, topics["mem"], spec))
    if suite.zstd_random is not None:
        from benchmarks.compression import run_route

        w = suite.zstd_random
        values = [os.urandom(w.size) for _ in range(w.count)]
        produced, consumed, _ = run_route(svc.kafka, svc.redis_store(), "zstd", values)
        out[f"{w.label} random, zstd, produce"] = mbps(produced, w.size * w.count)
        out[f"{w.label} random, zstd, consume"] = mbps(consumed, w.size * w.count)
    for i, w in enumerate(suite.workloads):
        work = Work.of(w.label, [payload(w.size, seed=n) for n in range(w.count)])
        topic = topics[f"w{i}"]
        for side, make in (("produce", produce_job), ("consume", consume_job)):
            job = make(svc, w.route, topic, work)
            try:
                seconds, moved = timed(job.run)
            finally:
                job.close()
            out[f"{w.label} {side}"] = mbps(seconds, moved.moved)
    if suite.passthrough:
        n, size = suite.passthrough, suite.passthrough_size
        produce_small(svc, topics["pt-read"], n, size)
        shape = f"{n} x {size} B"
        jobs: tuple[tuple[str, Callable[[], Job]], ...] = (
            ("poll()", lambda: passthrough_job(svc, "hybrid.poll", topics["pt-read"], n)),
            ("consume(500)", lambda: passthrough_job(svc, "hybrid.consume", topics["pt-read"], n)),
            ("produce()", lambda: passthrough_produce_job(svc, "hybrid.produce", topics["pt-write"], n, size)),
        )
        for call, make_job in jobs:
            job = make_job()
            try:
                seconds, done = timed(job.run)
            finally:
                job.close()
            if done.messages != n:
                raise AssertionError(f"{call}: {done.messages} of {n} records")
            out[f"{shape} {call}"] = n / seconds
    return out


def batch_memory(svc: Services, w: Workload, topic: str, spec: dict[str, Any]) -> dict[str, float]:
    """Write the messages, then read them by each call in a fresh process (this interpreter, this path)."""
    job = produce_job(svc, w.route, topic, Work.of(w.label, [payload(w.size, seed=n) for n in range(w.count)]))
    try:
        job.run()
    finally:
        job.close()
    out: dict[str, float] = {}
    for call in READ_CALLS:
        reader = {**spec, "read": {"topic": topic, "messages": w.count, "call": call}}
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.ab_child"],
            input=json.dumps(reader),
            text=True,
            capture_output=True,
            check=False,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{call} reader failed ({done.returncode}):\n{done.stderr[-3000:]}")
        out[f"{w.label} {call} peak RSS growth"] = float(done.stdout.strip().splitlines()[-1]) / 2**20
    return out


def read_peak(svc: Services, topic: str, messages: int, call: str) -> float:
    """Peak RSS growth (bytes) of reading ``messages`` whole messages by ``call``, default consumer settings.

    Each message (or batch) is dropped before the next call, as an application that processes and
    forgets does, so the peak is what the consumer itself holds.
    """
    from confluent_kafka import TopicPartition

    from benchmarks.common import PeakMemory
    from gateway import HybridConsumer

    conf = svc.kafka.client_conf(**svc.kafka.consumer_defaults)
    conf.update({"group.id": f"ab-mem-{topic}", "enable.auto.commit": False})
    consumer = HybridConsumer(conf)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        with PeakMemory() as mem:
            seen = 0
            while seen < messages:
                batch = consumer.consume(500, 1.0) if call == "consume(500)" else [consumer.poll(1.0)]
                seen += sum(1 for m in batch if m is not None and m.error() is None)
                batch = []
    finally:
        consumer.close()
    return mem.growth


def _attach(spec: dict[str, Any]) -> Services:
    from benchmarks.memory import _Attached
    from gateway.testing import RedisServer

    kafka = _Attached(version="attached", bootstrap_servers=spec["bootstrap"], client_config=spec["client_config"])
    kafka.consumer_defaults = dict(spec["consumer_defaults"])
    redis_server = RedisServer(spec["redis_url"], from_env=False) if spec.get("redis_url") else None
    return Services(kafka, cast(Any, redis_server), cast(Any, None), "", redis_prefix=spec["redis_prefix"])


def main() -> int:
    import gateway

    spec: dict[str, Any] = json.load(sys.stdin)
    svc = _attach(spec)
    if "read" in spec:  # a memory reader: glibc returns freed buffers at once, so the peak is what was held
        malloc_mode("lean")
        read = spec["read"]
        print(read_peak(svc, read["topic"], int(read["messages"]), read["call"]))
        return 0
    malloc_mode("fast")
    values = measure(svc, AB_SUITES[spec["suite"]], spec["topics"], spec)
    print(json.dumps({"gateway": gateway.__file__, "values": values}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
