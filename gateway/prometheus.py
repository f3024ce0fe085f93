"""An optional Prometheus collector over the producer's, consumer's and stores' ``metrics()`` dicts.

Needs the ``prometheus`` extra (``prometheus_client``). The counters stay plain dicts inside the
library, so nothing is paid for unless a collector is registered and scraped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_GAUGES = ("buffered.bytes", "incomplete.messages", "ahead.bytes", "healthy", ".ms")


def _metric_name(prefix: str, key: str) -> str:
    return f"{prefix}_{re.sub(r'[^a-zA-Z0-9_]', '_', key)}"


class GatewayCollector(Collector):
    """Exposes ``metrics()`` of named components as ``gateway_<component>_<key>`` series.

    Monotonic counters become Prometheus counters (``_total``); levels such as buffered bytes and
    store health become gauges.
    """

    def __init__(self, components: Mapping[str, Any], prefix: str = "gateway") -> None:
        self.components = dict(components)
        self.prefix = prefix

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        for component, obj in self.components.items():
            values: Mapping[str, Any] = obj.metrics()
            for key, value in sorted(values.items()):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                name = _metric_name(f"{self.prefix}_{component}", key)
                if any(marker in key for marker in _GAUGES):
                    yield GaugeMetricFamily(name, f"{component} {key}", value=float(value))
                else:
                    yield CounterMetricFamily(name, f"{component} {key}", value=float(value))
