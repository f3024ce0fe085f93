"""Reading what bakdata's serde, kaf-s3 and AWS's payload offloading wrote (pure: no store, no broker).

The records here are built from each format's description; tests/integration/test_peer_formats.py
reads records the peers' own code wrote.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.consumer import peer_payloads
from gateway.consumer.reference_rules import DEFAULT_RULES, ReferenceRules, object_written_for, parse_topic_renames
from gateway.errors import (
    ConfigurationError,
    EnvelopePayloadError,
    LocatorError,
    LocatorTopicError,
    PayloadIntegrityError,
    PeerFormatError,
)
from gateway.protocol.compression import XERIAL_MAGIC, decompress
from gateway.protocol.peers import (
    BAKDATA_KEY_HEADER,
    BAKDATA_VALUE_HEADER,
    PeerFormat,
    PeerPointer,
    PeerReader,
    PeerRecord,
    parse_peer_formats,
)
from gateway.testing import MemoryStore

ALL = PeerReader(frozenset(PeerFormat))
AWS_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"


def test_formats_parse_and_unknown_is_named() -> None:
    assert parse_peer_formats(" bakdata , KAFS3,aws,") == frozenset(PeerFormat)
    assert parse_peer_formats(None) == frozenset()
    with pytest.raises(ConfigurationError, match="'kafka-s3'"):
        parse_peer_formats("bakdata,kafka-s3")


@given(st.binary(max_size=200))
def test_bakdata_byte_flag_inline_is_the_rest_of_the_value(data: bytes) -> None:
    found = PeerReader(frozenset({PeerFormat.BAKDATA})).read(b"k", b"\x00" + data, None)
    assert found is not None and found.value == data and found.key == b"k"


def test_bakdata_byte_flag_backed_and_keys() -> None:
    reader = PeerReader(frozenset({PeerFormat.BAKDATA}), bakdata_keys=True)
    found = reader.read(b"\x00key", b"\x01s3://bucket-a/base/t/values/abc", [("h", b"1")])
    assert found is not None
    assert found.key == b"key"
    assert found.value == PeerPointer(PeerFormat.BAKDATA, "bucket-a", "base/t/values/abc")
    assert found.headers == [("h", b"1")]
    with pytest.raises(PeerFormatError, match="key starts with 7"):
        reader.read(b"\x07key", b"\x00v", None)


def test_bakdata_headers_protocol_strips_its_headers_and_reads_compression() -> None:
    headers = [
        ("a", b"x"),
        (BAKDATA_VALUE_HEADER, b"\x01"),
        ("__large.message.backed.compression", b"\x04"),
        (BAKDATA_KEY_HEADER, b"\x00"),
    ]
    found = ALL.read(b"plain-key", b"s3://bucket-a/t/values/1", headers)
    assert found is not None and found.format is PeerFormat.BAKDATA
    assert found.key == b"plain-key" and found.headers == [("a", b"x")]
    assert isinstance(found.value, PeerPointer) and found.value.compression == "zstd"
    # the doubled-dot name older releases wrote
    old = [(BAKDATA_VALUE_HEADER, b"\x01"), ("__large.message.backed..compression", b"\x01")]
    pointer = ALL.read(None, b"s3://bucket-a/k", old)
    assert pointer is not None and isinstance(pointer.value, PeerPointer) and pointer.value.compression == "gzip"


@pytest.mark.parametrize(
    ("value", "headers", "match"),
    [
        (b"http://container/k", [(BAKDATA_VALUE_HEADER, b"\x01")], "only s3://, gs:// and abs://"),
        (b"s3://B_ad/k", [(BAKDATA_VALUE_HEADER, b"\x01")], "invalid bucket"),
        (b"s3://bucket-a/k", [(BAKDATA_VALUE_HEADER, b"\x02")], "one byte 0 or 1"),
        (b"s3://bucket-a/k", [(BAKDATA_VALUE_HEADER, b"\x01"), ("__large.message.backed.compression", b"\x09")], "id"),
        (b"\xff\xfe", [(BAKDATA_VALUE_HEADER, b"\x01")], "UTF-8"),
        (b"s3://bucket-a/a\nb", [(BAKDATA_VALUE_HEADER, b"\x01")], "invalid object key"),
    ],
)
def test_bakdata_broken_records_are_typed_errors(value: bytes, headers: list[tuple[str, bytes]], match: str) -> None:
    with pytest.raises(PeerFormatError, match=match):
        ALL.read(None, value, headers)


def test_kafs3_reference_as_kafs3_writes_it() -> None:
    digest = hashlib.sha256(b"payload").hexdigest()
    obj = {"s3_bucket": "bucket-a", "s3_key": "p/1", "etag": '"abc"', "sha256": digest, "compression": "gzip"}
    found = ALL.read(b"k", json.dumps(obj).encode(), None)
    assert found is not None and found.format is PeerFormat.KAFS3
    assert found.value == PeerPointer(PeerFormat.KAFS3, "bucket-a", "p/1", bytes.fromhex(digest), "abc", "gzip")


def test_aws_pointer_both_class_names() -> None:
    for name in (AWS_CLASS, "com.amazon.sqs.javamessaging.MessageS3Pointer"):
        found = ALL.read(None, json.dumps([name, {"s3BucketName": "bucket-a", "s3Key": "u-1"}]).encode(), None)
        assert found is not None and found.value == PeerPointer(PeerFormat.AWS, "bucket-a", "u-1")
    with pytest.raises(PeerFormatError, match="s3Key"):
        ALL.read(None, json.dumps([AWS_CLASS, {"s3BucketName": "bucket-a"}]).encode(), None)


@pytest.mark.parametrize(
    "value",
    [
        b'{"s3_bucket": "b"}',  # one of the two keys: an ordinary JSON object, as kaf-s3 reads it
        b'{"not json',
        b'["other", {"s3BucketName": "bucket-a", "s3Key": "k"}]',
        b"[1, 2, 3]",
        b"hello",
        b"\x02rest",
        b"",
    ],
)
def test_ordinary_values_are_not_peers(value: bytes) -> None:
    assert ALL.read(None, value, None) is None


def test_a_format_that_is_off_is_not_read() -> None:
    reader = PeerReader(frozenset({PeerFormat.AWS}))
    assert reader.read(None, b"\x01s3://bucket-a/k", None) is None
    assert reader.read(None, b'{"s3_bucket": "bucket-a", "s3_key": "k"}', None) is None


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy"])
@given(data=st.binary(max_size=5000))
def test_decompress_round_trips(codec: str, data: bytes) -> None:
    if codec == "gzip":
        packed = gzip.compress(data)
    elif codec == "snappy":  # xerial's framing, as Kafka's snappy codec writes it
        block = bytes(cramjam.snappy.compress_raw(data))
        packed = XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">I", len(block)) + block
    else:
        packed = bytes(getattr(cramjam, codec).compress(data))
    assert decompress(packed, codec, len(data)) == data
    # bakdata stores Kafka's whole output buffer: the stream, then zeros up to the input's length
    assert decompress(packed + bytes(len(data) + 7), codec, len(data)) == data


def test_bytes_after_a_stream_that_are_not_padding_are_refused() -> None:
    for codec, packed in (("gzip", gzip.compress(b"x" * 100)), ("zstd", bytes(cramjam.zstd.compress(b"x" * 100)))):
        with pytest.raises(PayloadIntegrityError, match="not padding"):
            decompress(packed + b"\x00\x01", codec, 1000)


def test_decompress_bounds_the_output() -> None:
    bomb = gzip.compress(b"\x00" * 1_000_000)
    with pytest.raises(PayloadIntegrityError, match="beyond the limit of 1000"):
        decompress(bomb, "gzip", 1000)
    with pytest.raises(PayloadIntegrityError, match="truncated"):
        decompress(bomb[:-20], "gzip", 10_000_000)
    with pytest.raises(PayloadIntegrityError, match="zstd"):
        decompress(b"garbage", "zstd", 1000)


class _Objects(MemoryStore):
    """An object store as the resolver sees one (its declared peer capabilities); counts requests to prove
    confinement makes none."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        objects: dict[str, tuple[bytes, str | None]],
        scheme: str = "s3",
        metadata: dict[str, dict[str, str]] | None = None,
    ) -> None:
        super().__init__(name="peer")
        self.bucket, self.prefix, self.objects, self.gets = bucket, prefix, objects, 0
        self.scheme = scheme
        self.metadata = metadata or {}

    def holds_object(self, bucket: str, key: str) -> bool:
        return bucket == self.bucket and key.startswith(self.prefix)

    def get_object(
        self, key: str, max_bytes: int, admit: Callable[[Mapping[str, str]], None] | None = None
    ) -> tuple[bytes, str | None]:
        self.gets += 1
        if admit is not None:
            admit(self.metadata.get(key, {}))
        return self.objects[key]


def fetch_pointer(stores: Mapping[str, object], pointer: PeerPointer, max_bytes: int, topic: str = "t") -> bytes:
    return peer_payloads.fetch_pointer(stores, pointer, max_bytes, topic=topic, rules=DEFAULT_RULES)


def resolve_record(stores: Mapping[str, object], record: PeerRecord, max_bytes: int) -> tuple[Any, Any]:
    return peer_payloads.resolve_record(stores, record, max_bytes, topic="t", rules=DEFAULT_RULES)


def test_pointers_outside_every_store_make_no_request() -> None:
    store = _Objects("bucket-a", "allowed/", {"allowed/x": (b"data", "e")})
    stores = {"peer": store}
    assert fetch_pointer(stores, PeerPointer(PeerFormat.AWS, "bucket-a", "allowed/x"), 100) == b"data"
    for outside in (PeerPointer(PeerFormat.AWS, "bucket-b", "allowed/x"), PeerPointer(PeerFormat.AWS, "bucket-a", "x")):
        with pytest.raises(LocatorError, match="outside every configured store"):
            fetch_pointer(stores, outside, 100)
    # a record with a good key pointer and a bad value pointer fetches nothing
    found = ALL.read(
        b"s3://bucket-a/allowed/x",
        b"s3://bucket-b/other",
        [(BAKDATA_KEY_HEADER, b"\x01"), (BAKDATA_VALUE_HEADER, b"\x01")],
    )
    assert found is not None
    with pytest.raises(LocatorError):
        resolve_record(stores, found, 100)
    assert store.gets == 1


def test_kafs3_checksums_are_verified() -> None:
    payload = b"the payload"
    store = _Objects("bucket-a", "", {"k": (gzip.compress(payload), "etag-1")})
    good = PeerPointer(PeerFormat.KAFS3, "bucket-a", "k", hashlib.sha256(payload).digest(), "etag-1", "gzip")
    assert fetch_pointer({"p": store}, good, 1000) == payload
    with pytest.raises(PayloadIntegrityError, match="SHA-256"):
        fetch_pointer({"p": store}, PeerPointer(PeerFormat.KAFS3, "bucket-a", "k", b"\x00" * 32, None, "gzip"), 1000)
    with pytest.raises(PayloadIntegrityError, match="replaced"):
        fetch_pointer({"p": store}, PeerPointer(PeerFormat.KAFS3, "bucket-a", "k", None, "etag-0", "gzip"), 1000)


def test_the_pipeline_hands_peer_records_out_to_resolve_and_reports_broken_ones() -> None:
    from gateway.core.pipeline import ConsumerPipeline, PlainMessage, ReferenceToResolve
    from gateway.protocol.records import Record

    aws = json.dumps([AWS_CLASS, {"s3BucketName": "bucket-a", "s3Key": "k"}]).encode()
    broken = json.dumps([AWS_CLASS, {"s3BucketName": "bucket-a"}]).encode()
    tp = ("t", 0)
    for peers in (None, PeerReader(frozenset({PeerFormat.AWS}))):
        pipeline = ConsumerPipeline(peers=peers)
        pipeline.commits.load_commit(tp, None, None)
        events = [
            pipeline.feed(tp, Record(i, b"k", value, None))[-1] for i, value in enumerate((b"plain", aws, broken))
        ]
        if peers is None:
            assert all(isinstance(e, PlainMessage) for e in events)
            continue
        plain, peer, bad = events
        assert isinstance(plain, PlainMessage) and plain.value == b"plain"
        assert isinstance(peer, ReferenceToResolve) and peer.peer is not None and peer.safe_offset == 2
        assert isinstance(bad, ReferenceToResolve) and bad.peer is None and "PeerFormatError" in (bad.error or "")


def test_bakdata_gs_and_abs_pointers_are_served_only_by_a_store_of_their_scheme() -> None:
    """A gs:// or abs:// pointer names a GCS bucket or an Azure container: an S3 store of the same bucket name
    and prefix must not serve it, and the error names the store to configure."""
    gcs = _Objects("bucket-a", "allowed/", {"allowed/x": (b"from gcs", None)}, scheme="gs")
    s3 = _Objects("bucket-a", "allowed/", {"allowed/x": (b"from s3", None)})
    for uri, want in ((b"gs://bucket-a/allowed/x", b"from gcs"), (b"s3://bucket-a/allowed/x", b"from s3")):
        found = ALL.read(None, uri, [(BAKDATA_VALUE_HEADER, b"\x01")])
        assert found is not None and isinstance(found.value, PeerPointer)
        assert resolve_record({"s3": s3, "gcs": gcs}, found, 100) == (None, want)
    found = ALL.read(None, b"abs://bucket-a/allowed/x", [(BAKDATA_VALUE_HEADER, b"\x01")])
    assert found is not None and found.value == PeerPointer(PeerFormat.BAKDATA, "bucket-a", "allowed/x", scheme="abs")
    with pytest.raises(LocatorError, match="an AzureBlobStore for that bucket"):
        resolve_record({"s3": s3, "gcs": gcs}, found, 100)
    assert s3.gets == 1 and gcs.gets == 1


def test_an_object_is_ours_only_when_its_metadata_and_key_agree() -> None:
    """Our stores write topic and message id into the metadata and name the object ``<prefix><topic>/<id>``;
    a peer's object whose key merely looks like ours (kaf-s3's ``<prefix>/<uuid4>``) stays a peer's."""
    mid = str(uuid.uuid4())
    ours = {"sha256": "00", "size": "3", "message-id": mid, "topic": "secret-a"}
    assert object_written_for(f"gw/secret-a/{mid}", ours) == "secret-a"
    assert object_written_for(f"secret-a/{mid}", ours) == "secret-a"
    assert object_written_for(f"other/secret-a/{mid}", {"Topic": "secret-a", "message_id": mid}) == "secret-a"  # Azure
    assert object_written_for(f"kafs3/{mid}", {}) is None
    assert object_written_for(f"kafs3/{mid}", None) is None
    assert object_written_for(f"gw/secret-a/{mid}", {"topic": "secret-a"}) is None
    assert object_written_for(f"gw/secret-a/{uuid.uuid4()}", ours) is None  # metadata of another object
    assert object_written_for(f"gw/xsecret-a/{mid}", ours) is None


def test_a_pointer_to_an_object_of_ours_is_refused_in_every_topic_and_typed_by_the_binding() -> None:
    """Another topic: ``LocatorTopicError``, as the object's envelope copied there gets; its own topic or a
    mirror the renames name: ``EnvelopePayloadError`` (only the envelope says whether it is sealed)."""
    pointer = PeerPointer(PeerFormat.AWS, "bucket-a", "gw/secret-a/x")
    DEFAULT_RULES.check_pointer(pointer, "other-b", None)  # a peer's own object: any topic
    with pytest.raises(LocatorTopicError, match=r"'other-b' names 's3://bucket-a/gw/secret-a/x'.*for topic 'secret-a'"):
        DEFAULT_RULES.check_pointer(pointer, "other-b", "secret-a")
    mirrored = ReferenceRules(renames=parse_topic_renames("source.${topic}"))
    for rules, topic in ((DEFAULT_RULES, "secret-a"), (mirrored, "source.secret-a")):
        with pytest.raises(EnvelopePayloadError, match="read through its envelope only") as raised:
            rules.check_pointer(pointer, topic, "secret-a")
        assert not isinstance(raised.value, LocatorTopicError)


def test_the_binding_is_judged_on_the_metadata_before_the_body_is_taken() -> None:
    mid = str(uuid.uuid4())
    key = f"gw/secret-a/{mid}"
    store = _Objects(
        "bucket-a", "", {key: (b"sealed bytes", None)}, metadata={key: {"topic": "secret-a", "message-id": mid}}
    )
    found = ALL.read(None, f"s3://bucket-a/{key}".encode(), [(BAKDATA_VALUE_HEADER, b"\x01")])
    assert found is not None
    with pytest.raises(LocatorTopicError):
        peer_payloads.resolve_record({"p": store}, found, 100, topic="other-b", rules=DEFAULT_RULES)
    with pytest.raises(EnvelopePayloadError):
        peer_payloads.resolve_record({"p": store}, found, 100, topic="secret-a", rules=DEFAULT_RULES)
