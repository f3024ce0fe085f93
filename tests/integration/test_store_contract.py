"""The Store contract, run against every store on its real server: what the producer, the consumer and gc rely on.

What only one store does (Redis entries and transactions, S3 multipart, markers, encryption) is
tested beside it, in ``test_redis_store.py`` and ``test_s3_store.py``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.errors import LocatorError, PayloadIntegrityError, PayloadNotFoundError, StoreUnavailableError
from gateway.store import Store
from stores import AzureBlobStore, GCSStore, RedisStore, S3Store
from stores.blob import BlobStore

MiB = 1024 * 1024
TOPIC = "orders"
SCHEMES = {"s3": "s3", "gcs": "gs", "azure": "abs"}


@pytest.fixture(params=["redis", "s3", "gcs", "azure"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(kind: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make_store(name=None)``: a store of this kind on its real server, emptied for the test."""
    if kind == "redis":
        client = request.getfixturevalue("redis_client")
        prefix = f"gw{uuid.uuid4().hex[:6]}"
        yield lambda **kw: RedisStore(client, prefix=prefix, **kw)
    elif kind == "s3":
        client = request.getfixturevalue("s3_client")
        bucket, prefix = request.getfixturevalue("s3_bucket"), request.getfixturevalue("s3_prefix")
        yield lambda **kw: S3Store(client, bucket=bucket, prefix=prefix, **kw)
    elif kind == "gcs":
        client = request.getfixturevalue("gcs_client")
        bucket, prefix = request.getfixturevalue("gcs_bucket"), request.getfixturevalue("s3_prefix")
        yield lambda **kw: GCSStore(client, bucket=bucket, prefix=prefix, **kw)
    else:
        client = request.getfixturevalue("azure_client")
        container, prefix = request.getfixturevalue("azure_container"), request.getfixturevalue("s3_prefix")
        yield lambda **kw: AzureBlobStore(client, container=container, prefix=prefix, **kw)


@pytest.fixture
def store(make_store: Any) -> Store:
    return make_store()  # type: ignore[no-any-return]


def never_written(store: Store) -> str:
    """A valid locator of this store that names nothing."""
    if isinstance(store, (S3Store, BlobStore)):
        return store.locator_for(TOPIC, uuid.uuid4())
    assert isinstance(store, RedisStore)
    return f"{store.prefix}:{TOPIC}:{uuid.uuid4()}#1x{64 * MiB}"


def test_is_a_store_named_as_configured(store: Store, make_store: Any, kind: str) -> None:
    assert isinstance(store, Store)
    assert store.name == kind
    assert make_store(name="tier-2").name == "tier-2"


@pytest.mark.parametrize("size", [0, 1, 1000, 20 * MiB], ids=["empty", "one-byte", "1KB", "20MiB"])
def test_round_trip(store: Store, size: int) -> None:
    payload = os.urandom(size)
    locator = store.put(TOPIC, uuid.uuid4(), payload)
    assert store.get(locator, expected_size=size) == payload
    assert store.get(locator) == payload  # the size is optional
    m = store.metrics()
    assert m["puts"] == 1 and m["gets"] == 2
    assert m["bytes_written"] == size and m["bytes_read"] == 2 * size


def test_a_size_other_than_the_envelope_says_is_refused(store: Store) -> None:
    locator = store.put(TOPIC, uuid.uuid4(), b"x" * 1000)
    with pytest.raises((PayloadIntegrityError, LocatorError)):
        store.get(locator, expected_size=999)


def test_missing_and_deleted_payloads_are_not_found(store: Store) -> None:
    with pytest.raises(PayloadNotFoundError):
        store.get(never_written(store))
    locator = store.put(TOPIC, uuid.uuid4(), b"gone soon", pending_since_ms=1)
    store.delete(locator)
    store.delete(locator)  # already gone: still fine, a rollback may run twice
    with pytest.raises(PayloadNotFoundError):
        store.get(locator)
    assert locator not in store.list_pending(10**15)  # delete clears the mark too


def test_pending_journal(store: Store) -> None:
    """Marks are listed by age (strictly older), cleared without touching the payload, gone with it."""
    now = int(time.time() * 1000)
    journalled = store.put(TOPIC, uuid.uuid4(), b"a", pending_since_ms=now)
    manual = store.put(TOPIC, uuid.uuid4(), b"b")
    assert store.list_pending(now + 5_000) == [journalled]  # without pending_since_ms nothing is journalled
    assert store.list_pending(now - 60_000) == []
    store.mark_pending(manual, now)
    assert sorted(store.list_pending(now + 5_000)) == sorted([journalled, manual])
    store.clear_pending(journalled)
    assert store.list_pending(now + 5_000) == [manual]
    assert store.get(journalled) == b"a"
    store.delete(manual)
    assert store.list_pending(now + 5_000) == []


def test_list_locators_by_topic(store: Store) -> None:
    a = store.put("a", uuid.uuid4(), b"1", pending_since_ms=1)
    b = store.put("b", uuid.uuid4(), b"2")
    listed = dict(store.list_locators())
    assert set(listed) == {a, b}
    assert all(ms > 0 for ms in listed.values())
    assert [loc for loc, _ in store.list_locators("a")] == [a]


def test_topic_and_message_id_are_validated_on_put(store: Store) -> None:
    for topic in ("", ".", "..", "a/b", "x" * 250, "spaces here"):
        with pytest.raises(ValueError):
            store.put(topic, uuid.uuid4(), b"x")
    with pytest.raises(ValueError):
        store.put(TOPIC, "not-a-uuid", b"x")  # type: ignore[arg-type]


def test_foreign_and_malformed_locators_are_refused(store: Store, make_store: Any, kind: str) -> None:
    foreign = (
        "redis-other:orders:00000000-0000-0000-0000-000000000000#1x1024"
        if kind == "redis"
        else f"{SCHEMES[kind]}://another-bucket/gw/orders/00000000-0000-0000-0000-000000000000"
    )
    for locator in (foreign, "", "../../etc/passwd", never_written(store) + "/.."):
        with pytest.raises(LocatorError):
            store.get(locator)
        with pytest.raises(LocatorError):
            store.delete(locator)


def test_a_closed_store_refuses(store: Store) -> None:
    locator = store.put(TOPIC, uuid.uuid4(), b"x")
    store.close()
    with pytest.raises(StoreUnavailableError, match="closed"):
        store.put(TOPIC, uuid.uuid4(), b"x")
    with pytest.raises(StoreUnavailableError, match="closed"):
        store.get(locator)
