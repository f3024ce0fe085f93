"""Fetch-ahead of referenced payloads for a reader: find envelopes early, fetch them in record order.

Both readers use it: the consumer scans each fetched batch, a Spark task each batch it reads.
Payloads of the next envelopes are then on their way while the application (or the task) works
on the current message, within the resolver's byte budget. Keys are whatever the reader uses to
name a record (the consumer ``(topic, partition, offset)``, a range task the offset); each record's
topic travels beside its key, since an envelope is bound to the topic its payload was written for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from gateway.consumer.resolver import GROUP_MAX_BYTES, GROUP_MAX_ITEMS, Admission, Resolver
from gateway.protocol.envelope import Envelope, looks_like_envelope
from gateway.protocol.envelope_reader import read_envelope
from gateway.protocol.headers import Headers
from gateway.protocol.peers import PeerRecord
from gateway.streams.payload_stream import PayloadStream

ScanItem = tuple[Hashable, str, "bytes | None", "Headers | None"]
"""``(key, topic, value, headers)`` of a fetched record."""


class ReferenceFetcher:
    """Schedules prefetches on a :class:`~gateway.consumer.resolver.Resolver` and resolves through it."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self._pending: dict[Hashable, Admission] = {}  # scanned and judged, not yet handled by the reader
        self._queue: deque[Hashable] = deque()  # scanned, not yet scheduled, in record order

    @property
    def enabled(self) -> bool:
        return bool(self.resolver.stores)

    def scan(self, records: Iterable[ScanItem]) -> None:
        """Note the envelopes among ``records`` and start fetching them as the budget allows.

        Broken ones are skipped here: the pipeline reports them when the record's turn comes; those
        the resolver refuses (:meth:`Resolver.judge`) are not fetched, and :meth:`resolve` raises why.
        """
        for key, topic, value, headers in records:
            if not looks_like_envelope(value):  # necessary for an envelope that decodes; cheap
                continue
            envelope = read_envelope(value, headers).envelope
            if envelope is None:
                continue
            judged = self._pending[key] = self.resolver.judge(envelope, topic)
            if judged.refusal is None:
                self._queue.append(key)
        self.schedule()

    def scan_messages(self, batch: list[Any]) -> None:
        """:meth:`scan` over the consumer's fetched records (confluent-kafka ``Message`` objects), keyed by
        ``(topic, partition, offset)``: nothing is built for a consumer without stores."""
        if self.enabled:
            self.scan(
                ((m.topic(), m.partition(), m.offset()), m.topic(), m.value(), m.headers())
                for m in batch
                if m.error() is None
            )

    def schedule(self) -> None:
        """Start fetches in record order until the byte budget says stop.

        Consecutive small payloads of one store that can return several at once go as one group:
        a round trip each would be most of their cost.
        """
        while self._queue:
            key = self._queue[0]
            envelope = self._envelope_at(key)
            if envelope is not None and self.resolver.groups(envelope):
                group = self._group_at_head(envelope.store)
                taken = self.resolver.prefetch_many(group)
                for _ in range(taken):
                    self._queue.popleft()
                if taken < len(group):
                    return  # over budget: resume here when a payload has been taken
                continue
            if envelope is not None and not self.resolver.prefetch(key, envelope):
                return  # over budget: resume here when a payload has been taken
            self._queue.popleft()

    def _envelope_at(self, key: Hashable) -> Envelope | None:
        judged = self._pending.get(key)
        return None if judged is None or judged.refusal is not None else judged.envelope

    def _group_at_head(self, store: str) -> list[tuple[Hashable, Envelope]]:
        """The queued envelopes from the head on that can share one request to ``store``."""
        group: list[tuple[Hashable, Envelope]] = []
        size = 0
        for key in self._queue:
            envelope = self._envelope_at(key)
            if envelope is None or envelope.store != store or not self.resolver.groups(envelope):
                break
            if group and (len(group) >= GROUP_MAX_ITEMS or size + envelope.size > GROUP_MAX_BYTES):
                break
            group.append((key, envelope))
            size += envelope.size
        return group

    def done(self, key: Hashable) -> None:
        """The reader handled the record at ``key``: it is no longer worth fetching ahead.

        A payload fetched ahead and not taken (the record was filtered as a duplicate, or was
        invalid) is dropped here, so it cannot hold on to the budget.
        """
        self._pending.pop(key, None)
        if self.resolver.forget(key):
            self.schedule()

    def resolve(self, key: Hashable, envelope: Envelope, *, topic: str) -> bytes | PayloadStream:
        """The verified payload of the envelope in a record of ``topic`` (prefetched or fetched now); raises
        the typed error. One judged at the scan is not judged again.
        """
        judged = self._pending.pop(key, None)
        if judged is None or judged.envelope != envelope or judged.topic != topic:
            judged = self.resolver.judge(envelope, topic)
        try:
            return self.resolver.resolve_admitted(key, judged)
        finally:
            self.schedule()

    def resolve_peer(self, record: PeerRecord, *, topic: str) -> tuple[bytes | None, bytes | None]:
        """``(key, value)`` of a record of ``topic`` another library wrote, its pointers followed."""
        return self.resolver.resolve_peer(record, topic=topic)

    def discard(self, keep: Callable[[Hashable], bool]) -> None:
        """Forget every envelope whose key ``keep`` rejects (seek, revoke)."""
        self.resolver.discard(keep)
        for key in [k for k in self._pending if not keep(k)]:
            del self._pending[key]
        if self._queue:
            self._queue = deque(k for k in self._queue if keep(k))

    def clear(self) -> None:
        self.resolver.discard(lambda _: False)
        self._pending.clear()
        self._queue.clear()
