"""The chunked route without Kafka: segments, the timestamp they share, and a message queued only in part."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from gateway.core.outgoing import OutgoingMessage
from gateway.errors import ConfigurationError, LargeMessageSendError
from gateway.producer._chunked_writer import ChunkedWriter
from gateway.producer._config import parse_producer_config
from gateway.protocol.headers import TIMESTAMP_HEADER, last_header
from gateway.protocol.primitives import decode_long
from tests.unit.fake_clock import ManualClock


class Queue:
    """Takes ``room`` records, then raises ``BufferError`` as a full librdkafka queue does."""

    def __init__(self, room: int = 1_000) -> None:
        self.room = room
        self.records: list[dict[str, Any]] = []

    def __call__(self, topic: str, kwargs: dict[str, Any]) -> None:
        if len(self.records) >= self.room:
            raise BufferError("Local: Queue full")
        self.records.append(kwargs)

    def report(self, i: int, err: Any = None) -> None:
        r = self.records[i]
        r["on_delivery"](
            err, Message(topic="t", partition=0, offset=i, key=r["key"], value=r["value"], headers=r["headers"])
        )


def writer(queue: Queue, clock: ManualClock | None = None, config: dict[str, Any] | None = None) -> ChunkedWriter:
    settings, _ = parse_producer_config({"max.message.segment.bytes": 100, **(config or {})})
    return ChunkedWriter(settings, queue, clock=(clock or ManualClock(wall=1_700_000_000.5)).clock())


def test_segments_share_the_clocks_timestamp_when_the_caller_gave_none() -> None:
    queue = Queue()
    writer(queue).send(OutgoingMessage.of("t", b"x" * 250, key=b"k"))
    assert len(queue.records) == 3
    assert {r["timestamp"] for r in queue.records} == {1_700_000_000_500}
    assert {decode_long(last_header(r["headers"], TIMESTAMP_HEADER) or b"") for r in queue.records} == {
        1_700_000_000_500
    }
    assert {r["key"] for r in queue.records} == {b"k"} and {r["partition"] for r in queue.records} == {-1}


def test_the_callers_timestamp_and_partition_win_and_the_clock_is_not_read() -> None:
    queue, clock = Queue(), ManualClock()
    writer(queue, clock).send(OutgoingMessage.of("t", b"x" * 150, partition=2, timestamp=42))
    assert {(r["timestamp"], r["partition"]) for r in queue.records} == {(42, 2)}
    assert clock.reads == 0


def test_one_callback_once_every_segment_is_acknowledged() -> None:
    queue, seen = Queue(), []
    w = writer(queue)
    w.send(
        OutgoingMessage.of(
            "t",
            "é" * 150,
            key="k",
            headers={"h": b"1"},
            on_delivery=lambda err, msg: seen.append((err, msg.value(), msg.key(), msg.offset())),
        )
    )
    assert len(queue.records) == 3 and w.in_flight.logical(lambda: 3) == 1
    for i in range(3):
        queue.report(i)
    assert seen == [(None, "é".encode() * 150, "k", 2)]
    assert w.in_flight.logical(lambda: 0) == 0
    m = w.metrics.snapshot()
    assert (m["chunked.messages"], m["chunked.bytes"], m["chunked.segments"]) == (1, 300, 3)


def test_a_failed_segment_is_reported_once_for_the_whole_message() -> None:
    queue, seen = Queue(), []
    w = writer(queue)
    w.send(OutgoingMessage.of("t", b"x" * 200, on_delivery=lambda err, msg: seen.append(err)))
    queue.report(0, KafkaError(KafkaError._MSG_TIMED_OUT))
    queue.report(1)
    [err] = seen
    assert isinstance(err, KafkaError) and err.code() == KafkaError._MSG_TIMED_OUT
    assert isinstance(err.cause, LargeMessageSendError) and "Sent 1 of 2 segments" in err.str()
    assert w.metrics.snapshot()["delivery.failures"] == 1


def test_nothing_queued_raises_the_buffer_error_itself() -> None:
    queue = Queue(room=0)
    w = writer(queue)
    with pytest.raises(BufferError):
        w.send(OutgoingMessage.of("t", b"x" * 300))
    assert (w.in_flight.messages, w.in_flight.segments) == (0, 0)
    assert w.metrics.snapshot()["chunked.messages"] == 0


def test_a_message_queued_in_part_says_how_much_went_out_and_gets_no_callback() -> None:
    queue, seen = Queue(room=2), []
    w = writer(queue)
    with pytest.raises(LargeMessageSendError, match="Queued 2 of 4 segments") as info:
        w.send(OutgoingMessage.of("t", b"x" * 400, on_delivery=lambda err, msg: seen.append(err)))
    assert (info.value.sent, info.value.total) == (2, 4) and isinstance(info.value.cause, BufferError)
    assert (w.in_flight.messages, w.in_flight.segments) == (1, 2), "two reports are still due"
    queue.report(0)
    queue.report(1)
    assert seen == [] and (w.in_flight.messages, w.in_flight.segments) == (0, 0)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_mid_message_reaches_the_caller_as_itself(interrupt: type[BaseException]) -> None:
    """Ctrl-C or a SIGTERM handler's ``SystemExit`` after two segments went out is not a send failure: wrapped in
    ``LargeMessageSendError`` (an ``Exception``) it would be caught as one, and the process would not stop."""
    queue = Queue()

    def send(topic: str, kwargs: dict[str, Any]) -> None:
        if len(queue.records) == 2:
            raise interrupt()
        queue(topic, kwargs)

    w = writer(queue)
    w._send = send  # type: ignore[method-assign]
    with pytest.raises(interrupt):
        w.send(OutgoingMessage.of("t", b"x" * 400))
    assert (w.in_flight.messages, w.in_flight.segments) == (1, 2), "the two queued segments' reports are still due"


def test_wrapping_sends_a_small_value_as_one_segment() -> None:
    queue = Queue()
    writer(queue, config={"li.large.message.segment.wrapping.required": True}).send(OutgoingMessage.of("t", b"tiny"))
    [record] = queue.records
    assert record["value"] != b"tiny" and record["value"].endswith(b"tiny"), "a segment header in front"


def test_a_key_that_leaves_no_room_for_a_sensible_segment_is_refused_before_anything_is_queued() -> None:
    queue = Queue()
    w = writer(queue, config={"max.message.segment.bytes": 800_000})
    huge_key = b"k" * (1_000_000 - 600)  # leaves 35 bytes of segment per record beside the _t header
    with pytest.raises(ConfigurationError, match=r"leave \d+ bytes per segment .* use a smaller key") as info:
        w.send(OutgoingMessage.of("t", b"v" * 50, key=huge_key))
    assert isinstance(info.value, ValueError)
    assert queue.records == [] and (w.in_flight.messages, w.in_flight.segments) == (0, 0)


def test_a_key_that_leaves_room_for_the_whole_small_value_still_goes_as_one_segment() -> None:
    queue = Queue()
    w = writer(queue, config={"max.message.segment.bytes": 800_000})
    w.send(OutgoingMessage.of("t", b"v" * 50, key=b"k" * (1_000_000 - 700)))  # 135 bytes of room
    assert len(queue.records) == 1


def test_a_negative_partition_is_refused_rather_than_sent_to_any_partition() -> None:
    queue = Queue()
    with pytest.raises(ConfigurationError, match="partition"):
        writer(queue).send(OutgoingMessage.of("t", b"x" * 300, partition=-5))
    assert queue.records == []


def test_one_segment_at_a_time_is_held_beside_the_value() -> None:
    """librdkafka copies a segment when it is queued: the writer must not hold it while building the next."""
    import tracemalloc

    segment = 800_000
    value = bytes(10 * segment)
    queued: list[int] = []
    settings, _ = parse_producer_config({"max.message.segment.bytes": segment + 200, "message.max.bytes": 2_000_000})
    chunked = ChunkedWriter(
        settings, lambda topic, kwargs: queued.append(len(kwargs["value"])), clock=ManualClock(wall=1.0).clock()
    )
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        chunked.send(OutgoingMessage.of("t", value))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(queued) >= 10 and min(queued) > 0.9 * segment
    assert peak - before < 1.5 * segment, f"{peak - before} bytes at the peak: more than the one segment being queued"
