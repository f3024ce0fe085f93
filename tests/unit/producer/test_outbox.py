"""The outbox: every call to librdkafka settles the write window first, and tells the reference writer after."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.clock import SYSTEM_CLOCK
from gateway.core.outgoing import OutgoingMessage
from gateway.health import StoreHealth
from gateway.policy import Route
from gateway.producer._outbox import Outbox
from gateway.producer.reference.window import WriteWindow
from gateway.producer.reference.writer import ReferenceWriter
from gateway.protocol.envelope import ENVELOPE_HEADER
from gateway.testing.memory_store import PipeliningMemoryStore

ROUTE = Route.reference("mem")


class Kafka:
    """Stands in for librdkafka's producer: keeps the order of every call, envelopes told apart."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail_close: Exception | None = None
        self.before_produce: Any = None
        """Called before each record is taken, as librdkafka's queue would; may raise ``BufferError``."""

    def produce(self, topic: str, value: Any = None, *args: Any, **kwargs: Any) -> None:
        if self.before_produce is not None:
            self.before_produce()
        headers = kwargs.get("headers") or []
        self.calls.append("envelope" if any(name == ENVELOPE_HEADER for name, _ in headers) else f"produce {value!r}")

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> int:
            self.calls.append(name)
            if name == "close" and self.fail_close is not None:
                raise self.fail_close
            return 0

        return call

    def __len__(self) -> int:
        return 0


def outbox(window: int = 4) -> tuple[Outbox, Kafka, ReferenceWriter]:
    store = PipeliningMemoryStore()
    kafka = Kafka()
    box = Outbox({}, WriteWindow(window, {"mem": store}, 600.0), SYSTEM_CLOCK, 1.0, lambda conf: kafka)  # type: ignore[arg-type,return-value]
    writer = ReferenceWriter(
        {"mem": store}, {"mem": StoreHealth(2, 30_000, 5_000)}, box.send, fallback_cap=1_000, window=box.window
    )
    box.listener = writer
    return box, kafka, writer


@pytest.mark.parametrize(
    "call",
    [
        lambda box: box.produce("t", b"plain"),
        lambda box: box.poll(0),
        lambda box: box.flush(0),
        lambda box: box.purge(),
        lambda box: box.begin_transaction(),
        lambda box: box.send_offsets_to_transaction([], object()),
        lambda box: box.commit_transaction(),
        lambda box: box.abort_transaction(),
    ],
    ids=["produce", "poll", "flush", "purge", "begin", "send_offsets", "commit", "abort"],
)
def test_every_call_to_librdkafka_comes_after_the_writes_in_flight(call: Any) -> None:
    box, kafka, writer = outbox()
    writer.send(ROUTE, False, OutgoingMessage.of("t", b"by reference"))
    assert kafka.calls == [] and writer.in_flight == 1
    call(box)
    assert kafka.calls[0] == "envelope" and len(kafka.calls) == 2 and writer.in_flight == 0


def test_a_window_of_one_sends_plain_records_with_librdkafkas_own_call() -> None:
    box, kafka, _ = outbox(window=1)
    assert box.produce == kafka.produce


def test_the_reference_writer_hears_of_reports_and_transactions() -> None:
    box, _, writer = outbox()
    box.begin_transaction()
    assert writer.transaction.open
    box.commit_transaction()
    assert not writer.transaction.open
    box.begin_transaction()
    writer.send(ROUTE, False, OutgoingMessage.of("t", b"aborted"))
    box.abort_transaction()
    store = writer.stores["mem"]
    assert isinstance(store, PipeliningMemoryStore) and store.payloads == {}, "the aborted write was undone"


def test_close_runs_every_step_then_closes_librdkafka_and_raises_the_first_error() -> None:
    box, kafka, writer = outbox()
    writer.send(ROUTE, False, OutgoingMessage.of("t", b"in flight"))
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise ValueError("first")

    kafka.fail_close = RuntimeError("second")
    with pytest.raises(ValueError, match="first"):
        box.close([failing, lambda: ran.append("after")])
    assert ran == ["failing", "after"]
    assert kafka.calls == ["envelope", "close"], "the window was settled before librdkafka closed"


def test_the_surface_asks_the_cluster_through_the_outbox_not_its_raw_client() -> None:
    """``cluster_id``, ``list_topics`` and ``set_sasl_credentials`` are the outbox's: nothing reaches through it."""
    box, kafka, _ = outbox()
    box.cluster_id(1.0)
    box.list_topics("t", 1.0)
    box.set_sasl_credentials("user", "secret")
    assert kafka.calls == ["cluster_id", "list_topics", "set_sasl_credentials"]
    assert not hasattr(box, "kafka"), "the raw client is the outbox's own"


def test_the_window_is_closed_once_by_the_outbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """One close: the reference writer's close no longer closes the window the outbox closes."""
    closes: list[WriteWindow] = []
    real = WriteWindow.close
    monkeypatch.setattr(WriteWindow, "close", lambda self: (closes.append(self), real(self))[1])
    box, _, writer = outbox()
    box.close([], [writer.close])
    assert closes == [box.window]


def test_a_write_settles_once_when_a_callback_produces_during_its_envelopes_queue_full_wait() -> None:
    """Re-entry without a flag: a drain inside a settle goes on with the next write; none is settled twice."""
    box, kafka, writer = outbox()
    writer.send(ROUTE, False, OutgoingMessage.of("t", b"first"))
    writer.send(ROUTE, False, OutgoingMessage.of("t", b"second"))
    nested: list[bool] = []

    def full_once() -> None:
        if not nested:  # the first envelope finds the queue full; a report served meanwhile produces again
            nested.append(True)
            box.produce("t", b"from a callback")
            raise BufferError("Local: Queue full")

    kafka.before_produce = full_once
    writer.drain()
    assert kafka.calls.count("envelope") == 2 and writer.in_flight == 0, "each write settled once"
    assert kafka.calls[-1] == "envelope" and "produce b'from a callback'" in kafka.calls
