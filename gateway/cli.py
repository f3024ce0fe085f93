"""The ``gateway`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.command import EXIT_USAGE, CommandError, OneLineParser, check_bucket, fail, kafka_logger, probe_kafka, run

if TYPE_CHECKING:
    from gateway.testing.demo import DemoOptions


def _size(text: str) -> int:
    """Accepts 1000, 1_000, 10KB, 4MB, 1GiB."""
    units = {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "b": 1}
    raw = text.strip().lower().replace("_", "")
    try:
        for suffix, factor in units.items():
            if raw.endswith(suffix):
                return int(float(raw[: -len(suffix)]) * factor)
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 1000, 10KB, 4MB, 1GiB)") from None


def build_parser() -> argparse.ArgumentParser:
    from gateway import __version__

    parser = OneLineParser(
        prog="gateway",
        description="Kafka messages of any size: LinkedIn-compatible chunking or Redis/S3 references, per message.",
    )
    parser.add_argument("--version", action="version", version=f"gateway {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    demo = sub.add_parser(
        "demo",
        help="produce a realistic mix, consume it back, verify every byte (the main job)",
        description="Starts an embedded Kafka cluster (and Redis / S3 servers when installed), produces a "
        "log-normal mix of message sizes under SizeThresholdPolicy, consumes it back with HybridConsumer, "
        "verifies every byte by SHA-256 and prints what went where. Then, when PySpark and Java are there, the "
        "Spark stage: a batch job reads the topic through hybrid-kafka and verifies every row, writes a "
        "transformed copy through the hybrid-kafka sink (verified by HybridConsumer), and a streaming query "
        "with a checkpoint, stopped and restarted, writes a second wave exactly once. Exits 0 only if every "
        "stage verified.",
    )
    demo.add_argument("--count", type=int, default=200, help="messages to produce (default 200)")
    demo.add_argument("--min-size", type=_size, default=1_000, help="smallest message (default 1KB)")
    demo.add_argument("--max-size", type=_size, default=50_000_000, help="largest message (default 50MB)")
    demo.add_argument("--median-size", type=_size, default=20_000, help="median of the small messages (default 20KB)")
    demo.add_argument(
        "--large-fraction", type=float, default=0.04, help="share of messages drawn from 1MB..max-size (default 0.04)"
    )
    demo.add_argument(
        "--segment-bytes",
        type=_size,
        default=800_000,
        help="chunk size, LinkedIn's max.message.segment.bytes (default 800000)",
    )
    demo.add_argument(
        "--reference-above",
        type=_size,
        default=4_000_000,
        help="values larger than this go to a store when one is available (default 4MB)",
    )
    demo.add_argument(
        "--tier-above",
        type=_size,
        default=16_000_000,
        help="with two stores, values larger than this go to the second one (default 16MB)",
    )
    demo.add_argument(
        "--stores",
        default="redis,s3",
        help="stores to start and use, in order of preference (default redis,s3; 'none' for none)",
    )
    demo.add_argument(
        "--kafka",
        default="mock",
        help="mock (embedded, default), kafka (Apache Kafka, after `make kafka`), noida, tansu, "
        "external (KAFKA_BOOTSTRAP_SERVERS) or host:port",
    )
    demo.add_argument("--seed", type=int, default=7, help="random seed for sizes and payloads")
    demo.add_argument(
        "--no-spark",
        dest="spark",
        action="store_false",
        help="skip the Spark stage (by default it runs when PySpark and Java 17+ are there)",
    )
    demo.add_argument(
        "--spark-master",
        default=None,
        help="Spark master of the Spark stage, e.g. spark://host:7077 (default local[2]); see docs/spark.md",
    )
    demo.add_argument(
        "--wave", type=int, default=40, help="messages of the Spark stage's second wave, for its stream (default 40)"
    )
    gc = sub.add_parser(
        "gc",
        help="find payloads whose envelope never landed in Kafka (crashed producers, failed rollbacks); "
        "a dry run unless --delete",
        description="Lists the store writes still marked pending after the grace period and reads the topics "
        "they belong to (--bootstrap) up to the end offsets taken at the start, then read_committed over the "
        "envelopes found. A payload is deleted only when that read was complete and found no envelope with its "
        "message id or locator, whatever store name the envelopes use, or found only envelopes of aborted "
        "transactions; a payload whose committed envelope is found keeps its data (only the pending mark is "
        "cleared); anything else (metadata error, read incomplete or past --scan-timeout, undecodable envelope "
        "mentioning it, envelope of a transaction still open) is kept with its mark and reported with the "
        "reason. Also aborts incomplete S3 multipart uploads older than the "
        "grace period. Without --delete this is a dry run. Exit status: 0 every payload decided, 4 some kept "
        "for lack of proof (run again), 1 a store operation failed, 2 bad arguments.",
    )
    _store_args(gc)
    gc.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="seconds a write may stay pending before it counts as orphaned (default 3600)",
    )
    gc.add_argument("--bootstrap", help="Kafka bootstrap servers: the topics are read to prove absence")
    gc.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra confluent-kafka client setting, e.g. security.protocol=SSL (repeatable)",
    )
    gc.add_argument(
        "--scan-timeout",
        type=float,
        default=600.0,
        help="seconds allowed to read each topic; payloads of a topic not read in time are kept (default 600)",
    )
    mode = gc.add_mutually_exclusive_group()
    mode.add_argument("--delete", action="store_true", help="delete what was proved dead (default: dry run)")
    mode.add_argument("--dry-run", action="store_true", help="report only, delete nothing (the default)")
    gc.add_argument(
        "--no-verify",
        action="store_true",
        help="without --bootstrap, treat every write pending past the grace period as dead "
        "(unsafe: a producer that died after the acknowledgement loses a live payload)",
    )
    reconcile = sub.add_parser(
        "reconcile",
        help="Spark job: find payloads no envelope points at (orphans) and envelopes whose payload is gone",
        description="Scans every envelope of the topic with Spark (hybrid-kafka-envelopes), lists the store's "
        "objects for the topic, and anti-joins both ways. Orphans are objects no envelope points at that were "
        "written before now - grace; dangling envelopes point at nothing. Deletes orphans only with --delete. "
        "Exits 1 when dangling or broken envelopes were found, or a deletion failed.",
    )
    reconcile.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    reconcile.add_argument("--topic", required=True, action="append", help="topic to reconcile (repeat for several)")
    reconcile.add_argument("--redis-url", help="Redis store, e.g. redis://127.0.0.1:6379/0")
    reconcile.add_argument("--redis-prefix", default="gw", help="key prefix of the Redis store (default gw)")
    reconcile.add_argument("--s3-endpoint", help="S3 endpoint URL (omit for AWS)")
    reconcile.add_argument("--s3-bucket", help="S3 bucket of the store")
    reconcile.add_argument("--s3-prefix", default="gw/", help="key prefix of the S3 store (default gw/)")
    reconcile.add_argument("--s3-region", help="S3 region (default: boto3's configuration)")
    reconcile.add_argument(
        "--redis-name", default="redis", help="store name the producers gave the Redis store (default redis)"
    )
    reconcile.add_argument("--s3-name", default="s3", help="store name the producers gave the S3 store (default s3)")
    reconcile.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="seconds an unreferenced object may be young before it counts as orphan (default 3600)",
    )
    reconcile.add_argument("--delete", action="store_true", help="delete the orphans found")
    reconcile.add_argument("--master", default=None, help="Spark master (default SPARK_MASTER or local[2])")
    reconcile.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra confluent-kafka client setting, e.g. security.protocol=SSL (repeatable)",
    )
    bench = sub.add_parser(
        "bench",
        help="measure every route beside raw confluent-kafka, redis-py and boto3; regenerate docs/benchmarks.md",
        description="Starts a broker (Apache Kafka by default), redis-server and a moto S3 server, measures the "
        "chunked, Redis and S3 routes beside their baselines (throughput by size, sporadic-large mixes, end-to-end "
        "latency, consumer memory, plain passthrough), writes benchmarks/results/<name>.json and regenerates "
        "docs/benchmarks.md with its plots. Same as python -m benchmarks.",
    )
    bench.add_argument(
        "--quick", action="store_true", help="smaller volumes, no 100 MB size (about 2 minutes on 2 cores)"
    )
    bench.add_argument(
        "--backend",
        default="kafka",
        choices=("kafka", "kafka3", "tansu", "noida", "external"),
        help="Kafka broker: kafka (Apache Kafka, the default; `make kafka` fetches it), tansu, noida, "
        "or external (KAFKA_BOOTSTRAP_SERVERS)",
    )
    bench.add_argument(
        "--output",
        default=None,
        help="results name under benchmarks/results/ or a .json path (default routes-quick/-full)",
    )
    return parser


def _store_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis-url", help="Redis store to sweep, e.g. redis://127.0.0.1:6379/0")
    parser.add_argument("--redis-prefix", default="gw", help="key prefix of the Redis store (default gw)")
    parser.add_argument("--redis-name", default="redis", help="label of the Redis store in the report (default redis)")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL (omit for AWS)")
    parser.add_argument("--s3-bucket", help="S3 bucket to sweep")
    parser.add_argument("--s3-prefix", default="gw/", help="key prefix of the S3 store (default gw/)")
    parser.add_argument("--s3-region", help="S3 region (default: boto3's configuration)")
    parser.add_argument("--s3-name", default="s3", help="label of the S3 store in the report (default s3)")


def _kafka_options(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--kafka-option needs KEY=VALUE, got {item!r}", EXIT_USAGE)
        out[key.strip()] = value
    return out


def _check_store_args(args: argparse.Namespace) -> None:
    """What gc and reconcile share, checked before any connection: a bad value is exit 2, not a traceback."""
    if not args.redis_url and not args.s3_bucket:
        fail("name a store with --redis-url or --s3-bucket", EXIT_USAGE)
    if args.grace < 0:
        fail(f"--grace must be at least 0 seconds, got {args.grace:g}", EXIT_USAGE)
    if args.redis_url and not args.redis_url.startswith(("redis://", "rediss://", "unix://")):
        fail(f"--redis-url must start with redis://, rediss:// or unix://, got {args.redis_url!r}", EXIT_USAGE)
    if args.redis_url and args.s3_bucket and args.redis_name == args.s3_name:
        fail("--redis-name and --s3-name must differ", EXIT_USAGE)


def _s3_client(args: argparse.Namespace) -> Any:
    """A boto3 client for the store's bucket, after checking the bucket exists (one line if not)."""
    import boto3

    kwargs = {k: v for k, v in (("endpoint_url", args.s3_endpoint), ("region_name", args.s3_region)) if v}
    client = boto3.client("s3", **kwargs)
    check_bucket(client, args.s3_bucket, args.s3_endpoint or "AWS")
    return client


def _gc(args: argparse.Namespace) -> int:
    from gateway.gc.sweeper import EXIT_INCOMPLETE, kafka_verifier, sweep, unverified
    from stores import RedisStore, S3Store

    _check_store_args(args)
    if args.scan_timeout < 0:
        fail(f"--scan-timeout must be at least 0 seconds, got {args.scan_timeout:g}", EXIT_USAGE)
    if args.delete and not args.bootstrap and not args.no_verify:
        fail(
            "--delete needs --bootstrap, so that a payload whose envelope landed is kept; "
            "--no-verify deletes on the pending mark alone",
            EXIT_USAGE,
        )
    options = _kafka_options(args.kafka_option)
    if args.bootstrap:
        probe_kafka(args.bootstrap, options)
    stores: dict[str, object] = {}
    if args.redis_url:
        from stores import redis_client_from_url

        stores[args.redis_name] = RedisStore(
            redis_client_from_url(args.redis_url), prefix=args.redis_prefix, name=args.redis_name, close_client=True
        )
    if args.s3_bucket:
        client = _s3_client(args)
        stores[args.s3_name] = S3Store(client, bucket=args.s3_bucket, prefix=args.s3_prefix, name=args.s3_name)
    verifier = (
        kafka_verifier(
            {**options, "bootstrap.servers": args.bootstrap, "logger": kafka_logger()}, timeout_s=args.scan_timeout
        )
        if args.bootstrap
        else unverified(args.no_verify)
    )
    report = sweep(stores, grace_ms=int(args.grace * 1000), verifier=verifier, dry_run=not args.delete)
    for line in _gc_lines(report):
        print(line)
    code = report.exit_code()
    if code == EXIT_INCOMPLETE:
        print(
            f"gateway gc: incomplete: {len(report.kept)} pending payloads kept because nothing proved them "
            "dead (reasons above); run again once that is resolved",
            file=sys.stderr,
        )
    return code


def _gc_lines(report: Any) -> list[str]:
    verb, abort = ("would delete", "would abort") if report.dry_run else ("deleted", "aborted")
    head = "dry run, nothing changed (pass --delete to act): " if report.dry_run else ""
    out = [
        f"{head}examined {report.examined} pending writes: {verb} {len(report.deleted)}, "
        f"kept {len(report.landed)} whose envelope landed, kept {len(report.kept)} unproved, "
        f"{len(report.failed)} failed; {abort} {len(report.aborted)} stale multipart uploads"
    ]
    out += [f"  {verb}: {locator}: {report.proofs.get(locator, 'proved dead')}" for locator in report.deleted]
    out += [f"  landed: {locator}" for locator in report.landed]
    out += [f"  kept: {locator}: {why}" for locator, why in report.kept]
    out += [f"  failed: {what}: {error}" for what, error in report.failed]
    out += [f"  {abort} upload: {label}" for label in report.aborted]
    return out


def _reconcile(args: argparse.Namespace) -> int:
    _check_store_args(args)
    extra = _kafka_options(args.kafka_option)
    probe_kafka(args.bootstrap, extra)
    if args.s3_bucket:
        _s3_client(args)
    options = {"kafka.bootstrap.servers": args.bootstrap, "subscribe": ",".join(args.topic)}
    options.update({f"kafka.{key}": value for key, value in extra.items()})
    if args.redis_url:
        options.update({"redis.url": args.redis_url, "redis.prefix": args.redis_prefix, "redis.name": args.redis_name})
    if args.s3_bucket:
        options.update({"s3.bucket": args.s3_bucket, "s3.prefix": args.s3_prefix, "s3.name": args.s3_name})
        if args.s3_endpoint:
            options["s3.endpoint"] = args.s3_endpoint
        if args.s3_region:
            options["s3.region"] = args.s3_region
    from pyspark.sql import SparkSession

    from gateway.spark import local_session, reconcile

    owned = SparkSession.getActiveSession() is None  # a caller's session (tests, notebooks) is left running
    spark = local_session(args.master, app_name="gateway-reconcile")
    try:
        report = reconcile(spark, options, grace_seconds=args.grace, delete=args.delete)
    finally:
        if owned:
            spark.stop()
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


def _benchmarks_main() -> Callable[[list[str]], int] | None:
    """The benchmarks live in the source checkout, not in the wheel: found from the working directory."""
    try:
        from benchmarks.__main__ import main as bench_main
    except ImportError:
        if not (Path.cwd() / "benchmarks" / "__main__.py").is_file():
            return None
        sys.path.insert(0, str(Path.cwd()))
        from benchmarks.__main__ import main as bench_main
    return bench_main


def _demo_options(args: argparse.Namespace) -> DemoOptions:
    """The demo's options, checked: a bad value is one line and exit 2, never a 2 GB surprise in Redis."""
    from gateway.testing.demo import DemoOptions

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return run(f"gateway {args.command}", lambda: _dispatch(parser, args))


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "demo":
        from gateway.testing.demo import main as demo_main

        return demo_main(_demo_options(args))
    if args.command == "gc":
        return _gc(args)
    if args.command == "reconcile":
        return _reconcile(args)
    if args.command == "bench":
        bench_main = _benchmarks_main()
        if bench_main is None:
            fail("gateway bench runs the benchmarks/ folder of a source checkout: run it from the checkout's root")
        if args.backend == "external":
            bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
            if not bootstrap:
                fail("--backend external needs KAFKA_BOOTSTRAP_SERVERS", EXIT_USAGE)
            probe_kafka(bootstrap)
        bench_argv = ["--backend", args.backend] + (["--quick"] if args.quick else [])
        return bench_main(bench_argv + (["--output", args.output] if args.output else []))
    parser.print_help()
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
