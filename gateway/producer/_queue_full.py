"""The one queue-full retry loop: segments and envelopes wait for room in librdkafka's queue.

A chunked message is several records, and a reference message has already written its payload
when its envelope is queued; raising ``BufferError`` halfway would leave the first half-sent and
the second orphaned. So, unlike a plain record, they wait for room: delivery reports are served
(which frees queue space) until ``large.message.block.ms`` has passed.

A thread of the library's own (the write window's) waits without serving them: delivery reports,
and the application's callbacks they run, belong to the application's ``poll`` and ``flush``.
Which thread that is, the outbox says (``serves_reports``), from the thread's identity.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.clock import Clock


class BlockingSend:
    """``send(topic, kwargs)``: ``Producer.produce`` that serves delivery reports while the queue is full.

    ``BufferError`` is raised at once when ``block_s`` is 0, else once ``block_s`` has passed.
    """

    __slots__ = ("_block_s", "_clock", "_poll", "_produce", "_serves_reports")

    def __init__(
        self,
        produce: Callable[..., None],
        poll: Callable[[float], object],
        clock: Clock,
        block_s: float,
        serves_reports: Callable[[], bool] = lambda: True,
    ) -> None:
        self._produce = produce
        self._poll = poll
        self._clock = clock
        self._block_s = block_s
        self._serves_reports = serves_reports

    def __call__(self, topic: str, kwargs: dict[str, Any]) -> None:
        deadline: float | None = None  # the clock is read only once the queue is full
        while True:
            try:
                self._produce(topic, **kwargs)
                return
            except BufferError:
                now = self._clock.monotonic()
                if deadline is None:
                    deadline = now + self._block_s
                if now >= deadline:
                    raise
            if self._serves_reports():
                self._poll(0.05)
            else:
                time.sleep(0.05)
