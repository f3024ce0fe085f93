"""``HybridProducer.produce_stream``: a value read from a file or an iterable as it goes up, never held whole.

The route is decided from the declared size, before a byte is read. A stream the chunked route can
carry (within ``large.message.max.bytes``, the default consumer's assembler capacity, which holds a
chunked message whole anyway) or a plain record can, is read into memory and produced as
``produce`` would; a larger one goes by reference, to a store that writes as the parts arrive
(:attr:`Store.streams_puts`). A stream forced onto the chunked or plain route above that bound is
refused (:class:`StreamRouteError`) before it is read.

By reference, the source is read in bounded chunks (:mod:`gateway.producer.stream.source`), hashed
for the envelope, compressed (when ``reference.compression`` pays on the first chunk: the decision
is made there, once) or sealed a segment at a time (``reference.encryption``; a sealed stream is
not compressed, since every segment authenticates the plaintext size, which a compressed stream
knows only at its end), cut into parts of ``reference.stream.part.bytes`` and handed to the store's
``put_stream``. The envelope, its delivery and rollback are the reference writer's, as for
``produce``. What the source or the store does wrong is a :class:`StreamError` naming the topic and
key; the store has then removed what it wrote, and nothing went to Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from gateway.auditing import Auditor
from gateway.clock import Clock
from gateway.core.outgoing import OutgoingMessage
from gateway.encryption import ReferenceEncryption, stream_cipher
from gateway.errors import (
    ConfigurationError,
    ReferenceFormatError,
    StoreError,
    StreamError,
    StreamRouteError,
    StreamUploadError,
)
from gateway.policy import Policy, Route, RouteKind
from gateway.producer._compaction import CompactionGuard
from gateway.producer._config import ProducerSettings
from gateway.producer._outbox import Outbox
from gateway.producer._route_choice import RouteChooser, forced_route
from gateway.producer.reference.admission import ReferenceAdmission
from gateway.producer.reference.digests import PendingDigest
from gateway.producer.reference.window import WriteInFlight
from gateway.producer.reference.writer import ReferenceWriter
from gateway.producer.stream._observed import StreamedMessage, StreamObservation
from gateway.producer.stream.source import SourceReader, check_source
from gateway.protocol.compression import pays_off
from gateway.protocol.encryption import sealed_size
from gateway.protocol.payload_encoding import stored_bound
from gateway.protocol.stream_parts import STREAM_CODECS, PartPacker, SegmentSealer, StreamDigest, stream_encoder
from gateway.store import Store
from gateway.telemetry.semconv import ClientInfo

log = logging.getLogger(__name__)

Produce = Callable[..., None]
"""``HybridProducer.produce``: what a stream small enough for memory is sent with."""


class StreamWriter:
    """The producer's streams: the route from the declared size, then memory (small) or a store's ``put_stream``."""

    def __init__(
        self,
        settings: ProducerSettings,
        policy: Policy,
        routes: RouteChooser,
        compaction: CompactionGuard,
        admission: ReferenceAdmission,
        references: ReferenceWriter,
        outbox: Outbox,
        encryption: ReferenceEncryption,
        clock: Clock,
        produce: Produce,
        auditor: Auditor | None = None,
        telemetry: ClientInfo | None = None,
    ) -> None:
        self._settings = settings
        self._policy = policy
        self._routes = routes
        self._compaction = compaction
        self._admission = admission
        self._references = references
        self._outbox = outbox
        self._encryption = encryption
        self._clock = clock
        self._produce = produce
        self._auditor = auditor
        self._telemetry = telemetry or ClientInfo.of({})
        self.part_bytes = settings.stream_part_bytes

    def send(
        self,
        topic: str,
        source: Any,
        size: int,
        key: Any,
        partition: int,
        on_delivery: Any,
        timestamp: int,
        headers: Any,
        route: Route | str | None,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise TypeError(f"size must be a non-negative int (the stream's length in bytes), got {size!r:.40}")
        check_source(source)
        checked = OutgoingMessage.of(topic, None, key, partition, on_delivery, timestamp, headers)
        message = StreamedMessage.streamed(checked, source, size)
        forced = route is not None
        chosen = (
            forced_route(route)
            if route is not None
            else self._routes.route(topic, size, message.key_bytes, message.header_list)
        )
        chosen = self._within_bounds(chosen, forced, topic, size, key)
        # within what memory holds by the route's nature: produce's route, audit, span and (by reference) its
        # fallback inline when the store fails, which a larger stream cannot have (consumers could not assemble it)
        if chosen.kind is not RouteKind.REFERENCE or (not forced and size <= self._settings.max_chunked_bytes):
            value = bytes(_read_all(SourceReader(source, size, topic=topic, key=key)))
            self._produce(
                topic, value, key, partition, on_delivery=on_delivery, timestamp=timestamp, headers=headers,
                route=route,
            )  # fmt: skip
            return
        self._send_by_reference(chosen, forced, message, source, size)

    def _within_bounds(self, chosen: Route, forced: bool, topic: str, size: int, key: Any) -> Route:
        """The route, by reference instead when the chunked or plain route cannot carry ``size`` bytes."""
        if chosen.kind is RouteKind.CHUNKED:
            bound, what = self._settings.max_chunked_bytes, "large.message.max.bytes (consumers' assembler capacity)"
        elif chosen.kind is RouteKind.PLAIN:
            bound, what = self._settings.max_message_bytes, "message.max.bytes"
        else:
            return chosen
        if size <= bound:
            return chosen
        if not forced:
            store = self._policy.store_for(topic)
            names = sorted(self._policy.store_names())
            if store is None and len(names) == 1:
                store = names[0]
            if store is not None:
                return Route.reference(store)
        raise StreamRouteError(
            f"a {size}-byte stream for {topic!r} cannot go {chosen.kind.value}: above {what}={bound}, a consumer"
            " could not take it whole; send it by reference (route='reference:<store>')",
            topic=topic,
            key=key,
        )

    def _send_by_reference(self, route: Route, forced: bool, message: OutgoingMessage, source: Any, size: int) -> None:
        if self._settings.reference_format.pointer:
            raise ReferenceFormatError(
                f"reference.format={self._settings.reference_format.value}: streams are written in the gateway's"
                " envelope only"
            )
        references = self._references
        name = route.store or ""
        store = references.stores.get(name)
        if store is None:
            raise ConfigurationError(
                f"the route names store {name!r}, but this producer has {sorted(references.stores) or 'no stores'}"
            )
        if not store.streams_puts:
            raise ConfigurationError(f"store {name!r} ({type(store).__name__}) cannot write a payload as a stream")
        segment = self._settings.chunk_size_for(message.key_bytes, message.header_list)
        allowed = self._compaction.cleanup_allowance(
            message.topic, size, route, segment, expires_per_payload=store.expires_per_payload
        )
        persistent = allowed.persistent
        observed = StreamObservation(self._auditor, self._telemetry, self._clock.wall_ms)
        message = observed.message(message)  # audited and traced from here, as produce: the span covers the upload
        try:
            references.check_declared(self._encryption.stored_size(size))
            self._admission.check(message)  # what Kafka would refuse, refused before the store write
            # one turn of the outbox's queue: the writes ahead of it settle first, its envelope goes in produce order
            self._outbox.send_message(
                lambda queued: self._upload(name, store, forced, queued, source, size, persistent), message
            )
        except BaseException as exc:
            observed.failed(exc)
            raise
        observed.routed(name)

    def _upload(
        self, name: str, store: Store, forced: bool, message: OutgoingMessage, source: Any, size: int, persistent: bool
    ) -> None:
        """The parts up through ``put_stream``, then the envelope (the reference writer's)."""
        topic, key = message.topic, message.key
        references = self._references
        now = self._clock.wall_ms()
        started = self._clock.monotonic()
        message_id = store.next_message_id(topic, now)
        reader = SourceReader(source, size, topic=topic, key=key)
        plan = _StreamPlan(self, store, topic, message_id, size)
        try:
            locator = store.put_stream(
                topic,
                message_id,
                plan.parts(reader.chunks()),
                size=plan.stored_size,
                size_bound=plan.size_bound,
                part_bytes=self.part_bytes,
                pending_since_ms=now,
                persistent=persistent,
            )
        except StreamError:
            raise
        except StoreError as exc:
            references.metrics.store_put_failures += 1
            references.health[name].failure(now + int((self._clock.monotonic() - started) * 1000))
            raise StreamUploadError(
                f"the stream for {topic!r} could not be written to store {name!r}: {exc}; {self._no_fallback(size)}",
                topic=topic,
                key=key,
            ) from exc
        digest = PendingDigest(plan.digest.checksum, plan.digest.size, plan.digest.digest())
        digest.compression = plan.codec
        digest.encryption = plan.encryption
        write = WriteInFlight(
            name, store, None, message, message_id, locator, digest, forced, now, started, references.settle_write
        )
        references.settle_write(write)

    def _no_fallback(self, size: int) -> str:
        """Why this stream was not sent inline instead, as ``produce`` may send a message whose store fails."""
        bound = self._settings.max_chunked_bytes
        if size > bound:
            return (
                f"a {size}-byte stream has no fallback to the chunked route (above large.message.max.bytes={bound},"
                " consumers could not assemble it); nothing was sent, send it again"
            )
        return "the route was forced, so there is no fallback to the chunked route; nothing was sent, send it again"


class _StreamPlan:
    """What one stream becomes in its store: codec, seal, digest, parts; decided before its first part is written."""

    def __init__(self, writer: StreamWriter, store: Store, topic: str, message_id: Any, size: int) -> None:
        settings = writer._settings
        encryption = writer._encryption
        self.packer = PartPacker(writer.part_bytes)
        self.digest = StreamDigest(writer._references.checksum)
        self.codec = settings.compression if settings.compression in STREAM_CODECS and size > 0 else None
        self.sealer: SegmentSealer | None = None
        self.encryption = None
        if encryption.enabled:
            self.codec = None  # the plaintext size is in every segment's authenticated data: known only uncompressed
            cipher = stream_cipher(encryption, store, topic, message_id, size, writer.part_bytes)
            self.sealer = SegmentSealer(cipher)
            self.encryption = cipher.encryption
        self.size = size
        self.metrics = writer._references.metrics

    @property
    def stored_size(self) -> int | None:
        """The stored bytes' size, known before the first byte unless the stream may be compressed."""
        if self.encryption is not None:
            return sealed_size(self.size, self.encryption.segment_log2)
        return None if self.codec is not None else self.size

    @property
    def size_bound(self) -> int:
        """The most bytes the store can receive for this stream."""
        stored = self.stored_size
        if stored is not None:
            return stored
        assert self.codec is not None
        return max(self.size, stored_bound(self.codec, self.size))

    def parts(self, chunks: Iterator[memoryview]) -> Iterator[memoryview]:
        """The store's parts: each chunk digested, then compressed or sealed, then packed."""
        encoder = None
        for chunk in chunks:
            if encoder is None:
                encoder = self._encoder_for(chunk)
            if self.sealer is None:
                self.digest.update(chunk)  # the application's bytes
                yield from self.packer.feed(encoder.feed(chunk))
            else:
                for sealed in self.sealer.feed(chunk):
                    self.digest.update(sealed)  # a sealed payload's envelope describes the stored bytes
                    yield from self.packer.feed(sealed)
        if encoder is None:
            encoder = self._encoder_for(memoryview(b""))
        if self.sealer is None:
            yield from self.packer.feed(encoder.finish())
        else:
            for sealed in self.sealer.finish():
                self.digest.update(sealed)
                yield from self.packer.feed(sealed)
        yield from self.packer.flush()

    def _encoder_for(self, first: memoryview) -> Any:
        """The codec, decided on the first chunk: a stream whose start does not compress is stored as it is."""
        if self.codec is not None and not pays_off(first, self.codec):
            self.codec = None
            self.metrics.compression_skipped += 1
        return stream_encoder(self.codec)


def _read_all(reader: SourceReader) -> bytearray:
    """A stream small enough for memory, read whole (its size is checked as for any stream)."""
    out = bytearray()
    for chunk in reader.chunks():
        out += chunk
    return out
