"""The reference route with a write window: writes in flight, envelopes in order, late failures reported."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

from gateway.core.outgoing import OutgoingMessage
from gateway.errors import StoreError, StoreUnavailableError
from gateway.health import StoreHealth
from gateway.policy import Route
from gateway.producer._metrics import ProducerMetrics
from gateway.producer.reference.window import WriteWindow
from gateway.producer.reference.writer import ReferenceWriter
from gateway.protocol.envelope import decode_envelope
from gateway.testing.memory_store import MemoryStore, PipeliningMemoryStore
from tests.unit.fake_clock import ManualClock
from tests.unit.producer.reference.test_writer import Sent

ROUTE = Route.reference("mem")
LONG_LINGER_S = 600.0
"""What the tests that count writes in flight give the window: its own thread never settles them first."""


def windowed(
    store: MemoryStore, window: int = 3, *, cap: int = 1_000
) -> tuple[ReferenceWriter, Sent, list[OutgoingMessage]]:
    sent, chunked = Sent(), []
    w = ReferenceWriter(
        {store.name: store},
        {store.name: StoreHealth(2, 30_000, 5_000)},
        sent,
        fallback_cap=cap,
        metrics=ProducerMetrics(),
        clock=ManualClock(wall=1_000.0).clock(),
        window=WriteWindow(window, {store.name: store}, linger_s=LONG_LINGER_S),
        send_chunked=chunked.append,
    )
    return w, sent, chunked


def message(value: bytes, **kwargs: Any) -> OutgoingMessage:
    return OutgoingMessage.of("topic", value, **kwargs)


def test_an_envelope_waits_for_its_write_and_the_window_keeps_at_most_window_minus_one() -> None:
    store = PipeliningMemoryStore()
    w, sent, _ = windowed(store, window=3)
    for i in range(2):
        assert w.send(ROUTE, False, message(b"v%d" % i)) == ROUTE
    assert sent.records == [] and w.in_flight == 2 and store.payloads == {}
    w.send(ROUTE, False, message(b"v2"))  # the window is full: the oldest is confirmed
    assert len(sent.records) == 1 and w.in_flight == 2
    w.drain()
    assert w.in_flight == 0 and len(sent.records) == 3
    locators = [decode_envelope(kwargs["value"]).locator for _, kwargs in sent.records]
    assert [store.payloads[loc] for loc in locators] == [b"v0", b"v1", b"v2"], "envelopes in produce order"
    assert store.calls == ["submit", "submit", "submit", "confirm", "confirm", "confirm"]
    assert w.metrics.snapshot()["reference.messages"] == 3


def test_a_window_of_one_writes_before_returning_without_a_pipeline() -> None:
    store = PipeliningMemoryStore()
    w, sent, _ = windowed(store, window=1)
    w.send(ROUTE, False, message(b"v"))
    assert store.calls == ["put"] and len(sent.records) == 1 and w.in_flight == 0


def test_a_store_that_cannot_pipeline_goes_after_the_writes_in_flight() -> None:
    """A write that does not join the queue waits its turn (``WriteWindow.send_in_turn``): its envelope goes after."""
    piped, plain = PipeliningMemoryStore("piped"), MemoryStore("plain")
    sent = Sent()
    w = ReferenceWriter(
        {"piped": piped, "plain": plain},
        {name: StoreHealth(2, 30_000, 5_000) for name in ("piped", "plain")},
        sent,
        fallback_cap=1_000,
        window=WriteWindow(4, {"piped": piped, "plain": plain}, linger_s=LONG_LINGER_S),
    )
    w.send(Route.reference("piped"), False, message(b"first"))
    assert sent.records == []
    w.send(Route.reference("plain"), False, message(b"second"))
    stores = [decode_envelope(kwargs["value"]).store for _, kwargs in sent.records]
    assert stores == ["piped", "plain"], "the earlier write's envelope went first"


def test_an_unavailable_store_found_on_confirm_falls_back_to_chunked_in_turn() -> None:
    store = PipeliningMemoryStore()
    w, sent, chunked = windowed(store, window=4)
    w.send(ROUTE, False, message(b"first"))
    w.send(ROUTE, False, message(b"second"))
    store.pipeline.fail_confirm = StoreUnavailableError("Redis is unreachable")
    w.drain()
    assert [m.value for m in chunked] == [b"first"]
    assert len(sent.records) == 1 and decode_envelope(sent.records[0][1]["value"]).size == len(b"second")
    m = w.metrics.snapshot()
    assert m["store.put.failures"] == 1 and m["fallbacks"] == 1


@pytest.mark.parametrize(
    ("error", "forced", "size"),
    [
        (StoreUnavailableError("Redis is unreachable"), True, 10),
        (StoreUnavailableError("Redis is unreachable"), False, 5_000),
        (StoreError("Redis error: WRONGTYPE"), False, 10),
    ],
    ids=["forced", "over-the-fallback-cap", "not-an-outage"],
)
def test_a_failure_that_cannot_fall_back_is_reported_to_on_delivery(
    error: StoreError, forced: bool, size: int, caplog: pytest.LogCaptureFixture
) -> None:
    store = PipeliningMemoryStore()
    w, sent, chunked = windowed(store, window=4)
    reports: list[tuple[Any, Any]] = []
    w.send(ROUTE, forced, message(b"x" * size, on_delivery=lambda err, msg: reports.append((err, msg))))
    w.send(ROUTE, False, message(b"after"))
    store.pipeline.fail_confirm = error
    with caplog.at_level(logging.ERROR, logger="gateway.producer.reference.writer"):
        w.drain()
    assert reports == [] and w.in_flight == 1, "reported by poll() or flush(), as librdkafka reports its own"
    assert w.window.report_failures() == 1
    [(err, msg)] = reports
    assert isinstance(err, KafkaError) and isinstance(err.cause, StoreError)
    assert msg.topic() == "topic" and msg.value() == b"x" * size and msg.error() is err, "the caller's message"
    assert err.retriable() is isinstance(error, StoreUnavailableError), "an outage may pass; a refusal will not"
    assert "failed after produce() returned" in caplog.text
    assert chunked == [] and len(sent.records) == 1, "the next message still went"
    assert w.in_flight == 0


def test_an_envelope_that_cannot_be_queued_rolls_back_and_is_reported() -> None:
    store = PipeliningMemoryStore()
    w, sent, _ = windowed(store, window=4)
    reports: list[Any] = []
    w.send(ROUTE, False, message(b"payload", on_delivery=lambda err, msg: reports.append(err)))
    sent.error = BufferError("Local: Queue full")
    w.drain()
    w.window.report_failures()
    assert len(reports) == 1 and isinstance(reports[0], KafkaError) and isinstance(reports[0].cause, BufferError)
    assert reports[0].code() == KafkaError._QUEUE_FULL and reports[0].retriable()
    assert store.payloads == {} and store.calls[-1] == "delete", "the payload was rolled back"
    assert w.metrics.snapshot()["rollbacks"] == 1


def test_close_drains_and_closes_the_pipeline() -> None:
    store = PipeliningMemoryStore()
    w, sent, _ = windowed(store, window=4)
    w.send(ROUTE, False, message(b"v"))
    w.window.close()  # the outbox's, once
    w.close()
    assert len(sent.records) == 1 and store.pipeline.closed


def test_a_write_nobody_settles_is_settled_after_the_linger() -> None:
    """A producer the application stops calling still queues its envelopes (``reference.write.linger.ms``)."""
    store = PipeliningMemoryStore()
    sent = Sent()
    window = WriteWindow(8, {store.name: store}, linger_s=0.02)
    w = ReferenceWriter(
        {store.name: store}, {store.name: StoreHealth(2, 30_000, 5_000)}, sent, fallback_cap=0, window=window
    )
    w.send(ROUTE, False, message(b"v"))
    assert sent.records == [] and w.in_flight == 1
    deadline = time.monotonic() + 5
    while w.in_flight and time.monotonic() < deadline:
        time.sleep(0.005)
    assert w.in_flight == 0 and len(sent.records) == 1
    w.window.close()  # the outbox's, once
    w.close()


def test_a_write_leaves_the_window_only_once_its_envelope_is_queued() -> None:
    """What another thread sees while a write settles: still in flight, so it waits for the lock."""
    store = PipeliningMemoryStore()
    seen: list[int] = []
    w: ReferenceWriter

    def send(topic: str, kwargs: dict[str, Any]) -> None:
        seen.append(len(w.window))  # the write being resolved still counts as in flight

    window = WriteWindow(4, {store.name: store}, linger_s=LONG_LINGER_S)
    w = ReferenceWriter(
        {store.name: store}, {store.name: StoreHealth(2, 30_000, 5_000)}, send, fallback_cap=0, window=window
    )
    w.send(ROUTE, False, message(b"a"))
    w.send(ROUTE, False, message(b"b"))
    w.drain()
    assert seen == [2, 1]
    w.window.close()  # the outbox's, once
    w.close()


def test_the_linger_thread_ends_when_idle_and_starts_again_with_the_next_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A producer dropped without close() is not kept alive by a thread waiting for writes forever."""
    monkeypatch.setattr("gateway.producer.reference.window.IDLE_THREAD_S", 0.05)
    store = PipeliningMemoryStore()
    sent = Sent()
    window = WriteWindow(8, {store.name: store}, linger_s=0.01)
    health = {store.name: StoreHealth(2, 30_000, 5_000)}
    w = ReferenceWriter({store.name: store}, health, sent, fallback_cap=0, window=window)
    for round_ in range(2):
        w.send(ROUTE, False, message(b"v%d" % round_))
        deadline = time.monotonic() + 5
        while window._thread is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert window._thread is None, "the thread ended once idle"
        assert len(sent.records) == round_ + 1, "after settling the write"
    w.window.close()  # the outbox's, once
    w.close()


def test_a_probe_in_the_window_is_answered_before_the_next_message_falls_back() -> None:
    """With a window the probe of an unhealthy store is not answered in ``produce``: its reply decides the next."""
    store = PipeliningMemoryStore()
    w, sent, chunked = windowed(store, window=4)
    health = w.health["mem"]
    health.failure(0)
    health.failure(1)  # two failures: unhealthy, and the probe interval has long passed
    assert not health.healthy
    w.send(ROUTE, False, message(b"probe"))  # the probe, in flight
    w.send(ROUTE, False, message(b"next"))
    assert chunked == [], "the next message waited for the probe's answer instead of falling back"
    assert health.healthy and len(sent.records) == 1 and w.in_flight == 1


@pytest.mark.parametrize(("large", "order"), [(True, ["digest", "submit"]), (False, ["submit", "digest"])])
def test_a_large_payload_is_hashed_while_its_write_is_sent_and_a_small_one_after(large: bool, order: list[str]) -> None:
    """Issue 42.3: a 10 MB write blocks in ``sendall`` until the server has read most of it, and its digest
    was begun only then, so a lone message or a burst's last paid write plus hash; a worker now hashes it
    during the send. A small payload, hashed in line, still follows its send (the socket takes it at once)."""
    from gateway.producer.reference.digests import OVERLAP_FROM_BYTES

    store = PipeliningMemoryStore()
    w, sent, _ = windowed(store, window=4)
    begin = w._digests.begin

    def traced(payload: Any, on: Any) -> Any:
        store.calls.append("digest")
        return begin(payload, on)

    w._digests.begin = traced  # type: ignore[method-assign]
    value = bytes(range(256)) * ((OVERLAP_FROM_BYTES if large else 1024) // 256)
    w.send(ROUTE, False, message(value))
    w.drain()
    assert [c for c in store.calls if c in ("digest", "submit")] == order
    envelope = decode_envelope(sent.records[0][1]["value"])
    envelope.verify(value)
    w.close()
