"""Large messages on compacted topics: never chunk there, go by reference instead.

All segments of a chunked message share the record key, so compaction keeps only the last segment
of a key and the message is lost; LinkedIn's client leaves compacted topics unsupported for that
reason. A reference is one record per message, so compaction keeps exactly the latest envelope of
each key, and a tombstone is an ordinary null record. The payloads an envelope no longer points at
(superseded, or deleted by a tombstone) are orphans that ``gateway reconcile`` finds by comparing
the store with the live envelopes; stores give compacted topics no TTL, because a compacted topic
keeps its latest record forever.

The producer learns a topic's ``cleanup.policy`` from the brokers (``DescribeConfigs``), only when the
answer changes what a message does, and caches it for ``refresh_s``: before chunking a message of more
than one segment, before writing a reference to a store that expires payloads one by one (Redis's TTL,
``Store.expires_per_payload``), and before a reference of several segments falls back to chunks. An
object store's reference writes the same bytes on any topic, so its send path never waits for the lookup.

A fresh producer's first such message pays the lookup on top of what a raw producer's first message
pays (connecting, the topic's metadata, its leader). So the lookup never runs alone: the moment a
topic is about to be asked, ``ahead(topic)`` starts librdkafka's own metadata request on another
thread (:class:`~gateway.producer.reference.topic_warmup.TopicWarmup`), and the lookup sends its
``DescribeConfigs`` and its controller check together. The first message then waits for the longest of
them rather than their sum (issue 42.3).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gateway.clock import Clock
from gateway.core.route_choice import (
    EXPIRY_ALLOWED,
    CleanupAllowance,
    CompactedTopicError,
    Reroute,
    RouteDecision,
    StoreChoice,
    allowance_asks_cleanup_policy,
    cleanup_allowance,
    is_compacting,
    keeps_forever,
    refuses_chunks,
    store_route,
)
from gateway.policy import Policy, Route

log = logging.getLogger(__name__)

__all__ = [
    "EXPIRY_ALLOWED",
    "AdminDescriber",
    "CleanupAllowance",
    "CleanupPolicies",
    "CompactedTopicError",
    "CompactionGuard",
    "is_compacting",
    "keeps_forever",
    "reference_route",
]

DEFAULT_REFRESH_MS = 300_000
DESCRIBE_TIMEOUT_S = 5.0
RETRY_UNKNOWN_S = 30.0
"""How long "cannot say" is believed: a topic that did not exist yet may have been created since."""


@dataclass(slots=True)
class _Known:
    policy: str | None
    until: float


class CleanupPolicies:
    """``cleanup.policy`` per topic, asked of the brokers through ``describe`` and cached.

    ``describe(topic)`` returns the policy, or raises when the brokers cannot say (no
    ``DescribeConfigs`` permission, a backend without it, a topic not created yet): the topic then
    counts as not compacted until the next refresh, with one warning, which is LinkedIn's behaviour.
    """

    def __init__(
        self,
        describe: Callable[[str], str],
        clock: Clock,
        refresh_s: float,
        ahead: Callable[[str], None] = lambda topic: None,
    ) -> None:
        self._describe = describe
        self._clock = clock
        self._refresh_s = refresh_s
        self._ahead = ahead
        """Told of each topic just before it is described: what a first message needs besides the answer
        (librdkafka's metadata and leader connection) starts there, so the two waits overlap."""
        self._known: dict[str, _Known] = {}
        self._warned: set[str] = set()
        self._pending: dict[str, Future[str]] = {}
        """Lookups :meth:`start` began on the worker thread; only the caller's thread reads or records answers."""
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def start(self, topic: str) -> None:
        """Ask for ``topic``'s policy on a worker thread unless it is known or already asked; never waits.

        The next :meth:`policy` of the topic waits for that answer instead of asking again.
        """
        if self._closed or topic in self._pending or self._fresh(topic, self._clock.monotonic()) is not None:
            return
        self._ahead(topic)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="gateway-cleanup-policy")
        self._pending[topic] = self._pool.submit(self._describe, topic)

    def policy(self, topic: str) -> str | None:
        now = self._clock.monotonic()
        known = self._fresh(topic, now)
        if known is not None:
            return known.policy
        pending = self._pending.pop(topic, None)
        if pending is None:
            self._ahead(topic)
        try:
            found: str | None = self._describe(topic) if pending is None else pending.result()
        except Exception as exc:  # noqa: BLE001 -- any failure means "not known"; we say so once
            if topic not in self._warned:  # a known "cannot say" is routine (the mock cluster); others are not
                self._warned.add(topic)
                level = logging.INFO if isinstance(exc, LookupError) else logging.WARNING
                log.log(level, "cleanup.policy of topic %r unknown (%s); treated as not compacted", topic, exc)
            self._known[topic] = _Known(None, now + min(self._refresh_s, RETRY_UNKNOWN_S))
            return None
        self._known[topic] = _Known(found, now + self._refresh_s)
        return found

    def _fresh(self, topic: str, now: float) -> _Known | None:
        known = self._known.get(topic)
        return known if known is not None and known.until > now else None

    def close(self) -> None:
        """Drop the lookups not started; one under way ends on its own thread, holding its own reference to
        the admin client, so closing never waits for a broker that does not answer."""
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        close = getattr(self._describe, "close", None)
        if callable(close):
            close()

    def compacted(self, topic: str) -> bool:
        return is_compacting(self.policy(topic))

    def keeps_forever(self, topic: str) -> bool:
        return keeps_forever(self.policy(topic))


class CompactionGuard:
    """What compaction changes for one producer: the brokers asked, :mod:`gateway.core.route_choice` deciding.

    ``policies`` is ``None`` when the check is off (``large.message.compaction.check=false``).
    """

    def __init__(
        self, policies: CleanupPolicies | None, policy: Policy, stores: Mapping[str, object], segment_bytes: int
    ) -> None:
        self._policies = policies
        self._policy = policy
        self._stores = stores
        self._segment_bytes = segment_bytes

    def cleanup_allowance(
        self,
        topic: str,
        size: int,
        chosen: Route,
        segment_size: int | None = None,
        *,
        expires_per_payload: bool = True,
    ) -> CleanupAllowance:
        """What ``topic``'s cleanup policy allows the chosen route; :class:`CompactedTopicError` for several
        segments on a compacted topic.

        ``segment_size`` is what the message's key and headers leave of a segment (default: the
        configured segment size). ``expires_per_payload`` is the reference's store's
        (:attr:`gateway.store.Store.expires_per_payload`). The brokers are asked only for messages of
        several segments sent chunked and for references to a store whose writes depend on the answer.
        """
        segment_size = self._segment_bytes if segment_size is None else segment_size
        if not allowance_asks_cleanup_policy(chosen.kind, size, segment_size, expires_per_payload=expires_per_payload):
            return EXPIRY_ALLOWED  # an object store's reference is written the same on any topic
        return cleanup_allowance(chosen.kind, topic, size, segment_size, self.prepare(topic))

    def refuses_chunks(self, topic: str, size: int, segment_size: int) -> bool:
        """:func:`refuses_chunks` for a reference whose store is down, asked when that fallback comes up
        and not before every reference: a store failing is the rare path, and the lookup it may make
        there spares every write the wait."""
        return size > segment_size and refuses_chunks(size, segment_size, self.prepare(topic))

    def store_route(self, why: Reroute, topic: str, size: int, fmt: str | None) -> RouteDecision:
        """The store of a message the policy chunked and :func:`after_policy` rerouted (see :func:`store_route`)."""
        if why is Reroute.POINTER:  # the policy's stores: a foreign reader follows a pointer to any of them
            choice = StoreChoice(self._policy.store_for(topic), tuple(sorted(self._policy.store_names())))
            return store_route(why, choice, topic=topic, size=size, fmt=fmt)
        choice = StoreChoice(self._policy.store_for(topic), tuple(self._stores))
        return store_route(why, choice, topic=topic, size=size, cleanup=self.prepare(topic))

    def start(self, topic: str) -> None:
        """Begin learning ``topic``'s cleanup.policy (and its leader) in the background; never waits."""
        if self._policies is not None:
            self._policies.start(topic)

    def prepare(self, topic: str) -> str | None:
        """``topic``'s cleanup.policy, asked of the brokers now (or cached), so no message waits for it later."""
        return self._policies.policy(topic) if self._policies is not None else None

    def close(self) -> None:
        if self._policies is not None:
            self._policies.close()

    def compacted(self, topic: str) -> bool:
        return is_compacting(self.prepare(topic))


def reference_route(policy: Policy, stores: Mapping[str, object], topic: str, size: int, cleanup: str) -> Route:
    """The reference route a message too large for one record takes on a compacted topic.

    The policy's store for the topic (``store_for``) when it has one, else the producer's only
    store; with neither, :class:`CompactedTopicError` before anything is written.
    """
    choice = StoreChoice(policy.store_for(topic), tuple(stores))
    decided = store_route(Reroute.COMPACTED, choice, topic=topic, size=size, cleanup=cleanup)
    return Route.reference(decided.store or "")


class AdminDescriber:
    """``describe`` for :class:`CleanupPolicies`: an ``AdminClient`` made from ``conf``.

    The producer makes it with ``connect_now``, at construction: librdkafka connects in the background,
    and the first large message to a topic then waits for one ``DescribeConfigs`` round trip (which
    overlaps the topic's leader lookup) instead of a connection, a metadata request and the lookup in a
    row (docs/peers-and-compaction.md). Without ``connect_now`` it is made on the first lookup.
    """

    def __init__(self, conf: Mapping[str, Any], *, connect_now: bool = False) -> None:
        self._conf = {k: v for k, v in conf.items() if k not in _NOT_FOR_ADMIN and not k.startswith("on_")}
        self._admin: Any = None
        self._lock = threading.Lock()
        """One admin client, whichever thread asks first (a warmup may ask while ``produce`` does)."""
        if connect_now:
            self._connect()

    def _connect(self) -> Any:
        from confluent_kafka.admin import AdminClient

        with self._lock:
            if self._admin is None:
                self._admin = AdminClient(self._conf)
            return self._admin

    def __call__(self, topic: str) -> str:
        """``DescribeConfigs`` sent first, the metadata that says whether its answer can come asked meanwhile.

        Not one after the other: on a fresh client each is a round trip behind the connection, and the
        first message of a topic waits for both. The metadata still decides: a cluster with no live
        controller (librdkafka's mock) would leave the request waiting for its timeout, and an absent topic
        is a routine "cannot say", so either raises :class:`LookupError` without waiting for the answer.
        """
        from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

        admin = self._connect()
        resource = ConfigResource(ResourceType.TOPIC, topic)
        future = admin.describe_configs([resource], request_timeout=DESCRIBE_TIMEOUT_S)[resource]
        metadata = admin.list_topics(topic=topic, timeout=DESCRIBE_TIMEOUT_S)
        if metadata.controller_id not in metadata.brokers:  # librdkafka's mock cluster: no DescribeConfigs
            raise LookupError("the cluster names no live controller, so topic configs cannot be described")
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            raise LookupError(f"topic metadata: {described.error if described is not None else 'absent'}")
        entry = future.result(timeout=DESCRIBE_TIMEOUT_S + 1).get("cleanup.policy")
        if entry is None or entry.value is None:
            raise LookupError("the brokers returned no cleanup.policy")
        return str(entry.value)

    def close(self) -> None:
        """Let the admin client go with the producer (it would otherwise go on reconnecting)."""
        self._admin = None


_NOT_FOR_ADMIN = frozenset(
    {
        "transactional.id",
        "enable.idempotence",
        "delivery.report.only.error",
        "dr_cb",
        "dr_msg_cb",
        # the application's callbacks hear of the producer it made, not of this lookup's own client
        "error_cb",
        "stats_cb",
        "throttle_cb",
    }
)
"""Keys of the producer's librdkafka configuration that its ``cleanup.policy`` lookup's admin client must not take.

Only librdkafka's and confluent-kafka's own keys, each meant for the producer and not for a client
that sends no record: the delivery-report callbacks (refused by an admin client: ``dr_cb`` and
``dr_msg_cb`` "must be set through dedicated .._set_..() function", ``on_*`` is "No such
configuration property"), the producer-only properties an admin client accepts but must not act on
(``transactional.id``, ``enable.idempotence``, ``delivery.report.only.error``), and the
application's callbacks (below). The gateway's own keys never get this far:
:func:`~gateway.producer._config.parse_producer_config` took every one of them out of ``conf``.
"""
