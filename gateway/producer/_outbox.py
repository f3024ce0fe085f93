"""The outbox: the one way out of a ``HybridProducer`` to librdkafka, and the one module that calls its producer.

Every record the producer sends (a plain record, a segment, an envelope), every wait for delivery
reports (``poll``, ``flush``, the queue-full wait), ``purge``, every transaction call and every
question to the cluster (``cluster_id``, ``list_topics``) goes through :class:`Outbox`, the way
aiokafka's accumulator and sender are the only path to its brokers. So the rules that cross routes
have one owner:

* **Order.** A pending store write is an entry in the outbox's queue (the write window,
  :class:`~gateway.producer.reference.window.WriteWindow`, ``reference.write.window``); its envelope
  is produced when the write resolves, in produce order. The outbox holds librdkafka's producer only
  behind one door, :class:`Librdkafka`, whose every call waits for the queue's turn
  (:meth:`~gateway.producer.reference.window.WriteWindow.in_turn`; records by ``send_in_turn`` and
  ``join``), so no method can forget it and no call overtakes an
  earlier ``produce``, whichever route either took and whichever thread calls. Records a write
  resolves into (its envelope, or its segments after a fallback) go out by :attr:`Outbox.send`,
  which is librdkafka's ``produce`` with the queue-full wait and never waits for the queue: they
  are the queue's turn.
* **Time.** The queue's thread settles a write that waited ``reference.write.linger.ms`` when nobody
  calls (what keeps ``gateway gc`` safe for a quiet producer); its queue-full wait does not serve the
  application's delivery reports.
* **Late failures.** A write that failed after ``produce`` returned is reported to its ``on_delivery``
  from ``poll``/``flush``, like librdkafka's own failures.
* **Bookkeeping after reports and transactions.** The reference writer is told when reports were
  served (to clear the pending marks of acknowledged envelopes) and when a transaction begins,
  commits or aborts (to undo the payloads of an aborted one): :class:`OutboxListener`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from operator import methodcaller
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from gateway.clock import Clock
from gateway.core.outgoing import OutgoingMessage, Send
from gateway.librdkafka.binding import RD_KAFKA_PRODUCER, fatal_error
from gateway.librdkafka.group_offsets import send_offsets_to_transaction
from gateway.producer._queue_full import BlockingSend
from gateway.producer.reference.window import WriteWindow
from gateway.protocol.metadata import CommitEncoding

T = TypeVar("T")


class ExactProducer(Producer):
    """librdkafka's producer of a ``HybridProducer``, saying exactly what librdkafka says.

    Transaction offsets carry their metadata as ``commit_encoding`` says (``commit.metadata.encoding``,
    which :func:`~gateway.producer._config.parse_producer_config` took out of ``conf`` with the other
    gateway keys), and a fatal error confluent-kafka's ``flush`` loses (a bare ``SystemError``) is
    raised as the fatal ``KafkaException`` it is.
    """

    def __init__(self, conf: dict[str, Any], commit_encoding: CommitEncoding) -> None:
        self._commit_encoding = commit_encoding
        super().__init__(conf)

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float = -1) -> None:
        send_offsets_to_transaction(self, list(positions), group_metadata, timeout, self._commit_encoding)

    def flush(self, *args: Any, **kwargs: Any) -> int:
        try:
            return int(super().flush(*args, **kwargs))
        except SystemError as exc:
            fatal = fatal_error(self, RD_KAFKA_PRODUCER)
            if fatal is None:
                raise
            raise KafkaException(KafkaError(fatal[0], fatal[1], fatal=True)) from exc


class OutboxListener(Protocol):
    """What the reference writer is told by the outbox, after librdkafka did its part."""

    def reports_served(self) -> None: ...

    def transaction_begun(self) -> None: ...

    def transaction_committed(self) -> None: ...

    def transaction_aborted(self) -> None: ...


class _NoListener:
    def reports_served(self) -> None:
        pass

    def transaction_begun(self) -> None:
        pass

    def transaction_committed(self) -> None:
        pass

    def transaction_aborted(self) -> None:
        pass


class Librdkafka:
    """librdkafka's producer behind one door: the outbox holds it only through this, so no call skips its turn.

    Every call that sends no record goes through :meth:`in_turn`, after every write in flight (the
    write window's turn): poll, flush, purge, the transaction calls, close. Two kinds of access are
    not turns, and each is named for what it is:

    * the record path, ``produce`` (and ``serve``, the queue-full wait's poll): taken only by a caller
      that found the queue idle or holds its turn (:meth:`WriteWindow.send_in_turn`, a write settling);
    * :meth:`ask`, questions that send no record and must not hold the queue's lock while the cluster
      answers (``cluster_id``, ``list_topics``, ``set_sasl_credentials``, how many records it holds):
      a ``list_topics`` in turn would stall the linger thread for its whole timeout.

    ``tests/unit/producer/test_outbox.py`` checks that the outbox reaches the producer by no other way.
    """

    __slots__ = ("_producer", "_window", "produce", "serve")

    def __init__(self, producer: Producer, window: WriteWindow) -> None:
        self._producer = producer
        self._window = window
        self.produce = producer.produce
        """librdkafka's ``produce``, for a record whose turn it is (or an idle queue's)."""
        self.serve = producer.poll
        """librdkafka's ``poll``, for the queue-full wait of a record whose turn it is."""

    def in_turn(self, call: Callable[[Producer], T]) -> T:
        """``call(producer)`` once every write ahead of it is settled (:meth:`WriteWindow.in_turn`).

        The outbox passes ``operator.methodcaller``: the producer's own method then runs with no Python
        frame between the turn and librdkafka (cheaper, and one crossing fewer in ``benchmarks.walks``).
        """
        return self._window.in_turn(call, self._producer)

    def ask(self, question: Callable[[Producer], T]) -> T:
        """``question(producer)`` now: it sends no record, so there is no turn to wait for."""
        return question(self._producer)

    @property
    def outside_the_order(self) -> Producer:
        """The producer itself, for ``HybridProducer.inner`` alone: what the application does with it is not ordered."""
        return self._producer


class Outbox:
    """librdkafka's producer, the queue of pending writes in front of it, and the queue-full wait.

    ``produce`` is librdkafka's own bound method when the queue holds at most one write (nothing can
    be pending when another call comes), else the same call in its turn. ``send`` is the queue-full
    wait that segments and envelopes take (:class:`~gateway.producer._queue_full.BlockingSend`).
    """

    def __init__(
        self,
        conf: Mapping[str, Any],
        window: WriteWindow,
        clock: Clock,
        block_s: float,
        commit_encoding: CommitEncoding,
        kafka: Callable[[dict[str, Any], CommitEncoding], Producer] = ExactProducer,
    ) -> None:
        self._client = Librdkafka(kafka(dict(conf), commit_encoding), window)
        """The only way to librdkafka's producer: each call in the queue's turn (see :class:`Librdkafka`)."""
        self.window = window
        self.listener: OutboxListener = _NoListener()
        self.send: Send = BlockingSend(self._client.produce, self._client.serve, clock, block_s, self._serves_reports)

    def _serves_reports(self) -> bool:
        """Whether a queue-full wait on this thread may serve delivery reports: not on the queue's own thread."""
        return not self.window.on_own_thread()

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1, **kwargs: Any) -> None:
        """``Producer.produce``'s arguments, after the writes ahead of it; straight to librdkafka when nothing is.

        Called back from inside a send under way (an application callback served during its
        queue-full wait) the record is deferred behind it, and then waits for room as segments do.
        """
        if self.window.idle():
            self._client.produce(topic, value, key, partition, **kwargs)
            return
        record = {"value": value, "key": key, "partition": partition, **kwargs}
        on_delivery = kwargs.get("on_delivery", kwargs.get("callback"))
        self.window.send_in_turn(self._produce_now, topic, record, on_delivery=on_delivery, deferred=self.send)

    def _produce_now(self, topic: str, record: dict[str, Any]) -> None:
        self._client.produce(topic, **record)

    def produce_plain(self, message: OutgoingMessage) -> None:
        """One record with the caller's own arguments; a full queue raises at once, as librdkafka does."""
        kwargs: dict[str, Any] = {"partition": message.partition, "timestamp": message.timestamp}
        optional = {"value": message.value, "key": message.key, "headers": message.headers}
        kwargs.update((name, arg) for name, arg in optional.items() if arg is not None)
        if message.on_delivery is not None:
            kwargs["on_delivery"] = message.on_delivery
        self.produce(message.topic, **kwargs)

    def send_message(self, action: Callable[[OutgoingMessage], None], message: OutgoingMessage) -> None:
        """Send ``message`` by ``action`` (the chunked writer) after the writes ahead of it, as one turn."""
        self.window.send_in_turn(action, message, on_delivery=message.on_delivery)

    def join(self, action: Callable[[OutgoingMessage], T], message: OutgoingMessage) -> T | None:
        """``action(message)``, the reference writer's send, which queues its write or takes its turn itself."""
        return self.window.join(action, message, on_delivery=message.on_delivery)

    def poll(self, timeout: float) -> int:
        """Delivery reports served, late write failures included."""
        served = int(self._client.in_turn(methodcaller("poll", timeout))) + self.window.report_failures()
        self.listener.reports_served()
        return served

    def flush(self, timeout: float | None = -1) -> int:
        """librdkafka's records still in flight after ``timeout`` (None or negative: no limit)."""
        left = int(self._client.in_turn(partial(_flush, self.window, timeout)))
        self.listener.reports_served()
        return left

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        # each envelope in librdkafka's queue first, then purged like any record
        self._client.in_turn(methodcaller("purge", in_queue=in_queue, in_flight=in_flight, blocking=blocking))

    def __len__(self) -> int:
        """Records librdkafka holds (the queue's writes are counted by the reference writer)."""
        return self._client.ask(len)

    # -- what the producer's surface asks of the cluster (no record involved: no turn to wait for) ----
    def cluster_id(self, timeout: float = -1) -> str:
        return str(self._client.ask(methodcaller("cluster_id", timeout)))

    def set_sasl_credentials(self, username: str, password: str) -> None:
        self._client.ask(methodcaller("set_sasl_credentials", username, password))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._client.ask(methodcaller("list_topics", topic=topic, timeout=timeout))

    @property
    def librdkafka(self) -> Producer:
        """The producer itself, for ``HybridProducer.inner`` only (calls on it are outside the queue's order)."""
        return self._client.outside_the_order

    # -- transactions: writes in flight belong before each call -----------------------------------
    def init_transactions(self, timeout: float = -1) -> None:
        self._client.in_turn(methodcaller("init_transactions", *_timeout(timeout)))

    def begin_transaction(self) -> None:
        self._client.in_turn(methodcaller("begin_transaction"))
        self.listener.transaction_begun()

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float = -1) -> None:
        self._client.in_turn(methodcaller("send_offsets_to_transaction", positions, group_metadata, *_timeout(timeout)))

    def commit_transaction(self, timeout: float = -1) -> None:
        """Commit with every envelope of the transaction in it; on an error the writes stay tracked for the abort."""
        self._client.in_turn(methodcaller("commit_transaction", *_timeout(timeout)))
        self.listener.transaction_committed()

    def abort_transaction(self, timeout: float = -1) -> None:
        self._client.in_turn(methodcaller("abort_transaction", *_timeout(timeout)))
        self.listener.transaction_aborted()

    def close(self, before: Sequence[Callable[[], object]], after: Sequence[Callable[[], object]] = ()) -> bool:
        """Run ``before``, settle and stop the queue (its one close), run ``after``, close librdkafka's producer;
        then raise the first error.

        Closed whatever a step raises, as confluent-kafka's producer is: a fenced transactional
        producer's close raises ``_FENCED`` and is closed all the same.
        """
        errors: list[Exception] = []
        for step in (*before, self.window.close, *after):
            _attempt(step, errors)
        closed = _attempt(partial(self._client.in_turn, methodcaller("close")), errors)
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


def _flush(window: WriteWindow, timeout: float | None, kafka: Producer) -> Any:
    """librdkafka's flush, after the late write failures are reported (their callbacks may produce again)."""
    window.report_failures()
    return kafka.flush(*_timeout(timeout))


def _timeout(timeout: float | None) -> tuple[float, ...]:
    """A call's timeout argument, with confluent-kafka's "no timeout" (None or negative) spelled as librdkafka
    wants it: left out."""
    return () if timeout is None or timeout < 0 else (timeout,)


__all__ = ["ExactProducer", "Librdkafka", "Outbox", "OutboxListener"]
