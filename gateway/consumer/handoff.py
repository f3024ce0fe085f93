"""What ``poll``/``consume`` handed over that has not reached the application, and the commits it bounds.

The consumer counts a message as delivered, and a commit covers it, once ``poll`` or ``consume``
returns it: in a synchronous program that is the moment the application has it. A driver that
carries the result to another thread cannot promise that. In :mod:`gateway.aio` the task awaiting
a worker's ``poll`` can be cancelled (``asyncio.wait_for``) after that ``poll`` returned and
before the message reached the task; a commit would then cover a message nobody saw.

Such a driver runs each ``poll``/``consume`` through :meth:`Handoff.call` with a :class:`Loan` and
reports, from its own thread, whether the result reached the application. Until the consumer
has acted on that report (in its next call):

- commits stay where they stood before the call, per partition the call delivered from;
- a result that did not arrive is handed out again by the next ``poll``/``consume``, before
  anything newer (messages already deserialized, and an error that carries a message, raised
  again), and commits stay below it until it has arrived.

Messages the consumer itself keeps back for its next call (``consume.max.bytes``, the ones behind
a refused value) are the inbox's (:meth:`gateway.consumer._inbox.Inbox.keep`): they bound commits
by the same rule, and a seek or revoke of their partition drops them.

This module decides what "received" means for a driver's results; the commit translator asks
it for each partition's floor (:meth:`Handoff.floor`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, TypeVar

from gateway.core.offsets import Progress
from gateway.protocol.records import TopicPartitionKey

T = TypeVar("T")


class Fate(Enum):
    PENDING = "pending"
    RECEIVED = "received"
    RETURNED = "returned"


class Loan:
    """One ``poll``/``consume`` result on its way to the application.

    The driver calls :meth:`received` or :meth:`returned` from its own thread; the consumer's
    thread acts on it at the start of its next :meth:`Handoff.call` (attribute writes only, so no
    lock is needed).
    """

    __slots__ = ("fate", "floors", "inherited", "items", "left")

    def __init__(self) -> None:
        self.fate = Fate.PENDING
        self.floors: dict[TopicPartitionKey, int] = {}
        """Per partition, the offset no commit may pass while this loan is out."""
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
    """The consumer's loans: open ones, returned items to hand out first, and the floors they set.

    ``progress`` reads the delivered-offset tracker (after anything handed out by count alone is
    noted); ``on_return`` runs before returned items are queued, so that nothing the consumer
    would hand out by count goes before them.
    """

    def __init__(
        self, progress: Callable[[], Mapping[TopicPartitionKey, Progress]], on_return: Callable[[], None]
    ) -> None:
        self._progress = progress
        self._on_return = on_return
        self._open: list[Loan] = []  # lent, fate not acted on yet (the running call's included)
        self._back: list[Loan] = []  # returned, some of their items still in `returned`
        self._current: Loan | None = None
        self._before: Mapping[TopicPartitionKey, Progress] = {}  # progress when the running call began
        self.returned: deque[tuple[Any, Loan]] = deque()
        """Items of returned loans, each with its loan, in the order they were first handed out."""
        self.returned_total = 0
        """Items that came back since the consumer started."""

    def call(self, loan: Loan | None, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the consumer's thread, after acting on every loan whose fate is known.

        With ``loan``, ``fn`` is ``poll`` or ``consume`` and its result is lent: commits stay where
        they stood before the call until the loan is received.
        """
        self.settle()
        if loan is None:
            return fn(*args, **kwargs)
        before = self._before = self._progress()  # bounds a commit inside the call too (a revoke)
        self._open.append(loan)
        self._current = loan
        try:
            out = fn(*args, **kwargs)
        except BaseException as exc:
            self._lent(loan, before, [exc] if getattr(exc, "kafka_message", None) is not None else [])
            raise
        self._lent(loan, before, out if isinstance(out, list) else [] if out is None else [out])
        return out

    def _lent(self, loan: Loan, before: Mapping[TopicPartitionKey, Progress], items: list[Any]) -> None:
        """The call is over: the loan keeps floors only for partitions it delivered from."""
        self._current = None
        loan.items = items
        if not items:
            self._open.remove(loan)
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
        _lower(floors, loan.inherited)
        loan.floors, loan.inherited = floors, {}

    def settle(self) -> None:
        """Act on every loan whose fate the driver reported: received ones go, returned ones come back."""
        if not self._open:
            return
        if len(self._open) == 1 and self._open[0].fate is Fate.RECEIVED:  # the common case
            self._open.clear()
            return
        back = [loan for loan in self._open if loan.fate is Fate.RETURNED and loan is not self._current]
        self._open = [loan for loan in self._open if loan.fate is Fate.PENDING or loan is self._current]
        if not back:
            return
        self._on_return()
        for loan in reversed(back):  # the oldest ends up first, ahead of what was returned before
            loan.left = len(loan.items)
            self.returned_total += loan.left
            self.returned.extendleft((item, loan) for item in reversed(loan.items))
        self._back.extend(back)

    def take_one(self) -> Any:
        """The first returned item: a message, or an error raised again. Its floors pass to the running loan."""
        item, origin = self.returned.popleft()
        origin.left -= 1
        if origin.left == 0:
            self._back.remove(origin)
        if self._current is not None:
            _lower(self._current.inherited, origin.floors)
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
        if not self._open and not self._back:
            return None
        low: int | None = None
        if self._current is not None and tp in self._before:
            standing = self._before[tp][0]
            low = standing if low is None else min(low, standing)
        for loan in (*self._open, *self._back):
            for floors in (loan.floors, loan.inherited):
                value = floors.get(tp)
                if value is not None and (low is None or value < low):
                    low = value
        return low

    def clear(self) -> None:
        """The consumer closed: nothing more is handed out."""
        self._open.clear()
        self._back.clear()
        self.returned.clear()


def _lower(into: dict[TopicPartitionKey, int], floors: Mapping[TopicPartitionKey, int]) -> None:
    for tp, value in floors.items():
        into[tp] = min(value, into.get(tp, value))
