"""Write transactions sent ahead of their replies, on one connection of the store's pool.

A 100 KB write spends most of its round trip waiting for its reply on loopback, the server's turn,
while the client has nothing to do; the next message's packing, hashing and envelope could run in
that time. :class:`RedisPutPipeline` sends each transaction at once and reads its replies only when
the producer confirms it, oldest first, which is the order Redis answers in on one connection
(``reference.write.window``, :mod:`gateway.producer.reference.window`; what it saves is measured in
docs/policy.md, "Writes in flight").

Each transaction is the one :meth:`RedisStore.put` sends: entries, pending mark and index entry in
one MULTI/EXEC, so sending it again writes the same keys and members and changes nothing. That is
what makes a lost connection recoverable: the transactions not yet confirmed are sent again on a
fresh connection, once per transaction, before anything else; a transaction that fails twice, or
draws an error reply, or whose reply timed out, is reported failed to the one who confirms it, and
its payload is deleted on a best-effort basis, as ``put`` does (not after a timeout, when the
server would not answer the delete either; its pending mark leaves it to ``gateway gc``).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis import exceptions as rex

from gateway.errors import StoreError
from gateway.store import Payload
from stores.base import StoreMetrics
from stores.redis import _io as redis_io
from stores.redis._wire import PackedTransaction


class PipelinedStore(Protocol):
    """What a pipeline needs of its store (:class:`~stores.RedisStore`): the write it would send, its pool."""

    client: Any

    def put_commands(
        self, topic: str, message_id: uuid.UUID, payload: Payload, pending_since_ms: int | None, *, persistent: bool
    ) -> tuple[str, list[tuple[Any, ...]]]: ...

    def put_done(self, started: float, locator: str, nbytes: int, *, journalled: bool = False) -> None: ...

    def delete(self, locator: str) -> None: ...


@dataclass(slots=True)
class _Sent:
    """One transaction sent and not yet confirmed; its items keep the payload referenced, uncopied."""

    locator: str
    items: list[bytes | memoryview]
    replies: int
    size: int
    journalled: bool
    started: float = field(default_factory=time.perf_counter)
    sent_again: bool = False


class RedisPutPipeline:
    """Sends :class:`RedisStore` writes without waiting and confirms them in order; one producer thread at a time."""

    def __init__(self, store: PipelinedStore, metrics: StoreMetrics) -> None:
        self._store = store
        self._metrics = metrics
        self._conn: Any = None
        self._in_flight: deque[_Sent] = deque()
        self._out_of_step = False
        """The connection was dropped with transactions unconfirmed: they go again before anything else."""

    def __len__(self) -> int:
        return len(self._in_flight)

    def submit(
        self,
        topic: str,
        message_id: uuid.UUID,
        payload: Payload,
        *,
        pending_since_ms: int | None = None,
        persistent: bool = False,
    ) -> str:
        """Send :meth:`RedisStore.put`'s transaction and return the locator it will have once confirmed.

        A payload the store refuses outright raises here; a failure to send is raised only when the
        write is confirmed, after it was sent again.
        """
        store = self._store
        locator, commands = store.put_commands(topic, message_id, payload, pending_since_ms, persistent=persistent)
        packed = PackedTransaction.of(commands)
        sent = _Sent(locator, packed.items(), packed.replies, len(payload), pending_since_ms is not None)
        self._in_flight.append(sent)
        if not self._out_of_step:  # else confirm() sends everything again, this one included
            try:
                self._connection().send_packed_command(sent.items, check_health=False)
            except (rex.RedisError, OSError):
                self._drop()
        return locator

    def confirm(self) -> str:
        """Read the oldest write's replies: its locator, or the typed store error it met (then it is gone)."""
        sent = self._in_flight[0]
        try:
            redis_io.mapped_errors(self._metrics, lambda: self._read(sent))
        except StoreError as exc:
            self._in_flight.popleft()
            self._drop()
            if not sent.journalled or not isinstance(exc.__cause__, rex.TimeoutError):
                with contextlib.suppress(StoreError):
                    self._store.delete(sent.locator)
            raise
        self._in_flight.popleft()
        self._store.put_done(sent.started, sent.locator, sent.size, journalled=sent.journalled)
        return sent.locator

    def close(self) -> None:
        """Give the connection back; writes still unconfirmed stay as the server took them (journalled)."""
        self._in_flight.clear()
        if self._conn is not None:
            if self._out_of_step:
                self._conn.disconnect()
            self._store.client.connection_pool.release(self._conn)
            self._conn = None
        self._out_of_step = False

    def _read(self, sent: _Sent) -> None:
        while True:
            try:
                if self._out_of_step:
                    self._send_again()
                redis_io.read_transaction_replies(self._conn, sent.replies)
                return
            except rex.ConnectionError:
                self._drop()
                if sent.sent_again:
                    raise
                sent.sent_again = True

    def _send_again(self) -> None:
        conn = self._connection()
        self._out_of_step = False
        try:
            conn.send_packed_command([item for sent in self._in_flight for item in sent.items], check_health=False)
        except BaseException:
            self._drop()
            raise

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = self._store.client.connection_pool.get_connection()
        return self._conn

    def _drop(self) -> None:
        """Disconnect: replies of the writes still unconfirmed can no longer be matched to them."""
        if self._conn is not None:
            self._conn.disconnect()
        self._out_of_step = bool(self._in_flight)


__all__ = ["RedisPutPipeline"]
