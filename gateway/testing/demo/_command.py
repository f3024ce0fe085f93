"""``gateway demo`` as a ``gateway.commands`` entry point: its arguments, checked, and the run."""

from __future__ import annotations

import argparse

from gateway.command import COMMAND_EXIT_STATUSES, EXIT_USAGE, CommandError, exit_status_text, size_argument
from gateway.testing.demo._model import DemoOptions
from gateway.testing.kafka_service import BACKENDS

DEMO_EXIT_STATUSES = COMMAND_EXIT_STATUSES["demo"]


class DemoCommand:
    help = "produce a realistic mix, consume it back, verify every byte (the main job)"
    description = (
        "Starts an embedded Kafka cluster (and Redis / S3 servers when installed), produces a "
        "log-normal mix of message sizes under SizeThresholdPolicy, consumes it back with HybridConsumer, "
        "verifies every byte by SHA-256 and prints what went where. Then, when PySpark and Java are there, the "
        "Spark stage: a batch job reads the topic through hybrid-kafka and verifies every row, writes a "
        "transformed copy through the hybrid-kafka sink (verified by HybridConsumer), and a streaming query "
        "with a checkpoint, stopped and restarted, writes a second wave exactly once. "
    ) + exit_status_text(DEMO_EXIT_STATUSES)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--count", type=int, default=200, help="messages to produce (default 200)")
        parser.add_argument("--min-size", type=size_argument, default=1_000, help="smallest message (default 1KB)")
        parser.add_argument("--max-size", type=size_argument, default=50_000_000, help="largest message (default 50MB)")
        parser.add_argument(
            "--median-size", type=size_argument, default=20_000, help="median of the small messages (default 20KB)"
        )
        parser.add_argument(
            "--large-fraction",
            type=float,
            default=0.04,
            help="share of messages drawn from 1MB..max-size (default 0.04)",
        )
        parser.add_argument(
            "--segment-bytes",
            type=size_argument,
            default=800_000,
            help="chunk size, LinkedIn's max.message.segment.bytes (default 800000)",
        )
        parser.add_argument(
            "--reference-above",
            type=size_argument,
            default=4_000_000,
            help="values larger than this go to a store when one is available (default 4MB)",
        )
        parser.add_argument(
            "--tier-above",
            type=size_argument,
            default=16_000_000,
            help="with two stores, values larger than this go to the second one (default 16MB)",
        )
        parser.add_argument(
            "--stores",
            default="redis,s3",
            help="stores to start and use, in order of preference (default redis,s3; 'none' for none)",
        )
        parser.add_argument(
            "--kafka",
            default="mock",
            help="mock (embedded, default), kafka (Apache Kafka, after `make kafka`), noida, tansu, "
            "external (KAFKA_BOOTSTRAP_SERVERS) or host:port",
        )
        parser.add_argument("--seed", type=int, default=7, help="random seed for sizes and payloads")
        parser.add_argument(
            "--no-spark",
            dest="spark",
            action="store_false",
            help="skip the Spark stage (by default it runs when PySpark and Java 17+ are there)",
        )
        parser.add_argument(
            "--spark-master",
            default=None,
            help="Spark master of the Spark stage, e.g. spark://host:7077 (default local[2]); see docs/spark.md",
        )
        parser.add_argument(
            "--wave",
            type=int,
            default=40,
            help="messages of the Spark stage's second wave, for its stream (default 40)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from gateway.testing.demo import main

        return main(demo_options(args))


COMMAND = DemoCommand()


def demo_options(args: argparse.Namespace) -> DemoOptions:
    """The demo's options, checked: a bad value is one line and exit 2, never a 2 GB surprise in Redis."""
    stores = () if args.stores.strip().lower() == "none" else tuple(s.strip() for s in args.stores.split(",") if s)
    problems = [
        f"--count must be at least 1, got {args.count}" if args.count < 1 else "",
        "--min-size must be at least 1 byte" if args.min_size < 1 else "",
        f"--min-size ({args.min_size:,}) exceeds --max-size ({args.max_size:,})"
        if args.min_size > args.max_size
        else "",
        "--large-fraction must be between 0 and 1" if not 0 <= args.large_fraction <= 1 else "",
        f"--segment-bytes must be at least 64, got {args.segment_bytes}" if args.segment_bytes < 64 else "",
        "--reference-above must be at least 1 byte" if args.reference_above < 1 else "",
        "--tier-above must be at least 1 byte" if args.tier_above < 1 else "",
        f"--wave must be at least 2, got {args.wave}" if args.wave < 2 else "",
        "--spark-master needs a master URL such as spark://host:7077 or local[2]"
        if args.spark_master is not None and not args.spark_master.strip()
        else "",
        *(f"--stores: unknown store {s!r} (redis, s3 or none)" for s in stores if s not in ("redis", "s3")),
        f"--kafka: unknown backend {args.kafka!r} ({', '.join(BACKENDS)}, or a host:port to use)"
        if ":" not in args.kafka and args.kafka.strip().lower() not in BACKENDS
        else "",
    ]
    problem = next((p for p in problems if p), None)
    if problem:
        raise CommandError(problem, EXIT_USAGE)
    return DemoOptions(
        count=args.count, min_size=args.min_size, max_size=args.max_size, median_size=args.median_size,
        large_fraction=args.large_fraction, segment_bytes=args.segment_bytes,
        reference_above=args.reference_above, tier_above=args.tier_above, seed=args.seed, stores=stores,
        kafka=args.kafka, spark=args.spark, spark_master=args.spark_master, wave=args.wave,
    )  # fmt: skip
