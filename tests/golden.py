"""Loads LinkedIn's golden vectors from ``../shared`` (CI has it beside the checkout) or ``tests/data``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
CANDIDATES = [
    _HERE.parent.parent / "shared" / "spec" / "golden" / "linkedin-vectors.json",
    _HERE / "data" / "linkedin-vectors.json",
]


def load_vectors() -> dict[str, Any]:
    for path in CANDIDATES:
        if path.exists():
            return json.loads(path.read_text())  # type: ignore[no-any-return]
    raise FileNotFoundError(f"linkedin-vectors.json not found in {[str(p) for p in CANDIDATES]}")


def hx(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value)


def uid(obj: dict[str, Any] | None) -> uuid.UUID | None:
    return None if obj is None else uuid.UUID(obj["uuid"])
