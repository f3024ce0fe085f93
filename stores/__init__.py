"""External payload stores for reference messaging: the :class:`Store` protocol, Redis and S3.

A store keeps the payload; Kafka carries a small envelope (``gateway.protocol.envelope``) with the
store's name and the locator returned by :meth:`Store.put`.
"""

from stores.base import RetentionInfo, Store, StoreMetrics, topic_retention, validate_topic
from stores.redis_store import RedisLocator, RedisStore, ttl_from_retention
from stores.s3_store import IncompleteUpload, S3Locator, S3Store, expiry_days_from_retention

__all__ = [
    "IncompleteUpload",
    "RedisLocator",
    "RedisStore",
    "RetentionInfo",
    "S3Locator",
    "S3Store",
    "Store",
    "StoreMetrics",
    "expiry_days_from_retention",
    "topic_retention",
    "ttl_from_retention",
    "validate_topic",
]
