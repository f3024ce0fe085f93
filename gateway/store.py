"""The :class:`Store` contract: what the producer writes payloads to and the consumer resolves envelopes against.

It lives in the library rather than in the ``stores`` package so that the producer, the consumer and
``gc`` can type their stores without importing ``stores`` (which imports the library, and the
clients of Redis and S3). ``stores`` re-exports it.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from gateway.errors import GatewayError
from gateway.histogram import HistogramSnapshot

Payload = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class PayloadAddress:
    """What a locator says of its payload: the topic it was written for and its message id.

    A consumer refuses an envelope whose locator names another topic, and ``gc``/``reconcile`` read that
    topic to find the envelope of a pending write."""

    topic: str
    message_id: uuid.UUID


class Store(abc.ABC):
    """A payload store the producer writes to and the consumer resolves envelopes against.

    Subclass it and implement the abstract methods; the other methods are the optional features a
    store may have, each with a default that is right for a store without it, so the producer, the
    consumer and ``gc`` call them on any store and never ask what a store can do.

    ``name`` is the value the envelope carries in its store field; it must match between producer
    and consumer configuration. Every method that takes a locator validates it first and raises
    :class:`~gateway.errors.LocatorError` without any I/O when it points outside the store's own
    bucket or prefix, because a locator arrives in a Kafka record that anyone with write access to
    the topic can forge. :class:`gateway.testing.MemoryStore` is the reference implementation.
    """

    name: str

    needs_digest_to_write: ClassVar[bool] = True
    """Whether ``put`` wants the payload's SHA-256 (S3 checks the upload against it); a store that does
    not lets the producer hash in parallel with the write."""

    expires_per_payload: bool = True
    """Whether ``put(..., persistent=True)`` changes what is written: a store that expires each payload
    itself (Redis with a TTL) must hear that a compact-only topic's payload is kept forever, so the producer
    learns the topic's ``cleanup.policy`` before writing to it; a store whose expiry is a rule on a
    prefix (the object stores), or that expires nothing (Redis without a TTL), writes the same either
    way, so its writes never wait for that lookup. An instance may decide (RedisStore: by its TTL)."""

    reads_in_groups: ClassVar[bool] = False
    """Whether :meth:`get_many` reads several payloads in one round trip, so that the consumer groups
    small payloads into one call (Redis: one pipelined exchange)."""

    reads_ranges: ClassVar[bool] = False
    """Whether :meth:`get_range` reads part of a payload in one request (S3, GCS, Azure ranged GETs; Redis
    GETRANGE on its entries), so a :class:`gateway.PayloadStream` over it fetches on demand and seeks; a
    store without it is read whole once by the stream (``value.stream.threshold.bytes``, docs/stores.md)."""

    scheme: str | None = None
    """The scheme of the peers' object pointers this store can serve (``s3``, ``gs``, ``abs``: bakdata's,
    kaf-s3's and AWS's pointers); ``None``: it serves none, and :meth:`holds_object` is never asked."""

    bucket: str | None = None
    """The bucket (or container) an object store writes to; ``None`` for a store that has none. A peer's
    pointer names it as its host, which ``reference.format=bakdata|aws`` checks at construction."""

    streams_puts: ClassVar[bool] = False
    """Whether :meth:`put_stream` writes a payload as its parts arrive (S3 multipart, Redis entries), so that
    ``produce_stream`` holds one part of it at a time; a store without it is refused for streams."""

    @abc.abstractmethod
    def put(
        self,
        topic: str,
        message_id: uuid.UUID,
        payload: Payload,
        *,
        pending_since_ms: int | None = None,
        sha256: bytes | None = None,
        persistent: bool = False,
    ) -> str:
        """Write ``payload`` and return its locator.

        With ``pending_since_ms`` the write is journalled as pending at that time, in a way that a
        crash at any point leaves either nothing or a pending entry. ``sha256`` is the payload's
        digest when the caller already has it (for the envelope), so the store need not hash again.
        ``persistent`` payloads belong to a compacted topic, which keeps its latest record forever:
        the store must not expire them (``gateway reconcile`` removes them once superseded).
        """

    @abc.abstractmethod
    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        """The payload; :class:`PayloadNotFoundError` when gone, :class:`PayloadIntegrityError` on a size mismatch."""

    @abc.abstractmethod
    def delete(self, locator: str) -> None:
        """Remove the payload and its pending mark; deleting what is already gone succeeds."""

    @abc.abstractmethod
    def validate_locator(self, locator: str) -> object:
        """The parsed locator, or :class:`LocatorError`; never performs I/O.

        What the locator says of its payload (the topic it was written for) is :meth:`address_of`'s answer.
        """

    @abc.abstractmethod
    def mark_pending(self, locator: str, now_ms: int) -> None:
        """Journal ``locator`` as written but not yet acknowledged, so that ``gc`` finds it if the producer dies."""

    @abc.abstractmethod
    def clear_pending(self, locator: str) -> None:
        """Drop the pending mark once Kafka acknowledged the envelope: the payload is live."""

    @abc.abstractmethod
    def list_pending(self, older_than_ms: int) -> list[str]:
        """Locators marked pending strictly before ``older_than_ms``."""

    @abc.abstractmethod
    def list_locators(self, topic: str | None = None) -> Iterator[tuple[str, int]]:
        """Every stored payload as ``(locator, written_ms)``, for a reconciler; may be approximate."""

    @abc.abstractmethod
    def metrics(self) -> dict[str, int | float]:
        """Counters of the store's operations and errors, for the producer's and consumer's metrics."""

    def close(self) -> None:
        """Release what the store holds; the default holds nothing."""
        return None

    # -- optional features, with the defaults of a store that lacks them ------------------------
    def address_of(self, locator: str) -> PayloadAddress | None:
        """The topic and message id ``locator`` names, or ``None`` when this store's locators name none.

        Validates first (:class:`LocatorError` for a locator the store would refuse to read, no I/O). A
        store that answers binds every envelope to its topic: a consumer refuses it in any other topic
        (:func:`locator_topic`), and ``gc`` reads that topic to find the envelope of a pending write.
        """
        self.validate_locator(locator)
        return None

    def holds_object(self, bucket: str, key: str) -> bool:
        """Whether a peer's object at ``<scheme>://bucket/key`` lies in this store's bucket and prefix (no I/O)."""
        return False

    def get_object(
        self, key: str, max_bytes: int, admit: Callable[[Mapping[str, str]], None] | None = None
    ) -> tuple[bytes, str | None]:
        """A peer's object and its ETag (``None`` where none is known); asked only when :meth:`holds_object` is
        true. ``admit`` judges the object's metadata before its body is read; what it raises is raised."""
        raise NotImplementedError(f"{type(self).__name__} serves no peers' objects")

    def get_range(self, locator: str, start: int, length: int) -> bytes:
        """Bytes ``[start, start + length)`` of the stored payload: fewer only where the stored bytes end
        (``b""`` from their end on), so the caller, who knows the size the envelope declares, tells a
        truncated payload from a whole one. Asked only when :attr:`reads_ranges` is true.

        :class:`PayloadNotFoundError` when the payload is gone; the locator is validated first, no I/O then.
        """
        raise NotImplementedError(f"{type(self).__name__} reads no ranges")

    def get_range_into(self, locator: str, start: int, view: memoryview) -> int:
        """Bytes from ``start`` received into ``view`` (at most ``len(view)``); returns how many came, fewer
        only where the stored bytes end. A :class:`gateway.PayloadStream` refills a few buffers with this,
        so its memory stays those buffers: a store that can receive into the caller's memory (the object
        stores' streamed bodies, Redis' reply read from the socket) overrides it; this default copies
        :meth:`get_range`'s answer. Same errors as :meth:`get_range`.
        """
        data = self.get_range(locator, start, len(view))
        got = min(len(data), len(view))
        view[:got] = memoryview(data)[:got]
        return got

    def histograms(self) -> dict[str, dict[tuple[str, ...], HistogramSnapshot]]:
        """Seconds per operation, by ``(op,)``, behind ``gateway_store_operation_seconds``; the default has none."""
        return {}

    def get_many(self, requests: Sequence[tuple[str, int | None]]) -> list[bytes | GatewayError]:
        """Each ``(locator, expected_size)``'s payload, or the typed error of that one read, in order.

        The default reads one at a time; a store with :attr:`reads_in_groups` does it in one round trip.
        """
        out: list[bytes | GatewayError] = []
        for locator, expected_size in requests:
            try:
                out.append(self.get(locator, expected_size))
            except GatewayError as exc:
                out.append(exc)
        return out

    def clear_pending_many(self, locators: Sequence[str]) -> None:
        """Clear several pending marks; the default clears them one by one."""
        for locator in locators:
            self.clear_pending(locator)

    def put_pipeline(self) -> PutPipeline | None:
        """Writes sent ahead of their replies (``reference.write.window``); None: the store cannot pipeline."""
        return None

    def locator_for(self, topic: str, message_id: uuid.UUID, size: int) -> str | None:
        """The locator ``put`` will give a payload of ``size`` bytes; ``None``: the store cannot say before writing.

        ``reference.encryption`` binds a sealed payload to its locator, so it is sealed before the
        write for the locator the write will have: it needs a store that answers here.
        """
        return None

    def next_message_id(self, topic: str, now_ms: int) -> uuid.UUID:
        """The id of the next payload written for ``topic``; a store that journals ids ahead (S3) hands its own."""
        return uuid.uuid4()

    def open_journal_batch(self, topic: str, now_ms: int) -> None:
        """Journal ``topic``'s next ids ahead now (S3, GCS, Azure: a batch marker), so that its next write
        does not wait for the marker; asked by a producer's ``prepare_topics``/``warm_topics``. The default
        journals each write with the write itself and has nothing to do ahead."""
        return None

    def end_journal_batches(self) -> None:
        """The producer is done: close any journal batch still open (S3). The default has none."""
        return None

    def journalled_in_batch(self, locator: str) -> bool:
        """Whether ``locator``'s pending mark is a batch's, which proves nothing alone to ``gc``."""
        return False

    def put_stream(
        self,
        topic: str,
        message_id: uuid.UUID,
        parts: Iterable[memoryview],
        *,
        size: int | None,
        size_bound: int,
        part_bytes: int,
        pending_since_ms: int | None = None,
        persistent: bool = False,
    ) -> str:
        """Write the payload that ``parts`` yields, part by part, and return its locator (:attr:`streams_puts`).

        Each part is valid only until the next is asked for (the producer reuses its buffer); all but
        the last have ``part_bytes``. ``size`` is the stored size when known before the
        first byte (then it is exact, and the locator is :meth:`locator_for`'s), ``None`` when only
        ``size_bound`` is (a compressed stream). The pending mark is written before the first byte, as
        :meth:`put` writes it; whatever ``parts`` raises, and any failure of the store, aborts the upload
        and removes what was written (the mark last) before it is raised, so ``gc`` finds only what a
        process that died mid-upload left.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot write a payload as a stream")

    def stream_locator_for(self, topic: str, message_id: uuid.UUID, size: int, part_bytes: int) -> str | None:
        """The locator :meth:`put_stream` will give ``size`` bytes in parts of ``part_bytes``; the default is
        :meth:`locator_for`'s (a store whose layout follows the parts, Redis, answers for itself)."""
        return self.locator_for(topic, message_id, size)

    def list_incomplete_uploads(self, older_than_ms: int) -> Sequence[IncompleteUpload]:
        """Multipart uploads started before ``older_than_ms`` and never finished (S3); the default has none."""
        return []

    def abort_upload(self, upload: IncompleteUpload) -> None:
        """Abort one of :meth:`list_incomplete_uploads`; a store without uploads is never asked."""
        raise NotImplementedError(f"{type(self).__name__} has no multipart uploads")


@dataclass(frozen=True, slots=True)
class IncompleteUpload:
    """A multipart upload that was started and neither completed nor aborted: invisible, but billed."""

    key: str
    upload_id: str
    initiated_ms: int


@runtime_checkable
class PutPipeline(Protocol):
    """Store writes sent without waiting for their replies, confirmed later in the order they were sent.

    What a store's optional ``put_pipeline()`` returns (or None when it cannot pipeline): the
    producer's ``reference.write.window`` keeps several writes in flight on it, and produces each
    envelope only once its write is confirmed. One producer thread uses it at a time.
    """

    def __len__(self) -> int:
        """Writes sent and not yet confirmed."""
        ...

    def submit(
        self,
        topic: str,
        message_id: uuid.UUID,
        payload: Payload,
        *,
        pending_since_ms: int | None = None,
        persistent: bool = False,
    ) -> str:
        """Send the write :meth:`Store.put` would make and return its locator; raises only what ``put``
        would raise before any I/O (an I/O failure surfaces from :meth:`confirm`)."""
        ...

    def confirm(self) -> str:
        """Wait for the oldest write's reply: its locator, or the typed store error (the write is then undone
        where it can be, and is confirmed no more)."""
        ...

    def close(self) -> None:
        """Release the connection; writes still unconfirmed stay as the store took them (journalled)."""
        ...


def locator_topic(store: Store, locator: str) -> str | None:
    """The topic ``locator`` says its payload was written for, or ``None`` when the store's locators name none.

    Raises the store's :class:`~gateway.errors.LocatorError` for a locator it would refuse to read.
    """
    address = store.address_of(locator)
    return None if address is None else address.topic


def checked_stores(stores: Any) -> dict[str, Store]:
    """``stores=`` as a dict, or ``TypeError`` naming what is wrong: not a mapping, a name that is not a str,
    or an entry that is not a :class:`Store`."""
    if stores is None:
        return {}
    if not isinstance(stores, Mapping):
        raise TypeError(
            f"stores must be a mapping of store name to store, e.g. {{'redis': RedisStore(...)}}, "
            f"got {type(stores).__name__}"
        )
    for name, store in stores.items():
        if not isinstance(name, str):
            raise TypeError(f"stores: names must be str, got {name!r:.80}")
        if not isinstance(store, Store):
            raise TypeError(
                f"stores[{name!r}] is not a store: {type(store).__name__} does not subclass stores.Store "
                "(gateway.store.Store), which declares what a store must do and what it may"
            )
    return dict(stores)
