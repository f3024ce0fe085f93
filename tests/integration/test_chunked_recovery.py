"""Restarts and rebalances while large messages are half-read: nothing lost, nothing twice."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gateway import HybridConsumer
from gateway.testing import KafkaService
from tests.faults import Tally
from tests.helpers import payload
from tests.integration.test_chunked_e2e import plain_record, raw_segments
from tests.kafkautil import produce_records

ROOT = Path(__file__).resolve().parents[2]


def interleaved(topic: str, partition: int, messages: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Large messages of 3 segments, two in flight at a time, with plain records between segments."""
    records: list[dict[str, Any]] = []
    expected: dict[str, str] = {}
    larges = []
    for j in range(messages):
        key = f"L{partition}-{j}"
        value = payload(450_000, seed * 1000 + j)
        expected[key] = hashlib.sha256(value).hexdigest()
        larges.append(raw_segments(topic, value, 150_000, partition=partition, key=key.encode()))
    plain_no = 0
    for j in range(0, messages, 2):
        pair = larges[j : j + 2]
        for seq in range(3):
            for parts in pair:
                records.append(parts[seq])
                key = f"P{partition}-{plain_no}"
                rec = plain_record(topic, plain_no, partition)
                rec["key"] = key.encode()
                records.append(rec)
                expected[key] = hashlib.sha256(rec["value"]).hexdigest()
                plain_no += 1
    return records, expected


def run_child(kafka: KafkaService, topic: str, group: str, out: Path, hold: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "tests.consumer_child",
        "--bootstrap",
        kafka.bootstrap_servers,
        "--topic",
        topic,
        "--group",
        group,
        "--out",
        str(out),
        "--hold-when-pending",
        str(hold),
        "--instance-id",
        f"{group}-member",
    ]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


def test_consumer_killed_mid_message_restarts_without_loss_or_duplicates(kafka: KafkaService, tmp_path: Path) -> None:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(topic, partitions=1)
    records, expected = interleaved(topic, 0, 6, seed=1)
    produce_records(kafka.producer_config(), records)
    group = f"g-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "delivered.jsonl"
    child = run_child(kafka, topic, group, out, hold=5)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip() == "HOLDING", f"child said {line!r}"
    child.send_signal(signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL
    before = [json.loads(x) for x in out.read_text().splitlines()]
    restarted = run_child(kafka, topic, group, out, hold=0)
    stdout, _ = restarted.communicate(timeout=90)
    assert restarted.returncode == 0, stdout
    delivered = [json.loads(x) for x in out.read_text().splitlines()]
    counts = Counter(d["key"] for d in delivered)
    assert [k for k, n in counts.items() if n > 1] == [], "delivered twice"
    assert set(counts) == set(expected), f"missing {set(expected) - set(counts)}"
    assert all(d["sha"] == expected[d["key"]] for d in delivered)
    assert 5 <= len(before) < len(expected)


def group_protocol_config(kafka: KafkaService, consumer_config: Any, group: str, protocol: str) -> dict[str, Any]:
    """A group config for ``protocol``: KIP-848 (``consumer``), or the classic protocol with its eager
    (``classic``) or incremental (``cooperative``, cooperative-sticky) rebalances, where revoke-time
    commits must stick."""
    conf = consumer_config(group, **{"auto.commit.interval.ms": 200})
    if protocol == "consumer":
        if not kafka.has("kip848"):
            pytest.skip(f"backend {kafka.name!r} lacks KIP-848 (group.protocol=consumer)")
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            conf.pop(key, None)
        conf["group.protocol"] = "consumer"
        return dict(conf)
    if not kafka.has("classic_revoke_commit"):
        pytest.skip(f"backend {kafka.name!r} rejects commits during a classic rebalance")
    if protocol == "cooperative":
        conf["partition.assignment.strategy"] = "cooperative-sticky"
    return dict(conf)


PROTOCOL_NAMES = {
    "consumer": "KIP-848",
    "classic": "classic, eager rebalance",
    "cooperative": "classic, cooperative-sticky",
}


@pytest.mark.parametrize("protocol", ["consumer", "classic", "cooperative"])
def test_second_consumer_joins_while_messages_are_half_read(
    kafka: KafkaService, consumer_config: Any, protocol: str
) -> None:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(topic, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = group_protocol_config(kafka, consumer_config, group, protocol)
    expected: dict[str, str] = {}
    records: list[dict[str, Any]] = []
    for partition in (0, 1):
        recs, exp = interleaved(topic, partition, 6, seed=partition + 2)
        records += recs
        expected.update(exp)
    produce_records(kafka.producer_config(), records)
    delivered: list[tuple[str, str, str]] = []
    lock = threading.Lock()
    stop = threading.Event()
    half_read = threading.Event()
    errors: list[BaseException] = []

    def run(name: str, pace: float) -> None:
        try:
            consumer = HybridConsumer(conf)
            consumer.subscribe([topic])
            while not stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                with lock:
                    delivered.append((name, msg.key().decode(), hashlib.sha256(msg.value() or b"").hexdigest()))
                    if len(delivered) >= 6 and consumer.metrics()["assembler.incomplete.messages"]:
                        half_read.set()
                time.sleep(pace)
            consumer.close()
        except BaseException as exc:
            errors.append(exc)

    first = threading.Thread(target=run, args=("A", 0.4))
    first.start()
    assert half_read.wait(30), "first consumer never had a half-read message"
    second = threading.Thread(target=run, args=("B", 0.0))
    second.start()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with lock:
            if len({k for _, k, _ in delivered}) >= len(expected):
                break
        time.sleep(0.2)
    time.sleep(1.0)  # anything delivered twice would show up now
    stop.set()
    first.join(30)
    second.join(30)
    assert not errors, errors
    counts = Counter(k for _, k, _ in delivered)
    tally = Tally(
        f"second consumer joins a group ({PROTOCOL_NAMES[protocol]}) while chunked messages are half read",
        expected=dict(expected),
        acknowledged=set(expected),
        delivered=counts,
        wrong_bytes=sum(sha != expected.get(k) for _, k, sha in delivered),
        note=f"A delivered {sum(n == 'A' for n, _, _ in delivered)}, B {sum(n == 'B' for n, _, _ in delivered)}",
    )
    tally.check()
    assert [k for k, n in counts.items() if n > 1] == [], "delivered twice"
    assert set(counts) == set(expected)
    assert all(sha == expected[k] for _, k, sha in delivered)
    assert {name for name, _, _ in delivered} == {"A", "B"}, "the second consumer took over a partition"
