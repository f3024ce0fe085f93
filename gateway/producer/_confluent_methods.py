"""The rest of ``confluent_kafka.Producer``'s methods on :class:`~gateway.HybridProducer`.

Same names, arguments and return values as confluent-kafka's. ``produce_batch`` routes every
message as ``produce`` does (a large one is chunked or sent by reference), so its count is of
logical messages; a message that could not be queued gets an ``_error`` entry, as in
confluent-kafka, and headers are supported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Producer

from gateway.health import StoreHealth
from gateway.histogram import HistogramSnapshot
from gateway.producer._compaction import CompactionGuard
from gateway.producer._metrics import ProducerMetrics
from gateway.producer._outbox import Outbox
from gateway.producer.reference.topic_warmup import TopicWarmup

CLOSED = "Producer has been closed"
"""confluent-kafka's words for a call on a closed producer."""


class _NoOutbox:
    """The outbox of a producer whose ``__init__`` never ran (a subclass that skipped it)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(CLOSED)


NO_OUTBOX = cast(Outbox, _NoOutbox())


class ConfluentMethods:
    """Mixed into :class:`~gateway.HybridProducer`, which provides the attributes declared here."""

    _outbox: Outbox
    _closed: bool
    _serializers: Any
    _compaction: CompactionGuard
    _warmup: TopicWarmup
    _metrics: ProducerMetrics
    health: dict[str, StoreHealth]
    produce: Callable[..., None]
    close: Callable[..., bool]

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
    ) -> int:
        """Queue each message dict (``value``, ``key``, ``partition``, ``timestamp``, ``headers``, ``callback``).

        Returns how many were queued. As in confluent-kafka, a malformed batch raises ``TypeError``
        before anything is queued, and a message that could not be queued gets ``_error`` (a
        ``KafkaError``) while the others go on. Unlike confluent-kafka's, each message is routed as
        ``produce`` routes it, and timestamps and headers are sent.
        """
        if self._closed:
            raise RuntimeError(CLOSED)
        default = on_delivery or callback
        _check_batch(topic, messages, partition, default, plain=not self._serializers)
        queued = 0
        for message in messages:
            try:
                self.produce(
                    topic,
                    message.get("value"),
                    message.get("key"),
                    message.get("partition", partition),
                    on_delivery=message.get("callback", default),
                    timestamp=message.get("timestamp", 0),
                    headers=message.get("headers"),
                )
            except Exception as exc:  # noqa: BLE001 - this message's failure, marked on it as confluent-kafka does
                message["_error"] = _batch_error(exc)
            else:
                queued += 1
        return queued

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Drop queued and in-flight records, as confluent-kafka's; each one purged reports a failed delivery."""
        self._outbox.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)

    def cluster_id(self, timeout: float = -1) -> str:
        """The cluster's id, as confluent-kafka's: to tell which cluster a producer writes to."""
        return self._outbox.cluster_id(timeout)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Rotate the SASL user and password without a new producer."""
        self._outbox.set_sasl_credentials(username, password)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Cluster metadata, as confluent-kafka's, for checking topics before producing."""
        return self._outbox.list_topics(topic, timeout)

    def metrics(self) -> dict[str, int]:
        """Counters by route and store, and each store's health (``store.<name>.healthy``), for dashboards."""
        out = self._metrics.snapshot()
        for name, health in self.health.items():
            out[f"store.{name}.healthy"] = int(health.healthy)
        return out

    def histograms(self) -> dict[str, dict[tuple[str, ...], HistogramSnapshot]]:
        """Message sizes by route and store put latencies, for ``gateway.prometheus``."""
        return self._metrics.histograms()

    @property
    def inner(self) -> Producer:
        """The wrapped librdkafka producer, for what this wrapper does not expose (outside the outbox's order)."""
        return self._outbox.librdkafka

    def prepare_topics(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, str | None]:
        """Learn now what the first large message to each topic would otherwise wait for.

        That is the topic's metadata (librdkafka connects to its leader) and its ``cleanup.policy``, which
        the producer asks of the brokers before the first reference or multi-segment message to a topic,
        delaying that message (see docs/peers-and-compaction.md); and, in a store that journals pending
        writes in batches (S3, GCS, Azure), the batch marker naming the topic's next ids, which its first
        payload would otherwise wait for (docs/stores.md). Returns the cleanup policy of each topic as
        the producer now knows it: None where the brokers cannot say or the check is off
        (``large.message.compaction.check``), which is then treated as not compacted. A store that
        fails or is still writing its marker after ``timeout`` is not waited for: the topic's first
        write then journals as it would have.
        """
        deadline = time.monotonic() + timeout
        journalled = [self._warmup.journal_ahead(topic) for topic in topics]  # beside the lookups
        known: dict[str, str | None] = {}
        for topic in topics:
            self._warmup.ask_now(topic, timeout)
            known[topic] = self._compaction.prepare(topic)
        self._warmup.wait(journalled, deadline - time.monotonic())
        return known

    def warm_topics(self, topics: Sequence[str]) -> None:
        """Start learning, in the background, what :meth:`prepare_topics` waits for; returns at once.

        For a producer made where waiting is not wanted (an application's start-up): each topic's
        metadata and its ``cleanup.policy`` are asked on worker threads, and the first large message to a
        topic waits only for what has not arrived by then. Nothing is raised; a lookup that fails counts
        as it would on the send path (docs/peers-and-compaction.md).
        """
        if self._closed:
            raise RuntimeError(CLOSED)
        for topic in topics:
            self._warmup.touch(topic)
            self._compaction.start(topic)
            self._warmup.journal_ahead(topic)


def _check_batch(topic: Any, messages: Any, partition: Any, callback: Any, *, plain: bool) -> None:
    """confluent-kafka's checks of a batch, with its words: ``TypeError`` before any message is queued."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, got {type(topic).__name__}")
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int, got {type(partition).__name__}")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable(err, msg), got {type(callback).__name__}")
    if not isinstance(messages, list):
        raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TypeError(f"Message at index {i} must be a dict, got {type(message).__name__}")
        for field in ("value", "key") if plain else ():
            if not isinstance(message.get(field), (bytes, str, bytearray, memoryview, type(None))):
                raise TypeError(f"Message {field} at index {i} must be bytes or str")
        part = message.get("partition", -1)
        if isinstance(part, bool) or not isinstance(part, int):
            raise TypeError(f"Message partition at index {i} must be int")
        if not callable(message.get("callback", print)):
            raise TypeError(f"Message callback at index {i} must be callable")


def _batch_error(exc: Exception) -> KafkaError:
    """The ``_error`` of a message ``produce`` refused: librdkafka's own error where it gave one."""
    if isinstance(exc, BufferError):
        return KafkaError(KafkaError._QUEUE_FULL, "Local: Queue full")
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    code = KafkaError._INVALID_ARG if isinstance(exc, (TypeError, ValueError)) else KafkaError._FAIL
    return KafkaError(code, f"{type(exc).__name__}: {exc}")


class TransactionMethods:
    """confluent-kafka's transaction methods, with the store writes of an aborted transaction undone.

    Segments and envelopes go through the one librdkafka producer, so they are in the open
    transaction like any record; what Kafka cannot abort is the payload a reference message put in
    a store, and that is what :mod:`gateway.producer.reference.transactions` tracks. The outbox
    puts the writes in flight ahead of each call and tells the reference writer what happened.
    """

    _outbox: Outbox

    def init_transactions(self, timeout: float = -1) -> None:
        """Register ``transactional.id`` with the broker; call once before the first ``begin_transaction``."""
        self._outbox.init_transactions(timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: envelopes and segments sent until the commit are visible together or not at all."""
        self._outbox.begin_transaction()

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float = -1) -> None:
        """Use ``HybridConsumer.safe_offsets()`` for ``positions``: an incomplete message is never skipped.

        Each offset's metadata goes to Kafka as its exact UTF-8 bytes (confluent-kafka would add a NUL):
        see :class:`~gateway.producer._outbox.ExactProducer`.
        """
        self._outbox.send_offsets_to_transaction(positions, group_metadata, timeout)

    def commit_transaction(self, timeout: float = -1) -> None:
        """Commit; on an error that requires an abort the writes stay tracked for ``abort_transaction``."""
        self._outbox.commit_transaction(timeout)

    def abort_transaction(self, timeout: float = -1) -> None:
        """Abort in Kafka, then delete the payloads the transaction's reference messages stored."""
        self._outbox.abort_transaction(timeout)
