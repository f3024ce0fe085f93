"""The store-down fallback keeps what the user configured: encrypted payloads never go inline in clear.

An in-memory store that fails, a ``send`` that records, a clock moved by hand; the same writer the
producer drives. What the broker sees is in tests/integration/test_fallback_guarantees.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError

from gateway.core.outgoing import OutgoingMessage
from gateway.encryption import LocalKeyRing, ReferenceEncryption
from gateway.errors import FallbackRefusedError, StoreUnavailableError
from gateway.health import StoreHealth
from gateway.policy import CHUNKED, Route
from gateway.producer._metrics import ProducerMetrics
from gateway.producer.reference._fallback import ENCRYPTED, FORCED, OVERSIZE, refusal
from gateway.producer.reference.window import WriteWindow
from gateway.producer.reference.writer import ReferenceWriter
from gateway.testing.memory_store import MemoryStore, PipeliningMemoryStore
from tests.unit.fake_clock import ManualClock
from tests.unit.producer.reference.test_writer import Sent

ROUTE = Route.reference("mem")
RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")
LOGGER = "gateway.producer.reference.writer"
VALUE = b"secret payload " * 40  # 600 bytes, under the cap


def writer(
    store: MemoryStore,
    *,
    encrypted: bool,
    clock: ManualClock | None = None,
    window: int = 1,
    interval_s: float = 10.0,
) -> tuple[ReferenceWriter, Sent]:
    sent = Sent()
    w = ReferenceWriter(
        {store.name: store},
        {store.name: StoreHealth(1, 30_000, 5_000)},
        sent,
        fallback_cap=1_000,
        metrics=ProducerMetrics(),
        clock=(clock or ManualClock()).clock(),
        window=WriteWindow(window, {store.name: store}, linger_s=600.0),
        send_chunked=sent.chunked.append,
        encryption=ReferenceEncryption(RING, enabled=encrypted) if encrypted else None,
        warning_interval_s=interval_s,
    )
    return w, sent


def message(value: bytes = VALUE, **kwargs: Any) -> OutgoingMessage:
    return OutgoingMessage.of("orders", value, **kwargs)


def test_the_decision_names_the_guarantee_a_fallback_would_break() -> None:
    assert refusal(forced=False, encrypted=False, size=10, cap=10) is None
    assert refusal(forced=False, encrypted=False, size=11, cap=10) == OVERSIZE
    assert refusal(forced=False, encrypted=True, size=1, cap=10) == ENCRYPTED, "whatever the size"
    assert refusal(forced=True, encrypted=True, size=1, cap=10) == FORCED


@pytest.mark.parametrize("found", ["by-the-write", "by-health"])
def test_an_encrypted_payload_is_refused_not_sent_inline_in_clear(found: str, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(fail_put=StoreUnavailableError("Redis is unreachable"))
    w, sent = writer(store, encrypted=True)
    if found == "by-health":
        w.health["mem"].failure(0)  # threshold 1: marked unhealthy, the store is not even tried
        assert not w.health["mem"].healthy
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(FallbackRefusedError) as info:
        w.send(ROUTE, False, message())
    assert info.value.reason == ENCRYPTED and info.value.store == "mem"
    assert isinstance(info.value, StoreUnavailableError), "caught where the store being down is caught"
    assert "reference.encryption" in str(info.value) and "not sent in clear" in str(info.value)
    assert sent.chunked == [] and sent.records == [] and store.payloads == {}, "nothing of it went anywhere"
    m = w.metrics.snapshot()
    assert (m["fallbacks"], m["fallback.refused"], m["fallback.refused.encrypted"]) == (0, 1, 1)
    [line] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "'mem'" in line.getMessage() and "refused" in line.getMessage() and "orders" in line.getMessage()
    assert VALUE[:20].decode() not in caplog.text


def test_an_encrypted_payload_whose_write_fails_in_the_window_is_refused_to_on_delivery() -> None:
    store = PipeliningMemoryStore()
    w, sent = writer(store, encrypted=True, window=4)
    reports: list[tuple[Any, Any]] = []
    w.send(ROUTE, False, message(on_delivery=lambda err, msg: reports.append((err, msg))))
    store.pipeline.fail_confirm = StoreUnavailableError("Redis is unreachable")
    w.drain()
    assert w.window.report_failures() == 1
    [(err, msg)] = reports
    assert isinstance(err, KafkaError) and err.retriable()  # confluent-kafka's contract, whatever the route
    assert isinstance(err.cause, FallbackRefusedError) and err.cause.reason == ENCRYPTED and msg is not None
    assert sent.chunked == [] and sent.records == [] and store.payloads == {}
    assert w.metrics.snapshot()["fallback.refused.encrypted"] == 1


def test_without_encryption_the_fallback_is_taken_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(fail_put=StoreUnavailableError("Redis is unreachable"))
    w, sent = writer(store, encrypted=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert w.send(ROUTE, False, message()) == CHUNKED
    assert [m.value for m in sent.chunked] == [VALUE]
    m = w.metrics.snapshot()
    assert (m["fallbacks"], m["fallback.refused"], m["warnings.suppressed"]) == (1, 0, 0)
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line == "store 'mem' failed: Redis is unreachable: 600 bytes for orders sent inline (chunked) instead"


def test_the_warning_is_rate_limited_per_outcome_and_counts_what_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    store = MemoryStore(fail_put=StoreUnavailableError("down"))
    w, sent = writer(store, encrypted=False, clock=clock, interval_s=10.0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(5):
            w.send(ROUTE, False, message())
        with pytest.raises(FallbackRefusedError):  # another outcome: its own line at once
            w.send(ROUTE, False, message(b"x" * 2_000))
        clock.advance(9.9)
        w.send(ROUTE, False, message())
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2 and "sent inline" in lines[0] and "exceed" in lines[1]
        assert w.metrics.snapshot()["warnings.suppressed"] == 5
        clock.advance(0.1)
        w.send(ROUTE, False, message())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and lines[2].endswith("(and 5 more like it since the last such line)")
    m = w.metrics.snapshot()
    assert (m["fallbacks"], m["fallback.refused.oversize"], m["warnings.suppressed"]) == (7, 1, 5)
    assert len(sent.chunked) == 7
