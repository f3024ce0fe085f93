"""The S3 payload store (any S3-compatible endpoint).

The pending journal (markers per payload or per batch of ids) imports without boto3, since the GCS
and Azure stores (``stores.blob``) keep the same journal; the store itself is imported when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stores.s3._locator import S3Locator
from stores.s3._pending import MarkerRequests, S3PendingJournal

if TYPE_CHECKING:
    from stores.s3._store import IncompleteUpload, S3Store, expiry_days_from_retention

__all__ = [
    "IncompleteUpload",
    "MarkerRequests",
    "S3Locator",
    "S3PendingJournal",
    "S3Store",
    "expiry_days_from_retention",
]


def __getattr__(name: str) -> Any:
    if name in ("IncompleteUpload", "S3Store", "expiry_days_from_retention"):
        from stores.s3 import _store

        return getattr(_store, name)
    raise AttributeError(f"module 'stores.s3' has no attribute {name!r}")
