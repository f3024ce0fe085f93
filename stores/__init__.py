"""External payload stores for reference messaging: the :class:`Store` base class, Redis, S3, GCS and Azure Blob.

A store keeps the payload; Kafka carries a small envelope (``gateway.protocol.envelope``) with the
store's name and the locator returned by :meth:`Store.put`.

``RedisStore`` needs redis-py, ``S3Store`` boto3, ``GCSStore`` google-cloud-storage and
``AzureBlobStore`` azure-storage-blob; each is imported only when it is first
used, so that ``import stores`` works with neither installed and a missing one says which extra
to install.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from gateway.errors import extra_required
from stores.base import RetentionInfo, Store, StoreMetrics, topic_retention, validate_topic

if TYPE_CHECKING:  # the "as" form re-exports them for type checkers, as the lazy lookup below does at run time
    from stores.azure import AzureBlobStore as AzureBlobStore
    from stores.gcs import GCSStore as GCSStore
    from stores.redis import RedisLocator as RedisLocator
    from stores.redis import RedisStore as RedisStore
    from stores.redis import redis_client_from_url as redis_client_from_url
    from stores.redis import ttl_from_retention as ttl_from_retention
    from stores.s3 import IncompleteUpload as IncompleteUpload
    from stores.s3 import S3Locator as S3Locator
    from stores.s3 import S3Store as S3Store
    from stores.s3 import expiry_days_from_retention as expiry_days_from_retention

__all__ = ["RetentionInfo", "Store", "StoreMetrics", "topic_retention", "validate_topic"]
"""The names that need no client package; each store's names join it when its package is installed,
so that ``from stores import *`` works on any single-store install."""


# name -> (module, the client package it needs, the extra that installs it)
_LAZY = {
    "RedisLocator": ("stores.redis", "redis", "redis"),
    "RedisStore": ("stores.redis", "redis", "redis"),
    "ttl_from_retention": ("stores.redis", "redis", "redis"),
    "redis_client_from_url": ("stores.redis", "redis", "redis"),
    "IncompleteUpload": ("stores.s3", "boto3", "s3"),
    "S3Locator": ("stores.s3", "boto3", "s3"),
    "S3Store": ("stores.s3", "boto3", "s3"),
    "expiry_days_from_retention": ("stores.s3", "boto3", "s3"),
    "GCSStore": ("stores.gcs", "google.cloud.storage", "gcs"),
    "AzureBlobStore": ("stores.azure", "azure.storage.blob", "azure"),
}


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        return False


__all__ += [name for name, (_, package, _) in sorted(_LAZY.items()) if _installed(package)]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'stores' has no attribute {name!r}")
    module, _, extra = _LAZY[name]
    with extra_required(extra, name):
        return getattr(importlib.import_module(module), name)  # stores.s3 imports boto3 only on this getattr
