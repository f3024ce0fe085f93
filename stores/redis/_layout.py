"""Key names and locators of :class:`stores.RedisStore`: the flat layout and the slotted one (pure, no I/O).

Two layouts exist because Redis Cluster runs a MULTI/EXEC only when every key in it hashes to one
slot. The *flat* layout (the original one) keeps one global journal, ``P:pending`` and ``P:written``,
so a payload and its journal entries land in different slots. The *slotted* layout puts a hash tag
in every key: the payload's message id picks one of :data:`JOURNAL_BUCKETS` buckets, and the bucket
owns a hash tag ``{bbb}`` (three hex digits), its own pending set and its own written index::

    P:{bbb}:T:M:0 .. P:{bbb}:T:M:{N-1}   the entries
    P:{bbb}:pending                      the bucket's crash journal
    P:{bbb}:written                      the bucket's index for reconcilers
    locator  P:{bbb}:T:M#NxE

One bucket per message (rather than one hash tag per message) keeps the journal in sorted sets
that a sweeper reads with 1024 range queries instead of a SCAN of the whole keyspace; 1024 tags
of three hex digits fall into 1024 distinct slots spread evenly over the slot space, so payloads
spread over the masters as evenly as the slots do. The bucket is derived from the message id
(CRC-32 of its 16 bytes), never chosen freely, so a locator's tag is checked like the rest of it.
"""

from __future__ import annotations

import re
import uuid
import zlib
from dataclasses import dataclass

from gateway.errors import LocatorError
from stores.base import parse_topic, parse_uuid

JOURNAL_BUCKETS = 1024
FLAT = "flat"
SLOTTED = "slotted"
LAYOUTS = (FLAT, SLOTTED)


def bucket_of(message_id: uuid.UUID) -> int:
    """The journal bucket of a message id: any UUID version spreads, since all 16 bytes are hashed."""
    return zlib.crc32(message_id.bytes) % JOURNAL_BUCKETS


def bucket_tag(bucket: int) -> str:
    """The hash tag of a bucket, braces included."""
    return f"{{{bucket:03x}}}"


def bucket_head(prefix: str, bucket: int) -> str:
    return f"{prefix}:{bucket_tag(bucket)}"


def flat_journal_keys(prefix: str) -> tuple[str, str]:
    """``(pending, written)`` of the flat layout."""
    return f"{prefix}:pending", f"{prefix}:written"


@dataclass(frozen=True, slots=True)
class RedisLocator:
    """A validated locator: where the payload's ``count`` entries of ``entry_bytes`` live.

    ``bucket`` is ``None`` for the flat layout and the journal bucket for the slotted one.
    """

    topic: str
    message_id: uuid.UUID
    count: int
    entry_bytes: int
    bucket: int | None = None

    def head(self, prefix: str) -> str:
        """The key prefix of the payload's journal bucket (its hash tag in the slotted layout: one slot per bucket)."""
        return prefix if self.bucket is None else bucket_head(prefix, self.bucket)

    def base(self, prefix: str) -> str:
        """The key every entry of the payload starts with."""
        return f"{self.head(prefix)}:{self.topic}:{self.message_id}"

    def keys(self, prefix: str) -> list[str]:
        """The keys of the payload's entries, in order: what a read fetches and a delete removes."""
        base = self.base(prefix)
        return [f"{base}:{i}" for i in range(self.count)]

    def sentinel(self, prefix: str) -> str:
        """The key after the last entry, which must not exist: it catches a count that is too small."""
        return f"{self.base(prefix)}:{self.count}"

    def text(self, prefix: str) -> str:
        """The locator string."""
        return f"{self.base(prefix)}#{self.count}x{self.entry_bytes}"

    def pending_key(self, prefix: str) -> str:
        """The sorted set of pending writes the payload is journalled in until Kafka acknowledges it."""
        return f"{self.head(prefix)}:pending"

    def index_key(self, prefix: str) -> str:
        """The sorted set of written payloads, by write time: what ``list_locators`` reads."""
        return f"{self.head(prefix)}:written"

    def kept_index_key(self, prefix: str) -> str:
        """The index of persistent payloads, which TTL pruning of ``:written`` never touches."""
        return f"{self.head(prefix)}:kept"

    def entries_for(self, size: int) -> int:
        """How many entries a payload of ``size`` bytes takes in this locator's entry size."""
        return entries_for(size, self.entry_bytes)


def entries_for(size: int, entry_bytes: int) -> int:
    """How many entries a payload of ``size`` bytes takes; an empty payload still has one (empty) entry."""
    return max(1, -(-size // entry_bytes))


__all__ = [
    "FLAT",
    "JOURNAL_BUCKETS",
    "LAYOUTS",
    "SLOTTED",
    "RedisLocator",
    "bucket_head",
    "bucket_of",
    "bucket_tag",
    "entries_for",
    "flat_journal_keys",
]


REDIS_MAX_STRING = 512 * 1024 * 1024
"""``proto-max-bulk-len``'s default: the largest value one Redis string holds."""

_NUMBER = re.compile(r"[1-9][0-9]{0,9}")


def parse_locator(
    locator: str, prefix: str, *, cluster: bool, max_entries: int, expected_size: int | None = None
) -> RedisLocator:
    """Parse ``P:T:M#NxE`` (flat) or ``P:{bbb}:T:M#NxE`` (slotted); anything else, another prefix,
    a bucket tag other than the one the id implies, a flat locator on a cluster, N beyond
    ``max_entries``, an entry size Redis cannot hold, or (given ``expected_size``) an N that does
    not fit the size is refused with :class:`LocatorError`.

    The bound on N matters as much as the prefix: a forged ``#1000000000x1`` would otherwise make
    a read build a billion key names before Redis is even asked.
    """
    # The longest real one: prefix + ":{bbb}:" + 249-char topic + ":" + uuid + "#" + 10 digits + "x" + 9 digits.
    if not isinstance(locator, str) or len(locator) > len(prefix) + 314 or not locator.isascii():
        raise LocatorError(f"malformed Redis locator {locator!r:.200}")
    # Topic and id cannot contain ':' or '#', so splitting from the right is unambiguous even for a
    # prefix that contains ':'.
    base, hash_mark, shape = locator.rpartition("#")
    head_topic, colon1, id_text = base.rpartition(":")
    head, colon2, topic_text = head_topic.rpartition(":")
    count_text, times, entry_text = shape.partition("x")
    if (
        not (hash_mark and colon1 and colon2 and times)
        or not head.startswith(prefix)
        or _NUMBER.fullmatch(count_text) is None
        or _NUMBER.fullmatch(entry_text) is None
    ):
        raise LocatorError(
            f"locator {locator!r} is not of the form {prefix}[:{{bucket}}]:<topic>:<uuid>#<count>x<entry bytes>"
        )
    topic, message_id = parse_topic(topic_text, locator), parse_uuid(id_text, locator)
    bucket = _bucket_of_head(locator, head, prefix, message_id, cluster)
    count, entry_bytes = int(count_text), int(entry_text)
    if count > max_entries:
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


def _bucket_of_head(locator: str, head: str, prefix: str, message_id: uuid.UUID, cluster: bool) -> int | None:
    """``None`` for a flat head, the bucket for the one slotted head this id may have; else refused."""
    if head == prefix:
        if cluster:
            raise LocatorError(
                f"locator {locator!r} is in the flat layout, which a Redis Cluster store cannot read"
                " (its keys span several hash slots)"
            )
        return None
    bucket = bucket_of(message_id)
    if head != bucket_head(prefix, bucket):
        raise LocatorError(f"locator {locator!r} does not have prefix {prefix!r} and the bucket of its id")
    return bucket
