"""``gateway bench`` as a ``gateway.commands`` entry point (declared in pyproject.toml).

The benchmarks live in the source checkout, not in the wheel: ``pip install -e '.[bench]'`` from the
checkout makes this command available; ``python -m benchmarks`` takes the same options.
"""

from __future__ import annotations

import argparse
import os

from gateway.command import COMMAND_EXIT_STATUSES, EXIT_USAGE, exit_status_text, fail, probe_kafka


class BenchCommand:
    help = "measure every route beside raw confluent-kafka, redis-py and boto3; regenerate docs/benchmarks.md"
    description = (
        "Starts a broker (Apache Kafka by default), redis-server and a moto S3 server, measures the "
        "chunked, Redis and S3 routes beside their baselines (throughput by size, sporadic-large mixes, end-to-end "
        "latency, consumer memory, plain passthrough), writes benchmarks/results/<name>.json and regenerates "
        "docs/benchmarks.md with its plots. Same as python -m benchmarks. --suite encryption measures the Redis "
        "and S3 routes with reference.encryption=aes256-gcm on and off, side by side (python -m "
        "benchmarks.encryption), and regenerates the page's encryption section. --suite compression measures each "
        "reference.compression codec on JSON-like text and random bytes, alone and through the Redis and S3 routes "
        "with zstd on and off (python -m benchmarks.compression); --suite "
        "clouds starts fake-gcs-server and Azurite, measures the GCS and Azure stores against their raw SDKs "
        "(python -m benchmarks.cloud_clients) and the Redis, S3, GCS and Azure routes through Kafka at 1 MB and 10 MB, "
        "each against its raw-client-plus-envelope ceiling (python -m benchmarks.clouds); each regenerates the page "
        "with its section. "
    ) + exit_status_text(COMMAND_EXIT_STATUSES["bench"])

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--quick", action="store_true", help="smaller volumes, no 100 MB size (about 2 minutes on 2 cores)"
        )
        parser.add_argument(
            "--backend",
            default="kafka",
            choices=("kafka", "kafka3", "tansu", "noida", "external"),
            help="Kafka broker: kafka (Apache Kafka, the default; `make kafka` fetches it), tansu, noida, "
            "or external (KAFKA_BOOTSTRAP_SERVERS)",
        )
        parser.add_argument(
            "--suite",
            default="routes",
            choices=("routes", "encryption", "compression", "clouds"),
            help="routes: every route beside its baseline (the default); encryption: the reference routes with "
            "AES-256-GCM on and off; compression: each codec's store bytes and MB/s; clouds: the four "
            "reference routes (Redis, S3, GCS, Azure) through Kafka and the GCS and Azure stores alone, each against "
            "its raw client",
        )
        parser.add_argument(
            "--output",
            default=None,
            help="results name under benchmarks/results/ or a .json path (default routes-quick/-full)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from benchmarks.__main__ import main

        if args.backend == "external":
            bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
            if not bootstrap:
                fail("--backend external needs KAFKA_BOOTSTRAP_SERVERS", EXIT_USAGE)
            probe_kafka(bootstrap)
        if args.suite == "encryption":
            return _encryption(args)
        if args.suite in ("compression", "clouds"):
            return _side_suite(args)
        argv = ["--backend", args.backend] + (["--quick"] if args.quick else [])
        return main(argv + (["--output", args.output] if args.output else []))


def _encryption(args: argparse.Namespace) -> int:
    """Encryption on and off, then the page again (its encryption section reads what this wrote)."""
    from benchmarks import encryption, report

    if args.output:
        fail("--output names a routes result; --suite encryption writes benchmarks/results/encryption.json", EXIT_USAGE)
    volume = ["--count", "6", "--reps", "3"] if args.quick else []
    status = encryption.main(["--backend", args.backend, *volume])
    return status or report.main([])


def _side_suite(args: argparse.Namespace) -> int:
    """compression or clouds: measure, write its results JSON, then the page again (with its section)."""
    from benchmarks import cloud_clients, clouds, compression, report

    if args.output:
        fail(
            f"--output names a routes result; --suite {args.suite} writes benchmarks/results/{args.suite}.json",
            EXIT_USAGE,
        )
    repeat = ["--repeat", "2" if args.quick else "5"]
    if args.suite == "compression":
        return compression.main([*repeat, "--backend", args.backend]) or report.main([])
    status = cloud_clients.main(repeat) or clouds.main(
        ["--backend", args.backend] + (["--quick"] if args.quick else [])
    )
    return status or report.main([])


COMMAND = BenchCommand()
