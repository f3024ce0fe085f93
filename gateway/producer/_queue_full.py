"""The one queue-full retry loop: segments and envelopes wait for room in librdkafka's queue.

A chunked message is several records, and a reference message has already written its payload
when its envelope is queued; raising ``BufferError`` halfway would leave the first half-sent and
the second orphaned. So, unlike a plain record, they wait for room: delivery reports are served
(which frees queue space) until ``large.message.block.ms`` has passed.

A thread of the library's own (the write window's) waits without serving them: delivery reports,
and the application's callbacks they run, belong to the application's ``poll`` and ``flush``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from gateway.clock import Clock

_quiet = threading.local()


@contextmanager
def without_serving_reports() -> Iterator[None]:
    """In this thread, wait for queue room by sleeping instead of serving delivery reports."""
    _quiet.on = True
    try:
        yield
    finally:
        _quiet.on = False


class _Queue(Protocol):
    def produce(self, topic: str, **kwargs: Any) -> None: ...

    def poll(self, timeout: float) -> int: ...


class BlockingSend:
    """``send(topic, kwargs)``: ``Producer.produce`` that serves delivery reports while the queue is full.

    ``BufferError`` is raised at once when ``block_s`` is 0, else once ``block_s`` has passed.
    """

    __slots__ = ("_block_s", "_clock", "_producer")

    def __init__(self, producer: _Queue, clock: Clock, block_s: float) -> None:
        self._producer = producer
        self._clock = clock
        self._block_s = block_s

    def __call__(self, topic: str, kwargs: dict[str, Any]) -> None:
        deadline: float | None = None  # the clock is read only once the queue is full
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                now = self._clock.monotonic()
                if deadline is None:
                    deadline = now + self._block_s
                if now >= deadline:
                    raise
            if getattr(_quiet, "on", False):
                time.sleep(0.05)
            else:
                self._producer.poll(0.05)
