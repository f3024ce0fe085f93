"""Records other large-message libraries wrote: bakdata's serde, kaf-s3 and AWS's payload offloading.

A team that switches to this library usually switches consumers first, while topics still hold
what the old producers wrote (and will for the topic's retention). Reading those records
transparently, next to our own routes, is what lets it do so without reprocessing. Each format is
opt-in (``large.message.peer.formats``) because every one of them is recognised by sniffing an
ordinary value, which could misfire on a topic that never carried it:

* **bakdata** (``com.bakdata.kafka:large-message-serde``). Headers protocol: a one-byte flag in
  ``__large.message.backed.value`` (or ``.key``), 0 = the value is the data, 1 = the value is a
  UTF-8 URI; a blob may be compressed, named by a one-byte id in
  ``__large.message.backed.compression`` (older releases wrote the name with a doubled dot).
  Byte-flag protocol (its default): the same flag as the value's first byte, the data or URI after
  it. Keys go through the same serde, so they carry the same flag when the key serde was bakdata's.
* **kaf-s3** (PyPI ``kaf-s3-connector``): a JSON object with ``s3_bucket`` and ``s3_key``, plus the
  SHA-256 (hex) of the uncompressed payload, the stored object's ETag and ``compression`` (gzip).
* **aws** (``payloadoffloading-common``, the SQS/SNS extended clients): a two-element JSON array,
  a pointer class name, then ``{"s3BucketName": ..., "s3Key": ...}``.

Everything here is pure: it reads a record and says what it is. Which store may serve a pointer
(the confinement rule) is the resolver's decision, made before any request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gateway.errors import ConfigurationError, PeerFormatError
from gateway.protocol.headers import Header, Headers


class PeerFormat(str, Enum):
    BAKDATA = "bakdata"
    KAFS3 = "kafs3"
    AWS = "aws"


BAKDATA_VALUE_HEADER = "__large.message.backed.value"
BAKDATA_KEY_HEADER = "__large.message.backed.key"
BAKDATA_COMPRESSION_HEADERS = ("__large.message.backed.compression", "__large.message.backed..compression")
BAKDATA_COMPRESSIONS = {0: None, 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
"""bakdata's compression ids (Kafka's codecs, so snappy is xerial-framed and lz4 is the LZ4 frame)."""

AWS_POINTER_CLASSES = frozenset(
    {"software.amazon.payloadoffloading.PayloadS3Pointer", "com.amazon.sqs.javamessaging.MessageS3Pointer"}
)
KAFS3_COMPRESSIONS = frozenset({"gzip"})

MAX_POINTER_BYTES = 16_384
"""A JSON pointer is a few hundred bytes; a larger value is never parsed as one (cheap, and no JSON bomb)."""
MAX_OBJECT_KEY_BYTES = 1024
"""S3's own limit on an object key."""

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_GCS_BUCKET = re.compile(r"[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]")
BAKDATA_SCHEMES = frozenset({"s3", "gs", "abs"})
"""The object stores bakdata's serde writes to: S3, Google Cloud Storage and Azure Blob Storage (container)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


def parse_peer_formats(value: str | Iterable[str] | None) -> frozenset[PeerFormat]:
    """``"bakdata,kafs3,aws"`` (or a list) as formats; :class:`ConfigurationError` names an unknown one."""
    if value is None:
        return frozenset()
    names = value.split(",") if isinstance(value, str) else list(value)
    formats: set[PeerFormat] = set()
    for raw in names:
        name = str(raw).strip().lower()
        if not name:
            continue
        try:
            formats.add(PeerFormat(name))
        except ValueError:
            known = ", ".join(f.value for f in PeerFormat)
            raise ConfigurationError(f"large.message.peer.formats: unknown format {name!r} (known: {known})") from None
    return frozenset(formats)


@dataclass(frozen=True, slots=True)
class PeerPointer:
    """An object another library stored; ``sha256`` and ``etag`` are what it recorded to check it by."""

    format: PeerFormat
    bucket: str
    key: str
    sha256: bytes | None = None
    etag: str | None = None
    compression: str | None = None
    scheme: str = "s3"
    """``s3``, or bakdata's ``gs`` (Google Cloud Storage) and ``abs`` (Azure Blob Storage): only a store of
    the same scheme may serve the object (a GCS bucket is not the S3 bucket of the same name)."""

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}"


PeerPart = bytes | PeerPointer | None
"""A key or value of a peer's record: the bytes themselves, a pointer to fetch, or null."""


@dataclass(frozen=True, slots=True)
class PeerRecord:
    """A record in a peer's format: key and value as they resolve, headers without the peer's own."""

    format: PeerFormat
    key: PeerPart
    value: PeerPart
    headers: Headers | None

    def pointers(self) -> list[PeerPointer]:
        return [part for part in (self.key, self.value) if isinstance(part, PeerPointer)]


@dataclass(frozen=True, slots=True)
class PeerReader:
    """Which formats a reader accepts; ``bakdata_keys`` reads headerless keys with bakdata's byte flag too."""

    formats: frozenset[PeerFormat]
    bakdata_keys: bool = False

    def read(self, key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> PeerRecord | None:
        """The record as a peer wrote it, or ``None`` when it is in none of the enabled formats.

        Raises :class:`PeerFormatError` for a record that is unmistakably a peer's (a bakdata flag
        header, a kaf-s3 object or AWS array) but cannot be read: the caller reports it with the record.
        """
        if PeerFormat.BAKDATA in self.formats:
            found = _read_bakdata(key, value, headers, self.bakdata_keys)
            if found is not None:
                return found
        if value is None or not value or len(value) > MAX_POINTER_BYTES:
            return None
        first = value[0]
        if first == 0x7B and PeerFormat.KAFS3 in self.formats:  # "{"
            pointer = _read_kafs3(value)
            return None if pointer is None else PeerRecord(PeerFormat.KAFS3, key, pointer, _list(headers))
        if first == 0x5B and PeerFormat.AWS in self.formats:  # "["
            pointer = _read_aws(value)
            return None if pointer is None else PeerRecord(PeerFormat.AWS, key, pointer, _list(headers))
        return None


def _list(headers: Sequence[Header] | None) -> Headers | None:
    return None if headers is None else list(headers)


# -- bakdata ------------------------------------------------------------------------------------
def _last(headers: Sequence[Header] | None, name: str) -> bytes | None:
    found = None
    for key, header_value in headers or ():
        if key == name:
            found = header_value if header_value is not None else b""
    return found


def _read_bakdata(
    key: bytes | None, value: bytes | None, headers: Sequence[Header] | None, byte_flag_keys: bool
) -> PeerRecord | None:
    value_flag = _last(headers, BAKDATA_VALUE_HEADER)
    key_flag = _last(headers, BAKDATA_KEY_HEADER)
    if value_flag is not None or key_flag is not None:  # the headers protocol, for whichever part has a flag
        compression = _bakdata_compression(headers)
        own = {BAKDATA_VALUE_HEADER, BAKDATA_KEY_HEADER, *BAKDATA_COMPRESSION_HEADERS}
        rest = [h for h in headers or () if h[0] not in own]
        return PeerRecord(
            PeerFormat.BAKDATA,
            key if key_flag is None else _bakdata_part(key, _flag(key_flag, "key"), compression),
            value if value_flag is None else _bakdata_part(value, _flag(value_flag, "value"), compression),
            rest,
        )
    if not value or value[0] > 1:  # byte flag: 0 inline, 1 backed; anything else is not bakdata's
        return None
    new_key: PeerPart = key
    if byte_flag_keys and key:
        if key[0] > 1:
            raise PeerFormatError(f"bakdata byte-flag key starts with {key[0]}, not 0 or 1")
        new_key = _bakdata_part(key[1:], key[0], None)
    return PeerRecord(PeerFormat.BAKDATA, new_key, _bakdata_part(value[1:], value[0], None), _list(headers))


def _flag(raw: bytes, part: str) -> int:
    if len(raw) != 1 or raw[0] > 1:
        raise PeerFormatError(f"bakdata {part} flag header must be one byte 0 or 1, got {raw[:8]!r}")
    return raw[0]


def _bakdata_compression(headers: Sequence[Header] | None) -> str | None:
    raw = None
    for name in BAKDATA_COMPRESSION_HEADERS:
        raw = _last(headers, name) if raw is None else raw
    if raw is None:
        return None
    if len(raw) != 1 or raw[0] not in BAKDATA_COMPRESSIONS:
        raise PeerFormatError(f"bakdata compression header holds unknown id {raw[:8]!r}")
    return BAKDATA_COMPRESSIONS[raw[0]]


def _bakdata_part(data: bytes | None, flag: int, compression: str | None) -> PeerPart:
    """Inline data as it is (bakdata compresses only what it stores), or the pointer its URI names."""
    if data is None or flag == 0:
        return data
    try:
        uri = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise PeerFormatError("bakdata backed value is not a UTF-8 URI") from None
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in BAKDATA_SCHEMES:
        raise PeerFormatError(f"bakdata URI {uri[:200]!r}: only s3://, gs:// and abs:// objects can be read")
    bucket, _, object_key = rest.partition("/")
    return _pointer(PeerFormat.BAKDATA, bucket, object_key, compression=compression, scheme=scheme)


# -- kaf-s3 and AWS -----------------------------------------------------------------------------
def _json(value: bytes) -> Any:
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None  # not JSON: an ordinary value that starts with a brace or bracket


def _read_kafs3(value: bytes) -> PeerPointer | None:
    """kaf-s3's rule: a JSON object with both ``s3_bucket`` and ``s3_key`` is a reference; nothing else is."""
    obj = _json(value)
    if not isinstance(obj, dict) or "s3_bucket" not in obj or "s3_key" not in obj:
        return None
    bucket, key = obj["s3_bucket"], obj["s3_key"]
    digest, etag, compression = obj.get("sha256"), obj.get("etag"), obj.get("compression")
    if not isinstance(bucket, str) or not isinstance(key, str):
        raise PeerFormatError("kaf-s3 reference: s3_bucket and s3_key must be strings")
    if digest is not None and (not isinstance(digest, str) or _SHA256_HEX.fullmatch(digest) is None):
        raise PeerFormatError("kaf-s3 reference: sha256 must be 64 hex digits")
    if etag is not None and not isinstance(etag, str):
        raise PeerFormatError("kaf-s3 reference: etag must be a string")
    if compression is not None and compression not in KAFS3_COMPRESSIONS:
        raise PeerFormatError(f"kaf-s3 reference: unknown compression {compression!r}")
    return _pointer(
        PeerFormat.KAFS3,
        bucket,
        key,
        sha256=None if digest is None else bytes.fromhex(digest),
        etag=etag.strip('"') if etag else None,
        compression=compression,
    )


def _read_aws(value: bytes) -> PeerPointer | None:
    """The pointer array; a JSON array with any other shape is an ordinary value."""
    obj = _json(value)
    if not (isinstance(obj, list) and len(obj) == 2 and obj[0] in AWS_POINTER_CLASSES):
        return None
    body = obj[1]
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("s3BucketName"), str)
        or not isinstance(body.get("s3Key"), str)
    ):
        raise PeerFormatError("AWS payload pointer: s3BucketName and s3Key must be strings")
    return _pointer(PeerFormat.AWS, body["s3BucketName"], body["s3Key"])


def _pointer(
    fmt: PeerFormat,
    bucket: str,
    key: str,
    *,
    sha256: bytes | None = None,
    etag: str | None = None,
    compression: str | None = None,
    scheme: str = "s3",
) -> PeerPointer:
    """A pointer whose bucket and key are well-formed; they end up in requests, logs and errors."""
    if (_GCS_BUCKET if scheme == "gs" else _BUCKET).fullmatch(bucket) is None:
        raise PeerFormatError(f"{fmt.value} pointer names an invalid bucket {bucket[:80]!r}")
    if not key or len(key.encode("utf-8", "surrogatepass")) > MAX_OBJECT_KEY_BYTES or _CONTROL.search(key):
        raise PeerFormatError(f"{fmt.value} pointer names an invalid object key {key[:200]!r}")
    return PeerPointer(fmt, bucket, key, sha256, etag, compression, scheme)
