"""The reference route without Kafka or a store server: an in-memory store and a ``send`` that records."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from typing import Any

import blake3
import pytest
from confluent_kafka import KafkaError, Message

from gateway.core.outgoing import OutgoingMessage
from gateway.errors import ConfigurationError, PayloadIntegrityError, StoreUnavailableError
from gateway.health import StoreHealth
from gateway.policy import CHUNKED, Route
from gateway.producer._metrics import ProducerMetrics
from gateway.producer.reference._envelope_delivery import CLEAR_MARKS_EVERY
from gateway.producer.reference.transactions import undo
from gateway.producer.reference.writer import ReferenceWriter
from gateway.protocol.envelope import CHECKSUM_BLAKE3, CHECKSUM_SHA256, ENVELOPE_HEADER, decode_envelope
from gateway.protocol.payload_encoding import decode_payload
from gateway.testing.memory_store import BatchingMemoryStore, MemoryStore
from tests.unit.fake_clock import ManualClock

ROUTE = Route.reference("mem")


class Sent:
    """Stands in for the producer's queue: keeps each record's kwargs, or raises ``error`` instead."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.error: BaseException | None = None
        self.chunked: list[OutgoingMessage] = []
        """Messages the writer sent chunked instead (its ``send_chunked``)."""

    def __call__(self, topic: str, kwargs: dict[str, Any]) -> None:
        if self.error is not None:
            raise self.error
        self.records.append((topic, kwargs))

    def report(self, i: int, err: Any, offset: int = 9) -> None:
        """Serve record ``i``'s delivery report as librdkafka would."""
        kwargs = self.records[i][1]
        msg = Message(
            topic=self.records[i][0],
            partition=0,
            offset=offset,
            key=kwargs.get("key"),
            value=kwargs["value"],
            headers=kwargs["headers"],
        )
        kwargs["on_delivery"](err, msg)


def writer(
    store: MemoryStore, clock: ManualClock | None = None, *, cap: int = 1_000, threshold: int = 2, probe_ms: int = 5_000
) -> tuple[ReferenceWriter, Sent]:
    sent = Sent()
    health = {store.name: StoreHealth(threshold, 30_000, probe_ms)}
    w = ReferenceWriter(
        {store.name: store},
        health,
        sent,
        fallback_cap=cap,
        metrics=ProducerMetrics(),
        clock=(clock or ManualClock()).clock(),
        send_chunked=sent.chunked.append,
    )
    return w, sent


def message(value: bytes | None = b"payload bytes", **kwargs: Any) -> OutgoingMessage:
    return OutgoingMessage.of("topic", value, **kwargs)


def test_writes_the_payload_pending_and_queues_an_envelope_that_points_at_it() -> None:
    store, clock = MemoryStore(), ManualClock(wall=1_000.0)
    w, sent = writer(store, clock)
    assert w.send(ROUTE, False, message(key=b"k", partition=3, timestamp=55, headers={"h": "v"})) == ROUTE
    [(topic, kwargs)] = sent.records
    assert topic == "topic" and kwargs["key"] == b"k" and kwargs["partition"] == 3 and kwargs["timestamp"] == 55
    assert kwargs["headers"][:-1] == [("h", b"v")] and kwargs["headers"][-1][0] == ENVELOPE_HEADER
    envelope = decode_envelope(kwargs["value"])
    assert envelope.store == "mem" and envelope.size == len(b"payload bytes")
    assert envelope.checksum == CHECKSUM_BLAKE3  # ``auto``: what every consumer verifies fastest
    assert envelope.digest == blake3.blake3(b"payload bytes").digest()
    assert store.get(envelope.locator) == b"payload bytes"
    assert store.pending == {envelope.locator: 1_000_000}, "journalled pending at the clock's time"
    m = w.metrics.snapshot()
    assert (m["reference.messages"], m["reference.bytes"], m["store.puts"]) == (1, 13, 1)
    assert m["reference.kafka.bytes"] == m["reference.mem.kafka.bytes"] == len(kwargs["value"]) + 1


def test_a_tombstone_is_stored_as_an_empty_payload_and_reported_as_none() -> None:
    store = MemoryStore()
    w, sent = writer(store)
    seen: list[Any] = []
    w.send(ROUTE, False, message(None, on_delivery=lambda err, msg: seen.append(msg.value())))
    assert list(store.payloads.values()) == [b""]
    sent.report(0, None)
    assert seen == [None]


def test_the_pending_mark_is_cleared_after_the_ack_in_one_batch_per_store() -> None:
    store = BatchingMemoryStore()
    w, sent = writer(store)
    seen: list[tuple[Any, Any]] = []
    for i in range(3):
        w.send(
            ROUTE,
            False,
            message(b"v%d" % i, headers=[("h", b"1")], on_delivery=lambda err, msg: seen.append((err, msg))),
        )
    for i in range(3):
        sent.report(i, None, offset=i)
    assert len(store.pending) == 3, "cleared when poll/flush returns, not per message"
    assert w.marks_to_clear == 3
    w.clear_acked_marks()
    assert store.pending == {} and w.marks_to_clear == 0
    assert [c for c in store.calls if c.startswith("clear")] == ["clear_pending_many:3"]
    assert [(err, msg.value(), msg.headers(), msg.offset()) for err, msg in seen] == [
        (None, b"v%d" % i, [("h", b"1")], i) for i in range(3)
    ], "the caller sees its own value and headers, not the envelope"
    assert len(store.payloads) == 3


def test_marks_are_cleared_without_waiting_for_poll_once_enough_pile_up() -> None:
    store = MemoryStore()
    w, sent = writer(store)
    for i in range(CLEAR_MARKS_EVERY):
        w.send(ROUTE, False, message(b"%d" % i))
        sent.report(i, None)
    assert store.pending == {} and w.marks_to_clear == 0
    assert store.calls.count("clear_pending") == CLEAR_MARKS_EVERY, "one by one on a store that cannot batch"


def test_marks_that_could_not_be_cleared_are_kept_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    store = BatchingMemoryStore(fail_clear=ConnectionError("down"))
    w, sent = writer(store)
    w.send(ROUTE, False, message())
    sent.report(0, None)
    with caplog.at_level(logging.WARNING, logger="gateway.producer.reference.writer"):
        w.clear_acked_marks()
    assert len(store.pending) == 1 and w.marks_to_clear == 1
    assert "will retry" in caplog.text
    store.fail_clear = None
    w.clear_acked_marks()
    assert store.pending == {} and w.marks_to_clear == 0


def test_a_refused_envelope_rolls_the_write_back_and_reports_the_error() -> None:
    store = MemoryStore()
    w, sent = writer(store)
    seen: list[Any] = []
    w.send(ROUTE, False, message(on_delivery=lambda err, msg: seen.append(err)))
    error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    sent.report(0, error)
    assert store.payloads == {} and store.pending == {}
    assert seen == [error]
    m = w.metrics.snapshot()
    assert (m["delivery.failures"], m["rollbacks"], m["rollback.failures"]) == (1, 1, 0)


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError._TRANSPORT,
        KafkaError._PURGE_INFLIGHT,
        KafkaError.UNKNOWN,
    ],
)
def test_an_envelope_that_may_have_been_written_keeps_its_payload_for_gc(code: int) -> None:
    store = MemoryStore()
    w, sent = writer(store)
    seen: list[Any] = []
    w.send(ROUTE, False, message(on_delivery=lambda err, msg: seen.append((err, msg.value()))))
    error = KafkaError(code)
    sent.report(0, error)
    [locator] = store.payloads
    assert store.pending == {locator: store.pending[locator]}, "the pending mark stays: gc decides from the topic"
    assert seen == [(error, b"payload bytes")], "the application still hears of the error"
    m = w.metrics.snapshot()
    assert (m["delivery.failures"], m["rollbacks"], m["rollbacks.skipped"]) == (1, 0, 1)


def test_an_envelope_that_cannot_be_queued_rolls_back_before_raising() -> None:
    store = MemoryStore()
    w, sent = writer(store)
    sent.error = BufferError("queue full")
    with pytest.raises(BufferError):
        w.send(ROUTE, False, message())
    assert store.payloads == {} and store.pending == {}
    assert w.metrics.snapshot()["rollbacks"] == 1
    assert w.metrics.snapshot()["reference.messages"] == 0


def test_a_failed_rollback_leaves_the_pending_mark_for_gc(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(fail_delete=ConnectionError("store down"))
    w, sent = writer(store)
    w.send(ROUTE, False, message())
    with caplog.at_level(logging.WARNING, logger="gateway.producer.reference.writer"):
        sent.report(0, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert len(store.pending) == 1, "gc finds it"
    assert w.metrics.snapshot()["rollback.failures"] == 1
    assert "left for gateway gc" in caplog.text


def test_an_aborted_transactions_marks_are_never_cleared(caplog: pytest.LogCaptureFixture) -> None:
    """Its envelopes are aborted: where the undo could not delete a payload, only the mark lets gc find it."""
    store = MemoryStore(fail_clear=ConnectionError("store down"))
    w, sent = writer(store)
    w.send(ROUTE, False, message(b"before"))
    sent.report(0, None)
    w.clear_acked_marks()  # fails: the landed write's mark stays queued
    store.fail_clear, store.fail_delete = None, ConnectionError("store down")
    w.transaction.begin()
    for i in range(2):
        w.send(ROUTE, False, message(b"in %d" % i))
        sent.report(1 + i, None)
    w.clear_acked_marks()
    assert len(store.pending) == 3, "held while the transaction is open"
    with caplog.at_level(logging.WARNING, logger="gateway.producer.reference.transactions"):
        assert undo(w.abandon()) == 2
    w.clear_acked_marks()
    assert sorted(store.payloads[loc] for loc in store.pending) == [b"in 0", b"in 1"], "aborted marks left for gc"
    assert w.marks_to_clear == 0 and "left for gateway gc" in caplog.text


def test_an_unreachable_store_sends_the_message_chunked_instead() -> None:
    store = MemoryStore(fail_put=StoreUnavailableError("connection refused"))
    w, sent = writer(store)
    assert w.send(ROUTE, False, message(b"x" * 1_000)) == CHUNKED
    assert sent.records == [] and [m.value for m in sent.chunked] == [b"x" * 1_000]
    m = w.metrics.snapshot()
    assert (m["fallbacks"], m["fallback.refused"], m["store.put.failures"]) == (1, 0, 1)


def test_a_store_error_caused_by_os_error_also_falls_back() -> None:
    error = PayloadIntegrityError("short write")
    error.__cause__ = ConnectionResetError("reset")
    w, _ = writer(MemoryStore(fail_put=error))
    assert w.send(ROUTE, False, message()) == CHUNKED


def test_other_store_errors_propagate() -> None:
    w, _ = writer(MemoryStore(fail_put=PayloadIntegrityError("refused")))
    with pytest.raises(PayloadIntegrityError):
        w.send(ROUTE, False, message())
    m = w.metrics.snapshot()
    assert (m["store.put.failures"], m["fallbacks"]) == (1, 0)


def test_no_fallback_for_a_forced_route_or_a_value_over_the_cap() -> None:
    w, _ = writer(MemoryStore(fail_put=StoreUnavailableError("down")), cap=10)
    with pytest.raises(StoreUnavailableError, match="the route was forced"):
        w.send(ROUTE, True, message(b"small"))
    with pytest.raises(StoreUnavailableError, match=re.escape("exceed reference.fallback.inline.max.bytes=10")):
        w.send(ROUTE, False, message(b"x" * 11))
    assert w.send(ROUTE, False, message(b"x" * 10)) == CHUNKED
    m = w.metrics.snapshot()
    assert (m["fallback.refused"], m["fallbacks"]) == (2, 1)


def test_an_unhealthy_store_is_skipped_until_a_probe_succeeds() -> None:
    store, clock = MemoryStore(fail_put=StoreUnavailableError("down")), ManualClock()
    w, sent = writer(store, clock, threshold=2, probe_ms=5_000)
    assert w.send(ROUTE, False, message()) == CHUNKED
    assert w.send(ROUTE, False, message()) == CHUNKED
    assert not w.health["mem"].healthy
    puts = store.calls.count("put")
    assert w.send(ROUTE, False, message()) == CHUNKED
    assert store.calls.count("put") == puts, "no write to a store marked unhealthy"
    store.fail_put = None
    clock.advance(5.0)
    assert w.send(ROUTE, False, message()) == ROUTE, "the probe goes through"
    assert w.health["mem"].healthy and len(sent.records) == 1


def test_store_put_time_comes_from_the_clock() -> None:
    clock = ManualClock()

    class SlowStore(MemoryStore):
        def put(self, *args: Any, **kwargs: Any) -> str:
            clock.advance(0.25)
            return super().put(*args, **kwargs)

    w, _ = writer(SlowStore(), clock)
    w.send(ROUTE, False, message())
    assert w.metrics.snapshot()["store.put.ms"] == 250


def test_a_route_to_an_unknown_store_is_a_configuration_error() -> None:
    w, _ = writer(MemoryStore())
    with pytest.raises(ConfigurationError, match="'other'"):
        w.send(Route.reference("other"), False, message())
    assert w.metrics.snapshot()["fallbacks"] == 0


def test_bad_headers_are_refused_before_the_payload_is_written() -> None:
    store = MemoryStore()
    w, sent = writer(store)
    with pytest.raises(TypeError) as info:
        w.send(ROUTE, False, message(headers=[("ok", b"1"), ("h", 5)]))
    assert store.payloads == {} and store.pending == {}, "nothing to orphan"
    assert sent.records == []
    assert "header 'h' must be bytes or str" in str(info.value)


@pytest.mark.parametrize(
    ("setting", "needs_digest", "given"),
    [("sha256", True, True), ("sha256", False, False), ("auto", True, False), ("blake3", False, False)],
    ids=["sha256-first-for-the-store", "sha256-beside", "blake3-beside-a-digest-store", "blake3-beside"],
)
def test_a_large_payloads_digest_is_the_same_whether_hashed_first_or_beside_the_write(
    setting: str, needs_digest: bool, given: bool
) -> None:
    """Only a SHA-256 that the store records is computed first; otherwise a worker hashes while the store writes."""
    from gateway.producer.reference.digests import OVERLAP_FROM_BYTES

    class Store(MemoryStore):
        needs_digest_to_write = needs_digest

        def put(self, *args: Any, sha256: bytes | None = None, **kwargs: Any) -> str:
            self.calls.append(f"digest given: {sha256 is not None}")
            return super().put(*args, sha256=sha256, **kwargs)

    store = Store()
    sent = Sent()
    w = ReferenceWriter({"mem": store}, {"mem": StoreHealth()}, sent, fallback_cap=0, checksum=setting)
    value = bytes(range(256)) * (OVERLAP_FROM_BYTES // 256 + 1)
    w.send(ROUTE, False, message(value))
    envelope = decode_envelope(sent.records[0][1]["value"])
    sha256 = setting == "sha256"
    assert envelope.digest == (hashlib.sha256(value).digest() if sha256 else blake3.blake3(value).digest())
    assert envelope.checksum == (CHECKSUM_SHA256 if sha256 else CHECKSUM_BLAKE3)
    assert f"digest given: {given}" in store.calls
    w.close()


@pytest.mark.parametrize(
    ("setting", "needs_digest", "checksum"),
    [
        ("auto", True, CHECKSUM_BLAKE3),
        ("auto", False, CHECKSUM_BLAKE3),
        ("sha256", False, CHECKSUM_SHA256),
        ("sha256", True, CHECKSUM_SHA256),
        ("blake3", True, CHECKSUM_BLAKE3),
    ],
)
def test_reference_checksum_picks_the_envelopes_algorithm(setting: str, needs_digest: bool, checksum: int) -> None:
    class Store(MemoryStore):
        needs_digest_to_write = needs_digest

        def put(self, *args: Any, sha256: bytes | None = None, **kwargs: Any) -> str:
            self.calls.append(f"sha256 given: {sha256 is not None}")
            return super().put(*args, sha256=sha256, **kwargs)

    store = Store()
    sent = Sent()
    w = ReferenceWriter({"mem": store}, {"mem": StoreHealth()}, sent, fallback_cap=0, checksum=setting)
    w.send(ROUTE, False, message(b"some payload"))
    envelope = decode_envelope(sent.records[0][1]["value"])
    assert envelope.checksum == checksum
    envelope.verify(b"some payload")
    # the store is handed the digest only when it is a SHA-256 (never a BLAKE3 under that name)
    assert f"sha256 given: {checksum == CHECKSUM_SHA256}" in store.calls
    w.close()


def test_an_unknown_reference_checksum_is_refused() -> None:
    with pytest.raises(ValueError, match=r"reference.checksum must be one of auto, sha256, blake3"):
        ReferenceWriter({}, {}, Sent(), fallback_cap=0, checksum="md5")


def test_an_incompressible_payload_is_stored_as_it_is_and_counted_a_text_one_compressed() -> None:
    """reference.compression=zstd spent more time on random bytes than the store write, for nothing saved."""
    store = MemoryStore()
    sent = Sent()
    w = ReferenceWriter(
        {store.name: store},
        {store.name: StoreHealth(2, 30_000, 5_000)},
        sent,
        fallback_cap=1_000,
        metrics=ProducerMetrics(),
        clock=ManualClock().clock(),
        send_chunked=sent.chunked.append,
        compression="zstd",
    )
    noise = os.urandom(500_000)
    text = b"".join(b'{"id": %d, "name": "customer-%d"}\n' % (i, i) for i in range(20_000))
    w.send(ROUTE, False, message(noise))
    w.send(ROUTE, False, message(text))
    first, second = (decode_envelope(kwargs["value"]) for _, kwargs in sent.records)
    assert first.compression is None and store.get(first.locator) == noise
    assert second.compression == "zstd" and len(store.get(second.locator)) < len(text) / 5
    assert decode_payload(store.get(second.locator), "zstd", len(text)) == text
    assert w.metrics.snapshot()["compression.skipped"] == 1
