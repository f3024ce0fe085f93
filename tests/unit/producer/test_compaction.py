"""The compaction decisions without a broker: what counts as compacted, caching, the reference route."""

from __future__ import annotations

import logging
import threading

import pytest

from gateway.policy import Route, SizeThresholdPolicy, TopicOverride
from gateway.producer._compaction import (
    RETRY_UNKNOWN_S,
    CleanupAllowance,
    CleanupPolicies,
    CompactedTopicError,
    CompactionGuard,
    is_compacting,
    keeps_forever,
    reference_route,
)
from tests.unit.fake_clock import ManualClock


@pytest.mark.parametrize(
    ("policy", "compacting"),
    [("compact", True), ("delete,compact", True), (" Compact , delete", True), ("delete", False), ("", False)],
)
def test_what_counts_as_compacting(policy: str, compacting: bool) -> None:
    assert is_compacting(policy) is compacting
    assert keeps_forever(policy) is (compacting and "delete" not in policy)


def test_answers_are_cached_for_the_refresh_interval() -> None:
    clock = ManualClock()
    asked: list[str] = []
    answers = {"t": "compact"}

    def describe(topic: str) -> str:
        asked.append(topic)
        return answers[topic]

    policies = CleanupPolicies(describe, clock.clock(), refresh_s=60)
    assert policies.compacted("t") and policies.compacted("t")
    assert asked == ["t"]
    answers["t"] = "delete"
    clock.advance(59)
    assert policies.compacted("t")
    clock.advance(2)
    assert not policies.compacted("t")
    assert asked == ["t", "t"]


def test_a_broker_that_cannot_say_means_not_compacted_asked_again_soon_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    calls = []

    def describe(topic: str) -> str:
        calls.append(topic)
        raise PermissionError("DescribeConfigs denied")

    policies = CleanupPolicies(describe, clock.clock(), refresh_s=300)
    with caplog.at_level(logging.INFO, logger="gateway.producer._compaction"):
        assert not policies.compacted("t")
        clock.advance(RETRY_UNKNOWN_S - 1)
        assert not policies.compacted("t")
        clock.advance(2)
        assert not policies.compacted("t")
    assert len(calls) == 2
    warnings = [r for r in caplog.records if "treated as not compacted" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


def test_the_reference_route_is_the_policys_store_for_the_topic_or_the_only_store() -> None:
    stores = {"redis": object(), "s3": object()}
    policy = SizeThresholdPolicy(store="redis", overrides={"docs": TopicOverride(store="s3")})
    assert reference_route(policy, stores, "t", 10, "compact") == Route.reference("redis")
    assert reference_route(policy, stores, "docs", 10, "compact") == Route.reference("s3")
    assert reference_route(SizeThresholdPolicy(), {"only": object()}, "t", 10, "compact") == Route.reference("only")
    with pytest.raises(CompactedTopicError, match="give the producer a store"):
        reference_route(SizeThresholdPolicy(), stores, "t", 10, "compact")
    with pytest.raises(CompactedTopicError):
        reference_route(SizeThresholdPolicy(store="gone"), stores, "t", 10, "compact")


def test_prepare_asks_once_ahead_and_the_messages_after_it_ask_nothing() -> None:
    asked: list[str] = []

    def describe(topic: str) -> str:
        asked.append(topic)
        return {"c": "compact", "d": "delete"}[topic]

    stores = {"redis": object()}
    guard = CompactionGuard(CleanupPolicies(describe, ManualClock().clock(), 60), SizeThresholdPolicy(), stores, 100)
    assert (guard.prepare("c"), guard.prepare("d")) == ("compact", "delete")
    assert asked == ["c", "d"]
    assert guard.cleanup_allowance("c", 1_000, Route.reference("redis")).persistent
    assert guard.refuses_chunks("c", 1_000, 100) and not guard.refuses_chunks("d", 1_000, 100)
    assert guard.compacted("c") and not guard.compacted("d")
    assert asked == ["c", "d"], "answered from what prepare learned"
    assert CompactionGuard(None, SizeThresholdPolicy(), stores, 100).prepare("c") is None  # the check is off


def test_several_segments_are_counted_with_what_the_key_and_headers_leave_of_a_segment() -> None:
    """Issue 39.5: 90 bytes with a configured segment of 100 were "one segment" even where a large key left 50."""
    stores = {"redis": object()}
    guard = CompactionGuard(
        CleanupPolicies(lambda topic: "compact", ManualClock().clock(), 60), SizeThresholdPolicy(), stores, 100
    )
    assert not guard.refuses_chunks("c", 90, 100), "one segment: may fall back to chunks"
    assert guard.refuses_chunks("c", 90, 50), "two: compaction would lose one"
    with pytest.raises(CompactedTopicError):
        guard.cleanup_allowance("c", 90, Route.chunked(), segment_size=50)


def test_a_reference_to_a_store_that_expires_by_prefix_asks_nothing_until_it_falls_back() -> None:
    """Issue 42.3: an object store writes the same bytes on any topic, so its reference does not wait for
    ``cleanup.policy``; the fallback to chunks, where the answer matters, asks then."""
    asked: list[str] = []

    def describe(topic: str) -> str:
        asked.append(topic)
        return "compact"

    guard = CompactionGuard(CleanupPolicies(describe, ManualClock().clock(), 60), SizeThresholdPolicy(), {}, 100)
    allowed = guard.cleanup_allowance("c", 1_000, Route.reference("s3"), expires_per_payload=False)
    assert allowed == CleanupAllowance() and asked == []
    assert guard.refuses_chunks("c", 1_000, 100) and asked == ["c"], "the fallback asks, and is refused"
    redis = Route.reference("redis")
    assert guard.cleanup_allowance("c", 1_000, redis).persistent, "a store with a TTL per payload asks"
    assert asked == ["c"], "answered from the cache"


def test_the_topic_is_announced_before_it_is_described_and_only_when_it_is() -> None:
    """Issue 42.3: ``ahead`` starts the leader query before the lookup, so a first message waits for one, not both."""
    events: list[str] = []

    def describe(topic: str) -> str:
        events.append(f"describe {topic}")
        return "delete"

    clock = ManualClock()
    policies = CleanupPolicies(describe, clock.clock(), 60, ahead=lambda topic: events.append(f"ahead {topic}"))
    assert not policies.compacted("t") and not policies.compacted("t")
    assert events == ["ahead t", "describe t"]
    clock.advance(61)
    policies.compacted("t")
    assert events[2:] == ["ahead t", "describe t"], "a refresh announces again (the warmup ignores a topic it knows)"


def test_a_started_lookup_runs_on_a_worker_thread_and_the_policy_waits_for_it_rather_than_asking_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    threads: list[str] = []
    ahead: list[str] = []
    answers = {"c": "compact"}

    def describe(topic: str) -> str:
        threads.append(threading.current_thread().name)
        if topic not in answers:
            raise PermissionError("DescribeConfigs denied")
        return answers[topic]

    policies = CleanupPolicies(describe, ManualClock().clock(), 60, ahead=ahead.append)
    for topic in ("c", "c", "x"):
        policies.start(topic)
    with caplog.at_level(logging.INFO, logger="gateway.producer._compaction"):
        assert policies.compacted("c") and policies.compacted("c")
        assert not policies.compacted("x") and not policies.compacted("x")
    policies.start("c")  # known: nothing asked
    policies.close()
    assert len(threads) == 2 and threading.current_thread().name not in threads
    assert ahead == ["c", "x"]
    assert len([r for r in caplog.records if "treated as not compacted" in r.getMessage()]) == 1
    policies.start("y")  # closed: nothing started
    assert len(threads) == 2


def test_closing_never_waits_for_a_lookup_the_brokers_do_not_answer() -> None:
    asked, answer = threading.Event(), threading.Event()
    closed: list[bool] = []

    class Describer:
        def __call__(self, topic: str) -> str:
            asked.set()
            answer.wait(10)
            closed.append(False)  # the lookup's end, after the close only if the close did not wait
            return "delete"

        def close(self) -> None:
            closed.append(True)

    policies = CleanupPolicies(Describer(), ManualClock().clock(), 60)
    policies.start("t")
    policies.start("u")  # queued behind "t": dropped by the close
    assert asked.wait(5)
    policies.close()  # returns while "t" is still unanswered
    assert closed == [True] and not answer.is_set()
    answer.set()
