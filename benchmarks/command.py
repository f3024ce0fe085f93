"""``gateway bench`` as a ``gateway.commands`` entry point (declared in pyproject.toml).

The benchmarks live in the source checkout, not in the wheel: ``make bench`` (or ``make setup`` and
then ``gateway bench``) runs them there; from a wheel the command says so in one line.

A run writes its results where the user says (``--out DIR``, default a fresh temporary folder):
the results JSON, a rendered page and its plots. Only ``--update-docs`` rewrites the tracked
docs/benchmarks.md, its plots and benchmarks/results/, and only from a full run: a quick run's
numbers must never stand in for the full-mode page.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from gateway.command import COMMAND_EXIT_STATUSES, EXIT_AB_MOVED, EXIT_USAGE, exit_status_text, fail, probe_kafka

AB_SUITE_NAMES = ("chunked", "redis", "passthrough", "memory", "zstd", "tiny")
"""The suites ``--against`` runs (:data:`benchmarks.ab_child.AB_SUITES`; not imported here, as the command
line is built before any benchmark module may be)."""


class BenchCommand:
    help = "measure every route beside raw confluent-kafka, redis-py and boto3; regenerate docs/benchmarks.md"
    description = (
        "Starts a broker (Apache Kafka by default), redis-server and a moto S3 server, measures the "
        "chunked, Redis and S3 routes beside their baselines (throughput by size, sporadic-large mixes, end-to-end "
        "latency, consumer memory, plain passthrough) and writes the results JSON, a page and its plots to --out "
        "(default a new temporary folder); --update-docs writes benchmarks/results/routes-full.json and regenerates "
        "the tracked docs/benchmarks.md with its plots instead (full mode only). --suite encryption measures the Redis "
        "and S3 routes with reference.encryption=aes256-gcm on and off, side by side (python -m "
        "benchmarks.encryption), and regenerates the page's encryption section. --suite compression measures each "
        "reference.compression codec on JSON-like text and random bytes, alone and through the Redis and S3 routes "
        "with zstd on and off (python -m benchmarks.compression); --suite "
        "clouds starts fake-gcs-server and Azurite, measures the GCS and Azure stores against their raw SDKs "
        "(python -m benchmarks.cloud_clients) and the Redis, S3, GCS and Azure routes through Kafka at 1 MB and 10 MB, "
        "each against its raw-client-plus-envelope ceiling (python -m benchmarks.clouds); each regenerates the page "
        "with its section (these write the tracked results, so they need --update-docs). --suite streams sends a "
        "generated stream through produce_stream by reference and reads it back as a PayloadStream, each side in a "
        "fresh interpreter, Redis at 4 GiB and S3 (moto) at 1 GiB, beside the store's raw client moving the same "
        "parts and ranges (python -m benchmarks.stream_memory): peak RSS growth, MiB/s and the SHA-256 comparison "
        "go to benchmarks/results/streams.json and the page's streams section (needs --update-docs too). "
        "--against REF --suite chunked|redis|passthrough|memory|zstd|tiny measures the working tree and git ref REF "
        "alternately (--pairs pairs, tree then ref, then ref then tree, ...; each side in a fresh process per "
        "repetition) on one "
        "broker, prints each entry's medians, spreads and ratio, and flags a median outside the other side's "
        "spread (python -m benchmarks.ab); with --update-docs its table goes on the page. "
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
            choices=("routes", "encryption", "compression", "clouds", "streams", *AB_SUITE_NAMES),
            help="routes: every route beside its baseline (the default); encryption: the reference routes with "
            "AES-256-GCM on and off; compression: each codec's store bytes and MB/s; clouds: the four "
            "reference routes (Redis, S3, GCS, Azure) through Kafka and the GCS and Azure stores alone, each against "
            "its raw client; streams: a message larger than memory through produce_stream and PayloadStream (Redis "
            "4 GiB, S3 1 GiB), peak RSS growth and MiB/s beside the raw client; with --against: chunked (6 x 8 MB), "
            "redis (20 x 1 MB and 3 x 10 MB), passthrough "
            "(50000 x 100 B by poll(), consume(500) and produce()), memory (peak RSS growth of poll() and "
            "consume(500) reading 60 x 10 MB chunked messages, each in a fresh process), zstd (6 x 10 MB random "
            "bytes through the Redis route with reference.compression=zstd) or tiny (seconds, for tests)",
        )
        parser.add_argument(
            "--against",
            metavar="REF",
            default=None,
            help="a git ref (main, a tag, a commit): measure it and the working tree alternately on one broker and "
            f"flag a median outside the other side's spread (exit {EXIT_AB_MOVED})",
        )
        parser.add_argument(
            "--pairs", type=int, default=5, help="with --against: repetitions of each side (default 5, at least 3)"
        )
        parser.add_argument(
            "--warmup",
            type=int,
            default=1,
            help="with --against: unmeasured runs of the working tree before the pairs (default 1), so that a "
            "broker just started does not slow the first pair",
        )
        parser.add_argument(
            "--ref-venv",
            action="store_true",
            help="with --against: run the ref in a virtualenv of its own even when its dependencies equal the "
            "working tree's (by default it then runs on this interpreter)",
        )
        parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
        parser.add_argument(
            "--out",
            metavar="DIR",
            default=None,
            help="folder for the results JSON, the page and its plots (default: a new temporary folder)",
        )
        parser.add_argument(
            "--update-docs",
            action="store_true",
            help="rewrite the tracked docs/benchmarks.md, its plots and benchmarks/results/ (full mode only)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from benchmarks.__main__ import main

        refuse_misplaced_numbers(args)  # before any broker starts
        if args.against is not None:
            return _against(args)
        if args.backend == "external":
            bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
            if not bootstrap:
                fail("--backend external needs KAFKA_BOOTSTRAP_SERVERS", EXIT_USAGE)
            probe_kafka(bootstrap)
        if args.suite == "encryption":
            return _encryption(args)
        if args.suite in ("compression", "clouds"):
            return _side_suite(args)
        if args.suite == "streams":
            return _streams(args)
        return main(run_argv(args))


def refuse_misplaced_numbers(args: argparse.Namespace) -> None:
    """Exit 2 for what would put numbers where they do not belong: a quick run on the full-mode page, or
    a side suite (which writes the tracked results) without ``--update-docs``."""
    if args.against is not None:
        _refuse_ab_misuse(args)
        return
    if args.suite in AB_SUITE_NAMES:
        fail(f"--suite {args.suite} compares two versions: pass --against REF", EXIT_USAGE)
    if args.update_docs and args.quick:
        fail("--update-docs rewrites the full-mode page: run without --quick (quick numbers go to --out)", EXIT_USAGE)
    if args.update_docs and args.out:
        fail("--update-docs writes the tracked benchmarks/results/ and docs/; --out is for other runs", EXIT_USAGE)
    if args.suite != "routes" and not args.update_docs:
        tracked = f"benchmarks/results/{args.suite}.json"
        fail(f"--suite {args.suite} writes the tracked {tracked} and docs page: pass --update-docs", EXIT_USAGE)


def _refuse_ab_misuse(args: argparse.Namespace) -> None:
    if args.suite not in AB_SUITE_NAMES:
        fail(f"--against runs --suite {' or '.join(AB_SUITE_NAMES)}, not {args.suite}", EXIT_USAGE)
    if args.quick:
        fail("--against has no quick mode: --suite tiny is the short one", EXIT_USAGE)
    if args.update_docs and args.out:
        fail("--update-docs writes the tracked benchmarks/results/ and docs/; --out is for other runs", EXIT_USAGE)
    if args.warmup < 0:
        fail("--warmup: 0 or more unmeasured runs", EXIT_USAGE)
    if args.pairs < 3:
        fail("--pairs: at least 3 (a spread of fewer repetitions flags every difference)", EXIT_USAGE)


def ab_results_path(args: argparse.Namespace, new_folder: Callable[[], str] | None = None) -> Path:
    """Where an ``--against`` run writes its results: the tracked ``benchmarks/results/ab-SUITE.json``
    only with ``--update-docs`` (the page renders it), else ``--out`` or a new temporary folder."""
    name = f"ab-{args.suite}.json"
    if args.update_docs:
        from benchmarks.common import RESULTS

        return RESULTS / name
    return Path(args.out or (new_folder or _temporary_folder)()) / name


def _against(args: argparse.Namespace) -> int:
    from benchmarks import ab, report

    status = ab.run_against(
        args.against,
        args.suite,
        backend=args.backend,
        pairs=args.pairs,
        out=ab_results_path(args),
        quiet=args.quiet,
        force_venv=args.ref_venv,
        warmup=args.warmup,
    )
    if args.update_docs:
        report.main([])
    return status


def run_argv(args: argparse.Namespace, new_folder: Callable[[], str] | None = None) -> list[str]:
    """``python -m benchmarks``'s arguments for these flags: where the results go, and whether the docs do."""
    refuse_misplaced_numbers(args)
    argv = ["--backend", args.backend] + (["--quick"] if args.quick else [])
    if args.update_docs:
        return argv
    out = Path(args.out or (new_folder or _temporary_folder)())
    mode = "quick" if args.quick else "full"
    return [*argv, "--output", str(out / f"routes-{mode}.json"), "--docs", str(out / "benchmarks.md")]


def _temporary_folder() -> str:
    return tempfile.mkdtemp(prefix="gateway-bench-")


def _encryption(args: argparse.Namespace) -> int:
    """Encryption on and off, then the page again (its encryption section reads what this wrote)."""
    from benchmarks import encryption, report

    status = encryption.main(["--backend", args.backend])
    return status or report.main([])


def _side_suite(args: argparse.Namespace) -> int:
    """compression or clouds: measure, write its results JSON, then the page again (with its section)."""
    from benchmarks import cloud_clients, clouds, compression, report

    repeat = ["--repeat", "5"]
    if args.suite == "compression":
        return compression.main([*repeat, "--backend", args.backend]) or report.main([])
    status = cloud_clients.main(repeat) or clouds.main(["--backend", args.backend])
    return status or report.main([])


STREAM_RUNS = (("redis", 4.0), ("s3", 1.0))
"""``--suite streams``: each store and its stream size in GiB. moto copies the whole object for each ranged GET,
so S3 at 4 GiB takes about 25 minutes of the consumer's; `python -m benchmarks.stream_memory --gib 4` runs it."""


def streams_argv(args: argparse.Namespace) -> list[list[str]]:
    """``python -m benchmarks.stream_memory``'s arguments for each store's run, merged into the tracked results."""
    from benchmarks.common import RESULTS

    out = str(RESULTS / "streams.json")
    return [
        ["--stores", store, "--gib", f"{gib:g}", "--backend", args.backend, "--json", out] for store, gib in STREAM_RUNS
    ]


def _streams(args: argparse.Namespace) -> int:
    """Each store's stream run (written as it ends, so a later failure keeps it), then the page again."""
    from benchmarks import report, stream_memory

    for argv in streams_argv(args):
        status = stream_memory.main(argv)
        if status:
            return status
    return report.main([])


COMMAND = BenchCommand()
