"""One repetition of one A/B suite, for one side, in a fresh process: ``python -m benchmarks.ab_child < spec.json``.

:mod:`benchmarks.ab` starts this once per side and repetition, with ``PYTHONPATH`` naming the
harness first (this ``benchmarks`` package, the working tree's) and then the library under test
(the working tree or the ref's checkout). So both sides are measured by the same harness, and
what differs is only ``gateway`` and ``stores``. A fresh process per repetition means neither side
inherits the other's warm caches, allocator state or threads.

The parent creates the topics and removes them (and the Redis keys) afterwards; this process only
produces and consumes. It prints one JSON line: the figures per entry, and which ``gateway`` it
imported, so the parent can prove the two sides ran different code.
"""

from __future__ import annotations

import json
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

    @property
    def needs_redis(self) -> bool:
        return any(w.route == "redis" for w in self.workloads)

    def entries(self) -> list[Entry]:
        out: list[Entry] = []
        for w in self.workloads:
            out += [Entry(f"{w.label} produce", "MB/s"), Entry(f"{w.label} consume", "MB/s")]
        if self.passthrough:
            shape = f"{self.passthrough} x {self.passthrough_size} B"
            out += [Entry(f"{shape} {call}", "msgs/s") for call in ("poll()", "consume(500)", "produce()")]
        return out

    def topics(self) -> list[str]:
        """The topic keys one repetition needs; the parent maps each to a fresh topic."""
        keys = [f"w{i}" for i in range(len(self.workloads))]
        return keys + (["pt-read", "pt-write"] if self.passthrough else [])


AB_SUITES: dict[str, ABSuite] = {
    # issue 42's regression: 6 x 8 MB chunked messages in 1 MB segments read back
    "chunked": ABSuite("chunked", (Workload("chunked", 8_000_000, 6),)),
    "redis": ABSuite("redis", (Workload("redis", 1_000_000, 20), Workload("redis", 10_000_000, 3))),
    "passthrough": ABSuite("passthrough", passthrough=50_000),
    # the end-to-end test's: every kind of measurement, in seconds
    "tiny": ABSuite("tiny", (Workload("chunked", 2_000_000, 2),), passthrough=2_000),
}


def _size(n: int) -> str:
    return f"{n / 1e6:g} MB" if n >= 1_000_000 else f"{n / 1e3:g} KB"


def measure(svc: Services, suite: ABSuite, topics: dict[str, str]) -> dict[str, float]:
    """The figures of one repetition, keyed by entry name."""
    out: dict[str, float] = {}
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


def main() -> int:
    import gateway
    from benchmarks.memory import _Attached
    from gateway.testing import RedisServer

    spec: dict[str, Any] = json.load(sys.stdin)
    malloc_mode("fast")
    kafka = _Attached(version="attached", bootstrap_servers=spec["bootstrap"], client_config=spec["client_config"])
    kafka.consumer_defaults = dict(spec["consumer_defaults"])
    redis_server = RedisServer(spec["redis_url"], from_env=False) if spec.get("redis_url") else None
    svc = Services(kafka, cast(Any, redis_server), cast(Any, None), "", redis_prefix=spec["redis_prefix"])
    values = measure(svc, AB_SUITES[spec["suite"]], spec["topics"])
    print(json.dumps({"gateway": gateway.__file__, "values": values}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
