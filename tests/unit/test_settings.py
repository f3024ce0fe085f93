"""One settings schema: every entry point reads a key through its declaration, with one default and one bound.

The producer's and the consumer's config dicts, the Spark source's options and the ``gateway``
command all read :mod:`gateway.settings`; these tests hold them to it.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.consumer._errors import ErrorPolicy
from gateway.consumer.config import parse_consumer_config
from gateway.core.assembler import DEFAULT_BUFFER_CAPACITY, MessageAssembler
from gateway.encryption._reference import CHOICES as ENCRYPTION_CHOICES
from gateway.producer._config import parse_producer_config
from gateway.producer.reference.digests import CHECKSUM_SETTINGS
from gateway.protocol.metadata import CommitEncoding
from gateway.protocol.payload_encoding import COMPRESSION_SETTINGS
from gateway.protocol.peers import PeerFormat
from gateway.settings import (
    COMMAND_CREDENTIALS,
    CONSUMER,
    PRODUCER,
    SPARK,
    IntSetting,
    OptionalIntSetting,
    Setting,
    ValueSetting,
)
from gateway.settings import consumer as consumer_keys
from gateway.settings import producer as producer_keys
from gateway.settings.shared import COMMIT_METADATA_ENCODING, MAX_CHUNKED_MESSAGE_BYTES, REFERENCE_ENCRYPTION
from gateway.spark.options import KNOWN_OPTIONS, OptionError, parse_options

READ_BY_THE_CLIENT = {
    "key.serializer",
    "value.serializer",
    "key.deserializer",
    "value.deserializer",
    "reference.encryption",  # ReferenceEncryption.from_config, before the parser
}
"""Declared keys that the clients read outside ``parse_*_config``."""
SPARK_BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}


def _sample(setting: Setting[Any]) -> Any:
    """A value the setting takes."""
    if isinstance(setting, OptionalIntSetting):
        return 1000
    return setting.default


@pytest.mark.parametrize("setting", [s for s in PRODUCER if s.key not in READ_BY_THE_CLIENT], ids=lambda s: s.key)
def test_the_producer_takes_every_declared_key_out_of_the_config(setting: Setting[Any]) -> None:
    _, rest = parse_producer_config({setting.key: _sample(setting)})
    assert setting.key not in rest or setting.key == "message.max.bytes", "librdkafka would refuse it"


@pytest.mark.parametrize("setting", [s for s in CONSUMER if s.key not in READ_BY_THE_CLIENT], ids=lambda s: s.key)
def test_the_consumer_takes_every_declared_key_out_of_the_config(setting: Setting[Any]) -> None:
    _, rest = parse_consumer_config({setting.key: _sample(setting)})
    assert setting.key not in rest or setting.key == "enable.auto.commit"  # set false for the inner consumer


BOUNDED = [s for s in (*PRODUCER, *CONSUMER) if isinstance(s, IntSetting) and s.minimum is not None]


@pytest.mark.parametrize("setting", BOUNDED, ids=lambda s: s.key)
def test_a_value_below_the_declared_bound_is_refused_naming_the_key(setting: IntSetting) -> None:
    assert setting.minimum is not None
    below = setting.minimum - 1
    parse = parse_producer_config if setting in PRODUCER else parse_consumer_config
    with pytest.raises(ValueError, match=rf"^{setting.key} must be >= {setting.minimum}, got {below}$"):
        parse({setting.key: below})


SPARK_BOUNDED = [s for s in SPARK if isinstance(s, (IntSetting, OptionalIntSetting)) and s.minimum is not None]


@pytest.mark.parametrize("setting", SPARK_BOUNDED, ids=lambda s: s.key)
def test_spark_refuses_what_the_schema_refuses_in_the_same_words(setting: IntSetting | OptionalIntSetting) -> None:
    assert setting.minimum is not None and setting.spark is not None
    name = setting.spark.lower()  # as Spark hands options over, and as the refusal names them
    message = f"{name} must be >= {setting.minimum}, got {setting.minimum - 1}"
    with pytest.raises(OptionError, match=f"^{message}$"):
        parse_options({**SPARK_BASE, name: str(setting.minimum - 1)}, streaming=False)
    with pytest.raises(OptionError, match=f"^{name} must be an integer, got 'many'$"):
        parse_options({**SPARK_BASE, name: "many"}, streaming=False)


def test_the_shared_consumer_keys_mean_the_same_in_spark() -> None:
    """A consumer key given to the Spark source lands in the same place as in the consumer."""
    conf = {"message.assembler.buffer.capacity": 5000, "reference.fetch.workers": 2, "reference.max.payload.bytes": 9}
    settings, _ = parse_consumer_config(conf)
    options = parse_options({**SPARK_BASE, **{k: str(v) for k, v in conf.items()}}, streaming=True)
    assert (options.buffer_capacity, options.fetch_workers, options.reference_rules.max_payload_bytes) == (
        settings.capacity,
        settings.workers,
        settings.reference_rules.max_payload_bytes,
    )


def test_every_declared_spark_option_is_accepted() -> None:
    assert sorted({s.spark.lower() for s in SPARK if s.spark} - KNOWN_OPTIONS) == []


def test_one_default_for_the_largest_chunked_message_at_both_ends() -> None:
    """The 32 MB lived in two places (gateway/config.py and core/assembler.py): one declaration now."""
    assert MAX_CHUNKED_MESSAGE_BYTES.default == consumer_keys.BUFFER_CAPACITY.default == DEFAULT_BUFFER_CAPACITY
    producer, _ = parse_producer_config({})
    consumer, _ = parse_consumer_config({})
    assert producer.max_chunked_bytes == consumer.capacity == consumer.max_message_bytes == MessageAssembler().capacity


def test_declared_choices_are_the_ones_each_domain_knows() -> None:
    assert producer_keys.REFERENCE_CHECKSUM.choices == CHECKSUM_SETTINGS
    assert producer_keys.REFERENCE_COMPRESSION.choices == COMPRESSION_SETTINGS
    assert REFERENCE_ENCRYPTION.choices == ENCRYPTION_CHOICES
    assert COMMIT_METADATA_ENCODING.choices == tuple(e.value for e in CommitEncoding)
    assert consumer_keys.ERROR_POLICY.choices == tuple(p.value for p in ErrorPolicy)
    assert consumer_keys.PEER_FORMATS.choices == tuple(f.value for f in PeerFormat)


def test_java_names_are_accepted_for_the_key_they_mean() -> None:
    aliased = [(alias, s) for s in PRODUCER for alias in s.aliases]
    assert {alias for alias, _ in aliased} == {
        "enable.record.header",
        "large.message.segment.wrapping.required",
        "max.block.ms",
    }
    settings, rest = parse_producer_config({"max.block.ms": 5, "enable.record.header": "true"})
    assert (settings.block_s, settings.header_only) == (0.005, True)
    assert "max.block.ms" not in rest and "enable.record.header" not in rest
    with pytest.raises(ValueError, match="say different things"):
        parse_producer_config({"max.block.ms": 5, "large.message.block.ms": 6})


def test_every_key_has_one_declaration_per_entry_point() -> None:
    for table in (PRODUCER, CONSUMER, SPARK):
        keys = [s.key for s in table]
        assert len(keys) == len(set(keys))
        assert all(s.doc for s in table), "every key has its line of doc"


def test_the_command_reads_the_declared_credentials() -> None:
    from gateway.command import STORE_SETTINGS, client_settings

    assert tuple(s.key for s in COMMAND_CREDENTIALS) == STORE_SETTINGS
    kafka, stores = client_settings(None, {}, {"GATEWAY_REDIS_PASSWORD": "pw", "GATEWAY_KAFKA_SASL_PASSWORD": "k"})
    assert (kafka, stores) == ({"sasl.password": "k"}, {"redis.password": "pw"})


def test_value_settings_hand_their_value_to_their_own_parser() -> None:
    renames = consumer_keys.TOPIC_RENAMES
    assert isinstance(renames, ValueSetting)
    assert renames.pop({"reference.topic.renames": "a.${topic}"}) == "a.${topic}"
    assert renames.pop({}) is None


def test_the_sink_reads_its_declared_options() -> None:
    from gateway.settings import spark as spark_keys
    from gateway.spark.sink import SINK_OPTIONS, parse_sink_options

    assert {s.key for s in spark_keys.SINK} <= set(SINK_OPTIONS)
    base = {"kafka.bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(OptionError, match=r"^reference\.above must be >= 0, got -1$"):
        parse_sink_options({**base, "reference.above": "-1"})
    with pytest.raises(OptionError, match=r"^max\.message\.segment\.bytes must be an integer, got 'x'$"):
        parse_sink_options({**base, "max.message.segment.bytes": "x"})
    options = parse_sink_options({**base, "topic": "t", "max.message.segment.bytes": "5000"})
    assert (options.topic, options.segment_bytes, options.reference_above) == ("t", 5000, None)
