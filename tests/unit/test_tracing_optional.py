"""Without the ``otel`` extra, tracing is off and produce/consume do not change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the package were not installed
from gateway import tracing
from gateway.core.outgoing import OutgoingMessage
assert not tracing.enabled()
assert tracing.start_produce(OutgoingMessage.of("t", b"v", headers=[("a", b"1")])) is None
spans = tracing.ConsumerTelemetry({"group.id": "g"})
spans.consumed(object(), "plain", None, 1)  # returns before touching the message
spans.release()
assert spans.held == []
print("off")
"""


def test_tracing_is_a_no_op_without_opentelemetry() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "off"
