"""The producer's route decision alone: facts in, a typed decision out, no policy, client or clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.route_choice import (
    CHUNKED_ROUTE,
    EXPIRY_ALLOWED,
    PLAIN_ROUTE,
    CompactedTopicError,
    Reroute,
    RouteDecision,
    RouteLimits,
    StoreChoice,
    after_policy,
    allowance_asks_cleanup_policy,
    asks_cleanup_policy,
    asks_partition_count,
    by_size,
    cleanup_allowance,
    is_compacting,
    keeps_forever,
    partition_missing,
    refuses_chunks,
    store_route,
)
from gateway.errors import ConfigurationError, ReferenceFormatError
from gateway.protocol.records import RouteKind

sizes = st.integers(min_value=0, max_value=10_000)
limits = st.builds(
    RouteLimits,
    plain_up_to=st.integers(min_value=-1, max_value=10_000),
    segment_bytes=st.integers(min_value=1, max_value=10_000),
    wrap_small=st.booleans(),
    chunking=st.booleans(),
    pointer_format=st.sampled_from([None, "bakdata", "aws"]),
)
answers = st.sampled_from([PLAIN_ROUTE, CHUNKED_ROUTE, RouteDecision(RouteKind.REFERENCE, "redis")])
cleanups = st.sampled_from([None, "", "delete", "compact", "compact,delete", " Delete , COMPACT"])


@given(limits, sizes, st.integers(min_value=-100, max_value=10_000))
def test_the_size_alone_decides_plain_or_wrapped_chunks_and_never_a_reference(
    lim: RouteLimits, size: int, room: int
) -> None:
    decided = by_size(lim, size, room)
    plain = size <= lim.plain_up_to and not lim.wrap_small and size <= room
    wrapped = lim.wrap_small and lim.chunking and 0 < size <= lim.segment_bytes
    assert decided == (PLAIN_ROUTE if plain else CHUNKED_ROUTE if wrapped else None)


@given(limits, answers, sizes, st.integers(min_value=1, max_value=10_000), st.booleans())
def test_the_cleanup_policy_matters_only_where_the_decision_asks_for_it(
    lim: RouteLimits, answer: RouteDecision, size: int, chunk_size: int, compacted: bool
) -> None:
    """What makes asking lazily safe: where :func:`asks_cleanup_policy` says no, the answer cannot change it."""
    outcome = after_policy(lim, answer, size, chunk_size, compacted)
    if not asks_cleanup_policy(lim, answer, size, chunk_size):
        assert outcome == after_policy(lim, answer, size, chunk_size, not compacted)


@given(limits, answers, sizes, st.integers(min_value=1, max_value=10_000), st.booleans())
def test_only_chunks_are_changed_by_the_producer_wide_rules(
    lim: RouteLimits, answer: RouteDecision, size: int, chunk_size: int, compacted: bool
) -> None:
    outcome = after_policy(lim, answer, size, chunk_size, compacted)
    if answer.kind is not RouteKind.CHUNKED:
        assert outcome is answer
    elif not lim.chunking:
        assert outcome == PLAIN_ROUTE, "large.message.enabled=false: Kafka takes the record or refuses it"
    elif lim.pointer_format is not None:
        assert outcome is Reroute.POINTER, "a foreign reader reads no chunks"
    elif compacted and size > chunk_size:
        assert outcome is Reroute.COMPACTED, "compaction would keep the last segment only"
    else:
        assert outcome is answer


def test_a_rerouted_message_goes_to_the_policys_store_for_the_topic_else_the_only_store() -> None:
    both = ("redis", "s3")
    for why in Reroute:
        assert store_route(why, StoreChoice("s3", both), topic="t", size=1) == RouteDecision(RouteKind.REFERENCE, "s3")
        assert store_route(why, StoreChoice(None, ("only",)), topic="t", size=1).store == "only"
    with pytest.raises(ReferenceFormatError, match=r"reference\.format=aws: a 7-byte message for 't'"):
        store_route(Reroute.POINTER, StoreChoice(None, both), topic="t", size=7, fmt="aws")
    with pytest.raises(CompactedTopicError, match=r"cleanup.policy=compact\).*give the producer a store"):
        store_route(Reroute.COMPACTED, StoreChoice(None, both), topic="t", size=7, cleanup="compact")
    with pytest.raises(CompactedTopicError, match=r"cleanup\.policy=unknown"):
        store_route(Reroute.COMPACTED, StoreChoice("gone", both), topic="t", size=7)
    assert issubclass(CompactedTopicError, ConfigurationError)


@given(st.sampled_from(list(RouteKind)), sizes, st.integers(min_value=1, max_value=10_000), cleanups)
def test_the_terms_of_a_route_on_a_topic(kind: RouteKind, size: int, segment_size: int, cleanup: str | None) -> None:
    several = size > segment_size
    if not allowance_asks_cleanup_policy(kind, size, segment_size):
        assert cleanup_allowance(kind, "t", size, segment_size, cleanup) is EXPIRY_ALLOWED
        return
    if kind is RouteKind.CHUNKED and is_compacting(cleanup):
        with pytest.raises(CompactedTopicError, match="route=chunked"):
            cleanup_allowance(kind, "t", size, segment_size, cleanup)
        return
    allowed = cleanup_allowance(kind, "t", size, segment_size, cleanup)
    if not is_compacting(cleanup):
        assert allowed is EXPIRY_ALLOWED
    else:
        assert allowed.persistent is keeps_forever(cleanup)
    assert refuses_chunks(size, segment_size, cleanup) is (several and is_compacting(cleanup))
    if kind is RouteKind.REFERENCE:  # a store that expires nothing per payload writes the same on any topic
        assert not allowance_asks_cleanup_policy(kind, size, segment_size, expires_per_payload=False)


def test_unknown_cleanup_policies_count_as_not_compacted() -> None:
    assert not is_compacting(None) and not keeps_forever(None)
    assert is_compacting(" Delete , COMPACT") and not keeps_forever("compact,delete") and keeps_forever(" compact")


def _asks_as_before(partition: int, known: int | None, age: float | None, recheck: float, refresh: float) -> bool:
    """The partition-count cache's rule as ``PartitionCounts._count`` wrote it before it moved here."""
    if age is None:
        return True
    if known is not None and partition < known:
        return not age < refresh
    return not age < recheck


@given(
    st.integers(min_value=0, max_value=20),
    st.none() | st.integers(min_value=1, max_value=20),
    st.none() | st.floats(min_value=0, max_value=1_000),
)
def test_a_partition_count_is_asked_again_as_it_was(partition: int, known: int | None, age: float | None) -> None:
    assert asks_partition_count(partition, known, age, 1.0, 300.0) is _asks_as_before(partition, known, age, 1.0, 300.0)
    assert partition_missing(partition, known) is (known is not None and partition >= known)
    assert not partition_missing(-1, known), "any partition is never missing"
