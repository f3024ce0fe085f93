"""The GCS and Azure Blob stores of the Spark reader, sink and reconcile (opened by :mod:`gateway.store_registry`)."""

from __future__ import annotations

from typing import Any

from gateway.store_registry import CLOUD_STORE_OPTIONS, cloud_store_fields
from gateway.store_registry import cloud_stores as build_cloud_stores


def cloud_store_names(options: Any) -> list[str]:
    """The names of the cloud stores the options configure."""
    return [
        name
        for name, configured in ((options.gcs_name, options.gcs_bucket), (options.azure_name, options.azure_container))
        if configured
    ]


__all__ = ["CLOUD_STORE_OPTIONS", "build_cloud_stores", "cloud_store_fields", "cloud_store_names"]
