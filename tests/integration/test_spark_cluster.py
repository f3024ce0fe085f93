"""The ``hybrid-kafka`` source, sink, a restarted stream and ``reconcile`` on a real Spark standalone
cluster, against ``local[2]`` and against what was sent.

One cluster for the module (:class:`SparkStandaloneCluster`: a master and two one-core workers,
each its own JVM and folder). The cluster's driver is a child process (tests/spark_cluster_child.py)
because this process already holds the ``local[2]`` session. The workers start without the test
runner's ``PYTHONPATH``; the package reaches the executors as a zip in ``spark.submit.pyFiles``,
as it would on a cluster where only the interpreter and the dependencies are installed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import gateway
import stores as stores_package
from gateway import HybridConsumer, HybridProducer
from gateway.protocol import split
from gateway.protocol.envelope import Envelope, encode_envelope, envelope_header
from gateway.testing import KafkaService, RedisServer, ServiceUnavailable, SparkStandaloneCluster
from stores import RedisStore
from tests.helpers import payload, sha
from tests.spark_cluster_child import row_view, select_rows

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

PARTITIONS = 3
PER_PARTITION = 40
SEGMENT = 8_000
GAP = 100
WAVE = 12
"""Messages in each of the two waves the stream reads, plain, chunked and by reference."""
CHILD = Path(__file__).resolve().parents[1] / "spark_cluster_child.py"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkStandaloneCluster]:
    try:
        spark_cluster = SparkStandaloneCluster(workers=2, cores=1)
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with spark_cluster:
        yield spark_cluster


@pytest.fixture(scope="module")
def package_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gateway`` and ``stores`` as the code under test, zipped for ``spark.submit.pyFiles``."""
    target = tmp_path_factory.mktemp("pyfiles") / "kafka_hybrid_gateway.zip"
    with zipfile.ZipFile(target, "w") as archive:
        for package in (Path(gateway.__file__).parent, Path(stores_package.__file__).parent):
            for path in sorted(package.rglob("*.py")):
                archive.write(path, str(path.relative_to(package.parent)))
    return target


@dataclass
class Topics:
    mixed: str
    reconcile: str
    options: dict[str, str]
    orphan: str
    dangling: str
    routes: dict[str, int]
    copy: str
    wave: str
    stream: str
    sink_options: dict[str, str]
    waves: list[list[list[Any]]]
    """Both waves, ``[key, size, seed, route]`` each: the first produced here, the second by the driver."""


@pytest.fixture(scope="module")
def topics(kafka: KafkaService, redis_server: RedisServer) -> Topics:
    """Plain, chunked (some interleaved) and Redis reference messages over three partitions; a second
    topic with one dangling envelope, and a Redis object no envelope points at."""
    tag = uuid.uuid4().hex[:8]
    store = RedisStore(redis_server.client(), prefix=f"gwcluster{tag}")
    mixed, planted = f"cluster-mixed-{tag}", f"cluster-reconcile-{tag}"
    kafka.create_topic(mixed, partitions=PARTITIONS)
    kafka.create_topic(planted, partitions=2)
    producer = HybridProducer(
        {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}, stores={"redis": store}
    )
    rng = random.Random(20261123)
    routes = {"plain": 0, "chunked": 0, "reference": 0}
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            key = f"p{partition}-{i}".encode()
            kind = ("plain", "chunked", "reference", "plain", "pair")[i % 5]
            if kind == "pair":  # two chunked messages whose segments alternate
                first = split(mixed, partition, None, uuid.uuid4(), key + b"a", rng.randbytes(20_000), SEGMENT)
                second = split(mixed, partition, None, uuid.uuid4(), key + b"b", rng.randbytes(26_000), SEGMENT)
                records = [r for pair in zip(first, second, strict=False) for r in pair] + second[len(first) :]
                for r in records:
                    producer.inner.produce(
                        mixed,
                        value=bytes(r.value) if r.value is not None else None,
                        key=r.key,
                        partition=partition,
                        headers=r.headers,
                    )
                routes["chunked"] += 2
                continue
            size = {
                "plain": rng.randint(10, 3_000),
                "chunked": rng.randint(12_000, 40_000),
                "reference": rng.randint(500, 20_000),
            }[kind]
            producer.produce(
                mixed,
                rng.randbytes(size),
                key,
                partition,
                headers=[("i", str(i).encode())],
                route="reference:redis" if kind == "reference" else kind,
            )
            routes[kind] += 1
            producer.poll(0)
    for i in range(6):
        producer.produce(planted, os.urandom(1_000 + i), b"k", i % 2, route="reference:redis")
    message_id = uuid.uuid4()
    dangling = store.put(planted, message_id, b"deleted below")
    envelope = Envelope.for_payload(b"deleted below", store="redis", locator=dangling, message_id=message_id)
    producer.inner.produce(planted, value=encode_envelope(envelope), key=b"k", partition=1, headers=[envelope_header()])
    assert producer.flush(60) == 0
    producer.close()
    store.delete(dangling)
    orphan = store.put(planted, uuid.uuid4(), b"no envelope points here")
    stores_options = {"redis.url": redis_server.url, "redis.prefix": store.prefix}
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        **stores_options,
        "message.assembler.expiration.offset.gap": str(GAP),
        "includeHeaders": "true",  # the copy keeps the user headers: the reader must hand them out
    }
    copy, wave, stream = f"cluster-copy-{tag}", f"cluster-wave-{tag}", f"cluster-stream-{tag}"
    kafka.create_topic(copy, partitions=PARTITIONS)
    kafka.create_topic(wave, partitions=2)
    kafka.create_topic(stream, partitions=2)
    waves = [[_wave_message(number, i, rng) for i in range(WAVE)] for number in (1, 2)]
    producer = HybridProducer(
        {**kafka.producer_config(), "max.message.segment.bytes": SEGMENT}, stores={"redis": store}
    )
    for key, size, seed, route in waves[0]:
        producer.produce(wave, payload(size, seed), key.encode(), route=route)
    assert producer.flush(60) == 0
    producer.close()
    sink_options = {  # the sink's own policy routes the rows again: 8 kB chunks, Redis above 20 kB
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        **stores_options,
        "max.message.segment.bytes": str(SEGMENT),
        "reference.above": "20000",
    }
    return Topics(mixed, planted, options, orphan, dangling, routes, copy, wave, stream, sink_options, waves)


def _wave_message(number: int, i: int, rng: random.Random) -> list[Any]:
    route = ("plain", "chunked", "reference:redis")[i % 3]
    size = {"plain": rng.randint(10, 3_000), "chunked": rng.randint(12_000, 40_000)}.get(
        route, rng.randint(500, 30_000)
    )
    return [f"w{number}-{i}", size, 1000 * number + i, route]


@dataclass
class ClusterRun:
    driver: int
    rows: list[list[Any]]
    places: list[dict[str, Any]]
    report: list[str]
    stream_runs: list[list[list[int]]]


@pytest.fixture(scope="module")
def now_ms(topics: Topics) -> int:
    """One "now" for both reconcile runs, taken after the module's writes: grace 0 then sees the orphan."""
    return int(time.time() * 1000) + 60_000


@pytest.fixture(scope="module")
def cluster_run(
    cluster: SparkStandaloneCluster,
    topics: Topics,
    package_zip: Path,
    tmp_path_factory: pytest.TempPathFactory,
    now_ms: int,
) -> ClusterRun:
    """The driver process on the cluster: one read of the mixed topic, one reconcile of the other, the read
    rows through the sink, and a stream run twice (the second wave produced in between)."""
    work = tmp_path_factory.mktemp("cluster-driver")
    job = {
        "master": cluster.url,
        "conf": {
            **cluster.session_conf(),
            "spark.submit.pyFiles": str(package_zip),
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "2",
        },
        "read": {**topics.options, "subscribe": topics.mixed, "maxRecordsPerPartition": "25"},
        "reconcile": {**topics.options, "subscribe": topics.reconcile},
        "now_ms": now_ms,
        "grace_seconds": 0,
        "out": str(work / "out.json"),
        "sink": {**topics.sink_options, "topic": topics.copy},
        "stream": {
            "source": {**topics.options, "subscribe": topics.wave, "startingOffsets": "earliest",
                       "maxOffsetsPerTrigger": "8"},
            "sink": {**topics.sink_options, "topic": topics.stream},
            "checkpoint": str(work / "checkpoint"),
            "topic": topics.wave,
            "producer": {"bootstrap.servers": topics.options["kafka.bootstrap.servers"],
                         "max.message.segment.bytes": SEGMENT, "redis.url": topics.options["redis.url"],
                         "redis.prefix": topics.options["redis.prefix"]},
            "wave": topics.waves[1],
        },
    }  # fmt: skip
    (work / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}  # what the executors run (see docs/spark.md)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(CHILD), str(work / "job.json")],
        env=env,
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout.decode(errors="replace")[-6000:]
    out = json.loads((work / "out.json").read_text())
    print(
        f"\ncluster driver: {len(out['rows'])} rows, a reconcile, a copy and two stream runs"
        f" {out['stream_runs']} in {time.monotonic() - started:.1f}s"
    )
    return ClusterRun(out["driver"], out["rows"], out["places"], out["report"], out["stream_runs"])


def test_cluster_gives_the_same_rows_as_local(spark: Any, topics: Topics, cluster_run: ClusterRun) -> None:
    local = [
        row_view(r)
        for r in select_rows(
            spark.read.format("hybrid-kafka")
            .options(**topics.options, subscribe=topics.mixed, maxRecordsPerPartition="25")
            .load()
        )
    ]
    assert len(local) == sum(topics.routes.values())
    assert sorted(map(json.dumps, cluster_run.rows)) == sorted(map(json.dumps, local))
    routes = {route: sum(1 for r in local if r[6] == route) for route in topics.routes}
    assert routes == topics.routes
    assert all(r[8] is None for r in local)


def test_reconcile_gives_the_same_report_on_the_cluster(
    spark: Any, topics: Topics, cluster_run: ClusterRun, now_ms: int
) -> None:
    from gateway.spark import reconcile

    local = reconcile(spark, {**topics.options, "subscribe": topics.reconcile}, grace_seconds=0, now_ms=now_ms)
    assert [o.locator for o in local.orphans] == [topics.orphan]
    assert [d.locator for d in local.dangling] == [topics.dangling] and local.envelopes == 7
    assert cluster_run.report == local.lines()


def test_tasks_ran_in_both_workers_with_the_shipped_package(
    cluster: SparkStandaloneCluster, cluster_run: ClusterRun, package_zip: Path
) -> None:
    used = set()
    for place in cluster_run.places:
        owners = [w for w in cluster.workers if w.pid in place["ancestors"]]
        assert len(owners) == 1, f"task process {place['pid']} is not under a worker JVM: {place}"
        worker = owners[0]
        assert cluster_run.driver not in place["ancestors"], "a task ran in the driver's process tree"
        assert Path(place["cwd"]).is_relative_to(worker.work_dir), place
        # the executors have no PYTHONPATH to the worktree: gateway came from the zip the job shipped
        assert package_zip.name in place["module"] and Path(place["module"]).is_relative_to(worker.root), place
        used.add(worker.name)
    assert used == {w.name for w in cluster.workers}, f"tasks ran only in {used}"


def _read_to_end(kafka: KafkaService, topic: str, store: RedisStore) -> list[Any]:
    """Every message of ``topic`` up to the end offsets taken first: a duplicate cannot hide behind a count."""
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer(kafka.consumer_config())
    try:
        partitions = probe.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        probe.close()
    consumer = HybridConsumer(kafka.consumer_config(), stores={"redis": store})
    consumer.subscribe([topic])
    pending = {p for p, end in ends.items() if end > 0}
    got: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
            if msg.offset() >= ends[msg.partition()] - 1:
                pending.discard(msg.partition())
    finally:
        consumer.close()
    assert not pending, f"partitions {pending} of {topic} not read to their end"
    return got


def _user_headers(headers: Any) -> list[list[Any]]:
    return [[k, v] for k, v in (headers or []) if not k.startswith("_")]


def test_the_sink_on_the_cluster_writes_every_row_it_read(
    kafka: KafkaService, redis_server: RedisServer, topics: Topics, cluster_run: ClusterRun
) -> None:
    """The copy holds each row the cluster read once, with its value, user headers and partition."""
    read = {
        r[3]: (r[2], r[0], [h for h in r[4] if not h[0].startswith("_")]) for r in cluster_run.rows
    }  # key hex -> (sha, partition, user headers as hex)
    copy = _read_to_end(kafka, topics.copy, RedisStore(redis_server.client(), prefix=topics.options["redis.prefix"]))
    assert len(copy) == len(read) == sum(topics.routes.values())
    got = {
        m.key().hex(): (sha(m.value()), m.partition(), [[k, v.hex()] for k, v in _user_headers(m.headers())])
        for m in copy
    }
    assert got == read


def test_a_stream_restarted_on_the_cluster_writes_each_message_once(
    kafka: KafkaService, redis_server: RedisServer, topics: Topics, cluster_run: ClusterRun
) -> None:
    """Run 1 takes the first wave in micro-batches; run 2, a new query on the same checkpoint, only the second."""
    first, second = cluster_run.stream_runs
    assert len(first) >= 2, f"maxOffsetsPerTrigger should split the first run: {first}"
    assert sum(rows for _, rows in first) == WAVE and sum(rows for _, rows in second) == WAVE
    assert second[0][0] == first[-1][0] + 1, f"the restart did not go on from the checkpoint: {first} then {second}"
    out = _read_to_end(kafka, topics.stream, RedisStore(redis_server.client(), prefix=topics.options["redis.prefix"]))
    keys = sorted(m.key().decode() for m in out)
    assert keys == sorted(key for wave in topics.waves for key, *_ in wave), "a message is missing or written twice"
    expected = {key: sha(payload(size, seed)) for wave in topics.waves for key, size, seed, _ in wave}
    assert {m.key().decode(): sha(m.value()) for m in out} == expected


def test_the_demo_runs_its_spark_stage_on_the_cluster(
    cluster: SparkStandaloneCluster, cluster_run: ClusterRun, kafka: KafkaService
) -> None:
    """``gateway demo --spark-master spark://...``, as docs/spark.md shows it: the executors, without the
    caller's ``PYTHONPATH``, get the package from the zip the demo ships, and every step verifies.

    On a real broker the demo uses the session's (``--kafka host:port``): starting a broker of its own
    is test_demo_cli's concern, and here it only cost a JVM start. The embedded cluster stays the
    demo's own, since the demo sizes its topics to the embedded cluster's limits only when it knows
    it runs there."""
    from gateway.testing import resolve_backend

    backend = resolve_backend()
    if backend not in ("mock", "kafka"):
        pytest.skip(f"the demo starts its own broker only for mock and kafka, not {backend}")
    broker = kafka.bootstrap_servers if backend == "kafka" else backend
    args = ["--kafka", broker, "--count", "40", "--wave", "6", "--spark-master", cluster.url]
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "demo", *args],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on {cluster.url}" in done.stdout
    assert "verdict: all verified (Kafka routes, Spark stage)" in done.stdout
    assert "6/6 wave messages written exactly once across a restart" in done.stdout
    apps = cluster.state().get("completedapps", []) + cluster.state().get("activeapps", [])
    assert any(app.get("name") == "gateway-demo" for app in apps), apps
