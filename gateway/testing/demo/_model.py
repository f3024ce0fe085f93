"""What the demo is asked to do and what it found: plain values the stages and the report share."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DemoOptions:
    count: int = 200
    min_size: int = 1_000
    max_size: int = 50_000_000
    median_size: int = 20_000
    large_fraction: float = 0.04
    segment_bytes: int = 800_000
    reference_above: int = 4_000_000
    tier_above: int = 16_000_000
    seed: int = 7
    stores: tuple[str, ...] = ("redis", "s3")
    kafka: str = "mock"
    spark: bool = True
    spark_master: str | None = None
    wave: int = 40
    """Messages of the Spark stage's second wave, which its streaming query processes."""


@dataclass
class RouteStats:
    messages: int = 0
    payload_bytes: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    verified: int = 0


@dataclass(frozen=True)
class Sent:
    """What the demo sent under one key: what the Spark stage checks its rows against."""

    route: str
    sha256: str
    size: int
    partition: int


@dataclass
class DemoResult:
    produced: int
    verified: int
    mismatched: int
    missing: int
    skipped: int
    routes: dict[str, RouteStats]
    kafka_bytes: dict[str, int]
    store_bytes: dict[str, int]
    backend: str
    notes: list[str]
    seconds: float
    topic: str = ""
    sent: dict[bytes, Sent] = field(default_factory=dict)
    kept: bool = True
    """Whether the topic keeps every message it was sent (the embedded cluster may not)."""

    @property
    def ok(self) -> bool:
        return self.produced > 0 and self.verified == self.produced and not self.mismatched and not self.missing
