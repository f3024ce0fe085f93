"""The least-privilege Redis ACL of docs/security.md is enough for every store operation, and no more."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gateway.testing.redis_server import RedisServer
from stores import RedisStore, redis_client_from_url

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"
USER, PASSWORD = "gw-acl-test", "acl-pw-Qx19"


def documented_rules() -> list[str]:
    """The rules of the ``ACL SETUSER gateway ...`` block in docs/security.md, password and key pattern replaced."""
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"ACL SETUSER gateway (.*?)\n```", text, re.DOTALL)
    assert block is not None, "docs/security.md lost its ACL SETUSER block"
    rules = block.group(1).split()
    return [f">{PASSWORD}" if rule.startswith(">") else rule for rule in rules]


@pytest.fixture
def acl_url(redis_server: RedisServer) -> Iterator[str]:
    if redis_server.external:
        pytest.skip("creates an ACL user: only on the fixture's own redis-server")
    admin = redis_server.client()
    admin.execute_command("ACL", "SETUSER", USER, "reset", *documented_rules())
    try:
        yield f"redis://{USER}:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
    finally:
        admin.execute_command("ACL", "DELUSER", USER)
        admin.close()


def test_every_store_operation_works_under_the_documented_acl(acl_url: str) -> None:
    client = redis_client_from_url(acl_url)
    store = RedisStore(client, prefix="gw", ttl_seconds=3600, entry_bytes=4096)
    now = int(time.time() * 1000)
    payload = bytes(range(256)) * 64  # 4 entries
    locator = store.put("acl-topic", uuid.uuid4(), payload, pending_since_ms=now - 10_000)
    assert store.get(locator, len(payload)) == payload
    assert store.get_many([(locator, len(payload))]) == [payload]
    assert locator in store.list_pending(now)
    store.clear_pending(locator)
    store.mark_pending(locator, now - 5_000)
    store.clear_pending_many([locator])
    assert any(found == locator for found, _ in store.list_locators("acl-topic"))
    pipeline = store.put_pipeline()
    assert pipeline is not None
    second = pipeline.submit("acl-topic", uuid.uuid4(), b"x" * 10_000, pending_since_ms=now)
    pipeline.confirm()
    assert store.get(second, 10_000) == b"x" * 10_000
    for each in (locator, second):
        store.delete(each)
    store.close()
    client.close()


def test_the_acl_refuses_other_keys_and_other_commands(acl_url: str) -> None:
    client = redis.Redis.from_url(acl_url)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.get("other-application:secret")
    for command in (("KEYS", "*"), ("FLUSHALL",), ("CONFIG", "GET", "requirepass"), ("EVAL", "return 1", "0")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)
    client.close()
