"""The per-segment → per-message delivery fold, without a broker: reports are fed by hand."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, Message

from gateway.errors import LargeMessageSendError
from gateway.producer._segment_reports import DeliveryFold, InFlight


class Calls:
    def __init__(self) -> None:
        self.seen: list[tuple[Any, Any]] = []

    def __call__(self, err: Any, msg: Any) -> None:
        self.seen.append((err, msg))


def segment_report(offset: int) -> Message:
    """What librdkafka hands the segment callback: the segment record as written."""
    return Message(topic="t", partition=0, offset=offset, key=b"k", value=b"segment bytes", headers=[("_lm", b"x")])


def fold(total: int, calls: Calls | None) -> DeliveryFold:
    return DeliveryFold(total, calls, b"the whole value", "caller-key", [("h", b"v")])


def test_one_callback_after_the_last_segment_with_the_callers_value_key_and_headers() -> None:
    calls = Calls()
    f = fold(3, calls)
    assert f.segment(None) is False
    assert f.segment(None) is False
    last = segment_report(42)
    assert f.segment(None) is True
    f.deliver(last)
    assert len(calls.seen) == 1
    err, msg = calls.seen[0]
    assert err is None
    assert msg.offset() == 42, "the offset of the record that completes the message"
    assert (msg.value(), msg.key(), msg.headers()) == (b"the whole value", "caller-key", [("h", b"v")])


def test_a_failed_segment_becomes_one_aggregated_error() -> None:
    calls = Calls()
    f = fold(3, calls)
    first = KafkaError(KafkaError._MSG_TIMED_OUT)
    f.segment(None)
    f.segment(first)
    assert f.segment(KafkaError(KafkaError._TRANSPORT)) is True
    f.deliver(segment_report(7))
    [(reported, _)] = calls.seen
    assert isinstance(reported, KafkaError), "what confluent-kafka's on_delivery promises"
    assert reported.code() == KafkaError._MSG_TIMED_OUT and "Sent 1 of 3 segments" in reported.str()
    err = reported.cause
    assert isinstance(err, LargeMessageSendError)
    assert err.cause is first, "the first error seen, not the last"
    assert (err.sent, err.total) == (1, 3)
    assert err.code() == KafkaError._MSG_TIMED_OUT


def test_no_error_object_when_every_segment_is_acknowledged() -> None:
    f = fold(2, Calls())
    f.segment(None)
    f.segment(None)
    assert f.error() is None


def test_abandoned_after_some_segments_stays_silent_and_completes_with_their_reports() -> None:
    calls = Calls()
    f = fold(5, calls)
    f.segment(None)  # one of the two queued segments already reported
    assert f.abandon(2) is False, "one queued segment is still due"
    assert f.segment(KafkaError(KafkaError._MSG_TIMED_OUT)) is True
    f.deliver(segment_report(1))
    assert calls.seen == [], "produce raised for this message; no callback follows"
    assert f.failed == 1


def test_abandoned_before_any_segment_is_complete_at_once() -> None:
    f = fold(4, Calls())
    assert f.abandon(0) is True


def test_without_a_callback_delivery_is_a_no_op() -> None:
    f = fold(1, None)
    f.segment(None)
    f.deliver(segment_report(0))  # nothing to call, nothing raised


def test_a_missing_report_message_is_passed_on_as_none() -> None:
    calls = Calls()
    f = fold(1, calls)
    f.segment(None)
    f.deliver(None)
    assert calls.seen == [(None, None)]


def test_in_flight_counts_logical_messages_not_segments() -> None:
    flight = InFlight()
    a, b = fold(3, None), fold(2, None)
    flight.begin(a)
    flight.begin(b)
    assert flight.logical(lambda: 5) == 2, "5 records queued are 2 logical messages"
    assert flight.segment_done(a, None) is False
    assert flight.logical(lambda: 4) == 2
    flight.segment_done(a, None)
    assert flight.segment_done(a, None) is True
    assert flight.logical(lambda: 2) == 1
    flight.abandon(b, 1)  # one of b's two segments was queued; the other never will be
    assert (flight.messages, flight.segments) == (1, 1)
    assert flight.segment_done(b, None) is True
    assert (flight.messages, flight.segments) == (0, 0)
    assert flight.logical(lambda: 1) == 1, "a plain record counts as itself"


def test_abandoning_with_nothing_queued_ends_the_message() -> None:
    flight = InFlight()
    f = fold(3, None)
    flight.begin(f)
    flight.abandon(f, 0)
    assert (flight.messages, flight.segments) == (0, 0)
