"""``gateway gc``'s report says each thing once: ``kept: <locator>: <why>``, not ``kept: <loc>: kept: why``."""

from __future__ import annotations

import uuid

from gateway.cli import _gc_lines
from gateway.gc.sweeper import sweep, unverified
from gateway.testing.memory_store import MemoryStore


def test_a_kept_payload_is_reported_with_its_reason_once() -> None:
    store = MemoryStore()
    locator = store.put("orders", uuid.uuid4(), b"payload", pending_since_ms=1)
    report = sweep({"mem": store}, grace_ms=0, now_ms=10_000, verifier=unverified(False))
    lines = _gc_lines(report)
    assert f"  kept: {locator}: not checked against Kafka (no bootstrap servers given)" in lines
    assert not [line for line in lines if line.count("kept:") > 1]
    assert all(not why.startswith("kept") for _, why in report.kept)
