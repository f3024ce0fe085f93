"""GCSStore and AzureBlobStore end to end on their emulators: Kafka round trips, rollback, gc, and what only
these stores do (ranged parallel reads, parts, confinement of peers' objects, typed errors).

The Store contract itself runs on them in ``test_store_contract.py``.
"""

from __future__ import annotations

import time
import tracemalloc
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.response import HTTPResponse

from gateway import HybridConsumer, HybridProducer, SizeThresholdPolicy
from gateway.errors import LocatorError, PayloadIntegrityError, StoreUnavailableError
from gateway.gc.sweeper import kafka_verifier, sweep
from gateway.testing import KafkaService, free_port
from gateway.testing.cloud_emulators import AZURITE_ACCOUNT, AZURITE_KEY
from stores import AzureBlobStore, GCSStore
from stores.azure._backend import READ_BLOCK_BYTES
from stores.blob import BlobStore
from tests.helpers import consume_all, payload, sha
from tests.kafkautil import read_partition

MiB = 1024 * 1024
KINDS = ["gcs", "azure"]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(kind: str, request: pytest.FixtureRequest, s3_prefix: str) -> Any:
    """``make_store(**options)``: a store of this kind in a fresh bucket or container, under a fresh prefix."""
    if kind == "gcs":
        client, bucket = request.getfixturevalue("gcs_client"), request.getfixturevalue("gcs_bucket")
        return lambda **kw: GCSStore(client, bucket=bucket, **{"prefix": s3_prefix, **kw})
    client, container = request.getfixturevalue("azure_client"), request.getfixturevalue("azure_container")
    return lambda **kw: AzureBlobStore(client, container=container, **{"prefix": s3_prefix, **kw})


@pytest.fixture
def store(make_store: Any) -> BlobStore:
    return make_store()  # type: ignore[no-any-return]


def objects(store: BlobStore) -> list[str]:
    """Every key under the store's prefix, markers included, as the cloud lists them."""
    return [entry.key for entry in store.backend.list(store.prefix)]


def round_trip(kafka: KafkaService, topic: str, consumer_config: Any, store: BlobStore, sizes: list[int]) -> None:
    stores = {store.name: store}
    producer = HybridProducer(
        kafka.producer_config(), policy=SizeThresholdPolicy(reference_above=0, store=store.name), stores=stores
    )
    reports: list[Any] = []
    for i, size in enumerate(sizes):
        producer.produce(topic, payload(size, i), key=f"r{i}".encode(), on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(120) == 0
    assert reports == [None] * len(sizes)
    assert store.list_pending(2**62) == [], "acknowledged writes are no longer pending"
    raw = read_partition(consumer_config(), topic, 0, len(sizes))
    assert all(len(m.value()) < 1024 for m in raw), "the Kafka record is the envelope only"
    consumer = HybridConsumer(consumer_config(), stores=stores)
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, len(sizes), timeout=120)
    consumer.close()
    producer.close()
    assert not errors
    assert [sha(m.value()) for m in got] == [sha(payload(s, i)) for i, s in enumerate(sizes)]
    assert [m.key() for m in got] == [f"r{i}".encode() for i in range(len(sizes))]
    assert len([k for k in objects(store) if not k.startswith(store.pending_prefix)]) == len(sizes)


def test_100_bytes_to_50_mb_round_trip(kafka: KafkaService, topic: str, consumer_config: Any, store: BlobStore) -> None:
    """50 MB crosses both thresholds: a resumable (GCS) or block (Azure) upload, and ranged parallel reads."""
    round_trip(kafka, topic, consumer_config, store, [100, 1_000_000, 50_000_000])


@pytest.mark.slow
def test_200_mb_round_trip(kafka: KafkaService, topic: str, consumer_config: Any, store: BlobStore) -> None:
    round_trip(kafka, topic, consumer_config, store, [200_000_000])


def test_rollback_leaves_no_object(kafka: KafkaService, topic: str, store: BlobStore) -> None:
    producer = HybridProducer({**kafka.producer_config(), "message.timeout.ms": 5000}, stores={store.name: store})
    errors: list[Any] = []
    try:
        route = f"reference:{store.name}"
        producer.produce(topic, payload(3_000_000), partition=9, route=route, on_delivery=lambda e, m: errors.append(e))
    except Exception as exc:  # librdkafka may refuse the partition synchronously once metadata is known
        errors.append(exc)
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    assert store.list_pending(2**62) == [], "nothing pending"
    assert [k for k in objects(store) if not k.endswith(".batch")] == [], "no object"
    producer.close()
    assert objects(store) == [], "the open batch's marker goes with the producer: 0 objects"
    # the brokers know the topic: refused in produce before the store write (issue 38.7), nothing to roll back
    assert isinstance(errors[0], KafkaException) and errors[0].args[0].code() == KafkaError._UNKNOWN_PARTITION
    assert producer.metrics()["rollbacks"] == 0


def test_gc_settles_a_dead_producers_batch_and_removes_the_orphans(
    kafka: KafkaService, topic: str, make_store: Any
) -> None:
    """Two messages landed, one payload never got its envelope, one id was never used; the producer died."""
    store = make_store(journal_batch=4, journal_open_ms=60_000)
    producer = HybridProducer(kafka.producer_config(), stores={store.name: store})
    for i in range(2):
        producer.produce(topic, payload(5000, i), key=b"k", route=f"reference:{store.name}")
    assert producer.flush(30) == 0
    live = sorted(loc for loc, _ in store.list_locators(topic))
    dead = store.put(topic, store.next_message_id(topic, 0), b"never enveloped", pending_since_ms=0)
    gc_store = make_store()
    later = int(time.time() * 1000) + 70_000
    report = sweep(
        {store.name: gc_store}, grace_ms=0, now_ms=later, verifier=kafka_verifier(kafka.client_conf()), dry_run=False
    )
    assert report.failed == [] and report.kept == [], report
    assert sorted(report.landed) == live, report
    assert dead in report.deleted and len(report.deleted) == 2, "the orphan, and the id never used"
    assert sorted(loc for loc, _ in gc_store.list_locators(topic)) == live
    assert [k for k in objects(gc_store) if k.startswith(gc_store.pending_prefix)] == [], "the marker went too"


def test_large_payloads_go_in_parts_and_come_back_in_ranges_with_bounded_memory(make_store: Any) -> None:
    """64 MiB in 8 MiB parts, 4 at a time: a write holds at most the parts in flight, never a copy of the
    payload; a read holds the value and at most a part per thread."""
    store = make_store(multipart_threshold=16 * MiB, parallel_read_bytes=16 * MiB, part_bytes=8 * MiB)
    data = payload(64 * MiB)
    tracemalloc.start()
    try:
        locator = store.put("big", uuid.uuid4(), data)
        _, put_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        got = store.get(locator, expected_size=len(data))
        _, get_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sha(got) == sha(data)
    # the parts being sent, the one being read, and 1 MiB for the SDK's requests and responses (CI once saw
    # 40.15 MiB on Azure); a copy of the payload would be 64 MiB more
    parts_in_flight = (store.max_concurrency + 1) * 8 * MiB + 1 * MiB
    assert put_peak < parts_in_flight, f"put held {put_peak / MiB:.1f} MiB: more than the parts in flight"
    # an Azure range arrives in blocks copied into place (stores.azure._backend): a block or two per thread
    per_thread = 0 if isinstance(store, GCSStore) else 2 * READ_BLOCK_BYTES
    bound = len(data) + store.max_concurrency * per_thread + 8 * MiB
    assert get_peak < bound, f"get held {get_peak / MiB:.0f} MiB: more than the value and the requests in flight"


def test_a_payload_below_the_parallel_size_is_one_request_read_in_large_blocks(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 MB in one GET whose body comes in a few large reads, not the SDKs' 4-8 KiB pieces (twice the CPU
    of the raw client under the consumer's fetch-ahead threads, issue 42), and on Azure not in 2 MiB
    requests, nor held nine times over as the SDK's downloader holds a response while it joins it, and on
    GCS not copied out of the one read into a BytesIO."""
    store = make_store()
    data = payload(10_000_000)
    locator = store.put("one", uuid.uuid4(), data)
    sent: list[str] = []
    reads = [0]
    urlopen, read = HTTPConnectionPool.urlopen, HTTPResponse.read

    def counted_urlopen(pool: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(method)
        return urlopen(pool, method, url, *args, **kwargs)

    def counted_read(response: Any, *args: Any, **kwargs: Any) -> Any:
        reads[0] += 1
        return read(response, *args, **kwargs)

    monkeypatch.setattr(HTTPConnectionPool, "urlopen", counted_urlopen)
    monkeypatch.setattr(HTTPResponse, "read", counted_read)
    tracemalloc.start()
    try:
        got = store.get(locator, expected_size=len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sha(got) == sha(data)
    assert sent == ["GET"], "one request, no metadata request and no 2 MiB ranges"
    assert reads[0] <= len(data) // READ_BLOCK_BYTES + 3, f"the body came in {reads[0]} reads"
    # the value, and room for a block read twice (urllib3 reads it into a buffer of its own first) and the
    # SDK's request; a copy of the value (GCS's BytesIO, Azure's joined 2 MiB requests) would be 9.5 MiB more
    bound = len(data) + 3 * READ_BLOCK_BYTES
    assert peak < bound, f"held {peak / MiB:.1f} MiB for a {len(data) / MiB:.1f} MiB payload"


def test_a_larger_object_than_the_envelope_says_is_refused_without_reading_it(store: BlobStore) -> None:
    locator = store.put("t", uuid.uuid4(), payload(3 * MiB))
    with pytest.raises(PayloadIntegrityError, match="more than"):
        store.get(locator, expected_size=1000)
    with pytest.raises(PayloadIntegrityError):
        store.get(locator, expected_size=30 * MiB)  # the size is checked before the ranged reads


def test_peer_objects_are_read_only_inside_the_bucket_and_prefix(store: BlobStore) -> None:
    key = f"{store.prefix}peer/object"
    store.backend.put(key, memoryview(b"written by a peer"), {}, large=False)
    assert store.get_object(key, 100) == (b"written by a peer", None)
    with pytest.raises(PayloadIntegrityError):
        store.get_object(key, 5)
    for outside in ("elsewhere/object", f"{store.prefix}../escape", f"{store.prefix}a/./b"):
        assert not store.holds_object(store.bucket, outside)
        with pytest.raises(LocatorError):
            store.get_object(outside, 100)
    assert not store.holds_object("another-bucket", key)


def test_an_unreachable_endpoint_is_unavailable_and_typed(kind: str) -> None:
    """What the producer's policy falls back on: StoreUnavailableError, quickly, for a dead endpoint."""
    port = free_port()
    store: BlobStore
    if kind == "gcs":
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(
            project="t", credentials=AnonymousCredentials(), client_options={"api_endpoint": f"http://127.0.0.1:{port}"}
        )
        store = GCSStore(client, bucket="nobody-home", retry_deadline_s=2.0)
    else:
        from azure.storage.blob import BlobServiceClient

        conn = (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
        )
        store = AzureBlobStore(BlobServiceClient.from_connection_string(conn, retry_total=0), container="nobody-home")
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        store.put("t", uuid.uuid4(), b"x", pending_since_ms=1)
    with pytest.raises(StoreUnavailableError):
        store.get(store.locator_for("t", uuid.uuid4()), expected_size=1)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("codec", ["zstd", "lz4", "gzip"])
def test_compressed_payloads_round_trip_and_the_store_keeps_fewer_bytes(
    kafka: KafkaService, topic: str, consumer_config: Any, store: BlobStore, codec: str
) -> None:
    """reference.compression: the store keeps the compressed bytes, the consumer hands out the application's."""
    text = b"".join(b'{"order": %d, "customer": "c-%d", "lines": [1, 2, 3]}\n' % (i, i % 97) for i in range(100_000))
    stores = {store.name: store}
    conf = {**kafka.producer_config(), "reference.compression": codec}
    with HybridProducer(conf, policy=SizeThresholdPolicy(reference_above=0, store=store.name), stores=stores) as p:
        p.produce(topic, text, key=b"k")
        assert p.flush(60) == 0
    [(locator, _)] = list(store.list_locators(topic))
    stored = store.backend.get(store.validate_locator(locator).key, None)
    assert len(stored) < len(text) / 5, f"{codec}: {len(stored)} stored bytes for {len(text)}"
    consumer = HybridConsumer(consumer_config(), stores=stores)
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 1, timeout=60)
    consumer.close()
    assert not errors and [m.value() for m in got] == [text]


def test_gateway_aio_round_trips_and_rolls_back_through_the_store(
    kafka: KafkaService, topic: str, store: BlobStore
) -> None:
    """AIOHybridProducer/AIOHybridConsumer over the blocking store (run in their executor), compressed too."""
    import asyncio

    from gateway.aio import AIOHybridConsumer, AIOHybridProducer

    sizes = {b"small": 2_000, b"large": 20_000_000}
    stores = {store.name: store}
    policy = SizeThresholdPolicy(reference_above=0, store=store.name)

    async def main() -> None:
        conf = {**kafka.producer_config(), "reference.compression": "zstd"}
        async with AIOHybridProducer(conf, policy=policy, stores=stores) as producer:
            delivered = await asyncio.gather(*(producer.produce(topic, payload(n), key) for key, n in sizes.items()))
            assert all(m.error() is None for m in delivered)
            with pytest.raises(KafkaException):
                await producer.produce(topic, payload(1_000), b"refused", partition=7)
        consumer = AIOHybridConsumer(kafka.consumer_config(), stores=stores)
        await consumer.subscribe([topic])
        got: list[Any] = []
        for _ in range(60):
            got += await consumer.consume(10, 1.0)
            if len(got) >= len(sizes):
                break
        await consumer.close()
        assert {m.key(): sha(m.value()) for m in got} == {k: sha(payload(n)) for k, n in sizes.items()}

    asyncio.run(main())
    assert len(list(store.list_locators(topic))) == len(sizes), "the refused write was rolled back"


def test_a_payload_is_hashed_once_for_its_envelope_and_the_store_adds_no_pass(
    kafka: KafkaService,
    topic: str,
    consumer_config: Any,
    make_store: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 42.3: the envelope's BLAKE3 is the one digest of a payload; GCS and Azure add no SHA-256 of their own
    (the consumer verifies the envelope's digest), unless ``object_sha256`` asks for the metadata entry."""
    import gateway.producer.reference.digests as digests
    import stores.blob._store as blob_store

    passes: list[str] = []
    digest_of, sha256 = digests.digest_of, blob_store.hashlib.sha256

    def counted_digest(checksum: int, data: Any) -> bytes:
        passes.append(f"envelope {checksum}")
        return digest_of(checksum, data)

    class CountingHashlib:
        @staticmethod
        def sha256(data: Any) -> Any:
            passes.append("store sha256")
            return sha256(data)

    monkeypatch.setattr(digests, "digest_of", counted_digest)
    monkeypatch.setattr(blob_store, "hashlib", CountingHashlib)
    values = [payload(2_000_000, i) for i in range(3)]  # above OVERLAP_FROM_BYTES: hashed beside the write
    for object_sha256, expected in ((False, None), (True, [sha(v) for v in values])):
        passes.clear()
        store = make_store(object_sha256=True) if object_sha256 else make_store()  # the default, then the option
        before = set(objects(store))
        producer = HybridProducer(kafka.producer_config(), stores={store.name: store})
        for i, value in enumerate(values):
            producer.produce(topic, value, key=f"{object_sha256}{i}".encode(), route=f"reference:{store.name}")
        assert producer.flush(60) == 0
        producer.close()
        assert sorted(passes) == ["envelope 2"] * 3 + (["store sha256"] * 3 if object_sha256 else [])
        written = [k for k in objects(store) if k not in before and not k.startswith(store.pending_prefix)]
        recorded = sorted(store.backend.head(key).metadata.get("sha256", "") for key in written)
        assert recorded == (sorted(expected) if expected else [""] * 3)
    consumer = HybridConsumer(consumer_config(), stores={store.name: store})
    consumer.subscribe([topic])
    got, errors = consume_all(consumer, 6, timeout=60)
    consumer.close()
    assert not errors
    assert [sha(m.value()) for m in got] == [sha(v) for v in values] * 2, "verified by the envelope's digest"


@pytest.mark.parametrize("validate_content", [None, True])
def test_azure_uploads_carry_no_md5_unless_validate_content(
    azure_server: Any, s3_prefix: str, validate_content: Any
) -> None:
    """Issue 42.3: an MD5 of every request body duplicated the envelope's digest; off by default, on by option,
    for single PUTs and for the blocks of a large payload alike."""
    sent: list[tuple[str, bool]] = []

    def hook(request: Any) -> None:
        if request.http_request.method == "PUT" and "_pending" not in request.http_request.url:
            sent.append((request.http_request.url, "Content-MD5" in request.http_request.headers))

    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(azure_server.connection_string, raw_request_hook=hook)
    container = f"md5-{uuid.uuid4().hex[:12]}"
    azure_server.client().create_container(container)
    options = {} if validate_content is None else {"validate_content": validate_content}
    store = AzureBlobStore(
        client, container=container, prefix=s3_prefix, multipart_threshold=1 * MiB, part_bytes=256 * 1024, **options
    )
    try:
        small, large = payload(300_000, 1), payload(1_200_000, 2)
        for value in (small, large):
            locator = store.put("t", uuid.uuid4(), value, pending_since_ms=int(time.time() * 1000))
            assert sha(store.get(locator, len(value))) == sha(value)
        assert len(sent) >= 1 + 5 + 1, "one PUT, then five blocks and the block list"
        assert {md5 for url, md5 in sent if "comp=blocklist" not in url} == {validate_content is True}, sent
    finally:
        store.close()
        azure_server.client().delete_container(container)
