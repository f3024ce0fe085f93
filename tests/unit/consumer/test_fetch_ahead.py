"""Fetch-ahead of referenced payloads: the byte budget is given back for every record handled."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest

from gateway.consumer._errors import retriable
from gateway.consumer.fetch_ahead import ReferenceFetcher
from gateway.consumer.reference_rules import ReferenceRules
from gateway.consumer.resolver import GROUP_BELOW, Resolver
from gateway.errors import (
    ConfigurationError,
    GatewayError,
    LocatorTopicError,
    PayloadIntegrityError,
    PayloadNotFoundError,
    PayloadTooLargeError,
    StoreNotConfiguredError,
    StoreUnavailableError,
)
from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.testing.memory_store import MemoryStore


def stored(store: MemoryStore, data: bytes, *, name: str = "mem") -> Envelope:
    message_id = uuid.uuid4()
    locator = store.put("t", message_id, data)
    return Envelope.for_payload(data, store=name, locator=locator, message_id=message_id)


def scan_item(key: int, envelope: Envelope, topic: str = "t") -> tuple[int, str, bytes, list[tuple[str, bytes]]]:
    return key, topic, encode_envelope(envelope), [envelope_header()]


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
        assert refs.resolve(4, envelopes[4], topic="t") == bytes([4]) * 1000
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


def test_an_envelope_naming_a_store_the_consumer_was_not_given_is_a_configuration_error() -> None:
    """It said ``StoreUnavailableError`` (an outage, retried) for what only the configuration can fix."""
    store = MemoryStore()
    refs = fetcher(store, budget=10_000)
    try:
        stray = stored(store, b"x" * 10, name="redis")
        refs.scan([scan_item(0, stray)])
        with pytest.raises(StoreNotConfiguredError, match=r"'redis'.*stores=") as info:
            refs.resolve(0, stray, topic="t")
        assert isinstance(info.value, ConfigurationError) and not isinstance(info.value, StoreUnavailableError)
        assert not retriable(info.value)
        with pytest.raises(StoreNotConfiguredError):
            Resolver({}).resolve(1, stray, topic="t")
    finally:
        refs.resolver.close()


def test_a_payload_fetched_ahead_is_still_used_when_its_record_is_resolved() -> None:
    store = MemoryStore()
    refs = fetcher(store, budget=10_000)
    try:
        envelope = stored(store, b"p" * 100)
        refs.scan([scan_item(0, envelope)])
        assert refs.resolve(0, envelope, topic="t") == b"p" * 100
        refs.done(0)
        assert refs.resolver.counters["prefetched"] == 1 and refs.resolver.counters["fetched"] == 1
        assert refs.resolver.metrics()["resolver.ahead.bytes"] == 0
    finally:
        refs.resolver.close()


class GroupingMemoryStore(MemoryStore):
    """A store that answers several gets in one call, as ``RedisStore.get_many`` does."""

    reads_in_groups = True
    fail_many: Exception | None = None

    def get_many(self, requests: Sequence[tuple[str, int | None]]) -> list[bytes | GatewayError]:
        self.calls.append(f"get_many:{len(requests)}")
        if self.fail_many is not None:
            raise self.fail_many
        out: list[bytes | GatewayError] = []
        for locator, _ in requests:
            try:
                out.append(self.get(locator))
            except GatewayError as exc:
                out.append(exc)
        return out


def test_small_payloads_are_fetched_ahead_in_one_request_and_each_keeps_its_own_error() -> None:
    store = GroupingMemoryStore()
    refs = ReferenceFetcher(Resolver({"mem": store}, workers=2, budget=1_000_000))
    try:
        envelopes = [stored(store, bytes([i]) * 1000) for i in range(10)]
        del store.payloads[envelopes[3].locator]  # gone: that record alone reports it
        store.payloads[envelopes[5].locator] = b"\xff" * 1000  # replaced behind its envelope
        refs.scan(scan_item(i, e) for i, e in enumerate(envelopes))
        assert refs.resolver.counters["prefetched"] == 10
        for i, envelope in enumerate(envelopes):
            if i == 3:
                with pytest.raises(PayloadNotFoundError):
                    refs.resolve(i, envelope, topic="t")
            elif i == 5:
                with pytest.raises(PayloadIntegrityError):
                    refs.resolve(i, envelope, topic="t")
            else:
                assert refs.resolve(i, envelope, topic="t") == bytes([i]) * 1000
        assert [c for c in store.calls if c.startswith("get_many")] == ["get_many:10"]
        assert refs.resolver.metrics()["resolver.ahead.bytes"] == 0
    finally:
        refs.resolver.close()


def test_groups_stop_at_the_budget_and_at_a_large_payload_and_resume_whole() -> None:
    store = GroupingMemoryStore()
    refs = ReferenceFetcher(Resolver({"mem": store}, workers=2, budget=5_000))
    try:
        envelopes = [stored(store, bytes([i]) * 1000) for i in range(8)]
        big = stored(store, b"b" * GROUP_BELOW)
        refs.scan([*(scan_item(i, e) for i, e in enumerate(envelopes)), scan_item(8, big)])
        assert store.calls == ["put"] * 9 + ["get_many:5"]  # the budget holds five
        prefetched = refs.resolver.counters
        for i in range(2):
            assert refs.resolve(i, envelopes[i], topic="t") == bytes([i]) * 1000
        assert prefetched["prefetched"] == 5, "room for one or two of the three left: the group waits"
        assert refs.resolve(2, envelopes[2], topic="t") == bytes([2]) * 1000
        assert prefetched["prefetched"] == 8, "room for all three: one request"
        for i in range(3, 8):
            assert refs.resolve(i, envelopes[i], topic="t") == bytes([i]) * 1000
        assert refs.resolve(8, big, topic="t") == b"b" * GROUP_BELOW  # alone, not in a group
        assert [c for c in store.calls if c.startswith("get_many")] == ["get_many:5", "get_many:3"]
    finally:
        refs.resolver.close()


def test_a_group_whose_request_fails_fails_each_resolve_typed() -> None:
    store = GroupingMemoryStore()
    store.fail_many = StoreUnavailableError("redis is down")
    refs = ReferenceFetcher(Resolver({"mem": store}, workers=2, budget=1_000_000))
    try:
        envelopes = [stored(store, bytes([i]) * 100) for i in range(3)]
        refs.scan(scan_item(i, e) for i, e in enumerate(envelopes))
        for i, envelope in enumerate(envelopes):
            with pytest.raises(StoreUnavailableError, match="redis is down"):
                refs.resolve(i, envelope, topic="t")
    finally:
        refs.resolver.close()


def test_a_grouped_payload_forgotten_before_it_arrives_is_dropped() -> None:
    store = GroupingMemoryStore()
    refs = ReferenceFetcher(Resolver({"mem": store}, workers=2, budget=1_000_000))
    try:
        envelopes = [stored(store, bytes([i]) * 100) for i in range(3)]
        refs.scan(scan_item(i, e) for i, e in enumerate(envelopes))
        refs.done(1)  # handled without it (a duplicate)
        assert refs.resolve(0, envelopes[0], topic="t") == bytes([0]) * 100
        assert refs.resolve(2, envelopes[2], topic="t") == bytes([2]) * 100
        assert refs.resolver.metrics()["resolver.ahead.bytes"] == 0
    finally:
        refs.resolver.close()


def test_envelopes_the_rules_refuse_are_not_fetched_ahead_and_raise_when_resolved() -> None:
    """A copy of another topic's envelope, and a forged size, cost no store read at all."""
    store = MemoryStore()
    refs = ReferenceFetcher(Resolver({"mem": store}, workers=2, budget=10**12, rules=ReferenceRules(1_000)))
    gets: list[str] = []
    real_get = store.get

    def get(locator: str, expected_size: int | None = None) -> bytes:
        gets.append(locator)
        return real_get(locator, expected_size)

    store.get = get  # type: ignore[method-assign]
    try:
        copied = stored(store, b"c" * 100)  # written for topic "t"
        forged = Envelope(copied.store, copied.locator, 2**41, copied.digest, copied.message_id)
        fine = stored(store, b"f" * 100)
        refs.scan([scan_item(0, copied, topic="u"), scan_item(1, forged), scan_item(2, fine)])
        assert refs.resolver.counters["prefetched"] == 1
        with pytest.raises(LocatorTopicError, match=r"'u'.*'t'"):
            refs.resolve(0, copied, topic="u")
        with pytest.raises(PayloadTooLargeError):
            refs.resolve(1, forged, topic="t")
        assert refs.resolve(2, fine, topic="t") == b"f" * 100
        assert gets == [fine.locator]
        assert refs.resolver.counters["errors"] == 2
    finally:
        refs.resolver.close()
