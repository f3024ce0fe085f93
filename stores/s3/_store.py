"""Payloads in S3 (or any S3-compatible endpoint) through boto3: the third backend of :class:`~stores.blob.BlobStore`.

Object key ``<prefix><topic>/<message id>`` and locator ``s3://<bucket>/<key>``: the layout bakdata and
kaf-s3 use, so the usual tools (``aws s3 ls s3://bucket/gw/orders/``) find a topic's payloads, and
a lifecycle rule on the prefix covers them all. The journal (markers under ``<prefix>_pending/``),
the reader and the locator scheme are the ones GCS and Azure use; this module checks S3's names and
sizes and chooses the backend (:class:`~stores.s3._backend.S3Backend`), which makes boto3's requests.

Reads are one GET of the size the envelope gives (plus one byte) below ``parallel_read_bytes``: on
a local S3 server one GET beat ranged parts, whose thread pool and extra HEAD cost more than
parallelism gains on loopback (measured in docs/stores.md, "S3Store"). Real S3 caps one stream at
roughly 100 MB/s, so objects from ``parallel_read_bytes`` on are read in ranges, ``max_concurrency``
at a time.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from gateway.store import IncompleteUpload
from stores.base import topic_retention
from stores.blob import DEFAULT_JOURNAL_BATCH, DEFAULT_JOURNAL_OPEN_MS, BlobStore, BlobStreamWrites, ObjectLocator
from stores.s3._backend import S3Backend
from stores.s3._housekeeping import S3Housekeeping
from stores.s3._multipart import S3PartUploads

MiB = 1024 * 1024
DEFAULT_MULTIPART_BYTES = 8 * MiB
"""The default part size of a multipart upload (and of a ranged read)."""
DEFAULT_MULTIPART_THRESHOLD = 64 * MiB
"""The size from which a payload is uploaded in parts. On a local S3 server one PUT was faster than
8 MiB parts at every size measured (docs/stores.md, "S3Store"), since a multipart upload costs two
more requests; on AWS one stream carries roughly 100 MB/s, so parallel parts pay off only for large
objects, where AWS's own guidance starts them."""
DEFAULT_PARALLEL_READ_BYTES = 64 * MiB
"""The size from which a payload is read in parallel ranges: as for writes, where parts start to pay."""

S3Locator = ObjectLocator
"""The parsed ``s3://`` locator: the one locator class of the object stores, under the name it always had."""

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# Everything needed to use the object again must be passed to GET too (SSE-C); the rest only to writes.
_SSE_KEYS = frozenset({
    "ServerSideEncryption", "SSEKMSKeyId", "SSEKMSEncryptionContext",
    "SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5",
})  # fmt: skip
_SSE_READ_KEYS = frozenset({"SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5"})


def expiry_days_from_retention(admin_client: Any, topic: str, margin_seconds: int = 86400) -> int | None:
    """Days for :meth:`S3Store.ensure_expiry_rule` so objects outlive every envelope of ``topic``.

    Same bound as the Redis TTL (``retention.ms + segment.ms + margin``), rounded up to whole days
    because lifecycle rules count in days. ``None``: infinite retention or a compact-only topic,
    where no expiry rule is safe.
    """
    seconds = topic_retention(admin_client, topic).payload_ttl_seconds(margin_seconds)
    return None if seconds is None else max(1, -(-seconds // 86400))


class S3Store(S3Housekeeping, BlobStreamWrites, BlobStore):
    """A :class:`stores.Store` on a boto3 S3 client (thread-safe, as boto3 clients are).

    Writes below ``multipart_threshold`` are one PutObject carrying the payload's SHA-256 as its
    checksum; larger ones a multipart upload of ``multipart_chunk_bytes`` parts, ``max_concurrency``
    at a time. ``sse`` (for example ``{"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "..."}``)
    goes on every write, including the pending markers, since a bucket policy that requires
    encryption refuses those too; SSE-C keys also go on reads. ``tags`` become the objects' tag
    set, for tag-filtered lifecycle rules.

    ``journal_batch`` ids of a topic share one pending marker (:mod:`stores.blob._batch_marker`) when the
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
        parallel_read_bytes: int = DEFAULT_PARALLEL_READ_BYTES,
    ) -> None:
        if not isinstance(bucket, str) or _BUCKET.fullmatch(bucket) is None or ".." in bucket:
            raise ValueError(f"not a valid S3 bucket name: {bucket!r}")
        if multipart_chunk_bytes < 5 * MiB:
            raise ValueError("multipart_chunk_bytes must be at least 5 MiB (S3's minimum part size)")
        if multipart_threshold < 1 or max_concurrency < 1:
            raise ValueError("multipart_threshold and max_concurrency must be positive")
        sse = dict(sse or {})
        unknown = set(sse) - _SSE_KEYS
        if unknown:
            raise ValueError(f"unsupported sse keys {sorted(unknown)}; allowed: {sorted(_SSE_KEYS)}")
        self.sse: dict[str, Any] = sse
        self.tags: dict[str, str] = dict(tags or {})
        write_args: dict[str, Any] = dict(sse)
        if self.tags:
            if len(self.tags) > 10:
                raise ValueError("S3 allows at most 10 tags per object")
            write_args["Tagging"] = urllib.parse.urlencode(self.tags)
        self.multipart_chunk_bytes = multipart_chunk_bytes
        self.s3 = S3Backend(
            client,
            bucket,
            write_args=write_args,
            read_args={k: v for k, v in sse.items() if k in _SSE_READ_KEYS},
            transfer=_transfer_config(multipart_threshold, multipart_chunk_bytes, max_concurrency),
        )
        super().__init__(
            self.s3,
            bucket=bucket,
            prefix=prefix,
            name=name,
            part_bytes=multipart_chunk_bytes,
            multipart_threshold=multipart_threshold,
            parallel_read_bytes=parallel_read_bytes,
            max_concurrency=max_concurrency,
            journal_batch=journal_batch,
            journal_open_ms=journal_open_ms,
            close_client=close_client,
        )
        self.client = client
        self.uploads = S3PartUploads(self.s3)
        """What :meth:`put_stream` sends a stream with: one multipart upload, a part at a time."""

    def __repr__(self) -> str:
        return f"S3Store(name={self.name!r}, bucket={self.bucket!r}, prefix={self.prefix!r})"


def _transfer_config(threshold: int, part_bytes: int, concurrency: int) -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=threshold,
        multipart_chunksize=part_bytes,
        max_concurrency=concurrency,
        use_threads=concurrency > 1,
    )


__all__ = ["IncompleteUpload", "S3Locator", "S3Store", "expiry_days_from_retention"]
