"""The one door from the library to the ``stores`` package: how the entry points (``gateway gc`` and
``reconcile``, the Spark source and sink, the demo) open the stores their settings name.

``stores`` is built on the library (its errors, the :class:`~gateway.store.Store` contract, buffers, the
envelope's name rule), and the producer, the consumer and ``gc`` take any :class:`Store` they are given,
so nothing else in the library imports ``stores``: imports between the two run one way, up through this
module only (tests/unit/test_layout.py holds it). Each store's package, and so its cloud's client, is
imported only when a store of that kind is opened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.store import Store
from stores.blob.settings import CLOUD_STORE_OPTIONS, cloud_store_fields


def redis_client(url: str, **kwargs: Any) -> Any:
    """A redis-py client (cluster or not, TLS or not) for a ``redis://``/``rediss://`` URL."""
    from stores import redis_client_from_url

    return redis_client_from_url(url, **kwargs)


def redis_store(client: Any, *, prefix: str, name: str = "redis", close_client: bool = False) -> Store:
    from stores import RedisStore

    return RedisStore(client, prefix=prefix, name=name, close_client=close_client)


def s3_store(client: Any, *, bucket: str, prefix: str, name: str = "s3", close_client: bool = False) -> Store:
    from stores import S3Store

    return S3Store(client, bucket=bucket, prefix=prefix, name=name, close_client=close_client)


def cloud_stores(fields: Any) -> dict[str, Store]:
    """The GCS and Azure stores ``fields`` (:func:`cloud_store_fields`' names as attributes) configure."""
    from stores.blob.settings import build_cloud_stores

    return build_cloud_stores(fields)


def stores_package() -> Path:
    """Where the ``stores`` package is, to ship it beside ``gateway`` to executors that lack both."""
    import stores

    return Path(stores.__file__).parent


__all__ = [
    "CLOUD_STORE_OPTIONS",
    "cloud_store_fields",
    "cloud_stores",
    "redis_client",
    "redis_store",
    "s3_store",
    "stores_package",
]
