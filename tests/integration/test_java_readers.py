"""What ``HybridProducer`` writes with ``reference.format=bakdata|aws``, read by those libraries' own Java readers.

tests/peerwriters' ``PointerReader`` (built from Maven Central) consumes the topic with bakdata's
``LargeMessageDeserializer`` or AWS's ``S3BackedPayloadStore`` and prints each record's SHA-256; every
size and route the producer takes (plain, what the policy would chunk, by reference, a forced reference)
must come back byte for byte, from S3 (moto), GCS (fake-gcs-server) and Azure Blob (Azurite). Our
own ``HybridConsumer`` reads the same records through its peer formats, under its confinement rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import LocatorTopicError
from gateway.protocol.peers.pointer_formats import written_for_pointer
from gateway.testing import KafkaService
from stores import AzureBlobStore, GCSStore, S3Store
from tests.google_endpoint import GoogleEndpoint

PEERS_DIR = Path(__file__).resolve().parents[1] / "peerwriters"
MB = 1_000_000
_NO_CLOUD = {
    "NO_GCE_CHECK": "true",
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "GCE_METADATA_IP": "127.0.0.1:9",
    "GOOGLE_CLOUD_PROJECT": "test",
    "GOOGLE_APPLICATION_CREDENTIALS": "",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
}


def _bytes(tag: str, size: int) -> bytes:
    seed = (tag.encode() * (size // len(tag) + 1))[:size]
    return bytes(b ^ (i * 31 % 251) for i, b in enumerate(seed))


def _text(tag: str, size: int) -> bytes:
    """UTF-8 of exactly ``size`` bytes, multi-byte characters included (AWS's reader reads text)."""
    unit = f"{tag} \u00e9t\u00e9 \u2603 ".encode()
    body = (unit * (size // len(unit) + 1))[:size]
    return body.decode("utf-8", "ignore").encode().ljust(size, b".")


@dataclass
class Target:
    """One store the producer writes to, and what the Java reader needs to reach it."""

    store: Any
    spec: dict[str, Any]
    jvm_options: list[str] = field(default_factory=list)


# (key, size, forced route): plain, what the policy would chunk (sent by reference), and by reference
CASES = [
    (b"small", 300, None),
    (b"one-mb", 1 * MB, None),
    (b"ten-mb", 10 * MB, None),
    (b"small-forced", 2_000, "reference:obj"),
]


def _produce(kafka: KafkaService, topic: str, fmt: str, store: Any) -> list[tuple[bytes, bytes]]:
    make = _text if fmt == "aws" else _bytes
    written = [(key, make(key.decode(), size)) for key, size, _ in CASES]
    producer = HybridProducer(
        {**kafka.producer_config(), "reference.format": fmt},
        policy=SizeThresholdPolicy(reference_above=5 * MB, store="obj"),
        stores={"obj": store},
    )
    with producer:
        for (key, value), (_, _, route) in zip(written, CASES, strict=True):
            producer.produce(topic, value, key=key, partition=0, route=route)
        assert producer.flush(60) == 0
    return written


def _java_read(kafka: KafkaService, topic: str, fmt: str, target: Target, tmp_path: Path) -> list[dict[str, Any]]:
    if not (PEERS_DIR / "target" / "lib").is_dir():
        pytest.fail("tests/peerwriters is not built: run `make peer-writers` (make test does)")
    spec = {"bootstrap": kafka.bootstrap_servers, "topic": topic, "format": fmt, "count": len(CASES), **target.spec}
    spec_file = tmp_path / f"reader-{uuid.uuid4().hex[:6]}.json"
    spec_file.write_text(json.dumps(spec))
    classpath = f"{PEERS_DIR / 'target' / 'classes'}{os.pathsep}{PEERS_DIR / 'target' / 'lib' / '*'}"
    done = subprocess.run(
        ["java", *target.jvm_options, "-cp", classpath, "gateway.peers.PointerReader", str(spec_file)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **_NO_CLOUD},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _digests(written: list[tuple[bytes, bytes]]) -> list[tuple[str, int, str]]:
    import base64

    return [(base64.b64encode(k).decode(), len(v), hashlib.sha256(v).hexdigest()) for k, v in written]


def _hybrid_read(kafka: KafkaService, topic: str, store: Any, fmt: str, count: int) -> list[tuple[Any, Any]]:
    conf = {**kafka.consumer_config(), "large.message.peer.formats": fmt}
    got: list[tuple[Any, Any]] = []
    with HybridConsumer(conf, stores={"obj": store}) as consumer:
        consumer.subscribe([topic])
        for _ in range(90):
            for msg in consumer.consume(20, 1.0):
                if msg.error() is not None:
                    raise msg.error()  # type: ignore[misc]
                got.append((msg.key(), msg.value()))
            if len(got) >= count:
                break
    return got


@pytest.fixture
def s3_target(s3_server: Any, s3_bucket: str, s3_prefix: str) -> Target:
    store = S3Store(s3_server.client(), bucket=s3_bucket, prefix=s3_prefix, name="obj")
    return Target(store, {"s3_endpoint": s3_server.endpoint_url, "bucket": s3_bucket})


@pytest.fixture
def gcs_target(gcs_server: Any, gcs_client: Any, gcs_bucket: str, s3_prefix: str, tmp_path: Path) -> Iterator[Target]:
    if gcs_server.external:
        pytest.skip("bakdata's reader reaches fake-gcs-server through a loopback proxy; GCS_ENDPOINT_URL is set")
    endpoint = GoogleEndpoint(gcs_server.port, tmp_path / "google")
    try:
        store = GCSStore(gcs_client, bucket=gcs_bucket, prefix=s3_prefix, name="obj")
        yield Target(store, {"gs_key_path": str(endpoint.key_path)}, endpoint.jvm_options())
    finally:
        endpoint.close()
    assert endpoint.refused == [], "bakdata's reader tried to reach somewhere else"


@pytest.fixture
def azure_target(azure_server: Any, azure_client: Any, azure_container: str, s3_prefix: str) -> Target:
    store = AzureBlobStore(azure_client, container=azure_container, prefix=s3_prefix, name="obj")
    return Target(store, {"abs_connection_string": azure_server.connection_string})


@pytest.mark.requires("java_clients")  # PointerReader runs Apache kafka-clients, which the mock cannot serve
@pytest.mark.parametrize(
    ("fmt", "where"),
    [("bakdata", "s3_target"), ("bakdata", "gcs_target"), ("bakdata", "azure_target"), ("aws", "s3_target")],
)
def test_java_readers_read_every_size_and_route_byte_for_byte(
    kafka: KafkaService, topic: str, fmt: str, where: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    target: Target = request.getfixturevalue(where)
    written = _produce(kafka, topic, fmt, target.store)
    lines = _java_read(kafka, topic, fmt, target, tmp_path)
    assert [(line["key_b64"], line["size"], line["sha256"]) for line in lines] == _digests(written)
    stored = sorted(locator for locator, _ in target.store.list_locators(topic))
    assert len(stored) == 3, stored  # 1 MB (not chunked), 10 MB and the forced one: by reference
    assert all(written_for_pointer(locator) for locator in stored)
    assert _hybrid_read(kafka, topic, target.store, fmt, len(CASES)) == written
    assert target.store.list_pending(2**62) == []  # acknowledged: the journal's marks are cleared


@pytest.mark.requires("java_clients")
def test_a_pointer_record_copied_to_another_topic_is_refused_by_our_consumer(
    kafka: KafkaService, topic: str, s3_target: Target
) -> None:
    """The topic binding holds for pointer records: their objects are named after the topic they were written for."""
    from confluent_kafka import Consumer, Producer

    _produce(kafka, topic, "bakdata", s3_target.store)
    raw = Consumer(
        {**kafka.consumer_config(), "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    raw.subscribe([topic])
    records: list[Any] = []
    for _ in range(60):
        records += [m for m in raw.consume(10, 1.0) if m.error() is None]
        if len(records) >= len(CASES):
            break
    raw.close()
    pointer = next(m for m in records if m.key() == b"ten-mb")
    other = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(other, partitions=1)
    copier = Producer(kafka.producer_config())
    copier.produce(other, pointer.value(), key=b"copied", headers=pointer.headers(), partition=0)
    copier.flush(30)
    with pytest.raises(LocatorTopicError, match="a payload this library wrote for topic"):
        _hybrid_read(kafka, other, s3_target.store, "bakdata", 1)


def test_gc_keeps_a_pending_object_whose_pointer_landed_and_deletes_the_one_never_pointed_at(
    kafka: KafkaService, topic: str, s3_target: Target
) -> None:
    """A producer killed between the acknowledgement and clearing the mark leaves a pending mark on a live object:
    gc must find its pointer record (not an envelope) and keep it, and still delete a write nothing points at."""
    from gateway.gc.sweeper import kafka_verifier, sweep
    from gateway.protocol.peers.pointer_formats import pointer_message_id

    store = s3_target.store
    producer = HybridProducer(
        {**kafka.producer_config(), "reference.format": "bakdata"},
        policy=SizeThresholdPolicy(reference_above=1_000, store="obj"),
        stores={"obj": store},
    )
    with producer:
        producer.produce(topic, _bytes("live", 5_000), key=b"live", partition=0)
        assert producer.flush(30) == 0
    [live] = [locator for locator, _ in store.list_locators(topic)]
    store.mark_pending(live, 0)  # as the killed producer left it
    dead = store.put(topic, pointer_message_id(uuid.uuid4()), b"never pointed at", pending_since_ms=0)
    report = sweep(
        {"obj": store}, grace_ms=0, verifier=kafka_verifier(kafka.client_conf(), timeout_s=60), dry_run=False
    )
    assert report.failed == [] and report.kept == [], report
    assert report.landed == [live] and report.deleted == [dead], report
    assert [locator for locator, _ in store.list_locators(topic)] == [live] and store.list_pending(2**62) == []
