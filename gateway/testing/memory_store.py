"""An in-memory :class:`stores.Store`: the reference implementation of the contract, for unit tests.

It implements what every store must and nothing optional (:class:`BatchingMemoryStore` and
:class:`PipeliningMemoryStore` add two of the optional features), so it shows what a new store has
to write. Tests of code that drives a store use it; it is never the proof that a store works: the
Redis and S3 stores are tested against real servers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from gateway.errors import LocatorError, PayloadNotFoundError, StoreError
from gateway.store import Payload, PayloadAddress, Store


@dataclass(frozen=True)
class MemoryLocator:
    """A parsed ``<topic>/<message id>``: the topic is what binds an envelope to its topic."""

    topic: str
    message_id: uuid.UUID


@dataclass
class MemoryStore(Store):
    """Payloads in a dict; ``fail_*`` make the next calls raise, for the failure paths of their callers."""

    name: str = "mem"
    payloads: dict[str, bytes] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    written_ms: dict[str, int] = field(default_factory=dict)
    fail_put: StoreError | None = None
    """Raised by every ``put`` while set."""
    fail_delete: Exception | None = None
    fail_clear: Exception | None = None
    calls: list[str] = field(default_factory=list)

    def locator_for(self, topic: str, message_id: uuid.UUID, size: int) -> str:
        return f"{topic}/{message_id}"

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
        self.calls.append("put")
        if self.fail_put is not None:
            raise self.fail_put
        locator = f"{topic}/{message_id}"
        self.payloads[locator] = bytes(payload)
        self.written_ms[locator] = pending_since_ms or 0
        if pending_since_ms is not None:
            self.pending[locator] = pending_since_ms
        return locator

    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        try:
            return self.payloads[locator]
        except KeyError:
            raise PayloadNotFoundError(locator) from None

    def delete(self, locator: str) -> None:
        self.calls.append("delete")
        if self.fail_delete is not None:
            raise self.fail_delete
        self.payloads.pop(locator, None)
        self.pending.pop(locator, None)

    def validate_locator(self, locator: str) -> MemoryLocator:
        topic, _, message_id = locator.rpartition("/")
        try:
            return MemoryLocator(topic, uuid.UUID(message_id))
        except ValueError:
            raise LocatorError(f"not a memory locator: {locator!r}") from None

    def address_of(self, locator: str) -> PayloadAddress:
        parsed = self.validate_locator(locator)
        return PayloadAddress(parsed.topic, parsed.message_id)

    def mark_pending(self, locator: str, now_ms: int) -> None:
        self.pending[locator] = now_ms

    def clear_pending(self, locator: str) -> None:
        self.calls.append("clear_pending")
        if self.fail_clear is not None:
            raise self.fail_clear
        self.pending.pop(locator, None)

    def list_pending(self, older_than_ms: int) -> list[str]:
        return [loc for loc, ms in self.pending.items() if ms < older_than_ms]

    def list_locators(self, topic: str | None = None) -> Iterator[tuple[str, int]]:
        return iter([(loc, ms) for loc, ms in self.written_ms.items() if topic is None or loc.startswith(f"{topic}/")])

    def metrics(self) -> dict[str, int | float]:
        return {"puts": self.calls.count("put")}

    def close(self) -> None:
        pass


class BatchingMemoryStore(MemoryStore):
    """A store that clears many marks in one call, as ``RedisStore.clear_pending_many`` does."""

    def clear_pending_many(self, locators: Sequence[str]) -> None:
        self.calls.append(f"clear_pending_many:{len(locators)}")
        if self.fail_clear is not None:
            raise self.fail_clear
        for locator in locators:
            self.pending.pop(locator, None)


class RangingMemoryStore(MemoryStore):
    """A store that reads parts of a payload, as the object stores' ranged GETs and Redis's GETRANGE do."""

    reads_ranges: ClassVar[bool] = True

    def get_range(self, locator: str, start: int, length: int) -> bytes:
        self.calls.append("get_range")
        return self.get(locator)[start : start + length]


class MemoryPipeline:
    """Writes held until confirmed, as :class:`stores.redis._pipeline.RedisPutPipeline` holds them on its socket."""

    def __init__(self, store: PipeliningMemoryStore) -> None:
        self.store = store
        self.sent: list[tuple[str, bytes, int | None]] = []
        self.fail_confirm: StoreError | None = None
        """Raised by the next ``confirm`` (then cleared), as a write the server refused."""
        self.closed = False

    def __len__(self) -> int:
        return len(self.sent)

    def submit(
        self,
        topic: str,
        message_id: uuid.UUID,
        payload: Payload,
        *,
        pending_since_ms: int | None = None,
        persistent: bool = False,
    ) -> str:
        self.store.calls.append("submit")
        locator = f"{topic}/{message_id}"
        self.sent.append((locator, bytes(payload), pending_since_ms))
        return locator

    def confirm(self) -> str:
        self.store.calls.append("confirm")
        locator, payload, pending = self.sent.pop(0)
        if self.fail_confirm is not None:
            error, self.fail_confirm = self.fail_confirm, None
            raise error
        self.store.payloads[locator] = payload
        if pending is not None:
            self.store.pending[locator] = pending
        return locator

    def close(self) -> None:
        self.closed = True


class PipeliningMemoryStore(MemoryStore):
    """A store that can keep writes in flight (``put_pipeline``), as a standalone ``RedisStore`` can."""

    def __init__(self, name: str = "mem") -> None:
        super().__init__(name)
        self.pipeline = MemoryPipeline(self)

    def put_pipeline(self) -> MemoryPipeline:
        return self.pipeline
