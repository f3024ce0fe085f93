"""What ``poll``/``consume`` handed over that has not reached the application, and the commits it bounds.

The consumer counts a message as delivered, and a commit covers it, once ``poll`` or ``consume``
returns it: in a synchronous program that is the moment the application has it. A driver that
carries the result to another thread cannot promise that. In :mod:`gateway.aio` the task awaiting
a worker's ``poll`` can be cancelled (``asyncio.wait_for``) after that ``poll`` returned and
before the message reached the task; a commit would then cover a message nobody saw.

Such a driver runs each ``poll``/``consume`` through :meth:`Handoff.call` with a :class:`PendingDelivery` and
reports, from its own thread, whether the result reached the application. Until the consumer
has acted on that report (in its next call):

- commits stay where they stood before the call, per partition the call delivered from;
- a result that did not arrive is handed out again by the next ``poll``/``consume``, before
  anything newer (messages already deserialized, and an error that carries a message, raised
  again), and commits stay below it until it has arrived.

Messages the consumer itself keeps back for its next call (``consume.max.bytes``, the ones behind
a refused value) are the inbox's (:meth:`gateway.consumer._inbox.Inbox.keep`): they bound commits
by the same rule, and a seek or revoke of their partition drops them.

This module decides what "received" means for a driver's results, and sets each partition's
floor in the commit translator's :class:`~gateway.core.commits.CommitFloors` whenever it changes,
so the translator reads it without asking up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, TypeVar

from gateway.core.commits import CommitFloors
from gateway.core.offsets import Progress
from gateway.protocol.records import TopicPartitionKey

T = TypeVar("T")


class Fate(Enum):
    PENDING = "pending"
    RECEIVED = "received"
    RETURNED = "returned"


class PendingDelivery:
    """One ``poll``/``consume`` result on its way to the application.

    The driver calls :meth:`received` or :meth:`returned` from its own thread; the consumer's
    thread acts on it at the start of its next :meth:`Handoff.call` (attribute writes only, so no
    lock is needed).
    """

    __slots__ = ("fate", "floors", "inherited", "items", "left")

    def __init__(self) -> None:
        self.fate = Fate.PENDING
        self.floors: dict[TopicPartitionKey, int] = {}
        """Per partition, the offset no commit may pass while this delivery is out."""
        self.inherited: dict[TopicPartitionKey, int] = {}
        """Floors of returned items this call handed out again (see :meth:`Handoff.take_one`)."""
        self.items: list[Any] = []
        self.left = 0

    def received(self) -> None:
        """The result reached the application (a value returned, or an error raised to the caller)."""
        if self.fate is Fate.PENDING:
            self.fate = Fate.RECEIVED

    def returned(self) -> None:
        """The result did not reach the application (the call was cancelled): hand it out again."""
        self.fate = Fate.RETURNED


class Handoff:
    """The consumer's deliveries: open ones, returned items to hand out first, and the floors they set.

    ``progress`` reads the delivered-offset tracker (after anything handed out by count alone is
    noted); ``on_return`` runs before returned items are queued, so that nothing the consumer
    would hand out by count goes before them.
    """

    def __init__(
        self,
        progress: Callable[[], Mapping[TopicPartitionKey, Progress]],
        on_return: Callable[[], None],
        floors: CommitFloors | None = None,
    ) -> None:
        self._progress = progress
        self._on_return = on_return
        self._floors = CommitFloors() if floors is None else floors
        self._lent_floors: dict[TopicPartitionKey, int] = {}  # what was last set in _floors
        self._open: list[PendingDelivery] = []  # lent, fate not acted on yet (the running call's included)
        self._back: list[PendingDelivery] = []  # returned, some of their items still in `returned`
        self._current: PendingDelivery | None = None
        self._before: Mapping[TopicPartitionKey, Progress] = {}  # progress when the running call began
        self.returned: deque[tuple[Any, PendingDelivery]] = deque()
        """Items of returned deliveries, each with its delivery, in the order they were first handed out."""
        self.returned_total = 0
        """Items that came back since the consumer started."""

    def call(self, delivery: PendingDelivery | None, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the consumer's thread, after acting on every delivery whose fate is known.

        With ``delivery``, ``fn`` is ``poll`` or ``consume`` and its result is lent: commits stay where
        they stood before the call until the delivery is received.
        """
        self.settle()
        if delivery is None:
            return fn(*args, **kwargs)
        before = self._before = self._progress()  # bounds a commit inside the call too (a revoke)
        self._open.append(delivery)
        self._current = delivery
        self._publish()
        try:
            out = fn(*args, **kwargs)
        except BaseException as exc:
            self._lent(delivery, before, [exc] if getattr(exc, "kafka_message", None) is not None else [])
            raise
        self._lent(delivery, before, out if isinstance(out, list) else [] if out is None else [out])
        return out

    def _lent(self, delivery: PendingDelivery, before: Mapping[TopicPartitionKey, Progress], items: list[Any]) -> None:
        """The call is over: the delivery keeps floors only for partitions it delivered from."""
        self._current = None
        delivery.items = items
        if not items:
            self._open.remove(delivery)
            self._publish()
            return
        floors: dict[TopicPartitionKey, int] = {}
        after = self._progress()
        for tp, (_, delivered, origin) in after.items():
            was = before.get(tp)
            if was is None:
                floors[tp] = origin  # a partition new to the tracker: from its first offset
            elif was[1] != delivered:
                floors[tp] = was[0]  # where a commit stood before the call
        for tp, was in before.items():
            if tp not in after:  # forgotten during the call (revoked): its commit stays bounded too
                floors[tp] = was[0]
        _lower(floors, delivery.inherited)
        delivery.floors, delivery.inherited = floors, {}
        self._publish()

    def settle(self) -> None:
        """Act on every delivery whose fate the driver reported: received ones go, returned ones come back."""
        if not self._open:
            return
        if len(self._open) == 1 and self._open[0].fate is Fate.RECEIVED:  # the common case
            self._open.clear()
            self._publish()
            return
        back = [d for d in self._open if d.fate is Fate.RETURNED and d is not self._current]
        self._open = [d for d in self._open if d.fate is Fate.PENDING or d is self._current]
        if not back:
            self._publish()
            return
        self._on_return()
        for delivery in reversed(back):  # the oldest ends up first, ahead of what was returned before
            delivery.left = len(delivery.items)
            self.returned_total += delivery.left
            self.returned.extendleft((item, delivery) for item in reversed(delivery.items))
        self._back.extend(back)
        self._publish()

    def take_one(self) -> Any:
        """The first returned item: a message, or an error raised again. Its floors pass to the running delivery."""
        item, origin = self.returned.popleft()
        origin.left -= 1
        if origin.left == 0:
            self._back.remove(origin)
        if self._current is not None:
            _lower(self._current.inherited, origin.floors)
        self._publish()
        if isinstance(item, BaseException):
            raise item
        return item

    def take(self, limit: int) -> list[Any]:
        """Up to ``limit`` returned messages, for ``consume``; an error is raised when it comes first."""
        out: list[Any] = []
        while self.returned and len(out) < limit:
            if out and isinstance(self.returned[0][0], BaseException):
                break
            out.append(self.take_one())
        return out

    def floor(self, tp: TopicPartitionKey) -> int | None:
        """The offset no commit of ``tp`` may pass now, or None when nothing lent bounds it."""
        return self._lent_floors.get(tp)

    def _publish(self) -> None:
        """Every partition's floor, set in the translator's :class:`CommitFloors` after each change."""
        low: dict[TopicPartitionKey, int] = {}
        if self._open or self._back:
            if self._current is not None:  # a commit inside the call (a revoke) stays where it stood
                low = {tp: progress[0] for tp, progress in self._before.items()}
            for delivery in (*self._open, *self._back):
                _lower(low, delivery.floors)
                _lower(low, delivery.inherited)
        if low or self._lent_floors:
            self._lent_floors = low
            self._floors.lend(low)

    def clear(self) -> None:
        """The consumer closed: nothing more is handed out."""
        self._open.clear()
        self._back.clear()
        self.returned.clear()
        self._publish()


def _lower(into: dict[TopicPartitionKey, int], floors: Mapping[TopicPartitionKey, int]) -> None:
    for tp, value in floors.items():
        into[tp] = min(value, into.get(tp, value))
