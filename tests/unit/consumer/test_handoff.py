"""The handoff's rules without threads: floors while a delivery is out, order of what comes back, errors."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.consumer.handoff import Handoff, PendingDelivery
from gateway.core.offsets import Progress
from gateway.core.pipeline import ConsumerPipeline
from gateway.errors import PayloadNotFoundError
from gateway.protocol.records import Record, TopicPartitionKey

A, B = ("t", 0), ("t", 1)


class Tracker:
    """Stands in for the consumer: ``progress`` as the pipeline reports it, changed by the calls."""

    def __init__(self) -> None:
        self.state: dict[TopicPartitionKey, Progress] = {A: (10, 9, 0)}
        self.batches_ended = 0

    def deliver(self, tp: TopicPartitionKey, offset: int, safe: int | None = None) -> str:
        origin = self.state.get(tp, (0, 0, offset))[2]
        self.state[tp] = (offset + 1 if safe is None else safe, offset, origin)
        return f"{tp[1]}@{offset}"

    def handoff(self) -> Handoff:
        def ended() -> None:
            self.batches_ended += 1

        return Handoff(lambda: dict(self.state), ended)


def test_floors_hold_from_the_call_until_the_loan_is_received() -> None:
    tracker = Tracker()
    handoff = tracker.handoff()
    delivery = PendingDelivery()
    seen: list[int | None] = []

    def poll() -> str:
        seen.append(handoff.floor(A))  # a commit during the call (a revoke) stays where it stood
        return tracker.deliver(A, 12, safe=11)  # a chunked message that started at 11

    assert handoff.call(delivery, poll) == "0@12"
    assert seen == [10]
    assert handoff.floor(A) == 10 and handoff.floor(B) is None
    handoff.call(None, lambda: None)  # fate not reported yet: nothing changes
    assert handoff.floor(A) == 10
    delivery.received()
    handoff.call(None, lambda: None)
    assert handoff.floor(A) is None and not handoff.returned


def test_only_partitions_that_delivered_keep_a_floor_and_a_new_one_floors_at_its_first_offset() -> None:
    tracker = Tracker()
    tracker.state[B] = (40, 39, 0)
    handoff = tracker.handoff()
    delivery = PendingDelivery()

    def consume() -> list[str]:
        tracker.state[("u", 0)] = (8, -1, 5)  # a partition seen for the first time: segments from 5 on
        return [tracker.deliver(A, 10), tracker.deliver(("u", 0), 9)]

    handoff.call(delivery, consume)
    assert (handoff.floor(A), handoff.floor(B), handoff.floor(("u", 0))) == (10, None, 5)


def test_what_comes_back_is_handed_out_first_in_the_order_it_first_went_out() -> None:
    tracker = Tracker()
    handoff = tracker.handoff()
    first, second = PendingDelivery(), PendingDelivery()
    handoff.call(first, lambda: [tracker.deliver(A, 10), tracker.deliver(A, 11)])
    handoff.call(second, lambda: tracker.deliver(A, 12))
    second.returned()
    first.returned()
    handoff.settle()
    assert tracker.batches_ended == 1  # nothing the consumer hands out by count goes before them
    assert [item for item, _ in handoff.returned] == ["0@10", "0@11", "0@12"]
    assert handoff.floor(A) == 10
    assert handoff.take(2) == ["0@10", "0@11"]
    assert handoff.floor(A) == 12  # the second delivery's floor stays until its message went out again
    assert handoff.take_one() == "0@12"
    assert handoff.floor(A) is None and handoff.returned_total == 3


def test_an_item_handed_out_again_by_a_lent_call_is_bounded_by_that_loan() -> None:
    tracker = Tracker()
    handoff = tracker.handoff()
    lost, again = PendingDelivery(), PendingDelivery()
    handoff.call(lost, lambda: tracker.deliver(A, 10))
    lost.returned()
    assert handoff.call(again, handoff.take_one) == "0@10"  # what the next poll does first
    assert handoff.floor(A) == 10  # delivered nothing new, yet bounded: it carries the returned item
    again.returned()
    handoff.settle()
    assert handoff.take_one() == "0@10" and handoff.floor(A) is None


def test_an_error_carrying_a_message_comes_back_and_one_without_does_not() -> None:
    tracker = Tracker()
    handoff = tracker.handoff()
    carried = PayloadNotFoundError("gone", kafka_message="record")
    deliveries = [PendingDelivery(), PendingDelivery()]
    for delivery, exc in zip(deliveries, (carried, RuntimeError("closed")), strict=True):

        def fail(exc: BaseException = exc) -> Any:
            raise exc

        with pytest.raises(type(exc)):
            handoff.call(delivery, fail)
        delivery.returned()
    handoff.settle()
    assert [item for item, _ in handoff.returned] == [carried]
    with pytest.raises(PayloadNotFoundError):
        handoff.take(5)


def test_consume_stops_before_a_returned_error() -> None:
    tracker = Tracker()
    handoff = tracker.handoff()
    deliveries = [PendingDelivery(), PendingDelivery()]
    handoff.call(deliveries[0], lambda: [tracker.deliver(A, 10)])
    carried = PayloadNotFoundError("gone", kafka_message="record")

    def fail() -> Any:
        raise carried

    with pytest.raises(PayloadNotFoundError):
        handoff.call(deliveries[1], fail)
    for delivery in deliveries:
        delivery.returned()
    handoff.settle()
    assert handoff.take(5) == ["0@10"]
    with pytest.raises(PayloadNotFoundError):
        handoff.take(5)


def test_a_commit_stays_at_the_floor_safe_offset_and_high_watermark_alike() -> None:
    pipeline = ConsumerPipeline()
    pipeline.commits.load_commit(A, None, None)
    for offset in range(5):
        pipeline.feed(A, Record(offset, None, b"v", None))
    assert pipeline.commits.safe_offsets_to_commit({A: (5, "")}, False) == {A: (5, "5,")}
    pipeline.commits.floors.lend({A: 3})
    assert pipeline.commits.safe_offsets_to_commit({A: (5, "")}, False) == {A: (3, "3,")}
    assert pipeline.commits.safe_offset(A) == 5  # the _so a record carries is not about the handoff


def test_the_translator_reads_the_floors_the_handoff_sets_without_asking_it() -> None:
    """The core never calls up: the handoff sets its floors in the translator's CommitFloors as they change."""
    pipeline = ConsumerPipeline()
    pipeline.commits.load_commit(A, None, None)
    for offset in range(5):
        pipeline.feed(A, Record(offset, None, b"v", None))
    handoff = Handoff(pipeline.progress, lambda: None, pipeline.commits.floors)
    delivery = PendingDelivery()
    seen: list[dict[tuple[str, int], tuple[int, str]]] = []

    def poll() -> str:
        pipeline.feed(A, Record(5, None, b"v", None))
        seen.append(pipeline.commits.safe_offsets_to_commit({A: (6, "")}, False))  # a commit inside the call
        return "5@A"

    assert handoff.call(delivery, poll) == "5@A"
    assert seen == [{A: (5, "5,")}], "inside the call: where the commit stood before it"
    assert pipeline.commits.safe_offsets_to_commit({A: (6, "")}, False) == {A: (5, "5,")}, "lent, not received"
    delivery.received()
    handoff.call(None, lambda: None)  # the next call acts on the report
    assert pipeline.commits.safe_offsets_to_commit({A: (6, "")}, False) == {A: (6, "6,")}
