"""Whatever a store or a key provider raises while a payload is fetched ahead, its reader wakes up with a typed error.

Issue 38: a key provider raising ``ConnectionError`` while a group of small payloads was opened left
their futures unsettled, and the consumer's ``poll`` waited on them for good; a payload fetched alone
reported the provider's failure as the store's (``StoreUnavailableError``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from gateway.consumer import resolver as resolver_module
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.resolver import GROUP_BELOW, Resolver
from gateway.encryption import DataKey, KeyProvider, LocalKeyRing, ReferenceEncryption
from gateway.errors import KeyProviderUnavailableError, StoreError, StoreUnavailableError
from gateway.protocol.envelope import Envelope, decode_envelope, encode_envelope
from gateway.testing.memory_store import MemoryStore
from tests.unit.consumer.test_fetch_ahead import GroupingMemoryStore, scan_item

RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")


class Halt(BaseException):
    """An interrupt (as ``KeyboardInterrupt`` or ``SystemExit`` are), raised by a provider in a worker thread."""


class Provider(KeyProvider):
    """The key ring, behind a client that raises ``exc`` on every unwrap, or waits for ``answer`` first."""

    def __init__(self, exc: BaseException | None = None, answer: threading.Event | None = None) -> None:
        self.exc = exc
        self.answer = answer
        self.unwraps = 0

    def new_data_key(self, context: Mapping[str, str]) -> DataKey:
        return RING.new_data_key(context)

    def unwrap(self, key_id: str, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        self.unwraps += 1
        if self.answer is not None:
            self.answer.wait()
        if self.exc is not None:
            raise self.exc
        return RING.unwrap(key_id, wrapped, context)


def sealed(store: MemoryStore, payload: bytes) -> Envelope:
    """What the producer writes with ``reference.encryption=aes256-gcm``."""
    message_id = uuid.uuid4()
    written = ReferenceEncryption(RING, enabled=True).seal(store, "t", message_id, payload)
    assert written is not None
    locator = store.put("t", message_id, written.payload)
    envelope = Envelope.for_payload(
        written.payload, store=store.name, locator=locator, message_id=message_id, encryption=written.encryption
    )
    return decode_envelope(encode_envelope(envelope))


def reader(store: MemoryStore, provider: KeyProvider) -> ReferenceFetcher:
    return ReferenceFetcher(Resolver({"mem": store}, workers=2, encryption=ReferenceEncryption(provider)))


@pytest.mark.timeout(60)  # before the fix: the first resolve waited for good
@pytest.mark.parametrize("size", [1000, GROUP_BELOW], ids=["grouped", "alone"])
def test_a_provider_raising_its_own_error_fails_every_record_typed_as_the_provider_s(size: int) -> None:
    store = GroupingMemoryStore()
    envelopes = [sealed(store, bytes([i]) * size) for i in range(3)]
    refs = reader(store, Provider(ConnectionError("vault.internal:8200 refused")))
    try:
        refs.scan(scan_item(i, e) for i, e in enumerate(envelopes))
        assert refs.resolver.counters["prefetched"] == 3
        for i, envelope in enumerate(envelopes):
            with pytest.raises(KeyProviderUnavailableError, match="key provider Provider failed to unwrap") as caught:
                refs.resolve(i, envelope, topic="t")
            assert not isinstance(caught.value, StoreError)
            assert isinstance(caught.value.__cause__, ConnectionError)
        assert refs.resolver.counters["errors"] == 3
    finally:
        refs.resolver.close()


@pytest.mark.timeout(60)
def test_an_interrupt_while_a_group_is_opened_still_answers_the_rest_of_the_group() -> None:
    store = GroupingMemoryStore()
    envelopes = [sealed(store, bytes([i]) * 1000) for i in range(3)]
    provider = Provider(Halt())
    refs = reader(store, provider)
    try:
        refs.scan(scan_item(i, e) for i, e in enumerate(envelopes))
        with pytest.raises(Halt):  # the interrupt reaches the reader as itself
            refs.resolve(0, envelopes[0], topic="t")
        for i in (1, 2):
            with pytest.raises(StoreUnavailableError, match="interrupted"):
                refs.resolve(i, envelopes[i], topic="t")
        assert provider.unwraps == 1
    finally:
        refs.resolver.close()


class SilentStore(MemoryStore):
    """A store whose client was given no timeout and whose server stopped answering."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = threading.Event()

    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        self.answer.wait()
        return super().get(locator, expected_size)


@pytest.mark.timeout(60)
def test_a_fetch_that_never_answers_is_waited_for_within_the_bound_naming_the_silent_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resolver_module, "WAIT_S", 0.05)
    monkeypatch.setattr(resolver_module, "WAIT_BYTES_PER_S", 10**15)
    store = SilentStore()
    envelope = sealed(store, b"s" * 1000)
    refs = reader(store, RING)
    try:
        refs.scan([scan_item(0, envelope)])
        with pytest.raises(StoreUnavailableError, match="reading it from store 'mem'"):
            refs.resolve(0, envelope, topic="t")
    finally:
        store.answer.set()
        refs.resolver.close()
    answer = threading.Event()
    store = SilentStore()
    store.answer.set()
    envelope = sealed(store, b"k" * 1000)
    refs = reader(store, Provider(answer=answer))
    try:
        refs.scan([scan_item(0, envelope)])
        with pytest.raises(KeyProviderUnavailableError, match="key provider did not answer"):
            refs.resolve(0, envelope, topic="t")
    finally:
        answer.set()
        refs.resolver.close()


def test_the_wait_returns_the_fetch_s_own_timeout_error_typed_not_as_the_wait_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store client's untyped ``TimeoutError`` (the builtin the wait also raises) is the store's failure."""

    class TimingOut(MemoryStore):
        def get(self, locator: str, expected_size: int | None = None) -> Any:
            raise TimeoutError("socket read timed out")

    store = TimingOut()
    envelope = sealed(store, b"t" * 1000)
    refs = reader(store, RING)
    try:
        refs.scan([scan_item(0, envelope)])
        with pytest.raises(StoreUnavailableError, match="from 'mem' failed: socket read timed out"):
            refs.resolve(0, envelope, topic="t")
    finally:
        refs.resolver.close()
