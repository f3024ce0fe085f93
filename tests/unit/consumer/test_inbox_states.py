"""The inbox's ordering rules (gateway.core.inbox_states): each allowed step, and a step out of order raises."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message

from gateway.consumer._inbox import Inbox
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.resolver import Resolver
from gateway.core.inbox_states import TABLE, InboxOrderError, InboxState, Step, next_state
from gateway.core.pipeline import ConsumerPipeline
from gateway.protocol.records import Record

A, B = ("t", 0), ("t", 1)


class Librdkafka:
    """Stands in for librdkafka's consumer: plain records of partition 0 from offset 0 on."""

    def __init__(self) -> None:
        self.offset = -1

    def _next(self) -> Message:
        self.offset += 1
        return Message(topic="t", partition=0, offset=self.offset, value=b"v%d" % self.offset)

    def poll(self, timeout: float) -> Message:
        return self._next()

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        return [self._next() for _ in range(num_messages)]


def _inbox(batch: int = 40) -> tuple[Inbox, ConsumerPipeline]:
    pipeline = ConsumerPipeline()
    pipeline.commits.load_commit(A, None, None)
    return Inbox(Librdkafka(), batch, ReferenceFetcher(Resolver({})), 8_000_000, pipeline), pipeline


def _msg(tp: tuple[str, int], offset: int) -> Message:
    return Message(topic=tp[0], partition=tp[1], offset=offset, value=b"m")


def _counting() -> Inbox:
    inbox, _ = _inbox()
    assert inbox.fetch(1.0)
    assert inbox.open_plain_batch() is not None
    assert inbox.state is InboxState.COUNTED and inbox.counted.left == 39
    return inbox


def _kept() -> Inbox:
    inbox, _ = _inbox()
    inbox.keep([_msg(A, 3), _msg(B, 7)], {A: (2, 2, 0), B: (5, 5, 0)})
    assert inbox.state is InboxState.KEPT
    return inbox


@pytest.mark.parametrize(
    ("state", "step"),
    [(state, step) for state in InboxState for step in Step if step not in TABLE[state]],
)
def test_every_step_the_table_does_not_allow_raises(state: InboxState, step: Step) -> None:
    with pytest.raises(InboxOrderError, match=step.value):
        next_state(state, step)


@pytest.mark.parametrize(("state", "step"), [(state, step) for state in InboxState for step in TABLE[state]])
def test_every_step_the_table_allows_leads_where_it_says(state: InboxState, step: Step) -> None:
    assert next_state(state, step) is TABLE[state][step]


def test_the_inbox_raises_on_a_step_out_of_order_as_the_table_does() -> None:
    inbox = _kept()
    with pytest.raises(InboxOrderError, match="'fetch' is not allowed while the inbox is 'kept'"):
        inbox.fetch(1.0)
    assert inbox.state is InboxState.KEPT


def test_a_proven_batch_goes_by_count_and_any_other_step_closes_it_first_noting_what_went() -> None:
    inbox = _counting()
    inbox.take_counted()
    inbox.take_counted()
    inbox.pop()  # the full path: counting stops, the three handed out are noted as delivered
    assert inbox.state is InboxState.QUEUED and inbox.counted.left == 0
    assert inbox._pipeline.progress()[A][1] == 2


def test_the_rest_of_a_proven_batch_is_taken_in_bulk_only_while_counting() -> None:
    inbox = _counting()
    out: list[Any] = []
    assert inbox.take_proven(out, 100, 1_000_000) > 0 and len(out) == 39
    assert inbox.state is InboxState.QUEUED, "the last counted record closes the batch"
    assert inbox.take_proven(out, 100, 1_000_000) == 0, "nothing counted: nothing taken, no step"


def test_kept_messages_go_before_any_fetch_or_queued_record() -> None:
    inbox = _kept()
    with pytest.raises(InboxOrderError):
        inbox.fetch(1.0)
    with pytest.raises(InboxOrderError):
        inbox.fetch_batch(1.0, 10)
    inbox.raw.append(_msg(A, 9))
    with pytest.raises(InboxOrderError):
        inbox.pop()
    with pytest.raises(InboxOrderError):
        inbox.take_plain_head()
    with pytest.raises(InboxOrderError):
        inbox.take_plain([], 10)
    with pytest.raises(InboxOrderError):
        inbox.open_plain_batch()
    assert [m.offset() for m in (inbox.take_kept(), inbox.take_kept())] == [3, 7]
    assert inbox.state is InboxState.QUEUED
    assert inbox.pop().offset() == 9


def test_keeping_closes_a_proven_batch_first() -> None:
    inbox = _counting()
    inbox.keep([_msg(A, 50)], {})
    assert inbox.state is InboxState.KEPT and inbox.counted.left == 0


def test_kept_messages_hold_commits_where_they_stood_until_all_are_handed_out() -> None:
    """What consume() delivered but kept back bounds the commits of its partitions."""
    inbox, pipeline = _inbox()
    pipeline.commits.load_commit(B, None, None)
    pipeline.feed(B, Record(4, None, b"v", None))
    inbox.keep([_msg(A, 20), _msg(B, 5)], {A: (10, 19, 0)})
    assert inbox.kept_floor(A) == 10, "where A's commit stood before the call"
    assert inbox.kept_floor(B) == 4, "B was new to the call's start: from its first offset"
    assert pipeline.commits.safe_offsets_to_commit({A: (21, "")}, False) == {A: (10, "10,")}, "the translator sees it"
    inbox.keep([_msg(A, 30)], {A: (25, 29, 0)})  # a second refusal before the first were all handed out
    assert inbox.kept_floor(A) == 10, "the lower floor stays"
    inbox.take_kept()
    assert inbox.kept_floor(A) == 10, "until the last is handed out"
    inbox.take_kept()
    inbox.take_kept()
    assert inbox.kept_floor(A) is None and inbox.kept_floor(B) is None


def test_a_partition_whose_reading_starts_over_drops_its_kept_messages_and_their_floor() -> None:
    """seek, assign, revoke: its kept messages would be handed out twice (again from Kafka) or out of order."""
    inbox = _kept()
    inbox.drop(A)
    assert [m.offset() for m in inbox.kept] == [7] and inbox.kept_floor(A) is None and inbox.kept_floor(B) == 5
    inbox.drop(B)
    assert not inbox.kept and inbox.state is InboxState.QUEUED and inbox.kept_floor(B) is None
    assert inbox.fetch(1.0), "nothing kept: fetching is allowed again"


def test_a_partition_waiting_for_room_keeps_its_kept_messages() -> None:
    """Waiting for room drops only queued records: the pipeline keeps what it delivered, so a kept one stays."""
    inbox = _kept()
    inbox.drop_queued(A)
    assert [m.offset() for m in inbox.kept] == [3, 7] and inbox.state is InboxState.KEPT


def test_a_deferred_error_goes_first_and_counts_as_kept() -> None:
    inbox = _counting()
    error = ValueError("refused")
    inbox.defer(error)
    assert inbox.state is InboxState.KEPT and inbox.counted.left == 0
    with pytest.raises(InboxOrderError):
        inbox.fetch(1.0)
    assert inbox.take_deferred() is error and inbox.state is InboxState.QUEUED


def test_clear_drops_everything_kept() -> None:
    inbox = _kept()
    inbox.defer(ValueError("x"))
    inbox.clear()
    assert inbox.state is InboxState.QUEUED and not inbox.kept and inbox.deferred is None
