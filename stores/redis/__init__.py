"""The Redis payload store, standalone or Redis Cluster."""

from gateway.errors import extra_required

with extra_required("redis", "RedisStore"):
    from stores.redis._store import RedisLocator, RedisStore, redis_client_from_url, ttl_from_retention

__all__ = ["RedisLocator", "RedisStore", "redis_client_from_url", "ttl_from_retention"]
