"""Compressed reference payloads read as streams on the real stores: decoded as their ranges arrive.

``reference.compression`` (zstd, gzip) on both producer paths: ``produce`` stores one frame made of the
whole value (cramjam's zstd, zlib's gzip member), ``produce_stream`` one frame written as the parts go
up. The consumer decodes either through the streaming decoders (``backports.zstd``/``zlib``), a
range at a time, so the stored frame and the decoded value are each read through a few buffers,
never whole. A stored frame changed or cut short behind its envelope raises
:class:`PayloadStreamIntegrityError` no later than the stream's end.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from gateway import HybridConsumer, HybridProducer, PayloadStream, SizeThresholdPolicy
from gateway.errors import PayloadStreamIntegrityError
from gateway.protocol.envelope import decode_envelope
from gateway.store import Store
from gateway.testing import KafkaService
from tests.helpers import STREAM_PART_BYTES as PART
from tests.helpers import consume_all, digest_of_reads, rewrite_stored, sha
from tests.kafkautil import read_partition

KiB = 1024
MiB = 1024 * KiB
RANGE = 64 * KiB  # the stored frame spans several ranges, and so does the decoded value


def text_value(size: int, seed: int) -> bytes:
    """Log-like text: compresses a few times over (so the codec pays off) but not to nothing."""
    lines = (f"{seed}:{i:09d} user={i * 7919 % 100_003} path=/v{i % 17}/items/{i * 31 % 9973}\n" for i in range(size))
    out = bytearray()
    for line in lines:
        out += line.encode()
        if len(out) >= size:
            return bytes(out[:size])
    return bytes(out)


SIZE = 3 * MiB + 12_345


def write(kafka: KafkaService, topic: str, store: Store, value: bytes, codec: str, how: str) -> None:
    conf: dict[str, Any] = {
        **kafka.producer_config(),
        "reference.stream.part.bytes": PART,
        "reference.compression": codec,
    }
    with HybridProducer(
        conf, policy=SizeThresholdPolicy(reference_above=100_000, store=store.name), stores={store.name: store}
    ) as producer:
        if how == "stream":
            producer.produce_stream(topic, io.BytesIO(value), len(value), key=b"k")
        else:
            producer.produce(topic, value, key=b"k")
        assert producer.flush(60) == 0


def read_one(consumer_config: Any, topic: str, store: Store) -> tuple[HybridConsumer, PayloadStream]:
    reading = HybridConsumer(
        consumer_config(None, **{"value.stream.threshold.bytes": MiB, "value.stream.range.bytes": RANGE}),
        stores={store.name: store},
    )
    reading.subscribe([topic])
    got, errors = consume_all(reading, 1, timeout=120)
    assert not errors, errors
    stream = got[0].value()
    assert isinstance(stream, PayloadStream)
    return reading, stream


def stored_frame(consumer_config: Any, topic: str, codec: str) -> str:
    [record] = read_partition(consumer_config(), topic, 0, 1)
    envelope = decode_envelope(record.value())
    assert envelope.compression == codec and envelope.size == SIZE  # size and digest: the application's bytes
    return envelope.locator


@pytest.mark.parametrize("how", ["produce", "stream"])
@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_a_compressed_value_reads_back_as_a_stream_decoded_range_by_range(
    kafka: KafkaService,
    topic: str,
    consumer_config: Any,
    streaming_store: Store,
    codec: str,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = text_value(SIZE, 1)
    write(kafka, topic, streaming_store, value, codec, how)
    locator = stored_frame(consumer_config, topic, codec)
    stored = len(streaming_store.get(locator))
    assert RANGE < stored < SIZE // 2, "the frame spans several ranges and compressed well"

    def whole(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("a compressed payload read as a stream was read whole")

    monkeypatch.setattr(streaming_store, "get", whole)
    monkeypatch.setattr(streaming_store, "get_many", whole)
    reading, stream = read_one(consumer_config, topic, streaming_store)
    try:
        assert stream.size == SIZE and stream.seekable()
        assert digest_of_reads(stream, 333_333) == sha(value)
        stream.seek(SIZE // 2 + 5)  # a seek decodes again from the frame's start
        assert stream.read(10_000) == value[SIZE // 2 + 5 : SIZE // 2 + 10_005]
    finally:
        reading.close()


def flip(frame: bytes) -> bytes:
    changed = bytearray(frame)
    changed[len(frame) // 2] ^= 0x10
    return bytes(changed)


@pytest.mark.parametrize("damage", ["tampered", "truncated"])
@pytest.mark.parametrize("codec", ["zstd", "gzip"])
@pytest.mark.parametrize("streaming_store", ["redis", "s3"], indirect=True)
def test_a_compressed_frame_changed_or_cut_behind_its_envelope_raises_by_the_streams_end(
    kafka: KafkaService, topic: str, consumer_config: Any, streaming_store: Store, codec: str, damage: str
) -> None:
    value = text_value(SIZE, 2)
    write(kafka, topic, streaming_store, value, codec, "stream")
    locator = stored_frame(consumer_config, topic, codec)
    rewrite_stored(
        streaming_store, locator, flip if damage == "tampered" else (lambda frame: frame[: len(frame) - 100])
    )
    reading, stream = read_one(consumer_config, topic, streaming_store)
    try:
        seen = bytearray()
        with pytest.raises(PayloadStreamIntegrityError) as caught:
            while part := stream.read(400_001):
                seen += part
            pytest.fail("the stream ended without an error")
        assert len(seen) < SIZE and caught.value.topic == topic
        assert bytes(seen) == value[: len(seen)] or damage == "tampered"
    finally:
        reading.close()
