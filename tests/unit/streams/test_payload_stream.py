"""The pure choice and layout of payload streams, and :class:`gateway.PayloadStream` over in-memory stores.

The stores here are :mod:`gateway.testing.memory_store`'s (a store with ranged reads, and one without);
the real stores are read as streams in tests/integration/test_payload_streams.py.
"""

from __future__ import annotations

import io
import uuid

import pytest

from gateway import PayloadStream
from gateway.consumer.resolver import Resolver
from gateway.core.streams.plan import StreamSettings, range_step, sealed_start, streams
from gateway.errors import PayloadIntegrityError, PayloadStreamClosedError, PayloadStreamIntegrityError
from gateway.protocol.encryption import TAG_BYTES, Encryption, sealed_size
from gateway.protocol.envelope import CHECKSUM_SHA256, Envelope
from gateway.testing.memory_store import MemoryStore, RangingMemoryStore
from tests.helpers import payload

TOPIC = "t"
SIZE = 50_001  # twelve 4 KiB ranges and a bit
THRESHOLD = 10_000
SETTINGS = StreamSettings(threshold=THRESHOLD, range_bytes=4096, read_ahead=2)


def envelope_for(store: MemoryStore, value: bytes, checksum: int | None = None) -> Envelope:
    message_id = uuid.uuid4()
    locator = store.put(TOPIC, message_id, value)
    if checksum is None:
        return Envelope.for_payload(value, store=store.name, locator=locator, message_id=message_id)
    return Envelope.for_payload(value, store=store.name, locator=locator, message_id=message_id, checksum=checksum)


def opened(store: MemoryStore, envelope: Envelope, settings: StreamSettings = SETTINGS) -> PayloadStream:
    value = Resolver({store.name: store}, streams=settings).resolve((TOPIC, 0, 7), envelope, topic=TOPIC)
    assert isinstance(value, PayloadStream)
    return value


def drain(stream: io.RawIOBase, step: int) -> bytes:
    out = bytearray()
    while part := stream.read(step):
        out += part
    return bytes(out)


def sealed_envelope(size: int, log2: int = 12) -> Envelope:
    encryption = Encryption("k1", b"w", bytes(12), log2)
    return Envelope("mem", "t/x", sealed_size(size, log2), bytes(32), uuid.uuid4(), encryption=encryption)


def test_the_threshold_is_off_by_default_and_inclusive() -> None:
    envelope = Envelope("mem", "t/x", 1000, bytes(32), uuid.uuid4())
    assert not StreamSettings().streams(envelope)
    assert streams(envelope, 1000) and streams(envelope, 1) and not streams(envelope, 1001)


def test_a_sealed_payload_is_judged_by_its_plaintext_and_read_in_whole_segments() -> None:
    envelope = sealed_envelope(10_000)  # 4 KiB segments: three
    assert streams(envelope, 10_000) and not streams(envelope, 10_001)
    assert range_step(envelope, 10_000) == 2 * (4096 + TAG_BYTES)
    assert range_step(envelope, 100) == 4096 + TAG_BYTES  # never less than a segment
    assert sealed_start(envelope, 0) == (0, 0, 0)
    assert sealed_start(envelope, 4096 + 5) == (1, 4096 + TAG_BYTES, 5)


@pytest.mark.parametrize("checksum", [None, CHECKSUM_SHA256])
def test_a_stream_reads_what_was_stored_in_any_read_size_and_seeks(checksum: int | None) -> None:
    store = RangingMemoryStore()
    value = payload(SIZE, 1)
    stream = opened(store, envelope_for(store, value, checksum))
    assert stream.size == SIZE and stream.seekable() and stream.readable()
    assert "get" not in store.calls  # nothing read whole
    assert drain(stream, 999) == value and stream.read(5) == b""
    assert stream.seek(4096 * 3 + 1) == 4096 * 3 + 1 and stream.read(5000) == value[4096 * 3 + 1 : 4096 * 3 + 5001]
    assert stream.seek(-10, io.SEEK_END) == SIZE - 10 and stream.readall() == value[-10:]
    stream.seek(0)
    buffer = bytearray(7777)
    assert stream.readinto(buffer) == 7777 and bytes(buffer) == value[:7777]


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:],  # tampered
        lambda b: b[:-1],  # truncated by a byte
        lambda b: b[: 4096 * 5],  # truncated at a range's edge
        lambda b: b + b"\0",  # extended
    ],
    ids=["tampered", "truncated", "truncated-at-a-range", "extended"],
)
def test_a_damaged_payload_raises_the_typed_error_before_the_stream_reports_its_end(damage: object) -> None:
    store = RangingMemoryStore()
    value = payload(SIZE, 2)
    envelope = envelope_for(store, value)
    store.payloads[envelope.locator] = damage(value)  # type: ignore[operator]
    stream = opened(store, envelope)
    seen = 0
    with pytest.raises(PayloadStreamIntegrityError) as caught:
        while part := stream.read(1000):
            seen += len(part)
    assert seen < SIZE
    assert isinstance(caught.value, PayloadIntegrityError)
    assert (caught.value.topic, caught.value.partition, caught.value.offset) == (TOPIC, 0, 7)
    with pytest.raises(PayloadStreamIntegrityError):
        stream.read(1)


def test_a_read_after_a_seek_checks_the_size_only_and_a_read_from_zero_checks_again() -> None:
    store = RangingMemoryStore()
    value = payload(SIZE, 3)
    envelope = envelope_for(store, value)
    store.payloads[envelope.locator] = b"X" + value[1:]  # the first byte tampered
    stream = opened(store, envelope)
    stream.seek(10)
    assert drain(stream, 4000) == value[10:]  # unverified: the digest covers what was skipped
    stream.seek(0)
    with pytest.raises(PayloadStreamIntegrityError):
        drain(stream, 4000)


def test_a_store_without_ranged_reads_is_read_whole_once_and_checked_first() -> None:
    store = MemoryStore()
    value = payload(SIZE, 4)
    stream = opened(store, envelope_for(store, value))
    assert drain(stream, 3333) == value and store.calls.count("put") == 1
    envelope = envelope_for(store, value)
    store.payloads[envelope.locator] = value[:-1]
    with pytest.raises(PayloadIntegrityError):
        opened(store, envelope)


def test_below_the_threshold_a_payload_is_bytes_and_a_streamed_one_is_never_fetched_ahead() -> None:
    store = RangingMemoryStore()
    small, large = payload(THRESHOLD - 1, 5), payload(SIZE, 6)
    resolver = Resolver({store.name: store}, streams=SETTINGS)
    small_envelope, large_envelope = envelope_for(store, small), envelope_for(store, large)
    assert resolver.prefetch("a", large_envelope) and resolver.metrics()["resolver.ahead.bytes"] == 0
    assert resolver.resolve("b", small_envelope, topic=TOPIC) == small
    assert "get_range" not in store.calls
    assert isinstance(resolver.resolve("a", large_envelope, topic=TOPIC), PayloadStream)
    assert resolver.metrics()["resolver.streams"] == 1


def test_closing_the_resolver_invalidates_its_open_streams() -> None:
    store = RangingMemoryStore()
    value = payload(SIZE, 7)
    resolver = Resolver({store.name: store}, streams=SETTINGS)
    stream = resolver.resolve((TOPIC, 0, 9), envelope_for(store, value), topic=TOPIC)
    assert isinstance(stream, PayloadStream) and stream.read(10) == value[:10]
    resolver.close()
    with pytest.raises(PayloadStreamClosedError) as caught:
        stream.read(10)
    assert caught.value.offset == 9 and isinstance(caught.value, ValueError)


def compressed_envelope(store: MemoryStore, value: bytes, codec: str, stored: bytes | None = None) -> Envelope:
    from gateway.protocol.envelope import digest_of
    from gateway.protocol.payload_encoding import encode_payload

    message_id = uuid.uuid4()
    frame = bytes(encode_payload(value, codec)) if stored is None else stored
    locator = store.put(TOPIC, message_id, frame)
    digest = digest_of(CHECKSUM_SHA256, value)
    return Envelope(store.name, locator, len(value), digest, message_id, compression=codec)


@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_a_compressed_payload_is_decoded_as_its_ranges_arrive_and_seeks_by_decoding_again(codec: str) -> None:
    store = RangingMemoryStore()
    value = payload(SIZE, 8)
    stream = opened(store, compressed_envelope(store, value, codec))
    assert stream.size == SIZE and stream.seekable()
    assert drain(stream, 4321) == value
    assert store.calls.count("get_range") >= 2
    stream.seek(SIZE // 2)
    assert stream.read(10) == value[SIZE // 2 : SIZE // 2 + 10]
    stream.seek(SIZE - 3)
    assert drain(stream, 100) == value[-3:]


def test_an_lz4_payload_is_still_read_whole_once_and_served_from_memory() -> None:
    store = RangingMemoryStore()
    value = payload(SIZE, 8)
    stream = opened(store, compressed_envelope(store, value, "lz4"))
    assert drain(stream, 4321) == value
    assert "get_range" not in store.calls


@pytest.mark.parametrize("codec", ["zstd", "gzip"])
@pytest.mark.parametrize("damage", ["digest", "truncated", "appended", "oversized"])
def test_a_damaged_compressed_payload_raises_no_later_than_its_end(codec: str, damage: str) -> None:
    from gateway.protocol.payload_encoding import encode_payload

    store = RangingMemoryStore()
    value = payload(SIZE, 9)
    frame = bytes(encode_payload(value, codec))
    if damage == "digest":  # a frame that decodes well, but to other bytes than the envelope's
        envelope = compressed_envelope(store, value, codec, bytes(encode_payload(payload(SIZE, 10), codec)))
    elif damage == "truncated":
        envelope = compressed_envelope(store, value, codec, frame[:-5])
    elif damage == "appended":
        envelope = compressed_envelope(store, value, codec, frame + b"\x07")
    else:  # more stored bytes than the codec makes of the declared size
        envelope = compressed_envelope(store, value, codec, frame + bytes(2 * SIZE))
    stream = opened(store, envelope)
    out = bytearray()
    with pytest.raises(PayloadStreamIntegrityError) as caught:
        while part := stream.read(1000):
            out += part
    assert len(out) < SIZE and caught.value.offset == 7
    with pytest.raises(PayloadStreamIntegrityError):  # and every read after
        stream.read(1)


def test_a_clear_stream_refills_read_ahead_plus_one_buffers() -> None:
    from gateway.streams._ranges import RangeFetcher

    value = payload(SIZE, 11)
    buffers: set[int] = set()

    def read_into(at: int, view: memoryview) -> int:
        buffers.add(id(view.obj))
        got = len(value[at : at + len(view)])
        view[:got] = value[at : at + got]
        return got

    def fail(message: str) -> PayloadStreamIntegrityError:
        return PayloadStreamIntegrityError(message)

    fetcher = RangeFetcher(read_into, SIZE, 4096, 2, fail)
    assert b"".join(bytes(view) for view in fetcher.ranges(0)) == value
    fetcher.close()
    assert len(buffers) == 3


def test_a_zstd_payload_is_read_whole_where_the_streaming_decoder_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gateway.core.streams.decoding as decoding

    monkeypatch.setattr(decoding, "_zstd_module", None)  # as without backports.zstd (Python < 3.14)
    assert not decoding.decodes_as_stream("zstd") and decoding.decodes_as_stream("gzip")
    store = RangingMemoryStore()
    value = payload(SIZE, 12)
    stream = opened(store, compressed_envelope(store, value, "zstd"))
    assert drain(stream, 4321) == value
    assert "get_range" not in store.calls
