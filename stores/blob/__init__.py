"""What the S3, GCS and Azure Blob stores share: the store over a small backend of object requests, its
locator scheme, its pending journal and its reader. Imports no cloud's client."""

from stores.blob._backend import BlobBackend, BlobEntry, ObjectHead, ViewReader, ViewWriter
from stores.blob._locator import ObjectLocator
from stores.blob._pending import MarkerRequests, PendingJournal
from stores.blob._store import (
    DEFAULT_JOURNAL_BATCH,
    DEFAULT_JOURNAL_OPEN_MS,
    DEFAULT_MULTIPART_THRESHOLD,
    DEFAULT_PARALLEL_READ_BYTES,
    DEFAULT_PART_BYTES,
    BlobStore,
)
from stores.blob._stream_writes import BlobStreamWrites, PartUpload, PartUploads

__all__ = [
    "DEFAULT_JOURNAL_BATCH",
    "DEFAULT_JOURNAL_OPEN_MS",
    "DEFAULT_MULTIPART_THRESHOLD",
    "DEFAULT_PARALLEL_READ_BYTES",
    "DEFAULT_PART_BYTES",
    "BlobBackend",
    "BlobEntry",
    "BlobStore",
    "BlobStreamWrites",
    "MarkerRequests",
    "ObjectHead",
    "ObjectLocator",
    "PartUpload",
    "PartUploads",
    "PendingJournal",
    "ViewReader",
    "ViewWriter",
]
