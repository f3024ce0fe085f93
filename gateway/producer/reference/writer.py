"""The reference route: payload to a store, envelope to Kafka, and the store write undone when Kafka refuses.

Only a *definite* refusal undoes it (:mod:`gateway.producer.reference._envelope_delivery`): after a timeout or any other
report that leaves the envelope possibly written, the payload and its pending mark stay for gc.

The write is journalled as pending (atomically with it, or before it) and the mark is cleared only
once Kafka acknowledged the envelope, so a crash in between, or a rollback that itself fails,
leaves something ``gateway gc`` can find. A store that keeps failing is skipped (one probe per
interval, see :mod:`gateway.health`) and the message goes chunked instead when it is small enough
and nothing it was promised is lost on the way (:mod:`gateway.producer.reference._fallback`).

No Kafka client here: records go out through the ``send`` callable the producer passes in (its envelope
or fallback by :mod:`gateway.producer.reference._outcomes`), so the
whole route is unit-tested with an in-memory store.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from functools import partial

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.config import DEFAULT_MAX_PAYLOAD_BYTES
from gateway.core.outgoing import OutgoingMessage, Send
from gateway.encryption import ReferenceEncryption
from gateway.errors import ConfigurationError, MessageTooLargeError, StoreError, StoreUnavailableError
from gateway.health import StoreHealth
from gateway.policy import Route
from gateway.producer._metrics import ProducerMetrics
from gateway.producer.reference._bookkeeping import ReferenceBookkeeping
from gateway.producer.reference._envelope_delivery import EnvelopeDelivery
from gateway.producer.reference._fallback import FallbackGuard
from gateway.producer.reference._outcomes import WriteOutcomes
from gateway.producer.reference._sealing import stored_form
from gateway.producer.reference.digests import PayloadDigester
from gateway.producer.reference.transactions import TransactionLedger
from gateway.producer.reference.window import WriteInFlight, WriteWindow
from gateway.protocol.peers.pointer_formats import ReferenceFormat, pointer_message_id
from gateway.store import Payload, Store
from gateway.telemetry.logs import RateLimitedLog

log = logging.getLogger(__name__)


class ReferenceWriter(ReferenceBookkeeping):
    """Sends messages by reference to named stores, and tracks each store's health for the fallback.

    A write to a store that pipelines joins the outbox's queue (``window``) and settles in its turn;
    any other write, and a fallback decided while sending, is sent through the queue's one door for records
    (:meth:`WriteWindow.send_in_turn`), after every write ahead of it.
    Records go out by ``send``, which never waits for the queue: the writer calls it only in its turn.
    """

    def __init__(
        self,
        stores: Mapping[str, Store],
        health: Mapping[str, StoreHealth],
        send: Send,
        *,
        fallback_cap: int,
        max_payload: int = DEFAULT_MAX_PAYLOAD_BYTES,
        metrics: ProducerMetrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
        checksum: str = "auto",
        compression: str | None = None,
        window: int | WriteWindow = 1,
        send_chunked: Callable[[OutgoingMessage], None] | None = None,
        refuses_chunks: Callable[[OutgoingMessage], bool] | None = None,
        encryption: ReferenceEncryption | None = None,
        warning_interval_s: float = 10.0,
        reference_format: ReferenceFormat = ReferenceFormat.GATEWAY,
    ) -> None:
        self.stores = stores
        self.health = health
        self.max_payload = max_payload
        """``reference.max.payload.bytes``: a larger payload is refused, as consumers would refuse its envelope."""
        self.metrics = metrics if metrics is not None else ProducerMetrics()
        self._clock = clock
        self._reports = EnvelopeDelivery(self.metrics)
        self._digests = PayloadDigester(checksum)
        self.compression = compression
        """``reference.compression``: the store keeps :func:`encode_payload`'s output; the envelope's digest
        and size stay the application's (so the store is not handed the digest to check its bytes by)."""
        self.transaction = TransactionLedger()
        self.window = window if isinstance(window, WriteWindow) else WriteWindow(window, dict(stores))
        """The outbox's queue of pending writes; the outbox closes it."""
        self._encryption = encryption if encryption is not None else ReferenceEncryption(None)
        """``reference.encryption``: seals each payload for its store write (docs/security.md)."""
        self.format = reference_format
        """``reference.format``: envelopes, or the pointer records bakdata's or AWS's readers follow."""
        warnings = RateLimitedLog(log, warning_interval_s, clock.monotonic)
        fallbacks = FallbackGuard(fallback_cap, self._encryption.enabled, self.metrics, warnings)
        self._outcomes = WriteOutcomes(
            health, send, self._reports, self.transaction, fallbacks, metrics=self.metrics, clock=clock,
            send_chunked=send_chunked or _no_chunking, refuses_chunks=refuses_chunks or _chunks_allowed,
            reference_format=reference_format,
        )  # fmt: skip
        """What each write's answer leads to: its envelope, or the fallback."""

    @property
    def fallback_cap(self) -> int:
        """``reference.fallback.inline.max.bytes``: the largest message sent inline when its store is down."""
        return self._outcomes.fallback_cap

    def send(self, route: Route, forced: bool, message: OutgoingMessage, *, persistent: bool = False) -> Route:
        """Send ``message`` by reference; returns the route it took: ``route``, or ``CHUNKED`` after falling back.

        A store that is marked unhealthy, or whose write fails for want of a connection, sends a
        message under ``fallback_cap`` chunked instead (``send_chunked``); a larger message, one whose route
        was forced, or any message when payloads are encrypted, fails fast with
        :class:`~gateway.errors.FallbackRefusedError` (a :class:`StoreUnavailableError`). Other store errors propagate.
        ``persistent`` (a compact-only topic's message) asks the store for no expiry. With a write
        window (:mod:`gateway.producer.reference.window`) the write may still be in flight on return.
        """
        self._check_declared(self._encryption.stored_size(message.size))  # before any work on the payload
        name = route.store or ""
        store = self.stores.get(name)
        if store is None:
            raise ConfigurationError(
                f"the route names store {name!r}, but this producer has {sorted(self.stores) or 'no stores'}"
            )
        with self.window.lock:
            step = self._write(name, store, route, forced, message, persistent)
            if isinstance(step, Route):
                return step  # joined the queue: its envelope follows when the write resolves
            routed = self.window.send_in_turn(step)  # the one door for what does not join the queue
        return route if routed is None else routed

    def _write(
        self, name: str, store: Store, route: Route, forced: bool, message: OutgoingMessage, persistent: bool
    ) -> Route | Callable[[], Route]:
        """The route, when the write joined the queue; else what sends the message, for its turn."""
        pipeline = self.window.pipeline_for(name)
        now = self._clock.wall_ms()
        if not self.health[name].allow(now) and not self._probe_answered(name):
            return partial(self._outcomes.fallback, name, forced, message, "is marked unhealthy")
        payload = message.payload if message.payload is not None else b""
        started = self._clock.monotonic()
        message_id = (
            pointer_message_id(uuid.uuid4()) if self.format.pointer else store.next_message_id(message.topic, now)
        )
        form = stored_form(payload, store, message.topic, message_id, self.compression, self._encryption)
        if self.compression is not None and form.codec is None:
            self.metrics.compression_skipped += 1
        stored = form.stored
        if form.recheck_size:
            self._check_declared(len(stored))  # compressed, then sealed: its size is known only now
        locator = ""
        beside = self._digests.hashes_beside(form.digested, store)
        early = self._digests.begin(form.digested, store) if beside else None  # hashed while it is sent
        if pipeline is not None:
            try:
                locator = pipeline.submit(
                    message.topic, message_id, stored, pending_since_ms=now, persistent=persistent
                )
            except StoreError as exc:
                return partial(self._outcomes.failed, name, forced, message, now + self._ms_since(started), exc)
        # hashed here after a submit: the server takes the write meanwhile
        digest = early if early is not None else self._digests.begin(form.digested, store)
        digest.encryption = form.encryption
        digest.compression = form.codec
        write = WriteInFlight(
            name, store, pipeline, message, message_id, locator, digest, forced, now, started, self._settle
        )
        if pipeline is not None:
            self.window.add(write)  # its envelope follows when the write resolves, in its turn
            return route
        sha256 = digest.known_sha256() if stored is form.digested else None
        return partial(self._put_now, write, route, stored, sha256, persistent)

    def _put_now(
        self, write: WriteInFlight, route: Route, stored: Payload, sha256: bytes | None, persistent: bool
    ) -> Route:
        """A store that cannot pipeline (or a window of 1): the write, then its envelope, in ``produce``."""
        message = write.message
        try:
            write.locator = write.store.put(
                message.topic,
                write.message_id,
                stored,
                pending_since_ms=write.sent_ms,
                sha256=sha256,
                persistent=persistent,
            )
        except StoreError as exc:
            return self._outcomes.failed(
                write.name, write.forced, message, write.sent_ms + self._ms_since(write.started), exc
            )
        self._outcomes.succeeded(write)
        return route

    @property
    def checksum(self) -> int:
        """The envelope's digest algorithm (``reference.checksum``), for a digest computed elsewhere (a stream's)."""
        return self._digests.checksum

    def settle_write(self, write: WriteInFlight) -> None:
        """A write made outside the window (a stream's): its envelope, delivery and rollback as any write's."""
        self._outcomes.succeeded(write)

    def check_declared(self, size: int) -> None:
        """:meth:`_check_declared`, for a stream's declared size before it is read."""
        self._check_declared(size)

    def _check_declared(self, size: int) -> None:
        """Refuse a payload whose envelope would declare more than consumers accept by default."""
        if size > self.max_payload:
            raise MessageTooLargeError(
                f"{size} bytes exceed reference.max.payload.bytes={self.max_payload}: consumers refuse "
                "envelopes that declare more than their own reference.max.payload.bytes (by default "
                f"{DEFAULT_MAX_PAYLOAD_BYTES}); raise it on the producer and on every consumer together"
            )

    def _probe_answered(self, name: str) -> bool:
        """Whether a probe of an unhealthy store, still in the window, was confirmed just now.

        Without a window the probe is answered inside the ``produce`` that sent it; with one, the
        next message to the store would fall back while the probe's reply waits in the window, so
        the window is settled (in order) to let that reply decide.
        """
        if not any(write.name == name for write in self.window.writes):
            return False
        self.window.drain()
        return self.health[name].healthy

    @property
    def in_flight(self) -> int:
        """Messages whose store write is sent and whose envelope is not yet produced, or failure not yet reported."""
        return len(self.window)

    def drain(self) -> None:
        """Confirm every write in flight and produce its envelope, oldest first."""
        self.window.drain()

    def _settle(self, write: WriteInFlight) -> None:
        """A pipelined write's reply, in its turn; then its envelope, or, where it failed, what ``produce`` would
        have done. Records go out by ``send`` directly: this is the write's turn."""
        message = write.message
        try:
            try:
                if write.pipeline is not None:
                    write.pipeline.confirm()
            except StoreError as exc:
                now = write.sent_ms + self._ms_since(write.started)
                self._outcomes.failed(write.name, write.forced, message, now, exc)
                return
            self._outcomes.succeeded(write)
        except Exception as exc:  # noqa: BLE001 - produce() has returned: the message's callback hears of it
            log.error("reference message to %s failed after produce() returned: %s", message.topic, exc)
            self.window.failed(message.on_delivery, exc, message)  # reported by the next poll() or flush()

    def _ms_since(self, started: float) -> int:
        return int((self._clock.monotonic() - started) * 1000)

    def close(self) -> None:
        """Stop the hashing worker, if one was started, and end the stores' open journal batches.

        A store that journals writes in batches (S3) keeps its open batch's marker until the batch
        closes; once the producer is done, nothing more will be taken from it. The window is the
        outbox's to settle and close, before this.
        """
        self._digests.close()
        for store in self.stores.values():
            store.end_journal_batches()


def _chunks_allowed(message: OutgoingMessage) -> bool:
    return False


def _no_chunking(message: OutgoingMessage) -> None:
    raise StoreUnavailableError(f"the store write for {message.topic} failed and no chunked route was given")
