"""Payloads in a Google Cloud Storage bucket: :class:`GCSStore`."""

from __future__ import annotations

import re
from typing import Any

from stores.blob import (
    DEFAULT_JOURNAL_BATCH,
    DEFAULT_JOURNAL_OPEN_MS,
    DEFAULT_MULTIPART_THRESHOLD,
    DEFAULT_PARALLEL_READ_BYTES,
    DEFAULT_PART_BYTES,
    BlobStore,
    BlobStreamWrites,
)
from stores.gcs._backend import GCSBackend, _mapped
from stores.gcs._part_uploads import GCSPartUploads

_BUCKET = re.compile(r"[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]")


class GCSStore(BlobStreamWrites, BlobStore):
    """A :class:`stores.Store` on a ``google.cloud.storage.Client``: locators ``gs://<bucket>/<prefix><topic>/<id>``.

    The contract, journal, reader and locator scheme are :class:`~stores.blob.BlobStore`'s, as S3Store's and
    AzureBlobStore's (``gc``, ``reconcile``, rollback, confinement); payloads from
    ``multipart_threshold`` on are a resumable upload of ``part_bytes`` chunks, and reads from
    ``parallel_read_bytes`` on fetch ``part_bytes`` ranges ``max_concurrency`` at a time. Expire
    payloads with a lifecycle rule on the prefix (:meth:`ensure_expiry_rule`). The SDK retries 429, 5xx and
    network errors for ``retry_deadline_s``; then the store raises :class:`StoreUnavailableError`, so that
    the producer's policy can fall back.

    ``object_sha256`` hashes every payload for a ``sha256`` metadata entry, on the send path. Off by
    default: GCS does not check it (the upload's CRC32C guards the transfer) and it would repeat the
    envelope's digest, which every consumer verifies; a SHA-256 the producer already has (``reference.checksum
    =sha256``) is recorded anyway.
    """

    def __init__(
        self,
        client: Any,
        *,
        bucket: str,
        prefix: str = "gw/",
        name: str = "gcs",
        part_bytes: int = DEFAULT_PART_BYTES,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        parallel_read_bytes: int = DEFAULT_PARALLEL_READ_BYTES,
        max_concurrency: int = 4,
        journal_batch: int = DEFAULT_JOURNAL_BATCH,
        journal_open_ms: int = DEFAULT_JOURNAL_OPEN_MS,
        retry_deadline_s: float = 30.0,
        close_client: bool = False,
        object_sha256: bool = False,
    ) -> None:
        if not isinstance(bucket, str) or _BUCKET.fullmatch(bucket) is None or ".." in bucket:
            raise ValueError(f"not a valid GCS bucket name: {bucket!r}")
        if part_bytes < 256 * 1024 or part_bytes % (256 * 1024):
            raise ValueError("part_bytes must be a positive multiple of 256 KiB (GCS's resumable chunk unit)")
        super().__init__(
            GCSBackend(client, bucket, part_bytes, retry_deadline_s),
            bucket=bucket,
            prefix=prefix,
            name=name,
            part_bytes=part_bytes,
            multipart_threshold=multipart_threshold,
            parallel_read_bytes=parallel_read_bytes,
            max_concurrency=max_concurrency,
            journal_batch=journal_batch,
            journal_open_ms=journal_open_ms,
            close_client=close_client,
            object_sha256=object_sha256,
        )
        backend = self.backend
        assert isinstance(backend, GCSBackend)
        self.uploads = GCSPartUploads(backend, part_bytes)
        """What :meth:`put_stream` sends a stream with: one resumable upload, a chunk at a time."""

    def ensure_expiry_rule(self, days: int) -> dict[str, Any]:
        """Add (once) a lifecycle rule deleting objects under the prefix ``days`` after their creation.

        ``days`` from :func:`stores.expiry_days_from_retention`, so payloads outlive their envelopes.
        """
        if days < 1:
            raise ValueError("days must be at least 1")
        backend = self.backend
        assert isinstance(backend, GCSBackend)
        bucket = self._call(lambda: _mapped(lambda: backend.client.get_bucket(self.bucket)))
        rule = {"action": {"type": "Delete"}, "condition": {"age": days, "matchesPrefix": [self.prefix]}}
        if rule not in list(bucket.lifecycle_rules):
            bucket.lifecycle_rules = [*bucket.lifecycle_rules, rule]
            self._call(lambda: _mapped(bucket.patch))
        return rule
