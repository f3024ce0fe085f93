"""The unresolvable-record policy's pure parts: retries and rate-limited warnings."""

from __future__ import annotations

import logging

import pytest

from gateway.consumer._errors import ErrorPolicy, RateLimitedLog, UnresolvedSettings, attempt
from gateway.consumer.config import parse_consumer_config
from gateway.errors import ConfigurationError, GatewayError, LocatorError, StoreUnavailableError


class Flaky:
    def __init__(self, failures: list[GatewayError]) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> bytes:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return b"payload"


def test_unreachable_store_is_retried_up_to_max_attempts_with_growing_backoff() -> None:
    sleeps: list[float] = []
    settings = UnresolvedSettings(ErrorPolicy.SKIP, max_attempts=3, backoff_s=0.5)
    fetch = Flaky([StoreUnavailableError("down"), StoreUnavailableError("down")])
    assert attempt(fetch, settings, sleeps.append) == b"payload"
    assert fetch.calls == 3 and sleeps == [0.5, 1.0]
    fetch = Flaky([StoreUnavailableError("down")] * 3)
    with pytest.raises(StoreUnavailableError):
        attempt(fetch, settings, sleeps.append)
    assert fetch.calls == 3


def test_a_final_error_is_not_retried() -> None:
    fetch = Flaky([LocatorError("outside the prefix")])
    with pytest.raises(LocatorError):
        attempt(fetch, UnresolvedSettings(max_attempts=5), lambda _: None)
    assert fetch.calls == 1


def test_warnings_of_a_kind_are_rate_limited_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("gateway.test"), interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="gateway.test"):
        for i in range(1000):
            limited.warning("dropped.expired", "dropped %d", i)
        limited.warning("reference.skipped", "skipped")  # another kind has its own allowance
        now[0] = 10.0
        limited.warning("dropped.expired", "dropped %d", 1000)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["dropped 0", "skipped", "dropped 1000 (and 999 more like it since the last such line)"]
    assert limited.suppressed == 999


def test_policy_keys_are_parsed_and_checked() -> None:
    settings, conf = parse_consumer_config(
        {
            "bootstrap.servers": "x",
            "reference.error.policy": "dead-letter",
            "reference.dead.letter.topic": "dlq",
            "reference.error.max.attempts": 4,
            "reference.error.retry.backoff.ms": 250,
        }
    )
    assert settings.unresolved == UnresolvedSettings(ErrorPolicy.DEAD_LETTER, 4, 0.25, "dlq")
    assert not any(k.startswith("reference.") for k in conf)
    with pytest.raises(ConfigurationError, match=r"dead\.letter\.topic"):
        parse_consumer_config({"reference.error.policy": "dead-letter"})
    with pytest.raises(ValueError, match=r"reference\.error\.policy"):
        parse_consumer_config({"reference.error.policy": "ignore"})
