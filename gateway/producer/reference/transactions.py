"""Store writes made inside a Kafka transaction, so that aborting the transaction removes them too.

An aborted transaction hides its segments and envelopes from ``read_committed`` readers, but the
payloads its reference messages wrote stay in the stores unless somebody deletes them. The ledger
remembers every (store, locator) written between ``begin_transaction`` and the end of the
transaction; ``abort_transaction`` deletes them once Kafka has aborted, a committed transaction
forgets them. A commit whose outcome is unknown (it raised, and Kafka does not say the transaction
must be aborted) deletes nothing: the payloads may be live, and their pending marks, if still set,
are for ``gateway gc`` to resolve against the topic.

The pending marks of an aborted transaction's writes are never cleared: a delete that fails leaves
payload and mark, and ``gateway gc`` deletes the payload once a ``read_committed`` read of the
topic shows its envelope aborted (so does a producer killed or fenced before it could abort).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from gateway.store import Store

log = logging.getLogger(__name__)


@dataclass
class TransactionLedger:
    """The store writes of the open transaction; pure bookkeeping, the producer acts on it."""

    open: bool = False
    writes: list[tuple[Store, str]] = field(default_factory=list)

    def begin(self) -> None:
        self.open, self.writes = True, []

    def wrote(self, store: Store, locator: str) -> None:
        if self.open:
            self.writes.append((store, locator))

    def committed(self) -> None:
        self.open, self.writes = False, []

    def aborted(self) -> list[tuple[Store, str]]:
        """The writes to undo; the ledger is empty afterwards."""
        writes, self.open, self.writes = self.writes, False, []
        return writes


def undo(writes: list[tuple[Store, str]]) -> int:
    """Delete the payloads of an aborted transaction; returns how many could not be (left for gc)."""
    failed = 0
    for store, locator in writes:
        try:
            store.delete(locator)
        except Exception as exc:  # noqa: BLE001 - the pending mark or gc's scan finds what is left
            failed += 1
            log.warning("could not delete %s after the transaction aborted (left for gateway gc): %s", locator, exc)
    return failed
