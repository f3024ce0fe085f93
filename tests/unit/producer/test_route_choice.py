"""The size shortcut never answers differently from the policy it stands in for."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.policy import CHUNKED, PLAIN, MessageInfo, Route, SizeThresholdPolicy, TopicOverride
from gateway.producer._compaction import CompactionGuard
from gateway.producer._config import parse_producer_config
from gateway.producer._route_choice import RouteChooser
from gateway.producer.outgoing import OutgoingMessage

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
