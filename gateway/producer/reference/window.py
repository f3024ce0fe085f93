"""Reference writes in flight: sent to their store, envelope not yet produced (``reference.write.window``).

With a window of 1 ``produce`` waits for each store write before it returns, and a store failure
raises from that ``produce``. A larger window (the default, 8) lets a store that can pipeline
(:class:`~gateway.store.PutPipeline`, Redis standalone) take the next writes while earlier ones
are still answered; the producer confirms the oldest once the window is full, and produces its
envelope then. A store that cannot pipeline (S3, a Redis cluster) writes as with a window of 1.

Two rules follow; the producer's outbox, which owns this window, is their one owner:

* **Order.** Every record leaves in the order ``produce`` was called. The producer's
  :class:`~gateway.producer._outbox.Outbox`, the one way to librdkafka, reaches it only through
  :meth:`WriteWindow.in_turn` and :meth:`WriteWindow.send_in_turn`, which settle every write in flight
  (under the window's lock) first, and a write counts as in flight until its envelope is queued. So
  no call site has to remember it, and a thread that polls or produces beside another cannot slip in
  between. A ``produce`` called back from inside a send (a callback served in its queue-full wait)
  is deferred behind it.
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
from functools import partial
from typing import Any, ParamSpec, TypeVar

from gateway.core.outgoing import DeliveryCallback, OutgoingMessage
from gateway.producer._delivery_error import delivery_error, failed_message
from gateway.producer.reference.digests import PendingDigest
from gateway.store import PutPipeline, Store

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_LINGER_S = 0.01
"""``reference.write.linger.ms``' default: far below any Kafka timeout, above a burst's spacing."""


IDLE_THREAD_S = 1.0
"""How long the linger thread waits for a write before it ends."""


@dataclass(slots=True)
class WriteInFlight:
    """One message whose payload is on its way to ``store``; its envelope waits for the store's reply.

    The entry knows how it resolves (``settle``, the reference writer's): the window calls it when
    the write's turn comes, so the window needs no writer wired in after construction.
    """

    name: str
    store: Store
    pipeline: PutPipeline | None
    """None for a write made in ``produce`` (a store that cannot pipeline); only pipelined writes wait here."""
    message: OutgoingMessage
    message_id: uuid.UUID
    locator: str
    digest: PendingDigest
    forced: bool
    sent_ms: int
    started: float
    settle: Callable[[WriteInFlight], None]
    queued_at: float = field(default_factory=time.monotonic)
    """When the window took it, on the clock its linger thread waits by."""


class WriteWindow:
    """The outbox's queue of pending writes, oldest first, each store's pipeline, and the thread that bounds their wait.

    The one owner of "earlier writes first", through three doors the outbox (and, for a write that
    does not join the queue, the reference writer) call: :meth:`in_turn` for a call that sends no
    record, :meth:`send_in_turn` for records that do not join the queue, :meth:`join` for a write that
    does. A write is taken off the queue when its turn comes and is held as ``resolving`` until its
    envelope is queued, so another thread still sees it in flight and waits for the lock. What runs
    while a turn is under way is the turn's own thread, called back from a queue-full wait: a
    ``produce`` then is deferred behind the turn (and behind every write queued before it), never
    sent in the middle of it; nothing is settled twice, nothing skipped.
    """

    def __init__(self, size: int, stores: Mapping[str, Store], linger_s: float = DEFAULT_LINGER_S) -> None:
        self.size = size
        self.writes: deque[WriteInFlight] = deque()
        self.resolving: WriteInFlight | None = None
        """The write whose envelope is being queued right now (off ``writes``, still in flight)."""
        self.turn: object | None = None
        """What is sending records right now, under the lock: a write settling or a call of :meth:`send_in_turn`."""
        self._deferred: deque[tuple[Callable[[], object], DeliveryCallback | None]] = deque()
        self.lock = threading.RLock()
        self.linger_s = linger_s
        self._failures: deque[tuple[DeliveryCallback, BaseException, OutgoingMessage | None]] = deque()
        self._pipelines: dict[str, PutPipeline | None] = {}
        self._stores = stores
        self._wake = threading.Condition(self.lock)
        self._thread: threading.Thread | None = None
        self._closed = False

    def pipeline_for(self, name: str) -> PutPipeline | None:
        """``name``'s pipeline, opened on first use; None with a window of 1 or a store that cannot pipeline."""
        if self.size <= 1:
            return None
        if name not in self._pipelines:
            self._pipelines[name] = self._stores[name].put_pipeline()
        return self._pipelines[name]

    def __len__(self) -> int:
        """Messages not yet handed to Kafka nor reported: writes in flight and failures to report."""
        return len(self.writes) + (self.resolving is not None) + len(self._failures)

    def on_own_thread(self) -> bool:
        """Whether the caller is the window's linger thread, which must not serve the application's reports."""
        return self._thread is threading.current_thread()

    def idle(self) -> bool:
        """Nothing in flight, nothing under way, nothing deferred: a record may go straight to librdkafka.

        Read without the lock: a thread that sees another's turn under way takes the lock and waits.
        """
        return not self.writes and self.turn is None and not self._deferred

    def add(self, write: WriteInFlight) -> None:
        """Take a write just sent; settle the oldest while the window is full."""
        with self.lock:
            self.writes.append(write)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._linger, name="gateway-write-window", daemon=True)
                self._thread.start()
            if len(self.writes) == 1:
                # Only a write into an empty queue changes when the linger thread must wake (the oldest's
                # due time). Woken for every write, it took the lock between each two writes of a burst,
                # and the producing thread waited for it (issue 42: about a third of a 1 MB Redis burst).
                self._wake.notify()
            while len(self.writes) >= self.size and self.turn is None:
                self._settle_oldest()

    def in_turn(self, action: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``action(*args, **kwargs)`` (a call that sends no record) once every write ahead of it is settled.

        Called back from inside a turn under way (an application callback served during its
        queue-full wait) it runs at once, without settling: the writes queued behind that turn
        must not go ahead of it.
        """
        with self.lock:
            self._drain_locked()
            return action(*args, **kwargs)

    def send_in_turn(
        self,
        action: Callable[..., T],
        *args: Any,
        on_delivery: DeliveryCallback | None = None,
        deferred: Callable[..., object] | None = None,
    ) -> T | None:
        """The one door for records that do not join the queue: ``action(*args)`` sends them after every write ahead.

        The call is the queue's turn while it runs, so a ``produce`` called back from inside it
        (an application's callback, served while a record of this turn waits for room in a full
        librdkafka queue) is not sent in the middle of it: it is deferred, and goes out once this
        turn and every write ahead of it are done, in the order it was called (by ``deferred`` when
        given: a plain record then waits for room as segments do). A deferred call that
        fails is reported to ``on_delivery`` by the next ``poll`` or ``flush``; None is returned for it.
        """
        with self.lock:
            if self.turn is not None:  # the lock is ours, so the turn is ours: a callback from inside it
                self._deferred.append((partial(deferred or action, *args), on_delivery))
                return None
            self._drain_locked()
            self.turn = action
            try:
                return action(*args)
            finally:
                self.turn = None
                self._run_deferred()

    def join(self, action: Callable[..., T], *args: Any, on_delivery: DeliveryCallback | None = None) -> T | None:
        """``action(*args)``, a reference write that joins the queue (it orders itself); deferred as
        :meth:`send_in_turn` defers when called back from inside a turn (None then)."""
        with self.lock:
            if self.turn is not None:
                self._deferred.append((partial(action, *args), on_delivery))
                return None
            try:
                return action(*args)
            finally:
                self._run_deferred()

    def drain(self) -> None:
        """Settle every write in flight, oldest first."""
        if not self.writes and self.turn is None:  # read without the lock: a write is only ever added by
            return  # a thread holding it, and one that sees none has no write of its own to order behind
        with self.lock:
            self._drain_locked()

    def _drain_locked(self) -> None:
        if self.turn is not None:  # a callback from inside a turn: what is queued behind it stays behind it
            return
        while self.writes:
            self._settle_oldest()
        self._run_deferred()

    def _settle_oldest(self) -> None:
        write = self.resolving = self.writes.popleft()
        self.turn = write
        try:
            write.settle(write)
        finally:
            self.resolving = self.turn = None
        self._run_deferred()

    def _run_deferred(self) -> None:
        """The calls deferred during a turn, each after every write ahead of it (all of the queue's)."""
        while self._deferred and self.turn is None:
            action, on_delivery = self._deferred.popleft()
            while self.writes:
                self._settle_oldest()
            self.turn = action
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - produce() has returned: its callback hears of it
                log.error("a produce() deferred behind the one under way failed: %s", exc)
                self.failed(on_delivery, exc)
            finally:
                self.turn = None

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
                    self.drain()  # its queue-full wait sleeps (on_own_thread): reports stay for the application's poll
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


__all__ = ["DEFAULT_LINGER_S", "IDLE_THREAD_S", "WriteInFlight", "WriteWindow"]
