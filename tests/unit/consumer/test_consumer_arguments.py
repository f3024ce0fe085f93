"""Arguments the consumer refuses before anything reaches librdkafka (no broker needed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway import HybridConsumer


@pytest.fixture
def consumer() -> Iterator[HybridConsumer]:
    # nothing listens on port 9: the consumer is never connected, only its argument checks run
    c = HybridConsumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "enable.auto.commit": False})
    yield c
    c.close()


@pytest.mark.parametrize("topics", ["t9", b"t9", ("t9",)])
def test_subscribe_takes_a_list_only(consumer: HybridConsumer, topics: object) -> None:
    """Issue 13, defect 7: ``subscribe("t9")`` subscribed to ``t`` and ``9``."""
    with pytest.raises(TypeError, match="list"):
        consumer.subscribe(topics)  # type: ignore[arg-type]
