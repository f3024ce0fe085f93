"""Reference writes in flight: sent to their store, envelope not yet produced (``reference.write.window``).

With a window of 1 ``produce`` waits for each store write before it returns, and a store failure
raises from that ``produce``. A larger window (the default, 8) lets a store that can pipeline
(:class:`~gateway.store.PutPipeline`, Redis standalone) take the next writes while earlier ones
are still answered; the producer confirms the oldest once the window is full, and produces its
envelope then. A store that cannot pipeline (S3, a Redis cluster) writes as with a window of 1.

Two rules follow; the producer's outbox, which owns this window, is their one owner:

* **Order.** Every record leaves in the order ``produce`` was called. The producer's
  :class:`~gateway.producer._outbox.Outbox`, the one way to librdkafka, settles every write in flight
  (under the window's lock) before each call that sends or waits for records, and a write stays in
  the window until its envelope is queued. So no call site has to remember it, and a thread that
  polls or produces beside another cannot slip in between.
* **Time.** A write waits in the window at most ``reference.write.linger.ms`` after it was sent,
  whatever the application does: a thread of the window's own settles it then if no call did. The
  store's reply and queueing the envelope follow (a full librdkafka queue is waited on for at most
  ``large.message.block.ms``, then the payload is deleted and the failure reported). That bound is
  what makes ``gateway gc`` safe for a producer that goes quiet (``docs/stores.md``).

The price is when a failure is known. A write that fails once ``produce`` has returned takes the
same turn it would have taken in ``produce`` (chunked instead when the store is unavailable and the
message is small enough), and otherwise is reported to the message's ``on_delivery`` as
``(err, msg)``, ``err`` a ``KafkaError`` whose ``cause`` is the typed store error and ``msg`` the
caller's message (:mod:`gateway.producer._delivery_error`), the way Kafka reports a record it could not deliver:
from ``poll`` or ``flush``, like every delivery report, never from the window's own thread.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.producer._delivery_error import delivery_error, failed_message
from gateway.producer._queue_full import without_serving_reports
from gateway.producer.outgoing import DeliveryCallback, OutgoingMessage
from gateway.producer.reference.digests import PendingDigest
from gateway.store import PutPipeline, Store

log = logging.getLogger(__name__)

DEFAULT_LINGER_S = 0.01
"""``reference.write.linger.ms``' default: far below any Kafka timeout, above a burst's spacing."""


IDLE_THREAD_S = 1.0
"""How long the linger thread waits for a write before it ends."""


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
    queued_at: float = field(default_factory=time.monotonic)
    """When the window took it, on the clock its linger thread waits by."""


class WriteWindow:
    """The writes in flight, oldest first, each store's pipeline, and the thread that bounds their wait.

    ``settle`` (the reference writer's) confirms one write and queues its envelope, or takes the
    turn a failed write takes; the window calls it for the oldest write, under its lock, and drops
    the write only afterwards, so whoever holds the lock never sees a write half gone.
    """

    def __init__(self, size: int, stores: Mapping[str, Store], linger_s: float = DEFAULT_LINGER_S) -> None:
        self.size = size
        self.writes: deque[WriteInFlight] = deque()
        self.lock = threading.RLock()
        self.linger_s = linger_s
        self._settle: Callable[[WriteInFlight], None] = _unset
        self._settling = False
        self._failures: deque[tuple[DeliveryCallback, BaseException, OutgoingMessage | None]] = deque()
        self._pipelines: dict[str, PutPipeline | None] = {}
        self._stores = stores
        self._wake = threading.Condition(self.lock)
        self._thread: threading.Thread | None = None
        self._closed = False

    def settle_with(self, settle: Callable[[WriteInFlight], None]) -> None:
        self._settle = settle

    def pipeline_for(self, name: str) -> PutPipeline | None:
        """``name``'s pipeline, opened on first use; None with a window of 1 or a store that cannot pipeline."""
        if self.size <= 1:
            return None
        if name not in self._pipelines:
            self._pipelines[name] = self._stores[name].put_pipeline()
        return self._pipelines[name]

    def __len__(self) -> int:
        """Messages not yet handed to Kafka nor reported: writes in flight and failures to report."""
        return len(self.writes) + len(self._failures)

    def add(self, write: WriteInFlight) -> None:
        """Take a write just sent; settle the oldest while the window is full."""
        with self.lock:
            self.writes.append(write)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._linger, name="gateway-write-window", daemon=True)
                self._thread.start()
            self._wake.notify()
            while len(self.writes) >= self.size:
                self._settle_oldest()

    def drain(self) -> None:
        """Settle every write in flight, oldest first; a no-op inside a settle (its envelope is being queued)."""
        if not self.writes:  # read without the lock: a write is only ever added by a thread holding it, and
            return  # a thread that sees none here has no write of its own in flight to order behind
        with self.lock:
            if self._settling:
                return
            while self.writes:
                self._settle_oldest()

    def _settle_oldest(self) -> None:
        self._settling = True
        try:
            self._settle(self.writes[0])
        finally:
            self.writes.popleft()
            self._settling = False

    def failed(
        self, on_delivery: DeliveryCallback | None, error: BaseException, message: OutgoingMessage | None = None
    ) -> None:
        """A write that failed after ``produce`` returned, for the next ``poll`` or ``flush`` to report."""
        if on_delivery is not None:
            with self.lock:
                self._failures.append((on_delivery, error, message))

    def report_failures(self) -> int:
        """Call ``on_delivery(err, msg)`` for each failure noted (``err`` a ``KafkaError`` whose ``cause`` is
        the failure, ``msg`` the caller's message with ``error()`` set); how many were reported."""
        if not self._failures:
            return 0
        with self.lock:
            failures, self._failures = self._failures, deque()
        for on_delivery, error, message in failures:
            err = delivery_error(error)
            on_delivery(err, None if message is None else failed_message(message, err))
        return len(failures)

    def _linger(self) -> None:
        """Settle the writes once the oldest has waited ``linger_s``, for a producer nobody calls.

        The thread ends after a second without writes (the next write starts another), so a
        producer dropped without ``close()`` is not kept alive by it.
        """
        with self._wake:
            while not self._closed:
                if not self.writes:
                    self._wake.wait(IDLE_THREAD_S)
                    if not self.writes:
                        break
                    continue
                due = self.writes[0].queued_at + self.linger_s - time.monotonic()
                if due > 0:
                    self._wake.wait(due)
                    continue
                try:
                    with without_serving_reports():  # delivery reports stay for the application's poll
                        self.drain()
                except Exception:  # settle reports its own failures; this is a defect, logged, not fatal
                    log.exception("settling the reference write window failed")
            self._thread = None

    def close(self) -> None:
        """Settle what is in flight, stop the linger thread, give the pipelines back."""
        self.drain()
        with self.lock:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        for pipeline in self._pipelines.values():
            if pipeline is not None:
                pipeline.close()
        self._pipelines.clear()


def _unset(write: WriteInFlight) -> None:
    raise RuntimeError(f"the write window has no writer to settle {write.locator}")


__all__ = ["DEFAULT_LINGER_S", "IDLE_THREAD_S", "WriteInFlight", "WriteWindow"]
