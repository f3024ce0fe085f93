"""One schema for every setting the library reads: key, type, default, bounds, doc, Spark and Java names.

The producer (:mod:`gateway.producer._config`), the consumer (:mod:`gateway.consumer.config`), the
Spark source (:mod:`gateway.spark.options`) and the ``gateway`` command (:mod:`gateway.command`)
read their keys through these declarations, and the docs' key tables are checked against them
(``tests/unit/test_docs_config.py``). Pure: no I/O, and nothing of the library is imported here.
"""

from __future__ import annotations

from typing import Any

from gateway.settings._kinds import (
    BoolSetting,
    ChoiceSetting,
    IntSetting,
    OptionalIntSetting,
    Setting,
    TextSetting,
    ValueSetting,
    check_minimum,
    parse_bool,
    parse_choice,
    parse_int,
    rename_aliases,
)
from gateway.settings.consumer import CONSUMER, LIBRDKAFKA_DEFAULTS
from gateway.settings.producer import PRODUCER
from gateway.settings.shared import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_PAYLOAD_BYTES
from gateway.settings.spark import SPARK_ONLY, SPARK_SOURCE
from gateway.settings.stores import COMMAND_CREDENTIALS, ENCRYPTION, REDIS_AND_S3

SPARK: tuple[Setting[Any], ...] = (
    *SPARK_SOURCE,
    *REDIS_AND_S3,
    *ENCRYPTION,
    *(setting for setting in CONSUMER if setting.spark is not None),
    *SPARK_ONLY,
)
"""Every option of the ``hybrid-kafka`` source but ``kafka.*`` (GCS's and Azure's are declared by their stores)."""

__all__ = [
    "COMMAND_CREDENTIALS",
    "CONSUMER",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "LIBRDKAFKA_DEFAULTS",
    "PRODUCER",
    "SPARK",
    "SPARK_ONLY",
    "SPARK_SOURCE",
    "BoolSetting",
    "ChoiceSetting",
    "IntSetting",
    "OptionalIntSetting",
    "Setting",
    "TextSetting",
    "ValueSetting",
    "check_minimum",
    "parse_bool",
    "parse_choice",
    "parse_int",
    "rename_aliases",
]
