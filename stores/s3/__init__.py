"""The S3 payload store (any S3-compatible endpoint)."""

from stores.s3._locator import S3Locator
from stores.s3._store import IncompleteUpload, S3Store, expiry_days_from_retention

__all__ = ["IncompleteUpload", "S3Locator", "S3Store", "expiry_days_from_retention"]
