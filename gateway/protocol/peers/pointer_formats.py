"""Writing reference messages as other libraries' pointer records, so their Java readers follow them.

``reference.format`` (producer): ``gateway`` (the default) writes our envelope; ``bakdata`` and ``aws``
write, for the same stored object, the record bakdata's ``large-message-serde`` or AWS's
``payloadoffloading-common`` reads (:mod:`gateway.protocol.peers` reads both, for our consumer):

* **bakdata**: the value is the object's URI, ``s3://``, ``gs://`` or ``abs://<bucket>/<key>``, with
  its headers protocol's flag ``__large.message.backed.value = 1``. Our object stores' locators are
  already such URIs (``<scheme>://<bucket>/<prefix><topic>/<message id>``): bakdata's reader parses
  them with ``java.net.URI`` (bucket from the host, key from the path), so a bucket must be a valid
  host name (no ``_``) and the key must need no escaping, which our stores' prefixes and topics
  guarantee.
* **aws**: the value is the pointer JSON ``PayloadS3Pointer.toJson`` writes,
  ``["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":...,"s3Key":...}]``;
  S3 only. Its reader returns the object as UTF-8 text, so only UTF-8 payloads survive it.

Neither format can say that bytes are sealed or compressed, so those settings are refused with it.
And since a pointer names an object without saying how it was written, every object written for a
pointer carries that in its name: its message id is a version-8 UUID whose first four bytes are
:data:`POINTER_ID_TAG` (:func:`pointer_message_id`). Our consumer serves an object of ours through
a pointer only when its id says so (:func:`written_for_pointer`), and a gateway-format producer
never hands out such an id (its ids are version 4), so a forged pointer at one of our envelopes'
objects is still refused. Pure: ids are made from random ones the caller draws.
"""

from __future__ import annotations

import codecs
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from gateway.errors import PeerFormatError, ReferenceFormatError
from gateway.protocol.headers import Header, Headers
from gateway.protocol.peers import BAKDATA_VALUE_HEADER, MAX_POINTER_BYTES, PeerFormat, PeerPointer, PeerReader
from gateway.store import Store

FORMAT_KEY = "reference.format"


class ReferenceFormat(str, Enum):
    GATEWAY = "gateway"
    BAKDATA = "bakdata"
    AWS = "aws"

    @property
    def pointer(self) -> bool:
        """Whether reference messages are another library's pointer records rather than our envelope."""
        return self is not ReferenceFormat.GATEWAY


REFERENCE_FORMATS = tuple(f.value for f in ReferenceFormat)
"""``reference.format``'s choices, in the order the docs name them."""

SCHEMES: Mapping[ReferenceFormat, frozenset[str]] = {
    ReferenceFormat.BAKDATA: frozenset({"s3", "gs", "abs"}),
    ReferenceFormat.AWS: frozenset({"s3"}),
}
"""The object stores each format's reader fetches from, by our stores' ``scheme``."""

AWS_POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
POINTER_ID_TAG = b"\x9c\x5e\x7a\x11"
"""The first bytes of every message id written for a pointer (the rest is random, version 8)."""
_UTF8_STEP = 1 << 20


# -- message ids ---------------------------------------------------------------------------------
def pointer_message_id(random: uuid.UUID) -> uuid.UUID:
    """``random`` made into the id of an object written for a pointer: tagged, version 8, RFC variant."""
    raw = bytearray(random.bytes)
    raw[:4] = POINTER_ID_TAG
    raw[6] = 0x80 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return uuid.UUID(bytes=bytes(raw))


def is_pointer_message_id(message_id: uuid.UUID) -> bool:
    return message_id.bytes[:4] == POINTER_ID_TAG and message_id.version == 8


def written_for_pointer(object_key: str) -> bool:
    """Whether the object at ``object_key`` (``.../<message id>``) was written for a pointer record."""
    _, _, last = object_key.rpartition("/")
    try:
        return is_pointer_message_id(uuid.UUID(last))
    except ValueError:
        return False


# -- the records ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PointerRecord:
    """A reference message's value and the headers it goes with, in a foreign format."""

    value: bytes
    headers: Headers


def split_locator(locator: str) -> tuple[str, str, str]:
    """``(scheme, bucket, key)`` of an object store's locator ``<scheme>://<bucket>/<key>``."""
    scheme, sep, rest = locator.partition("://")
    bucket, slash, key = rest.partition("/")
    if not sep or not slash or not bucket or not key:
        raise ReferenceFormatError(f"locator {locator[:200]!r} is not <scheme>://<bucket>/<key>")
    return scheme, bucket, key


def pointer_record(fmt: ReferenceFormat, locator: str) -> PointerRecord:
    """The record ``fmt``'s reader follows to the object at ``locator``."""
    scheme, bucket, key = split_locator(locator)
    if fmt is ReferenceFormat.BAKDATA:
        return PointerRecord(f"{scheme}://{bucket}/{key}".encode(), [(BAKDATA_VALUE_HEADER, b"\x01")])
    if fmt is ReferenceFormat.AWS:
        body = {"s3BucketName": bucket, "s3Key": key}
        return PointerRecord(json.dumps([AWS_POINTER_CLASS, body], separators=(",", ":")).encode(), [])
    raise ReferenceFormatError(f"{fmt.value} writes envelopes, not pointer records")


_OURS = PeerReader(frozenset({PeerFormat.BAKDATA, PeerFormat.AWS}))


def pointed_locator(value: bytes | None, headers: Sequence[Header] | None) -> str | None:
    """The locator a record written in a pointer format names, for ``gc`` and ``reconcile``; else ``None``.

    Any bakdata or AWS pointer counts (a peer's too): they only look for the locators of our own
    objects among them, and counting one too many keeps a payload, never deletes one.
    """
    if not value or len(value) > MAX_POINTER_BYTES:  # a scan reads every record: no large value is parsed
        return None
    try:
        record = _OURS.read(None, value, headers)
    except PeerFormatError:
        return None
    if record is None or not isinstance(record.value, PeerPointer):
        return None
    return record.value.uri


# -- what the formats cannot carry ---------------------------------------------------------------
def check_producer(
    fmt: ReferenceFormat,
    *,
    stores: Mapping[str, Store],
    encrypted: bool,
    compression: str | None,
    wrap_small: bool,
) -> None:
    """:class:`ReferenceFormatError` for a producer whose reference messages ``fmt``'s reader could not read."""
    if not fmt.pointer:
        return
    named = f"{FORMAT_KEY}={fmt.value}"
    if encrypted:
        raise ReferenceFormatError(
            f"{named} with reference.encryption: the pointer record has no room for the wrapped key and"
            " nonce, and the foreign reader would hand out ciphertext; seal with the store's own encryption"
            " (SSE) instead"
        )
    if compression is not None:
        raise ReferenceFormatError(
            f"{named} with reference.compression={compression}: the foreign reader would hand out the"
            " compressed bytes, since the pointer record cannot name our encoding"
        )
    if wrap_small:
        raise ReferenceFormatError(
            f"{named} with li.large.message.segment.wrapping.required: every message would be a LinkedIn"
            " segment, which the foreign reader cannot assemble"
        )
    allowed = SCHEMES[fmt]
    for name, store in stores.items():
        if store.scheme not in allowed:
            raise ReferenceFormatError(
                f"{named}: store {name!r} ({type(store).__name__}) is not one its reader fetches from"
                f" (it reads {', '.join(sorted(allowed))} objects: S3Store"
                + (", GCSStore, AzureBlobStore)" if len(allowed) > 1 else ")")
            )
        bucket = store.bucket or ""
        if "_" in bucket:
            raise ReferenceFormatError(
                f"{named}: store {name!r} has bucket {bucket!r}; java.net.URI reads no host from a name with"
                " '_', so the foreign reader would find no bucket"
            )


def check_route(fmt: ReferenceFormat, chunked: bool) -> None:
    """:class:`ReferenceFormatError` for a message forced onto the chunked route under a pointer format."""
    if chunked and fmt.pointer:
        raise ReferenceFormatError(
            f"{FORMAT_KEY}={fmt.value}: route=chunked writes LinkedIn segments, which its reader cannot assemble;"
            " send it by reference (route='reference:<store>') or plain"
        )


def check_payload(fmt: ReferenceFormat, payload: bytes | bytearray | memoryview) -> None:
    """:class:`ReferenceFormatError` for a payload ``fmt``'s reader would alter: AWS's reads UTF-8 text.

    Checked in steps of 1 MiB, so a large payload is never copied whole.
    """
    if fmt is not ReferenceFormat.AWS:
        return
    view = memoryview(payload).cast("B")
    decoder = codecs.getincrementaldecoder("utf-8")()
    start = 0
    try:
        for start in range(0, len(view), _UTF8_STEP):
            decoder.decode(view[start : start + _UTF8_STEP], final=start + _UTF8_STEP >= len(view))
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise ReferenceFormatError(
            f"{FORMAT_KEY}=aws: the payload is not UTF-8 text (near byte {start + exc.start}), and AWS's reader"
            " decodes the stored object as UTF-8, replacing what is not; send text, or use reference.format=bakdata"
        ) from None


__all__ = [
    "AWS_POINTER_CLASS",
    "FORMAT_KEY",
    "POINTER_ID_TAG",
    "REFERENCE_FORMATS",
    "PointerRecord",
    "ReferenceFormat",
    "check_payload",
    "check_producer",
    "check_route",
    "is_pointer_message_id",
    "pointed_locator",
    "pointer_message_id",
    "pointer_record",
    "split_locator",
    "written_for_pointer",
]
