"""What the GCS and Azure Blob stores share: the store over a small backend of object requests."""

from stores.blob._backend import BlobBackend, BlobEntry, ViewReader, ViewWriter
from stores.blob._store import BlobStore

__all__ = ["BlobBackend", "BlobEntry", "BlobStore", "ViewReader", "ViewWriter"]
