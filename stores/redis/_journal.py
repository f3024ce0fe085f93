"""The pending journal and the written index of :class:`~stores.RedisStore`: what gc and sweepers read.

Every write puts its locator in a ``:pending`` sorted set (scored by when it was marked) in the
same transaction as the payload, and in a ``:written`` (or ``:kept``) index; the producer clears
the pending mark once Kafka acknowledged the envelope. A mark left behind is a write whose fate is
unknown, which ``gateway gc`` settles. The flat layout has one journal; the slotted layout one
per bucket, so listing reads all of them (in pipelines a cluster client splits by master).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

from gateway.errors import LocatorError
from stores.base import StoreLifecycle, validate_topic
from stores.redis import _io as redis_io
from stores.redis._layout import JOURNAL_BUCKETS, RedisLocator, bucket_head

if TYPE_CHECKING:
    from redis.client import Pipeline

_T = TypeVar("_T")


class RedisJournal(StoreLifecycle):
    """Pending marks and the written index of :class:`~stores.RedisStore`, which this is mixed into."""

    prefix: str
    cluster: bool

    if TYPE_CHECKING:  # provided by RedisStore

        def validate_locator(self, locator: str, expected_size: int | None = None) -> RedisLocator: ...
        def _call(self, fn: Callable[[], _T]) -> _T: ...
        def _pipelined(self, commands: Sequence[Callable[[Pipeline], object]]) -> list[Any]: ...

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
            self._pipelined([partial(redis_io.zrem_command, key, members) for key, members in groups.items()])
        self._journaled("cleared", locators)

    def list_pending(self, older_than_ms: int) -> list[str]:
        """Oldest first, from every journal key this store can have: on a cluster that is the 1024
        bucket sets, read in one pipeline that reaches every master; on a standalone server also
        the flat set, so a store switched to the slotted layout still sees its older marks.
        """
        self._check_open()
        replies = cast(
            "list[list[tuple[bytes, float]]]",
            self._pipelined(
                [partial(redis_io.pending_before_command, f"{head}:pending", older_than_ms) for head in self._heads()]
            ),
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
        sizes = cast("list[int]", self._pipelined([partial(redis_io.zcard_command, key) for key in indexes]))
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
