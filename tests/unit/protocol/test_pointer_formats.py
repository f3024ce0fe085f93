"""``reference.format``: the pointer records bakdata's and AWS's readers follow, and what they cannot carry."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from gateway.consumer.reference_rules import DEFAULT_RULES, ReferenceRules, parse_topic_renames
from gateway.errors import ConfigurationError, EnvelopePayloadError, LocatorTopicError, ReferenceFormatError
from gateway.protocol.envelope import envelope_header
from gateway.protocol.peers import BAKDATA_VALUE_HEADER, PeerFormat, PeerPointer, PeerReader
from gateway.protocol.peers.pointer_formats import (
    AWS_POINTER_CLASS,
    ReferenceFormat,
    check_payload,
    check_producer,
    check_route,
    is_pointer_message_id,
    pointed_locator,
    pointer_message_id,
    pointer_record,
    written_for_pointer,
)
from gateway.testing import MemoryStore

BAKDATA, AWS = ReferenceFormat.BAKDATA, ReferenceFormat.AWS
BOTH = PeerReader(frozenset({PeerFormat.BAKDATA, PeerFormat.AWS}))


class _Store(MemoryStore):
    """A store declaring the scheme and bucket ``check_producer`` reads (None: a store that serves no pointers)."""

    def __init__(self, scheme: str | None, bucket: str = "bucket-a") -> None:
        super().__init__()
        self.scheme = scheme
        self.bucket = bucket


def test_ids_written_for_a_pointer_are_tagged_and_a_random_id_never_is() -> None:
    ids = [pointer_message_id(uuid.uuid4()) for _ in range(200)]
    assert all(is_pointer_message_id(i) and i.version == 8 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 200  # the rest stays random
    assert not any(is_pointer_message_id(uuid.uuid4()) for _ in range(2000))
    assert written_for_pointer(f"gw/orders/{ids[0]}") and not written_for_pointer(f"gw/orders/{uuid.uuid4()}")
    assert not written_for_pointer("gw/orders/not-a-uuid")


@pytest.mark.parametrize("scheme", ["s3", "gs", "abs"])
def test_a_bakdata_record_is_the_locator_with_the_backed_flag_and_our_reader_reads_it_back(scheme: str) -> None:
    locator = f"{scheme}://bucket-a/gw/orders/{pointer_message_id(uuid.uuid4())}"
    record = pointer_record(BAKDATA, locator)
    assert record.value == locator.encode()
    assert record.headers == [(BAKDATA_VALUE_HEADER, b"\x01")]
    read = BOTH.read(b"k", record.value, record.headers)
    assert read is not None and read.format is PeerFormat.BAKDATA and read.key == b"k"
    assert isinstance(read.value, PeerPointer) and read.value.uri == locator and read.value.scheme == scheme
    assert read.headers == []  # bakdata's flag is not handed to the application
    assert pointed_locator(record.value, record.headers) == locator


def test_an_aws_record_is_the_pointer_json_payloadoffloading_writes() -> None:
    key = f"gw/orders/{pointer_message_id(uuid.uuid4())}"
    record = pointer_record(AWS, f"s3://bucket-a/{key}")
    # PayloadS3Pointer.toJson: Jackson's default typing, a two-element array, no spaces
    assert record.value == f'["{AWS_POINTER_CLASS}",{{"s3BucketName":"bucket-a","s3Key":"{key}"}}]'.encode()
    assert json.loads(record.value) == [AWS_POINTER_CLASS, {"s3BucketName": "bucket-a", "s3Key": key}]
    assert record.headers == []
    read = BOTH.read(None, record.value, None)
    assert read is not None and isinstance(read.value, PeerPointer) and read.value.key == key
    assert pointed_locator(record.value, None) == f"s3://bucket-a/{key}"


def test_only_pointer_records_name_a_locator() -> None:
    assert pointed_locator(b"plain value", None) is None
    assert pointed_locator(None, None) is None
    assert pointed_locator(b"\x00inline", [(BAKDATA_VALUE_HEADER, b"\x00")]) is None
    assert pointed_locator(b"s3://bucket-a/k", [(BAKDATA_VALUE_HEADER, b"\x07")]) is None  # garbled: not counted
    assert pointed_locator(b"GWRF....", [envelope_header()]) is None
    large = b"s3://bucket-a/k" + b"x" * 20_000  # a scan reads every record: a large value is never parsed
    assert pointed_locator(large, [(BAKDATA_VALUE_HEADER, b"\x01")]) is None
    with pytest.raises(ReferenceFormatError, match="envelopes"):
        pointer_record(ReferenceFormat.GATEWAY, "s3://bucket-a/k")
    with pytest.raises(ReferenceFormatError, match="not <scheme>://<bucket>/<key>"):
        pointer_record(BAKDATA, "orders/123")


def test_combinations_the_formats_cannot_carry_are_refused_naming_the_setting() -> None:
    s3 = {"s3": _Store("s3")}
    check_producer(
        ReferenceFormat.GATEWAY, stores={"r": _Store(None)}, encrypted=True, compression="zstd", wrap_small=True
    )
    check_producer(BAKDATA, stores={"s3": _Store("s3"), "g": _Store("gs"), "a": _Store("abs")}, **_none())
    check_producer(AWS, stores=s3, **_none())
    refusals: list[tuple[ReferenceFormat, dict[str, Any], dict[str, Any], str]] = [
        (BAKDATA, s3, {"encrypted": True}, "reference.format=bakdata with reference.encryption"),
        (AWS, s3, {"compression": "zstd"}, "reference.format=aws with reference.compression=zstd"),
        (BAKDATA, s3, {"wrap_small": True}, "segment.wrapping.required"),
        (BAKDATA, {"redis": _Store(None)}, {}, "store 'redis' .* is not one its reader fetches from"),
        (AWS, {"g": _Store("gs")}, {}, r"store 'g' .*it reads s3 objects: S3Store\)"),
        (BAKDATA, {"g": _Store("gs", "my_bucket")}, {}, "java.net.URI reads no host"),
    ]
    for fmt, stores, flags, message in refusals:
        with pytest.raises(ReferenceFormatError, match=message) as raised:
            check_producer(fmt, stores=stores, **{**_none(), **flags})
        assert isinstance(raised.value, ConfigurationError)


def _none() -> dict[str, Any]:
    return {"encrypted": False, "compression": None, "wrap_small": False}


def test_aws_refuses_a_payload_its_reader_would_alter_and_takes_any_utf8() -> None:
    step = 1 << 20
    snowmen = ("\u2603".encode() * (step // 3 + 5))[: step + 2]  # a character split across the 1 MiB step
    snowmen = snowmen[: len(snowmen) - len(snowmen) % 3]
    for text in (b"", b"plain ascii", "\u00e9t\u00e9".encode(), snowmen, bytearray(b"x" * (2 * step + 1))):
        check_payload(AWS, text)
    for bad in (b"\xff", b"ok" * 1000 + b"\xc3", bytes(range(256))):
        with pytest.raises(ReferenceFormatError, match="not UTF-8 text"):
            check_payload(AWS, memoryview(bad))
    check_payload(BAKDATA, bytes(range(256)))  # bakdata reads bytes


def test_a_forced_chunked_route_is_refused_under_a_pointer_format() -> None:
    check_route(ReferenceFormat.GATEWAY, True)
    check_route(BAKDATA, False)
    with pytest.raises(ReferenceFormatError, match="route=chunked writes LinkedIn segments"):
        check_route(AWS, True)


def test_our_consumer_serves_an_object_written_for_a_pointer_only_in_its_topic_or_a_mirror() -> None:
    """The binding holds for pointer objects; an envelope's object is still never served through a pointer."""
    ours = PeerPointer(PeerFormat.BAKDATA, "bucket-a", f"gw/orders/{pointer_message_id(uuid.uuid4())}")
    DEFAULT_RULES.check_pointer(ours, "orders", "orders")
    mirrored = ReferenceRules(renames=parse_topic_renames("source.${topic}"))
    mirrored.check_pointer(ours, "source.orders", "orders")
    with pytest.raises(LocatorTopicError, match="a payload this library wrote for topic 'orders'"):
        DEFAULT_RULES.check_pointer(ours, "payments", "orders")
    envelopes = PeerPointer(PeerFormat.BAKDATA, "bucket-a", f"gw/orders/{uuid.uuid4()}")
    with pytest.raises(EnvelopePayloadError, match="read through its envelope only"):
        DEFAULT_RULES.check_pointer(envelopes, "orders", "orders")


@pytest.mark.parametrize("fmt", [BAKDATA, AWS])
def test_gc_and_the_reconcile_scan_count_a_pointer_record_as_its_objects_reference(fmt: ReferenceFormat) -> None:
    """Else gc would call a pending pointer object absent, and reconcile an orphan, and delete it while live."""
    from gateway.gc.verdicts import EnvelopeMatcher, Pending
    from gateway.protocol.records import Record
    from gateway.spark.reading import _envelope_row

    mid = pointer_message_id(uuid.uuid4())
    locator = f"s3://bucket-a/gw/orders/{mid}"
    record = pointer_record(fmt, locator)
    elsewhere = pointer_message_id(uuid.uuid4())
    wanted, other = (
        Pending("s3", locator, "orders", mid),
        Pending("s3", f"s3://bucket-a/gw/orders/{elsewhere}", "orders", elsewhere),
    )
    matcher = EnvelopeMatcher([wanted, other])
    matcher.observe(record.value, record.headers, 0, 7)
    matcher.observe(b"a plain value", None, 0, 8)
    assert matcher.found == {wanted} and matcher.sightings == {wanted: {(0, 7)}} and matcher.envelopes == 1
    row = _envelope_row("orders", 0, Record(7, None, record.value, record.headers))
    assert row is not None and row[4] is None and row[5] == locator and row[7] == str(mid) and row[8] is None
    assert _envelope_row("orders", 0, Record(8, None, b"a plain value", None)) is None
