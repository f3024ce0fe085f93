"""Payloads in Redis, following Workday's "kafka-over-redis" layout (peers.md §1).

Keys, with ``P`` the prefix, ``T`` the *physical* topic and ``M`` the canonical message id::

    P:T:M:0 .. P:T:M:{N-1}   the payload, cut into entries of at most ``entry_bytes``
    P:pending                sorted set: locator -> ms it was marked pending (the crash journal)
    P:written                sorted set: locator -> ms it was written (for reconcilers)

Locator: ``P:T:M#NxE``: N entries of E bytes each (the last one E or fewer). It names the entries
without listing them, so a read is one MGET of keys computed locally; the ``#`` keeps a locator from
ever being mistaken for a data key. E is there so that a reader checks N against the payload size
in the envelope before any I/O (N must be ceil(size / E)), whatever entry size it is configured
with itself: a forged or mangled count is refused as a :class:`LocatorError`, and the entries read
must then have exactly the lengths N and E imply.

Entries exist because a Redis string holds at most 512 MB (``proto-max-bulk-len``); smaller entries
also keep one huge value from blocking the single-threaded server for long while it is copied.
The topic is part of the key so that a topic's payloads can be found and purged by pattern, and so
two topics never share a payload by accident.

Consistency: every write of a payload (its entries, its pending mark, its index entry, its TTLs) is
one MULTI/EXEC, so a reader sees all of it or none of it, and a crash leaves either nothing or a
pending mark. This targets standalone or Sentinel-managed Redis: in Redis Cluster the keys of one
transaction must share a hash slot, which this layout does not arrange.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
from redis import exceptions as rex

from gateway.errors import (
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

if TYPE_CHECKING:
    from redis.client import Pipeline

MiB = 1024 * 1024
DEFAULT_ENTRY_BYTES = 64 * MiB
REDIS_MAX_STRING = 512 * MiB
DEFAULT_MAX_ENTRIES = 4096

_PREFIX = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_NUMBER = re.compile(r"[1-9][0-9]{0,9}")
_T = TypeVar("_T")

# Server replies that mean "not now" rather than "never": a failover, a replica, a full server.
_REFUSED_FOR_NOW_ERRORS = (
    rex.OutOfMemoryError, rex.ReadOnlyError, rex.TryAgainError, rex.ClusterDownError, rex.MasterDownError,
)
_REFUSED_FOR_NOW = re.compile(r"(?:^|error: )(?:OOM|LOADING|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|BUSY)\b")


@dataclass(frozen=True, slots=True)
class RedisLocator:
    """A validated locator: where the payload's ``count`` entries of ``entry_bytes`` live."""

    topic: str
    message_id: uuid.UUID
    count: int
    entry_bytes: int

    def keys(self, prefix: str) -> list[str]:
        return [f"{prefix}:{self.topic}:{self.message_id}:{i}" for i in range(self.count)]

    def sentinel(self, prefix: str) -> str:
        """The key after the last entry, which must not exist: it catches a count that is too small."""
        return f"{prefix}:{self.topic}:{self.message_id}:{self.count}"

    def entries_for(self, size: int) -> int:
        return entries_for(size, self.entry_bytes)


def entries_for(size: int, entry_bytes: int) -> int:
    """How many entries a payload of ``size`` bytes takes; an empty payload still has one (empty) entry."""
    return max(1, -(-size // entry_bytes))


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
    """A :class:`stores.Store` on redis-py.

    ``client`` must return bytes (``decode_responses=False``). Redis errors that mean the server is
    unreachable or temporarily refusing writes become :class:`StoreUnavailableError` (cause chained),
    so the producer's policy can fall back to chunking; other server errors become :class:`StoreError`.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "gw",
        ttl_seconds: int | None = None,
        entry_bytes: int = DEFAULT_ENTRY_BYTES,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        name: str = "redis",
        close_client: bool = False,
    ) -> None:
        if _PREFIX.fullmatch(prefix) is None:
            raise ValueError(f"prefix must be 1..128 chars of [A-Za-z0-9._:-], got {prefix!r}")
        if ttl_seconds is not None and (isinstance(ttl_seconds, bool) or ttl_seconds <= 0):
            raise ValueError(f"ttl_seconds must be a positive int or None, got {ttl_seconds!r}")
        if not 1 <= entry_bytes < REDIS_MAX_STRING:
            raise ValueError(f"entry_bytes must be in [1, 512 MiB), got {entry_bytes}")
        if not 1 <= max_entries <= 10**9:
            raise ValueError(f"max_entries must be in [1, 10**9], got {max_entries}")
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        if kwargs.get("decode_responses"):
            raise ValueError("RedisStore needs a client with decode_responses=False: payloads are bytes")
        self.client = client
        self.name = validate_store_name(name)
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.entry_bytes = entry_bytes
        self.max_entries = max_entries
        self.pending_key = f"{prefix}:pending"
        self.index_key = f"{prefix}:written"
        self._close_client = close_client
        self._closed = False
        self._metrics = StoreMetrics()

    def __repr__(self) -> str:
        return f"RedisStore(name={self.name!r}, prefix={self.prefix!r}, ttl_seconds={self.ttl_seconds})"

    # -- locators --------------------------------------------------------------------------
    def locator_for(self, topic: str, message_id: uuid.UUID, size: int) -> str:
        """The locator a payload of ``size`` bytes gets with this store's ``entry_bytes``."""
        count = entries_for(size, self.entry_bytes)
        return f"{self.prefix}:{validate_topic(topic)}:{validate_message_id(message_id)}#{count}x{self.entry_bytes}"

    def validate_locator(self, locator: str, expected_size: int | None = None) -> RedisLocator:
        """Parse ``P:T:M#NxE``; anything else, another prefix, N beyond ``max_entries``, an entry size
        Redis cannot hold, or (given ``expected_size``) an N that does not fit the size is refused.

        The bound on N matters as much as the prefix: a forged ``#1000000000x1`` would otherwise make
        :meth:`get` build a billion key names before Redis is even asked.
        """
        # The longest real one: prefix + ":" + 249-char topic + ":" + uuid + "#" + 10 digits + "x" + 9 digits.
        if not isinstance(locator, str) or len(locator) > len(self.prefix) + 308 or not locator.isascii():
            self._metrics.add("locator_rejected")
            raise LocatorError(f"malformed Redis locator {locator!r:.200}")
        try:
            # Topic and id cannot contain ':' or '#', so splitting from the right is unambiguous
            # even for a prefix that contains ':'.
            base, hash_mark, shape = locator.rpartition("#")
            head, colon1, id_text = base.rpartition(":")
            prefix, colon2, topic_text = head.rpartition(":")
            count_text, times, entry_text = shape.partition("x")
            if (
                not (hash_mark and colon1 and colon2 and times)
                or prefix != self.prefix
                or _NUMBER.fullmatch(count_text) is None
                or _NUMBER.fullmatch(entry_text) is None
            ):
                raise LocatorError(
                    f"locator {locator!r} is not of the form {self.prefix}:<topic>:<uuid>#<count>x<entry bytes>"
                )
            count, entry_bytes = int(count_text), int(entry_text)
            if count > self.max_entries:
                raise LocatorError(f"locator {locator!r} claims {count} entries, more than max_entries")
            if entry_bytes >= REDIS_MAX_STRING:
                raise LocatorError(f"locator {locator!r} claims entries larger than a Redis string can be")
            parsed = RedisLocator(parse_topic(topic_text, locator), parse_uuid(id_text, locator), count, entry_bytes)
            if expected_size is not None and parsed.entries_for(expected_size) != count:
                raise LocatorError(
                    f"locator {locator!r} claims {count} entries of {entry_bytes} bytes, but a {expected_size}-byte"
                    f" payload takes {parsed.entries_for(expected_size)}"
                )
            return parsed
        except LocatorError:
            self._metrics.add("locator_rejected")
            raise

    # -- store operations ------------------------------------------------------------------
    def put(
        self, topic: str, message_id: uuid.UUID, payload: Payload, *,
        pending_since_ms: int | None = None, sha256: bytes | None = None,
    ) -> str:
        """Write the payload's entries, its pending mark and its index entry in one MULTI/EXEC.

        ``sha256`` is accepted for the :class:`Store` contract and unused: Redis keeps no metadata
        beside the bytes, and the envelope carries the digest.
        """
        del sha256
        self._check_open()
        size = len(payload)
        count = entries_for(size, self.entry_bytes)
        if count > self.max_entries:
            raise StoreError(
                f"payload of {size} bytes needs {count} entries of {self.entry_bytes}, more than max_entries"
                f" ({self.max_entries}); raise entry_bytes or max_entries"
            )
        locator = self.locator_for(topic, message_id, size)
        keys = RedisLocator(topic, message_id, count, self.entry_bytes).keys(self.prefix)
        started = time.perf_counter()
        written = now_ms()

        def write(pipe: Pipeline) -> None:
            step = self.entry_bytes
            if count == 1:
                pipe.set(keys[0], payload, ex=self.ttl_seconds)
            else:
                view = memoryview(payload)
                for i, key in enumerate(keys):
                    pipe.set(key, view[i * step : (i + 1) * step], ex=self.ttl_seconds)
            if pending_since_ms is not None:
                pipe.zadd(self.pending_key, {locator: pending_since_ms})
            pipe.zadd(self.index_key, {locator: written})
            if self.ttl_seconds is not None:  # index entries of expired payloads go as new ones arrive
                pipe.zremrangebyscore(self.index_key, "-inf", f"({written - self.ttl_seconds * 1000}")

        try:
            self._transaction(write)
        except StoreUnavailableError as exc:
            # The EXEC may or may not have run. If it did and the pending mark is there, a sweeper
            # finds it; a best-effort delete now is only a shortcut. Not after a timeout with the
            # write journalled: a server that did not answer the write would not answer the delete
            # either, and the caller would wait a second socket timeout for nothing.
            if pending_since_ms is None or not isinstance(exc.__cause__, rex.TimeoutError):
                self._best_effort_delete(locator)
            raise
        self._metrics.done("put", started, size)
        return locator

    def get(self, locator: str, expected_size: int | None = None) -> bytes:
        """All entries (and the sentinel after them) in one MGET, joined once.

        A missing entry means the payload is gone (expired, evicted, deleted). Entries of the wrong
        length, or a sentinel that exists, mean the locator does not describe what is stored.
        """
        parsed = self.validate_locator(locator, expected_size)
        self._check_open()
        started = time.perf_counter()
        keys = [*parsed.keys(self.prefix), parsed.sentinel(self.prefix)]
        *parts, beyond = cast("list[bytes | None]", self._call(partial(self.client.mget, keys)))
        chunks = [part for part in parts if part is not None]
        if len(chunks) != parsed.count:
            self._metrics.add("not_found")
            missing = parsed.count - len(chunks)
            raise PayloadNotFoundError(f"{missing} of {parsed.count} entries of {locator!r} are missing")
        last = len(chunks[-1])
        if (
            beyond is not None
            or any(len(c) != parsed.entry_bytes for c in chunks[:-1])
            or last > parsed.entry_bytes
            or (parsed.count > 1 and last == 0)
        ):
            self._metrics.add("errors")
            raise PayloadIntegrityError(f"the entries stored for {locator!r} do not have the shape it describes")
        size = (parsed.count - 1) * parsed.entry_bytes + last
        if expected_size is not None and size != expected_size:
            self._metrics.add("errors")
            raise PayloadIntegrityError(f"payload at {locator!r} has {size} bytes, expected {expected_size}")
        value = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._metrics.done("get", started, size)
        return value

    def delete(self, locator: str) -> None:
        """Entries, pending mark and index entry in one transaction; absent ones are fine (idempotent)."""
        parsed = self.validate_locator(locator)
        self._check_open()
        started = time.perf_counter()

        def remove(pipe: Pipeline) -> None:
            pipe.unlink(*parsed.keys(self.prefix))
            pipe.zrem(self.pending_key, locator)
            pipe.zrem(self.index_key, locator)

        self._transaction(remove)
        self._metrics.done("delete", started)

    # -- pending journal -------------------------------------------------------------------
    def mark_pending(self, locator: str, now_ms: int) -> None:
        self.validate_locator(locator)
        self._check_open()
        self._call(partial(self.client.zadd, self.pending_key, {locator: now_ms}))
        self._metrics.add("pending_marked")

    def clear_pending(self, locator: str) -> None:
        self.clear_pending_many([locator])

    def clear_pending_many(self, locators: Sequence[str]) -> None:
        """One ZREM for many acknowledged writes: the producer clears marks in batches."""
        if not locators:
            return
        for locator in locators:
            self.validate_locator(locator)
        self._check_open()
        self._call(partial(self.client.zrem, self.pending_key, *locators))
        self._metrics.add("pending_cleared", len(locators))

    def list_pending(self, older_than_ms: int) -> list[str]:
        self._check_open()
        raw = cast(
            "list[bytes]", self._call(partial(self.client.zrangebyscore, self.pending_key, "-inf", f"({older_than_ms}"))
        )
        return [m.decode() for m in raw]

    def list_locators(self, topic: str | None = None) -> Iterator[tuple[str, int]]:
        """From the ``written`` index by ZSCAN, which returns every member present for the whole scan
        at least once even while others are added or removed; no order. Index entries of payloads
        that expired lately may still be listed until the next write prunes them.
        """
        self._check_open()
        # Prefix and topic hold no glob metacharacters, so they can go into MATCH unescaped.
        match = f"{self.prefix}:{validate_topic(topic)}:*" if topic is not None else None
        cursor = 0
        seen: set[str] = set()
        while True:
            cursor, rows = cast(
                "tuple[int, list[tuple[bytes, float]]]",
                self._call(partial(self.client.zscan, self.index_key, cursor, match=match, count=1000)),
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

    # -- lifecycle -------------------------------------------------------------------------
    # -- plumbing --------------------------------------------------------------------------

    def _transaction(self, build: Callable[[Pipeline], None]) -> list[Any]:
        def run() -> list[Any]:
            with self.client.pipeline(transaction=True) as pipe:
                build(pipe)
                return list(pipe.execute())

        return self._call(run)

    def _call(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except (rex.ConnectionError, rex.TimeoutError) as exc:
            self._metrics.add("errors")
            raise StoreUnavailableError(f"Redis is unreachable: {exc}") from exc
        except rex.ResponseError as exc:
            self._metrics.add("errors")
            text = str(exc)
            if isinstance(exc, _REFUSED_FOR_NOW_ERRORS) or _refused_for_now(text):
                raise StoreUnavailableError(f"Redis refuses for now ({type(exc).__name__}): {text}") from exc
            raise StoreError(f"Redis error: {text}") from exc
        except rex.RedisError as exc:
            self._metrics.add("errors")
            raise StoreError(f"Redis error: {exc}") from exc

    def _best_effort_delete(self, locator: str) -> None:
        with contextlib.suppress(StoreError):
            self.delete(locator)


def _refused_for_now(text: str) -> bool:
    # redis-py reports a command refused inside MULTI as "Command # n (...) of pipeline caused error: <reply>".
    return _REFUSED_FOR_NOW.search(text) is not None


__all__ = ["DEFAULT_ENTRY_BYTES", "RedisLocator", "RedisStore", "ttl_from_retention"]
