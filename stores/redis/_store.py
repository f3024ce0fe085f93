"""Payloads in Redis, standalone or Redis Cluster, following Workday's "kafka-over-redis" layout (peers.md §1).

Keys of the *flat* layout (standalone and Sentinel-managed Redis, unchanged since the first
release), with ``P`` the prefix, ``T`` the *physical* topic and ``M`` the canonical message id::

    P:T:M:0 .. P:T:M:{N-1}   the payload, cut into entries of at most ``entry_bytes``
    P:pending                sorted set: locator -> ms it was marked pending (the crash journal)
    P:written                sorted set: locator -> ms it was written (for reconcilers)

Locator: ``P:T:M#NxE``: N entries of E bytes each (the last one E or fewer). It names the entries
without listing them, so a read is one MGET of keys computed locally; the ``#`` keeps a locator from
ever being mistaken for a data key. E is there so that a reader checks N against the payload size
in the envelope before any I/O (N must be ceil(size / E)), whatever entry size it is configured
with itself: a forged or mangled count is refused as a :class:`LocatorError`, and the entries read
must then have exactly the lengths N and E imply.

Redis Cluster runs a MULTI/EXEC (and an MGET) only when all its keys hash to one slot, which the
flat layout cannot arrange: a payload's entries and the global journal sit in different slots. The
*slotted* layout (:mod:`stores.redis._layout`) inserts a hash tag after the prefix, one of 1024
buckets derived from the message id, and gives every bucket its own journal::

    P:{bbb}:T:M:0 ..         the entries            P:{bbb}:pending / P:{bbb}:written   the journal
    locator P:{bbb}:T:M#NxE

The layout is chosen by the client: a ``RedisCluster`` writes slotted, a ``redis.Redis`` keeps
writing flat (``layout=`` overrides, e.g. to write cluster-ready keys on a standalone server before
moving them into a cluster). Reads, deletes and journal updates follow the locator's own shape, so
a standalone store reads both, and its sweeps list both journals; a cluster store refuses flat
locators before any I/O. Listing on a cluster reads all 1024 bucket journals, which spread over
every master, in pipelines the client splits by node.

Entries exist because a Redis string holds at most 512 MB (``proto-max-bulk-len``); smaller entries
also keep one huge value from blocking the single-threaded server for long while it is copied.
The topic is part of the key so that a topic's payloads can be found and purged by pattern, and so
two topics never share a payload by accident.

Consistency: every write of a payload (its entries, its pending mark, its index entry, its TTLs) is
one MULTI/EXEC, so a reader sees all of it or none of it, and a crash leaves either nothing or a
pending mark. On a cluster that transaction runs on the master owning the bucket's slot, and
replication to its replicas is asynchronous: a master that dies right after EXEC may take the
payload with it when a replica is promoted. The envelope then points at nothing, and the consumer
gets :class:`PayloadNotFoundError` for that record, never other bytes (``WAIT`` would narrow, not
close, that window; see docs/stores.md).
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
from redis import exceptions as rex

from gateway.errors import LocatorError, StoreError, StoreUnavailableError
from gateway.protocol.envelope import validate_store_name
from gateway.store import PayloadAddress
from stores.base import (
    Payload,
    StoreMetrics,
    now_ms,
    topic_retention,
    validate_message_id,
    validate_topic,
)
from stores.redis import _io as redis_io
from stores.redis._io import redis_client_from_url
from stores.redis._journal import RedisJournal
from stores.redis._layout import (
    FLAT,
    LAYOUTS,
    REDIS_MAX_STRING,
    SLOTTED,
    RedisLocator,
    bucket_of,
    entries_for,
    flat_journal_keys,
    parse_locator,
)
from stores.redis._pipeline import RedisPutPipeline
from stores.redis._ranges import RedisRanges
from stores.redis._reads import RedisReads
from stores.redis._stream_writes import RedisStreamWrites
from stores.redis._wire import Arg, PackedTransaction

if TYPE_CHECKING:
    from redis.client import Pipeline
    from redis.cluster import RedisCluster

MiB = 1024 * 1024
DEFAULT_ENTRY_BYTES = 64 * MiB
DEFAULT_MAX_ENTRIES = 4096

_PREFIX = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_T = TypeVar("_T")


def ttl_from_retention(admin_client: Any, topic: str, margin_seconds: int = 3600) -> int | None:
    """A ``ttl_seconds`` for :class:`RedisStore` derived from the topic's configuration; ``None`` = no expiry.

    The TTL must be at least as long as Kafka can serve the envelope: a consumer that replays from
    the oldest retained offset (a new group, a reset, a backfill) must still find every payload. A
    TTL shorter than retention silently turns old envelopes into ``PayloadNotFoundError``. Kafka
    keeps a record up to ``retention.ms + segment.ms`` (see
    :meth:`stores.base.RetentionInfo.payload_ttl_seconds`), plus ``margin_seconds`` for the
    retention check interval and clock skew. Infinite retention and compact-only topics give
    ``None``. Records produced with a timestamp in the future outlive any such bound.
    """
    return topic_retention(admin_client, topic).payload_ttl_seconds(margin_seconds)


class RedisStore(RedisStreamWrites, RedisReads, RedisRanges, RedisJournal):
    """A :class:`stores.Store` on redis-py: a ``redis.Redis`` or a ``redis.cluster.RedisCluster`` client.

    ``client`` must return bytes (``decode_responses=False``). ``layout`` is ``"flat"`` (the
    original keys, standalone and Sentinel only), ``"slotted"`` (hash-tagged keys, required by
    Redis Cluster, also valid on a standalone server), or ``None``: slotted for a ``RedisCluster``,
    flat otherwise. The layout decides what :meth:`put` writes; reading, deleting and the journal
    follow the locator, so a standalone store reads both kinds. Redis errors that mean the server is
    unreachable or temporarily refusing writes (a failover in progress included) become
    :class:`StoreUnavailableError` (cause chained), so the producer's policy can fall back to
    chunking; other server errors become :class:`StoreError`.
    """

    needs_digest_to_write = False
    reads_in_groups = True
    """Redis keeps no metadata beside the bytes: the producer may hash while the payload is written."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        prefix: str = "gw",
        ttl_seconds: int | None = None,
        entry_bytes: int = DEFAULT_ENTRY_BYTES,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        name: str = "redis",
        close_client: bool = False,
        layout: str | None = None,
    ) -> None:
        if _PREFIX.fullmatch(prefix) is None:
            raise ValueError(f"prefix must be 1..128 chars of [A-Za-z0-9._:-], got {prefix!r}")
        if ttl_seconds is not None and (isinstance(ttl_seconds, bool) or ttl_seconds <= 0):
            raise ValueError(f"ttl_seconds must be a positive int or None, got {ttl_seconds!r}")
        if not 1 <= entry_bytes < REDIS_MAX_STRING:
            raise ValueError(f"entry_bytes must be in [1, 512 MiB), got {entry_bytes}")
        if not 1 <= max_entries <= 10**9:
            raise ValueError(f"max_entries must be in [1, 10**9], got {max_entries}")
        self.cluster = redis_io.is_cluster(client)
        if redis_io.client_decodes(client, self.cluster):
            raise ValueError("RedisStore needs a client with decode_responses=False: payloads are bytes")
        if layout is None:
            layout = SLOTTED if self.cluster else FLAT
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS} or None, got {layout!r}")
        if self.cluster and not redis_io.cluster_transactions():
            raise ValueError("RedisStore on Redis Cluster needs redis-py 6.1 or later (ClusterPipeline transactions)")
        if self.cluster and layout == FLAT:
            raise ValueError("Redis Cluster needs layout='slotted': a flat-layout write spans several hash slots")
        self.client = client
        self.layout = layout
        self.name = validate_store_name(name)
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.expires_per_payload = ttl_seconds is not None
        """Without a TTL a compact-only topic's payload is written as any other's (it never expires either),
        so the producer's first reference to a topic does not wait for the topic's ``cleanup.policy``."""
        self.entry_bytes = entry_bytes
        self.max_entries = max_entries
        self.pending_key, self.index_key = flat_journal_keys(prefix)
        """The flat layout's journal; slotted locators are journalled in their bucket's keys."""
        self._close_client = close_client
        self._closed = False
        self._metrics = StoreMetrics()
        self._direct_reads = not self.cluster and redis_io.connections_expose_sockets()
        """Whether reads may bypass redis-py's parser (:mod:`stores.redis._mget_reply`): standalone servers only,
        and only while redis-py's connections keep their socket where this store looks for it."""

    def __repr__(self) -> str:
        return (
            f"RedisStore(name={self.name!r}, prefix={self.prefix!r}, layout={self.layout!r},"
            f" ttl_seconds={self.ttl_seconds})"
        )

    # -- locators --------------------------------------------------------------------------
    def locator_for(self, topic: str, message_id: uuid.UUID, size: int) -> str:
        """The locator a payload of ``size`` bytes gets with this store's ``entry_bytes`` and layout."""
        return self._shape(topic, message_id, size).text(self.prefix)

    def _shape(self, topic: str, message_id: uuid.UUID, size: int) -> RedisLocator:
        message_id = validate_message_id(message_id)
        bucket = bucket_of(message_id) if self.layout == SLOTTED else None
        return RedisLocator(
            validate_topic(topic), message_id, entries_for(size, self.entry_bytes), self.entry_bytes, bucket
        )

    def validate_locator(self, locator: str, expected_size: int | None = None) -> RedisLocator:
        """Parse ``P:T:M#NxE`` (flat) or ``P:{bbb}:T:M#NxE`` (slotted); what :func:`parse_locator` refuses
        is counted as ``locator_rejected`` and raised as :class:`LocatorError`, before any I/O."""
        try:
            return parse_locator(
                locator, self.prefix, cluster=self.cluster, max_entries=self.max_entries, expected_size=expected_size
            )
        except LocatorError:
            self._metrics.add("locator_rejected")
            raise

    def address_of(self, locator: str) -> PayloadAddress:
        """The topic and id in the locator: an envelope is bound to its topic."""
        parsed = self.validate_locator(locator)
        return PayloadAddress(parsed.topic, parsed.message_id)

    # -- store operations ------------------------------------------------------------------
    def put(
        self,
        topic: str,
        message_id: uuid.UUID,
        payload: Payload,
        *,
        pending_since_ms: int | None = None,
        sha256: bytes | None = None,
        persistent: bool = False,
    ) -> str:
        """Write the payload's entries, its pending mark and its index entry in one MULTI/EXEC.

        A ``persistent`` payload (a compacted topic's) gets no TTL and goes in the ``:kept`` index. The
        producer says so only to a store with a TTL (``expires_per_payload``): without one, every payload
        already lives until it is deleted, and asking the brokers would delay a topic's first write.

        In the slotted layout all of them share the bucket's hash tag, so the transaction runs on
        the one master that owns the slot. ``sha256`` is accepted for the :class:`Store` contract
        and unused: Redis keeps no metadata beside the bytes, and the envelope carries the digest.
        """
        del sha256
        started = time.perf_counter()
        locator, commands = self.put_commands(topic, message_id, payload, pending_since_ms, persistent=persistent)
        try:
            self._write(commands)
        except StoreUnavailableError as exc:
            # The EXEC may or may not have run. If it did and the pending mark is there, a sweeper
            # finds it; a best-effort delete now is only a shortcut. Not after a timeout with the
            # write journalled: a server that did not answer the write would not answer the delete
            # either, and the caller would wait a second socket timeout for nothing.
            if pending_since_ms is None or not isinstance(exc.__cause__, rex.TimeoutError):
                self._best_effort_delete(locator)
            raise
        self.put_done(started, locator, len(payload), journalled=pending_since_ms is not None)
        return locator

    def put_commands(
        self, topic: str, message_id: uuid.UUID, payload: Payload, pending_since_ms: int | None, *, persistent: bool
    ) -> tuple[str, list[tuple[Arg, ...]]]:
        """The locator and the commands of :meth:`put`'s transaction, for it and for a :class:`RedisPutPipeline`."""
        self._check_open()
        size = len(payload)
        shape = self._shape(topic, message_id, size)
        count = shape.count
        if count > self.max_entries:
            raise StoreError(
                f"payload of {size} bytes needs {count} entries of {self.entry_bytes}, more than max_entries"
                f" ({self.max_entries}); raise entry_bytes or max_entries"
            )
        locator = shape.text(self.prefix)
        index_key = shape.index_key(self.prefix)
        ttl = None if persistent else self.ttl_seconds
        written = now_ms()
        expiry: tuple[Arg, ...] = () if ttl is None else ("EX", ttl)
        step = self.entry_bytes
        view = memoryview(payload) if count > 1 else payload
        commands: list[tuple[Arg, ...]] = [
            ("SET", key, view[i * step : (i + 1) * step] if count > 1 else payload, *expiry)
            for i, key in enumerate(shape.keys(self.prefix))
        ]
        if pending_since_ms is not None:
            commands.append(("ZADD", shape.pending_key(self.prefix), pending_since_ms, locator))
        commands.append(("ZADD", shape.kept_index_key(self.prefix) if persistent else index_key, written, locator))
        if self.ttl_seconds is not None:  # index entries of expired payloads go as new ones arrive
            commands.append(("ZREMRANGEBYSCORE", index_key, "-inf", f"({written - self.ttl_seconds * 1000}"))
        return locator, commands

    def put_pipeline(self) -> RedisPutPipeline | None:
        """Writes sent ahead of their replies on one connection (``reference.write.window``); None on a cluster,
        whose transactions go to the master of each payload's slot."""
        return None if self.cluster else RedisPutPipeline(self, self._metrics)

    def delete(self, locator: str) -> None:
        """Entries, pending mark and index entry in one transaction; absent ones are fine (idempotent)."""
        parsed = self.validate_locator(locator)
        self._check_open()
        started = time.perf_counter()

        def remove(pipe: Pipeline) -> None:
            pipe.unlink(*parsed.keys(self.prefix))
            pipe.zrem(parsed.pending_key(self.prefix), locator)
            pipe.zrem(parsed.index_key(self.prefix), locator)
            pipe.zrem(parsed.kept_index_key(self.prefix), locator)

        self._transaction(remove)
        self._done("delete", started, locator)

    # -- plumbing --------------------------------------------------------------------------

    def _write(self, commands: Sequence[tuple[Arg, ...]]) -> None:
        """``commands`` in one MULTI/EXEC: packed by :mod:`stores.redis._wire` on a standalone server, where
        redis-py's pipeline would cost as much Python as the server's work; through the cluster pipeline,
        which routes to the slot's master, on a cluster."""
        if self.cluster:
            self._transaction(lambda pipe: [cast("Any", pipe).execute_command(*args) for args in commands])
            return
        self._call(partial(redis_io.exchange, self.client.connection_pool, PackedTransaction.of(commands)))

    def _transaction(self, build: Callable[[Pipeline], object]) -> list[Any]:
        def run() -> list[Any]:
            with self.client.pipeline(transaction=True) as pipe:
                build(cast("Pipeline", pipe))
                return list(pipe.execute())

        return self._call(run)

    def _pipelined(self, commands: Sequence[Callable[[Pipeline], object]]) -> list[Any]:
        """Independent commands in one non-transactional pipeline (a cluster client splits it by node)."""

        def run() -> list[Any]:
            with self.client.pipeline(transaction=False) as pipe:
                for command in commands:
                    command(cast("Pipeline", pipe))
                return list(pipe.execute())

        return self._call(run)

    def _call(self, fn: Callable[[], _T]) -> _T:
        return redis_io.mapped_errors(self._metrics, fn)

    def _best_effort_delete(self, locator: str) -> None:
        with contextlib.suppress(StoreError):
            self.delete(locator)


__all__ = ["DEFAULT_ENTRY_BYTES", "RedisLocator", "RedisStore", "redis_client_from_url", "ttl_from_retention"]
