"""Shared benchmark plumbing: timing, payloads, reading a topic to the end."""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def payload(size: int, seed: int) -> bytes:
    block = hashlib.sha256(f"bench:{seed}".encode()).digest() * 2048
    return (block * (size // len(block) + 1))[:size]


@dataclass
class Measure:
    name: str
    samples: list[float] = field(default_factory=list)  # MB/s (10^6 bytes/s)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def spread(self) -> tuple[float, float]:
        return (min(self.samples), max(self.samples)) if self.samples else (float("nan"), float("nan"))


def mbps(seconds: float, moved: int) -> float:
    return moved / seconds / 1e6 if seconds > 0 else float("nan")


def _plain(obj: Any) -> Any:
    return asdict(obj) if hasattr(obj, "__dataclass_fields__") else str(obj)


def save(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=_plain))
    return path
