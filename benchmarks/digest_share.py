"""How much of the Redis route's shortfall against its ceiling is the payload digest.

    python -m benchmarks.digest_share [--size 1000000] [--messages 150] [--repeats 7] [--backend kafka]

The Redis route hashes every payload (BLAKE3) on produce and verifies it on consume; its ceiling,
redis-py's ``SET``/``GET`` beside a raw envelope-sized record, does neither. This runs three variants
side by side on one broker and one redis-server, in an order that alternates between repetitions,
each on a fresh topic: the ceiling (``redis.raw+env``), the route, and the route with the digest
replaced by a constant on both ends (``redis, no digest``: the producer's digest and the consumer's
check stubbed out in this process only). The difference between the last two is what the digest
costs; what separates the stubbed route from the ceiling is everything else. It reports MB/s and
each route's per-repetition ratio to the ceiling, medians with their spread, and process and
machine CPU per message, and never asserts. The stub exists for this measurement alone: without the
digest a consumer cannot tell a swapped or corrupted payload from the right one (docs/protocol.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import gateway.producer.reference.digests as digests
from benchmarks.common import bench_kafka, payload
from benchmarks.suite import _order
from benchmarks.variants import Services, Work, consume_job, produce_job
from gateway.protocol.envelope import Envelope
from gateway.testing import RedisServer, S3Server

VARIANTS = ("redis.raw+env", "redis", "redis, no digest")


@contextmanager
def _no_digest(stubbed: bool) -> Iterator[None]:
    """The route's digest and check replaced by constants while the variant runs (when ``stubbed``)."""
    digest_of, verify = getattr(digests, "digest_of"), Envelope.verify  # noqa: B009 - not exported: patched
    if stubbed:
        setattr(digests, "digest_of", lambda checksum, data: bytes(32))  # noqa: B010
        setattr(Envelope, "verify", lambda self, data: None)  # noqa: B010
    try:
        yield
    finally:
        setattr(digests, "digest_of", digest_of)  # noqa: B010
        setattr(Envelope, "verify", verify)  # noqa: B010


def _cpu() -> tuple[float, float]:
    """This process's CPU seconds and the machine's busy seconds (all cores) so far."""
    times = os.times()
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:9]]
    busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    return times.user + times.system, busy


def _run(make: Callable[..., Any], *args: Any) -> tuple[float, float, float]:
    """Wall seconds, process CPU seconds and machine busy seconds of the run of the job ``make(*args)``."""
    job = make(*args)
    try:
        cpu0, busy0 = _cpu()
        start = time.perf_counter()
        job.run()
        wall = time.perf_counter() - start
        cpu1, busy1 = _cpu()
    finally:
        job.close()
    return wall, cpu1 - cpu0, busy1 - busy0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.digest_share", description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="payload bytes (default 1 MB)")
    parser.add_argument("--messages", type=int, default=150, help="messages per repetition (default 150)")
    parser.add_argument("--repeats", type=int, default=7, help="repetitions (default 7)")
    parser.add_argument("--backend", default="kafka", help="Kafka broker, as for python -m benchmarks")
    args = parser.parse_args(argv)
    work = Work.of(str(args.size), [payload(args.size, seed=i) for i in range(args.messages)])
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with bench_kafka(args.backend) as kafka, RedisServer() as redis_server, S3Server() as s3_server:
        svc = Services(kafka, redis_server, s3_server, s3_server.bucket or s3_server.create_bucket("digest-share"))
        for rep in range(args.repeats):
            for variant in _order(VARIANTS, rep):
                base = variant.partition(",")[0]
                topic = f"digest-share-{uuid.uuid4().hex[:10]}"
                kafka.create_topic(topic, partitions=1)
                with _no_digest(variant != base):
                    for side, make in (("produce", produce_job), ("consume", consume_job)):
                        measured = _run(make, svc, base, topic, work)
                        runs.setdefault((variant, side), []).append(measured)
                kafka.delete_topic(topic)
                svc.clear_stores()
    print(f"{args.messages} x {args.size // 1000} KB, {args.repeats} repetitions on {kafka.__class__.__name__}")
    for side in ("produce", "consume"):
        ceiling = [wall for wall, _, _ in runs[(VARIANTS[0], side)]]
        for variant in VARIANTS:
            walls = [wall for wall, _, _ in runs[(variant, side)]]
            ratios = sorted(c / w for c, w in zip(ceiling, walls, strict=True))
            cpu_ms = statistics.median(cpu for _, cpu, _ in runs[(variant, side)]) * 1000 / args.messages
            busy = statistics.median(b / w for w, _, b in runs[(variant, side)])
            print(
                f"{side:7} {variant:17} {work.total / statistics.median(walls) / 1e6:7.0f} MB/s  "
                f"÷ ceiling {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})  "
                f"process CPU {cpu_ms:.2f} ms/message  machine {busy:.2f} cores busy"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
