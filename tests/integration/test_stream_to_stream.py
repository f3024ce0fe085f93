"""A value larger than memory end to end: written by ``produce_stream``, read back as a ``PayloadStream``.

The two halves were built apart (the producer's part uploads, the consumer's ranged reads); here each
store reads what the other half wrote: Redis entries of the stream's part size (named by the locator,
not the store's ``entry_bytes``), an S3 multipart object, a GCS resumable upload, Azure blocks; clear
and sealed. A byte changed in the store behind a stream-written object raises by the stream's end,
and a sealed one hands out no byte of the tampered segment.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from gateway import HybridConsumer, HybridProducer, PayloadStream, SizeThresholdPolicy
from gateway.encryption import LocalKeyRing
from gateway.errors import PayloadStreamIntegrityError
from gateway.protocol.envelope import decode_envelope
from gateway.store import Store
from gateway.testing import KafkaService
from tests.helpers import STREAM_PART_BYTES as PART
from tests.helpers import consume_all, digest_of_reads, payload, rewrite_stored, sha
from tests.kafkautil import read_partition

MiB = 1024 * 1024
SIZE = 2 * PART + 12_345  # three parts, the last short
SEGMENT = 1 << 20  # the sealing's default segment
RING = LocalKeyRing({"k1": bytes(range(32))}, "k1")


def stream_in(kafka: KafkaService, topic: str, store: Store, values: list[bytes], *, sealed: bool) -> None:
    conf: dict[str, Any] = {**kafka.producer_config(), "reference.stream.part.bytes": PART}
    if sealed:
        conf["reference.encryption"] = "aes256-gcm"
    with HybridProducer(
        conf,
        policy=SizeThresholdPolicy(reference_above=100_000, store=store.name),
        stores={store.name: store},
        key_provider=RING if sealed else None,
    ) as producer:
        for i, value in enumerate(values):
            producer.produce_stream(topic, io.BytesIO(value), len(value), key=f"k{i}".encode())
        assert producer.flush(60) == 0


def streams_out(consumer_config: Any, topic: str, store: Store, count: int) -> tuple[HybridConsumer, list[Any]]:
    reading = HybridConsumer(
        consumer_config(None, **{"value.stream.threshold.bytes": MiB, "value.stream.range.bytes": 3 * MiB // 2}),
        stores={store.name: store},
        key_provider=RING,
    )
    reading.subscribe([topic])
    got, errors = consume_all(reading, count, timeout=120)
    assert not errors, errors
    return reading, got


def flip_byte(store: Store, locator: str, at: int) -> None:
    """Change one stored byte with the store's raw client; the envelope stays as it was."""

    def flipped(stored: bytes) -> bytes:
        changed = bytearray(stored)
        changed[at] ^= 1
        return bytes(changed)

    rewrite_stored(store, locator, flipped)


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
def test_a_streamed_value_reads_back_as_a_stream(
    kafka: KafkaService, topic: str, consumer_config: Any, streaming_store: Store, sealed: bool
) -> None:
    values = [payload(SIZE, 1), payload(SIZE - 7, 2)]
    stream_in(kafka, topic, streaming_store, values, sealed=sealed)
    reading, got = streams_out(consumer_config, topic, streaming_store, len(values))
    try:
        first, second = (m.value() for m in got)
        assert isinstance(first, PayloadStream) and isinstance(second, PayloadStream)
        assert (first.size, second.size) == (SIZE, SIZE - 7)
        assert digest_of_reads(first, 999_999) == sha(values[0])
        second.seek(PART + 3)  # inside the second part
        assert second.read(10_000) == values[1][PART + 3 : PART + 10_003]
        second.seek(0)
        assert digest_of_reads(second, 1_234_567) == sha(values[1])
    finally:
        reading.close()


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
@pytest.mark.parametrize("streaming_store", ["redis", "s3"], indirect=True)
def test_a_byte_changed_behind_a_streamed_value_is_caught_by_the_reading_stream(
    kafka: KafkaService, topic: str, consumer_config: Any, streaming_store: Store, sealed: bool
) -> None:
    value = payload(SIZE, 3)
    stream_in(kafka, topic, streaming_store, [value], sealed=sealed)
    [record] = read_partition(consumer_config(), topic, 0, 1)
    envelope = decode_envelope(record.value())
    # clear: a byte of the second part; sealed: a byte of the sixth sealed segment
    at = PART + 100 if not sealed else 5 * (SEGMENT + 16) + 100
    flip_byte(streaming_store, envelope.locator, at)
    reading, [msg] = streams_out(consumer_config, topic, streaming_store, 1)
    try:
        stream = msg.value()
        assert isinstance(stream, PayloadStream)
        seen = bytearray()
        with pytest.raises(PayloadStreamIntegrityError):
            while part := stream.read(400_001):
                seen += part
            pytest.fail("the stream ended without an error")
        assert len(seen) < SIZE
        if sealed:
            assert bytes(seen) == value[: len(seen)] and len(seen) <= 5 * SEGMENT, "no byte of the tampered segment"
    finally:
        reading.close()
