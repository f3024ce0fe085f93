"""The S3 payload store (any S3-compatible endpoint): the third backend of :mod:`stores.blob`.

The pending journal and the locator are the object stores' own (``stores.blob``), re-exported here
under the names they had; they import without boto3. The store itself is imported when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stores.blob import MarkerRequests, ObjectLocator, PendingJournal

S3Locator = ObjectLocator
S3PendingJournal = PendingJournal

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
