"""librdkafka's statistics (``statistics.interval.ms``, delivered to ``stats_cb`` as JSON) as a few gauges.

librdkafka measures what no Python counter sees: the round trip to each broker, the messages and
bytes waiting in its own queues, the bytes on the wire and, for a consumer, each partition's lag.
:class:`LibrdkafkaStatistics` is a ``stats_cb`` that keeps the latest report;
:func:`statistics_points` turns one report into the points :mod:`gateway.prometheus` exports.
Pure functions of the JSON, so they are tested on librdkafka's documented shape.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class StatPoint:
    metric: str
    labels: tuple[str, ...]
    value: float


class LibrdkafkaStatistics:
    """A ``stats_cb`` keeping librdkafka's latest statistics; ``chain`` is called too (an application's own)."""

    def __init__(self, chain: Callable[[str], None] | None = None) -> None:
        self._chain = chain
        self._lock = threading.Lock()
        self._latest: dict[str, Any] | None = None
        self.reports = 0
        self.unreadable = 0

    def __call__(self, stats_json: str) -> None:
        try:
            parsed = json.loads(stats_json)
        except ValueError:
            parsed = None
        with self._lock:
            if isinstance(parsed, dict):
                self._latest = parsed
                self.reports += 1
            else:
                self.unreadable += 1
        if self._chain is not None:
            self._chain(stats_json)

    def latest(self) -> dict[str, Any] | None:
        with self._lock:
            return self._latest


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def statistics_points(stats: Mapping[str, Any]) -> list[StatPoint]:
    """The gauges and counters of one report (labels after ``client``): rtt, queues, bytes, lag."""
    out: list[StatPoint] = []
    for key, metric in (
        ("msg_cnt", "gateway_librdkafka_queue_messages"),
        ("msg_size", "gateway_librdkafka_queue_bytes"),
        ("replyq", "gateway_librdkafka_reply_queue_ops"),
        ("tx_bytes", "gateway_librdkafka_tx_bytes_total"),
        ("rx_bytes", "gateway_librdkafka_rx_bytes_total"),
    ):
        value = _number(stats.get(key))
        if value is not None:
            out.append(StatPoint(metric, (), value))
    for broker in (stats.get("brokers") or {}).values():
        if not isinstance(broker, Mapping) or not isinstance(broker.get("nodeid"), int) or broker["nodeid"] < 0:
            continue  # bootstrap entries and the logical coordinator handle have no node id of their own
        name = str(broker.get("nodename") or broker.get("name"))
        rtt = _number((broker.get("rtt") or {}).get("avg"))
        if rtt is not None:
            out.append(StatPoint("gateway_librdkafka_broker_rtt_seconds", (name,), rtt / 1e6))  # microseconds
        waiting = _number(broker.get("waitresp_cnt"))
        if waiting is not None:
            out.append(StatPoint("gateway_librdkafka_broker_waiting_requests", (name,), waiting))
    for topic, data in (stats.get("topics") or {}).items():
        for partition, p in ((data or {}).get("partitions") or {}).items():
            lag = _number((p or {}).get("consumer_lag"))
            if partition == "-1" or lag is None or lag < 0:
                continue  # -1: librdkafka's unassigned-messages partition; lag -1: not known yet
            out.append(StatPoint("gateway_librdkafka_consumer_lag", (str(topic), str(partition)), lag))
    return out
