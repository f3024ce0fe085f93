"""Counting-based auditing, the out-of-band completeness check LinkedIn runs on its pipelines.

The producer records ATTEMPT when a logical message is handed to it and SUCCESS or FAILURE when
its delivery is known; the consumer records SUCCESS for every message it hands out. Counts and
bytes are grouped by (topic, time bucket, audit type), so a job that compares produced and
consumed counts per topic and bucket can tell, without reading the data, whether anything went
missing. Auditors are called once per *logical* message, never per segment.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)

DEFAULT_BUCKET_MS = 600_000


class AuditType(str, Enum):
    ATTEMPT = "ATTEMPT"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


@dataclass(frozen=True, slots=True)
class AuditKey:
    topic: str
    bucket: int
    """``timestamp // bucket_ms``: the bucket's start is ``bucket * bucket_ms``."""
    audit_type: AuditType


@runtime_checkable
class Auditor(Protocol):
    def start(self) -> None: ...

    def record(self, topic: str, timestamp_ms: int, messages: int, size: int, audit_type: AuditType) -> None: ...

    def close(self) -> None: ...


class CountingAuditStats:
    """Thread-safe counts and bytes per :class:`AuditKey`; refuses updates once closed, as LinkedIn's does."""

    def __init__(self, bucket_ms: int = DEFAULT_BUCKET_MS) -> None:
        if bucket_ms < 1:
            raise ValueError("bucket_ms must be >= 1")
        self.bucket_ms = bucket_ms
        self._lock = threading.Lock()
        self._stats: dict[AuditKey, list[int]] = {}
        self._closed = False

    def update(self, topic: str, timestamp_ms: int, messages: int, size: int, audit_type: AuditType) -> None:
        key = AuditKey(topic, timestamp_ms // self.bucket_ms, audit_type)
        with self._lock:
            if self._closed:
                raise RuntimeError("audit stats are closed")
            counts = self._stats.setdefault(key, [0, 0])
            counts[0] += messages
            counts[1] += size

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def snapshot(self) -> dict[AuditKey, tuple[int, int]]:
        with self._lock:
            return {k: (v[0], v[1]) for k, v in self._stats.items()}

    def drain(self) -> dict[AuditKey, tuple[int, int]]:
        """Everything counted so far, and start again from zero (for periodic publishing)."""
        with self._lock:
            out = {k: (v[0], v[1]) for k, v in self._stats.items()}
            self._stats.clear()
            return out

    def __iter__(self) -> Iterator[tuple[AuditKey, tuple[int, int]]]:
        return iter(self.snapshot().items())


class CountingAuditor:
    """Keeps the counts in memory; the base of the other auditors and handy in tests."""

    def __init__(self, bucket_ms: int = DEFAULT_BUCKET_MS) -> None:
        self.stats = CountingAuditStats(bucket_ms)

    def start(self) -> None:
        pass

    def record(self, topic: str, timestamp_ms: int, messages: int, size: int, audit_type: AuditType) -> None:
        self.stats.update(topic, timestamp_ms, messages, size, audit_type)

    def close(self) -> None:
        self.stats.close()

    def counts(self, audit_type: AuditType) -> dict[tuple[str, int], tuple[int, int]]:
        """``(topic, bucket) -> (messages, bytes)`` for one audit type."""
        return {(k.topic, k.bucket): v for k, v in self.stats.snapshot().items() if k.audit_type is audit_type}


class LoggingAuditor(CountingAuditor):
    """Logs the counts per key at ``flush()`` and ``close()`` (LinkedIn's ``LoggingAuditor``)."""

    def flush(self) -> None:
        for key, (messages, size) in sorted(self.stats.drain().items(), key=lambda kv: repr(kv[0])):
            log.info(
                "audit %s bucket=%d %s: %d messages, %d bytes",
                key.topic,
                key.bucket,
                key.audit_type.value,
                messages,
                size,
            )

    def close(self) -> None:
        self.flush()
        super().close()


class TopicAuditor(CountingAuditor):
    """Publishes the counts as JSON records to an audit topic through a producer the application holds.

    ``flush()`` sends one record per (topic, bucket, type) counted since the last flush, keyed by
    the audited topic, through the producer's plain route. Call it periodically, and ``close()``
    sends what is left.
    """

    def __init__(self, producer: Any, audit_topic: str, bucket_ms: int = DEFAULT_BUCKET_MS) -> None:
        super().__init__(bucket_ms)
        self.producer = producer
        self.audit_topic = audit_topic

    def flush(self) -> int:
        sent = 0
        for key, (messages, size) in self.stats.drain().items():
            record = {
                "topic": key.topic,
                "bucket": key.bucket,
                "bucket_ms": self.stats.bucket_ms,
                "type": key.audit_type.value,
                "messages": messages,
                "bytes": size,
            }
            # the raw librdkafka producer underneath, so publishing the audit is not itself audited
            raw = getattr(self.producer, "inner", self.producer)
            raw.produce(self.audit_topic, json.dumps(record).encode(), key=key.topic.encode())
            sent += 1
        return sent

    def close(self) -> None:
        self.flush()
        super().close()
