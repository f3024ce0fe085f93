"""``hybrid-kafka`` against Spark's own Kafka source (``spark-sql-kafka-0-10``) on the same plain records.

For plain records the two formats must be indistinguishable in the columns they share: a user
moving a job from ``format("kafka")`` to ``format("hybrid-kafka")`` gets the same rows, down to
``NULL`` against empty keys, values and header lists, duplicate and ``NULL``-valued headers,
and the timestamp type of a log-append-time topic. Spark's source needs its jars on the session
(``make spark-kafka``; the ``spark`` fixture in conftest.py adds them); a missing jar fails here
rather than skipping, because without the comparison nothing checks that promise.
"""

from __future__ import annotations

import json
import random
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import KafkaService, ServiceUnavailable, spark_kafka_conf, spark_kafka_jars
from tests.kafkautil import produce_records

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

# Spark's source talks to the broker through Apache Kafka's Java clients; the librdkafka mock cannot
# answer them (their AdminClient times out on listNodes), so only a real broker can hold the comparison
needs_java_clients = pytest.mark.requires("java_clients")

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
"""Spark's Kafka source schema with ``includeHeaders=true``; ``hybrid-kafka`` adds columns after these."""

PARTITIONS = 3
PER_PARTITION = 60

# every shape of header list a Kafka record can carry, cycled over the records
HEADER_SHAPES: tuple[list[tuple[str, bytes | None]] | None, ...] = (
    None,
    [],
    [("app", b"one")],
    [("dup", b"first"), ("dup", b"second"), ("dup", None)],
    [("none", None)],
    [("", b"empty key"), ("utf8-\u00e9", "caf\u00e9".encode()), ("empty", b"")],
)


@dataclass(frozen=True)
class Topics:
    create_time: str
    log_append_time: str
    produced: int


@pytest.fixture(scope="module")
def spark_kafka(spark: Any) -> Any:
    """The session, once it is sure to have Spark's ``kafka`` format."""
    if "spark-sql-kafka" not in spark.sparkContext.getConf().get("spark.jars", ""):
        try:
            spark_kafka_jars()
        except ServiceUnavailable as exc:
            pytest.fail(f"Spark's Kafka source is needed for this comparison: {exc.reason}")
        pytest.fail(
            "the SparkSession started without Spark's Kafka source (spark.jars): start it with"
            " gateway.testing.spark_kafka_conf()"
        )
    return spark


def _records(topic: str, rng: random.Random) -> list[dict[str, Any]]:
    now_ms = int(time.time() * 1000)
    out: list[dict[str, Any]] = []
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            record: dict[str, Any] = {"topic": topic, "partition": partition}
            if i % 7 == 0:
                record["key"] = None
            elif i % 11 == 0:
                record["key"] = b""
            else:
                record["key"] = f"k{partition}-{i}".encode()
            if i == 13:
                record["value"] = None  # a tombstone
            elif i % 17 == 0:
                record["value"] = b""
            else:
                record["value"] = rng.randbytes(rng.randint(1, 400))
            headers = HEADER_SHAPES[i % len(HEADER_SHAPES)]
            if headers is not None:
                record["headers"] = headers
            if i % 4 == 0:  # the record's own time, recent (a broker may apply retention to old ones)
                record["timestamp"] = now_ms - 60_000 + i
            out.append(record)
    return out


@pytest.fixture(scope="module")
def topics(kafka: KafkaService) -> Topics:
    tag = uuid.uuid4().hex[:8]
    create_time, log_append_time = f"spark-cmp-ct-{tag}", f"spark-cmp-lat-{tag}"
    kafka.create_topic(create_time, partitions=PARTITIONS)
    # the broker stamps its own time here (timestampType 1); a backend without topic configs ignores it
    kafka.create_topic(log_append_time, partitions=PARTITIONS, config={"message.timestamp.type": "LogAppendTime"})
    rng = random.Random(20261123)
    conf = kafka.producer_config()
    produce_records(conf, _records(create_time, rng) + _records(log_append_time, rng))
    return Topics(create_time, log_append_time, 2 * PARTITIONS * PER_PARTITION)


def _collect(frame: Any) -> list[tuple[Any, ...]]:
    """Rows as plain tuples (bytes, header tuples), sorted by topic, partition, offset."""
    rows = []
    for r in frame.select(*COLUMNS).collect():
        headers = (
            None
            if r["headers"] is None
            else tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"])
        )
        rows.append(
            (
                r["topic"],
                r["partition"],
                r["offset"],
                None if r["key"] is None else bytes(r["key"]),
                None if r["value"] is None else bytes(r["value"]),
                r["timestamp"],
                r["timestampType"],
                headers,
            )
        )
    return sorted(rows, key=lambda row: (row[0], row[1], row[2]))


def _both(spark: Any, kafka: KafkaService, **options: str) -> tuple[Any, Any]:
    common = {"kafka.bootstrap.servers": kafka.bootstrap_servers, **options}
    ours = spark.read.format("hybrid-kafka").options(**common).option("includeHeaders", "true").load()
    theirs = spark.read.format("kafka").options(**common).option("includeHeaders", "true").load()
    return ours, theirs


def _assert_same(ours: Any, theirs: Any) -> list[tuple[Any, ...]]:
    assert ours.select(*COLUMNS).schema.simpleString() == theirs.select(*COLUMNS).schema.simpleString()
    mine, spark_rows = _collect(ours), _collect(theirs)
    assert len(mine) == len(spark_rows)
    for got, want in zip(mine, spark_rows, strict=True):
        assert got == want, f"hybrid-kafka {got!r}\n   Spark's kafka {want!r}"
    return spark_rows


@needs_java_clients
def test_plain_records_read_as_sparks_kafka_source_reads_them(
    spark_kafka: Any, kafka: KafkaService, topics: Topics
) -> None:
    ours, theirs = _both(spark_kafka, kafka, subscribe=f"{topics.create_time},{topics.log_append_time}")
    rows = _assert_same(ours, theirs)
    assert len(rows) == topics.produced
    # the comparison covered what it claims to: every shape of key, value, header list and timestamp
    assert {row[3] for row in rows} >= {None, b""} and {row[4] for row in rows} >= {None, b""}
    assert {row[7] for row in rows} >= {None, (("dup", b"first"), ("dup", b"second"), ("dup", None)), (("none", None),)}
    expected_types = {0, 1} if kafka.has("topic_configs_enforced") else {0}
    assert {row[6] for row in rows} == expected_types


@needs_java_clients
def test_explicit_offsets_read_the_same_window(spark_kafka: Any, kafka: KafkaService, topics: Topics) -> None:
    topic = topics.create_time
    window = {  # Spark's source wants every partition named; -2 is earliest, -1 latest in both
        "subscribe": topic,
        "startingOffsets": f'{{"{topic}": {{"0": 5, "1": 60, "2": -2}}}}',
        "endingOffsets": f'{{"{topic}": {{"0": 41, "1": -1, "2": -1}}}}',
    }
    rows = _assert_same(*_both(spark_kafka, kafka, **window))
    assert [(p, o) for _, p, o, *_ in rows] == [(0, o) for o in range(5, 41)] + [(2, o) for o in range(PER_PARTITION)]


# -- finding the jars (no Spark needed) --------------------------------------------------------------


def test_jar_lookup_wants_the_connector_for_the_installed_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_KAFKA_LIB_DIR", str(tmp_path / "absent"))
    with pytest.raises(ServiceUnavailable, match="make spark-kafka"):
        spark_kafka_jars("4.2.0")
    lib = tmp_path / "lib"
    lib.mkdir()
    monkeypatch.setenv("SPARK_KAFKA_LIB_DIR", str(lib))
    with pytest.raises(ServiceUnavailable, match="make spark-kafka"):
        spark_kafka_jars("4.2.0")  # a folder without the connector
    for name in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"):
        (lib / name).write_bytes(b"")
    # a connector built for another Spark fails late with linkage errors: refused up front
    with pytest.raises(ServiceUnavailable, match=r"for Spark 4\.2\.0, but PySpark is 4\.3\.0"):
        spark_kafka_jars("4.3.0")
    assert [p.name for p in spark_kafka_jars("4.2.0")] == [
        "commons-pool2-2.13.1.jar",
        "kafka-clients-3.9.2.jar",
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    ]
    assert spark_kafka_conf("4.2.0") == {
        "spark.jars": ",".join(
            str(lib / n)
            for n in ("commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar")
        )
    }


# -- subscription and timestamp options, side by side with Spark's source --------------------------

TIMED_PER_PARTITION = 50
TIME_STEP_MS = 1_000


@pytest.fixture(scope="module")
def timed_topic(kafka: KafkaService) -> tuple[str, int]:
    """Records one second apart in record time, from ``base``: offset i of every partition is at base + i s."""
    topic = f"spark-cmp-time-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    base = int(time.time() * 1000) - 3_600_000
    records = [
        {
            "topic": topic,
            "partition": p,
            "key": f"k{i}".encode(),
            "value": f"v{p}-{i}".encode(),
            "timestamp": base + i * TIME_STEP_MS,
        }
        for p in range(PARTITIONS)
        for i in range(TIMED_PER_PARTITION)
    ]
    produce_records(kafka.producer_config(), records)
    return topic, base


@needs_java_clients
def test_subscribe_pattern_and_assign_read_what_sparks_source_reads(
    spark_kafka: Any, kafka: KafkaService, topics: Topics
) -> None:
    tag = topics.create_time.rsplit("-", 1)[1]
    rows = _assert_same(*_both(spark_kafka, kafka, subscribePattern=f"spark-cmp-(ct|lat)-{tag}"))
    assert len(rows) == topics.produced
    assign = f'{{"{topics.create_time}": [0, 2]}}'
    rows = _assert_same(*_both(spark_kafka, kafka, assign=assign))
    assert {(t, p) for t, p, *_ in rows} == {(topics.create_time, 0), (topics.create_time, 2)}
    assert len(rows) == 2 * PER_PARTITION


@needs_java_clients
@pytest.mark.requires("offsets_for_times")
def test_timestamps_start_and_end_where_sparks_source_does(
    spark_kafka: Any, kafka: KafkaService, timed_topic: tuple[str, int]
) -> None:
    topic, base = timed_topic
    window = {
        "subscribe": topic,
        "startingTimestamp": str(base + 10 * TIME_STEP_MS + 500),  # between offsets 10 and 11
        "endingTimestamp": str(base + 40 * TIME_STEP_MS),  # offset 40, exclusive
    }
    rows = _assert_same(*_both(spark_kafka, kafka, **window))
    assert [(p, o) for _, p, o, *_ in rows] == [(p, o) for p in range(PARTITIONS) for o in range(11, 40)]
    by_partition = {
        "subscribe": topic,
        "startingOffsetsByTimestamp": json.dumps({topic: {"0": base, "1": base + 45 * TIME_STEP_MS, "2": base}}),
        "endingOffsetsByTimestamp": json.dumps({topic: {"0": base + 5 * TIME_STEP_MS, "1": base + 10**9, "2": base}}),
    }
    rows = _assert_same(*_both(spark_kafka, kafka, **by_partition))
    assert [(p, o) for _, p, o, *_ in rows] == [(0, o) for o in range(5)] + [(1, o) for o in range(45, 50)]
    future = {
        "subscribe": topic,
        "startingTimestamp": str(base + 10**9),
        "startingOffsetsByTimestampStrategy": "latest",
    }
    assert _assert_same(*_both(spark_kafka, kafka, **future)) == []


@pytest.mark.requires("offsets_for_times")
def test_a_timestamp_after_the_last_record_fails_unless_the_strategy_says_latest(
    spark: Any, kafka: KafkaService, timed_topic: tuple[str, int]
) -> None:
    topic, base = timed_topic
    future = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": topic,
        "startingTimestamp": str(base + 10**9),
    }
    with pytest.raises(Exception, match=r"no record of .* has a timestamp at or after"):
        spark.read.format("hybrid-kafka").options(**future).load().collect()
    rows = (
        spark.read.format("hybrid-kafka")
        .options(**future)
        .option("startingOffsetsByTimestampStrategy", "latest")
        .load()
    ).collect()
    assert rows == []


def test_headers_column_only_with_include_headers_and_unknown_options_are_refused(
    spark: Any, kafka: KafkaService, topics: Topics
) -> None:
    common = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topics.create_time}
    default = spark.read.format("hybrid-kafka").options(**common).load()
    without = spark.read.format("hybrid-kafka").options(**common).option("includeHeaders", "false").load()
    with_headers = spark.read.format("hybrid-kafka").options(**common).option("includeHeaders", "true").load()
    # ours defaults to true (the API promises the column); false gives Spark's schema
    assert default.columns == with_headers.columns and "headers" not in without.columns
    assert with_headers.columns == [*COLUMNS, "route", "startingOffset", "error"]
    assert with_headers.filter("headers is not null").count() > 0
    assert without.count() == with_headers.count() == PARTITIONS * PER_PARTITION
    with pytest.raises(Exception, match="unknown option bogusoption"):
        spark.read.format("hybrid-kafka").options(**common).option("bogusOption", "1").load().collect()


# -- options Spark's source refuses, side by side ------------------------------------------------------


def _fails(spark: Any, fmt: str, options: dict[str, str]) -> str:
    """The error text of a batch read with ``options``; fails the test if the read succeeds."""
    try:
        spark.read.format(fmt).options(**options).load().collect()
    except Exception as exc:
        return str(exc)
    pytest.fail(f"format({fmt!r}) read with {options} did not fail")


@needs_java_clients
def test_without_headers_the_columns_are_sparks(spark_kafka: Any, kafka: KafkaService, topics: Topics) -> None:
    common = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topics.create_time}
    theirs = spark_kafka.read.format("kafka").options(**common).load()
    ours = spark_kafka.read.format("hybrid-kafka").options(**common).option("includeHeaders", "false").load()
    assert "headers" not in theirs.columns and "headers" not in ours.columns
    assert "headers" in spark_kafka.read.format("hybrid-kafka").options(**common).load().columns
    assert ours.columns[: len(theirs.columns)] == theirs.columns
    assert ours.select(*theirs.columns).schema.simpleString() == theirs.schema.simpleString()


@needs_java_clients
@pytest.mark.parametrize(
    ("case", "spark_says", "we_say"),
    [
        ("latest start", "starting offset can't be latest", "startingOffsets=latest is refused for batch"),
        ("earliest end", "ending offset can't be earliest", "endingOffsets=earliest is refused for batch"),
        ("partial start", "Specified:", r"startingOffsets must name every partition.*missing \S+\[1\]"),
        ("partial end", "Specified:", r"endingOffsets must name every partition.*missing \S+\[2\]"),
        ("key deserializer", "not supported as keys are deserialized", "keys are deserialized as byte arrays"),
        ("interceptors", "Kafka option 'interceptor.classes' is not supported", "'interceptor.classes' is not"),
        ("auto offset reset", "'auto.offset.reset' is not supported", "'auto.offset.reset' is not supported"),
    ],
)
def test_batch_options_spark_refuses_are_refused(
    spark_kafka: Any, kafka: KafkaService, topics: Topics, case: str, spark_says: str, we_say: str
) -> None:
    topic = topics.create_time
    options = {
        "latest start": {"startingOffsets": "latest"},
        "earliest end": {"endingOffsets": "earliest"},
        "partial start": {"startingOffsets": json.dumps({topic: {"0": 0, "2": 0}})},
        "partial end": {"endingOffsets": json.dumps({topic: {"0": -1, "1": -1}})},
        "key deserializer": {"kafka.key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer"},
        "interceptors": {"kafka.interceptor.classes": "com.example.Interceptor"},
        "auto offset reset": {"kafka.auto.offset.reset": "earliest"},
    }[case]
    common = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic, **options}
    assert spark_says in _fails(spark_kafka, "kafka", common)
    assert re.search(we_say, _fails(spark_kafka, "hybrid-kafka", common), re.S)


def _stream_error(spark: Any, fmt: str, options: dict[str, str]) -> str | None:
    query = (
        spark.readStream.format(fmt)
        .options(**options)
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    except Exception as exc:
        return str(exc)
    error = query.exception()
    return None if error is None else str(error)


@needs_java_clients
def test_a_stream_whose_starting_offsets_leave_out_a_partition_fails_as_sparks(
    spark_kafka: Any, kafka: KafkaService, topics: Topics
) -> None:
    topic = topics.create_time
    common = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": topic,
        "startingOffsets": json.dumps({topic: {"0": 0, "1": -1}}),
    }
    theirs = _stream_error(spark_kafka, "kafka", common)
    assert theirs is not None and "Specified:" in theirs
    ours = _stream_error(spark_kafka, "hybrid-kafka", common)
    assert ours is not None and re.search(r"startingOffsets must name every partition.*missing \S+\[2\]", ours, re.S)
    # naming all of them is fine for both
    common["startingOffsets"] = json.dumps({topic: {"0": 0, "1": -1, "2": -2}})
    assert _stream_error(spark_kafka, "kafka", common) is None
    assert _stream_error(spark_kafka, "hybrid-kafka", common) is None


@needs_java_clients
def test_the_sink_writes_a_headers_column_whatever_include_headers_says_as_sparks(
    spark_kafka: Any, kafka: KafkaService
) -> None:
    tag = uuid.uuid4().hex[:8]
    frame = spark_kafka.createDataFrame(
        [(b"k", b"v", [("h", b"1")])], "key binary, value binary, headers array<struct<key:string,value:binary>>"
    )
    read_back = {}
    for fmt in ("kafka", "hybrid-kafka"):
        topic = f"spark-sink-hdr-{fmt}-{tag}"
        kafka.create_topic(topic, partitions=1)
        writer = frame.write.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        writer.option("topic", topic).option("includeHeaders", "false").mode("append").save()
        rows = (
            spark_kafka.read.format("kafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", topic)
            .option("includeHeaders", "true")
            .load()
            .collect()
        )
        read_back[fmt] = [[(h["key"], bytes(h["value"])) for h in r["headers"]] for r in rows]
    assert read_back["hybrid-kafka"] == read_back["kafka"] == [[("h", b"1")]]


def test_java_client_options_are_translated_or_refused_before_any_task(
    spark: Any, kafka: KafkaService, topics: Topics
) -> None:
    common = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topics.create_time}
    # fetch.max.wait.ms is the Java name of librdkafka's fetch.wait.max.ms: the read goes through
    java = {**common, "kafka.fetch.max.wait.ms": "10", "kafka.ssl.endpoint.identification.algorithm": ""}
    assert spark.read.format("hybrid-kafka").options(**java).load().count() == PARTITIONS * PER_PARTITION
    started = time.monotonic()
    text = _fails(spark, "hybrid-kafka", {**common, "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks"})
    assert "kafka.ssl.ca.location" in text and time.monotonic() - started < 30
    jaas = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    assert "kafka.sasl.oauthbearer.method=oidc" in _fails(
        spark, "hybrid-kafka", {**common, "kafka.sasl.jaas.config": jaas}
    )
