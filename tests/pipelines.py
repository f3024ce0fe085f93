"""Pipelines as tests use them: their assembler and tracker in reach, and (``full_path``) without the shortcuts.

The library's :class:`~gateway.core.pipeline.ConsumerPipeline` exposes neither, and has no switch to
turn its bookkeeping-alone runs off: only tests look inside it, or compare both ways.
"""

from __future__ import annotations

from typing import Any

from gateway.core.assembler import MessageAssembler
from gateway.core.offsets import DeliveredOffsetTracker
from gateway.core.pipeline import ConsumerPipeline


class InspectedPipeline(ConsumerPipeline):
    """A pipeline whose ``assembler`` and ``tracker`` a test can read; ``full_path=True`` sends every record
    the full way, to show that the shortcuts give the same answers."""

    def __init__(
        self,
        assembler: MessageAssembler | None = None,
        tracker: DeliveredOffsetTracker | None = None,
        *,
        full_path: bool = False,
        **kwargs: Any,
    ) -> None:
        self.assembler = MessageAssembler() if assembler is None else assembler
        self.tracker = DeliveredOffsetTracker() if tracker is None else tracker
        super().__init__(self.assembler, self.tracker, **kwargs)
        if full_path:
            self._plain.runs = False  # what a reader of peers' formats does: every record the full way
