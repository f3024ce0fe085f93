"""Arguments the asyncio clients refuse as confluent_kafka.aio's do (no broker needed)."""

from __future__ import annotations

import pytest

from gateway.aio import AIOHybridConsumer

NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}


def test_an_aio_consumer_refuses_no_workers_as_confluents() -> None:
    """``AIOHybridConsumer(max_workers=0)`` was accepted."""
    with pytest.raises(ValueError, match=r"^max_workers must be at least 1$"):
        AIOHybridConsumer(NOWHERE, max_workers=0)
    with pytest.raises(ValueError, match=r"^max_workers must be at least 1$"):
        AIOHybridConsumer(NOWHERE, max_workers=-3)
