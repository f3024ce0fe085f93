"""The main job and the command line, run as a user runs them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway import HybridConsumer, HybridProducer
from gateway.prometheus import GatewayCollector
from gateway.testing import KafkaService, free_port, resolve_backend
from tests.helpers import payload

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def test_help_lists_subcommands() -> None:
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("demo", "gc"):
        assert command in out.stdout


def test_demo_verifies_every_byte_on_the_embedded_cluster() -> None:
    out = run_cli("demo", "--count", "60", "--seed", "3", "--no-spark")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every byte verified: 60/60" in out.stdout
    assert "Spark" not in out.stdout
    for route in ("plain", "chunked", "reference:redis"):
        assert route in out.stdout


def test_demo_without_stores_leaves_out_what_the_embedded_cluster_cannot_hold() -> None:
    out = run_cli("demo", "--count", "40", "--stores", "none", "--large-fraction", "0.3", "--seed", "5", "--no-spark")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "left out" in out.stdout
    assert "reference" not in out.stdout.split("every byte")[0].split("┃ route")[-1]


@pytest.mark.kafka
@pytest.mark.embedded
@pytest.mark.spark
def test_demo_runs_the_spark_stage_after_the_kafka_routes() -> None:
    """``make demo``'s job: on the demo's own cluster (the backend's), the Spark stage reads, copies and
    streams, verifies all of it, reports its time, and the verdict and exit status cover both stages."""
    backend = resolve_backend()
    if backend not in ("mock", "kafka"):
        pytest.skip(f"the demo starts its own broker only for mock and kafka, not {backend}")
    out = run_cli("demo", "--kafka", backend, "--count", "60", "--wave", "10", "--seed", "3", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every byte verified: 60/60" in out.stdout
    assert (
        "Spark stage verified: 60/60 rows read match by SHA-256; 60/60 copies verified by HybridConsumer;" in out.stdout
    )
    assert "10/10 wave messages written exactly once across a restart" in out.stdout
    assert "verdict: all verified (Kafka routes, Spark stage)" in out.stdout
    seconds = re.search(r"Spark (\d+\.\d) s on local\[2\]", out.stdout)
    assert seconds is not None, out.stdout
    print(f"\nSpark stage on {backend}: {seconds.group(1)} s")
    for step in (
        "Spark session start (",
        "Spark batch read (",
        "Spark sink copy (",
        "Spark stream (",
        "run 2 (restart): batch 1",
    ):
        assert step in out.stdout
    assert "Spark stage skipped" not in out.stdout and out.stderr == "", out.stderr  # Spark's noise went to its log


def test_demo_without_java_says_so_in_one_line_and_runs_the_rest(tmp_path: Path) -> None:
    env = {**os.environ, "JAVA_HOME": str(tmp_path)}  # PySpark starts $JAVA_HOME/bin/java, which is not there
    out = run_cli("demo", "--count", "20", "--seed", "3", "--stores", "none", "--max-size", "1MB", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    skipped = [line for line in out.stdout.splitlines() if "Spark" in line]
    assert skipped == [f"Spark stage skipped: JAVA_HOME={tmp_path} has no bin/java: Spark needs Java 17 or newer"]
    assert "every byte verified: 20/20" in out.stdout


def test_prometheus_collector_exposes_route_counters(kafka: KafkaService, topic: str, consumer_config: Any) -> None:
    producer = HybridProducer(kafka.producer_config())
    producer.produce(topic, payload(1_500_000), key=b"k")
    producer.produce(topic, b"small", key=b"s")
    assert producer.flush(30) == 0
    consumer = HybridConsumer(consumer_config())
    consumer.subscribe([topic])
    got = 0
    while got < 2:
        msg = consumer.poll(10)
        assert msg is not None
        got += msg.error() is None
    registry = CollectorRegistry()
    registry.register(GatewayCollector({"producer": producer, "consumer": consumer}))
    text = generate_latest(registry).decode()
    consumer.close()
    assert 'gateway_producer_messages_total{client="producer",route="chunked"} 1.0' in text
    assert 'gateway_producer_messages_total{client="producer",route="plain"} 1.0' in text
    assert 'gateway_consumer_messages_total{client="consumer",route="chunked"} 1.0' in text
    assert 'gateway_consumer_buffered_bytes{client="consumer"} 0.0' in text


def test_demo_verdict_requires_every_message_verified() -> None:
    from gateway.testing.demo import DemoResult

    def result(produced: int, verified: int, mismatched: int, missing: int) -> DemoResult:
        return DemoResult(produced, verified, mismatched, missing, 0, {}, {}, {}, "mock", [], 1.0)

    assert result(10, 10, 0, 0).ok
    assert not result(10, 9, 1, 0).ok
    assert not result(10, 9, 0, 1).ok
    assert not result(0, 0, 0, 0).ok


def test_version() -> None:
    out = run_cli("--version")
    assert out.returncode == 0
    assert out.stdout.strip().startswith("gateway 0.")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--count", "-1"], "--count must be at least 1"),
        (["--segment-bytes", "0"], "--segment-bytes must be at least 64"),
        (["--min-size", "10MB", "--max-size", "1MB"], "exceeds --max-size"),
        (["--stores", "bogus"], "unknown store 'bogus'"),
        (["--min-size", "10XB"], "not a size: '10XB'"),
        (["--large-fraction", "2"], "--large-fraction must be between 0 and 1"),
        (["--wave", "1"], "--wave must be at least 2"),
    ],
)
def test_demo_refuses_bad_arguments_in_one_line(args: list[str], says: str) -> None:
    out = run_cli("demo", *args, timeout=10)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr
    assert lines[0].startswith("gateway demo: error: ")


def test_demo_reports_a_dead_broker_in_one_line_within_seconds() -> None:
    started = time.monotonic()
    out = run_cli("demo", "--kafka", f"127.0.0.1:{free_port()}", "--stores", "none", timeout=10)
    assert time.monotonic() - started < 10
    assert out.returncode == 3, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot reach Kafka at 127.0.0.1:" in lines[0], out.stderr


def _children(pid: int) -> dict[int, str]:
    """Direct children of ``pid``: their command lines."""
    found: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                child = int(stat.parent.name)
                found[child] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_sigterm_stops_the_servers_the_demo_started_and_removes_their_folders() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    demo = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "demo", "--count", "100000"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + 60
        servers: dict[int, str] = {}
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            if line.startswith("Kafka:"):
                servers = _children(demo.pid)
                break
        assert {"redis", "moto"} <= {n for c in servers.values() for n in ("redis", "moto") if n in c}, servers
        folders = [Path(os.readlink(f"/proc/{pid}/cwd")) for pid in servers]
        assert all(f.name.startswith(("gw-redis-", "gw-moto-")) for f in folders), folders
        demo.send_signal(signal.SIGTERM)
        code = demo.wait(30)
        assert code == 128 + signal.SIGTERM, demo.stdout.read()[-3000:]  # what it printed on the way out
    finally:
        if demo.poll() is None:
            demo.kill()
    assert not [pid for pid in servers if Path(f"/proc/{pid}").exists()], "servers left running"
    assert not [f for f in folders if f.exists()], "server folders left behind"


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its new parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _spark_processes(marker: str) -> list[int]:
    """Every process whose command line names ``marker`` (the stage's folder), whoever its parent is now."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.spark
@pytest.mark.parametrize("moment", ["launch", "job"])
def test_sigterm_in_the_spark_stage_leaves_no_jvm_server_or_folder(moment: str, tmp_path: Path) -> None:
    """A SIGTERM while PySpark launches its JVM, or while a job runs: exit 143, nothing left running.

    Interrupted during the launch, PySpark's JVM used to outlive the demo (its main thread died, its
    py4j thread kept it up, holding the demo's stdout); interrupted inside a py4j call, the failing
    ``spark.stop()`` used to turn the SIGTERM into "Spark stage FAILED" and exit status 1.
    """
    log = tmp_path / "demo.out"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "demo", "--count", "60"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + 120
        children: dict[int, str] = {}
        ready = False
        while time.monotonic() < deadline and not ready:
            time.sleep(0.05 if moment == "launch" else 0.2)
            children = _children(demo.pid)
            jvm = [pid for pid, command in children.items() if "org.apache.spark.deploy.SparkSubmit" in command]
            ready = bool(jvm) and (
                moment == "launch" or "pyspark.daemon pyspark.worker" in " ".join(_children(jvm[0]).values())
            )
        found = re.search(r"gw-demo-spark-[^/ ]+", " ".join(children.values()))
        assert ready and found is not None, children
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(60) == 128 + signal.SIGTERM, log.read_text()
    finally:
        if demo.poll() is None:
            demo.kill()
    assert "Spark stage FAILED" not in log.read_text()
    deadline = time.monotonic() + 30  # the JVM stops by itself once its stdin, the driver's pipe, closes

    def left() -> list[int]:
        return [pid for pid in {*children, *_spark_processes(found.group(0))} if _alive(pid)]

    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    stray = left()
    for pid in stray:  # never leave a stray JVM on a shared machine, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not stray, f"left running after the demo exited: {stray} of {children}"
    assert not (Path(tempfile.gettempdir()) / found.group(0)).exists(), "the Spark stage's folder was left behind"
