"""``gateway gc`` deletes only what it proved dead (issue 13, defect 1 and build item 2).

The pure decisions (verdict per pending write, scan progress, metadata problems, envelope matching)
are tested without servers; every defect is then reproduced against the real broker, redis-server
and the moto server, through the library and through the command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from gateway import HybridProducer
from gateway.gc._envelope_scan import partition_problems, scan_topic
from gateway.gc.sweeper import kafka_verifier, sweep, unverified
from gateway.gc.verdicts import CommittedRead, EnvelopeMatcher, Pending, ScanProgress, TopicScan, Verdict, judge
from gateway.protocol.envelope import ENVELOPE_HEADER, Envelope, encode_envelope, envelope_header
from gateway.testing import KafkaService, RedisServer, S3Server
from stores import RedisStore, S3Store
from tests.helpers import payload

ROOT = Path(__file__).resolve().parents[2]


def pending(topic: str = "t", locator: str | None = None) -> Pending:
    mid = uuid.uuid4()
    return Pending("redis", locator or f"gw:{topic}:{mid}#1x10", topic, mid)


def envelope_for(p: Pending, store: str = "redis", locator: str | None = None) -> bytes:
    return encode_envelope(Envelope(store, locator or p.locator, 10, b"\0" * 32, p.message_id))


# -- pure decisions -------------------------------------------------------------------------------
def test_only_a_complete_scan_without_any_trace_proves_absence() -> None:
    live, dead, doubtful = pending(), pending(), pending()
    matcher = EnvelopeMatcher([live, dead, doubtful])
    matcher.observe(envelope_for(live), [envelope_header()], 0, 0)
    matcher.observe(b"\x1bGWREF\x09" + str(doubtful.message_id).encode(), [envelope_header()], 0, 1)  # newer
    matcher.observe(b"plain value", None, 0, 2)
    done = ScanProgress({0: 3})
    done.advance(0, 3)
    uncommitted = TopicScan.finished("t", matcher, done)
    assert uncommitted.complete and uncommitted.sightings == {live: {(0, 0)}, doubtful: {(0, 1)}}
    assert judge(live, uncommitted).verdict is Verdict.UNKNOWN, "not landed before read_committed said so"
    # nothing aborted: the read_committed read returned both records again
    scan = uncommitted.settled_by(CommittedRead(None, frozenset({live}), frozenset({doubtful}), {0: (0, 3)}, {0: 3}))
    assert judge(live, scan).verdict is Verdict.LANDED
    assert judge(dead, scan).verdict is Verdict.ABSENT
    verdict = judge(doubtful, scan)
    assert verdict.verdict is Verdict.UNKNOWN and "undecodable envelope" in verdict.reason

    short = ScanProgress({0: 3, 1: 5})
    short.advance(0, 3)
    short.advance(1, 2)
    partial = TopicScan.finished("t", matcher, short, "the scan deadline passed").settled_by(scan.committed)
    assert not partial.complete
    verdict = judge(dead, partial)
    assert verdict.verdict is Verdict.UNKNOWN
    assert "t[1] stopped at offset 2 of 5" in verdict.reason and "deadline" in verdict.reason
    assert judge(live, partial).verdict is Verdict.LANDED, "a committed envelope is proof even in a partial scan"
    failed = TopicScan.failed("t", "metadata of topic t carries an error: LEADER_NOT_AVAILABLE")
    assert judge(dead, failed).verdict is Verdict.UNKNOWN


def test_envelopes_match_by_message_id_or_locator_whatever_store_name_they_carry() -> None:
    by_id, by_locator, other = pending(), pending(), pending()
    matcher = EnvelopeMatcher([by_id, by_locator, other])
    matcher.observe(envelope_for(by_id, store="blob", locator="somewhere-else"), None, 0, 0)  # magic, no header
    matcher.observe(
        encode_envelope(Envelope("payloads", by_locator.locator, 1, b"\0" * 32, uuid.uuid4())),
        [(ENVELOPE_HEADER, b"\x01")],
        0,
        1,
    )
    assert matcher.found == {by_id, by_locator}
    assert matcher.store_names == {"blob", "payloads"}


def test_metadata_errors_are_problems_not_an_empty_topic() -> None:
    ok = SimpleNamespace(error=None, partitions={0: SimpleNamespace(error=None, leader=1)})
    assert partition_problems("t", ok) is None
    assert "missing" in str(partition_problems("t", None))
    auth = SimpleNamespace(error="TOPIC_AUTHORIZATION_FAILED", partitions={})
    assert "TOPIC_AUTHORIZATION_FAILED" in str(partition_problems("t", auth))
    leader = SimpleNamespace(
        error=None,
        partitions={
            0: SimpleNamespace(error=None, leader=1),
            1: SimpleNamespace(error="LEADER_NOT_AVAILABLE", leader=-1),
        },
    )
    assert "t[1] carries an error: LEADER_NOT_AVAILABLE" in str(partition_problems("t", leader))
    no_leader = SimpleNamespace(error=None, partitions={0: SimpleNamespace(error=None, leader=-1)})
    assert "no leader" in str(partition_problems("t", no_leader))
    assert "no partitions" in str(partition_problems("t", SimpleNamespace(error=None, partitions={})))


def test_without_kafka_nothing_is_proved_unless_the_marks_are_trusted() -> None:
    p = pending()
    assert unverified(False)([p])[p].verdict is Verdict.UNKNOWN
    assert unverified(True)([p])[p].verdict is Verdict.ABSENT


def test_trusting_the_marks_never_deletes_a_write_journalled_in_a_batch() -> None:
    """A batch marker stays until all of its batch settles, so it may name payloads acknowledged long ago."""
    mid = uuid.uuid4()
    p = Pending("s3", f"s3://b/gw/t/{mid}", "t", mid, batched=True)
    verdict = unverified(True)([p])[p]
    assert verdict.verdict is Verdict.UNKNOWN and "batch marker" in verdict.reason


# -- against the real broker and stores -----------------------------------------------------------
@pytest.fixture
def prefix() -> str:
    return f"gwgc{uuid.uuid4().hex[:6]}"


def produce_and_forget_clearing(kafka: KafkaService, topic: str, store: RedisStore, count: int) -> list[str]:
    """Reference messages that landed, then marked pending again: a producer that died before clearing."""
    producer = HybridProducer(kafka.producer_config(), stores={store.name: store})
    for i in range(count):
        producer.produce(topic, payload(200_000, i), key=b"k", route=f"reference:{store.name}")
    assert producer.flush(30) == 0
    live = sorted(loc for loc, _ in store.list_locators(topic))
    assert len(live) == count
    for locator in live:
        store.mark_pending(locator, 1)
    return live


def orphan(store: RedisStore, topic: str) -> str:
    """A write journalled as pending whose envelope was never sent: a producer killed before produce."""
    return store.put(topic, uuid.uuid4(), b"orphaned payload", pending_since_ms=1)


def run_gc(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "gc", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_gc_keeps_live_payloads_of_a_store_registered_under_another_name(
    kafka: KafkaService, topic: str, redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    """Defect 1a: the CLI called its store ``redis``; envelopes naming ``blob`` were not recognised."""
    store = RedisStore(redis_client, prefix=prefix, name="blob")
    live = produce_and_forget_clearing(kafka, topic, store, 4)
    dead = orphan(store, topic)
    dry = run_gc(
        "--redis-url",
        redis_server.url,
        "--redis-prefix",
        prefix,
        "--grace",
        "0",
        "--bootstrap",
        kafka.bootstrap_servers,
    )
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "dry run" in dry.stdout and f"would delete: {dead}" in dry.stdout
    assert len(store.list_pending(2**62)) == 5, "a dry run changes nothing"

    done = run_gc(
        "--redis-url",
        redis_server.url,
        "--redis-prefix",
        prefix,
        "--grace",
        "0",
        "--bootstrap",
        kafka.bootstrap_servers,
        "--delete",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deleted 1, kept 4 whose envelope landed" in done.stdout
    assert sorted(loc for loc, _ in store.list_locators(topic)) == live
    for locator in live:
        assert len(store.get(locator)) == 200_000
    assert store.list_pending(2**62) == []


def test_gc_keeps_everything_when_the_scan_does_not_reach_the_end(
    kafka: KafkaService, topic: str, redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    """Defect 1b: a scan cut short by its deadline read as "no envelope" for what it had not read."""
    store = RedisStore(redis_client, prefix=prefix)
    live = produce_and_forget_clearing(kafka, topic, store, 3)
    dead = orphan(store, topic)
    report = sweep(
        {"redis": store}, grace_ms=0, verifier=kafka_verifier(kafka.client_conf(), timeout_s=0), dry_run=False
    )
    assert report.deleted == [] and report.landed == [] and report.exit_code() == 4
    assert sorted(loc for loc, _ in report.kept) == sorted([*live, dead])
    assert all("stopped at offset 0 of 3 (the scan deadline passed)" in why for _, why in report.kept)

    cli = run_gc(
        "--redis-url",
        redis_server.url,
        "--redis-prefix",
        prefix,
        "--grace",
        "0",
        "--bootstrap",
        kafka.bootstrap_servers,
        "--scan-timeout",
        "0",
        "--delete",
    )
    assert cli.returncode == 4, cli.stdout + cli.stderr
    assert "kept 4 unproved" in cli.stdout and "deadline passed" in cli.stdout
    assert "incomplete" in cli.stderr
    assert sorted(loc for loc, _ in store.list_locators(topic)) == sorted([*live, dead])

    # given the time, the same run proves both ways
    report = sweep({"redis": store}, grace_ms=0, verifier=kafka_verifier(kafka.client_conf()), dry_run=False)
    assert report.deleted == [dead] and sorted(report.landed) == live and report.exit_code() == 0


def test_a_scan_stops_at_the_end_offsets_taken_first_across_partitions(
    kafka: KafkaService, prefix: str, redis_client: redis.Redis
) -> None:
    name = f"gc-parts-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name, partitions=3)
    store = RedisStore(redis_client, prefix=prefix)
    producer = HybridProducer(kafka.producer_config(), stores={"redis": store})
    for i in range(9):
        producer.produce(name, payload(1_000, i), key=b"k", partition=i % 3, route="reference:redis")
        producer.produce(name, b"plain", key=b"k", partition=i % 3)
    assert producer.flush(30) == 0
    wanted = [
        Pending("redis", loc, name, store.validate_locator(loc).message_id) for loc, _ in store.list_locators(name)
    ]
    scan = scan_topic(kafka.client_conf(), name, wanted, timeout_s=60)
    assert scan.complete, scan.problem
    assert scan.found == frozenset(wanted) and dict(scan.ends) == {0: 6, 1: 6, 2: 6}


@pytest.mark.requires("create_topics")  # the mock auto-creates any topic asked for, so none is ever unknown
def test_gc_keeps_payloads_whose_topic_metadata_carries_an_error(
    kafka: KafkaService, redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    """Defect 1c: a topic whose metadata came back with an error was read as having no envelopes."""
    name = f"gc-gone-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name, partitions=1)
    store = RedisStore(redis_client, prefix=prefix)
    live = produce_and_forget_clearing(kafka, name, store, 3)
    kafka.delete_topic(name)  # metadata now answers UNKNOWN_TOPIC_OR_PART
    deadline = time.monotonic() + 30
    while name in kafka.admin().list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    cli = run_gc(
        "--redis-url",
        redis_server.url,
        "--redis-prefix",
        prefix,
        "--grace",
        "0",
        "--bootstrap",
        kafka.bootstrap_servers,
        "--delete",
    )
    assert cli.returncode == 4, cli.stdout + cli.stderr
    assert "deleted 0" in cli.stdout and "kept 3 unproved" in cli.stdout
    assert f"metadata of topic {name} carries an error" in cli.stdout
    assert sorted(loc for loc, _ in store.list_locators(name)) == live
    assert len(store.list_pending(2**62)) == 3


def test_gc_refuses_to_delete_without_proof_unless_told(
    redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    store = RedisStore(redis_client, prefix=prefix)
    dead = orphan(store, "some-topic")
    refused = run_gc("--redis-url", redis_server.url, "--redis-prefix", prefix, "--grace", "0", "--delete")
    assert refused.returncode == 2 and "--delete needs --bootstrap" in refused.stderr
    unproved = run_gc("--redis-url", redis_server.url, "--redis-prefix", prefix, "--grace", "0")
    assert unproved.returncode == 4 and "not checked against Kafka" in unproved.stdout
    trusted = run_gc(
        "--redis-url", redis_server.url, "--redis-prefix", prefix, "--grace", "0", "--delete", "--no-verify"
    )
    assert trusted.returncode == 0 and f"deleted: {dead}" in trusted.stdout
    assert store.list_pending(2**62) == []


def _initiated(client: Any, bucket: str, key: str) -> int:
    uploads = [
        u for u in client.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", []) if u["Key"] == key
    ]
    return int(uploads[0]["Initiated"].timestamp() * 1000)


def _uploads(client: Any, bucket: str, prefix: str) -> set[str]:
    return {u["UploadId"] for u in client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])}


def test_gc_aborts_multipart_uploads_older_than_the_grace_period(
    s3_server: S3Server, s3_client: Any, s3_bucket: str, s3_prefix: str
) -> None:
    """Defect 8: a producer killed mid-upload leaves parts that no listing shows and S3 bills.

    The moto server reports one fixed ``Initiated`` for every upload, so "young" and "old" are the
    same uploads judged at two moments: just after they started, and once the grace period passed.
    """
    store = S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix)
    keys = [store.key_for("orders", uuid.uuid4()) for _ in range(2)]
    ids = []
    for key in keys:
        upload = s3_client.create_multipart_upload(Bucket=s3_bucket, Key=key)["UploadId"]
        s3_client.upload_part(Bucket=s3_bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 1024)
        ids.append(upload)
    foreign_key = f"{s3_prefix}not-a-payload.bin"
    foreign = s3_client.create_multipart_upload(Bucket=s3_bucket, Key=foreign_key)["UploadId"]
    started = max(_initiated(s3_client, s3_bucket, key) for key in keys)
    grace = 3_600_000

    young = sweep({"s3": store}, grace_ms=grace, now_ms=started + 1000, verifier=unverified(False), dry_run=False)
    assert young.aborted == [] and young.exit_code() == 0
    dry = sweep({"s3": store}, grace_ms=grace, now_ms=started + grace + 1000, verifier=unverified(False))
    assert sorted(a.split(" ")[0] for a in dry.aborted) == sorted(keys)
    assert _uploads(s3_client, s3_bucket, s3_prefix) == {*ids, foreign}, "a dry run aborts nothing"
    old = sweep({"s3": store}, grace_ms=grace, now_ms=started + grace + 1000, verifier=unverified(False), dry_run=False)
    assert sorted(a.split(" ")[0] for a in old.aborted) == sorted(keys) and old.failed == []
    assert _uploads(s3_client, s3_bucket, s3_prefix) == {foreign}, "uploads of other keys are not ours"
    s3_client.abort_multipart_upload(Bucket=s3_bucket, Key=foreign_key, UploadId=foreign)


def test_gc_settles_a_dead_producers_batch_marker_against_the_topic(
    kafka: KafkaService, topic: str, s3_client: Any, s3_bucket: str, s3_prefix: str
) -> None:
    """Two messages landed, one payload never got its envelope, one id was never used; the producer died.

    The batch marker names all four. gc proves the two live, deletes the other two, and the marker
    goes with the last of them.
    """
    store = S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix, journal_batch=4, journal_open_ms=60_000)
    producer = HybridProducer(kafka.producer_config(), stores={"s3": store})
    for i in range(2):
        producer.produce(topic, payload(5000, i), key=b"k", route="reference:s3")
    assert producer.flush(30) == 0
    live = sorted(loc for loc, _ in store.list_locators(topic))
    dead = store.put(topic, store.next_message_id(topic, 0), b"never enveloped", pending_since_ms=0)
    # The producer is gone without closing anything; gc runs once the batch's 60 s window is over.
    gc_store = S3Store(s3_client, bucket=s3_bucket, prefix=s3_prefix)
    verifier = kafka_verifier(kafka.client_conf(), timeout_s=60)
    later = int(time.time() * 1000) + 70_000
    assert gc_store.list_pending(later - 20_000) == [], "not before the window is over"
    report = sweep({"s3": gc_store}, grace_ms=0, now_ms=later, verifier=verifier, dry_run=False)
    assert report.failed == [] and report.kept == [], report
    assert sorted(report.landed) == live, report
    assert dead in report.deleted and len(report.deleted) == 2, "the orphan, and the id never used"
    assert sorted(loc for loc, _ in gc_store.list_locators(topic)) == live
    assert s3_client.list_objects_v2(Bucket=s3_bucket, Prefix=gc_store.pending_prefix).get("KeyCount", 0) == 0
    producer.close()
