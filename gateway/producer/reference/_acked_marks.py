"""Pending marks of writes whose envelope Kafka acknowledged, cleared in batches rather than one by one.

Clearing each mark as its acknowledgement arrives would cost a store round trip per message, as much
as the write itself. They are queued and cleared in one call per store when ``poll``/``flush``
returns, or once :data:`CLEAR_MARKS_EVERY` pile up. The window in which a crash leaves a mark on a
landed payload stays one ``poll`` call long, and ``gateway gc --bootstrap`` keeps such payloads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gateway.store import Store

log = logging.getLogger("gateway.producer.reference.writer")

CLEAR_MARKS_EVERY = 512
"""Acknowledged writes whose pending marks are cleared at once even before the next ``poll``/``flush``."""


class AckedMarks:
    """The marks waiting to be cleared, per store; a mark that could not be cleared stays queued."""

    def __init__(self) -> None:
        self._acked: list[tuple[Store, str]] = []

    def __len__(self) -> int:
        return len(self._acked)

    def add(self, store: Store, locator: str) -> bool:
        """Queue one mark; True once enough are queued to clear them without waiting for ``poll``."""
        self._acked.append((store, locator))
        return len(self._acked) >= CLEAR_MARKS_EVERY

    def forget(self, writes: Iterable[tuple[Store, str]]) -> None:
        """Drop the queued marks of ``writes`` without clearing them.

        For the writes of an aborted transaction: their envelopes were aborted, so where deleting a
        payload failed its mark is what lets ``gateway gc`` find it; clearing it would leave the payload
        for ever.
        """
        drop = {(id(store), locator) for store, locator in writes}
        self._acked = [(store, locator) for store, locator in self._acked if (id(store), locator) not in drop]

    def clear(self) -> None:
        """One ``clear_pending_many`` per store (one round trip where the store can batch)."""
        if not self._acked:
            return
        batches: dict[int, tuple[Store, list[str]]] = {}
        for store, locator in self._acked:
            batches.setdefault(id(store), (store, []))[1].append(locator)
        still: list[tuple[Store, str]] = []
        for store, locators in batches.values():
            try:
                store.clear_pending_many(locators)
            except Exception as exc:  # noqa: BLE001 - the payloads are live: keep the marks queued, never let gc guess
                log.warning("could not clear %d pending marks (will retry): %s", len(locators), exc)
                still.extend((store, locator) for locator in locators)
        self._acked = still


__all__ = ["CLEAR_MARKS_EVERY", "AckedMarks"]
