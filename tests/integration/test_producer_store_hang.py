"""A hung Redis (SIGSTOPped redis-server) during a reference send: ``produce`` waits one socket timeout, not two.

The store's write timed out, and the store then tried a best-effort delete of what it may have
written, waiting a second full timeout on the same silent server. The write is journalled as
pending, so the delete is left to ``gateway gc``. Counted by the store's error counter (one request
waited on the hung server), never by a timed assertion.
"""

from __future__ import annotations

import time
import uuid

import pytest

from gateway import HybridProducer
from gateway.errors import StoreUnavailableError
from gateway.testing import KafkaService, RedisServer
from stores import RedisStore


def test_a_hung_redis_costs_produce_one_socket_timeout(
    kafka: KafkaService, redis_server: RedisServer, topic: str
) -> None:
    if redis_server.external:
        pytest.skip("REDIS_URL points at a Redis this test cannot pause")
    client = redis_server.client(socket_timeout=1, socket_connect_timeout=1)
    store = RedisStore(client, prefix=f"hang{uuid.uuid4().hex[:6]}")
    # a window of 1: the write is answered inside produce(), so its timeout is what produce() raises
    producer = HybridProducer({**kafka.producer_config(), "reference.write.window": 1}, stores={"redis": store})
    client.ping()  # connected before the server hangs
    redis_server.pause()
    try:
        with pytest.raises(StoreUnavailableError, match="Timeout"):
            producer.produce(topic, b"x" * 10_000, route="reference:redis")
        errors = store.metrics()["errors"]
    finally:
        redis_server.resume()
    assert errors == 1, "one request waited on the hung server, not a second one for a best-effort delete"
    time.sleep(0.5)  # the server runs what it had received while stopped
    written = {locator for locator, _ in store.list_locators()}
    assert written <= set(store.list_pending(2**62)), "whatever landed is journalled for gc"
    producer.flush(5)
    client.close()
