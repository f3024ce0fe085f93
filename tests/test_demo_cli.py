"""The main job and the command line, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from gateway import HybridConsumer, HybridProducer
from gateway.prometheus import GatewayCollector
from gateway.testing import KafkaService
from tests.helpers import payload

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_help_lists_subcommands() -> None:
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("demo", "gc"):
        assert command in out.stdout


def test_demo_verifies_every_byte_on_the_embedded_cluster() -> None:
    out = run_cli("demo", "--count", "60", "--seed", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every byte verified: 60/60" in out.stdout
    for route in ("plain", "chunked", "reference:redis"):
        assert route in out.stdout


def test_demo_without_stores_leaves_out_what_the_embedded_cluster_cannot_hold() -> None:
    out = run_cli("demo", "--count", "40", "--stores", "none", "--large-fraction", "0.3", "--seed", "5")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "left out" in out.stdout
    assert "reference" not in out.stdout.split("every byte")[0].split("┃ route")[-1]


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
    assert "gateway_producer_chunked_messages_total 1.0" in text
    assert "gateway_producer_plain_messages_total 1.0" in text
    assert "gateway_consumer_chunked_messages_total 1.0" in text
    assert "gateway_consumer_assembler_buffered_bytes 0.0" in text


def test_demo_verdict_requires_every_message_verified() -> None:
    from gateway.testing.demo import DemoResult

    def result(produced: int, verified: int, mismatched: int, missing: int) -> DemoResult:
        return DemoResult(produced, verified, mismatched, missing, 0, {}, {}, {}, "mock", [], 1.0)

    assert result(10, 10, 0, 0).ok
    assert not result(10, 9, 1, 0).ok
    assert not result(10, 9, 0, 1).ok
    assert not result(0, 0, 0, 0).ok
