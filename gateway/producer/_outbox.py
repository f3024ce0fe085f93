"""The outbox: the one way out of a ``HybridProducer`` to librdkafka.

Every record the producer sends (a plain record, a segment, an envelope), every wait for delivery
reports (``poll``, ``flush``, the queue-full wait), ``purge`` and every transaction call goes through
:class:`Outbox`, the way aiokafka's accumulator and sender are the only path to its brokers. So the
rules that cross routes have one owner:

* **Order.** Reference writes still in the write window (:class:`~gateway.producer.reference.window.WriteWindow`,
  ``reference.write.window``) are settled, their envelopes queued, before librdkafka sees any other
  call, under the window's lock. A record never overtakes an earlier ``produce``, whichever route
  either took and whichever thread calls.
* **Time.** The outbox owns the window, whose thread settles a write that waited
  ``reference.write.linger.ms`` when nobody calls (what keeps ``gateway gc`` safe for a quiet producer).
* **Late failures.** A write that failed after ``produce`` returned is reported to its ``on_delivery``
  from ``poll``/``flush``, like librdkafka's own failures.
* **Bookkeeping after reports and transactions.** The reference writer is told when reports were
  served (to clear the pending marks of acknowledged envelopes) and when a transaction begins,
  commits or aborts (to undo the payloads of an aborted one): :class:`OutboxListener`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import Producer

from gateway.clock import Clock
from gateway.librdkafka.group_offsets import ExactProducer
from gateway.producer._queue_full import BlockingSend
from gateway.producer.outgoing import OutgoingMessage, Send
from gateway.producer.reference.window import WriteWindow


class OutboxListener(Protocol):
    """What the reference writer is told by the outbox, after librdkafka did its part."""

    def reports_served(self) -> None: ...

    def transaction_begun(self) -> None: ...

    def transaction_committed(self) -> None: ...

    def transaction_aborted(self) -> None: ...


class _Nobody:
    def reports_served(self) -> None:
        pass

    def transaction_begun(self) -> None:
        pass

    def transaction_committed(self) -> None:
        pass

    def transaction_aborted(self) -> None:
        pass


class Outbox:
    """librdkafka's producer, the write window in front of it, and the queue-full wait.

    ``produce`` is librdkafka's own bound method when the window holds one write (nothing can be in
    flight), else the call that settles the window first. ``send`` is the queue-full wait that
    segments and envelopes take (:class:`~gateway.producer._queue_full.BlockingSend`).
    """

    def __init__(self, conf: Mapping[str, Any], window: WriteWindow, clock: Clock, block_s: float) -> None:
        self.kafka: Producer = ExactProducer(dict(conf))
        self.window = window
        self.listener: OutboxListener = _Nobody()
        self.produce: Callable[..., None] = self.kafka.produce if window.size <= 1 else self._produce_in_order
        """``Producer.produce``'s arguments; settles the writes in flight first."""
        self.send: Send = BlockingSend(self, clock, block_s)

    def _produce_in_order(self, *args: Any, **kwargs: Any) -> None:
        self.window.drain()
        self.kafka.produce(*args, **kwargs)

    def produce_plain(self, message: OutgoingMessage) -> None:
        """One record with the caller's own arguments; a full queue raises at once, as librdkafka does."""
        kwargs: dict[str, Any] = {"partition": message.partition, "timestamp": message.timestamp}
        optional = {"value": message.value, "key": message.key, "headers": message.headers}
        kwargs.update((name, arg) for name, arg in optional.items() if arg is not None)
        if message.on_delivery is not None:
            kwargs["on_delivery"] = message.on_delivery
        self.produce(message.topic, **kwargs)

    def poll(self, timeout: float) -> int:
        """Delivery reports served, late write failures included."""
        self.window.drain()
        served = int(self.kafka.poll(timeout)) + self.window.report_failures()
        self.listener.reports_served()
        return served

    def flush(self, timeout: float | None = -1) -> int:
        """librdkafka's records still in flight after ``timeout`` (None or negative: no limit)."""
        self.window.drain()
        self.window.report_failures()
        left = int(_call(self.kafka.flush, timeout))
        self.listener.reports_served()
        return left

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.window.drain()  # each envelope in librdkafka's queue, then purged like any record
        self.kafka.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)

    def __len__(self) -> int:
        """Records librdkafka holds (the window's writes are counted by the reference writer)."""
        return len(self.kafka)

    # -- transactions: writes in flight belong before each call -----------------------------------
    def init_transactions(self, timeout: float = -1) -> None:
        _call(self.kafka.init_transactions, timeout)

    def begin_transaction(self) -> None:
        self.window.drain()
        self.kafka.begin_transaction()
        self.listener.transaction_begun()

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float = -1) -> None:
        self.window.drain()
        _call(self.kafka.send_offsets_to_transaction, timeout, positions, group_metadata)

    def commit_transaction(self, timeout: float = -1) -> None:
        """Commit with every envelope of the transaction in it; on an error the writes stay tracked for the abort."""
        self.window.drain()
        _call(self.kafka.commit_transaction, timeout)
        self.listener.transaction_committed()

    def abort_transaction(self, timeout: float = -1) -> None:
        self.window.drain()
        _call(self.kafka.abort_transaction, timeout)
        self.listener.transaction_aborted()

    def close(self, steps: Sequence[Callable[[], object]]) -> bool:
        """Run ``steps``, settle and stop the window, close librdkafka's producer; then raise the first error.

        Closed whatever a step raises, as confluent-kafka's producer is: a fenced transactional
        producer's close raises ``_FENCED`` and is closed all the same.
        """
        errors: list[Exception] = []
        for step in (*steps, self.window.close):
            _attempt(step, errors)
        closed = _attempt(self.kafka.close, errors)
        if errors:
            raise errors[0]
        return bool(closed)


def _attempt(step: Callable[[], object], errors: list[Exception]) -> object:
    """``step()``'s result, or None with its error appended to ``errors``: a close goes on past a failed step."""
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - kept, and raised once the close is complete
        errors.append(exc)
        return None


def _call(method: Callable[..., Any], timeout: float | None, *args: Any) -> Any:
    """``method(*args)`` with confluent-kafka's "no timeout" spelled as librdkafka wants it (left out)."""
    if timeout is None or timeout < 0:
        return method(*args)
    return method(*args, timeout)


__all__ = ["Outbox", "OutboxListener"]
