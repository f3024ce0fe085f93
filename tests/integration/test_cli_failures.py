"""Every subcommand of ``gateway`` fails in one line, with the exit code of the table in docs/cli.md.

Each case runs the real command as a subprocess against a dead broker or Redis (a closed local
port), a bucket or topic that does not exist on a real server, a bad argument or setting, a
missing package, or a signal; every row of :data:`gateway.command.EXIT_CODES` is driven here
(``test_every_exit_code_has_a_case``). ``timeout=60`` makes a hang a failure (``TimeoutExpired``)
on a loaded machine; it is not a speed measurement.
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
USAGE, UNREACHABLE, FAILED, UNKNOWN_TOPIC, MISSING_EXTRA = 2, 3, 1, 5, 6


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
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


def test_reconcile_missing_bucket(missing_bucket: list[str], kafka: KafkaService, topic: str) -> None:
    """A live broker and topic, so that the probe passes and the bucket is what fails."""
    out = run_cli("reconcile", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, *missing_bucket, env=S3_ENV)
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
    assert_one_line(out, MISSING_EXTRA, "reconcile", "kafka-hybrid-gateway[spark]")


# ---------------------------------------------------------------------------------------------
# the rest of the exit-code table: a dead Redis, an unknown topic, refused settings, no command, a signal


def dead_redis() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def test_gc_dead_redis_is_unreachable_naming_redis() -> None:
    assert_one_line(run_cli("gc", "--redis-url", dead_redis()), UNREACHABLE, "gc", "Redis")


def test_reconcile_dead_redis_is_unreachable_naming_redis(kafka: KafkaService, topic: str) -> None:
    out = run_cli("reconcile", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, "--redis-url", dead_redis())
    assert_one_line(out, UNREACHABLE, "reconcile", "Redis")


def test_reconcile_unknown_topic_has_its_own_code(kafka: KafkaService, redis_server: RedisServer) -> None:
    store = ["--redis-url", redis_server.url]
    out = run_cli("reconcile", "--bootstrap", kafka.bootstrap_servers, "--topic", "gw-no-such-topic", *store)
    assert_one_line(out, UNKNOWN_TOPIC, "reconcile", "'gw-no-such-topic'")


@pytest.mark.parametrize("command", ["gc", "reconcile"])
def test_an_unknown_kafka_option_is_a_usage_error_not_an_unreachable_broker(command: str) -> None:
    topic = ["--topic", "t"] if command == "reconcile" else []
    store = ["--redis-url", "redis://127.0.0.1:1/0", "--bootstrap", dead()]
    out = run_cli(command, *store, *topic, "--kafka-option", "no.such.setting=1")
    assert_one_line(out, USAGE, command, "no.such.setting")
    assert "cannot reach" not in out.stderr


def test_a_bad_key_in_the_command_config_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("no.such.setting=1\n")
    config.chmod(0o600)
    out = run_cli("gc", "--redis-url", "redis://127.0.0.1:1/0", "--bootstrap", dead(), "--command-config", str(config))
    assert_one_line(out, USAGE, "gc", "no.such.setting")


def test_gateway_without_a_command_is_a_usage_error() -> None:
    out = run_cli()
    assert out.returncode == USAGE, out.stdout + out.stderr
    assert out.stdout == ""
    assert "usage: gateway" in out.stderr and "name a command" in out.stderr


def test_a_terminated_command_exits_128_plus_the_signal() -> None:
    """gc waits on a broker that accepts the connection and never answers; SIGTERM ends it as terminated.

    The signal is sent once the listener saw the connection, so the command is inside its probe.
    """
    import signal
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(60)
        port = listener.getsockname()[1]
        cmd = [sys.executable, "-m", "gateway.cli", "gc", "--redis-url", "redis://127.0.0.1:1/0"]
        cmd += ["--bootstrap", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            conn, _ = listener.accept()
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
            conn.close()
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err


CASES = {
    FAILED: "test_gc_missing_bucket",
    USAGE: "test_bad_argument",
    UNREACHABLE: "test_gc_dead_redis_is_unreachable_naming_redis",
    UNKNOWN_TOPIC: "test_reconcile_unknown_topic_has_its_own_code",
    MISSING_EXTRA: "test_reconcile_without_pyspark_names_the_spark_extra",
}
"""The test that drives each code of the table here; the others are driven elsewhere (:data:`ELSEWHERE`)."""

ELSEWHERE = {
    0: "tests/integration/test_gc.py",
    4: "tests/integration/test_gc.py and test_reconcile_proofs.py (an open transaction)",
    7: "tests/integration/test_reconcile_proofs.py (a prefix shared with a topic not named)",
    8: "tests/unit/test_bench_ab.py (a median outside the other side's spread; bench --against)",
}


def test_every_exit_code_has_a_case() -> None:
    from gateway.command import EXIT_AB_MOVED, EXIT_CODES, EXIT_INCOMPLETE, EXIT_OK, EXIT_REFUSED

    assert {EXIT_OK, EXIT_INCOMPLETE, EXIT_REFUSED, EXIT_AB_MOVED} == set(ELSEWHERE)
    assert set(EXIT_CODES) == {*CASES, *ELSEWHERE}
    assert all(callable(globals()[name]) for name in CASES.values())
    proofs = (ROOT / "tests" / "integration" / "test_reconcile_proofs.py").read_text()
    assert (
        "def test_reconcile_keeps_what_a_mirror_points_at_and_refuses_a_prefix_shared_with_a_topic_not_named" in proofs
    )
    assert "EXIT_SHARED_PREFIX == 7" in proofs
    assert "def test_a_flagged_entry_exits_8" in (ROOT / "tests" / "unit" / "test_bench_ab.py").read_text()
