"""The Spark sink and reader, and reconcile, on the GCS and Azure Blob stores (executors open their own clients)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gateway.testing import KafkaService
from stores import AzureBlobStore, GCSStore
from stores.blob import BlobStore
from tests.helpers import payload, sha

SIZES = [300, 1_500_000, 3_000_000]


@pytest.fixture(params=["gcs", "azure"])
def cloud(request: pytest.FixtureRequest, s3_prefix: str) -> tuple[BlobStore, dict[str, str]]:
    """A store of each cloud on its emulator, and the Spark options that name the same place."""
    if request.param == "gcs":
        server, bucket = request.getfixturevalue("gcs_server"), request.getfixturevalue("gcs_bucket")
        store: BlobStore = GCSStore(request.getfixturevalue("gcs_client"), bucket=bucket, prefix=s3_prefix)
        options = {"gcs.bucket": bucket, "gcs.prefix": s3_prefix}
        if not server.external:
            options["gcs.endpoint"] = server.endpoint_url
        return store, options
    server, container = request.getfixturevalue("azure_server"), request.getfixturevalue("azure_container")
    store = AzureBlobStore(request.getfixturevalue("azure_client"), container=container, prefix=s3_prefix)
    return store, {
        "azure.container": container,
        "azure.prefix": s3_prefix,
        "azure.connection.string": server.connection_string,
    }


def test_the_sink_writes_by_reference_and_the_reader_and_reconcile_read_it_back(
    spark: Any, kafka: KafkaService, cloud: tuple[BlobStore, dict[str, str]]
) -> None:
    store, store_options = cloud
    topic = f"cloud-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=1)
    rows = [(f"k{i}".encode(), payload(size, i)) for i, size in enumerate(SIZES)]
    (
        spark.createDataFrame(rows, "key binary, value binary")
        .write.format("hybrid-kafka")
        .mode("append")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", topic)
        .option("reference.above", "1000000")
        .options(**store_options)
        .save()
    )
    assert len(list(store.list_locators(topic))) == 2, "the two rows above 1 MB went to the store"
    frame = (
        spark.read.format("hybrid-kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .options(**store_options)
        .load()
    )
    got = {
        bytes(r["key"]): (sha(bytes(r["value"])), r["route"]) for r in frame.select("key", "value", "route").collect()
    }
    assert got == {k: (sha(v), "reference" if len(v) > 1_000_000 else "plain") for k, v in rows}

    from gateway.spark.reconcile import reconcile

    orphan = store.put(topic, uuid.uuid4(), b"no envelope names me")
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic, **store_options}
    report = reconcile(spark, options, grace_seconds=0, delete=True, now_ms=2**62)
    assert orphan in report.deleted, report
    assert len(list(store.list_locators(topic))) == 2, "the live payloads stay"
