"""The Google Cloud Storage payload store (``pip install 'kafka-hybrid-gateway[gcs]'``)."""

from gateway.errors import extra_required

with extra_required("gcs", "GCSStore"):
    from stores.gcs._store import GCSStore

__all__ = ["GCSStore"]
