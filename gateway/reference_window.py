"""Reference writes in flight: sent to their store, envelope not yet produced (``reference.write.window``).

With a window of 1 (the default) ``produce`` waits for each store write before it returns, and a
store failure raises from that ``produce``. A larger window lets a store that can pipeline
(:class:`~gateway.store.PutPipeline`, Redis standalone) take the next writes while earlier ones
are still answered; the producer confirms the oldest once the window is full, and produces its
envelope then. Envelopes and every other record still leave in the order ``produce`` was called:
before a plain or chunked record, a write to a store that cannot pipeline, and in ``poll``,
``flush``, ``purge`` and the transaction calls, every write in flight is confirmed first.

The price is when a failure is known. A write that fails once ``produce`` has returned takes the
same turn it would have taken in ``produce`` (chunked instead when the store is unavailable and the
message is small enough), and otherwise is reported to the message's ``on_delivery`` as
``(error, None)`` with the typed store error, the way Kafka reports a record it could not deliver.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.digests import PendingDigest
from gateway.outgoing import OutgoingMessage
from gateway.store import PutPipeline, Store


@dataclass(slots=True)
class WriteInFlight:
    """One message whose payload is on its way to ``store``; its envelope waits for the store's reply."""

    name: str
    store: Store
    pipeline: PutPipeline
    message: OutgoingMessage
    message_id: uuid.UUID
    locator: str
    digest: PendingDigest
    forced: bool
    sent_ms: int
    started: float


class WriteWindow:
    """The writes in flight, oldest first, and each store's pipeline; the lock lets ``poll`` run in another thread."""

    def __init__(self, size: int, stores: Mapping[str, Store]) -> None:
        self.size = size
        self.writes: deque[WriteInFlight] = deque()
        self.lock = threading.RLock()
        self._pipelines: dict[str, PutPipeline | None] = {}
        self._stores = stores

    def pipeline_for(self, name: str) -> PutPipeline | None:
        """``name``'s pipeline, opened on first use; None with a window of 1 or a store that cannot pipeline."""
        if self.size <= 1:
            return None
        if name not in self._pipelines:
            opener = getattr(self._stores[name], "put_pipeline", None)
            self._pipelines[name] = opener() if callable(opener) else None
        return self._pipelines[name]

    def full(self) -> bool:
        return len(self.writes) >= self.size

    def close(self) -> None:
        for pipeline in self._pipelines.values():
            if pipeline is not None:
                pipeline.close()
        self._pipelines.clear()


__all__ = ["WriteInFlight", "WriteWindow"]
