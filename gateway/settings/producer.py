"""The keys ``HybridProducer`` owns (and ``message.max.bytes``, librdkafka's, which it reads and leaves in place)."""

from __future__ import annotations

from typing import Any

from gateway.settings._kinds import BoolSetting, ChoiceSetting, IntSetting, Setting, ValueSetting
from gateway.settings.shared import (
    COMMIT_METADATA_ENCODING,
    LOG_WARNING_INTERVAL_MS,
    MAX_CHUNKED_MESSAGE_BYTES,
    REFERENCE_ENCRYPTION,
    REFERENCE_MAX_PAYLOAD_BYTES,
)

DEFAULT_SEGMENT_BYTES = 800_000

CHECKSUM_CHOICES = ("auto", "sha256", "blake3")
COMPRESSION_CHOICES = ("none", "zstd", "lz4", "gzip")
REFERENCE_FORMAT_CHOICES = ("gateway", "bakdata", "aws")
"""``reference.format``'s choices; gateway.protocol.peers.pointer_formats.ReferenceFormat names the same."""

LARGE_MESSAGE_ENABLED = BoolSetting(
    "large.message.enabled",
    True,
    "false: what the policy would chunk goes as one plain record (LinkedIn's default is false)",
    java=("large.message.enabled",),
)
MAX_MESSAGE_SEGMENT_BYTES = IntSetting(
    "max.message.segment.bytes",
    DEFAULT_SEGMENT_BYTES,
    "chunk size, capped to fit one record under message.max.bytes",
    java=("max.message.segment.bytes",),
    minimum=1,
)
RECORD_HEADER_ENABLE = BoolSetting(
    "li.record.header.enable", False, "write H3 (header-only) segments", java=("enable.record.header",)
)
HEADER_TIMESTAMP_ENABLED = BoolSetting("header.timestamp.enabled", True, "stamp _t on chunked segments")
SEGMENT_WRAPPING_REQUIRED = BoolSetting(
    "li.large.message.segment.wrapping.required",
    False,
    "send non-empty values that fit as one wrapped segment",
    java=("large.message.segment.wrapping.required",),
)
BLOCK_MS = IntSetting(
    "large.message.block.ms",
    60_000,
    "how long a chunked or reference produce retries on a full queue",
    java=("max.block.ms",),
    minimum=0,
)
MESSAGE_MAX_BYTES = IntSetting(
    "message.max.bytes", 1_000_000, "librdkafka's record size limit, left in place: segments are cut to fit it"
)
FALLBACK_INLINE_MAX_BYTES = IntSetting(
    "reference.fallback.inline.max.bytes",
    16_000_000,
    "largest value chunked instead when its store is failing",
    minimum=0,
)
STORE_FAILURE_THRESHOLD = IntSetting(
    "store.failure.threshold", 3, "failures within the window that mark a store unhealthy", minimum=1
)
STORE_FAILURE_WINDOW_MS = IntSetting("store.failure.window.ms", 30_000, "that window", minimum=1)
STORE_PROBE_INTERVAL_MS = IntSetting(
    "store.probe.interval.ms", 5_000, "while unhealthy, one write is tried per interval", minimum=0
)
COMPACTION_CHECK = BoolSetting(
    "large.message.compaction.check", True, "ask the brokers for cleanup.policy before chunking on a topic"
)
TOPIC_CONFIG_REFRESH_MS = IntSetting(
    "large.message.topic.config.refresh.ms", 300_000, "how long that answer is cached", minimum=0
)
REFERENCE_CHECKSUM = ChoiceSetting(
    "reference.checksum", "auto", "the payload digest in each envelope", choices=CHECKSUM_CHOICES
)
WRITE_WINDOW = IntSetting("reference.write.window", 8, "store writes in flight at once", minimum=1)
WRITE_LINGER_MS = IntSetting(
    "reference.write.linger.ms", 10, "the longest a write waits in the window before its envelope is queued", minimum=1
)
REFERENCE_COMPRESSION = ValueSetting(
    "reference.compression", None, "how stored payloads are compressed", choices=COMPRESSION_CHOICES
)
REFERENCE_FORMAT = ChoiceSetting(
    "reference.format",
    "gateway",
    "our envelope, or the pointer records bakdata's (S3, GCS, Azure) or AWS's (S3) Java readers follow",
    choices=REFERENCE_FORMAT_CHOICES,
)
REFERENCE_STREAM_PART_BYTES = IntSetting(
    "reference.stream.part.bytes",
    8 * 1024 * 1024,
    "part size of produce_stream's store writes (S3 multipart parts; at least 5 MiB, S3's minimum)",
    minimum=5 * 1024 * 1024,
)
KEY_SERIALIZER = ValueSetting("key.serializer", None, "a callable (value, ctx) -> bytes for keys")
VALUE_SERIALIZER = ValueSetting("value.serializer", None, "a callable (value, ctx) -> bytes for values")

PRODUCER: tuple[Setting[Any], ...] = (
    LARGE_MESSAGE_ENABLED,
    MAX_MESSAGE_SEGMENT_BYTES,
    RECORD_HEADER_ENABLE,
    HEADER_TIMESTAMP_ENABLED,
    SEGMENT_WRAPPING_REQUIRED,
    BLOCK_MS,
    MESSAGE_MAX_BYTES,
    FALLBACK_INLINE_MAX_BYTES,
    STORE_FAILURE_THRESHOLD,
    STORE_FAILURE_WINDOW_MS,
    STORE_PROBE_INTERVAL_MS,
    COMPACTION_CHECK,
    TOPIC_CONFIG_REFRESH_MS,
    REFERENCE_CHECKSUM,
    WRITE_WINDOW,
    WRITE_LINGER_MS,
    MAX_CHUNKED_MESSAGE_BYTES,
    REFERENCE_MAX_PAYLOAD_BYTES,
    REFERENCE_COMPRESSION,
    REFERENCE_ENCRYPTION,
    LOG_WARNING_INTERVAL_MS,
    COMMIT_METADATA_ENCODING,
    REFERENCE_FORMAT,
    REFERENCE_STREAM_PART_BYTES,
    KEY_SERIALIZER,
    VALUE_SERIALIZER,
)
"""Every key the producer reads, in the order of docs/consumer.md's "Producer side" table."""
