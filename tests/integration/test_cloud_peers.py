"""bakdata's gs:// and abs:// pointers, written by bakdata's own serde (tests/peerwriters, from Maven Central) into
fake-gcs-server and Azurite, read back byte-identical through a GCSStore and an AzureBlobStore.

bakdata's Google client, left at its defaults, reaches fake-gcs-server through a loopback proxy that
answers for Google's hosts only (tests/google_endpoint.py); Google's credential lookup is told not to
probe for a cloud metadata server, so nothing leaves the machine. Azurite gets bakdata's own setting,
``large.message.abs.connection.string``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import EnvelopePayloadError, LocatorError, LocatorTopicError
from gateway.protocol.peers import BAKDATA_VALUE_HEADER
from gateway.testing import AzuriteServer, KafkaService
from stores import AzureBlobStore, GCSStore
from tests.google_endpoint import GoogleEndpoint
from tests.helpers import consume_all
from tests.kafkautil import produce_records

PEERS_DIR = Path(__file__).resolve().parents[1] / "peerwriters"
_NO_CLOUD = {
    "NO_GCE_CHECK": "true",
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "GCE_METADATA_IP": "127.0.0.1:9",
    "GOOGLE_CLOUD_PROJECT": "test",
    "GOOGLE_APPLICATION_CREDENTIALS": "",
}


def _payload(tag: str, size: int) -> bytes:
    seed = (tag.encode() * (size // len(tag) + 1))[:size]
    return bytes(b ^ (i * 31 % 251) for i, b in enumerate(seed))


def _write_bakdata(
    spec: dict[str, Any], env: dict[str, str], tmp_path: Path, *, jvm_options: list[str] | None = None
) -> None:
    if not (PEERS_DIR / "target" / "lib").is_dir():
        pytest.fail("tests/peerwriters is not built: run `make peer-writers` (make test does)")
    spec_file = tmp_path / f"bakdata-{uuid.uuid4().hex[:6]}.json"
    spec_file.write_text(json.dumps(spec))
    classpath = f"{PEERS_DIR / 'target' / 'classes'}{os.pathsep}{PEERS_DIR / 'target' / 'lib' / '*'}"
    done = subprocess.run(
        ["java", *(jvm_options or []), "-cp", classpath, "gateway.peers.BakdataWriter", str(spec_file)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **_NO_CLOUD, **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]


CASES = [  # (key, value, use_headers, compression)
    (b"inline", _payload("inline", 500), True, "none"),
    (b"flag-backed", _payload("flag-backed", 3_000_000), False, "none"),
    (b"hdr-zstd", _payload("hdr-zstd", 2_000_000), True, "zstd"),
    (b"hdr-gzip", _payload("hdr-gzip", 1_000_000), True, "gzip"),
]


def _spec(kafka: KafkaService, topic: str, base_path: str, **extra: str) -> dict[str, Any]:
    records = [
        {
            "partition": 0,
            "key_b64": base64.b64encode(key).decode(),
            "value_b64": base64.b64encode(value).decode(),
            "use_headers": headers,
            "compression": codec,
            "max_byte_size": 10_000,
        }
        for key, value, headers, codec in CASES
    ]
    return {"bootstrap": kafka.bootstrap_servers, "topic": topic, "base_path": base_path, "records": records, **extra}


def _read(kafka: KafkaService, topic: str, stores: dict[str, Any], count: int) -> list[tuple[Any, Any]]:
    conf = {**kafka.consumer_config(), "large.message.peer.formats": "bakdata", "large.message.peer.bakdata.keys": True}
    got: list[tuple[Any, Any]] = []
    with HybridConsumer(conf, stores=stores) as consumer:
        consumer.subscribe([topic])
        for _ in range(60):
            for msg in consumer.consume(20, 1.0):
                assert msg.error() is None, msg.error()
                got.append((msg.key(), msg.value()))
            if len(got) >= count:
                break
    return got


@pytest.mark.requires("java_clients")
def test_bakdata_gs_records_read_back_byte_identical(
    kafka: KafkaService, topic: str, gcs_server: Any, gcs_client: Any, gcs_bucket: str, tmp_path: Path
) -> None:
    """gs:// records written by bakdata's own serde, its Google client at its defaults (tests/google_endpoint.py)."""
    if gcs_server.external:
        pytest.skip("bakdata's writer reaches fake-gcs-server through a loopback proxy; GCS_ENDPOINT_URL is set")
    endpoint = GoogleEndpoint(gcs_server.port, tmp_path / "google")
    try:
        spec = _spec(kafka, topic, f"gs://{gcs_bucket}/bakdata/", gs_key_path=str(endpoint.key_path))
        _write_bakdata(spec, {}, tmp_path, jvm_options=endpoint.jvm_options())
    finally:
        endpoint.close()
    assert endpoint.refused == [], "bakdata's writer tried to reach somewhere else"
    written = [blob.name for blob in gcs_client.list_blobs(gcs_bucket, prefix="bakdata/")]
    assert len(written) == 3, written  # the three values over max_byte_size, in bakdata's own layout
    store = GCSStore(gcs_client, bucket=gcs_bucket, prefix="bakdata/", name="peers")
    assert _read(kafka, topic, {"peers": store}, len(CASES)) == [(k, v) for k, v, *_ in CASES]
    assert store.metrics()["gets"] == 3, "the three stored values, through the store"
    elsewhere = GCSStore(gcs_client, bucket=gcs_bucket, prefix="other/", name="peers")
    with pytest.raises(LocatorError, match="outside every configured store"):
        _read(kafka, topic, {"peers": elsewhere}, len(CASES))
    assert elsewhere.metrics().get("gets", 0) == 0, "confined: no request outside the prefix"


@pytest.mark.requires("java_clients")
def test_bakdata_abs_records_read_back_byte_identical(
    kafka: KafkaService,
    topic: str,
    azure_server: AzuriteServer,
    azure_client: Any,
    azure_container: str,
    tmp_path: Path,
) -> None:
    spec = _spec(
        kafka, topic, f"abs://{azure_container}/bakdata/", abs_connection_string=azure_server.connection_string
    )
    _write_bakdata(spec, {}, tmp_path)
    store = AzureBlobStore(azure_client, container=azure_container, prefix="bakdata/", name="peers")
    assert _read(kafka, topic, {"peers": store}, len(CASES)) == [(k, v) for k, v, *_ in CASES]
    assert store.metrics()["gets"] == 3
    # a GCS store of the same bucket name and prefix is not where an abs:// pointer leads
    with pytest.raises(LocatorError, match="an AzureBlobStore"):
        _read(kafka, topic, {"peers": _same_named_gcs(azure_container)}, len(CASES))


def _same_named_gcs(bucket: str) -> GCSStore:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="t", credentials=AnonymousCredentials(), client_options={"api_endpoint": "http://127.0.0.1:9"}
    )
    return GCSStore(client, bucket=bucket, prefix="bakdata/", name="peers")


@pytest.mark.parametrize("cloud", ["gs", "abs"])
def test_bakdata_pointers_to_our_cloud_objects_get_our_envelopes_confinement(
    request: pytest.FixtureRequest, kafka: KafkaService, topic: str, cloud: str
) -> None:
    """bakdata's gs:// and abs:// pointers (header and byte flag) naming the object our producer wrote into a
    GCSStore or AzureBlobStore for ``topic``: in another topic ``LocatorTopicError``, in ``topic`` itself
    ``EnvelopePayloadError``, each carrying its record; the store's metadata tells the object is ours."""
    if cloud == "gs":
        client, bucket = request.getfixturevalue("gcs_client"), request.getfixturevalue("gcs_bucket")
        prefix = f"{request.getfixturevalue('s3_run_prefix')}gw/"
        store: Any = GCSStore(client, bucket=bucket, prefix=prefix, name="cloud")
        listed = lambda: {b.name for b in client.list_blobs(bucket, prefix=f"{prefix}{topic}/")}  # noqa: E731
    else:
        client, bucket = request.getfixturevalue("azure_client"), request.getfixturevalue("azure_container")
        prefix = f"{request.getfixturevalue('s3_run_prefix')}gw/"
        store = AzureBlobStore(client, container=bucket, prefix=prefix, name="cloud")
        container = client.get_container_client(bucket)
        listed = lambda: {b.name for b in container.list_blobs(name_starts_with=f"{prefix}{topic}/")}  # noqa: E731
    with HybridProducer(
        kafka.producer_config(), policy=SizeThresholdPolicy(reference_above=100, store="cloud"), stores={"cloud": store}
    ) as producer:
        producer.produce(topic, b"topic's own payload " * 20, partition=0)
        assert producer.flush(30) == 0
    (key,) = listed()
    uri = f"{cloud}://{bucket}/{key}".encode()
    other = f"other-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(other, partitions=1)
    try:
        records = [
            {"partition": 0, "value": uri, "headers": [(BAKDATA_VALUE_HEADER, b"\x01")]},
            {"partition": 0, "value": b"\x01" + uri},
            {"partition": 0, "value": b"after"},
        ]
        for into in (other, topic):
            produce_records(kafka.producer_config(), [{**r, "topic": into} for r in records])
        results = {}
        for into in (other, topic):
            conf = {**kafka.consumer_config(), "large.message.peer.formats": "bakdata"}
            consumer = HybridConsumer(conf, stores={"cloud": store})
            consumer.assign([TopicPartition(into, 0, OFFSET_BEGINNING)])
            try:
                results[into] = consume_all(consumer, 4 if into == topic else 3, timeout=60)
            finally:
                consumer.close()
    finally:
        kafka.delete_topic(other)
    got, errors = results[other]
    assert [type(e) for e in errors] == [LocatorTopicError] * 2 and [m.value() for m in got] == [b"after"]
    assert [e.kafka_message.offset() for e in errors if e.kafka_message is not None] == [0, 1]
    got, errors = results[topic]
    assert [type(e) for e in errors] == [EnvelopePayloadError] * 2
    assert [m.value() for m in got] == [b"topic's own payload " * 20, b"after"]
