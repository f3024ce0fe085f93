"""The :class:`Store` protocol: what the producer writes payloads to and the consumer resolves envelopes against.

It lives in the library rather than in the ``stores`` package so that the producer, the consumer and
``gc`` can type their stores without importing ``stores`` (which imports the library, and the
clients of Redis and S3): any object with these methods is a store. ``stores`` re-exports it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

Payload = bytes | bytearray | memoryview


@runtime_checkable
class Store(Protocol):
    """A payload store the producer writes to and the consumer resolves envelopes against.

    ``name`` is the value the envelope carries in its store field; it must match between producer
    and consumer configuration. Every method that takes a locator validates it first and raises
    :class:`~gateway.errors.LocatorError` without any I/O when it points outside the store's own
    bucket or prefix, because a locator arrives in a Kafka record that anyone with write access to
    the topic can forge.
    """

    name: str

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
        the store must not expire them (``gateway reconcile`` removes them once superseded). The
        producer passes it only to stores whose ``put`` names it.
        """
        ...

    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        """The payload; :class:`PayloadNotFoundError` when gone, :class:`PayloadIntegrityError` on a size mismatch."""
        ...

    def delete(self, locator: str) -> None:
        """Remove the payload and its pending mark; deleting what is already gone succeeds."""
        ...

    def validate_locator(self, locator: str) -> object:
        """The parsed locator, or :class:`LocatorError`; never performs I/O.

        Its ``topic`` attribute, when it has one, is the topic the payload was written for: a
        consumer then refuses the envelope in any other topic (:func:`locator_topic`), and ``gc``
        reads that topic to find the envelope of a pending write.
        """
        ...

    def mark_pending(self, locator: str, now_ms: int) -> None: ...

    def clear_pending(self, locator: str) -> None: ...

    def list_pending(self, older_than_ms: int) -> list[str]:
        """Locators marked pending strictly before ``older_than_ms``."""
        ...

    def list_locators(self, topic: str | None = None) -> Iterator[tuple[str, int]]:
        """Every stored payload as ``(locator, written_ms)``, for a reconciler; may be approximate."""
        ...

    def metrics(self) -> dict[str, int | float]: ...

    def close(self) -> None: ...


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
    validate = getattr(store, "validate_locator", None)
    topic = getattr(validate(locator), "topic", None) if callable(validate) else None
    return topic if isinstance(topic, str) else None


def checked_stores(stores: Any) -> dict[str, Store]:
    """``stores=`` as a dict, or ``TypeError`` naming what is wrong: not a mapping, a name that is not a str,
    or an entry without the store methods the producer calls (``put``, ``get``, ``delete``)."""
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
        missing = [m for m in ("put", "get", "delete") if not callable(getattr(store, m, None))]
        if missing:
            raise TypeError(f"stores[{name!r}] is not a store ({type(store).__name__} has no {', '.join(missing)})")
    return dict(stores)
