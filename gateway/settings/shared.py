"""Keys the producer and the consumer both read, and the defaults the two ends must agree on."""

from __future__ import annotations

from gateway.settings._kinds import ChoiceSetting, IntSetting

DEFAULT_MAX_MESSAGE_BYTES = 32_000_000
"""The largest chunked message a default producer writes (``large.message.max.bytes``) and a default
consumer reassembles (``message.assembler.buffer.capacity``, hence ``message.assembler.max.message.bytes``).

One default for both ends, so that what a default producer accepts a default consumer delivers: a
consumer holds a chunked message whole in its buffer, and a larger one would fail on every poll.
"""

DEFAULT_MAX_PAYLOAD_BYTES = 2_000_000_000
"""The largest referenced payload a default producer writes and a default consumer reads
(``reference.max.payload.bytes`` on both): below 2 GiB, the most one Spark row (an Arrow binary cell) holds."""

MAX_CHUNKED_MESSAGE_BYTES = IntSetting(
    "large.message.max.bytes",
    DEFAULT_MAX_MESSAGE_BYTES,
    "largest value the chunked route writes: the default consumer's message.assembler.buffer.capacity",
    minimum=1,
)
REFERENCE_MAX_PAYLOAD_BYTES = IntSetting(
    "reference.max.payload.bytes",
    DEFAULT_MAX_PAYLOAD_BYTES,
    "largest payload written to a store, and the largest an envelope may declare to a consumer",
    spark="reference.max.payload.bytes",
    minimum=1,
)
LOG_WARNING_INTERVAL_MS = IntSetting(
    "log.warning.interval.ms", 10_000, "at most one warning line of a kind per interval", minimum=0
)
REFERENCE_ENCRYPTION = ChoiceSetting(
    "reference.encryption",
    "none",
    "aes256-gcm: seal (producer) or open (consumer) reference payloads with the key_provider= given",
    choices=("none", "aes256-gcm"),
)
COMMIT_METADATA_ENCODING = ChoiceSetting(
    "commit.metadata.encoding",
    "nul-terminated",
    'how the "<HW>,<metadata>" of every commit goes on the wire (nul-terminated or java)',
    choices=("nul-terminated", "java"),
)
