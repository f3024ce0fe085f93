"""What a reader accepts of an envelope before it asks a store: a bounded size, and its own topic.

Both rules refuse a forged or copied envelope before it costs anything. The size: a reader holds a
payload whole, and a Redis read allocates the declared size up front so that entries land in
place, so a forged ``2**41`` would be a 2 TiB allocation that only the operating system's refusal
stops. The topic: a store keys each payload by the topic it was written for (the locator names it),
and an envelope copied into another topic would otherwise serve that payload to the other topic's
readers; anyone who can write to a topic and has seen an envelope of another could do it.

Mirrored topics are the one legitimate exception: MirrorMaker 2 copies ``A`` to ``source.A``
record for record, envelopes included, so ``reference.topic.renames`` names the formats under which
a topic's copies may carry its envelopes. Pure: the locator's topic is looked up by the caller.

Peers' pointers (bakdata, kaf-s3, AWS) pass the same check, because a pointer is an envelope anyone
can forge without having seen one: it names a bucket and key, so it can name an object our producer
wrote for another topic (:meth:`ReferenceRules.check_pointer`). What makes an object ours is what
every object store of ours writes with it (:func:`object_written_for`): its topic and message id in
the object's metadata, and a key ending in ``<topic>/<message id>``. No peer writes that, and no
prefix decides it, so a peer store configured over a whole bucket still recognises our objects in it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.config import DEFAULT_MAX_PAYLOAD_BYTES
from gateway.errors import ConfigurationError, EnvelopePayloadError, LocatorTopicError, PayloadTooLargeError
from gateway.protocol.envelope import Envelope
from gateway.protocol.peers import PeerPointer
from gateway.protocol.peers.pointer_formats import written_for_pointer

TOPIC_MARK = "${topic}"
"""Where the original name goes in a rename format, as in Confluent Replicator's ``topic.rename.format``."""

_AROUND = re.compile(r"[a-zA-Z0-9._-]*")  # what may stand around the mark: Kafka's topic characters


@dataclass(frozen=True, slots=True)
class TopicRename:
    """One rename format, ``<prefix>${topic}<suffix>``: a topic so named is a copy of the topic inside."""

    prefix: str
    suffix: str

    def source_of(self, topic: str) -> str | None:
        """The topic ``topic`` is a copy of under this format, or ``None`` when it is not so named."""
        around = len(self.prefix) + len(self.suffix)
        if len(topic) > around and topic.startswith(self.prefix) and topic.endswith(self.suffix):
            return topic[len(self.prefix) : len(topic) - len(self.suffix)]
        return None


def parse_topic_renames(text: object) -> tuple[TopicRename, ...]:
    """``reference.topic.renames``: comma-separated formats, each ``${topic}`` once with something around it."""
    if text is None:
        return ()
    if not isinstance(text, str):
        raise ConfigurationError(f"reference.topic.renames must be a string of formats, got {type(text).__name__}")
    renames = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        prefix, mark, suffix = entry.partition(TOPIC_MARK)
        if not mark or not (prefix or suffix) or _AROUND.fullmatch(prefix) is None or _AROUND.fullmatch(suffix) is None:
            raise ConfigurationError(
                f"reference.topic.renames: {entry!r} is not a rename format: {TOPIC_MARK} once, with topic"
                f" characters before or after it (e.g. source.{TOPIC_MARK} for MirrorMaker 2's default)"
            )
        renames.append(TopicRename(prefix, suffix))
    return tuple(renames)


@dataclass(frozen=True, slots=True)
class ReferenceRules:
    """The consumer's ``reference.max.payload.bytes`` and ``reference.topic.renames``, applied to an envelope."""

    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    renames: tuple[TopicRename, ...] = ()

    def check_size(self, envelope: Envelope) -> None:
        """:class:`PayloadTooLargeError` for a declared size above the maximum."""
        if envelope.size > self.max_payload_bytes:
            raise PayloadTooLargeError(
                f"the envelope declares a payload of {envelope.size} bytes at {envelope.locator!r}, more than"
                f" reference.max.payload.bytes={self.max_payload_bytes}"
            )

    def sources(self, topic: str) -> set[str]:
        """The topics whose envelopes a record of ``topic`` may carry: itself and, through the renames,
        each topic it is a copy of (``dr.source.A`` is a copy of ``source.A``, itself one of ``A``)."""
        found = {topic}
        frontier = [topic]
        while frontier:  # each step strips a non-empty prefix or suffix, so this ends
            name = frontier.pop()
            for rename in self.renames:
                source = rename.source_of(name)
                if source is not None and source not in found:
                    found.add(source)
                    frontier.append(source)
        return found

    def may_carry(self, topic: str, written_for: str) -> bool:
        """Whether a record of ``topic`` may name a payload written for ``written_for``: the topic binding."""
        return written_for == topic or bool(self.renames and written_for in self.sources(topic))

    def check_topic(self, envelope: Envelope, topic: str, written_for: str | None) -> None:
        """:class:`LocatorTopicError` unless the payload was written for ``topic`` or a topic it copies.

        ``written_for`` is the topic the locator names; ``None`` (a store whose locators name no
        topic) cannot be checked and passes.
        """
        if written_for is None or self.may_carry(topic, written_for):
            return
        raise LocatorTopicError(
            f"the envelope in topic {topic!r} points at a payload written for topic {written_for!r}"
            f" ({envelope.locator!r}); a mirrored topic names its source's in reference.topic.renames"
        )

    def check_pointer(self, pointer: PeerPointer, topic: str, written_for: str | None) -> None:
        """Refuse a peer's pointer in a record of ``topic`` that names an object our producer wrote.

        ``written_for`` is what :func:`object_written_for` found; ``None`` (a peer's own object)
        passes. An object of ours is never served through a pointer: in a topic the binding refuses,
        :class:`LocatorTopicError`, as its envelope copied there would get; in its own topic or a
        mirror, :class:`EnvelopePayloadError`, since only its envelope says whether the bytes are
        sealed or compressed (a sealed payload carries no mark of its own, see
        :mod:`gateway.protocol.encryption`), and a pointer would hand them out unopened.

        The exception is an object our producer wrote *for* a pointer (``reference.format=bakdata|aws``,
        which refuses sealing and compression): its message id says so (:func:`written_for_pointer`),
        and in its own topic or a mirror the pointer serves it; elsewhere the binding refuses it.
        """
        if written_for is None:
            return
        named = f"the {pointer.format.value} pointer in topic {topic!r} names {pointer.uri[:300]!r}"
        if not self.may_carry(topic, written_for):
            raise LocatorTopicError(
                f"{named}, a payload this library wrote for topic {written_for!r}: a record of {topic!r} may"
                " not serve it (a mirrored topic names its source's in reference.topic.renames)"
            )
        if written_for_pointer(pointer.key):
            return
        raise EnvelopePayloadError(
            f"{named}, a payload this library wrote for topic {written_for!r}: it is read through its"
            " envelope only, which says whether it is sealed or compressed"
        )


OBJECT_TOPIC_KEYS = ("topic",)
OBJECT_ID_KEYS = ("message-id", "message_id")
"""Where our object stores put the message id: S3 and GCS as written, Azure with ``_`` (C# identifiers)."""


def object_written_for(key: str, metadata: Mapping[str, str] | None) -> str | None:
    """The topic our producer wrote the object at ``key`` for, or ``None`` for an object it did not write.

    Every object store of ours writes the topic and message id into the object's metadata and
    names the object ``<prefix><topic>/<message id>``; both must agree, so a peer's object whose
    key merely looks like ours (kaf-s3 writes ``<prefix>/<uuid4>``) is still a peer's.
    """
    if not metadata:
        return None
    lowered = {str(k).lower(): v for k, v in metadata.items()}
    topic = next((lowered[k] for k in OBJECT_TOPIC_KEYS if k in lowered), None)
    message_id = next((lowered[k] for k in OBJECT_ID_KEYS if k in lowered), None)
    if not isinstance(topic, str) or not isinstance(message_id, str) or not topic or not message_id:
        return None
    name = f"{topic}/{message_id}"
    return topic if key == name or key.endswith("/" + name) else None


DEFAULT_RULES = ReferenceRules()
"""The rules when no key sets them: the default maximum, and every envelope bound to its own topic."""

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_RULES",
    "TOPIC_MARK",
    "ReferenceRules",
    "TopicRename",
    "object_written_for",
    "parse_topic_renames",
]
