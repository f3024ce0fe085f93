"""The Azure Blob Storage payload store (``pip install 'kafka-hybrid-gateway[azure]'``)."""

from gateway.errors import extra_required

with extra_required("azure", "AzureBlobStore"):
    from stores.azure._store import AzureBlobStore

__all__ = ["AzureBlobStore"]
