"""The producer's own configuration keys, read out of the confluent-kafka config it is given.

Kept apart from the producer so that every key's default, bound and error can be tested without a
broker. What is left after the keys are popped goes to librdkafka unchanged: to the producer and to
the admin client of the ``cleanup.policy`` lookup alike. So this is the one place that keeps the
gateway's keys from librdkafka, which refuses a key it does not know ("No such configuration
property"); no client made from the rest has to remember to drop one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.assembler import buffered_cost
from gateway.core.outgoing import headers_size
from gateway.errors import MessageTooLargeError, RecordTooLargeError
from gateway.health import StoreHealth
from gateway.protocol.envelope import MAX_ENCRYPTED_ENVELOPE_BYTES, envelope_header
from gateway.protocol.headers import TIMESTAMP_HEADER, Headers, encode_timestamp, has_header
from gateway.protocol.metadata import CommitEncoding
from gateway.protocol.payload_encoding import parse_compression
from gateway.protocol.peers.pointer_formats import ReferenceFormat
from gateway.protocol.segments import SEGMENT_HEADER_SIZE
from gateway.settings import DEFAULT_MAX_MESSAGE_BYTES, PRODUCER, rename_aliases
from gateway.settings import producer as keys
from gateway.settings.producer import DEFAULT_SEGMENT_BYTES
from gateway.settings.shared import (
    COMMIT_METADATA_ENCODING,
    LOG_WARNING_INTERVAL_MS,
    MAX_CHUNKED_MESSAGE_BYTES,
    REFERENCE_MAX_PAYLOAD_BYTES,
)

RECORD_OVERHEAD = 512
"""Room kept below ``message.max.bytes`` for librdkafka's per-record framing and the batch header."""
MIN_SEGMENT_ROOM = 1024
"""The smallest segment payload a chunked message may be cut into (see ``check_segment_room``)."""


def _overhead(header_only: bool) -> int:
    return (0 if header_only else SEGMENT_HEADER_SIZE) + RECORD_OVERHEAD


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """The keys ``HybridProducer`` owns; see its docstring for what each one does."""

    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    """The effective chunk size: ``max.message.segment.bytes``, capped to fit under ``message.max.bytes``."""
    header_only: bool = keys.RECORD_HEADER_ENABLE.default
    timestamp_header: bool = keys.HEADER_TIMESTAMP_ENABLED.default
    wrap_small: bool = keys.SEGMENT_WRAPPING_REQUIRED.default
    block_s: float = keys.BLOCK_MS.default / 1000.0
    max_message_bytes: int = keys.MESSAGE_MAX_BYTES.default
    fallback_cap: int = keys.FALLBACK_INLINE_MAX_BYTES.default
    failure_threshold: int = keys.STORE_FAILURE_THRESHOLD.default
    failure_window_ms: int = keys.STORE_FAILURE_WINDOW_MS.default
    probe_interval_ms: int = keys.STORE_PROBE_INTERVAL_MS.default
    chunking: bool = keys.LARGE_MESSAGE_ENABLED.default
    """``large.message.enabled``: false sends what the policy would chunk as one plain record."""
    compaction_check: bool = keys.COMPACTION_CHECK.default
    """``large.message.compaction.check``: ask the brokers whether a topic is compacted before chunking on it."""
    topic_config_refresh_s: float = keys.TOPIC_CONFIG_REFRESH_MS.default / 1000.0
    checksum: str = keys.REFERENCE_CHECKSUM.default
    """``reference.checksum``: the payload digest in envelopes (see :mod:`gateway.producer.reference.digests`)."""
    write_window: int = keys.WRITE_WINDOW.default
    """``reference.write.window``: store writes awaiting their reply at once (1: each before ``produce`` returns;
    a store that cannot pipeline writes one at a time whatever the window)."""
    write_linger_s: float = keys.WRITE_LINGER_MS.default / 1000.0
    """``reference.write.linger.ms``: the longest a write waits in the window before its envelope is queued."""
    max_chunked_bytes: int = MAX_CHUNKED_MESSAGE_BYTES.default
    """``large.message.max.bytes``: the most buffer a chunked message may take in a consumer (its bytes and
    bookkeeping, :func:`~gateway.core.assembler.buffered_cost`); the default consumer's buffer capacity."""
    max_reference_bytes: int = REFERENCE_MAX_PAYLOAD_BYTES.default
    """``reference.max.payload.bytes``: the largest payload written to a store; the default consumer's limit."""
    compression: str | None = None
    """``reference.compression``: how stored payloads are encoded (:mod:`gateway.protocol.payload_encoding`)."""
    warning_interval_s: float = LOG_WARNING_INTERVAL_MS.default / 1000.0
    """``log.warning.interval.ms``: at most one warning line per store and fallback outcome per interval."""
    reference_format: ReferenceFormat = ReferenceFormat.GATEWAY
    """``reference.format``: our envelope, or the pointer records bakdata's or AWS's readers follow
    (:mod:`gateway.protocol.peers.pointer_formats`)."""
    stream_part_bytes: int = keys.REFERENCE_STREAM_PART_BYTES.default
    """``reference.stream.part.bytes``: the part size of ``produce_stream``'s store writes (its memory per stream)."""
    commit_encoding: CommitEncoding = CommitEncoding.NUL_TERMINATED
    """``commit.metadata.encoding``: how ``send_offsets_to_transaction`` writes each offset's metadata
    (:class:`~gateway.producer._outbox.ExactProducer`), as the consumer writes its commits."""

    @property
    def overhead(self) -> int:
        """Bytes of a record that are not segment payload, key or headers."""
        return _overhead(self.header_only)

    def segment_room(self, key: bytes | None, headers: Headers) -> int:
        """Bytes of ``message.max.bytes`` left for segment payload beside this key and these headers (may be < 1)."""
        return self.max_message_bytes - self.overhead - (len(key) if key else 16) - headers_size(headers)

    def segment_size_for(self, key: bytes | None, headers: Headers) -> int:
        """The largest segment that still fits one record together with this key and these headers."""
        return max(1, min(self.segment_bytes, self.segment_room(key, headers)))

    def chunk_size_for(self, key: bytes | None, headers: Headers) -> int:
        """:meth:`segment_size_for` with the ``_t`` header the chunked route adds: the size its segments will have."""
        if self.timestamp_header and not has_header(headers, TIMESTAMP_HEADER):
            headers = [*headers, (TIMESTAMP_HEADER, encode_timestamp(0))]
        return self.segment_size_for(key, headers)

    def check_segment_room(self, key: bytes | None, headers: Headers, size: int) -> None:
        """:class:`RecordTooLargeError` when the key and headers leave too little room to chunk ``size`` bytes.

        Every segment repeats the key and headers, so tiny segments multiply them: a key a few bytes
        under the limit once turned a 50-byte value into 50 one-byte segments and 50 MB in Kafka. A
        message is refused when it would need segments smaller than ``MIN_SEGMENT_ROOM`` (or than
        its own size, when that is smaller).
        """
        room = self.segment_room(key, headers)
        if room < max(1, min(size, MIN_SEGMENT_ROOM)):
            raise RecordTooLargeError(
                f"key ({len(key or b'')} bytes) and headers ({headers_size(headers)} bytes) leave {max(room, 0)} "
                f"bytes per segment under message.max.bytes={self.max_message_bytes}; chunking {size} bytes needs "
                f"at least {min(size, MIN_SEGMENT_ROOM) or 1}: use a smaller key or headers"
            )

    def check_envelope_room(self, key: bytes | None, headers: Headers) -> None:
        """:class:`RecordTooLargeError` when the key and headers leave no room for an envelope in one record.

        Asked before the store write: Kafka would refuse the envelope only after the payload was
        stored (and the write undone again), where the other routes refuse at once.
        """
        used = len(key or b"") + headers_size([*headers, envelope_header()]) + RECORD_OVERHEAD
        room = self.max_message_bytes - used
        if room < MAX_ENCRYPTED_ENVELOPE_BYTES:
            raise RecordTooLargeError(
                f"key ({len(key or b'')} bytes) and headers ({headers_size(headers)} bytes) leave {max(room, 0)} "
                f"bytes for the reference envelope under message.max.bytes={self.max_message_bytes}; an envelope "
                f"needs up to {MAX_ENCRYPTED_ENVELOPE_BYTES}: use a smaller key or headers"
            )

    def check_chunked_size(self, size: int, segments: int) -> None:
        """:class:`MessageTooLargeError` for a message a consumer with the same capacity could never reassemble."""
        cost = buffered_cost(size, segments)
        if cost > self.max_chunked_bytes:
            raise MessageTooLargeError(
                f"{size} bytes in {segments} segments take {cost} bytes of a consumer's buffer, more than "
                f"large.message.max.bytes={self.max_chunked_bytes}: a consumer whose message.assembler.buffer."
                f"capacity is that size (the default, {DEFAULT_MAX_MESSAGE_BYTES}) evicts it on every poll. Send "
                "it by reference (SizeThresholdPolicy(reference_above=..., store=...)), or raise both together"
            )

    def store_health(self) -> StoreHealth:
        """A fresh health tracker for one store, with the configured thresholds."""
        return StoreHealth(self.failure_threshold, self.failure_window_ms, self.probe_interval_ms)


def parse_producer_config(config: Mapping[str, Any]) -> tuple[ProducerSettings, dict[str, Any]]:
    """Our settings, and the rest of ``config`` for librdkafka (``message.max.bytes`` is read but left there).

    Every key of :data:`~gateway.settings.PRODUCER` is taken out here, but three that the producer takes
    out before, each with what it configures: ``reference.encryption``
    (:meth:`~gateway.encryption.ReferenceEncryption.from_config`), ``key.serializer`` and
    ``value.serializer`` (:meth:`~gateway.serialization.Serializers.pop_from`).

    ``ValueError`` names the key for a value that is not a number or boolean, or is out of bounds.
    """
    conf = dict(config)
    rename_aliases(conf, PRODUCER)
    chunking = keys.LARGE_MESSAGE_ENABLED.pop(conf)
    segment_bytes = keys.MAX_MESSAGE_SEGMENT_BYTES.pop(conf)
    header_only = keys.RECORD_HEADER_ENABLE.pop(conf)
    max_message_bytes = keys.MESSAGE_MAX_BYTES.peek(conf)
    settings = ProducerSettings(  # by name: fourteen of them are numbers, and a swapped pair would pass unseen
        header_only=header_only,
        timestamp_header=keys.HEADER_TIMESTAMP_ENABLED.pop(conf),
        wrap_small=keys.SEGMENT_WRAPPING_REQUIRED.pop(conf),
        block_s=keys.BLOCK_MS.pop(conf) / 1000.0,
        max_message_bytes=max_message_bytes,
        fallback_cap=keys.FALLBACK_INLINE_MAX_BYTES.pop(conf),
        failure_threshold=keys.STORE_FAILURE_THRESHOLD.pop(conf),
        failure_window_ms=keys.STORE_FAILURE_WINDOW_MS.pop(conf),
        probe_interval_ms=keys.STORE_PROBE_INTERVAL_MS.pop(conf),
        chunking=chunking,
        compaction_check=keys.COMPACTION_CHECK.pop(conf),
        topic_config_refresh_s=keys.TOPIC_CONFIG_REFRESH_MS.pop(conf) / 1000.0,
        checksum=keys.REFERENCE_CHECKSUM.pop(conf),
        write_window=keys.WRITE_WINDOW.pop(conf),
        write_linger_s=keys.WRITE_LINGER_MS.pop(conf) / 1000.0,
        max_chunked_bytes=MAX_CHUNKED_MESSAGE_BYTES.pop(conf),
        max_reference_bytes=REFERENCE_MAX_PAYLOAD_BYTES.pop(conf),
        compression=parse_compression(keys.REFERENCE_COMPRESSION.pop(conf)),
        warning_interval_s=LOG_WARNING_INTERVAL_MS.pop(conf) / 1000.0,
        reference_format=ReferenceFormat(keys.REFERENCE_FORMAT.pop(conf)),
        stream_part_bytes=keys.REFERENCE_STREAM_PART_BYTES.pop(conf),
        commit_encoding=CommitEncoding(COMMIT_METADATA_ENCODING.pop(conf)),
        # last, so a key's own error comes before the one about the room they leave
        segment_bytes=_capped_segment_bytes(segment_bytes, max_message_bytes, header_only),
    )
    return settings, conf


def _capped_segment_bytes(segment_bytes: int, max_message_bytes: int, header_only: bool) -> int:
    """The chunk size in effect: ``max.message.segment.bytes``, or less when that would not fit one record.

    A segment travels with its header (unless ``li.record.header.enable``) and librdkafka's framing
    under ``message.max.bytes``; a limit that leaves no byte for payload is refused (``ValueError``).
    """
    room = max_message_bytes - _overhead(header_only)
    if room < 1:
        raise ValueError(f"message.max.bytes={max_message_bytes} leaves no room for a segment")
    return min(segment_bytes, room)


LINKEDIN_ALIASES = {alias: setting.key for setting in PRODUCER for alias in setting.aliases}
"""``LiKafkaProducer`` names (README spellings included) and the keys they mean here (from the schema)."""


def confluent_config(config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The configuration as confluent-kafka's ``Producer`` takes it: a dict, keyword arguments, or both.

    Keyword arguments override the dict's keys; anything else is refused with confluent-kafka's words.
    """
    if (config is None and not kwargs) or (config is not None and not isinstance(config, Mapping)):
        raise TypeError("expected configuration dict")
    return {**(config or {}), **kwargs}
