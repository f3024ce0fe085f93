"""``tracing.enabled()``: the global provider is looked up at most once a second until one is set."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from gateway import tracing


def test_the_global_provider_is_looked_up_once_a_second_then_believed(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    providers: list[Any] = [trace.ProxyTracerProvider()]
    lookups: list[float] = []

    def lookup() -> Any:
        lookups.append(now[0])
        return providers[0]

    monkeypatch.setattr(tracing, "_global_real", False)
    monkeypatch.setattr(tracing, "_global_recheck_at", float("-inf"))
    monkeypatch.setattr(tracing, "_provider", None)
    monkeypatch.setattr(tracing.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(tracing.trace, "get_tracer_provider", lookup)
    assert not tracing.enabled() and not tracing.enabled()
    assert lookups == [100.0]
    providers[0] = TracerProvider()  # the application sets a real one
    now[0] += tracing.GLOBAL_RECHECK_S / 2
    assert not tracing.enabled(), "not looked up again yet"
    now[0] += tracing.GLOBAL_RECHECK_S
    assert tracing.enabled() and tracing.enabled()
    assert len(lookups) == 2, "a real provider is believed for good"
    monkeypatch.setattr(tracing, "_global_real", False)
    tracing.use_tracer_provider(object())
    try:
        assert tracing.enabled(), "a provider passed in counts at once"
    finally:
        tracing.use_tracer_provider(None)
