"""Payloads in an Azure Blob Storage container: :class:`AzureBlobStore`."""

from __future__ import annotations

import re
from typing import Any

from stores.azure._backend import AzureBackend
from stores.azure._part_uploads import AzurePartUploads
from stores.blob import (
    DEFAULT_JOURNAL_BATCH,
    DEFAULT_JOURNAL_OPEN_MS,
    DEFAULT_MULTIPART_THRESHOLD,
    DEFAULT_PARALLEL_READ_BYTES,
    DEFAULT_PART_BYTES,
    BlobStore,
    BlobStreamWrites,
)

_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")


class AzureBlobStore(BlobStreamWrites, BlobStore):
    """A :class:`stores.Store` on an Azure ``BlobServiceClient``: locators ``abs://<container>/<prefix><topic>/<id>``.

    The contract, journal, reader and locator scheme are :class:`~stores.blob.BlobStore`'s, as S3Store's and
    GCSStore's (``gc``, ``reconcile``, rollback, confinement); payloads from
    ``multipart_threshold`` on are staged as ``part_bytes`` blocks ``max_concurrency`` at a time and
    committed as one blob; reads from ``parallel_read_bytes`` on fetch ranges in parallel. Uncommitted
    blocks of an interrupted upload are discarded by the service after 7 days; expire payloads with a
    lifecycle management policy on the prefix (docs/stores.md).

    Two hashes of the payload that only repeat the envelope's digest (which every consumer verifies
    before handing a payload out) are off by default, each a pass over the payload on the send path:
    ``validate_content`` (an MD5 of every request body, checked by the service; the SDK's default is
    off too) and ``object_sha256`` (a ``sha256`` metadata entry; one the producer already has, with
    ``reference.checksum=sha256``, is recorded anyway).
    """

    def __init__(
        self,
        client: Any,
        *,
        container: str,
        prefix: str = "gw/",
        name: str = "azure",
        part_bytes: int = DEFAULT_PART_BYTES,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        parallel_read_bytes: int = DEFAULT_PARALLEL_READ_BYTES,
        max_concurrency: int = 4,
        validate_content: bool = False,
        journal_batch: int = DEFAULT_JOURNAL_BATCH,
        journal_open_ms: int = DEFAULT_JOURNAL_OPEN_MS,
        close_client: bool = False,
        object_sha256: bool = False,
    ) -> None:
        if not isinstance(container, str) or _CONTAINER.fullmatch(container) is None:
            raise ValueError(f"not a valid Azure container name: {container!r}")
        if part_bytes < 256 * 1024 or part_bytes % (256 * 1024):
            raise ValueError("part_bytes must be a positive multiple of 256 KiB")
        backend = AzureBackend(
            client.get_container_client(container),
            part_bytes=part_bytes,
            single_put_bytes=multipart_threshold,
            max_concurrency=max_concurrency,
            validate_content=validate_content,
        )
        self.service_client = client
        super().__init__(
            backend,
            bucket=container,
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
        self.uploads = AzurePartUploads(backend)
        """What :meth:`put_stream` sends a stream with: a block per part, committed at the end."""

    @property
    def container(self) -> str:
        """Azure's word for the bucket: the container the payloads are written to."""
        return self.bucket
