"""Every subcommand of ``gateway`` fails in one line, with its documented exit code, within 10 s.

Each case runs the real command as a subprocess against a dead broker (a closed local port), a
bucket that does not exist on a real moto server, or a bad argument. ``timeout=10`` makes a hang a
failure (``TimeoutExpired``); it is not a speed measurement.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.testing import KafkaService, free_port
from gateway.testing.redis_server import RedisServer
from gateway.testing.s3_server import S3Server

ROOT = Path(__file__).resolve().parents[2]
USAGE, UNREACHABLE, FAILED = 2, 3, 1


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=10,
        env={**os.environ, **(env or {})},
    )


def assert_one_line(out: subprocess.CompletedProcess[str], code: int, command: str, says: str) -> None:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == code, f"exit {out.returncode}: {out.stdout}{out.stderr}"
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert lines[0].startswith(f"gateway {command}: error: "), lines[0]
    assert says in lines[0], lines[0]


def dead() -> str:
    return f"127.0.0.1:{free_port()}"


def test_help_lists_every_subcommand_this_file_covers() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=10
    )
    listed = set(re.findall(r"^    ([a-z]+)\b", out.stdout, re.MULTILINE))
    assert listed == {"demo", "gc", "reconcile", "bench"}, out.stdout


# ---------------------------------------------------------------------------------------------
# a dead broker


def test_demo_dead_broker() -> None:
    assert_one_line(run_cli("demo", "--kafka", dead(), "--stores", "none"), UNREACHABLE, "demo", "cannot reach Kafka")


def test_gc_dead_broker(redis_server: RedisServer) -> None:
    out = run_cli("gc", "--redis-url", redis_server.url, "--redis-prefix", "clifail", "--bootstrap", dead())
    assert_one_line(out, UNREACHABLE, "gc", "cannot reach Kafka")


def test_reconcile_dead_broker(redis_server: RedisServer) -> None:
    out = run_cli("reconcile", "--bootstrap", dead(), "--topic", "t", "--redis-url", redis_server.url)
    assert_one_line(out, UNREACHABLE, "reconcile", "cannot reach Kafka")


def test_bench_dead_broker() -> None:
    out = run_cli("bench", "--backend", "external", env={"KAFKA_BOOTSTRAP_SERVERS": dead()})
    assert_one_line(out, UNREACHABLE, "bench", "cannot reach Kafka")


# ---------------------------------------------------------------------------------------------
# a missing bucket (demo and bench start their own S3 server; gc and reconcile take one)


@pytest.fixture
def missing_bucket(s3_server: S3Server) -> list[str]:
    if s3_server.endpoint_url is None:
        pytest.fail("the moto fixture has no endpoint")
    return ["--s3-endpoint", s3_server.endpoint_url, "--s3-bucket", "gw-no-such-bucket", "--s3-region", "us-east-1"]


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def test_gc_missing_bucket(missing_bucket: list[str]) -> None:
    assert_one_line(run_cli("gc", *missing_bucket, env=S3_ENV), FAILED, "gc", "gw-no-such-bucket")


def test_reconcile_missing_bucket(missing_bucket: list[str], kafka: KafkaService) -> None:
    """A live broker, so that the probe passes and the bucket is what fails."""
    out = run_cli("reconcile", "--bootstrap", kafka.bootstrap_servers, "--topic", "t", *missing_bucket, env=S3_ENV)
    assert_one_line(out, FAILED, "reconcile", "gw-no-such-bucket")


# ---------------------------------------------------------------------------------------------
# bad arguments


BAD: list[tuple[list[str], str]] = [
    (["demo", "--count", "-1"], "--count must be at least 1"),
    (["demo", "--segment-bytes", "0"], "--segment-bytes must be at least 64"),
    (["demo", "--min-size", "10MB", "--max-size", "1MB"], "exceeds --max-size"),
    (["demo", "--stores", "bogus"], "unknown store 'bogus'"),
    (["demo", "--kafka", "bogus"], "--kafka: unknown backend 'bogus'"),
    (["gc", "--redis-url", "redis://127.0.0.1:1/0", "--grace", "-5"], "--grace must be at least 0"),
    (["gc", "--redis-url", "bogus://nowhere"], "--redis-url"),
    (["gc", "--redis-url", "redis://127.0.0.1:1/0", "--scan-timeout", "-1"], "--scan-timeout must be at least 0"),
    (["gc", "--redis-url", "redis://h/0", "--kafka-option", "novalue"], "--kafka-option needs KEY=VALUE"),
    (["gc"], "name a store with --redis-url, --s3-bucket, --gcs-bucket or --azure-container"),
    (["reconcile", "--bootstrap", "x:1", "--topic", "t", "--redis-url", "r://", "--grace", "-5"], "--grace"),
    (["reconcile", "--bootstrap", "x:1", "--topic", "t"], "name a store with --redis-url, --s3-bucket, --gcs-bucket"),
    (["reconcile", "--bootstrap", "x:1", "--topic", "t", "--redis-url", "bogus://nowhere"], "--redis-url"),
    (["bench", "--backend", "bogus"], "--backend"),
]


@pytest.mark.parametrize(("args", "says"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_argument(args: list[str], says: str) -> None:
    out = run_cli(*args)
    assert out.stdout == ""
    assert_one_line(out, USAGE, args[0], says)
    assert "--" in says or "store" in says  # the line names the argument at fault


def test_unknown_flag_is_refused_by_the_top_level_parser() -> None:
    out = run_cli("demo", "--no-such-flag")
    assert out.returncode == USAGE
    assert out.stderr.strip().splitlines() == ["gateway: error: unrecognized arguments: --no-such-flag"]


def test_every_subcommand_has_a_bad_argument_case() -> None:
    covered: set[str] = {args[0] for args, _ in BAD}
    assert covered == {"demo", "gc", "reconcile", "bench"}


_WITHOUT = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # as if that extra were not installed
from gateway.cli import main
sys.exit(main({argv!r}))
"""


def run_cli_without(blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """The real command in an install that lacks some packages (blocked the way an absent one fails)."""
    script = _WITHOUT.format(blocked=blocked, argv=list(args))
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )


@pytest.mark.redis
def test_gc_on_redis_alone_needs_no_s3_client(redis_server: RedisServer) -> None:
    out = run_cli_without(("boto3", "botocore"), "gc", "--redis-url", redis_server.url, "--redis-prefix", "gwnone")
    assert out.returncode == 0, out.stderr
    assert "boto3" not in out.stderr


def test_reconcile_without_pyspark_names_the_spark_extra() -> None:
    out = run_cli_without(
        ("pyspark", "pyarrow"),
        "reconcile",
        "--topic",
        "t",
        "--bootstrap",
        dead(),
        "--redis-url",
        "redis://127.0.0.1:1/0",
    )
    assert out.returncode != 0
    assert "kafka-hybrid-gateway[spark]" in out.stderr, out.stderr
