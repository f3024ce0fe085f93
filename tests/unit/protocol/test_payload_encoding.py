"""reference.compression: what the store keeps, what the envelope says, and bounded decoding (pure)."""

from __future__ import annotations

import os
import uuid

import pytest

from gateway.errors import ConfigurationError, EnvelopeFormatError, PayloadIntegrityError
from gateway.protocol.compression import PROBE_SAMPLE_BYTES, PROBE_SAMPLES, pays_off
from gateway.protocol.envelope import Envelope, decode_envelope, encode_envelope
from gateway.protocol.payload_encoding import (
    COMPRESSION_SETTINGS,
    decode_payload,
    encode_payload,
    parse_compression,
    stored_bound,
)

JSONISH = b"".join(
    b'{"id": %d, "name": "customer-%d", "tags": ["a", "b"], "ok": true}\n' % (i, i) for i in range(20_000)
)


@pytest.mark.parametrize("codec", ["zstd", "lz4", "gzip"])
def test_each_codec_round_trips_and_shrinks_text(codec: str) -> None:
    stored = encode_payload(JSONISH, codec)
    assert len(stored) < len(JSONISH) / 5
    assert decode_payload(bytes(stored), codec, len(JSONISH)) == JSONISH


@pytest.mark.parametrize("codec", ["zstd", "lz4", "gzip"])
def test_random_bytes_stay_within_the_bound_the_reader_allows(codec: str) -> None:
    data = os.urandom(1_000_000)
    stored = encode_payload(data, codec)
    assert len(data) < len(stored) <= stored_bound(codec, len(data))
    assert decode_payload(bytes(stored), codec, len(data)) == data


@pytest.mark.parametrize("codec", ["zstd", "lz4", "gzip"])
def test_compression_pays_off_for_text_not_for_random_bytes_judged_on_samples(codec: str) -> None:
    assert pays_off(JSONISH, codec)
    assert not pays_off(os.urandom(1_000_000), codec)
    assert pays_off(os.urandom(PROBE_SAMPLES * PROBE_SAMPLE_BYTES - 1), codec)  # too small to sample: compressed
    half = JSONISH[:500_000] + os.urandom(500_000)  # samples from both halves: half of them shrink
    assert pays_off(memoryview(half), codec)


def test_none_stores_the_payload_as_it_is() -> None:
    assert parse_compression(None) is None and parse_compression("none") is None
    view = memoryview(b"abc")
    assert encode_payload(view, None) is view
    assert decode_payload(b"abc", None, 3) == b"abc"


def test_settings_are_checked() -> None:
    assert [parse_compression(s) for s in COMPRESSION_SETTINGS] == [None, "zstd", "lz4", "gzip"]
    assert parse_compression(" ZSTD ") == "zstd"
    with pytest.raises(ConfigurationError, match=r"reference\.compression"):
        parse_compression("snappy")


@pytest.mark.parametrize("codec", ["zstd", "lz4", "gzip"])
def test_a_payload_that_decodes_past_the_envelopes_size_is_refused(codec: str) -> None:
    """A bomb in the store: 64 MiB of zeros behind an envelope of 1000 bytes stops at 1000, typed."""
    bomb = bytes(encode_payload(bytes(64 << 20), codec))
    with pytest.raises(PayloadIntegrityError):
        decode_payload(bomb, codec, 1000)


def test_a_stored_object_larger_than_the_codec_can_make_is_refused_before_decoding() -> None:
    with pytest.raises(PayloadIntegrityError, match="more than zstd makes"):
        decode_payload(bytes(stored_bound("zstd", 10) + 1), "zstd", 10)


@pytest.mark.parametrize("codec", [None, "zstd", "lz4", "gzip"])
def test_the_envelope_says_how_the_payload_is_stored(codec: str | None) -> None:
    env = Envelope.for_payload(JSONISH, store="s3", locator="s3://b/gw/t/x", message_id=uuid.uuid4())
    env = Envelope(env.store, env.locator, env.size, env.digest, env.message_id, env.version, env.checksum, codec)
    raw = encode_envelope(env)
    assert raw[7] == {None: 0, "zstd": 1, "lz4": 2, "gzip": 3}[codec]  # the flags byte; 0 is the old layout
    assert decode_envelope(raw) == env
    with pytest.raises(EnvelopeFormatError):
        Envelope(env.store, env.locator, env.size, env.digest, env.message_id, compression="brotli")
