"""TopicWarmup: librdkafka asked for a topic's metadata once, off the caller's thread, and never in the way."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from gateway.errors import StoreUnavailableError
from gateway.producer.reference.topic_warmup import TopicWarmup


class Lookups:
    def __init__(self, fail: bool = False, expected: int = 1) -> None:
        self.topics: list[tuple[str, float]] = []
        self.expected = expected
        self.all_asked = threading.Event()
        self.threads: set[str] = set()
        self.fail = fail

    def __call__(self, topic: str, timeout: float) -> object:
        self.topics.append((topic, timeout))
        self.threads.add(threading.current_thread().name)
        if len(self.topics) == self.expected:
            self.all_asked.set()
        if self.fail:
            raise RuntimeError("no broker")
        return None


def test_each_topic_is_asked_for_once_on_a_worker_thread() -> None:
    lookups = Lookups(expected=2)
    warmup = TopicWarmup(lookups, timeout_s=2.0)
    for topic in ("a", "b", "a", "a", "b"):
        warmup.touch(topic)
    assert lookups.all_asked.wait(30)
    warmup.close()
    assert lookups.topics == [("a", 2.0), ("b", 2.0)]
    assert lookups.threads and threading.current_thread().name not in lookups.threads


def test_a_failed_lookup_is_only_a_missed_head_start_and_a_closed_warmup_asks_nothing() -> None:
    lookups = Lookups(fail=True)
    warmup = TopicWarmup(lookups)
    warmup.touch("a")
    assert lookups.all_asked.wait(30)
    warmup.close()
    warmup.touch("b")
    warmup.close()
    assert [topic for topic, _ in lookups.topics] == ["a"]


def test_close_waits_for_the_lookup_under_way_and_drops_those_not_started() -> None:
    """librdkafka's handle is closed right after: no lookup may still run on it then."""
    started, release = threading.Event(), threading.Event()
    asked: list[str] = []

    def slow(topic: str, timeout: float) -> object:
        asked.append(topic)
        started.set()
        release.wait(30)
        return None

    warmup = TopicWarmup(slow)
    warmup.touch("a")
    warmup.touch("b")
    assert started.wait(30)
    closer = threading.Thread(target=warmup.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive(), "close waits for the lookup under way"
    release.set()
    closer.join(30)
    assert not closer.is_alive() and asked == ["a"]


def test_ids_are_journalled_ahead_on_the_worker_in_every_store_and_a_failing_store_only_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    opened: list[tuple[str, str]] = []
    threads: set[str] = set()

    def store(name: str, fail: bool = False) -> Callable[[str], object]:
        def open_batch(topic: str) -> None:
            threads.add(threading.current_thread().name)
            opened.append((name, topic))
            if fail:
                raise StoreUnavailableError(f"{name} is down")

        return open_batch

    warmup = TopicWarmup(Lookups(), [store("s3", fail=True), store("gcs")])
    with caplog.at_level(logging.WARNING):
        pending = [warmup.journal_ahead("a"), warmup.journal_ahead("a")]
        TopicWarmup.wait(pending, 30)
    warmup.close()
    assert opened == [("s3", "a"), ("gcs", "a")] * 2, "asked each time: a store skips what it has"
    assert threading.current_thread().name not in threads
    assert "s3 is down" in caplog.text
    assert all(future is not None and future.exception() is None for future in pending)
    assert warmup.journal_ahead("b") is None, "a closed warmup starts nothing"


def test_without_journals_nothing_is_started() -> None:
    warmup = TopicWarmup(Lookups())
    assert warmup.journal_ahead("a") is None
    TopicWarmup.wait([None], 1)
    warmup.close()


def test_a_store_that_hangs_is_waited_for_no_longer_than_the_callers_timeout() -> None:
    """prepare_topics' bound: what is still writing its marker after the timeout goes on alone."""
    release = threading.Event()
    warmup = TopicWarmup(Lookups(), [lambda topic: release.wait(30)])
    pending = warmup.journal_ahead("a")
    TopicWarmup.wait([pending], 0.05)
    assert pending is not None and not pending.done(), "returned while the store still hung"
    release.set()
    warmup.close()
    assert pending.done()
