"""Shared fixtures: real servers on loopback, started once per session and only when a test needs them.

The Kafka backend comes from ``KAFKA_TEST_BACKEND`` (``mock`` by default, see
:func:`gateway.testing.resolve_backend`). Tests declare the broker behaviour they depend on with
``@pytest.mark.requires("capability", ...)`` and are skipped, not failed, on a backend that cannot
provide it, because a local emulation lacking a feature says nothing about our code.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.store import Store
from gateway.testing import (
    CAPABILITIES,
    AzuriteServer,
    GCSServer,
    KafkaService,
    RedisClusterServer,
    RedisServer,
    S3Server,
    ServiceUnavailable,
    backend_capabilities,
    resolve_backend,
    spark_kafka_conf,
    start_kafka,
)
from tests.helpers import STREAM_PART_BYTES

# Backends whose absence is a property of the machine, not a bug: missing ones skip.
_OPTIONAL_BACKENDS = frozenset({"noida", "tansu"})

# Fixture name -> marker added to every test that (transitively) uses it, so that
# `pytest -m kafka` selects exactly the tests that cross a broker.
_AUTO_MARKERS = {
    "kafka": "kafka",
    "own_kafka": "kafka",
    "own_cluster": "kafka",
    "redis_server": "redis",
    "s3_server": "s3",
    "gcs_server": "gcs",
    "azure_server": "azure",
    "redis_cluster": "redis",
    "own_redis_cluster": "redis",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-skips",
        action="store_true",
        help="fail the run if any test was skipped (CI uses it on Apache Kafka, which has every capability)",
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("--no-skips"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        for report in skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
            print(f"\nSKIPPED where no skip is allowed: {report.nodeid}: {reason}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    try:
        resolve_backend()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc


def pytest_report_header(config: pytest.Config) -> str:
    backend = resolve_backend()
    return f"kafka backend: {backend} (capabilities: {', '.join(sorted(backend_capabilities(backend)))})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in _AUTO_MARKERS.items():
            if fixture in names:
                item.add_marker(getattr(pytest.mark, marker))
        for mark in item.iter_markers("requires"):
            unknown = [cap for cap in mark.args if cap not in CAPABILITIES]
            if unknown or not mark.args:
                raise pytest.UsageError(
                    f"{item.nodeid}: @requires{mark.args!r} names unknown capabilities {unknown};"
                    f" known: {', '.join(sorted(CAPABILITIES))}"
                )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip on missing capabilities before any fixture runs, so no broker starts for a skipped test."""
    needed = [cap for mark in item.iter_markers("requires") for cap in mark.args]
    if not needed:
        return
    backend = resolve_backend()
    have = backend_capabilities(backend)
    for cap in needed:
        if cap not in have:
            pytest.skip(f"backend {backend!r} lacks capability {cap!r}")


# --------------------------------------------------------------------------------------------
# Kafka


@pytest.fixture(scope="session")
def kafka_backend() -> str:
    """The backend name, known without starting anything."""
    return resolve_backend()


@pytest.fixture(scope="session")
def kafka(kafka_backend: str) -> Iterator[KafkaService]:
    """The session's Kafka cluster (mock, noida, tansu or external), stopped at session end."""
    try:
        service = start_kafka(kafka_backend)
    except ServiceUnavailable as exc:
        if kafka_backend in _OPTIONAL_BACKENDS:
            pytest.skip(exc.reason)
        raise
    with service:
        yield service


@pytest.fixture
def topic(kafka: KafkaService) -> Iterator[str]:
    """A fresh one-partition topic; tests needing more partitions create their own."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(name, partitions=1)
    yield name
    try:
        kafka.delete_topic(name)  # frees broker memory; each backend knows what it can do
    except Exception as exc:  # teardown must not mask the test's own outcome
        warnings.warn(f"could not delete topic {name}: {exc}", stacklevel=1)


@pytest.fixture
def producer_config(kafka: KafkaService) -> dict[str, Any]:
    """A fresh producer config dict with ``message.max.bytes`` set explicitly."""
    return kafka.producer_config()


@pytest.fixture
def consumer_config(kafka: KafkaService) -> Callable[..., dict[str, Any]]:
    """``consumer_config(group=None, **overrides)``: a fresh group each call unless one is named."""

    def make(group: str | None = None, **overrides: Any) -> dict[str, Any]:
        return kafka.consumer_config(group, **overrides)

    return make


# --------------------------------------------------------------------------------------------
# Redis


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server child process for the session (or ``REDIS_URL``)."""
    server = RedisServer()
    try:
        server.start()
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[Any]:
    """A client on an emptied database (FLUSHDB: only the URL's database, even when external)."""
    client = redis_server.client()
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServer]:
    """A Redis Cluster of three masters and three replicas for the session; tests must not kill its nodes."""
    with _cluster_or_skip() as cluster:
        yield cluster


@pytest.fixture
def redis_cluster_client(redis_cluster: RedisClusterServer) -> Iterator[Any]:
    """A ``RedisCluster`` client on an emptied cluster (FLUSHALL on every master)."""
    redis_cluster.flushall()
    client = redis_cluster.client()
    yield client
    client.close()


@pytest.fixture
def own_redis_cluster() -> Iterator[RedisClusterServer]:
    """A cluster of this test's own, for tests that kill nodes (about 7 s to start)."""
    with _cluster_or_skip() as cluster:
        yield cluster


def _cluster_or_skip() -> RedisClusterServer:
    cluster = RedisClusterServer()
    try:
        return cluster.start()
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)


# --------------------------------------------------------------------------------------------
# S3


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto_server child process for the session (or ``S3_ENDPOINT_URL``)."""
    server = S3Server()
    try:
        server.start()
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with server:
        yield server


@pytest.fixture(scope="session")
def s3_client(s3_server: S3Server) -> Any:
    """One boto3 S3 client for the session (boto3 clients are thread-safe and stateless)."""
    return s3_server.client()


@pytest.fixture(scope="session")
def s3_run_prefix() -> str:
    """A key prefix unique to this run, so runs sharing an external bucket never see each other."""
    return f"gw-test-{uuid.uuid4().hex[:8]}/"


@pytest.fixture
def s3_prefix(s3_run_prefix: str) -> str:
    """A key prefix unique to this test."""
    return f"{s3_run_prefix}{uuid.uuid4().hex[:8]}/"


@pytest.fixture(params=["redis", "s3", "gcs", "azure"])
def streaming_store(request: pytest.FixtureRequest, s3_prefix: str) -> Store:
    """Each store that writes a payload as a stream, on its real server, in parts of ``STREAM_PART_BYTES``.

    Redis keeps entries of 1 MiB, unlike the part size: a reader must take the entry size from the locator.
    """
    from stores import AzureBlobStore, GCSStore, RedisStore, S3Store

    part, kind = STREAM_PART_BYTES, request.param
    if kind == "redis":
        return RedisStore(
            request.getfixturevalue("redis_client"), prefix=f"gw{uuid.uuid4().hex[:6]}", entry_bytes=1 << 20
        )
    if kind == "s3":
        client, bucket = request.getfixturevalue("s3_client"), request.getfixturevalue("s3_bucket")
        return S3Store(client, bucket=bucket, prefix=s3_prefix, multipart_chunk_bytes=part)
    if kind == "gcs":
        client, bucket = request.getfixturevalue("gcs_client"), request.getfixturevalue("gcs_bucket")
        return GCSStore(client, bucket=bucket, prefix=s3_prefix, part_bytes=part)
    client, container = request.getfixturevalue("azure_client"), request.getfixturevalue("azure_container")
    return AzureBlobStore(client, container=container, prefix=s3_prefix, part_bytes=part)


@pytest.fixture
def s3_bucket(s3_server: S3Server, s3_client: Any, s3_run_prefix: str) -> Iterator[str]:
    """A bucket for one test: a fresh one locally, the configured ``S3_BUCKET`` when external.

    Against a shared external bucket, only objects under this run's prefix are removed afterwards;
    tests writing there should put their keys under ``s3_prefix``.
    """
    if s3_server.bucket is not None:
        yield s3_server.bucket
        _empty(s3_client, s3_server.bucket, s3_run_prefix)
        return
    name = s3_server.create_bucket(f"gw-test-{uuid.uuid4().hex[:16]}")
    yield name
    with contextlib.suppress(Exception):
        _empty(s3_client, name, "")
        s3_client.delete_bucket(Bucket=name)


def _empty(client: Any, bucket: str, prefix: str) -> None:
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


# --------------------------------------------------------------------------------------------
# GCS and Azure Blob


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSServer]:
    """fake-gcs-server for the session (built by ``make emulators``), or ``GCS_ENDPOINT_URL``."""
    server = GCSServer()
    try:
        server.start()
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with server:
        yield server


@pytest.fixture(scope="session")
def gcs_client(gcs_server: GCSServer) -> Any:
    return gcs_server.client()


@pytest.fixture
def gcs_bucket(gcs_server: GCSServer, gcs_client: Any, s3_run_prefix: str) -> Iterator[str]:
    """A fresh bucket locally; the configured ``GCS_BUCKET`` (emptied under this run's prefix) when external."""
    if gcs_server.bucket is not None:
        yield gcs_server.bucket
        for blob in gcs_client.list_blobs(gcs_server.bucket, prefix=s3_run_prefix):
            blob.delete()
        return
    name = gcs_server.create_bucket(f"gw-test-{uuid.uuid4().hex[:16]}")
    yield name
    with contextlib.suppress(Exception):
        bucket = gcs_client.bucket(name)
        for blob in gcs_client.list_blobs(name):
            blob.delete()
        bucket.delete()


@pytest.fixture(scope="session")
def azure_server() -> Iterator[AzuriteServer]:
    """Azurite's blob service for the session (``make emulators``), or ``AZURE_STORAGE_CONNECTION_STRING``."""
    server = AzuriteServer()
    try:
        server.start()
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with server:
        yield server


@pytest.fixture(scope="session")
def azure_client(azure_server: AzuriteServer) -> Any:
    return azure_server.client()


@pytest.fixture
def azure_container(azure_server: AzuriteServer, azure_client: Any, s3_run_prefix: str) -> Iterator[str]:
    """A fresh container locally; the configured ``AZURE_CONTAINER`` (emptied under this run's prefix) when external."""
    if azure_server.container is not None:
        yield azure_server.container
        container = azure_client.get_container_client(azure_server.container)
        for blob in container.list_blobs(name_starts_with=s3_run_prefix):
            container.delete_blob(blob.name)
        return
    name = azure_server.create_container(f"gw-test-{uuid.uuid4().hex[:16]}")
    yield name
    with contextlib.suppress(Exception):
        azure_client.delete_container(name)


# --------------------------------------------------------------------------------------------
# Spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the run (starting one costs 8-18 s), shared by every Spark test.

    Spark's own Kafka source goes on it whenever ``make spark-kafka`` fetched it: jars can only be
    given before the JVM starts, and every module's session is this one (``getOrCreate``).
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from gateway.spark import local_session, register

    try:
        conf = spark_kafka_conf()
    except ServiceUnavailable:
        conf = {}  # only the tests that compare with Spark's source need it; they fail with the reason
    session = local_session("local[2]", app_name="gateway-tests", conf=conf)
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
