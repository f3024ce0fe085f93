"""The stores say at DEBUG what they do (operation, locator, size), and never log payload bytes."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from stores import RedisStore, S3Store

SECRET = b"PAYLOAD-BYTES-MUST-NOT-BE-LOGGED" * 10


@pytest.fixture(params=["redis", "s3"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "redis":
        return RedisStore(request.getfixturevalue("redis_client"), prefix=f"gwlog{uuid.uuid4().hex[:6]}")
    return S3Store(
        request.getfixturevalue("s3_client"),
        bucket=request.getfixturevalue("s3_bucket"),
        prefix=request.getfixturevalue("s3_prefix"),
    )


def test_store_logs_each_operation_at_debug(store: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="stores")
    locator = store.put("logs", uuid.uuid4(), SECRET, pending_since_ms=1)
    store.mark_pending(locator, 2)
    assert store.get(locator) == SECRET
    store.clear_pending_many([locator])
    store.delete(locator)
    ours = [r for r in caplog.records if r.name.startswith("stores.")]
    assert all(r.levelno == logging.DEBUG for r in ours)
    lines = [r.getMessage() for r in ours]
    size = f"{len(SECRET)} bytes"
    assert any(f"put {locator}: {size}" in line for line in lines), lines
    assert any(f"get {locator}: {size}" in line for line in lines), lines
    assert any(f"delete {locator}" in line for line in lines), lines
    assert any("journal marked 1 pending" in line and locator in line for line in lines), lines
    assert any("journal cleared 1 pending" in line and locator in line for line in lines), lines
    assert all(store.name in line for line in lines)
    text = caplog.text
    assert SECRET[:16].decode() not in text, "payload bytes reached the log"


def test_store_is_silent_above_debug(store: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="stores")
    locator = store.put("logs", uuid.uuid4(), SECRET)
    store.delete(locator)
    assert [r for r in caplog.records if r.name.startswith("stores.")] == []
