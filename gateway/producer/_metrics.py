"""The producer's counters in one place, reported by ``HybridProducer.metrics()`` under stable dotted names.

The names are documented (``docs/policy.md``) and scraped by ``gateway.prometheus``, so the
snapshot keeps them exactly; the fields exist so that the code counting them is checked by mypy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from gateway.core.outgoing import OutgoingMessage
from gateway.histogram import LATENCY_BUCKETS, SIZE_BUCKETS, Histogram, HistogramSet, HistogramSnapshot

_PLAIN = ("plain", "")
"""The size histogram's labels for plain records (route, no store)."""


@dataclass
class ProducerMetrics:
    plain_messages: int = 0
    plain_bytes: int = 0
    plain_kafka_bytes: int = 0
    chunked_messages: int = 0
    chunked_bytes: int = 0
    chunked_segments: int = 0
    chunked_kafka_bytes: int = 0
    reference_messages: int = 0
    reference_bytes: int = 0
    reference_kafka_bytes: int = 0
    delivery_failures: int = 0
    rollbacks: int = 0
    rollbacks_skipped: int = 0
    rollback_failures: int = 0
    store_put_ms: int = 0
    store_puts: int = 0
    store_put_failures: int = 0
    fallbacks: int = 0
    fallback_refused: int = 0
    #: ``fallback_refused`` by reason (gateway.producer.reference._fallback): the route was forced, the payload
    #: would have gone inline unencrypted, or it is above ``reference.fallback.inline.max.bytes``.
    fallback_refused_forced: int = 0
    fallback_refused_encrypted: int = 0
    fallback_refused_oversize: int = 0
    #: Rate-limited warnings (one per store and outcome per ``log.warning.interval.ms``) not logged.
    warnings_suppressed: int = 0
    #: Payloads stored as they are although ``reference.compression`` is set: their samples did not compress.
    compression_skipped: int = 0
    reference_kafka_bytes_by_store: dict[str, int] = field(default_factory=dict)
    #: Message sizes by (route, store); store is "" off the reference route.
    message_sizes: HistogramSet = field(default_factory=lambda: HistogramSet(SIZE_BUCKETS))
    #: Seconds per store put, by (store,).
    store_put_seconds: HistogramSet = field(default_factory=lambda: HistogramSet(LATENCY_BUCKETS))

    def __post_init__(self) -> None:
        self._plain_sizes: Histogram | None = None  # message_sizes' plain histogram, once it exists

    def plain(self, message: OutgoingMessage) -> None:
        self.plain_record(message.size, message.key_size)

    def plain_record(self, size: int, key_size: int) -> None:
        self.plain_messages += 1
        self.plain_bytes += size
        self.plain_kafka_bytes += size + key_size
        sizes = self._plain_sizes
        if sizes is None:  # looked up once: this runs for every plain record
            sizes = self._plain_sizes = self.message_sizes.histogram(_PLAIN)
        sizes.observe(size)

    def chunked(self, message: OutgoingMessage, segments: int, kafka_bytes: int) -> None:
        self.chunked_messages += 1
        self.chunked_bytes += message.size
        self.chunked_segments += segments
        self.chunked_kafka_bytes += kafka_bytes
        self.message_sizes.observe(("chunked", ""), message.size)

    def reference(self, store: str, payload_bytes: int, kafka_bytes: int) -> None:
        self.reference_messages += 1
        self.reference_bytes += payload_bytes
        self.reference_kafka_bytes += kafka_bytes
        by_store = self.reference_kafka_bytes_by_store
        by_store[store] = by_store.get(store, 0) + kafka_bytes
        self.message_sizes.observe(("reference", store), payload_bytes)

    def store_put(self, store: str, seconds: float) -> None:
        self.store_puts += 1
        self.store_put_ms += int(seconds * 1000)
        self.store_put_seconds.observe((store,), seconds)

    def histograms(self) -> dict[str, dict[tuple[str, ...], HistogramSnapshot]]:
        """The distributions behind ``gateway_producer_message_bytes`` and ``gateway_producer_store_put_seconds``."""
        return {"message_bytes": self.message_sizes.snapshot(), "store_put_seconds": self.store_put_seconds.snapshot()}

    def snapshot(self) -> dict[str, int]:
        """Every counter under its dotted name (``plain.kafka.bytes``, ``reference.<store>.kafka.bytes``)."""
        out = {
            f.name.replace("_", "."): getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("reference_kafka_bytes_by_store", "message_sizes", "store_put_seconds")
        }
        out.update({f"reference.{name}.kafka.bytes": n for name, n in self.reference_kafka_bytes_by_store.items()})
        return out
