"""How ``gateway demo``'s Spark stage proves what it claims: each row against what was sent, each copy
read back to the end of its topic, and each run of the stream against what was new for it.

Kept apart from the Spark calls so the verdicts can be checked on their own (tests/unit/test_demo_checks.py):
a check that cannot fail proves nothing.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.command import kafka_logger
from gateway.testing.demo._env import DemoEnv
from gateway.testing.demo._model import Sent
from gateway.testing.demo._routes import demo_consumer

TRAILER = 32
"""Bytes the Spark stage's transformation appends to each value: the value's own SHA-256."""


@dataclass
class Check:
    """One verified step: how many messages passed out of how many, and what went wrong."""

    expected: int
    verified: int = 0
    problems: list[str] = field(default_factory=list)
    passed: set[bytes] = field(default_factory=set)
    """The keys that passed (for the per-route and per-run lines)."""

    @property
    def ok(self) -> bool:
        return self.expected > 0 and self.verified == self.expected and not self.problems

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)


@dataclass
class RouteFigures:
    messages: int = 0
    payload_bytes: int = 0
    verified: int = 0


def check_rows(rows: Iterable[Any], sent: Mapping[bytes, Sent]) -> tuple[Check, dict[str, RouteFigures]]:
    """Rows of a ``hybrid-kafka`` read (``key``, ``route``, ``error``, ``size``, ``sha256`` of the value)
    against what was sent: each key once, no error, the same SHA-256 and the same kind of route."""
    check = Check(expected=len(sent))
    routes: dict[str, RouteFigures] = {}
    seen: set[bytes] = set()
    for row in rows:
        key = bytes(row["key"] or b"")
        figures = routes.setdefault(str(row["route"]), RouteFigures())
        figures.messages += 1
        figures.payload_bytes += row["size"] or 0
        original = sent.get(key)
        if original is None or key in seen:
            check.problem(f"read: {'an unexpected' if original is None else 'a second'} row for key {key!r}")
        elif row["error"] is not None:
            check.problem(f"read: {key.decode()}: {row['error']}")
        elif row["sha256"] != original.sha256 or row["route"] != original.route.split(":")[0]:
            check.problem(f"read: {key.decode()} ({row['route']}, {row['size']} bytes) does not match what was sent")
        else:
            check.passed.add(key)
            figures.verified += 1
        seen.add(key)
    for key in sorted(sent.keys() - seen)[:5]:
        check.problem(f"read: no row for {key.decode()}")
    check.verified = len(check.passed)
    return check, routes


@dataclass(frozen=True)
class Copy:
    """One record of a copy, reduced to what decides whether it is right (values are not kept)."""

    key: bytes
    size: int
    body_sha256: str
    """SHA-256 of the value without its last :data:`TRAILER` bytes."""
    trailer: bytes

    @classmethod
    def of(cls, key: bytes, value: bytes) -> Copy:
        return cls(key, len(value), hashlib.sha256(value[:-TRAILER]).hexdigest(), value[-TRAILER:])


def check_copy(label: str, copies: Iterable[Copy], sent: Mapping[bytes, Sent]) -> Check:
    """Every record of a copy: each sent key exactly once, its value the sent value followed by that
    value's SHA-256."""
    check = Check(expected=len(sent))
    counts: dict[bytes, int] = {}
    for copy in copies:
        counts[copy.key] = counts.get(copy.key, 0) + 1
        original = sent.get(copy.key)
        if original is None:
            check.problem(f"{label}: unexpected key {copy.key!r}")
        elif copy.body_sha256 != original.sha256 or copy.trailer != bytes.fromhex(original.sha256):
            check.problem(f"{label}: {copy.key.decode()} ({copy.size} bytes) is not the sent value and its SHA-256")
        else:
            check.passed.add(copy.key)
    for key in sorted(k for k, n in counts.items() if n > 1):
        check.problem(f"{label}: {key.decode()} written {counts[key]} times")
        check.passed.discard(key)
    for key in sorted(sent.keys() - counts.keys())[:5]:
        check.problem(f"{label}: {key.decode()} missing")
    check.verified = len(check.passed)
    return check


def check_runs(check: Check, runs: Sequence[tuple[Collection[bytes], Sequence[tuple[int, int]]]]) -> None:
    """Each run of a stream (the keys new for it, ``(batch id, input rows)`` of its micro-batches) took exactly
    what was new, and each restart went on at the micro-batch after the last one committed."""
    previous: int | None = None
    for number, (new, batches) in enumerate(runs, 1):
        taken = sum(rows for _, rows in batches)
        if taken != len(new):
            check.problem(f"stream: run {number} took {taken} rows for {len(new)} new messages")
        if previous is not None and batches and batches[0][0] != previous + 1:
            check.problem(f"stream: run {number} began at micro-batch {batches[0][0]}, not {previous + 1}")
        previous = batches[-1][0] if batches else previous


def end_offsets(env: DemoEnv, topic: str) -> dict[int, tuple[int, int]]:
    """Low and high watermark of every partition of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    conf = {**env.kafka.client_config, "bootstrap.servers": env.bootstrap, "group.id": f"demo-{uuid.uuid4().hex[:8]}"}
    consumer = Consumer({**conf, "logger": kafka_logger()})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        offsets = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in meta.partitions}
        return {p: (int(lo), int(hi)) for p, (lo, hi) in sorted(offsets.items())}
    finally:
        consumer.close()


def read_copy(env: DemoEnv, topic: str, label: str, sent: Mapping[bytes, Sent], timeout: float = 120.0) -> Check:
    """Read ``topic`` with a :class:`~gateway.HybridConsumer` to the end offsets taken first, and
    :func:`check_copy` what it holds. Each partition ends with the record completing its last message."""
    ends = end_offsets(env, topic)
    pending = {p for p, (lo, hi) in ends.items() if hi > lo}
    copies: list[Copy] = []
    errors: list[str] = []
    consumer = demo_consumer(env)
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(f"{label}: {msg.error()}")
                continue
            copies.append(Copy.of(msg.key() or b"", msg.value() or b""))
            partition, offset = msg.partition(), msg.offset()
            if partition in pending and offset is not None and offset >= ends[partition][1] - 1:
                pending.discard(partition)
    finally:
        consumer.close()
    check = check_copy(label, copies, sent)
    for error in errors[:5]:
        check.problem(error)
    if pending:
        check.problem(f"{label}: partitions {sorted(pending)} of {topic} not read to their end in {timeout:.0f} s")
    return check
