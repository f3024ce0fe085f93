"""RedisStore against a real redis-server (the session fixture), plus a few pure unit tests."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.errors import (
    LocatorError,
    PayloadIntegrityError,
    PayloadNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from gateway.protocol.envelope import Envelope, decode_envelope, encode_envelope
from gateway.testing import RedisServer
from stores import RedisStore, ttl_from_retention
from stores.base import RetentionInfo
from stores.redis._reads import DIRECT_READ_FROM
from tests.helpers import sha

MB = 1_000_000
MiB = 1024 * 1024
TOPIC = "orders.v1"


def data_keys(client: redis.Redis, prefix: str = "gw", topic: str = TOPIC) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{prefix}:{topic}:*", count=1000))


@pytest.fixture
def store(redis_client: redis.Redis) -> Iterator[RedisStore]:
    with RedisStore(redis_client) as s:
        yield s


def report(what: str, size: int, seconds: float) -> None:
    print(f"\n[redis] {what}: {size / MiB:.0f} MiB in {seconds:.3f}s = {size / MiB / seconds:.0f} MiB/s")


# -- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 20 * MiB], ids=["empty", "one-byte", "20MiB"])
def test_round_trip(store: RedisStore, redis_client: redis.Redis, size: int) -> None:
    payload = os.urandom(size)
    mid = uuid.uuid4()
    started = time.perf_counter()
    locator = store.put(TOPIC, mid, payload)
    put_s = time.perf_counter() - started
    started = time.perf_counter()
    back = store.get(locator, expected_size=size)
    get_s = time.perf_counter() - started
    assert sha(back) == sha(payload) and back == payload
    assert locator == f"gw:{TOPIC}:{mid}#1x{64 * MiB}"
    assert data_keys(redis_client) == [f"gw:{TOPIC}:{mid}:0".encode()]
    assert store.get(locator) == payload  # the size is optional
    m = store.metrics()
    assert m["puts"] == 1 and m["gets"] == 2 and m["bytes_written"] == size and m["bytes_read"] == 2 * size
    if size >= MiB:
        report("put", size, put_s)
        report("get", size, get_s)


@pytest.mark.slow
def test_round_trip_200mb_in_several_entries(store: RedisStore, redis_client: redis.Redis) -> None:
    size = 200 * MiB
    payload = os.urandom(size)
    started = time.perf_counter()
    locator = store.put(TOPIC, uuid.uuid4(), payload)
    report("put 200 MiB", size, time.perf_counter() - started)
    assert locator.endswith(f"#4x{64 * MiB}")
    assert len(data_keys(redis_client)) == 4
    started = time.perf_counter()
    back = store.get(locator, expected_size=size)
    report("get 200 MiB", size, time.perf_counter() - started)
    assert sha(back) == sha(payload)
    store.delete(locator)
    assert redis_client.dbsize() == 0


def test_entries_are_split_at_entry_bytes(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, entry_bytes=1 * MB)
    payload = os.urandom(10 * MB)
    mid = uuid.uuid4()
    locator = store.put(TOPIC, mid, payload)
    assert locator == f"gw:{TOPIC}:{mid}#10x{MB}"
    keys = data_keys(redis_client)
    assert keys == sorted(f"gw:{TOPIC}:{mid}:{i}".encode() for i in range(10))
    assert all(redis_client.strlen(k) == MB for k in keys)
    assert store.get(locator, expected_size=10 * MB) == payload
    # A reader configured with another entry size still reads it: the locator carries the shape.
    assert RedisStore(redis_client, entry_bytes=7).get(locator, expected_size=10 * MB) == payload
    # The uneven case: the last entry is short.
    odd = os.urandom(2 * MB + 5)
    odd_locator = store.put(TOPIC, uuid.uuid4(), odd)
    assert odd_locator.endswith(f"#3x{MB}") and store.get(odd_locator, expected_size=len(odd)) == odd


def test_entry_bytes_must_fit_a_redis_string(redis_client: redis.Redis) -> None:
    for bad in (0, 512 * MiB, 10**12):
        with pytest.raises(ValueError):
            RedisStore(redis_client, entry_bytes=bad)
    RedisStore(redis_client, entry_bytes=512 * MiB - 1)


def test_too_many_entries_is_refused_before_writing(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, entry_bytes=10, max_entries=3)
    with pytest.raises(StoreError, match="max_entries"):
        store.put(TOPIC, uuid.uuid4(), b"x" * 31)
    assert redis_client.dbsize() == 0


def test_decoding_clients_are_refused(redis_server: RedisServer) -> None:
    with pytest.raises(ValueError, match="decode_responses"):
        RedisStore(redis_server.client(decode_responses=True))


# -- delete, journal, index -----------------------------------------------------------------


def test_delete_leaves_zero_keys_and_is_idempotent(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, entry_bytes=1000)
    locator = store.put(TOPIC, uuid.uuid4(), os.urandom(5500), pending_since_ms=123)
    assert len(data_keys(redis_client)) == 6 and redis_client.dbsize() == 8  # + pending + written
    store.delete(locator)
    assert redis_client.dbsize() == 0
    store.delete(locator)  # absent: still fine
    assert redis_client.dbsize() == 0
    with pytest.raises(PayloadNotFoundError):
        store.get(locator)


def test_put_marks_pending_in_the_same_transaction(store: RedisStore, redis_client: redis.Redis) -> None:
    before = redis_client.info("commandstats")
    locator = store.put(TOPIC, uuid.uuid4(), b"payload", pending_since_ms=1_000)
    after = redis_client.info("commandstats")

    def calls(cmd: str) -> int:
        key = f"cmdstat_{cmd}"
        return int(after.get(key, {}).get("calls", 0)) - int(before.get(key, {}).get("calls", 0))

    # One MULTI, one EXEC; the payload and both journal entries are written inside it.
    assert calls("multi") == 1 and calls("exec") == 1 and calls("set") == 1 and calls("zadd") == 2
    assert redis_client.zscore(store.pending_key, locator) == 1_000
    assert store.list_pending(1_001) == [locator]
    assert store.list_pending(1_000) == []  # strictly older than
    store.clear_pending(locator)
    assert store.list_pending(10**15) == [] and store.get(locator) == b"payload"
    # Without pending_since_ms nothing is journalled.
    store.put(TOPIC, uuid.uuid4(), b"x")
    assert store.list_pending(10**15) == []


def test_list_pending_by_age(store: RedisStore) -> None:
    old, new = (store.put(TOPIC, uuid.uuid4(), b"p", pending_since_ms=ms) for ms in (1_000, 5_000))
    manual = store.put(TOPIC, uuid.uuid4(), b"p")
    store.mark_pending(manual, 3_000)
    assert store.list_pending(2_000) == [old]
    assert store.list_pending(4_000) == [old, manual]
    assert store.list_pending(6_000) == [old, manual, new]
    store.delete(manual)  # delete clears the mark too
    assert store.list_pending(6_000) == [old, new]


def test_failed_transaction_writes_nothing(store: RedisStore, redis_client: redis.Redis) -> None:
    """A refused MULTI/EXEC leaves neither entries nor a pending mark, so nothing half-written exists."""
    redis_client.set("canary", b"x")
    policy = redis_client.config_get("maxmemory-policy")["maxmemory-policy"]
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", 1)
    try:
        with pytest.raises(StoreUnavailableError, match="OutOfMemory"):
            RedisStore(redis_client, entry_bytes=100).put(TOPIC, uuid.uuid4(), os.urandom(1000), pending_since_ms=1)
    finally:
        redis_client.config_set("maxmemory", 0)
        redis_client.config_set("maxmemory-policy", policy)
    assert redis_client.keys("*") == [b"canary"]


def test_a_reader_never_sees_a_payload_half_written(redis_client: redis.Redis, redis_server: RedisServer) -> None:
    writer = RedisStore(redis_client, entry_bytes=256 * 1024)
    payload = os.urandom(16 * MiB)  # 64 entries
    mid = uuid.uuid4()
    locator = writer.locator_for(TOPIC, mid, len(payload))
    reader = RedisStore(redis_server.client())
    seen: dict[str, int] = {"missing_all": 0, "partial": 0, "complete": 0, "wrong": 0}
    failures: list[BaseException] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                value = reader.get(locator, expected_size=len(payload))
                seen["complete" if value == payload else "wrong"] += 1
            except PayloadNotFoundError as exc:
                seen["missing_all" if str(exc).startswith("64 of 64") else "partial"] += 1
            except BaseException as exc:  # reported below; a dying thread would otherwise pass silently
                failures.append(exc)
                return

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        time.sleep(0.05)
        writer.put(TOPIC, mid, payload)
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
    assert not failures
    assert seen["partial"] == 0 and seen["wrong"] == 0 and seen["missing_all"] > 0 and seen["complete"] > 0


def test_ttl_is_set_on_every_entry(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, entry_bytes=100, ttl_seconds=600)
    locator = store.put(TOPIC, uuid.uuid4(), os.urandom(1000))
    keys = data_keys(redis_client)
    assert len(keys) == 10
    assert all(0 < redis_client.ttl(k) <= 600 for k in keys)
    store.get(locator)
    untimed = RedisStore(redis_client, prefix="other")
    untimed.put(TOPIC, uuid.uuid4(), b"x")
    assert all(redis_client.ttl(k) == -1 for k in data_keys(redis_client, "other"))
    for bad in (0, -5, True):
        with pytest.raises(ValueError):
            RedisStore(redis_client, ttl_seconds=bad)


def test_expired_payload_is_not_found(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, entry_bytes=100)
    locator = store.put(TOPIC, uuid.uuid4(), os.urandom(300))
    redis_client.delete(data_keys(redis_client)[1])  # one entry expired or evicted
    with pytest.raises(PayloadNotFoundError, match="1 of 3"):
        store.get(locator)
    assert store.metrics()["not_found"] == 1


def test_entries_that_do_not_match_the_locator_are_an_integrity_error(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, entry_bytes=100)
    mid = uuid.uuid4()
    locator = store.put(TOPIC, mid, os.urandom(300))
    redis_client.set(f"gw:{TOPIC}:{mid}:1", b"short")
    with pytest.raises(PayloadIntegrityError):
        store.get(locator)
    # A count that is too small, without a size to check it against: the sentinel entry exists.
    locator = store.put(TOPIC, mid, os.urandom(300))
    with pytest.raises(PayloadIntegrityError):
        store.get(locator.replace("#3x", "#2x"))


def test_get_many_answers_each_locator_as_get_would_in_one_pipeline(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, entry_bytes=100)
    small, split, gone = os.urandom(50), os.urandom(250), os.urandom(10)
    locators = [store.put(TOPIC, uuid.uuid4(), p) for p in (small, split, gone)]
    store.delete(locators[2])
    before = int(redis_client.info("stats")["total_commands_processed"])
    answers = store.get_many(
        [
            (locators[0], 50),
            (locators[1], 250),
            (locators[2], 10),
            (locators[0], 51),  # the size the envelope claims disagrees with the locator
            ("../etc/passwd", None),
        ]
    )
    commands = int(redis_client.info("stats")["total_commands_processed"]) - before
    assert answers[0] == small and answers[1] == split
    assert isinstance(answers[2], PayloadNotFoundError)
    assert isinstance(answers[3], LocatorError | PayloadIntegrityError)
    assert isinstance(answers[4], LocatorError)
    # INFO itself, then one MGET (entries and sentinel) per valid locator, in one write; none for the invalid one
    assert commands == 1 + 4
    assert store.get_many([]) == []


def test_list_locators(store: RedisStore) -> None:
    t0 = int(time.time() * 1000)
    a1 = store.put("a", uuid.uuid4(), b"1")
    a2 = store.put("a", uuid.uuid4(), b"2")
    b1 = store.put("b", uuid.uuid4(), b"3")
    t1 = int(time.time() * 1000)
    everything = dict(store.list_locators())
    assert set(everything) == {a1, a2, b1}
    assert all(t0 <= ms <= t1 for ms in everything.values())
    assert {loc for loc, _ in store.list_locators("a")} == {a1, a2}
    store.delete(a1)
    assert {loc for loc, _ in store.list_locators()} == {a2, b1}


def test_topic_and_id_are_validated_on_put(store: RedisStore) -> None:
    for topic in ("", ".", "..", "a b", "a:b", "a/b", "a#b", "ä", "x" * 250):
        with pytest.raises(ValueError):
            store.put(topic, uuid.uuid4(), b"x")
    with pytest.raises(ValueError):
        store.put("t", "not-a-uuid", b"x")  # type: ignore[arg-type]
    longest = RedisStore(store.client, prefix="p" * 128, entry_bytes=512 * MiB - 1, max_entries=10**9)
    locator = longest.put("x" * 249, uuid.uuid4(), b"x")
    assert longest.get(locator, expected_size=1) == b"x"
    assert decode_envelope(encode_envelope(Envelope("redis", locator, 1, b"\0" * 32, uuid.uuid4()))).locator == locator
    too_long = locator.replace("#1x", "#1000000000x")
    assert len(too_long) == len(locator) + 9
    with pytest.raises(LocatorError, match="max_entries"):  # parsed (not refused for length), then bounded
        RedisStore(store.client, prefix="p" * 128).get(too_long)
    store.put("a..b", uuid.uuid4(), b"x")  # legal in Kafka, harmless here


# -- hostile locators -----------------------------------------------------------------------


def _stats(client: redis.Redis) -> tuple[int, int, int]:
    info = client.info("stats")
    return int(info["total_commands_processed"]), int(info["keyspace_hits"]), int(info["keyspace_misses"])


def hostile_locators(mid: uuid.UUID) -> list[Any]:
    good = f"gw:{TOPIC}:{mid}#3x100"
    return [
        "",
        "garbage",
        "#",
        ":",
        "gw",
        "gw:",
        "gw::#1x1",
        good.replace("gw:", "evil:"),
        good.replace("gw:", "gw:gw:"),
        good.replace("gw:", ""),
        f"gw:..:{mid}#1x100",
        f"gw:.:{mid}#1x100",
        f"gw:{TOPIC}:..#1x100",
        f"gw:../{TOPIC}:{mid}#1x100",
        f"gw:{TOPIC}:{str(mid).upper()}#1x100",
        f"gw:{TOPIC}:{{{mid}}}#1x100",
        f"gw:{TOPIC}:{mid.hex}#1x100",
        f"gw:{TOPIC}:{mid}",
        f"gw:{TOPIC}:{mid}#",
        f"gw:{TOPIC}:{mid}#3",
        f"gw:{TOPIC}:{mid}#0x100",
        f"gw:{TOPIC}:{mid}#03x100",
        f"gw:{TOPIC}:{mid}#-1x100",
        f"gw:{TOPIC}:{mid}#3x0",
        f"gw:{TOPIC}:{mid}#{10**9}x1",
        f"gw:{TOPIC}:{mid}#{10**18}x1",
        f"gw:{TOPIC}:{mid}#3x{512 * MiB}",
        f"gw:{TOPIC}:{mid}#3x100 ",
        f" {good}",
        good + "\n",
        good + "\x00",
        f"gw:{TOPIC}:{mid}#{chr(0xFF13)}x100",
        f"gw:{TOPIC}:{mid}:0",
        f"gw:{TOPIC}:{mid}#3x100#3x100",
        f"gw:or*:{mid}#3x100",
        "gw:pending",
        "gw:written",
        "canary",
        f"gw:{TOPIC}:{mid}#3x100:canary",
        "x" * 10_000,
        None,
        b"gw:t:x#1x1",
        42,
    ]


def test_hostile_locators_are_refused_without_touching_redis(store: RedisStore, redis_client: redis.Redis) -> None:
    mid = uuid.uuid4()
    redis_client.set("canary", b"secret")
    redis_client.set(f"gw:{TOPIC}:{mid}:0", b"y" * 100)  # makes "wrong count" locators plausible
    for locator in hostile_locators(mid):
        for call in (store.get, store.delete, store.clear_pending, lambda loc: store.mark_pending(loc, 1)):
            before = _stats(redis_client)
            with pytest.raises(LocatorError):
                call(locator)
            after = _stats(redis_client)
            # Exactly one command ran in between: the first INFO itself. No read, no miss, no write.
            assert after == (before[0] + 1, before[1], before[2]), (locator, call)
    assert redis_client.get("canary") == b"secret" and redis_client.get(f"gw:{TOPIC}:{mid}:0") == b"y" * 100


def test_a_count_that_does_not_fit_the_size_is_refused_before_io(store: RedisStore, redis_client: redis.Redis) -> None:
    mid = uuid.uuid4()
    locator = RedisStore(redis_client, entry_bytes=100).put(TOPIC, mid, os.urandom(300))
    assert locator.endswith("#3x100")
    cases = (("#2x100", 300), ("#4x100", 300), ("#3x150", 300), ("#3x100", 200), ("#2x100", 0), ("#1x100", 101))
    for wrong, size in cases:
        before = _stats(redis_client)
        with pytest.raises(LocatorError, match="takes"):
            store.get(locator.replace("#3x100", wrong), expected_size=size)
        assert _stats(redis_client)[0] == before[0] + 1
    assert len(store.get(locator, expected_size=300)) == 300


def test_other_prefix_is_another_store(redis_client: redis.Redis) -> None:
    a, b = RedisStore(redis_client, prefix="app:a"), RedisStore(redis_client, prefix="app")
    locator = a.put(TOPIC, uuid.uuid4(), b"x")
    with pytest.raises(LocatorError):
        b.get(locator)
    with pytest.raises(LocatorError):
        b.delete(locator)
    assert a.get(locator) == b"x"
    for bad in ("", "a b", "a*", "a#b", "a[b]", "ä", "x" * 129):
        with pytest.raises(ValueError):
            RedisStore(redis_client, prefix=bad)


# -- unavailability -------------------------------------------------------------------------


def test_an_error_inside_the_transaction_is_a_store_error_and_the_connection_stays_in_step(
    redis_client: redis.Redis,
) -> None:
    """Error replies in the middle of the packed transaction's replies: later calls must read their own."""
    store = RedisStore(redis_client, prefix=f"wt{uuid.uuid4().hex[:6]}")
    redis_client.set(store.pending_key, b"not a sorted set")  # ZADD on it fails inside EXEC: WRONGTYPE
    try:
        with pytest.raises(StoreError, match="WRONGTYPE"):
            store.put(TOPIC, uuid.uuid4(), os.urandom(50_000), pending_since_ms=1)
        for size in (10, 50_000):
            value = os.urandom(size)
            assert store.get(store.put(TOPIC, uuid.uuid4(), value)) == value
    finally:
        redis_client.delete(store.pending_key)
    value = os.urandom(70_000)
    locator = store.put(TOPIC, uuid.uuid4(), value, pending_since_ms=5)
    assert store.get(locator) == value and store.list_pending(6) == [locator]
    pool = redis_client.connection_pool
    assert len(pool._in_use_connections) == 0, "every connection went back to the pool"  # type: ignore[attr-defined]


def test_stopped_server_is_unavailable(redis_server: RedisServer) -> None:
    if redis_server.external:
        pytest.skip("cannot stop an external Redis")
    client = redis_server.client(retry=Retry(NoBackoff(), 1), socket_timeout=2)
    store = RedisStore(client)
    locator = store.put(TOPIC, uuid.uuid4(), b"before")
    redis_server.stop()
    try:
        started = time.perf_counter()
        for op in (
            lambda: store.put(TOPIC, uuid.uuid4(), b"x", pending_since_ms=1),
            lambda: store.get(locator),
            lambda: store.delete(locator),
            lambda: store.clear_pending(locator),
            lambda: store.list_pending(10),
            lambda: list(store.list_locators()),
        ):
            with pytest.raises(StoreUnavailableError) as info:
                op()
            assert isinstance(info.value.__cause__, redis.ConnectionError)
        assert time.perf_counter() - started < 10
        assert store.metrics()["errors"] >= 6
    finally:
        redis_server.start()
    # Back on the same port, empty (no persistence): the store recovers without being rebuilt.
    with pytest.raises(PayloadNotFoundError):
        store.get(locator)
    assert store.get(store.put(TOPIC, uuid.uuid4(), b"after")) == b"after"
    client.close()


# -- TTL from topic retention (pure) --------------------------------------------------------


class _Entry(SimpleNamespace):
    value: str | None


def _admin(configs: dict[str, str]) -> Any:
    class Admin:
        def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Future[Any]]:
            assert resources[0].name == "orders" and request_timeout > 0
            future: Future[Any] = Future()
            future.set_result({k: _Entry(value=v) for k, v in configs.items()})
            return {resources[0]: future}

    return Admin()


def test_ttl_from_retention() -> None:
    day, week = 86_400_000, 604_800_000
    # retention + segment.ms (a segment is deleted whole, once its newest record is past retention) + margin
    assert ttl_from_retention(_admin({"retention.ms": str(day), "segment.ms": str(week)}), "orders") == 8 * 86400 + 3600
    assert ttl_from_retention(_admin({"retention.ms": "1500", "segment.ms": "1000"}), "orders", margin_seconds=0) == 3
    assert ttl_from_retention(_admin({"retention.ms": "-1", "segment.ms": str(week)}), "orders") is None
    compact = {"retention.ms": str(day), "segment.ms": str(week), "cleanup.policy": "compact"}
    assert ttl_from_retention(_admin(compact), "orders") is None
    both = {**compact, "cleanup.policy": "compact,delete"}
    assert ttl_from_retention(_admin(both), "orders") == 8 * 86400 + 3600
    assert RetentionInfo(None, week).payload_ttl_seconds(10) is None


@pytest.mark.requires("topic_configs_enforced")
def test_ttl_from_retention_on_a_broker(kafka: Any) -> None:
    name = f"ttl-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(name, config={"retention.ms": "3600000", "segment.ms": "600000"})
    try:
        assert ttl_from_retention(kafka.admin(), name, margin_seconds=60) == 3600 + 600 + 60
    finally:
        kafka.delete_topic(name)


# -- layouts --------------------------------------------------------------------------------


def test_data_written_by_the_flat_layout_keeps_working(redis_client: redis.Redis) -> None:
    """Keys and journal exactly as the first release wrote them, by hand: read, listed, swept, deleted."""
    mid = uuid.uuid4()
    locator = f"gw:{TOPIC}:{mid}#2x4"
    redis_client.set(f"gw:{TOPIC}:{mid}:0", b"abcd")
    redis_client.set(f"gw:{TOPIC}:{mid}:1", b"ef")
    redis_client.zadd("gw:pending", {locator: 1_000})
    redis_client.zadd("gw:written", {locator: 1_000})
    store = RedisStore(redis_client)
    assert store.layout == "flat"
    assert store.get(locator, expected_size=6) == b"abcdef"
    assert store.list_pending(2_000) == [locator]
    assert list(store.list_locators(TOPIC)) == [(locator, 1_000)]
    store.clear_pending(locator)
    assert redis_client.zcard("gw:pending") == 0
    store.delete(locator)
    assert redis_client.dbsize() == 0
    # and what it writes today is still that layout
    new = store.put(TOPIC, mid, b"x", pending_since_ms=5)
    assert new == f"gw:{TOPIC}:{mid}#1x{64 * MiB}" and redis_client.zscore("gw:pending", new) == 5


def test_slotted_layout_on_a_standalone_server(redis_client: redis.Redis) -> None:
    from redis.crc import key_slot

    from stores.redis._layout import bucket_head, bucket_of

    slotted = RedisStore(redis_client, entry_bytes=100, layout="slotted")
    flat = RedisStore(redis_client, entry_bytes=100)
    mid = uuid.uuid4()
    payload = os.urandom(250)
    locator = slotted.put(TOPIC, mid, payload, pending_since_ms=2_000)
    head = bucket_head("gw", bucket_of(mid))
    assert locator == f"{head}:{TOPIC}:{mid}#3x100"
    keys = sorted(redis_client.keys("gw:*"))
    assert keys == sorted(
        [f"{head}:{TOPIC}:{mid}:{i}".encode() for i in range(3)]
        + [f"{head}:pending".encode(), f"{head}:written".encode()]
    )
    assert len({key_slot(k) for k in keys}) == 1
    assert flat.get(locator, expected_size=250) == payload, "a flat-layout store reads slotted locators"
    old = flat.put(TOPIC, uuid.uuid4(), b"old", pending_since_ms=1_000)
    later = flat.put(TOPIC, uuid.uuid4(), b"later", pending_since_ms=3_000)
    for store in (flat, slotted):  # both journals, oldest first, whichever layout the store writes
        assert store.list_pending(10_000) == [old, locator, later]
        assert {loc for loc, _ in store.list_locators(TOPIC)} == {old, locator, later}
        assert list(store.list_locators("other")) == []
    slotted.clear_pending_many([old, locator, later])  # two journal keys, one pipeline
    assert flat.list_pending(10_000) == []
    flat.delete(locator)
    flat.delete(old)
    flat.delete(later)
    assert redis_client.dbsize() == 0
    with pytest.raises(ValueError, match="layout"):
        RedisStore(redis_client, layout="sharded")


def test_slotted_locators_with_another_bucket_are_refused_without_io(
    store: RedisStore, redis_client: redis.Redis
) -> None:
    from stores.redis._layout import bucket_head, bucket_of

    mid = uuid.uuid4()
    right = bucket_of(mid)
    good = f"{bucket_head('gw', right)}:{TOPIC}:{mid}#1x100"
    assert store.validate_locator(good).bucket == right
    bad = [
        good.replace(bucket_head("gw", right), bucket_head("gw", (right + 1) % 1024)),
        good.replace(bucket_head("gw", right), f"gw:{{{right:04x}}}"),
        good.replace("gw:{", "gw:{{"),
        good.replace("gw:{", "gw:x:{"),
        good.replace("gw:{", "other:{"),
        good.replace("}", "}}"),
        f"gw:{{}}:{TOPIC}:{mid}#1x100",
        f"gw:{{ {right:03x}}}:{TOPIC}:{mid}#1x100",
    ]
    for locator in bad:
        before = _stats(redis_client)
        with pytest.raises(LocatorError):
            store.get(locator)
        assert _stats(redis_client)[0] == before[0] + 1, locator


# -- large payloads received straight into their value ---------------------------------------------


def direct_store(redis_client: redis.Redis) -> RedisStore:
    return RedisStore(redis_client, prefix=f"dr{uuid.uuid4().hex[:6]}", entry_bytes=300_000)


def test_a_large_payload_is_received_straight_into_its_value(redis_client: redis.Redis) -> None:
    store = direct_store(redis_client)
    for size in (DIRECT_READ_FROM, 300_000, 1_000_001, 3_000_000):
        value = os.urandom(size)
        locator = store.put(TOPIC, uuid.uuid4(), value)
        assert store.get(locator, expected_size=size) == value
    assert len(redis_client.connection_pool._in_use_connections) == 0  # type: ignore[attr-defined]


def test_what_the_direct_read_finds_wrong_is_judged_as_before(redis_client: redis.Redis) -> None:
    """Missing entries, short entries and a sentinel that exists; the connection stays usable after each."""
    store = direct_store(redis_client)
    value = os.urandom(1_000_000)
    healthy = store.put(TOPIC, uuid.uuid4(), value)

    def damaged(change: Any) -> str:
        locator = store.put(TOPIC, uuid.uuid4(), value)
        change(store.validate_locator(locator))
        return locator

    missing = damaged(lambda p: redis_client.delete(p.keys(store.prefix)[1]))
    short = damaged(lambda p: redis_client.set(p.keys(store.prefix)[0], b"short"))
    beyond = damaged(lambda p: redis_client.set(p.sentinel(store.prefix), b"x" * 400_000))
    with pytest.raises(PayloadNotFoundError, match="1 of 4 entries"):
        store.get(missing, expected_size=len(value))
    assert store.get(healthy, expected_size=len(value)) == value
    for locator in (short, beyond):
        with pytest.raises(PayloadIntegrityError, match="do not have the shape"):
            store.get(locator, expected_size=len(value))
        assert store.get(healthy, expected_size=len(value)) == value
    with pytest.raises(PayloadIntegrityError):
        store.get(healthy, expected_size=len(value) - 1)


def test_a_connection_the_server_closed_is_replaced(redis_client: redis.Redis, redis_server: RedisServer) -> None:
    client = redis_server.client()
    store = RedisStore(client, prefix=f"dr{uuid.uuid4().hex[:6]}")
    value = os.urandom(500_000)
    locator = store.put(TOPIC, uuid.uuid4(), value)
    assert store.get(locator, expected_size=len(value)) == value
    redis_client.client_kill_filter(_type="normal", skipme=True)
    assert store.get(locator, expected_size=len(value)) == value
    client.close()


def test_the_direct_read_speaks_resp3(redis_server: RedisServer) -> None:
    client = redis_server.client(protocol=3)
    store = RedisStore(client, prefix=f"dr{uuid.uuid4().hex[:6]}", entry_bytes=300_000)
    value = os.urandom(700_000)
    locator = store.put(TOPIC, uuid.uuid4(), value)
    assert store.get(locator, expected_size=len(value)) == value
    client.delete(store.validate_locator(locator).keys(store.prefix)[2])
    with pytest.raises(PayloadNotFoundError):
        store.get(locator, expected_size=len(value))
    client.close()


def test_without_the_socket_where_it_is_looked_for_reads_go_through_redis_py(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redis-py release that keeps its socket elsewhere must cost speed, not correctness."""
    import stores.redis._io as module

    def unused(*args: Any) -> None:
        raise AssertionError("the direct reader was used")

    monkeypatch.setattr(module, "connections_expose_sockets", lambda: False)
    monkeypatch.setattr(module, "ReplyReader", unused)
    store = direct_store(redis_client)
    value = os.urandom(700_000)
    locator = store.put(TOPIC, uuid.uuid4(), value)
    assert store.get(locator, expected_size=len(value)) == value
    assert store.get_many([(locator, len(value))]) == [value]
