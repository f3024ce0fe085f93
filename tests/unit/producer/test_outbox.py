"""The outbox: every call to librdkafka settles the write window first, and tells the reference writer after."""

from __future__ import annotations

from functools import partial
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
from gateway.protocol.metadata import CommitEncoding
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


def records(kafka: Kafka) -> list[str]:
    """The records librdkafka took, in order (the polls of a queue-full wait left out)."""
    return [call for call in kafka.calls if call != "poll"]


def outbox(window: int = 4) -> tuple[Outbox, Kafka, ReferenceWriter]:
    store = PipeliningMemoryStore()
    kafka = Kafka()
    box = Outbox(
        {},
        WriteWindow(window, {"mem": store}, 600.0),
        SYSTEM_CLOCK,
        1.0,
        CommitEncoding.NUL_TERMINATED,
        lambda conf, encoding: kafka,
    )  # type: ignore[arg-type,return-value]
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


def test_an_idle_outbox_sends_a_plain_record_to_librdkafka_at_once() -> None:
    box, kafka, _ = outbox(window=1)
    box.produce("t", b"plain")
    assert kafka.calls == ["produce b'plain'"] and box.window.idle()


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
    """A ``produce`` called back during the first envelope's queue-full wait goes after every earlier write.

    Before the queue owned the turn, the nested call settled the second write (and sent its own
    record) while the first envelope still waited for room: ``[envelope(second), nested, envelope(first)]``.
    """
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
    assert records(kafka) == ["envelope", "envelope", "produce b'from a callback'"], "produce order, each write once"
    assert writer.in_flight == 0 and box.window.idle()


def _chunks_then(box: Outbox, kafka: Kafka, nested: Any) -> None:
    """Three segments of one message through ``send_message``; the second finds the queue full once,
    and a report served meanwhile runs ``nested``."""
    full: list[bool] = []

    def full_once() -> None:
        if len(records(kafka)) == 1 and not full:
            full.append(True)
            nested()
            raise BufferError("Local: Queue full")

    def segments(message: OutgoingMessage) -> None:
        for i in range(3):
            box.send(message.topic, {"value": b"segment %d" % i})

    kafka.before_produce = full_once
    box.send_message(segments, OutgoingMessage.of("t", b"chunked"))


@pytest.mark.parametrize("window", [1, 4])
def test_a_plain_record_produced_from_a_callback_during_a_chunked_send_goes_after_all_its_segments(window: int) -> None:
    box, kafka, _ = outbox(window=window)
    _chunks_then(box, kafka, lambda: box.produce("t", b"nested"))
    assert records(kafka) == [
        "produce b'segment 0'",
        "produce b'segment 1'",
        "produce b'segment 2'",
        "produce b'nested'",
    ]


def test_a_reference_message_produced_from_a_callback_during_a_chunked_send_goes_after_it() -> None:
    box, kafka, writer = outbox(window=1)  # a window of one: the write and its envelope go in produce
    send = partial(writer.send, ROUTE, False)
    _chunks_then(box, kafka, lambda: box.join(send, OutgoingMessage.of("t", b"nested reference")))
    assert records(kafka) == ["produce b'segment 0'", "produce b'segment 1'", "produce b'segment 2'", "envelope"]


def test_a_deferred_record_that_fails_is_reported_to_its_callback_by_the_next_poll() -> None:
    box, kafka, _ = outbox(window=1)
    reports: list[Any] = []

    def refuse_the_nested() -> None:
        box.produce("t", b"nested", on_delivery=lambda err, msg: reports.append(err))
        kafka.before_produce = refuse_after_the_segments

    def refuse_after_the_segments() -> None:
        if len(records(kafka)) == 3:
            raise ValueError("refused")

    _chunks_then(box, kafka, refuse_the_nested)
    assert reports == []
    box.poll(0)
    [err] = reports
    assert isinstance(err.cause, ValueError)


def test_the_queues_doors_are_called_by_the_outbox_alone_and_each_route_once() -> None:
    """Guard: the order rule has one owner. Only the outbox (and the reference writer, once, for what does not
    join the queue) calls the queue's doors; no other module of the producer reaches librdkafka's ``produce``
    or the queue, so a new produce path cannot bypass the order by forgetting a wrap."""
    import ast
    from pathlib import Path

    import gateway.producer

    root = Path(gateway.producer.__file__).parent
    doors = {"in_turn", "send_in_turn", "join", "drain", "add"}
    calls: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                owner = node.value.attr
                if (owner == "window" and node.attr in doors) or (owner == "_kafka" and node.attr == "produce"):
                    calls.setdefault(str(path.relative_to(root)), []).append(f"{owner}.{node.attr}")
    assert set(calls) <= {"_outbox.py", "reference/writer.py"}, calls
    writer = sorted(calls["reference/writer.py"])
    assert writer.count("window.send_in_turn") == 1, "the writer's one door for what does not join the queue"
    assert "window.in_turn" not in writer, "the writer wraps no call site of its own"


def _outbox_methods_reaching_librdkafka() -> dict[str, set[str]]:
    """For each method of :class:`Outbox`, the ways it reaches librdkafka's producer (``self._client.<door>``)."""
    import ast
    import inspect
    import textwrap

    import gateway.producer._outbox as module

    tree = ast.parse(textwrap.dedent(inspect.getsource(module.Outbox)))
    reached: dict[str, set[str]] = {}
    for method in ast.walk(tree):
        if isinstance(method, ast.FunctionDef):
            for node in ast.walk(method):
                inner = node.value if isinstance(node, ast.Attribute) else None
                if isinstance(inner, ast.Attribute) and inner.attr == "_client" and isinstance(inner.value, ast.Name):
                    reached.setdefault(method.name, set()).add(node.attr)  # type: ignore[union-attr]
    return reached


def test_the_outbox_reaches_librdkafka_only_through_its_door_each_call_in_turn() -> None:
    """Guard: "drain first" has one owner, the door (:class:`Librdkafka`). An outbox method reaches the raw
    producer only by ``in_turn`` (after every write in flight); the record path (``produce``, ``serve``) only
    where the turn is the caller's or the queue is idle; ``ask`` only for the questions that send no record.
    A new method that called the producer another way, or asked where it should wait its turn, fails here."""
    import ast
    import inspect
    import textwrap

    import gateway.producer._outbox as module

    record_path = {"produce": {"produce"}, "_produce_now": {"produce"}, "__init__": {"produce", "serve"}}
    questions = {"__len__", "cluster_id", "set_sasl_credentials", "list_topics"}
    for method, doors in _outbox_methods_reaching_librdkafka().items():
        if method in record_path:
            assert doors == record_path[method], (method, doors)
        elif method in questions:
            assert doors == {"ask"}, (method, doors)
        elif method == "librdkafka":
            assert doors == {"outside_the_order"}, "HybridProducer.inner's escape, and nothing else's"
        else:
            assert doors == {"in_turn"}, f"Outbox.{method} reaches librdkafka by {doors}, not in its turn"
    # the raw producer is held by the door alone: no other name of the module holds or calls it
    source = textwrap.dedent(inspect.getsource(module))
    holders = {
        cls.name
        for cls in ast.walk(ast.parse(source))
        if isinstance(cls, ast.ClassDef)
        for node in ast.walk(cls)
        if isinstance(node, ast.Attribute) and node.attr == "_producer"
    }
    assert holders == {"Librdkafka"}, holders
    assert not any(isinstance(value, Kafka) for value in vars(outbox()[0]).values()), "only the door holds it"


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("poll", lambda box: box.poll(0)),
        ("flush", lambda box: box.flush(0)),
        ("purge", lambda box: box.purge()),
        ("init_transactions", lambda box: box.init_transactions()),
        ("begin_transaction", lambda box: box.begin_transaction()),
        ("send_offsets_to_transaction", lambda box: box.send_offsets_to_transaction([], object())),
        ("commit_transaction", lambda box: box.commit_transaction()),
        ("abort_transaction", lambda box: box.abort_transaction()),
        ("close", lambda box: box.close([])),
    ],
)
def test_each_call_of_the_outbox_that_sends_no_record_reaches_librdkafka_after_the_writes_in_flight(
    name: str, call: Any
) -> None:
    """At run time, for every method the guard above finds reaching librdkafka in turn (none left out)."""
    in_turn = {method for method, doors in _outbox_methods_reaching_librdkafka().items() if doors == {"in_turn"}}
    assert name in in_turn and in_turn <= {
        "poll",
        "flush",
        "purge",
        "init_transactions",
        "begin_transaction",
        "send_offsets_to_transaction",
        "commit_transaction",
        "abort_transaction",
        "close",
    }, in_turn
    box, kafka, writer = outbox()
    writer.send(ROUTE, False, OutgoingMessage.of("t", b"by reference"))
    call(box)
    assert kafka.calls[:2] == ["envelope", name], kafka.calls


def test_the_producers_surface_reaches_librdkafka_only_through_the_outbox() -> None:
    """Issue 40 point 2: no module of the producer but the outbox holds the raw client or its door, and
    ``HybridProducer.inner`` is the one escape from the outbox's order (named so)."""
    import ast
    from pathlib import Path

    import gateway.producer

    root = Path(gateway.producer.__file__).parent
    reaches: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in {"_client", "librdkafka", "outside_the_order"}:
                reaches.setdefault(str(path.relative_to(root)), []).append(node.attr)
            if isinstance(node, ast.Name) and node.id in {"Librdkafka", "ExactProducer"}:
                reaches.setdefault(str(path.relative_to(root)), []).append(node.id)
    outside = {path: names for path, names in reaches.items() if path != "_outbox.py"}
    assert outside == {"_confluent_methods.py": ["librdkafka"]}, outside
