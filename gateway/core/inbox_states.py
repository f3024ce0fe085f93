"""The inbox's ordering rules, stated once: a state table that every taking, keeping and dropping goes through.

The consumer hands records out in three ways, and the order between them is what keeps
deliveries exactly once and in order:

- *counted*: the rest of a fetched batch proven plain (:class:`~gateway.core.plain_deliveries.ProvenBatch`)
  goes out by count alone and is noted as delivered lazily. Anything else taken, fetched or
  dropped first closes the batch, noting what went, or the notes would land after newer ones;
- *kept*: whole messages delivered by the pipeline but not returned yet (a ``consume()`` call
  whose byte cap they did not fit, or those behind a message a deserializer refused). They go
  before anything newer, so nothing is fetched or taken from the queue while some wait; and
  they belong to their partition's current reading: when that partition is sought, assigned
  anew or revoked, they are dropped (read again from Kafka in their place, or by the partition's
  next owner), never handed out from the old reading;
- *queued*: everything else, one record at a time through the full path, or runs of plain records.

The :class:`~gateway.consumer._inbox.Inbox` moves by :data:`TABLE` for every step (:func:`next_state`,
looked up in place on its hot paths: a dict lookup, not a call per record); a step the table does
not allow raises :class:`InboxOrderError`: a bug in the consumer, never
bad input, so it is not one of the library's :class:`~gateway.errors.GatewayError` that the
consumer reports and goes on from.
"""

from __future__ import annotations

from enum import Enum


class InboxOrderError(RuntimeError):
    """The consumer took a step its inbox's state does not allow (an internal bug, never bad input)."""


class InboxState(Enum):
    QUEUED = "queued"
    """Nothing counted out or kept back: records come from the queue or a fetch."""
    COUNTED = "counted"
    """A proven plain batch is at the head of the queue and goes out by count."""
    KEPT = "kept"
    """Whole messages wait to be handed out first."""


class Step(Enum):
    FETCH = "fetch"  # records from librdkafka behind those queued
    TAKE_QUEUED = "take queued"  # a record or a run from the head of the queue
    OPEN_COUNTED = "open counted"  # a fresh batch proven plain: its first record taken, the rest by count
    TAKE_COUNTED = "take counted"  # more of the proven batch
    CLOSE_COUNTED = "close counted"  # what went by count noted as delivered; counting stops
    KEEP = "keep"  # whole messages kept back for the next call
    TAKE_KEPT = "take kept"  # one kept message handed out
    LAST_KEPT = "last kept"  # the last kept message handed out or dropped
    DROP = "drop"  # a partition's records go (seek, assign, revoke, wait for room)


_Q, _C, _K = InboxState.QUEUED, InboxState.COUNTED, InboxState.KEPT

TABLE: dict[InboxState, dict[Step, InboxState]] = {
    _Q: {
        Step.FETCH: _Q,
        Step.TAKE_QUEUED: _Q,
        Step.OPEN_COUNTED: _C,
        Step.KEEP: _K,
        Step.DROP: _Q,
    },
    # anything but counting closes the batch first (the inbox does, before its step)
    _C: {
        Step.TAKE_COUNTED: _C,
        Step.CLOSE_COUNTED: _Q,
    },
    # kept messages go first: no fetch, nothing from the queue, no counting until the last is out
    _K: {
        Step.KEEP: _K,
        Step.TAKE_KEPT: _K,
        Step.LAST_KEPT: _Q,
        Step.DROP: _K,
    },
}
"""Per state, the steps allowed in it and the state each leads to; any other step is a bug."""


def next_state(state: InboxState, step: Step) -> InboxState:
    """The state ``step`` leads to from ``state`` by :data:`TABLE`; a step it does not allow raises."""
    try:
        return TABLE[state][step]
    except KeyError:
        raise out_of_order(state, step) from None


def out_of_order(state: InboxState, step: Step) -> InboxOrderError:
    return InboxOrderError(f"{step.value!r} is not allowed while the inbox is {state.value!r}")
