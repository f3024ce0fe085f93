"""Fault-test bookkeeping shared by the fault matrix and the cluster failover tests.

Every scenario counts messages sent, acknowledged, delivered, lost (acknowledged but never
delivered: must be 0), duplicated, and orphaned (payloads in a store that no envelope in Kafka
points at, after gc: must be 0). With ``FAULT_MATRIX_OUT=path.jsonl`` each scenario appends its row.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from gateway import HybridConsumer, HybridProducer
from gateway.errors import GatewayError, StoreError
from gateway.gc.sweeper import kafka_verifier, sweep
from gateway.protocol.envelope import decode_envelope, looks_like_envelope
from gateway.testing import ApacheKafka, KafkaService
from tests.helpers import payload

SEGMENT = 300_000
SIZES = (700_000, 1_200_000, 1_900_000)


# --------------------------------------------------------------------------------------------
# the tally


@dataclass
class Tally:
    """Per-scenario counts; ``lost`` and ``orphaned`` are the two that must be zero."""

    scenario: str
    expected: dict[str, str] = field(default_factory=dict)  # key -> sha256 of what was sent
    acknowledged: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # key -> error the producer reported
    delivered: Counter[str] = field(default_factory=Counter)
    wrong_bytes: int = 0
    consumer_errors: int = 0
    commit_failures: int = 0
    orphaned: int = 0
    orphaned_before_gc: int = 0
    note: str = ""
    errored: set[str] = field(default_factory=set)  # keys the consumer raised a typed error for
    error_types: Counter[str] = field(default_factory=Counter)

    @property
    def lost(self) -> set[str]:
        """Acknowledged, never delivered, and never reported: lost silently."""
        return self.acknowledged - set(self.delivered) - self.errored

    @property
    def unrecoverable(self) -> set[str]:
        """Reported to the consumer as a typed error and never delivered afterwards (the payload is gone)."""
        return self.errored - set(self.delivered)

    @property
    def duplicated(self) -> int:
        return sum(n - 1 for n in self.delivered.values() if n > 1)

    def on_delivery(self, key: str) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                self.acknowledged.add(key)
            else:
                self.failed[key] = str(err)

        return report

    def take(self, msg: Any) -> None:
        key = msg.key().decode()
        self.delivered[key] += 1
        if hashlib.sha256(msg.value() or b"").hexdigest() != self.expected.get(key):
            self.wrong_bytes += 1

    def row(self) -> dict[str, Any]:
        out = {
            "scenario": self.scenario,
            "sent": len(self.expected),
            "acknowledged": len(self.acknowledged),
            "failed_to_producer": len(self.failed),
            "delivered": len(self.delivered),
            "lost": len(self.lost),
            "reported_unrecoverable": len(self.unrecoverable),
            "duplicated": self.duplicated,
            "wrong_bytes": self.wrong_bytes,
            "consumer_errors": self.consumer_errors,
            "orphaned_before_gc": self.orphaned_before_gc,
            "orphaned": self.orphaned,
            "note": self.note,
        }
        target = os.environ.get("FAULT_MATRIX_OUT")
        if target:
            with open(target, "a") as out_file:
                out_file.write(json.dumps(out) + "\n")
        return out

    def check(self) -> None:
        row = self.row()
        assert row["lost"] == 0, f"lost {sorted(self.lost)}: {row}"
        assert row["wrong_bytes"] == 0, row
        assert row["orphaned"] == 0, row
        assert row["acknowledged"] > 0, row


def producer_conf(cluster: KafkaService) -> dict[str, Any]:
    return cluster.producer_config(**{
        "enable.idempotence": True, "acks": "all", "message.timeout.ms": 60_000,
        "max.message.segment.bytes": SEGMENT, "linger.ms": 5,
    })  # fmt: skip


def consumer_conf(cluster: KafkaService, group: str) -> dict[str, Any]:
    return cluster.consumer_config(group, **{"enable.auto.commit": False, "fetch.wait.max.ms": 50})


def new_topic(cluster: KafkaService, partitions: int = 2) -> str:
    name = f"fm-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=partitions)
    return name


def produce(
    tally: Tally,
    producer: HybridProducer,
    topic: str,
    count: int,
    *,
    start: int = 0,
    fault_at: int | None = None,
    fault: Callable[[], None] | None = None,
) -> None:
    """Send ``count`` messages of 0.7 to 1.9 MB, running ``fault`` once after message ``fault_at`` was queued."""
    for i in range(start, start + count):
        key = f"m{i:04d}"
        value = payload(SIZES[i % len(SIZES)], seed=i)
        tally.expected[key] = hashlib.sha256(value).hexdigest()
        while True:
            try:
                producer.produce(topic, value, key=key.encode(), on_delivery=tally.on_delivery(key))
                break
            except BufferError:
                producer.poll(0.1)
            except (GatewayError, StoreError) as exc:  # refused before anything was queued: the app knows
                tally.failed[key] = f"{type(exc).__name__}: {exc}"
                break
        producer.poll(0)
        if fault is not None and i == fault_at:
            fault()
    producer.flush(120)


def consume(
    tally: Tally,
    consumer: HybridConsumer,
    *,
    until: Callable[[], bool],
    timeout: float = 90,
    on_each: Callable[[int], None] | None = None,
    commit: bool = True,
) -> None:
    """Poll until ``until()`` holds or ``timeout``; typed errors are counted, never fatal."""
    deadline = time.monotonic() + timeout
    taken = 0
    while not until() and time.monotonic() < deadline:
        try:
            msg = consumer.poll(0.5)
        except GatewayError as exc:
            assert exc.kafka_message is not None, f"{type(exc).__name__} without its record"
            tally.consumer_errors += 1
            tally.errored.add(exc.kafka_message.key().decode())
            tally.error_types[type(exc).__name__] += 1
            continue
        if msg is None or msg.error() is not None:
            continue
        tally.take(msg)
        taken += 1
        if commit:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:  # e.g. UNKNOWN_MEMBER_ID while the group re-forms: apps go on
                tally.commit_failures += 1
                tally.note = f"commit failed {tally.commit_failures}x during the outage ({exc.args[0].name()})"
        if on_each is not None:
            on_each(taken)


def everything_delivered(tally: Tally) -> Callable[[], bool]:
    return lambda: tally.acknowledged <= set(tally.delivered)


def sweep_orphans(tally: Tally, cluster: KafkaService, topic: str, stores: dict[str, Any]) -> None:
    """Count payloads no envelope points at, run gc against Kafka, and count again."""
    tally.orphaned_before_gc = _orphans(cluster, topic, stores)
    report = sweep(stores, grace_ms=0, verifier=kafka_verifier(cluster.client_conf(), timeout_s=120), dry_run=False)
    assert not report.kept, f"gc could not decide: {report.kept}"
    tally.orphaned = _orphans(cluster, topic, stores)


def _orphans(cluster: KafkaService, topic: str, stores: dict[str, Any]) -> int:
    live = {locator for _, locator in envelope_locators(cluster, topic)}
    return sum(1 for store in stores.values() for locator, _ in store.list_locators(topic) if locator not in live)


def kill_and_restart(broker: ApacheKafka, down: float = 2.0) -> Callable[[], None]:
    def fault() -> None:
        broker.kill()
        time.sleep(down)
        broker.restart()

    return fault


def envelope_locators(cluster: KafkaService, topic: str) -> set[tuple[str, str]]:
    """Every (store, locator) an envelope in ``topic`` points at, read to the end with a plain consumer."""
    consumer = Consumer({**cluster.consumer_config(), "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        found: set[tuple[str, str]] = set()
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:  # a transactional topic ends with a marker no poll returns: ask the position
                todo -= {tp.partition for tp in consumer.position([TopicPartition(topic, p) for p in todo])
                         if tp.offset >= ends[tp.partition]}  # fmt: skip
                continue
            if msg.error() is None and looks_like_envelope(msg.value()):
                envelope = decode_envelope(msg.value())
                found.add((envelope.store, envelope.locator))
            offset, partition = msg.offset(), msg.partition()
            if msg.error() is None and offset is not None and partition is not None and offset + 1 >= ends[partition]:
                todo.discard(partition)
        assert not todo, f"could not read {topic} to its end: partitions {sorted(todo)}"
        return found
    finally:
        consumer.close()


def render(rows_path: str) -> str:
    """The markdown table of ``docs/reliability.md`` from a ``FAULT_MATRIX_OUT`` file (the last row per scenario)."""
    rows: dict[str, dict[str, Any]] = {}
    with open(rows_path) as lines:
        for line in lines:
            row = json.loads(line)
            rows[row["scenario"]] = row
    head = (
        "| scenario | sent | acknowledged | failed to producer | delivered | lost | reported, unrecoverable "
        "| duplicated | consumer errors | orphaned before gc | orphaned after gc | note |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    body = [
        f"| {r['scenario']} | {r['sent']} | {r['acknowledged']} | {r['failed_to_producer']} | {r['delivered']} "
        f"| **{r['lost']}** | {r.get('reported_unrecoverable', 0)} | {r['duplicated']} | {r['consumer_errors']} "
        f"| {r['orphaned_before_gc']} | **{r['orphaned']}** | {r['note']} |"
        for r in rows.values()
    ]
    return "\n".join([head, *body])


if __name__ == "__main__":
    import sys

    print(render(sys.argv[1]))
