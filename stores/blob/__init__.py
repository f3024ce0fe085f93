"""What the GCS and Azure Blob stores share: the store over a small backend of object requests."""

from stores.blob._backend import BlobBackend, BlobEntry, ViewReader, ViewWriter
from stores.blob._store import (
    DEFAULT_JOURNAL_BATCH,
    DEFAULT_JOURNAL_OPEN_MS,
    DEFAULT_MULTIPART_THRESHOLD,
    DEFAULT_PARALLEL_READ_BYTES,
    DEFAULT_PART_BYTES,
    BlobStore,
)

__all__ = [
    "DEFAULT_JOURNAL_BATCH",
    "DEFAULT_JOURNAL_OPEN_MS",
    "DEFAULT_MULTIPART_THRESHOLD",
    "DEFAULT_PARALLEL_READ_BYTES",
    "DEFAULT_PART_BYTES",
    "BlobBackend",
    "BlobEntry",
    "BlobStore",
    "ViewReader",
    "ViewWriter",
]
