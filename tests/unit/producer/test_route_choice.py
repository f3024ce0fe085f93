"""The size shortcut never answers differently from the policy it stands in for."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.outgoing import OutgoingMessage
from gateway.policy import CHUNKED, PLAIN, MessageInfo, Route, SizeThresholdPolicy, TopicOverride
from gateway.producer._compaction import CompactionGuard
from gateway.producer._config import parse_producer_config
from gateway.producer._route_choice import RouteChooser

SEGMENT = 1_000
POLICY = SizeThresholdPolicy(reference_above=5_000, store="redis", overrides={"logs": TopicOverride(chunk_above=400)})


class Recording(SizeThresholdPolicy):
    """The same policy, counting how often it is asked."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        object.__setattr__(self, "asked", [])

    def route(self, info: MessageInfo) -> Route:
        self.asked.append(info.value_size)  # type: ignore[attr-defined]
        return super().route(info)


def chooser(policy: SizeThresholdPolicy, **config: Any) -> RouteChooser:
    settings, _ = parse_producer_config({"max.message.segment.bytes": SEGMENT, **config})
    return RouteChooser(settings, policy, CompactionGuard(None, policy, {"redis": object()}, settings.segment_bytes))


@given(st.sampled_from(["events", "logs"]), st.integers(0, 6_000))
def test_the_size_shortcut_agrees_with_the_policy(topic: str, size: int) -> None:
    routes = chooser(POLICY)
    message = OutgoingMessage.of(topic, b"x" * size)
    segment_size = routes.settings.segment_size_for(None, [])
    assert routes.of(message) == POLICY.route(MessageInfo(topic, None, size, [], segment_size))
    assert routes.route(topic, size, None, []) == routes.of(message)


def test_small_values_skip_the_policy_and_larger_ones_ask_it() -> None:
    policy = Recording(reference_above=5_000, store="redis", overrides={"logs": TopicOverride(chunk_above=400)})
    routes = chooser(policy)
    assert routes.plain_up_to == 400, "the lowest plain limit over every topic"
    assert routes.of(OutgoingMessage.of("events", b"x" * 400)) == PLAIN
    assert policy.asked == []  # type: ignore[attr-defined]
    assert routes.of(OutgoingMessage.of("events", b"x" * 401)) == PLAIN
    assert policy.asked == [401]  # type: ignore[attr-defined]


def test_producer_wide_rules_have_the_last_word() -> None:
    assert chooser(POLICY, **{"large.message.enabled": False}).route("events", 2_000, None, []) == PLAIN
    assert chooser(POLICY, **{"li.large.message.segment.wrapping.required": True}).route("e", 10, None, []) == CHUNKED


@given(st.integers(0, 1_200), st.integers(0, 2_500), st.integers(0, 2_500))
def test_the_size_shortcut_counts_the_key_and_headers_as_the_policy_does(size: int, key_size: int, header: int) -> None:
    """Issue 39.5: a value under ``always_plain_up_to`` went plain whatever its key and headers; Kafka refused it."""
    routes = chooser(POLICY, **{"message.max.bytes": 3_000})
    key = b"k" * key_size or None
    headers = [("h", b"v" * header)] if header else []
    message = OutgoingMessage.of("events", b"x" * size, key=key, headers=headers)
    segment_size = routes.settings.segment_size_for(key, headers)
    assert routes.of(message) == POLICY.route(MessageInfo("events", key, size, headers, segment_size))
    assert routes.route("events", size, key, headers) == routes.of(message)
    if routes.of(message) == PLAIN and routes.settings.segment_room(key, headers) > 0:  # else nothing can carry it
        assert size + key_size + header <= 3_000 - 512, "a plain record fits message.max.bytes with its framing"
