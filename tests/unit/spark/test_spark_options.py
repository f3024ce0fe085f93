"""Option parity with Spark's Kafka source (``format("kafka")``, Spark 4), without Spark or Kafka.

Each behaviour either matches Spark's (KafkaSourceProvider: batch refusals, groupIdPrefix,
includeHeaders, the kafka.* keys it refuses, pollTimeoutMs falling back to spark.network.timeout)
or is refused with a message naming Spark's behaviour; Java-client ``kafka.*`` names are translated
to librdkafka's or refused naming the librdkafka option to use. The integration test
tests/integration/test_spark_kafka_source.py holds the same cases against Spark's own source.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.spark.kafkaconf import SPARK_REFUSED_SINK, SPARK_REFUSED_SOURCE, KafkaOptionError, parse_jaas, translate
from gateway.spark.options import (
    DEFAULT_NETWORK_TIMEOUT_MS,
    EARLIEST,
    LATEST,
    OptionError,
    network_timeout_ms,
    parse_options,
)
from gateway.spark.planning import check_specs_name_all
from gateway.spark.sink import parse_sink_options

BASE = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
TPS = [("t", 0), ("t", 1)]


def test_batch_refuses_latest_start_and_earliest_end_as_spark_does() -> None:
    with pytest.raises(OptionError, match=r"startingOffsets=latest is refused for batch.*can't be latest for batch"):
        parse_options({**BASE, "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(OptionError, match=r"-1 \(latest\) for t\[0\] is refused for batch"):
        parse_options({**BASE, "startingOffsets": '{"t": {"0": -1, "1": 0}}'}, streaming=False)
    with pytest.raises(OptionError, match=r"endingOffsets=earliest is refused for batch.*can't be earliest"):
        parse_options({**BASE, "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(OptionError, match=r"-2 \(earliest\) for t\[1\] is refused for batch"):
        parse_options({**BASE, "endingOffsets": '{"t": {"0": -1, "1": -2}}'}, streaming=False)
    # a stream may start at latest (its default), with -1 in JSON too; it takes no ending offsets at all
    stream = parse_options({**BASE, "startingOffsets": '{"t": {"0": -1, "1": -2}}'}, streaming=True)
    assert [stream.starting_offsets.for_partition(tp) for tp in TPS] == [LATEST, EARLIEST]
    assert parse_options({**BASE, "startingOffsets": "latest"}, streaming=True).starting_offsets.kind == "latest"
    with pytest.raises(OptionError, match="ending offset not valid in streaming queries"):
        parse_options({**BASE, "endingOffsets": "latest"}, streaming=True)


def test_json_offsets_must_name_exactly_the_partitions_read() -> None:
    opts = parse_options(
        {
            **BASE,
            "startingOffsets": '{"t": {"0": 5}}',
            "endingOffsets": '{"t": {"0": -1, "1": 9}}',
            "endingOffsetsByTimestamp": '{"t": {"0": 1, "1": 2, "2": 3}}',
        },
        streaming=False,
    )
    with pytest.raises(OptionError, match=r"startingOffsets must name every partition.*missing t\[1\]"):
        check_specs_name_all(TPS, ("startingOffsets", opts.starting_offsets))
    check_specs_name_all(TPS, ("endingOffsets", opts.ending_offsets))  # all named: fine
    with pytest.raises(OptionError, match=r"missing none; not read by the query t\[2\]"):
        check_specs_name_all(TPS, ("endingOffsetsByTimestamp", opts.ending_timestamps))
    # earliest/latest and a single timestamp name nothing and need nothing
    plain = parse_options({**BASE, "startingTimestamp": "10"}, streaming=False)
    check_specs_name_all(
        TPS, ("s", plain.starting_offsets), ("e", plain.ending_offsets), ("t", plain.starting_timestamps)
    )


def test_group_id_prefix_defaults_are_sparks() -> None:
    batch = parse_options(BASE, streaming=False).group_id
    stream = parse_options(BASE, streaming=True).group_id
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    assert re.fullmatch(f"spark-kafka-relation-{uuid}", batch)
    assert re.fullmatch(f"spark-kafka-source-{uuid}", stream)
    assert parse_options({**BASE, "groupIdPrefix": "etl"}, streaming=False).group_id.startswith("etl-")
    both = parse_options({**BASE, "groupIdPrefix": "etl", "kafka.group.id": "mine"}, streaming=True)
    assert both.group_id == "mine" and "group.id" not in both.kafka_config


def test_include_headers_is_true_by_default_as_the_api_promises_and_false_drops_the_column() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from gateway.spark.schema import message_arrow_schema, message_schema
    from gateway.spark.source import HybridKafkaDataSource

    assert parse_options(BASE, streaming=False).include_headers
    assert not parse_options({**BASE, "includeHeaders": "FALSE"}, streaming=False).include_headers
    spark_columns = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert HybridKafkaDataSource(dict(BASE)).schema().fieldNames()[7] == "headers"
    without = HybridKafkaDataSource({**BASE, "includeheaders": "false"}).schema()
    assert without.fieldNames() == [*spark_columns, "route", "startingOffset", "error"]
    with_headers = HybridKafkaDataSource({**BASE, "includeheaders": "true"}).schema()
    assert with_headers.fieldNames() == [*spark_columns, "headers", "route", "startingOffset", "error"]
    for include in (False, True):
        assert to_arrow_schema(message_schema(include), timezone="UTC").equals(message_arrow_schema(include))


@pytest.mark.parametrize("name", sorted(SPARK_REFUSED_SOURCE))
def test_kafka_keys_spark_refuses_are_refused_with_its_reason(name: str) -> None:
    with pytest.raises(OptionError, match=f"option kafka.{re.escape(name)}: Kafka option '{re.escape(name)}'"):
        parse_options({**BASE, f"kafka.{name}": "x"}, streaming=False)


def test_deserializer_refusal_is_sparks_message() -> None:
    with pytest.raises(OptionError) as caught:
        parse_options({**BASE, "kafka.key.deserializer": "org.apache.kafka...StringDeserializer"}, streaming=True)
    assert "keys are deserialized as byte arrays with ByteArrayDeserializer" in str(caught.value)
    assert "Use DataFrame operations to explicitly deserialize the keys" in str(caught.value)


@pytest.mark.parametrize("name", sorted(SPARK_REFUSED_SINK))
def test_the_sink_refuses_serializers_as_sparks_sink_does(name: str) -> None:
    with pytest.raises(OptionError, match=f"option kafka.{re.escape(name)}"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", f"kafka.{name}": "x"})


def test_the_sink_takes_include_headers_as_spark_does() -> None:
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "includeHeaders": "false"})
    assert sink.topic == "t" and "includeheaders" not in sink.producer_config
    with pytest.raises(OptionError, match="includeheaders"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "includeHeaders": "sometimes"})


# -- Java-client names --------------------------------------------------------------------------

PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3 \\"cr;t";'
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required username='bob' password=pw;"


def test_jaas_with_a_username_and_password_becomes_librdkafkas_keys() -> None:
    assert translate({"sasl.jaas.config": PLAIN}, {}) == {"sasl.username": "alice", "sasl.password": 's3 "cr;t'}
    assert translate({"sasl.jaas.config": SCRAM, "sasl.mechanism": "SCRAM-SHA-512"}, {}) == {
        "sasl.username": "bob",
        "sasl.password": "pw",
        "sasl.mechanism": "SCRAM-SHA-512",
    }
    assert parse_jaas(SCRAM)[0] == "org.apache.kafka.common.security.scram.ScramLoginModule"
    with pytest.raises(KafkaOptionError, match=r"its username differs from kafka\.sasl\.username"):
        translate({"sasl.jaas.config": PLAIN, "sasl.username": "mallory"}, {})


@pytest.mark.parametrize(
    ("jaas", "names"),
    [
        (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            "kafka.sasl.oauthbearer.method=oidc",
        ),
        ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k";', "kafka.sasl.kerberos"),
        ("org.apache.kafka.common.security.plain.PlainLoginModule required username=only;", "kafka.sasl.username"),
        ("not jaas at all", "LoginModule"),
    ],
)
def test_jaas_that_cannot_be_translated_names_the_librdkafka_keys(jaas: str, names: str) -> None:
    with pytest.raises(OptionError, match=re.escape(names)):
        parse_options({**BASE, "kafka.sasl.jaas.config": jaas}, streaming=False)


def test_trust_stores_pem_is_translated_and_java_stores_are_refused_naming_ssl_ca_location() -> None:
    pem = translate({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}, {})
    assert pem == {"ssl.ca.location": "/ca.pem"}
    assert translate({"ssl.truststore.type": "pem", "ssl.truststore.certificates": "-----BEGIN"}, {}) == {
        "ssl.ca.pem": "-----BEGIN"
    }
    for conf in (
        {"ssl.truststore.location": "/ts.jks", "ssl.truststore.password": "x"},  # Java's default type: JKS
        {"ssl.truststore.location": "/ts.p12", "ssl.truststore.type": "PKCS12"},
    ):
        with pytest.raises(KafkaOptionError, match=r"cannot read a (JKS|PKCS12) trust store.*kafka\.ssl\.ca\.location"):
            translate(conf, {})
    with pytest.raises(KafkaOptionError, match="a PEM trust store has no password"):
        translate({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/c", "ssl.truststore.password": "x"}, {})


def test_key_stores_pkcs12_passes_jks_and_pem_files_are_refused_naming_librdkafkas_keys() -> None:
    p12 = {"ssl.keystore.location": "/ks.p12", "ssl.keystore.password": "pw", "ssl.key.password": "kp"}
    assert translate({**p12, "ssl.keystore.type": "PKCS12"}, {}) == p12
    assert translate(p12, {}) == p12  # librdkafka's own keys (a PKCS#12 file) pass as they are
    with pytest.raises(KafkaOptionError, match=r"JKS key store: convert it to PKCS#12.*kafka\.ssl\.key\.location"):
        translate({**p12, "ssl.keystore.type": "JKS"}, {})
    with pytest.raises(KafkaOptionError, match=r"kafka\.ssl\.certificate\.location and kafka\.ssl\.key\.location"):
        translate({"ssl.keystore.location": "/both.pem", "ssl.keystore.type": "PEM"}, {})
    inline = {"ssl.keystore.type": "PEM", "ssl.keystore.key": "KEY", "ssl.keystore.certificate.chain": "CHAIN"}
    assert translate(inline, {}) == {"ssl.key.pem": "KEY", "ssl.certificate.pem": "CHAIN"}


def test_partitioner_class_default_is_translated_others_name_kafka_partitioner() -> None:
    default = "org.apache.kafka.clients.producer.internals.DefaultPartitioner"
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.partitioner.class": default})
    assert sink.producer_config == {"partitioner": "murmur2_random"}
    with pytest.raises(OptionError, match=r"librdkafka chooses .* with kafka\.partitioner \(random, consistent"):
        parse_sink_options(
            {"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.partitioner.class": "com.acme.MyPartitioner"}
        )


def test_java_renames_and_untouched_librdkafka_keys() -> None:
    conf = {"fetch.max.wait.ms": "10", "security.protocol": "SASL_SSL", "ssl.endpoint.identification.algorithm": ""}
    assert translate(conf, {}) == {
        "fetch.wait.max.ms": "10",
        "security.protocol": "SASL_SSL",
        "ssl.endpoint.identification.algorithm": "none",
    }
    with pytest.raises(KafkaOptionError, match=r"is librdkafka's fetch\.wait\.max\.ms"):
        translate({"fetch.max.wait.ms": "10", "fetch.wait.max.ms": "20"}, {})


# -- kafkaConsumer.pollTimeoutMs and spark.network.timeout --------------------------------------------


def test_poll_timeout_falls_back_to_the_network_timeout() -> None:
    assert parse_options(BASE, streaming=False).poll_timeout_ms == DEFAULT_NETWORK_TIMEOUT_MS == 120_000
    assert parse_options(BASE, streaming=True, network_timeout_ms=7_000).poll_timeout_ms == 7_000
    explicit = {**BASE, "kafkaConsumer.pollTimeoutMs": "512"}
    assert parse_options(explicit, streaming=False, network_timeout_ms=7_000).poll_timeout_ms == 512
    assert [network_timeout_ms(v) for v in (None, "120s", "300", "2min", "1500ms", "1h")] == [
        120_000,
        120_000,
        300_000,
        120_000,
        1_500,
        3_600_000,
    ]
    with pytest.raises(OptionError, match="is not a time"):
        network_timeout_ms("soon")


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Sources:
    def __init__(self) -> None:
        self.registered: list[Any] = []

    def register(self, cls: Any) -> None:
        self.registered.append(cls)


class _Session:
    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = _Conf(conf)
        self.dataSource = _Sources()


def test_register_carries_the_sessions_network_timeout_to_the_worker() -> None:
    from pyspark import cloudpickle  # what PySpark uses to ship a data source class

    from gateway.spark import register
    from gateway.spark.source import FORMAT, HybridKafkaDataSource, HybridKafkaStreamReader

    session = _Session({"spark.network.timeout": "45s"})
    register(session)
    source = session.dataSource.registered[0]
    assert issubclass(source, HybridKafkaDataSource) and source.name() == FORMAT
    shipped = cloudpickle.loads(cloudpickle.dumps(source))  # type: ignore[no-untyped-call]  # the class is what travels to the Python worker
    assert shipped.network_timeout_ms == 45_000
    reader = shipped(dict(BASE)).streamReader(None)
    assert isinstance(reader, HybridKafkaStreamReader) and reader.options.poll_timeout_ms == 45_000
    register(_Session({}))  # no spark.network.timeout: Spark's 120s
