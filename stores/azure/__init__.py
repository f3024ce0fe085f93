"""The Azure Blob Storage payload store (``pip install 'kafka-hybrid-gateway[azure]'``)."""

from stores.azure._store import AzureBlobStore

__all__ = ["AzureBlobStore"]
