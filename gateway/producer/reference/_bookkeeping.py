"""What the reference route keeps after its envelopes are queued: pending marks to clear, a transaction's writes.

The outbox tells the reference writer when delivery reports were served and when a transaction
begins, commits or aborts (:class:`~gateway.producer._outbox.OutboxListener`); this is what it does
then. Kept apart from the writer, which only sends, so each has one concern.
"""

from __future__ import annotations

from gateway.producer.reference._envelope_delivery import EnvelopeDelivery
from gateway.producer.reference.transactions import TransactionLedger, undo
from gateway.store import Store


class ReferenceBookkeeping:
    """Mixed into :class:`~gateway.producer.reference.writer.ReferenceWriter`, which sets both attributes."""

    _reports: EnvelopeDelivery
    transaction: TransactionLedger
    """Writes of the open Kafka transaction, undone by ``abort_transaction``."""

    @property
    def marks_to_clear(self) -> int:
        """Acknowledged writes whose pending mark is still set, waiting for :meth:`clear_acked_marks`."""
        return len(self._reports)

    def clear_acked_marks(self) -> None:
        """Clear the pending marks of acknowledged writes, one call per store where the store can batch.

        Not while a transaction is open: an acknowledged envelope of an open transaction may still be
        aborted (or its producer killed), and then only the mark lets ``gateway gc`` find the payload.
        """
        if not self.transaction.open:
            self._reports.clear_marks()

    def abandon(self) -> list[tuple[Store, str]]:
        """The writes of the transaction just aborted, to undo; their marks are taken out of the queue
        of marks to clear, so a payload whose delete fails keeps its mark for ``gateway gc``."""
        writes = self.transaction.aborted()
        self._reports.forget(writes)
        return writes

    # -- what the outbox tells the writer (:class:`~gateway.producer._outbox.OutboxListener`) ---------
    def reports_served(self) -> None:
        self.clear_acked_marks()

    def transaction_begun(self) -> None:
        self.transaction.begin()

    def transaction_committed(self) -> None:
        self.transaction.committed()
        self.clear_acked_marks()  # held while the transaction was open

    def transaction_aborted(self) -> None:
        """Kafka aborted: delete the payloads the transaction's reference messages stored."""
        undo(self.abandon())
        self.clear_acked_marks()  # those of writes acknowledged before the transaction
