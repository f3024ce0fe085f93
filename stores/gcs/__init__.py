"""The Google Cloud Storage payload store (``pip install 'kafka-hybrid-gateway[gcs]'``)."""

from stores.gcs._store import GCSStore

__all__ = ["GCSStore"]
