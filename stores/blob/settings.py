"""GCS and Azure Blob stores from ``gcs.*`` / ``azure.*`` settings: the one place the Spark options, the
``gateway gc``/``reconcile`` flags and ``--command-config`` files become stores.

* ``gcs.bucket`` (+ ``gcs.prefix``, default ``gw/``; ``gcs.name``, default ``gcs``; ``gcs.endpoint`` for an
  emulator, then without credentials; otherwise the environment's Google credentials);
* ``azure.container`` with ``azure.connection.string`` (+ ``azure.prefix``, ``azure.name``, default ``azure``).

Every process opens its own clients from these settings (clients do not pickle to Spark executors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.errors import ConfigurationError
from stores.base import Store

CLOUD_STORE_OPTIONS = (
    "gcs.endpoint",
    "gcs.bucket",
    "gcs.prefix",
    "gcs.name",
    "azure.connection.string",
    "azure.container",
    "azure.prefix",
    "azure.name",
)
"""Store settings beside ``redis.*`` and ``s3.*``: the Spark reader and sink, gc and reconcile."""


def cloud_store_fields(opts: Mapping[str, str]) -> dict[str, Any]:
    """The GCS and Azure fields (``gcs_bucket``, ``azure_container``, ...) of ``opts`` (keys lower-cased)."""

    def text(key: str, default: str | None = None) -> str | None:
        value = opts.get(key)
        return value.strip() if value is not None and value.strip() else default

    fields = {
        "gcs_endpoint": text("gcs.endpoint"),
        "gcs_bucket": text("gcs.bucket"),
        "gcs_prefix": opts.get("gcs.prefix", "gw/"),
        "gcs_name": text("gcs.name", "gcs"),
        "azure_connection_string": text("azure.connection.string"),
        "azure_container": text("azure.container"),
        "azure_prefix": opts.get("azure.prefix", "gw/"),
        "azure_name": text("azure.name", "azure"),
    }
    if (fields["azure_container"] is None) != (fields["azure_connection_string"] is None):
        raise ConfigurationError("azure.container and azure.connection.string go together")
    return fields


def build_cloud_stores(options: Any) -> dict[str, Store]:
    """The GCS and Azure stores named in ``options`` (an object with :func:`cloud_store_fields`' fields),
    opened in this process with clients of their own."""
    stores: dict[str, Store] = {}
    if options.gcs_bucket:
        from google.cloud import storage

        from stores import GCSStore

        if options.gcs_endpoint:
            from google.auth.credentials import AnonymousCredentials

            client = storage.Client(
                project="emulator",
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                client_options={"api_endpoint": options.gcs_endpoint},
            )
        else:
            client = storage.Client()
        stores[options.gcs_name] = GCSStore(
            client, bucket=options.gcs_bucket, prefix=options.gcs_prefix, name=options.gcs_name, close_client=True
        )
    if options.azure_container:
        from azure.storage.blob import BlobServiceClient

        from stores import AzureBlobStore

        stores[options.azure_name] = AzureBlobStore(
            BlobServiceClient.from_connection_string(options.azure_connection_string),
            container=options.azure_container,
            prefix=options.azure_prefix,
            name=options.azure_name,
            close_client=True,
        )
    return stores
