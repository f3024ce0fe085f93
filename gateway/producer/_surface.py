"""The rest of ``confluent_kafka.Producer``'s methods on :class:`~gateway.HybridProducer`.

Same names, arguments and return values as confluent-kafka's. ``produce_batch`` routes every
message as ``produce`` does (a large one is chunked or sent by reference), so its count is of
logical messages; a message that could not be queued gets an ``_error`` entry, as in
confluent-kafka, and headers are supported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from gateway.health import StoreHealth
from gateway.histogram import HistogramSnapshot
from gateway.producer._compaction import CompactionGuard
from gateway.producer._metrics import ProducerMetrics
from gateway.producer._outbox import Outbox

CLOSED = "Producer has been closed"
"""confluent-kafka's words for a call on a closed producer."""


class ProducerSurface:
    """Mixed into :class:`~gateway.HybridProducer`, which provides the attributes declared here."""

    _outbox: Outbox
    _compaction: CompactionGuard
    _metrics: ProducerMetrics
    health: dict[str, StoreHealth]
    produce: Callable[..., None]
    close: Callable[..., bool]

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def produce_batch(
        self, topic: str, messages: Sequence[dict[str, Any]], partition: int = -1, on_delivery: Any = None
    ) -> int:
        """Queue each message dict (``value``, ``key``, ``partition``, ``timestamp``, ``headers``, ``callback``).

        Returns how many were queued; each one that was not gets ``_error`` (a ``KafkaError``).
        """
        if not isinstance(messages, list):
            raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
        queued = 0
        for message in messages:
            if not isinstance(message, dict):
                raise TypeError(f"each message must be a dict, got {type(message).__name__}")
            try:
                self.produce(
                    topic,
                    message.get("value"),
                    message.get("key"),
                    message.get("partition", partition),
                    on_delivery=message.get("callback", on_delivery),
                    timestamp=message.get("timestamp", 0),
                    headers=message.get("headers"),
                )
            except BufferError:
                message["_error"] = KafkaError(KafkaError._QUEUE_FULL, "local queue full")
            except KafkaException as exc:
                message["_error"] = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else exc
            else:
                queued += 1
        return queued

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self._outbox.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)

    def cluster_id(self, timeout: float = -1) -> str | None:
        return self._outbox.kafka.cluster_id(timeout)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        self._outbox.kafka.set_sasl_credentials(username, password)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._outbox.kafka.list_topics(topic=topic, timeout=timeout)

    def metrics(self) -> dict[str, int]:
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
        return self._outbox.kafka

    def prepare_topics(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, str | None]:
        """Learn now what the first large message to each topic would otherwise wait for.

        That is the topic's metadata (librdkafka connects to its leader) and its ``cleanup.policy``, which
        the producer asks of the brokers before the first reference or multi-segment message to a topic,
        delaying that message (see docs/peers-and-compaction.md). Returns the cleanup policy of each topic
        as the producer now knows it: None where the brokers cannot say or the check is off
        (``large.message.compaction.check``), which is then treated as not compacted.
        """
        known: dict[str, str | None] = {}
        for topic in topics:
            self._outbox.kafka.list_topics(topic=topic, timeout=timeout)
            known[topic] = self._compaction.prepare(topic)
        return known


class ProducerTransactions:
    """confluent-kafka's transaction methods, with the store writes of an aborted transaction undone.

    Segments and envelopes go through the one librdkafka producer, so they are in the open
    transaction like any record; what Kafka cannot abort is the payload a reference message put in
    a store, and that is what :mod:`gateway.producer.reference.transactions` tracks. The outbox
    puts the writes in flight ahead of each call and tells the reference writer what happened.
    """

    _outbox: Outbox

    def init_transactions(self, timeout: float = -1) -> None:
        self._outbox.init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._outbox.begin_transaction()

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float = -1) -> None:
        """Use ``HybridConsumer.safe_offsets()`` for ``positions``: an incomplete message is never skipped.

        Each offset's metadata goes to Kafka as its exact UTF-8 bytes (confluent-kafka would add a NUL):
        see :class:`~gateway.librdkafka.group_offsets.ExactProducer`.
        """
        self._outbox.send_offsets_to_transaction(positions, group_metadata, timeout)

    def commit_transaction(self, timeout: float = -1) -> None:
        """Commit; on an error that requires an abort the writes stay tracked for ``abort_transaction``."""
        self._outbox.commit_transaction(timeout)

    def abort_transaction(self, timeout: float = -1) -> None:
        """Abort in Kafka, then delete the payloads the transaction's reference messages stored."""
        self._outbox.abort_transaction(timeout)
