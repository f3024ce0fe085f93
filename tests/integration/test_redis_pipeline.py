"""``RedisStore.put_pipeline()`` against a real redis-server: writes sent ahead, confirmed in order."""

from __future__ import annotations

import os
import uuid

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.errors import StoreError, StoreUnavailableError
from gateway.store import PutPipeline
from gateway.testing import RedisServer
from stores import RedisStore

TOPIC = "orders.v1"


def fresh_store(client: redis.Redis) -> RedisStore:
    return RedisStore(client, prefix=f"pp{uuid.uuid4().hex[:6]}")


def submitted(pipeline: PutPipeline, values: list[bytes], since: int = 7) -> list[str]:
    return [pipeline.submit(TOPIC, uuid.uuid4(), value, pending_since_ms=since) for value in values]


def test_writes_are_confirmed_in_order_each_with_its_pending_mark(redis_client: redis.Redis) -> None:
    store = fresh_store(redis_client)
    pipeline = store.put_pipeline()
    assert isinstance(pipeline, PutPipeline)
    values = [os.urandom(size) for size in (0, 1, 100_000, 2_000_000, 50)]
    locators = submitted(pipeline, values)
    assert len(pipeline) == len(values)
    assert [pipeline.confirm() for _ in values] == locators
    assert len(pipeline) == 0
    assert [store.get(locator) for locator in locators] == values
    assert sorted(store.list_pending(8)) == sorted(locators)
    assert store.metrics()["puts"] == len(values)
    pipeline.close()
    assert len(redis_client.connection_pool._in_use_connections) == 0  # type: ignore[attr-defined]


def test_a_connection_lost_with_writes_in_flight_sends_them_again(redis_client: redis.Redis) -> None:
    store = fresh_store(redis_client)
    pipeline = store.put_pipeline()
    assert pipeline is not None
    values = [os.urandom(30_000 + i) for i in range(6)]
    locators = submitted(pipeline, values[:3])
    redis_client.client_kill_filter(_type="normal", skipme=True)  # the pipeline's connection among them
    locators += submitted(pipeline, values[3:])
    assert [pipeline.confirm() for _ in values] == locators
    assert [store.get(locator) for locator in locators] == values
    assert sorted(store.list_pending(8)) == sorted(locators), "one pending mark each, none lost, none doubled"
    pipeline.close()


def test_an_error_reply_fails_that_write_only_and_the_rest_stay_in_step(redis_client: redis.Redis) -> None:
    store = fresh_store(redis_client)
    pipeline = store.put_pipeline()
    assert pipeline is not None
    redis_client.set(store.pending_key, b"not a sorted set")  # ZADD on it fails inside EXEC: WRONGTYPE
    try:
        submitted(pipeline, [os.urandom(40_000)])
        values = [os.urandom(20_000 + i) for i in range(3)]
        good = [pipeline.submit(TOPIC, uuid.uuid4(), value) for value in values]  # no pending mark: no WRONGTYPE
        with pytest.raises(StoreError, match="WRONGTYPE"):
            pipeline.confirm()
        assert [pipeline.confirm() for _ in values] == good, "the replies after the error are still matched"
    finally:
        redis_client.delete(store.pending_key)
    assert [store.get(locator) for locator in good] == values
    assert len(pipeline) == 0
    pipeline.close()
    assert len(redis_client.connection_pool._in_use_connections) == 0  # type: ignore[attr-defined]


def test_a_server_gone_fails_each_write_in_flight_as_unavailable(redis_server: RedisServer) -> None:
    if redis_server.external:
        pytest.skip("cannot stop an external Redis")
    client = redis_server.client(retry=Retry(NoBackoff(), 1), socket_timeout=2)
    store = fresh_store(client)
    pipeline = store.put_pipeline()
    assert pipeline is not None
    before = submitted(pipeline, [b"landed"])
    assert pipeline.confirm() == before[0]
    redis_server.stop()
    try:
        submitted(pipeline, [b"a", b"b"])
        for _ in range(2):
            with pytest.raises(StoreUnavailableError):
                pipeline.confirm()
        assert len(pipeline) == 0
    finally:
        redis_server.start()
    after = submitted(pipeline, [b"after"])
    assert pipeline.confirm() == after[0] and store.get(after[0]) == b"after", "the pipeline reconnects"
    pipeline.close()
    client.close()


def test_a_cluster_store_does_not_pipeline(redis_client: redis.Redis) -> None:
    store = fresh_store(redis_client)
    store.cluster = True  # what a RedisCluster client sets: each write goes to its slot's master
    assert store.put_pipeline() is None
