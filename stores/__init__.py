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
from typing import TYPE_CHECKING, Any

from stores.base import RetentionInfo, Store, StoreMetrics, topic_retention, validate_topic

if TYPE_CHECKING:
    from stores.azure import AzureBlobStore
    from stores.gcs import GCSStore
    from stores.redis import RedisLocator, RedisStore, redis_client_from_url, ttl_from_retention
    from stores.s3 import IncompleteUpload, S3Locator, S3Store, expiry_days_from_retention

__all__ = [
    "AzureBlobStore",
    "GCSStore",
    "IncompleteUpload",
    "RedisLocator",
    "RedisStore",
    "RetentionInfo",
    "S3Locator",
    "S3Store",
    "Store",
    "StoreMetrics",
    "expiry_days_from_retention",
    "redis_client_from_url",
    "topic_retention",
    "ttl_from_retention",
    "validate_topic",
]

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
    "GCSStore": ("stores.gcs", "google", "gcs"),
    "AzureBlobStore": ("stores.azure", "azure", "azure"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'stores' has no attribute {name!r}")
    module, package, extra = _LAZY[name]
    try:
        return getattr(importlib.import_module(module), name)  # stores.s3 imports boto3 only on this getattr
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in (package, "botocore"):
            raise
        raise ImportError(
            f"{name} needs the {package!r} package: pip install 'kafka-hybrid-gateway[{extra}]'", name=exc.name
        ) from exc
