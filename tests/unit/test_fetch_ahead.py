"""Fetch-ahead of referenced payloads: the byte budget is given back for every record handled."""

from __future__ import annotations

import uuid

from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.references import ReferenceFetcher
from gateway.resolver import Resolver
from tests.unit.memory_store import MemoryStore


def stored(store: MemoryStore, data: bytes, *, name: str = "mem") -> Envelope:
    message_id = uuid.uuid4()
    locator = store.put("t", message_id, data)
    return Envelope.for_payload(data, store=name, locator=locator, message_id=message_id)


def scan_item(key: int, envelope: Envelope) -> tuple[int, bytes, list[tuple[str, bytes]]]:
    return key, encode_envelope(envelope), [envelope_header()]


def fetcher(store: MemoryStore, budget: int) -> ReferenceFetcher:
    return ReferenceFetcher(Resolver({"mem": store}, workers=2, budget=budget))


def test_payloads_fetched_ahead_for_filtered_records_free_the_budget() -> None:
    """After a restart the first records are duplicates: they are handled without being resolved."""
    store = MemoryStore()
    refs = fetcher(store, budget=3000)
    try:
        envelopes = [stored(store, bytes([i]) * 1000) for i in range(6)]
        refs.scan(scan_item(i, envelopes[i]) for i in range(3))
        assert refs.resolver.counters["prefetched"] == 3
        for i in range(3):  # filtered as delivered before: never resolved
            refs.done(i)
        assert refs.resolver.metrics()["resolver.ahead.bytes"] == 0
        refs.scan(scan_item(i, envelopes[i]) for i in range(3, 6))
        assert refs.resolver.counters["prefetched"] == 6
        assert refs.resolve(4, envelopes[4]) == bytes([4]) * 1000
    finally:
        refs.resolver.close()


def test_an_envelope_naming_an_unknown_store_does_not_stop_fetch_ahead() -> None:
    store = MemoryStore()
    refs = fetcher(store, budget=10_000)
    try:
        stray = stored(store, b"x" * 10, name="elsewhere")
        envelopes = [stored(store, bytes([i]) * 100) for i in range(3)]
        refs.scan([scan_item(0, stray), *(scan_item(i + 1, e) for i, e in enumerate(envelopes))])
        assert refs.resolver.counters["prefetched"] == 3
    finally:
        refs.resolver.close()


def test_a_payload_fetched_ahead_is_still_used_when_its_record_is_resolved() -> None:
    store = MemoryStore()
    refs = fetcher(store, budget=10_000)
    try:
        envelope = stored(store, b"p" * 100)
        refs.scan([scan_item(0, envelope)])
        assert refs.resolve(0, envelope) == b"p" * 100
        refs.done(0)
        assert refs.resolver.counters["prefetched"] == 1 and refs.resolver.counters["fetched"] == 1
        assert refs.resolver.metrics()["resolver.ahead.bytes"] == 0
    finally:
        refs.resolver.close()
