"""What every payload store promises, and the pieces the Redis and S3 stores share.

A store is the "claim-check" half of reference messaging: the producer writes the payload, sends a
small envelope through Kafka, and deletes the payload again if Kafka refuses the envelope. The one
thing no peer handles is a process that dies between those steps (peers.md §9.3), so every store
keeps a *pending journal*: a write is marked pending no later than the payload becomes visible, and
the mark is cleared once the envelope's fate is known (delivered: ``clear_pending``; refused:
``delete``). Whatever survives in the journal is a write whose outcome nobody learned, which a
sweeper can reconcile against the topic. Pending means "unknown", not "orphan": the envelope may
have been delivered just before the crash, so a sweeper must look for it before deleting.

The :class:`Store` protocol itself lives in :mod:`gateway.store`, so that the library can type its
stores without importing this package (which imports the library); it is re-exported here.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.errors import LocatorError, StoreUnavailableError
from gateway.histogram import LATENCY_BUCKETS, HistogramSet, HistogramSnapshot
from gateway.store import Payload as Payload
from gateway.store import Store as Store

_StoreT = TypeVar("_StoreT", bound="StoreLifecycle")

_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
TOPIC_PATTERN = r"[a-zA-Z0-9._-]{1,249}"
"""Kafka's legal topic characters and length (``org.apache.kafka.common.internals.Topic``)."""

UUID_PATTERN = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
"""The canonical (``str(uuid.UUID)``) form only: one spelling per id, so one key per id."""


def validate_topic(topic: str) -> str:
    """``topic`` if Kafka would accept it as a name; ``ValueError`` otherwise.

    Kafka itself refuses ``.`` and ``..``; refusing them here too means no key or object path built
    from a topic can contain a whole ``..`` segment. ``a..b`` is a legal topic and harmless.
    """
    if not isinstance(topic, str) or _TOPIC.fullmatch(topic) is None or topic in (".", ".."):
        raise ValueError(f"not a legal Kafka topic name: {topic!r}")
    return topic


def validate_message_id(message_id: uuid.UUID) -> uuid.UUID:
    if not isinstance(message_id, uuid.UUID):
        raise ValueError(f"message_id must be a uuid.UUID, got {type(message_id).__name__}")
    return message_id


def parse_topic(text: str, locator: str) -> str:
    """The topic part of a locator, or :class:`LocatorError`."""
    if _TOPIC.fullmatch(text) is None or text in (".", ".."):
        raise LocatorError(f"locator {locator!r} names an illegal topic")
    return text


def parse_uuid(text: str, locator: str) -> uuid.UUID:
    """The message-id part of a locator; only the canonical spelling is accepted."""
    if re.fullmatch(UUID_PATTERN, text) is None:
        raise LocatorError(f"locator {locator!r} does not hold a canonical UUID")
    return uuid.UUID(text)


MAX_OBJECT_LOCATOR_LENGTH = 1024
"""The longest object-store locator accepted; longer is never written."""


def parse_object_locator(
    locator: object, *, scheme: str, bucket: str, prefix: str, key_re: re.Pattern[str], label: str
) -> tuple[str, str, str, uuid.UUID]:
    """``<scheme>://<bucket>/<prefix><topic>/<uuid>`` exactly: ``(bucket, key, topic, id)``, or :class:`LocatorError`.

    The confinement rule every object store (S3, GCS, Azure Blob) applies before a request: anything
    a URL or path layer could reinterpret is refused rather than normalised (non-ASCII look-alikes
    and bidi characters, controls and spaces, ``%`` escapes, ``\\``, ``?``, ``#``), and the key must
    match the one pattern the store writes, which excludes ``//``, absolute keys and ``.``/``..``
    segments, so nothing outside the bucket and prefix can be named.
    """
    if not isinstance(locator, str) or not 0 < len(locator) <= MAX_OBJECT_LOCATOR_LENGTH:
        raise LocatorError(f"malformed {label} locator {locator!r:.200}")
    if not locator.isascii() or not locator.isprintable() or any(c in locator for c in " %\\?#"):
        raise LocatorError(f"{label} locator {locator!r:.200} contains characters this store never writes")
    found_scheme, sep, rest = locator.partition("://")
    if found_scheme != scheme or not sep:
        raise LocatorError(f"{label} locator {locator!r} does not use the {scheme}:// scheme")
    found_bucket, _, key = rest.partition("/")
    if found_bucket != bucket:
        raise LocatorError(f"{label} locator {locator!r} names bucket {found_bucket!r}, not {bucket!r}")
    match = key_re.fullmatch(key)
    if match is None:
        raise LocatorError(f"{label} locator {locator!r} is not of the form {scheme}://{bucket}/{prefix}<topic>/<uuid>")
    return found_bucket, key, parse_topic(match[1], locator), parse_uuid(match[2], locator)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class StoreLifecycle(Store):
    """What both stores share around their I/O: metrics, closing, and refusing calls once closed.

    ``close()`` closes the client only when the store was told it owns it (``close_client=True``):
    the caller usually shares one client among several users.
    """

    client: Any
    name: str
    _close_client: bool
    _closed: bool
    _metrics: StoreMetrics

    def metrics(self) -> dict[str, int | float]:
        return self._metrics.snapshot()

    def histograms(self) -> dict[str, dict[tuple[str, ...], HistogramSnapshot]]:
        """Seconds per operation, for ``gateway.prometheus``'s ``gateway_store_operation_seconds``."""
        return self._metrics.histograms()

    def _done(self, op: str, started: float, locator: str, nbytes: int = 0) -> None:
        """Count a finished put/get/delete and log it at DEBUG: what, where, how big, how long; never the bytes."""
        self._metrics.done(op, started, nbytes)
        log = logging.getLogger(type(self).__module__)
        if log.isEnabledFor(logging.DEBUG):
            elapsed_ms = (time.perf_counter() - started) * 1000
            log.debug("store %s: %s %s: %d bytes in %.1f ms", self.name, op, locator, nbytes, elapsed_ms)

    def put_done(self, started: float, locator: str, nbytes: int, *, journalled: bool = False) -> None:
        """Count a put confirmed apart from the call that sent it (a pipelined write), and its pending mark."""
        self._done("put", started, locator, nbytes)
        if journalled:
            self._journaled("marked", [locator])

    def _journaled(self, action: str, locators: Sequence[str]) -> None:
        """Count pending marks set or cleared, and log their locators at DEBUG (the first 20 of a batch)."""
        self._metrics.add(f"pending_{action}", len(locators))
        log = logging.getLogger(type(self).__module__)
        if log.isEnabledFor(logging.DEBUG):
            shown = ", ".join(locators[:20]) + (f" and {len(locators) - 20} more" if len(locators) > 20 else "")
            log.debug("store %s: journal %s %d pending: %s", self.name, action, len(locators), shown)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._close_client:
            self.client.close()

    def __enter__(self: _StoreT) -> _StoreT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError(f"{self!r} is closed")


class StoreMetrics:
    """Counters shared by the stores; a lock because a producer's delivery callbacks run on another thread."""

    __slots__ = ("_counts", "_lock", "_seconds")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int | float] = {
            "puts": 0, "gets": 0, "deletes": 0, "bytes_written": 0, "bytes_read": 0, "errors": 0,
            "not_found": 0, "locator_rejected": 0, "pending_marked": 0, "pending_cleared": 0,
            "last_put_latency_ms": 0.0, "last_get_latency_ms": 0.0, "last_delete_latency_ms": 0.0,
            "last_latency_ms": 0.0,
        }  # fmt: skip
        self._seconds = HistogramSet(LATENCY_BUCKETS)

    def add(self, key: str, amount: int = 1) -> None:
        """Count ``amount`` more of ``key`` (errors, retries); safe from any thread."""
        with self._lock:
            self._counts[key] += amount

    def done(self, op: str, started: float, nbytes: int = 0) -> None:
        """Count a completed operation (``put``/``get``/``delete``) with its latency and byte count."""
        seconds = time.perf_counter() - started
        latency = seconds * 1000.0
        self._seconds.observe((op,), seconds)
        with self._lock:
            self._counts[f"{op}s"] += 1
            if op == "put":
                self._counts["bytes_written"] += nbytes
            elif op == "get":
                self._counts["bytes_read"] += nbytes
            self._counts[f"last_{op}_latency_ms"] = latency
            self._counts["last_latency_ms"] = latency

    def snapshot(self) -> dict[str, int | float]:
        """A copy of the counters at this moment, for a store's ``metrics()``."""
        with self._lock:
            return dict(self._counts)

    def histograms(self) -> dict[str, dict[tuple[str, ...], HistogramSnapshot]]:
        """Seconds per operation, by (op,): behind ``gateway_store_operation_seconds``."""
        return {"operation_seconds": self._seconds.snapshot()}


@dataclass(frozen=True, slots=True)
class RetentionInfo:
    """How long Kafka may still serve a record of a topic, from its configuration."""

    retention_ms: int | None
    """``retention.ms``; ``None`` when infinite (-1) or when compaction keeps records without a deadline."""
    segment_ms: int
    """``segment.ms``: a record lives until its *segment* ages out, so up to this much past retention."""

    def payload_ttl_seconds(self, margin_seconds: int) -> int | None:
        """A store TTL no shorter than the longest time a consumer can still read the envelope.

        Kafka deletes whole segments, and only once the newest record in the segment is older than
        ``retention.ms``; a segment is closed after ``segment.ms`` (7 days by default). So the oldest
        record of a segment stays readable for up to ``retention.ms + segment.ms`` plus the retention
        check interval, which ``margin_seconds`` should cover. A consumer replaying from the oldest
        retained offset must still find every payload; a shorter TTL turns retention into data loss.
        """
        if self.retention_ms is None:
            return None
        return -(-(self.retention_ms + self.segment_ms) // 1000) + max(0, margin_seconds)


def topic_retention(admin_client: Any, topic: str, *, timeout: float = 30.0) -> RetentionInfo:
    """Read ``retention.ms``, ``segment.ms`` and ``cleanup.policy`` through confluent-kafka's AdminClient."""
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]  # re-exported

    resource = ConfigResource(ResourceType.TOPIC, validate_topic(topic))
    futures = admin_client.describe_configs([resource], request_timeout=timeout)
    entries = next(iter(futures.values())).result(timeout=timeout)

    def value(name: str, default: str) -> str:
        entry = entries.get(name)
        return default if entry is None or entry.value is None else str(entry.value)

    policies = {p.strip() for p in value("cleanup.policy", "delete").split(",")}
    retention = int(value("retention.ms", "604800000"))
    segment = int(value("segment.ms", "604800000"))
    # A compact-only topic keeps the latest record per key forever; its payloads must not expire.
    if retention < 0 or "delete" not in policies:
        return RetentionInfo(None, segment)
    return RetentionInfo(retention, segment)
