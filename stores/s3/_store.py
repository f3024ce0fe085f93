"""Payloads in S3 (or any S3-compatible endpoint) through boto3.

Object key ``<prefix><topic>/<message id>`` and locator ``s3://<bucket>/<key>``: the layout bakdata and
kaf-s3 use, so the usual tools (``aws s3 ls s3://bucket/gw/orders/``) find a topic's payloads, and
a lifecycle rule on the prefix covers them all.

Crash journal: before the payload is uploaded, a marker object under ``<prefix>_pending/`` names it
(:mod:`stores.s3._pending`): its own, or a batch marker written before the ids it names were handed
out. On delete the payload goes first and its mark last.

Reads are a single GET: on a local S3 server one ``get_object`` beat ``download_fileobj`` with
ranged parts, whose thread pool and extra HEAD cost more than parallelism gains on loopback
(measured in docs/stores.md, "S3Store"). Real S3 caps one stream at roughly 100 MB/s, so very
large objects there would gain from ranged reads; that is left for when it can be measured.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from gateway.errors import (
    LocatorError,
    StoreError,
)
from gateway.protocol.envelope import validate_store_name
from gateway.store import IncompleteUpload
from stores.base import (
    TOPIC_PATTERN,
    UUID_PATTERN,
    Payload,
    StoreMetrics,
    parse_object_locator,
    topic_retention,
    validate_message_id,
    validate_topic,
)
from stores.s3 import _io as s3_io
from stores.s3._housekeeping import S3Housekeeping
from stores.s3._journal import S3StoreJournal
from stores.s3._locator import S3Locator
from stores.s3._pending import MarkerRequests, S3PendingJournal
from stores.s3._reads import S3Reads

MiB = 1024 * 1024
DEFAULT_MULTIPART_BYTES = 8 * MiB
"""The default part size of a multipart upload."""
DEFAULT_MULTIPART_THRESHOLD = 64 * MiB
"""The size from which a payload is uploaded in parts. On a local S3 server one PUT was faster than
8 MiB parts at every size measured (docs/stores.md, "S3Store"), since a multipart upload costs two
more requests; on AWS one stream carries roughly 100 MB/s, so parallel parts pay off only for large
objects, where AWS's own guidance starts them."""
DEFAULT_JOURNAL_BATCH = 64
DEFAULT_JOURNAL_OPEN_MS = 30_000
MAX_PREFIX_LENGTH = 400
"""So that the longest locator (63-char bucket, 249-char topic) still fits an envelope's 768 bytes."""

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX = re.compile(r"(?:[A-Za-z0-9._-]+/){0,16}")
# Everything needed to use the object again must be passed to GET too (SSE-C); the rest only to writes.
_SSE_KEYS = frozenset({
    "ServerSideEncryption", "SSEKMSKeyId", "SSEKMSEncryptionContext",
    "SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5",
})  # fmt: skip
_SSE_READ_KEYS = frozenset({"SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5"})
_T = TypeVar("_T")


def expiry_days_from_retention(admin_client: Any, topic: str, margin_seconds: int = 86400) -> int | None:
    """Days for :meth:`S3Store.ensure_expiry_rule` so objects outlive every envelope of ``topic``.

    Same bound as the Redis TTL (``retention.ms + segment.ms + margin``), rounded up to whole days
    because lifecycle rules count in days. ``None``: infinite retention or a compact-only topic,
    where no expiry rule is safe.
    """
    seconds = topic_retention(admin_client, topic).payload_ttl_seconds(margin_seconds)
    return None if seconds is None else max(1, -(-seconds // 86400))


class S3Store(S3Reads, S3Housekeeping, S3StoreJournal):
    """A :class:`stores.Store` on a boto3 S3 client (thread-safe, as boto3 clients are).

    Writes below ``multipart_threshold`` are one PutObject; larger ones a multipart upload of
    ``multipart_chunk_bytes`` parts, ``max_concurrency`` at a time. ``sse`` (for example
    ``{"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "..."}``) goes on every write, including
    the pending markers, since a bucket policy that requires encryption refuses those too; SSE-C
    keys also go on reads. ``tags`` become the objects' tag set, for tag-filtered lifecycle rules.

    ``journal_batch`` ids of a topic share one pending marker (:mod:`stores.s3._batch_marker`) when the
    producer takes its ids from :meth:`next_message_id`; 1 writes one marker per payload, as
    before. ``journal_open_ms`` bounds how long one batch hands out ids.
    """

    scheme = "s3"
    """The scheme of the peers' pointers (bakdata's ``s3://``) this store can serve."""

    def __init__(
        self,
        client: Any,
        *,
        bucket: str,
        prefix: str = "gw/",
        name: str = "s3",
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        multipart_chunk_bytes: int = DEFAULT_MULTIPART_BYTES,
        max_concurrency: int = 4,
        sse: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        close_client: bool = False,
        journal_batch: int = DEFAULT_JOURNAL_BATCH,
        journal_open_ms: int = DEFAULT_JOURNAL_OPEN_MS,
    ) -> None:
        if not isinstance(bucket, str) or _BUCKET.fullmatch(bucket) is None or ".." in bucket:
            raise ValueError(f"not a valid S3 bucket name: {bucket!r}")
        if not isinstance(prefix, str) or _PREFIX.fullmatch(prefix) is None or len(prefix) > MAX_PREFIX_LENGTH:
            raise ValueError(
                f"prefix must be empty or '/'-terminated segments of [A-Za-z0-9._-], at most {MAX_PREFIX_LENGTH}"
                f" chars, got {prefix!r}"
            )
        if any(seg in (".", "..") for seg in prefix.split("/")):
            raise ValueError(f"prefix must not contain '.' or '..' segments: {prefix!r}")
        if multipart_chunk_bytes < 5 * MiB:
            raise ValueError("multipart_chunk_bytes must be at least 5 MiB (S3's minimum part size)")
        if multipart_threshold < 1 or max_concurrency < 1:
            raise ValueError("multipart_threshold and max_concurrency must be positive")
        sse = dict(sse or {})
        unknown = set(sse) - _SSE_KEYS
        if unknown:
            raise ValueError(f"unsupported sse keys {sorted(unknown)}; allowed: {sorted(_SSE_KEYS)}")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.name = validate_store_name(name)
        self.multipart_threshold = multipart_threshold
        self.multipart_chunk_bytes = multipart_chunk_bytes
        self.max_concurrency = max_concurrency
        self.sse: dict[str, Any] = sse
        self.tags: dict[str, str] = dict(tags or {})
        self._write_args: dict[str, Any] = dict(sse)
        if self.tags:
            if len(self.tags) > 10:
                raise ValueError("S3 allows at most 10 tags per object")
            self._write_args["Tagging"] = urllib.parse.urlencode(self.tags)
        self._read_args = {k: v for k, v in sse.items() if k in _SSE_READ_KEYS}
        self._key_re = re.compile(rf"{re.escape(prefix)}({TOPIC_PATTERN})/({UUID_PATTERN})")
        requests = MarkerRequests(
            self._put_marker,
            self._delete_keys,
            self._read_marker,
            self._list,
            self.locator_for,
            self.validate_locator,
            self._journaled,
        )
        self.journal = S3PendingJournal(requests, bucket, prefix, batch=journal_batch, open_ms=journal_open_ms)
        self.pending_prefix = self.journal.prefix
        self.journal_batch = journal_batch
        self._close_client = close_client
        self._closed = False
        self._metrics = StoreMetrics()
        self._transfer_config: Any = None
        self._send_checksum = s3_io.sends_checksums(client)
        """Whether single PUTs carry the payload's SHA-256 as their checksum: unless the client was told
        to send checksums only when required (``request_checksum_calculation``), as users of S3-compatible
        stores that refuse them do."""

    def __repr__(self) -> str:
        return f"S3Store(name={self.name!r}, bucket={self.bucket!r}, prefix={self.prefix!r})"

    # -- locators --------------------------------------------------------------------------
    def key_for(self, topic: str, message_id: uuid.UUID) -> str:
        """The object's key: ``<prefix><topic>/<message id>``, checked so no input escapes the prefix."""
        return f"{self.prefix}{validate_topic(topic)}/{validate_message_id(message_id)}"

    def locator_for(self, topic: str, message_id: uuid.UUID, size: int = 0) -> str:
        """The object's locator; its size does not change it."""
        return f"s3://{self.bucket}/{self.key_for(topic, message_id)}"

    def marker_key(self, parsed: S3Locator) -> str:
        """The key of the payload's pending marker (the journal S3 keeps beside the objects)."""
        return self.journal.marker_key(parsed)

    def validate_locator(self, locator: str) -> S3Locator:
        """``s3://<this bucket>/<prefix><topic>/<uuid>`` exactly, or :class:`LocatorError`.

        Anything a URL or path layer could reinterpret is refused outright instead of normalised:
        non-ASCII (look-alike and bidi characters), controls and spaces, ``%`` escapes, ``\\``, ``?``
        and ``#``. The key must then match the one pattern this store writes, which also excludes
        ``//``, absolute keys and ``.``/``..`` segments, so nothing outside the prefix can be named.
        """
        try:
            parts = parse_object_locator(
                locator, scheme="s3", bucket=self.bucket, prefix=self.prefix, key_re=self._key_re, label="S3"
            )
            return S3Locator(*parts)
        except LocatorError:
            self._metrics.add("locator_rejected")
            raise

    # -- store operations ------------------------------------------------------------------
    def put(
        self,
        topic: str,
        message_id: uuid.UUID,
        payload: Payload,
        *,
        pending_since_ms: int | None = None,
        sha256: bytes | None = None,
        persistent: bool = False,
    ) -> str:
        """Marker (if journalled), then the object with its SHA-256 and size in metadata.

        ``sha256``, when given, is trusted as the payload's digest (the producer computed it for the
        envelope); the consumer checks the envelope's digest against the bytes in any case.
        ``persistent`` changes nothing here: S3 expires objects by a lifecycle rule on the prefix,
        not per object, so a compacted topic's payloads need a store whose prefix has no rule.
        """
        del persistent
        self._check_open()
        locator = self.locator_for(topic, message_id)
        parsed = S3Locator(self.bucket, self.key_for(topic, message_id), topic, message_id)
        body = payload if isinstance(payload, bytes) else bytes(payload)
        size = len(body)
        if sha256 is not None and len(sha256) != 32:
            raise ValueError("sha256 must be 32 bytes")
        raw_digest = sha256 or hashlib.sha256(body).digest()
        digest = raw_digest.hex()
        started = time.perf_counter()
        if pending_since_ms is not None:
            self.journal.mark(locator, parsed, pending_since_ms)
        args = dict(self._write_args)
        args["Metadata"] = {"sha256": digest, "size": str(size), "message-id": str(message_id), "topic": topic}
        try:
            if size < self.multipart_threshold:
                if self._send_checksum:  # S3 checks the envelope's digest itself; botocore skips its CRC32
                    args["ChecksumSHA256"] = base64.b64encode(raw_digest).decode()
                self._call(lambda: self.client.put_object(Bucket=self.bucket, Key=parsed.key, Body=body, **args))
            else:
                self._call(
                    lambda: self.client.upload_fileobj(
                        io.BytesIO(body),
                        self.bucket,
                        parsed.key,
                        ExtraArgs=args,
                        Config=self._transfer(),
                    )
                )
        except StoreError:
            # The upload may have completed before the error; remove it (marker last) if we can,
            # otherwise the marker tells a sweeper where to look.
            with contextlib.suppress(StoreError):
                self.delete(locator)
            raise
        self._done("put", started, locator, size)
        return locator

    def delete(self, locator: str) -> None:
        """Object first, marker last; S3 answers 204 for an absent key, so this is idempotent.

        A payload journalled in a batch settles its place there; the batch marker goes once nothing
        it names is unsettled.
        """
        parsed = self.validate_locator(locator)
        self._check_open()
        started = time.perf_counter()
        self._call(lambda: self.client.delete_object(Bucket=self.bucket, Key=parsed.key))
        self.journal.settle([locator])
        self._done("delete", started, locator)

    def close(self) -> None:
        self.end_journal_batches()
        super().close()

    def list_locators(self, topic: str | None = None) -> Iterator[tuple[str, int]]:
        """Every payload object under the prefix (markers excluded) with its LastModified in ms."""
        self._check_open()
        under = self.prefix if topic is None else f"{self.prefix}{validate_topic(topic)}/"
        for obj in self._list(under):
            if self._key_re.fullmatch(obj["Key"]) is not None:
                yield f"s3://{self.bucket}/{obj['Key']}", s3_io.ms(obj["LastModified"])

    # -- plumbing --------------------------------------------------------------------------

    def _transfer(self) -> Any:
        if self._transfer_config is None:
            from boto3.s3.transfer import TransferConfig

            self._transfer_config = TransferConfig(
                multipart_threshold=self.multipart_threshold,
                multipart_chunksize=self.multipart_chunk_bytes,
                max_concurrency=self.max_concurrency,
                use_threads=self.max_concurrency > 1,
            )
        return self._transfer_config

    def _call(self, fn: Callable[[], _T], *, missing: str | None = None) -> _T:
        return s3_io.mapped_errors(self._metrics, fn, missing)

    def _failed(self, exc: BaseException) -> StoreError:
        return s3_io.failed(self._metrics, exc)


__all__ = ["IncompleteUpload", "S3Locator", "S3Store", "expiry_days_from_retention"]
