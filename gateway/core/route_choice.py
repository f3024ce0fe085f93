"""The producer's route decision, sans-IO: which route a message takes, and what the topic's cleanup policy allows it.

The producer asks the policy, the brokers (a topic's ``cleanup.policy``, its partition count) and
its settings; the answers come in here as values and a typed decision comes out, which the
producer then carries out. Nothing here calls a policy, a client or a clock, so every rule is
tested alone, with every combination of facts (``tests/unit/core/test_route_choice.py``).

Where a fact costs a round trip (the cleanup policy is a ``DescribeConfigs``), a predicate says
whether the decision needs it (:func:`asks_cleanup_policy`, :func:`allowance_asks_cleanup_policy`,
:func:`asks_partition_count`), so the producer asks only then, as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gateway.errors import ConfigurationError, ReferenceFormatError
from gateway.protocol.records import RouteKind


class CompactedTopicError(ConfigurationError):
    """A message too large for one record, for a compacted topic, with no store to send it to by reference."""


@dataclass(frozen=True, slots=True)
class RouteLimits:
    """The producer-wide facts every decision reads, fixed when the producer is made."""

    plain_up_to: int
    """The policy's ``always_plain_up_to`` answer: values up to this size are plain for any topic (-1: none)."""
    segment_bytes: int
    wrap_small: bool
    """``large.message.wrap.small``: a small value goes as one segment, not as a plain record."""
    chunking: bool
    """``large.message.enabled``: false turns chunks into plain records (Kafka takes them or refuses them)."""
    pointer_format: str | None = None
    """``reference.format`` when it is a peer's pointer (bakdata, aws), whose readers read no chunks."""


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """What one message becomes: the route's kind and, for a reference, the store's name."""

    kind: RouteKind
    store: str | None = None


PLAIN_ROUTE = RouteDecision(RouteKind.PLAIN)
CHUNKED_ROUTE = RouteDecision(RouteKind.CHUNKED)


class Reroute(Enum):
    """Why the policy's chunks go by reference instead; the store is then the producer's to choose."""

    POINTER = "pointer"
    """``reference.format=bakdata|aws``: the foreign reader cannot assemble chunks."""
    COMPACTED = "compacted"
    """A compacted topic keeps only the last segment of a key."""


@dataclass(frozen=True, slots=True)
class StoreChoice:
    """What names a store when the producer sends by reference a message the policy chunked."""

    for_topic: str | None
    """The policy's store for the topic (``store_for``), if it names one."""
    names: tuple[str, ...]
    """The stores to fall back on when there is exactly one."""


@dataclass(frozen=True, slots=True)
class CleanupAllowance:
    """What the topic's ``cleanup.policy`` allows the chosen route: ``persistent`` when the payload may not
    expire (a compact-only topic keeps its latest envelope forever, so the store must keep its payload).

    Whether a reference may fall back to chunks is not decided here but when a fallback comes up
    (:func:`refuses_chunks`): only then does that need the topic's policy.
    """

    persistent: bool = False


EXPIRY_ALLOWED = CleanupAllowance()
"""Any topic that is not compact-only, or one whose policy need not be asked: the store may expire the payload."""


def cleanup_parts(cleanup_policy: str) -> set[str]:
    return {part.strip().lower() for part in cleanup_policy.split(",")}


def is_compacting(cleanup_policy: str | None) -> bool:
    """``compact`` or ``compact,delete`` (either order, any spacing); None (unknown) is not."""
    return cleanup_policy is not None and "compact" in cleanup_parts(cleanup_policy)


def keeps_forever(cleanup_policy: str | None) -> bool:
    """Compact only: the latest record of a key is never deleted, so neither may its payload expire."""
    return cleanup_policy is not None and cleanup_parts(cleanup_policy) == {"compact"}


def by_size(limits: RouteLimits, size: int, room: int) -> RouteDecision | None:
    """The route the size alone decides, without asking the policy; None when it does not.

    ``room`` is what the key and headers leave of one record: a value that fits ``plain_up_to``
    but not one record beside them is the policy's to route, as it would be without this shortcut.
    """
    if size <= limits.plain_up_to and not limits.wrap_small and size <= room:
        return PLAIN_ROUTE  # the policy says plain for any topic at this size
    if limits.wrap_small and limits.chunking and 0 < size <= limits.segment_bytes:
        return CHUNKED_ROUTE
    return None


def asks_cleanup_policy(limits: RouteLimits, answer: RouteDecision, size: int, chunk_size: int) -> bool:
    """Whether :func:`after_policy` needs to know if the topic is compacted: chunks of several segments only."""
    return answer.kind is RouteKind.CHUNKED and limits.chunking and limits.pointer_format is None and size > chunk_size


def after_policy(
    limits: RouteLimits, answer: RouteDecision, size: int, chunk_size: int, compacted: bool
) -> RouteDecision | Reroute:
    """The policy's ``answer`` with the producer-wide rules applied; a :class:`Reroute` when it must go by
    reference to a store the producer chooses (:func:`store_route`).

    ``chunk_size`` is the size the message's segments would have; ``compacted`` whether the topic
    compacts (asked only when :func:`asks_cleanup_policy` says so; False otherwise).
    """
    if answer.kind is not RouteKind.CHUNKED:
        return answer
    if not limits.chunking:
        return PLAIN_ROUTE  # large.message.enabled=false
    if limits.pointer_format is not None:
        return Reroute.POINTER
    if size > chunk_size and compacted:
        return Reroute.COMPACTED
    return answer


def store_route(
    why: Reroute, choice: StoreChoice, *, topic: str, size: int, cleanup: str | None = None, fmt: str | None = None
) -> RouteDecision:
    """The reference route of a message :func:`after_policy` rerouted: to the policy's store for the topic,
    else the only store; with neither, the typed refusal, before anything is written.

    ``cleanup`` (the topic's cleanup.policy) and ``fmt`` (``reference.format``) only word the refusal.
    """
    store = choice.for_topic
    if store is None and len(choice.names) == 1:
        store = choice.names[0]
    if why is Reroute.COMPACTED and store is not None and store not in choice.names:
        store = None
    if store is not None:
        return RouteDecision(RouteKind.REFERENCE, store)
    if why is Reroute.POINTER:
        raise ReferenceFormatError(
            f"reference.format={fmt}: a {size}-byte message for {topic!r} would be chunked, which its reader"
            " cannot assemble, and the policy names no store to send it by reference instead"
            " (SizeThresholdPolicy(store=...))"
        )
    raise CompactedTopicError(
        f"topic {topic!r} is compacted (cleanup.policy={cleanup or 'unknown'}): a {size}-byte message cannot be"
        " chunked there, since compaction keeps only the last segment of a key; give the producer a store"
        " (SizeThresholdPolicy(store=...)) so that such messages go by reference"
    )


def allowance_asks_cleanup_policy(
    kind: RouteKind, size: int, segment_size: int, *, expires_per_payload: bool = True
) -> bool:
    """Whether :func:`cleanup_allowance` needs the topic's cleanup policy: chunks of several segments, and
    references to a store whose writes depend on it (``Store.expires_per_payload``: a TTL per payload)."""
    if kind is RouteKind.REFERENCE:
        return expires_per_payload
    return kind is RouteKind.CHUNKED and size > segment_size


def cleanup_allowance(
    kind: RouteKind, topic: str, size: int, segment_size: int, cleanup: str | None
) -> CleanupAllowance:
    """What a topic with ``cleanup`` (None: unknown, or the check is off) allows the chosen route.

    :class:`CompactedTopicError` for chunks of several segments on a compacted topic (a forced
    ``route="chunked"``): compaction would keep only the last.
    """
    if not allowance_asks_cleanup_policy(kind, size, segment_size) or not is_compacting(cleanup):
        return EXPIRY_ALLOWED
    if kind is RouteKind.CHUNKED:
        raise CompactedTopicError(
            f"topic {topic!r} is compacted (cleanup.policy={cleanup}): route=chunked"
            " would lose all but the last segment of the message"
        )
    return CleanupAllowance(persistent=keeps_forever(cleanup))


def refuses_chunks(size: int, segment_size: int, cleanup: str | None) -> bool:
    """Whether a reference whose store is down must not go chunked instead: several segments (of
    ``segment_size``, what its key and headers leave) on a compacted topic would lose all but the last."""
    return size > segment_size and is_compacting(cleanup)


def asks_partition_count(
    partition: int, known: int | None, age_s: float | None, recheck_s: float, refresh_s: float
) -> bool:
    """Whether an explicit ``partition`` needs the brokers' partition count asked again.

    ``known`` is the last count (None: the brokers could not say), ``age_s`` how long ago it was
    asked (None: never). A partition below the known count is believed for ``refresh_s``
    (partitions are never removed); one at or beyond it, or an unknown count, asks again at most
    every ``recheck_s`` (partitions can be added).
    """
    if age_s is None:
        return True
    if known is not None and partition < known:
        return age_s >= refresh_s
    return age_s >= recheck_s


def partition_missing(partition: int, count: int | None) -> bool:
    """Whether the brokers' ``count`` says the topic has no ``partition`` (-1, any, and an unknown count never)."""
    return partition >= 0 and count is not None and partition >= count


__all__ = [
    "CHUNKED_ROUTE",
    "EXPIRY_ALLOWED",
    "PLAIN_ROUTE",
    "CleanupAllowance",
    "CompactedTopicError",
    "Reroute",
    "RouteDecision",
    "RouteLimits",
    "StoreChoice",
    "after_policy",
    "allowance_asks_cleanup_policy",
    "asks_cleanup_policy",
    "asks_partition_count",
    "by_size",
    "cleanup_allowance",
    "is_compacting",
    "keeps_forever",
    "partition_missing",
    "refuses_chunks",
    "store_route",
]
