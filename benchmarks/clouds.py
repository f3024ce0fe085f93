"""The four reference routes through Kafka in one run: Redis, S3, GCS and Azure Blob, each against its ceiling.

``python -m benchmarks.clouds [--backend kafka] [--quick]`` (``gateway bench --suite clouds`` runs it after
:mod:`benchmarks.cloud_clients`): starts the broker, redis-server, moto, fake-gcs-server and Azurite, and
for 1 MB and 10 MB payloads produces and then consumes through each route (``redis``, ``s3``, ``gcs``,
``azure``: ``HybridProducer``/``HybridConsumer`` with ``route="reference:<store>"``) and through its
``<store>.raw+env`` ceiling (the store's raw client writes the payload, then a raw envelope-sized
record; the raw consumer reads the record and fetches the payload), one variant after the other, in
alternating order between repetitions, each on a fresh topic. The ratio is the median of the
per-repetition ratios, as in the routes suite. Results go to the ``routes`` part of
``benchmarks/results/clouds.json``.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.cloud_clients import OUTPUT, emulator_env, save_part
from benchmarks.common import mbps, payload, stat, timed
from benchmarks.suite import _order, _size_label, _slug, describe
from benchmarks.variants import CLOUD_CEILING, Services, Work, consume_job, produce_job
from gateway.testing import RedisServer, S3Server, start_kafka
from gateway.testing.cloud_emulators import AzuriteServer, GCSServer

VARIANTS = tuple(v for route, ceiling in CLOUD_CEILING.items() for v in (ceiling, route))


@dataclass
class CloudPlan:
    mode: str
    sizes: dict[int, int]
    """payload size -> messages per repetition (every variant moves all of them)."""
    repeats: int

    @classmethod
    def quick(cls) -> CloudPlan:
        return cls("quick", {1_000_000: 10, 10_000_000: 2}, 3)

    @classmethod
    def full(cls) -> CloudPlan:
        """100 payloads of 1 MB: 20 made a burst of about 17 ms for the Redis ceiling, short enough for a
        producer's fixed costs and one scheduler hiccup to swing a repetition's ratio from 0.2 to 1.4
        (first messages are measured apart, by ``python -m benchmarks.first_message``)."""
        return cls("full", {1_000_000: 100, 10_000_000: 4}, 9)


@contextmanager
def services(backend: str, run_id: str) -> Iterator[tuple[Services, dict[str, Any]]]:
    """Every server of the run, with this run's bucket, container and prefixes; cleared again at the end."""
    with ExitStack() as stack:
        kafka = stack.enter_context(start_kafka(backend))
        redis_server = stack.enter_context(RedisServer())
        s3_server = stack.enter_context(S3Server())
        gcs = stack.enter_context(GCSServer())
        azurite = stack.enter_context(AzuriteServer())
        svc = Services(
            kafka,
            redis_server,
            s3_server,
            s3_server.bucket or s3_server.create_bucket(f"bench-{run_id}"),
            redis_prefix=f"bench{run_id}",
            s3_prefix=f"bench-{run_id}/",
            gcs_server=gcs,
            gcs_bucket=gcs.bucket or gcs.create_bucket(f"bench-{run_id}"),
            azure_server=azurite,
            azure_container=azurite.container or azurite.create_container(f"bench-{run_id}"),
        )
        env = {**describe(kafka, redis_server, s3_server), **emulator_env()}
        try:
            yield svc, env
        finally:
            svc.clear_stores()


def measure_size(svc: Services, run_id: str, size: int, count: int, repeats: int) -> dict[str, Any]:
    """Every variant at one size: MB/s per repetition, then each route's per-repetition ratio to its ceiling."""
    work = Work.of(str(size), [payload(size, seed=i) for i in range(count)])
    label = _size_label(size)
    produce: dict[str, list[float]] = {v: [] for v in VARIANTS}
    consume: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for rep in range(repeats):
        topics: dict[str, str] = {}
        for v in VARIANTS:
            topics[v] = f"bench-{run_id}-{_slug(label + '-' + v)}-{uuid.uuid4().hex[:6]}"
            svc.kafka.create_topic(topics[v], partitions=1)
        try:
            for side, results, make in (("produce", produce, produce_job), ("consume", consume, consume_job)):
                for v in _order(VARIANTS, rep):
                    job = make(svc, v, topics[v], work)
                    try:
                        seconds, out = timed(job.run)
                    finally:
                        job.close()
                    results[v].append(mbps(seconds, out.moved))
                    print(f"  {label} rep {rep + 1}/{repeats} {side:7} {v:14} {results[v][-1]:7.1f} MB/s", flush=True)
        finally:
            for topic in topics.values():
                svc.kafka.delete_topic(topic)
            svc.clear_stores()
    paired = {
        route: {
            side: stat(a / b for a, b in zip(measured[route], measured[ceiling], strict=True))
            for side, measured in (("produce", produce), ("consume", consume))
        }
        for route, ceiling in CLOUD_CEILING.items()
    }
    return {
        "size": size,
        "label": label,
        "messages": count,
        "bytes": work.total,
        "produce": {v: stat(s) for v, s in produce.items()},
        "consume": {v: stat(s) for v, s in consume.items()},
        "ratio_stats": paired,
    }


def main(argv: list[str] | None = None, output: Path = OUTPUT) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.clouds", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="kafka", help="kafka (Apache Kafka, default) or mock")
    parser.add_argument("--quick", action="store_true", help="fewer payloads and repetitions")
    args = parser.parse_args(argv)
    plan = CloudPlan.quick() if args.quick else CloudPlan.full()
    run_id = uuid.uuid4().hex[:8]
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    cells = []
    with services(args.backend, run_id) as (svc, env):
        for size, count in plan.sizes.items():
            cell = measure_size(svc, run_id, size, count, plan.repeats)
            cells.append(cell)
            print(
                f"{cell['label']:>6}: route/ceiling produce, consume "
                + "  ".join(
                    f"{r} {x['produce']['median']:.2f}, {x['consume']['median']:.2f}"
                    for r, x in cell["ratio_stats"].items()
                ),
                flush=True,
            )
    part = {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": time.perf_counter() - clock,
        "mode": plan.mode,
        "repeats": plan.repeats,
        "backend": args.backend,
        "ceilings": CLOUD_CEILING,
        "env": env,
        "sizes": cells,
    }
    print(f"written {save_part('routes', part, output)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
