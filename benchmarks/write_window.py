"""``reference.write.window`` side by side: the Redis route's produce throughput over its ceiling, per window.

    python -m benchmarks.write_window [--windows 1,4,8,16] [--repeats 5] [--backend kafka]

Each repetition runs the ceiling (``redis.raw+env``: redis-py SET plus the envelope through raw
confluent-kafka) and then the gateway's Redis route once per window, in an order that rotates, so
every ratio is taken against a ceiling measured moments before; the median of the per-repetition
ratios is printed with their spread. What decided the default window (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

from benchmarks import variants
from benchmarks.common import mbps, payload
from benchmarks.suite import PlainUI, Plan, Suite, _order
from benchmarks.variants import CEILING, Work, produce_job

SIZES = {100_000: 400, 1_000_000: 60, 10_000_000: 6}
"""Payload size and messages per run: a few hundred MB at most per repetition on 2 cores."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.write_window", description=__doc__)
    parser.add_argument("--windows", default="1,4,8,16", help="write windows to compare (default 1,4,8,16)")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions per size (default 5)")
    parser.add_argument("--backend", default="kafka", help="Kafka broker, as for python -m benchmarks")
    args = parser.parse_args(argv)
    windows = [w.strip() for w in args.windows.split(",")]
    suite = Suite(Plan.quick(), args.backend, PlainUI())
    ceiling = CEILING["redis"]
    with suite.services() as env:
        print(f"Kafka: {env['kafka']} | Redis: {env['redis']}")
        for size, count in SIZES.items():
            work = Work.of(str(size), [payload(size, seed=i) for i in range(count)])
            ratios: dict[str, list[float]] = {w: [] for w in windows}
            for rep in range(args.repeats):
                for window in _order(windows, rep):
                    runs = {}
                    for variant in (ceiling, "redis"):
                        variants.REDIS_WRITE_WINDOW = int(window)
                        topic = suite.topic(f"window-{window}-{variant}")
                        seconds, out = suite.run_job(produce_job(suite.svc, variant, topic, work))
                        runs[variant] = mbps(seconds, out.moved)
                    ratios[window].append(runs["redis"] / runs[ceiling])
                suite.drop_topics()
                suite.svc.clear_stores()
            cells = "  ".join(
                f"window {w}: {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" for w, r in ratios.items()
            )
            print(f"{size // 1000:>6} KB x{count}: Redis produce / ceiling  {cells}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
