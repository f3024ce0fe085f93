"""The producer's own configuration keys, read out of the confluent-kafka config it is given.

Kept apart from the producer so that every key's default, bound and error can be tested without a
broker. What is left after the keys are popped goes to librdkafka unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    peek_int,
    pop_bool,
    pop_choice,
    pop_int,
)
from gateway.core.assembler import buffered_cost
from gateway.errors import MessageTooLargeError, RecordTooLargeError
from gateway.health import StoreHealth
from gateway.producer.outgoing import headers_size
from gateway.producer.reference.digests import CHECKSUM_SETTINGS
from gateway.protocol.envelope import MAX_ENCRYPTED_ENVELOPE_BYTES, envelope_header
from gateway.protocol.headers import TIMESTAMP_HEADER, Headers, encode_timestamp, has_header
from gateway.protocol.payload_encoding import parse_compression
from gateway.protocol.peers.pointer_formats import REFERENCE_FORMATS, ReferenceFormat
from gateway.protocol.segments import SEGMENT_HEADER_SIZE

DEFAULT_SEGMENT_BYTES = 800_000
RECORD_OVERHEAD = 512
MIN_SEGMENT_ROOM = 1024
"""The smallest segment payload a chunked message may be cut into (see ``check_segment_room``)."""
"""Room kept below ``message.max.bytes`` for librdkafka's per-record framing and the batch header."""


def _overhead(header_only: bool) -> int:
    return (0 if header_only else SEGMENT_HEADER_SIZE) + RECORD_OVERHEAD


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """The keys ``HybridProducer`` owns; see its docstring for what each one does."""

    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    """The effective chunk size: ``max.message.segment.bytes``, capped to fit under ``message.max.bytes``."""
    header_only: bool = False
    timestamp_header: bool = True
    wrap_small: bool = False
    block_s: float = 60.0
    max_message_bytes: int = 1_000_000
    fallback_cap: int = 16_000_000
    failure_threshold: int = 3
    failure_window_ms: int = 30_000
    probe_interval_ms: int = 5_000
    chunking: bool = True
    """``large.message.enabled``: false sends what the policy would chunk as one plain record."""
    compaction_check: bool = True
    """``large.message.compaction.check``: ask the brokers whether a topic is compacted before chunking on it."""
    topic_config_refresh_s: float = 300.0
    checksum: str = "auto"
    """``reference.checksum``: the payload digest in envelopes (see :mod:`gateway.producer.reference.digests`)."""
    write_window: int = 8
    """``reference.write.window``: store writes awaiting their reply at once (1: each before ``produce`` returns;
    a store that cannot pipeline writes one at a time whatever the window)."""
    write_linger_s: float = 0.01
    """``reference.write.linger.ms``: the longest a write waits in the window before its envelope is queued."""
    max_chunked_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """``large.message.max.bytes``: the most buffer a chunked message may take in a consumer (its bytes and
    bookkeeping, :func:`~gateway.core.assembler.buffered_cost`); the default consumer's buffer capacity."""
    max_reference_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    """``reference.max.payload.bytes``: the largest payload written to a store; the default consumer's limit."""
    compression: str | None = None
    """``reference.compression``: how stored payloads are encoded (:mod:`gateway.protocol.payload_encoding`)."""
    warning_interval_s: float = 10.0
    """``log.warning.interval.ms``: at most one warning line per store and fallback outcome per interval."""
    reference_format: ReferenceFormat = ReferenceFormat.GATEWAY
    """``reference.format``: our envelope, or the pointer records bakdata's or AWS's readers follow
    (:mod:`gateway.protocol.peers.pointer_formats`)."""

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

    ``ValueError`` names the key for a value that is not a number or boolean, or is out of bounds.
    """
    conf = dict(config)
    _linkedin_names(conf)
    chunking = pop_bool(conf, "large.message.enabled", True)
    segment_bytes = pop_int(conf, "max.message.segment.bytes", DEFAULT_SEGMENT_BYTES, minimum=1)
    header_only = pop_bool(conf, "li.record.header.enable", False)
    timestamp_header = pop_bool(conf, "header.timestamp.enabled", True)
    wrap_small = pop_bool(conf, "li.large.message.segment.wrapping.required", False)
    block_s = pop_int(conf, "large.message.block.ms", 60_000, minimum=0) / 1000.0
    max_message_bytes = peek_int(conf, "message.max.bytes", 1_000_000)
    fallback_cap = pop_int(conf, "reference.fallback.inline.max.bytes", 16_000_000, minimum=0)
    failure_threshold = pop_int(conf, "store.failure.threshold", 3, minimum=1)
    failure_window_ms = pop_int(conf, "store.failure.window.ms", 30_000, minimum=1)
    probe_interval_ms = pop_int(conf, "store.probe.interval.ms", 5_000, minimum=0)
    compaction_check = pop_bool(conf, "large.message.compaction.check", True)
    refresh_s = pop_int(conf, "large.message.topic.config.refresh.ms", 300_000, minimum=0) / 1000.0
    checksum = pop_choice(conf, "reference.checksum", "auto", CHECKSUM_SETTINGS)
    write_window = pop_int(conf, "reference.write.window", 8, minimum=1)
    write_linger_s = pop_int(conf, "reference.write.linger.ms", 10, minimum=1) / 1000.0
    max_chunked = pop_int(conf, "large.message.max.bytes", DEFAULT_MAX_MESSAGE_BYTES, minimum=1)
    max_reference = pop_int(conf, "reference.max.payload.bytes", DEFAULT_MAX_PAYLOAD_BYTES, minimum=1)
    compression = parse_compression(conf.pop("reference.compression", None))
    warning_interval_s = pop_int(conf, "log.warning.interval.ms", 10_000, minimum=0) / 1000.0
    reference_format = ReferenceFormat(pop_choice(conf, "reference.format", "gateway", REFERENCE_FORMATS))
    room = max_message_bytes - _overhead(header_only)
    if room < 1:
        raise ValueError(f"message.max.bytes={max_message_bytes} leaves no room for a segment")
    settings = ProducerSettings(
        min(segment_bytes, room),
        header_only,
        timestamp_header,
        wrap_small,
        block_s,
        max_message_bytes,
        fallback_cap,
        failure_threshold,
        failure_window_ms,
        probe_interval_ms,
        chunking,
        compaction_check,
        refresh_s,
        checksum,
        write_window,
        write_linger_s,
        max_chunked,
        max_reference,
        compression,
        warning_interval_s,
        reference_format,
    )
    return settings, conf


LINKEDIN_ALIASES = {
    "enable.record.header": "li.record.header.enable",
    "large.message.segment.wrapping.required": "li.large.message.segment.wrapping.required",
    "max.block.ms": "large.message.block.ms",
}
"""``LiKafkaProducer`` names (README spellings included) and the keys they mean here."""


def _linkedin_names(conf: dict[str, Any]) -> None:
    """Rename LinkedIn's keys to ours; both spellings with different values is an error."""
    for theirs, ours in LINKEDIN_ALIASES.items():
        if theirs not in conf:
            continue
        value = conf.pop(theirs)
        if ours in conf and str(conf[ours]).lower() != str(value).lower():
            raise ValueError(f"{theirs}={value!r} and {ours}={conf[ours]!r} say different things; set one")
        conf[ours] = value


def confluent_config(config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The configuration as confluent-kafka's ``Producer`` takes it: a dict, keyword arguments, or both.

    Keyword arguments override the dict's keys; anything else is refused with confluent-kafka's words.
    """
    if (config is None and not kwargs) or (config is not None and not isinstance(config, Mapping)):
        raise TypeError("expected configuration dict")
    return {**(config or {}), **kwargs}
