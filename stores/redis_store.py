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
*slotted* layout (:mod:`stores.redis_layout`) inserts a hash tag after the prefix, one of 1024
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
import functools
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
from redis import exceptions as rex

from gateway.buffers import BytesBuilder
from gateway.errors import (
    GatewayError,
    LocatorError,
    PayloadIntegrityError,
    PayloadNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from gateway.protocol.envelope import validate_store_name
from stores.base import (
    Payload,
    StoreLifecycle,
    StoreMetrics,
    now_ms,
    parse_topic,
    parse_uuid,
    topic_retention,
    validate_message_id,
    validate_topic,
)
from stores.redis_layout import (
    FLAT,
    JOURNAL_BUCKETS,
    LAYOUTS,
    SLOTTED,
    RedisLocator,
    bucket_head,
    bucket_of,
    entries_for,
    flat_journal_keys,
)
from stores.redis_read import EntryShape, ReplyReader
from stores.redis_wire import Arg, PackedTransaction, packed_command

if TYPE_CHECKING:
    from redis.client import Pipeline
    from redis.cluster import RedisCluster

MiB = 1024 * 1024
DEFAULT_ENTRY_BYTES = 64 * MiB
REDIS_MAX_STRING = 512 * MiB
DEFAULT_MAX_ENTRIES = 4096
DIRECT_READ_FROM = 256 * 1024
"""Payloads from this size up are received straight into their final ``bytes`` (:mod:`stores.redis_read`)."""

_PREFIX = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_NUMBER = re.compile(r"[1-9][0-9]{0,9}")
_T = TypeVar("_T")

# Server replies that mean "not now" rather than "never": a failover, a replica, a full server.
_REFUSED_FOR_NOW_ERRORS = (
    rex.OutOfMemoryError,
    rex.ReadOnlyError,
    rex.TryAgainError,
    rex.ClusterDownError,
    rex.MasterDownError,
)
_REFUSED_FOR_NOW = re.compile(r"(?:^|error: )(?:OOM|LOADING|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|BUSY)\b")


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


class RedisStore(StoreLifecycle):
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
        self.cluster = _is_cluster(client)
        if _client_decodes(client, self.cluster):
            raise ValueError("RedisStore needs a client with decode_responses=False: payloads are bytes")
        if layout is None:
            layout = SLOTTED if self.cluster else FLAT
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS} or None, got {layout!r}")
        if self.cluster and not _cluster_transactions():
            raise ValueError("RedisStore on Redis Cluster needs redis-py 6.1 or later (ClusterPipeline transactions)")
        if self.cluster and layout == FLAT:
            raise ValueError("Redis Cluster needs layout='slotted': a flat-layout write spans several hash slots")
        self.client = client
        self.layout = layout
        self.name = validate_store_name(name)
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.entry_bytes = entry_bytes
        self.max_entries = max_entries
        self.pending_key, self.index_key = flat_journal_keys(prefix)
        """The flat layout's journal; slotted locators are journalled in their bucket's keys."""
        self._close_client = close_client
        self._closed = False
        self._metrics = StoreMetrics()
        self._direct_reads = not self.cluster and _connections_expose_sockets()
        """Whether reads may bypass redis-py's parser (:mod:`stores.redis_read`): standalone servers only,
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
        """Parse ``P:T:M#NxE`` (flat) or ``P:{bbb}:T:M#NxE`` (slotted); anything else, another prefix,
        a bucket tag other than the one the id implies, a flat locator on a cluster, N beyond
        ``max_entries``, an entry size Redis cannot hold, or (given ``expected_size``) an N that does
        not fit the size is refused.

        The bound on N matters as much as the prefix: a forged ``#1000000000x1`` would otherwise make
        :meth:`get` build a billion key names before Redis is even asked.
        """
        # The longest real one: prefix + ":{bbb}:" + 249-char topic + ":" + uuid + "#" + 10 digits + "x" + 9 digits.
        if not isinstance(locator, str) or len(locator) > len(self.prefix) + 314 or not locator.isascii():
            self._metrics.add("locator_rejected")
            raise LocatorError(f"malformed Redis locator {locator!r:.200}")
        try:
            # Topic and id cannot contain ':' or '#', so splitting from the right is unambiguous
            # even for a prefix that contains ':'.
            base, hash_mark, shape = locator.rpartition("#")
            head_topic, colon1, id_text = base.rpartition(":")
            head, colon2, topic_text = head_topic.rpartition(":")
            count_text, times, entry_text = shape.partition("x")
            if (
                not (hash_mark and colon1 and colon2 and times)
                or not head.startswith(self.prefix)
                or _NUMBER.fullmatch(count_text) is None
                or _NUMBER.fullmatch(entry_text) is None
            ):
                raise LocatorError(
                    f"locator {locator!r} is not of the form {self.prefix}[:{{bucket}}]:<topic>:<uuid>"
                    "#<count>x<entry bytes>"
                )
            topic, message_id = parse_topic(topic_text, locator), parse_uuid(id_text, locator)
            bucket = self._bucket_of_head(locator, head, message_id)
            count, entry_bytes = int(count_text), int(entry_text)
            if count > self.max_entries:
                raise LocatorError(f"locator {locator!r} claims {count} entries, more than max_entries")
            if entry_bytes >= REDIS_MAX_STRING:
                raise LocatorError(f"locator {locator!r} claims entries larger than a Redis string can be")
            parsed = RedisLocator(topic, message_id, count, entry_bytes, bucket)
            if expected_size is not None and parsed.entries_for(expected_size) != count:
                raise LocatorError(
                    f"locator {locator!r} claims {count} entries of {entry_bytes} bytes, but a {expected_size}-byte"
                    f" payload takes {parsed.entries_for(expected_size)}"
                )
            return parsed
        except LocatorError:
            self._metrics.add("locator_rejected")
            raise

    def _bucket_of_head(self, locator: str, head: str, message_id: uuid.UUID) -> int | None:
        """``None`` for a flat head, the bucket for the one slotted head this id may have; else refused."""
        if head == self.prefix:
            if self.cluster:
                raise LocatorError(
                    f"locator {locator!r} is in the flat layout, which a Redis Cluster store cannot read"
                    " (its keys span several hash slots)"
                )
            return None
        bucket = bucket_of(message_id)
        if head != bucket_head(self.prefix, bucket):
            raise LocatorError(f"locator {locator!r} does not have prefix {self.prefix!r} and the bucket of its id")
        return bucket

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

        A ``persistent`` payload (a compacted topic's) gets no TTL and goes in the ``:kept`` index.

        In the slotted layout all of them share the bucket's hash tag, so the transaction runs on
        the one master that owns the slot. ``sha256`` is accepted for the :class:`Store` contract
        and unused: Redis keeps no metadata beside the bytes, and the envelope carries the digest.
        """
        del sha256
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
        keys = shape.keys(self.prefix)
        pending_key, index_key = shape.pending_key(self.prefix), shape.index_key(self.prefix)
        ttl = None if persistent else self.ttl_seconds
        started = time.perf_counter()
        written = now_ms()

        expiry: tuple[Arg, ...] = () if ttl is None else ("EX", ttl)
        step = self.entry_bytes
        view = memoryview(payload) if count > 1 else payload
        commands: list[tuple[Arg, ...]] = [
            ("SET", key, view[i * step : (i + 1) * step] if count > 1 else payload, *expiry)
            for i, key in enumerate(keys)
        ]
        if pending_since_ms is not None:
            commands.append(("ZADD", pending_key, pending_since_ms, locator))
        commands.append(("ZADD", shape.kept_index_key(self.prefix) if persistent else index_key, written, locator))
        if self.ttl_seconds is not None:  # index entries of expired payloads go as new ones arrive
            commands.append(("ZREMRANGEBYSCORE", index_key, "-inf", f"({written - self.ttl_seconds * 1000}"))

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
        self._done("put", started, locator, size)
        return locator

    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        """All entries (and the sentinel after them) in one MGET, joined once.

        A missing entry means the payload is gone (expired, evicted, deleted, or lost with a master
        that failed before its replica had it). Entries of the wrong length, or a sentinel that
        exists, mean the locator does not describe what is stored.
        """
        parsed = self.validate_locator(locator, expected_size)
        self._check_open()
        started = time.perf_counter()
        if expected_size is not None and expected_size >= DIRECT_READ_FROM and self._direct_reads:
            return self._get_direct(locator, parsed, expected_size, started)
        reply = cast("list[bytes | None]", self._call(partial(self.client.mget, self._read_keys(parsed))))
        return self._payload_from(locator, parsed, reply, expected_size, started)

    def _get_direct(self, locator: str, parsed: RedisLocator, expected_size: int, started: float) -> bytes:
        """The MGET's entries received straight into the payload (:mod:`stores.redis_read`)."""
        request = (self._read_keys(parsed), _entry_lengths(parsed, expected_size))
        (got,) = self._call(partial(_read_entries, self.client.connection_pool, [request]))
        return self._direct_answer(locator, parsed, expected_size, got, started)

    def _direct_answer(
        self, locator: str, parsed: RedisLocator, expected_size: int, got: bytes | EntryShape, started: float
    ) -> bytes:
        """The payload, or the error :meth:`_payload_from` gives for entries not of the lengths expected."""
        if isinstance(got, EntryShape):
            *parts, beyond = got.lengths
            self._judge(locator, parsed, parts, beyond, expected_size)
            raise PayloadIntegrityError(f"the entries stored for {locator!r} do not have the shape it describes")
        self._done("get", started, locator, expected_size)
        return got

    def get_many(self, requests: Sequence[tuple[str, int | None]]) -> list[bytes | GatewayError]:
        """Several payloads in one pipelined round trip, for a reader fetching small payloads ahead.

        Each answer is the payload or the typed error :meth:`get` would raise for that locator, in
        order; only a failure of the connection itself raises, for all of them. Small payloads
        cost a round trip each when fetched one by one, which is most of their time on loopback.
        """
        answers: list[bytes | GatewayError] = []
        wanted: list[tuple[int, str, RedisLocator, int | None]] = []
        for locator, expected_size in requests:
            try:
                parsed = self.validate_locator(locator, expected_size)
            except GatewayError as exc:
                answers.append(exc)
                continue
            wanted.append((len(answers), locator, parsed, expected_size))
            answers.append(b"")
        self._check_open()
        if not wanted:
            return answers
        started = time.perf_counter()
        if self._direct_reads and all(size is not None for *_, size in wanted):
            self._get_many_direct(wanted, answers, started)
            return answers
        # one GET per key rather than an MGET per payload: a cluster pipeline refuses MGET
        keys = [self._read_keys(parsed) for _, _, parsed, _ in wanted]
        replies = self._pipelined([partial(_get, key) for group in keys for key in group])
        at_reply = 0
        for (at, locator, parsed, expected_size), group in zip(wanted, keys, strict=True):
            reply = replies[at_reply : at_reply + len(group)]
            at_reply += len(group)
            try:
                answers[at] = self._payload_from(locator, parsed, reply, expected_size, started)
            except GatewayError as exc:
                answers[at] = exc
        return answers

    def _get_many_direct(
        self,
        wanted: list[tuple[int, str, RedisLocator, int | None]],
        answers: list[bytes | GatewayError],
        started: float,
    ) -> None:
        """One MGET per payload, all in one write, each reply received into its own value."""
        requests = [
            (self._read_keys(parsed), _entry_lengths(parsed, cast("int", size))) for _, _, parsed, size in wanted
        ]
        replies = self._call(partial(_read_entries, self.client.connection_pool, requests))
        for (at, locator, parsed, size), got in zip(wanted, replies, strict=True):
            try:
                answers[at] = self._direct_answer(locator, parsed, cast("int", size), got, started)
            except GatewayError as exc:
                answers[at] = exc

    def _read_keys(self, parsed: RedisLocator) -> list[str]:
        return [*parsed.keys(self.prefix), parsed.sentinel(self.prefix)]

    def _payload_from(
        self,
        locator: str,
        parsed: RedisLocator,
        reply: list[bytes | None],
        expected_size: int | None,
        started: float,
    ) -> bytes:
        """The payload from an MGET of :meth:`_read_keys`, or the typed error for what came back."""
        *parts, beyond = reply
        chunks = [part for part in parts if part is not None]
        size = self._judge(
            locator,
            parsed,
            [None if p is None else len(p) for p in parts],
            None if beyond is None else len(beyond),
            expected_size,
        )
        value = chunks[0] if len(chunks) == 1 else _joined(chunks, size)
        self._done("get", started, locator, size)
        return value

    def _judge(
        self,
        locator: str,
        parsed: RedisLocator,
        lengths: Sequence[int | None],
        beyond: int | None,
        expected_size: int | None,
    ) -> int:
        """The payload's size from its entries' lengths (``None``: missing) and the sentinel's, or the typed error."""
        present = [n for n in lengths if n is not None]
        if len(present) != parsed.count:
            self._metrics.add("not_found")
            missing = parsed.count - len(present)
            raise PayloadNotFoundError(f"{missing} of {parsed.count} entries of {locator!r} are missing")
        last = present[-1]
        if (
            beyond is not None
            or any(n != parsed.entry_bytes for n in present[:-1])
            or last > parsed.entry_bytes
            or (parsed.count > 1 and last == 0)
        ):
            self._metrics.add("errors")
            raise PayloadIntegrityError(f"the entries stored for {locator!r} do not have the shape it describes")
        size = (parsed.count - 1) * parsed.entry_bytes + last
        if expected_size is not None and size != expected_size:
            self._metrics.add("errors")
            raise PayloadIntegrityError(f"payload at {locator!r} has {size} bytes, expected {expected_size}")
        return size

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

    # -- pending journal -------------------------------------------------------------------
    def mark_pending(self, locator: str, now_ms: int) -> None:
        parsed = self.validate_locator(locator)
        self._check_open()
        self._call(partial(self.client.zadd, parsed.pending_key(self.prefix), {locator: now_ms}))
        self._journaled("marked", [locator])

    def clear_pending(self, locator: str) -> None:
        self.clear_pending_many([locator])

    def clear_pending_many(self, locators: Sequence[str]) -> None:
        """One ZREM per journal key for many acknowledged writes: the producer clears marks in batches.

        Flat locators share one key (one ZREM); slotted ones are grouped by bucket and the ZREMs go
        out in one pipeline, which a cluster client splits by master.
        """
        if not locators:
            return
        groups: dict[str, list[str]] = {}
        for locator in locators:
            groups.setdefault(self.validate_locator(locator).pending_key(self.prefix), []).append(locator)
        self._check_open()
        if len(groups) == 1:
            ((key, members),) = groups.items()
            self._call(partial(self.client.zrem, key, *members))
        else:
            self._pipelined([partial(_zrem, key, members) for key, members in groups.items()])
        self._journaled("cleared", locators)

    def list_pending(self, older_than_ms: int) -> list[str]:
        """Oldest first, from every journal key this store can have: on a cluster that is the 1024
        bucket sets, read in one pipeline that reaches every master; on a standalone server also
        the flat set, so a store switched to the slotted layout still sees its older marks.
        """
        self._check_open()
        replies = cast(
            "list[list[tuple[bytes, float]]]",
            self._pipelined([partial(_pending_before, f"{head}:pending", older_than_ms) for head in self._heads()]),
        )
        rows = sorted((score, member) for reply in replies for member, score in reply)
        return [member.decode() for _, member in rows]

    def list_locators(self, topic: str | None = None) -> Iterator[tuple[str, int]]:
        """From the written indexes by ZSCAN, which returns every member present for the whole scan
        at least once even while others are added or removed; no order. Empty buckets are skipped
        after one pipelined ZCARD over all of them. Index entries of payloads that expired lately may
        still be listed until the next write to their bucket prunes them.
        """
        self._check_open()
        indexes = [f"{head}:{name}" for head in self._heads() for name in ("written", "kept")]
        sizes = cast("list[int]", self._pipelined([partial(_zcard, key) for key in indexes]))
        seen: set[str] = set()
        for index, size in zip(indexes, sizes, strict=True):
            if size:
                # Prefix, tag and topic hold no glob metacharacters, so they go into MATCH unescaped.
                head = index.rsplit(":", 1)[0]
                match = f"{head}:{validate_topic(topic)}:*" if topic is not None else None
                yield from self._scan_index(index, match, seen)

    def _scan_index(self, key: str, match: str | None, seen: set[str]) -> Iterator[tuple[str, int]]:
        cursor = 0
        while True:
            cursor, rows = cast(
                "tuple[int, list[tuple[bytes, float]]]",
                self._call(partial(self.client.zscan, key, cursor, match=match, count=1000)),
            )
            for member, score in rows:
                locator = member.decode()
                if locator in seen:
                    continue
                seen.add(locator)
                try:
                    self.validate_locator(locator)
                except LocatorError:
                    continue
                yield locator, int(score)
            if cursor == 0:
                return

    def _heads(self) -> list[str]:
        """The key heads whose ``:pending`` and ``:written`` may hold entries of this store: the 1024
        buckets, and on a standalone server the flat prefix too."""
        buckets = [bucket_head(self.prefix, b) for b in range(JOURNAL_BUCKETS)]
        return buckets if self.cluster else [self.prefix, *buckets]

    # -- plumbing --------------------------------------------------------------------------

    def _write(self, commands: Sequence[tuple[Arg, ...]]) -> None:
        """``commands`` in one MULTI/EXEC: packed by :mod:`stores.redis_wire` on a standalone server, where
        redis-py's pipeline would cost as much Python as the server's work; through the cluster pipeline,
        which routes to the slot's master, on a cluster."""
        if self.cluster:
            self._transaction(lambda pipe: [cast("Any", pipe).execute_command(*args) for args in commands])
            return
        packed = PackedTransaction()
        for args in commands:
            packed.add(*args)
        self._call(partial(_exchange, self.client.connection_pool, packed))

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
        try:
            return fn()
        except (rex.ConnectionError, rex.TimeoutError, rex.SlotNotCoveredError) as exc:
            self._metrics.add("errors")
            raise StoreUnavailableError(f"Redis is unreachable: {exc}") from exc
        except rex.ResponseError as exc:
            self._metrics.add("errors")
            text = str(exc)
            if isinstance(exc, _REFUSED_FOR_NOW_ERRORS) or _refused_for_now(text):
                raise StoreUnavailableError(f"Redis refuses for now ({type(exc).__name__}): {text}") from exc
            raise StoreError(f"Redis error: {text}") from exc
        except (rex.RedisError, rex.RedisClusterException) as exc:
            self._metrics.add("errors")
            raise StoreError(f"Redis error: {exc}") from exc

    def _best_effort_delete(self, locator: str) -> None:
        with contextlib.suppress(StoreError):
            self.delete(locator)


def redis_client_from_url(url: str, **kwargs: Any) -> redis.Redis | RedisCluster:
    """A client for ``url``: a ``RedisCluster`` when the server there runs in cluster mode, else a ``redis.Redis``.

    For tools that take one ``--redis-url`` (gc, reconcile, Spark options): any node of a cluster
    then works as the URL, and the store picks its layout from the client. The probe is one
    ``INFO cluster`` on a short-lived connection.
    """
    probe = redis.Redis.from_url(url, **kwargs)
    try:
        cluster = str(probe.info("cluster").get("cluster_enabled", 0)) == "1"
    except rex.RedisError as exc:
        raise StoreUnavailableError(f"Redis at {url!r} does not answer: {exc}") from exc
    finally:
        probe.close()
    if not cluster:
        return redis.Redis.from_url(url, **kwargs)
    from redis.cluster import RedisCluster

    return RedisCluster.from_url(url, **kwargs)


def _exchange(pool: Any, packed: PackedTransaction) -> None:
    """Send ``packed`` on a pooled connection and read every reply, with the client's retry policy.

    An error reply raises as redis-py's own reading does (an OOM refusal while queueing makes the
    server discard the transaction); the connection is then dropped, since its later replies were not
    read. A retried transaction writes the same keys and members again, which changes nothing.
    """

    def attempt(conn: Any) -> None:
        conn.send_packed_command(packed.items())
        for _ in range(packed.replies - 1):
            conn.read_response()
        for result in conn.read_response() or ():
            if isinstance(result, Exception):
                raise result

    _on_pooled_connection(pool, attempt)


def _on_pooled_connection(pool: Any, attempt: Callable[[Any], _T]) -> _T:
    """``attempt(conn)`` on a pooled connection under the client's retry policy; the connection is
    dropped after any error (its replies may be out of step) and returned to the pool either way."""
    conn = pool.get_connection()
    try:
        return cast("_T", conn.retry.call_with_retry(lambda: attempt(conn), lambda error: conn.disconnect()))
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


@functools.cache
def _connections_expose_sockets() -> bool:
    """Whether a redis-py connection keeps its socket in ``_sock``, which the direct reads receive from."""
    from redis.connection import Connection

    return "_sock" in vars(Connection())  # type: ignore[no-untyped-call]


def _entry_lengths(parsed: RedisLocator, size: int) -> list[int]:
    """The length each entry of a ``size``-byte payload has (the locator's count was checked against it)."""
    step = parsed.entry_bytes
    return [step] * (parsed.count - 1) + [size - step * (parsed.count - 1)]


def _read_entries(pool: Any, requests: Sequence[tuple[list[str], list[int]]]) -> list[bytes | EntryShape]:
    """One MGET per ``(keys, lengths)``, sent in one write on a pooled connection; the first
    ``len(lengths)`` keys of each are received into one ``bytes``.

    A retry (the client's policy, for a connection the server closed) starts again with fresh
    values. The connection is dropped after any error, and after replies that left bytes unread.
    """
    packed = [item for keys, _ in requests for item in packed_command("MGET", *keys)]

    def attempt(conn: Any) -> list[bytes | EntryShape]:
        conn.send_packed_command(packed)
        sock = getattr(conn, "_sock", None)
        if sock is None:
            raise rex.ConnectionError("the connection has no socket after sending")
        reader = ReplyReader(sock)
        out: list[bytes | EntryShape] = []
        for keys, lengths in requests:
            builder = BytesBuilder(sum(lengths))
            shape = reader.read_entries(builder, lengths, len(keys) - len(lengths))
            out.append(shape if shape is not None else builder.build())
        if not reader.drained:
            conn.disconnect()
        return out

    return _on_pooled_connection(pool, attempt)


def _get(key: str, pipe: Pipeline) -> object:
    return pipe.get(key)


def _zrem(key: str, members: list[str], pipe: Pipeline) -> object:
    return pipe.zrem(key, *members)


def _pending_before(key: str, older_than_ms: int, pipe: Pipeline) -> object:
    return pipe.zrangebyscore(key, "-inf", f"({older_than_ms}", withscores=True)


def _zcard(key: str, pipe: Pipeline) -> object:
    return pipe.zcard(key)


def _is_cluster(client: object) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def _cluster_transactions() -> bool:
    import redis.cluster

    return hasattr(redis.cluster, "TransactionStrategy")


def _client_decodes(client: Any, cluster: bool) -> bool:
    if cluster:
        kwargs = client.get_connection_kwargs()
    else:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    return bool(kwargs.get("decode_responses"))


def _refused_for_now(text: str) -> bool:
    # redis-py reports a command refused inside MULTI as "Command # n (...) of pipeline caused error: <reply>".
    return _REFUSED_FOR_NOW.search(text) is not None


__all__ = ["DEFAULT_ENTRY_BYTES", "RedisLocator", "RedisStore", "redis_client_from_url", "ttl_from_retention"]


def _joined(chunks: list[bytes], size: int) -> bytes:
    """The entries as one value, each released once copied: one copy of the payload at the peak, not two."""
    builder = BytesBuilder(size)
    for i, chunk in enumerate(chunks):
        builder.append(chunk)
        chunks[i] = b""
    return builder.build()
