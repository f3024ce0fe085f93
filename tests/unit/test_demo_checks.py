"""The Spark stage's verdicts can fail: each check below is fed what a broken pipeline would produce.

And the demo's layout on the embedded cluster: every partition under the ring it keeps.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from typing import Any

import pytest

from gateway.testing.demo import (
    MOCK_MAX_PARTITIONS,
    MOCK_PARTITION_BYTES,
    MOCK_WINDOW,
    PARTITIONS,
    DemoOptions,
    Sent,
    plan,
    spread,
)
from gateway.testing.demo._checks import TRAILER, Check, Copy, check_copy, check_rows, check_runs
from gateway.testing.demo._report import render
from gateway.testing.demo._spark import STEPS, SparkStage

VALUES = {b"a": b"x" * 10, b"b": b"y" * 2_000, b"c": b"z" * 30}
ROUTES = {b"a": "plain", b"b": "chunked", b"c": "reference:s3"}
SENT = {k: Sent(ROUTES[k], hashlib.sha256(v).hexdigest(), len(v), 0) for k, v in VALUES.items()}


def row(key: bytes, value: bytes | None = None, route: str | None = None, error: str | None = None) -> dict[str, Any]:
    value = VALUES[key] if value is None else value
    kind = (route or ROUTES[key]).split(":")[0]
    return {"key": key, "route": kind, "error": error, "size": len(value), "sha256": hashlib.sha256(value).hexdigest()}


def test_rows_that_match_what_was_sent_pass() -> None:
    check, routes = check_rows([row(b"a"), row(b"b"), row(b"c")], SENT)
    assert check.ok and check.verified == 3
    assert {r: (f.messages, f.payload_bytes, f.verified) for r, f in routes.items()} == {
        "plain": (1, 10, 1),
        "chunked": (1, 2_000, 1),
        "reference": (1, 30, 1),
    }


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ([row(b"a"), row(b"b")], "no row for c"),
        ([row(b"a"), row(b"b"), row(b"c"), row(b"c")], "a second row for key b'c'"),
        ([row(b"a"), row(b"b"), row(b"c", b"z" * 29)], "c (reference, 29 bytes) does not match"),
        ([row(b"a"), row(b"b", route="plain"), row(b"c")], "b (plain, 2000 bytes) does not match"),
        ([row(b"a"), row(b"b"), row(b"c", error="PayloadNotFoundError: gone")], "c: PayloadNotFoundError: gone"),
        ([row(b"a"), row(b"b"), row(b"c"), {**row(b"a"), "key": b"d"}], "an unexpected row for key b'd'"),
    ],
)
def test_a_missing_extra_or_wrong_row_fails_the_read(rows: list[dict[str, Any]], says: str) -> None:
    check, _ = check_rows(rows, SENT)
    assert not check.ok
    assert any(says in p for p in check.problems), check.problems


def copy(key: bytes, value: bytes | None = None) -> Copy:
    original = VALUES[key] if value is None else value
    return Copy.of(key, original + hashlib.sha256(VALUES[key]).digest())


def test_copies_with_their_trailer_pass_once_each() -> None:
    check = check_copy("copy", [copy(b"a"), copy(b"b"), copy(b"c")], SENT)
    assert check.ok and check.passed == {b"a", b"b", b"c"}


@pytest.mark.parametrize(
    ("copies", "says"),
    [
        ([copy(b"a"), copy(b"b")], "copy: c missing"),
        ([copy(b"a"), copy(b"b"), copy(b"c"), copy(b"c")], "copy: c written 2 times"),
        ([copy(b"a"), copy(b"b"), copy(b"c", b"z" * 29)], "copy: c (61 bytes) is not the sent value"),
        ([copy(b"a"), copy(b"b"), Copy.of(b"c", VALUES[b"c"] + b"\0" * TRAILER)], "is not the sent value"),
    ],
)
def test_a_missing_doubled_or_wrong_copy_fails(copies: list[Copy], says: str) -> None:
    check = check_copy("copy", copies, SENT)
    assert not check.ok and check.verified < 3
    assert any(says in p for p in check.problems), check.problems


def test_a_stream_run_that_took_too_much_or_did_not_resume_fails() -> None:
    good = Check(expected=4, verified=4)
    check_runs(good, [({b"a", b"b"}, [(0, 1), (1, 1)]), ({b"c", b"d"}, [(2, 2)])])
    assert good.ok
    replayed = Check(expected=4, verified=4)  # the restart read the first half again (a lost checkpoint)
    check_runs(replayed, [({b"a", b"b"}, [(0, 2)]), ({b"c", b"d"}, [(0, 2), (1, 2)])])
    assert replayed.problems == [
        "stream: run 2 took 4 rows for 2 new messages",
        "stream: run 2 began at micro-batch 0, not 1",
    ]


def test_the_verdict_and_exit_status_cover_the_spark_stage() -> None:
    from rich.console import Console

    from gateway.testing.demo import DemoResult

    kafka = DemoResult(3, 3, 0, 0, 0, {}, {}, {}, "mock", [], 1.0)
    passed = SparkStage("local[2]", checks={name: Check(expected=3, verified=3) for name in STEPS})
    failed = SparkStage("local[2]", checks={**passed.checks, "stream": Check(3, 3, ["stream: w written 2 times"])})
    unfinished = SparkStage("local[2]", checks={"read": Check(expected=3, verified=3)}, error="Py4JError: gone")
    console = Console(record=True, width=200)
    assert render(kafka, console, [passed])
    assert "verdict: all verified (Kafka routes, Spark stage)" in console.export_text()
    for stage in (failed, unfinished):
        console = Console(record=True, width=200)
        assert not render(kafka, console, [stage])
        assert "verdict: FAILED (Spark stage)" in console.export_text()
    assert "Py4JError: gone" in unfinished.verdict()


def test_on_the_embedded_cluster_every_partition_stays_under_its_ring() -> None:
    """The mock drops a partition's oldest batches past 5 MiB: the topic must keep all the Spark stage reads."""
    options = DemoOptions()
    sending = plan(options, MOCK_WINDOW, "redis")
    filled = [0] * sending.partitions
    for index, size in sending.messages:
        filled[sending.placement[index]] += size if size <= options.reference_above else 1024
    assert sending.partitions > PARTITIONS and sum(filled) > 6 * MOCK_PARTITION_BYTES
    assert max(filled) <= MOCK_PARTITION_BYTES < 5 * 1024 * 1024
    # a wave into the same partitions: spread over the fixed count
    wave = plan(replace(options, count=40, seed=8), MOCK_WINDOW, "redis", sending.partitions)
    assert wave.partitions == sending.partitions and set(wave.placement.values()) <= set(range(sending.partitions))
    assert plan(options, None, "redis").placement == {}  # a real broker: the key decides


def test_spread_adds_partitions_until_each_fits() -> None:
    count, placement, kept = spread([3_000_000] * 5, budget=4_000_000)
    assert kept and count == 5 and sorted(placement) == [0, 1, 2, 3, 4]
    count, placement, kept = spread([1_000] * 10, budget=4_000_000)
    assert kept and count == PARTITIONS


def test_a_demo_too_large_for_the_embedded_cluster_is_said_to_be_so_quickly() -> None:
    """100 000 messages would need some 1 200 partitions: found out quickly, not claimed to be kept, and
    then placed as on a real broker (the Spark stage, which needs them all, is skipped)."""
    started = time.monotonic()
    sending = plan(DemoOptions(count=100_000), MOCK_WINDOW, "redis")
    assert time.monotonic() - started < 10
    assert not sending.kept and sending.partitions == PARTITIONS and sending.placement == {}
    assert spread([5_000_000] * 100, budget=4_000_000)[0] == MOCK_MAX_PARTITIONS
    assert plan(DemoOptions(count=1_000), MOCK_WINDOW, "redis").kept
