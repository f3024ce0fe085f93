"""S3Store against a real moto server process (the session fixture), plus a few pure unit tests."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from gateway.errors import (
    LocatorError,
    PayloadIntegrityError,
    PayloadNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from gateway.protocol.envelope import Envelope, decode_envelope, encode_envelope
from gateway.testing import S3Server
from stores import S3Store
from tests.helpers import sha

MiB = 1024 * 1024
TOPIC = "orders.v1"


class Recorder:
    """Every S3 operation with its API parameters, and every HTTP request (``before-send``), a client makes."""

    def __init__(self, client: Any) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.requests = 0
        client.meta.events.register("before-parameter-build.s3.*", self._on_call)
        client.meta.events.register("before-send.s3.*", self._on_send)

    def _on_call(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))

    def _on_send(self, **_: Any) -> None:
        self.requests += 1

    def ops(self) -> list[str]:
        return [name for name, _ in self.calls]

    def clear(self) -> None:
        self.calls.clear()
        self.requests = 0


@pytest.fixture
def client(s3_server: S3Server) -> Any:
    """A client of its own per test, so event hooks never leak into other tests."""
    return s3_server.client()


@pytest.fixture
def recorder(client: Any) -> Recorder:
    return Recorder(client)


@pytest.fixture
def store(client: Any, s3_bucket: str, s3_prefix: str) -> Iterator[S3Store]:
    with S3Store(client, bucket=s3_bucket, prefix=s3_prefix) as s:
        yield s


def key_of(locator: str) -> str:
    return locator.split("/", 3)[3]


def report(what: str, size: int, seconds: float) -> None:
    print(f"\n[s3] {what}: {size / MiB:.0f} MiB in {seconds:.3f}s = {size / MiB / seconds:.0f} MiB/s")


def keys_under(client: Any, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


# -- round trips ----------------------------------------------------------------------------


def test_small_object_is_one_put_with_metadata(store: S3Store, recorder: Recorder, client: Any) -> None:
    payload = os.urandom(1000)
    mid = uuid.uuid4()
    locator = store.put(TOPIC, mid, payload)
    assert locator == f"s3://{store.bucket}/{store.prefix}{TOPIC}/{mid}"
    assert recorder.ops() == ["PutObject"]
    head = client.head_object(Bucket=store.bucket, Key=key_of(locator))
    assert head["Metadata"]["sha256"] == sha(payload) and head["Metadata"]["size"] == "1000"
    assert head["ContentLength"] == 1000
    recorder.clear()
    assert store.get(locator, expected_size=1000) == payload
    assert recorder.ops() == ["GetObject"]
    m = store.metrics()
    assert m["puts"] == 1 and m["gets"] == 1 and m["bytes_written"] == 1000 and m["bytes_read"] == 1000


def test_20mb_goes_multipart_and_round_trips(recorder: Recorder, client: Any, s3_bucket: str, s3_prefix: str) -> None:
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, multipart_threshold=8 * MiB)
    size = 20 * MiB
    payload = os.urandom(size)
    started = time.perf_counter()
    locator = store.put(TOPIC, uuid.uuid4(), payload)
    report("put 20 MiB (multipart)", size, time.perf_counter() - started)
    ops = recorder.ops()
    assert ops[0] == "CreateMultipartUpload" and ops[-1] == "CompleteMultipartUpload"
    assert ops.count("UploadPart") == 3 and "PutObject" not in ops  # 8 + 8 + 4 MiB
    assert client.head_object(Bucket=store.bucket, Key=key_of(locator))["Metadata"]["sha256"] == sha(payload)
    started = time.perf_counter()
    back = store.get(locator, expected_size=size)
    report("get 20 MiB", size, time.perf_counter() - started)
    assert sha(back) == sha(payload)


@pytest.mark.slow
def test_200mb_round_trip(store: S3Store) -> None:
    size = 200 * MiB
    payload = os.urandom(size)
    started = time.perf_counter()
    locator = store.put(TOPIC, uuid.uuid4(), payload, sha256=hashlib.sha256(payload).digest())
    report("put 200 MiB (multipart)", size, time.perf_counter() - started)
    started = time.perf_counter()
    back = store.get(locator, expected_size=size)
    report("get 200 MiB", size, time.perf_counter() - started)
    assert sha(back) == sha(payload)
    store.delete(locator)


def test_precomputed_digest_is_recorded(store: S3Store, client: Any) -> None:
    digest = hashlib.sha256(b"abc").digest()
    locator = store.put(TOPIC, uuid.uuid4(), b"abc", sha256=digest)
    assert client.head_object(Bucket=store.bucket, Key=key_of(locator))["Metadata"]["sha256"] == digest.hex()
    with pytest.raises(ValueError):
        store.put(TOPIC, uuid.uuid4(), b"abc", sha256=b"short")


# -- delete, journal, listing ---------------------------------------------------------------


def test_delete_is_complete_and_idempotent(store: S3Store, client: Any) -> None:
    locator = store.put(TOPIC, uuid.uuid4(), b"x" * 100, pending_since_ms=1)
    assert len(keys_under(client, store.bucket, store.prefix)) == 2  # payload + marker
    store.delete(locator)
    assert keys_under(client, store.bucket, store.prefix) == []
    store.delete(locator)
    with pytest.raises(PayloadNotFoundError):
        store.get(locator)
    assert store.metrics()["not_found"] == 1


def test_pending_marker_is_written_before_the_payload(
    recorder: Recorder, client: Any, s3_bucket: str, s3_prefix: str
) -> None:
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, multipart_threshold=8 * MiB)
    mid = uuid.uuid4()
    locator = store.put(TOPIC, mid, os.urandom(9 * MiB), pending_since_ms=1234)
    marker = f"{store.prefix}_pending/{TOPIC}/{mid}"
    ops = recorder.ops()
    assert ops[:2] == ["PutObject", "CreateMultipartUpload"] and recorder.calls[0][1]["Key"] == marker
    obj = client.get_object(Bucket=store.bucket, Key=marker)
    assert obj["Body"].read() == locator.encode() and obj["Metadata"]["pending-since-ms"] == "1234"
    # Deleting removes the payload first and the marker last, so a crash in between leaves the marker.
    recorder.clear()
    store.delete(locator)
    deletes = [params["Key"] for name, params in recorder.calls if name == "DeleteObject"]
    assert deletes == [key_of(locator), marker]


def test_list_locators_excludes_markers(store: S3Store) -> None:
    t0 = int(time.time()) * 1000 - 1000
    a = store.put("a", uuid.uuid4(), b"1", pending_since_ms=1)
    b = store.put("b", uuid.uuid4(), b"2")
    pend = store.put("_pending", uuid.uuid4(), b"3")  # a legal topic name that looks like the journal
    listed = dict(store.list_locators())
    assert set(listed) == {a, b, pend}
    assert all(t0 <= ms <= time.time() * 1000 + 1000 for ms in listed.values())
    assert [loc for loc, _ in store.list_locators("a")] == [a]
    assert [loc for loc, _ in store.list_locators("_pending")] == [pend]
    assert store.list_pending(10**15) == [a]


# -- hostile locators -----------------------------------------------------------------------


def hostile_locators(store: S3Store, mid: uuid.UUID) -> list[Any]:
    b, p = store.bucket, store.prefix
    good = f"s3://{b}/{p}{TOPIC}/{mid}"
    return [
        "",
        "garbage",
        "s3://",
        f"s3://{b}",
        f"s3://{b}/",
        f"s3://other-bucket/{p}{TOPIC}/{mid}",
        f"s3://{b}-evil/{p}{TOPIC}/{mid}",
        f"s3://{b}.evil/{p}{TOPIC}/{mid}",
        f"s3://user@{b}/{p}{TOPIC}/{mid}",
        f"s3://{b}:443/{p}{TOPIC}/{mid}",
        f"S3://{b}/{p}{TOPIC}/{mid}",
        f"s3:/{b}/{p}{TOPIC}/{mid}",
        f"https://{b}/{p}{TOPIC}/{mid}",
        f"https://{b}.s3.amazonaws.com/{p}{TOPIC}/{mid}",
        f"s3://{b}/other/{TOPIC}/{mid}",
        f"s3://{b}/{TOPIC}/{mid}",
        f"s3://{b}/{p}../{TOPIC}/{mid}",
        f"s3://{b}/{p}../../etc/{mid}",
        f"s3://{b}/{p}..",
        f"s3://{b}/{p}../{mid}",
        f"s3://{b}/{p}./{mid}",
        f"s3://{b}/{p}%2e%2e/{mid}",
        f"s3://{b}/{p}%2E%2E%2F{mid}",
        f"s3://{b}/{p}{TOPIC}%2F{mid}",
        f"s3://{b}//{p}{TOPIC}/{mid}",
        f"s3://{b}/{p}/{TOPIC}/{mid}",
        f"s3://{b}/{p}{TOPIC}//{mid}",
        f"s3://{b}/{p}{TOPIC}\\{mid}",
        f"s3://{b}/{p}{TOPIC}/{mid}/",
        f"{good}/x",
        f"{good}x",
        f"{good}?versionId=1",
        f"{good}#frag",
        f"{good} ",
        f" {good}",
        f"{good}\n",
        f"{good}\x00",
        f"s3://{b}/{p}{TOPIC}/{str(mid).upper()}",
        f"s3://{b}/{p}{TOPIC}/{mid.hex}",
        f"s3://{b}/{p}{TOPIC}\uff0f{mid}",
        f"s3://{b}/{p}\u202e{TOPIC}/{mid}",
        f"s3://{b}/{p}{TOPIC.replace('o', chr(0x43E))}/{mid}",
        f"s3://{b}/{p}_pending/{TOPIC}/{mid}",
        f"s3://{b}/{p}a b/{mid}",
        f"s3://{b}/{p}{TOPIC}/{mid}".replace("s3://", "s3:///"),
        "x" * 5000,
        None,
        good.encode(),
        7,
    ]


def test_hostile_locators_are_refused_without_any_request(store: S3Store, recorder: Recorder, client: Any) -> None:
    mid = uuid.uuid4()
    # Objects the hostile locators would reach if they were followed.
    client.put_object(Bucket=store.bucket, Key=f"{TOPIC}/{mid}", Body=b"outside the prefix")
    client.put_object(Bucket=store.bucket, Key=f"{store.prefix}_pending/{TOPIC}/{mid}", Body=b"a marker")
    recorder.clear()
    for locator in hostile_locators(store, mid):
        for call in (store.get, store.delete, store.clear_pending, lambda loc: store.mark_pending(loc, 1)):
            with pytest.raises(LocatorError):
                call(locator)
    assert recorder.requests == 0 and recorder.calls == []
    assert store.metrics()["locator_rejected"] >= 4 * len(hostile_locators(store, mid))
    assert client.get_object(Bucket=store.bucket, Key=f"{TOPIC}/{mid}")["Body"].read() == b"outside the prefix"


def test_the_same_prefix_in_another_store_is_refused(client: Any, s3_bucket: str, s3_prefix: str) -> None:
    a = S3Store(client, bucket=s3_bucket, prefix=f"{s3_prefix}a/")
    b = S3Store(client, bucket=s3_bucket, prefix=s3_prefix)
    locator = a.put(TOPIC, uuid.uuid4(), b"x")
    with pytest.raises(LocatorError):
        b.get(locator)  # "<prefix>a/orders.v1/<id>" has one segment too many for b
    assert a.get(locator) == b"x"


def test_invalid_configuration(client: Any) -> None:
    for prefix in ("gw", "/gw/", "gw//", "../", "gw/../", "./", "g w/", "gw%2f/", "gw\\/", "ü/"):
        with pytest.raises(ValueError):
            S3Store(client, bucket="bucket", prefix=prefix)
    for bucket in ("", "a", "Bucket", "b_u", "a..b", "-ab", "x" * 64):
        with pytest.raises(ValueError):
            S3Store(client, bucket=bucket)
    with pytest.raises(ValueError, match="sse"):
        S3Store(client, bucket="bucket", sse={"ACL": "public-read"})
    with pytest.raises(ValueError):
        S3Store(client, bucket="bucket", multipart_chunk_bytes=MiB)
    S3Store(client, bucket="bucket", prefix="")
    S3Store(client, bucket="bucket", prefix="a/b.c/d-e_f/")


def test_the_longest_locator_fits_an_envelope() -> None:
    store = S3Store(object(), bucket="b" * 63, prefix="p" * 399 + "/")
    locator = store.locator_for("t" * 249, uuid.uuid4())
    env = Envelope("s3", locator, 1, b"\0" * 32, uuid.uuid4())
    assert decode_envelope(encode_envelope(env)).locator == locator
    assert store.validate_locator(locator).topic == "t" * 249
    with pytest.raises(ValueError):
        S3Store(object(), bucket="b" * 63, prefix="p" * 400 + "/")


def test_size_checks(store: S3Store, client: Any) -> None:
    locator = store.put(TOPIC, uuid.uuid4(), b"x" * 100)
    with pytest.raises(PayloadIntegrityError, match="expected 99"):
        store.get(locator, expected_size=99)
    client.put_object(Bucket=store.bucket, Key=key_of(locator), Body=b"replaced")
    with pytest.raises(PayloadIntegrityError):
        store.get(locator, expected_size=100)


# -- encryption, tags, lifecycle ------------------------------------------------------------


def test_sse_kms_and_tags_are_passed_on_every_write(client: Any, s3_bucket: str, s3_prefix: str) -> None:
    recorder = Recorder(client)
    sse = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/gateway"}
    store = S3Store(
        client,
        bucket=s3_bucket,
        prefix=s3_prefix,
        sse=sse,
        tags={"app": "gw", "tier": "hot"},
        multipart_threshold=5 * MiB,
        multipart_chunk_bytes=5 * MiB,
    )
    small = store.put(TOPIC, uuid.uuid4(), b"small", pending_since_ms=1)
    large = store.put(TOPIC, uuid.uuid4(), os.urandom(6 * MiB))
    writes = [(name, h) for name, h in recorder.calls if name in ("PutObject", "CreateMultipartUpload")]
    assert [name for name, _ in writes] == ["PutObject", "PutObject", "CreateMultipartUpload"]  # marker, small, large
    for _, params in writes:
        assert params["ServerSideEncryption"] == "aws:kms" and params["SSEKMSKeyId"] == "alias/gateway"
        assert params["Tagging"] == "app=gw&tier=hot"
    for locator in (small, large):
        head = client.head_object(Bucket=s3_bucket, Key=key_of(locator))
        assert head.get("ServerSideEncryption") == "aws:kms"
        tags = client.get_object_tagging(Bucket=s3_bucket, Key=key_of(locator))["TagSet"]
        assert {t["Key"]: t["Value"] for t in tags} == {"app": "gw", "tier": "hot"}
    assert store.get(large, expected_size=6 * MiB)[:5] != b""


def test_sse_c_keys_also_go_on_reads(client: Any, s3_bucket: str, s3_prefix: str) -> None:
    recorder = Recorder(client)
    key = uuid.uuid4().hex  # 32 characters: botocore base64-encodes it and adds the MD5 itself
    sse = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, sse=sse)
    locator = store.put(TOPIC, uuid.uuid4(), b"secret")
    recorder.clear()
    assert store.get(locator) == b"secret"
    [(name, params)] = recorder.calls
    assert name == "GetObject" and params["SSECustomerAlgorithm"] == "AES256" and params["SSECustomerKey"] == key


def test_ensure_expiry_rule_keeps_other_rules(store: S3Store, client: Any) -> None:
    other = {"ID": "someone-else", "Filter": {"Prefix": "logs/"}, "Status": "Enabled", "Expiration": {"Days": 3}}
    client.put_bucket_lifecycle_configuration(Bucket=store.bucket, LifecycleConfiguration={"Rules": [other]})
    store.ensure_expiry_rule(8)
    store.ensure_expiry_rule(9)  # replaces its own rule, does not add a second
    rules = {r["ID"]: r for r in client.get_bucket_lifecycle_configuration(Bucket=store.bucket)["Rules"]}
    assert set(rules) == {"someone-else", f"kafka-hybrid-gateway:{store.prefix}"}
    mine = rules[f"kafka-hybrid-gateway:{store.prefix}"]
    assert mine["Expiration"] == {"Days": 9} and mine["Filter"] == {"Prefix": store.prefix}
    assert mine["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    with pytest.raises(ValueError):
        store.ensure_expiry_rule(0)


def test_ensure_expiry_rule_on_a_bucket_without_rules(store: S3Store, client: Any) -> None:
    store.ensure_expiry_rule(1)
    assert len(client.get_bucket_lifecycle_configuration(Bucket=store.bucket)["Rules"]) == 1


# -- unavailability -------------------------------------------------------------------------


def test_unreachable_endpoint_is_unavailable() -> None:
    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=1),
    )
    store = S3Store(client, bucket="bucket")
    locator = store.locator_for(TOPIC, uuid.uuid4())
    for op in (
        lambda: store.put(TOPIC, uuid.uuid4(), b"x", pending_since_ms=1),
        lambda: store.put(TOPIC, uuid.uuid4(), os.urandom(9 * MiB)),
        lambda: store.get(locator),
        lambda: store.delete(locator),
        lambda: store.list_pending(1),
        lambda: list(store.list_locators()),
        lambda: store.ensure_expiry_rule(3),
    ):
        with pytest.raises(StoreUnavailableError):
            op()
    assert store.metrics()["errors"] >= 7


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("SlowDown", 503, StoreUnavailableError),
        ("InternalError", 500, StoreUnavailableError),
        ("AccessDenied", 403, StoreError),
        ("NoSuchBucket", 404, StoreError),
    ],
)
def test_server_errors_are_classified(code: str, status: int, error: type[Exception]) -> None:
    """Pure unit test: botocore's Stubber plays the server, which moto cannot be made to fail like this."""
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    store = S3Store(client, bucket="bucket")
    locator = store.locator_for(TOPIC, uuid.uuid4())
    with Stubber(client) as stub:
        stub.add_client_error("get_object", service_error_code=code, http_status_code=status)
        with pytest.raises(error) as info:
            store.get(locator)
    assert isinstance(info.value, error)
    assert isinstance(info.value, StoreUnavailableError) == (error is StoreUnavailableError)
    assert not isinstance(info.value, PayloadNotFoundError)


# -- batched pending journal -------------------------------------------------------------------------


def journalled_puts(store: S3Store, topic: str, count: int, now: int) -> list[str]:
    """What the producer does per message: an id from the store's batch, then the payload."""
    out = []
    for i in range(count):
        mid = store.next_message_id(topic, now)
        out.append(store.put(topic, mid, f"payload {i}".encode(), pending_since_ms=now))
    return out


def test_one_batch_marker_journals_many_writes_before_any_of_them(
    client: Any, recorder: Recorder, s3_bucket: str, s3_prefix: str
) -> None:
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, journal_batch=4)
    now = int(time.time() * 1000)
    written = journalled_puts(store, TOPIC, 10, now)
    puts = [params["Key"] for name, params in recorder.calls if name == "PutObject"]
    markers = [key for key in puts if key.startswith(store.pending_prefix)]
    assert len(puts) == 13 and len(markers) == 3, "10 payloads and 3 batch markers, no marker per payload"
    assert all(key.endswith(".batch") for key in markers)
    for locator in written:
        named_in = [m for m in markers if locator.encode() in client.get_object(Bucket=s3_bucket, Key=m)["Body"].read()]
        assert len(named_in) == 1 and puts.index(named_in[0]) < puts.index(key_of(locator))

    assert set(store.list_pending(2**62)) == set(written), "its own view: handed out and unsettled"
    sweeper = S3Store(client, bucket=s3_bucket, prefix=s3_prefix)
    listed = sweeper.list_pending(2**62)
    assert len(listed) == 12 and set(written) < set(listed), "another process sees every id the markers name"
    assert all(sweeper.journalled_in_batch(locator) for locator in listed)

    recorder.clear()
    store.clear_pending_many(written)
    assert recorder.ops() == ["DeleteObjects"], "the two closed batches' markers go in one request"
    assert keys_under(client, s3_bucket, store.pending_prefix) == [markers[2]], "the open batch's stays"
    assert store.list_pending(2**62) == []
    store.close()
    assert keys_under(client, s3_bucket, store.pending_prefix) == []


def test_a_sweeper_settles_a_dead_producers_batch(client: Any, s3_bucket: str, s3_prefix: str) -> None:
    producer = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, journal_batch=4, journal_open_ms=1)
    now = int(time.time() * 1000)
    written = journalled_puts(producer, TOPIC, 3, now)  # then it dies: nothing cleared, nothing closed
    sweeper = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, journal_batch=1)  # batches off, still settles
    assert sweeper.list_pending(now - 60_000) == [], "newer than the cutoff"
    listed = sweeper.list_pending(2**62)
    assert len(listed) == 4 and set(written) < set(listed)
    landed, dead = written[0], [locator for locator in listed if locator != written[0]]
    sweeper.clear_pending(landed)
    assert len(keys_under(client, s3_bucket, sweeper.pending_prefix)) == 1, "three names still unsettled"
    for locator in dead:
        sweeper.delete(locator)
    assert keys_under(client, s3_bucket, sweeper.pending_prefix) == []
    assert [key for key in keys_under(client, s3_bucket, s3_prefix) if "_pending" not in key] == [key_of(landed)]
    assert sweeper.list_pending(2**62) == []


def test_a_batch_is_judged_only_after_its_whole_window(client: Any, s3_bucket: str, s3_prefix: str) -> None:
    """A batch hands out ids for its window after the marker was written, so its age starts at the end."""
    producer = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, journal_batch=4, journal_open_ms=600_000)
    now = int(time.time() * 1000)
    journalled_puts(producer, TOPIC, 1, now)
    sweeper = S3Store(client, bucket=s3_bucket, prefix=s3_prefix)
    assert sweeper.list_pending(now + 60_000) == []
    assert len(sweeper.list_pending(now + 700_000)) == 4


def test_a_damaged_batch_marker_is_skipped_and_kept(client: Any, s3_bucket: str, s3_prefix: str) -> None:
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix)
    key = f"{store.pending_prefix}{TOPIC}/{uuid.uuid4()}.batch"
    client.put_object(Bucket=s3_bucket, Key=key, Body=b"not json")
    other = f"s3://{s3_bucket}/elsewhere/{TOPIC}/{uuid.uuid4()}"
    foreign = f"{store.pending_prefix}{TOPIC}/{uuid.uuid4()}.batch"
    client.put_object(
        Bucket=s3_bucket, Key=foreign, Body=b'{"format": 1, "open_for_ms": 0, "locators": ["%s"]}' % other.encode()
    )
    assert store.list_pending(2**62) == [], "nothing outside the store is ever listed, so never deleted"
    assert sorted(keys_under(client, s3_bucket, store.pending_prefix)) == sorted([key, foreign])


def test_a_failed_write_settles_its_place_in_the_batch(client: Any, s3_bucket: str, s3_prefix: str) -> None:
    """The producer deletes a payload Kafka refused; that settles it like an acknowledgement does."""
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, journal_batch=2)
    now = int(time.time() * 1000)
    first, second = journalled_puts(store, TOPIC, 2, now)
    store.clear_pending(first)
    store.delete(second)
    taken = store.next_message_id(TOPIC, now)  # closes the exhausted batch, opens the next
    store.clear_pending_many([])
    remaining = keys_under(client, s3_bucket, store.pending_prefix)
    assert len(remaining) == 1, "only the new batch's marker"
    store.close()
    assert keys_under(client, s3_bucket, store.pending_prefix) == remaining, "an id was taken and never settled"
    listed = S3Store(client, bucket=s3_bucket, prefix=s3_prefix).list_pending(2**62)
    assert len(listed) == 2 and store.locator_for(TOPIC, taken) in listed


def test_a_single_put_carries_the_payloads_sha256_as_its_checksum(
    client: Any, recorder: Recorder, s3_server: S3Server, s3_bucket: str, s3_prefix: str
) -> None:
    """S3 then checks the digest the envelope will carry, and botocore skips computing a CRC32 of its own."""
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix)
    payload = os.urandom(5000)
    store.put(TOPIC, uuid.uuid4(), payload)
    ((name, params),) = recorder.calls
    digest = base64.b64encode(hashlib.sha256(payload).digest()).decode()
    assert name == "PutObject" and params["ChecksumSHA256"] == digest
    strict = s3_server.client(request_checksum_calculation="when_required")
    plain = Recorder(strict)
    S3Store(strict, bucket=s3_bucket, prefix=s3_prefix).put(TOPIC, uuid.uuid4(), payload)
    assert "ChecksumSHA256" not in plain.calls[0][1], "a client told to send checksums only when required"


# -- what older versions wrote ---------------------------------------------------------------------


def test_objects_and_markers_older_versions_wrote_stay_readable(client: Any, s3_bucket: str, s3_prefix: str) -> None:
    """The requests S3Store made before it became a backend of the blob store (61051fd), byte for byte: a
    payload, its own marker, and a batch marker of a producer that died. The store of today reads, lists
    and settles them all."""
    own, in_batch, unused = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    payloads = {own: os.urandom(3 * MiB), in_batch: os.urandom(20 * MiB)}
    locators = {mid: f"s3://{s3_bucket}/{s3_prefix}{TOPIC}/{mid}" for mid in (own, in_batch, unused)}
    for mid, payload in payloads.items():
        meta = {"sha256": sha(payload), "size": str(len(payload)), "message-id": str(mid), "topic": TOPIC}
        client.put_object(Bucket=s3_bucket, Key=f"{s3_prefix}{TOPIC}/{mid}", Body=payload, Metadata=meta)
    client.put_object(
        Bucket=s3_bucket,
        Key=f"{s3_prefix}_pending/{TOPIC}/{own}",
        Body=locators[own].encode(),
        Metadata={"pending-since-ms": "1"},
    )
    batch = {"format": 1, "open_for_ms": 1, "locators": [locators[in_batch], locators[unused]]}
    client.put_object(
        Bucket=s3_bucket,
        Key=f"{s3_prefix}_pending/{TOPIC}/{uuid.uuid4()}.batch",
        Body=json.dumps(batch).encode(),
        Metadata={"pending-since-ms": "1"},
    )
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, parallel_read_bytes=8 * MiB)
    for mid, payload in payloads.items():
        assert store.get(locators[mid], expected_size=len(payload)) == payload  # 20 MiB: in parallel ranges
        assert store.validate_locator(locators[mid]).topic == TOPIC
    assert sorted(store.list_pending(2**62)) == sorted(locators.values())
    assert sorted(locator for locator, _ in store.list_locators(TOPIC)) == sorted(locators[mid] for mid in payloads)
    store.clear_pending_many([locators[own], locators[in_batch]])
    store.delete(locators[unused])
    assert keys_under(client, s3_bucket, store.pending_prefix) == []


def test_a_large_read_is_parallel_ranges_into_one_value(
    client: Any, recorder: Recorder, s3_bucket: str, s3_prefix: str
) -> None:
    store = S3Store(client, bucket=s3_bucket, prefix=s3_prefix, parallel_read_bytes=16 * MiB)
    payload = os.urandom(20 * MiB)
    locator = store.put(TOPIC, uuid.uuid4(), payload)
    recorder.clear()
    assert store.get(locator, expected_size=len(payload)) == payload
    ranges = sorted(params["Range"] for name, params in recorder.calls if name == "GetObject")
    assert recorder.ops().count("HeadObject") == 1
    assert ranges == sorted(f"bytes={start}-{min(start + 8 * MiB, 20 * MiB) - 1}" for start in (0, 8 * MiB, 16 * MiB))
