"""The output schemas, as Spark types (for the planner) and as Arrow types (for the tasks).

Spark checks a data source's Arrow batches against ``to_arrow_schema`` of its declared schema
field by field, list element names included, so the Arrow side is spelled out here rather than
derived at run time from a pyspark helper that is not public API; a test keeps the two equal.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no stubs

MESSAGE_COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
    "route",
    "startingOffset",
    "error",
)
"""Spark's Kafka source columns first, in its order, then ours."""

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

MESSAGE_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(pa.field("element", _HEADER))),
        pa.field("route", pa.string()),
        pa.field("startingOffset", pa.int64()),
        pa.field("error", pa.string()),
    ]
)

MESSAGE_ARROW_SCHEMA_WITHOUT_HEADERS = pa.schema([f for f in MESSAGE_ARROW_SCHEMA if f.name != "headers"])
"""``includeHeaders=false`` (Spark's default; ours is true): no ``headers`` column at all."""


def message_arrow_schema(include_headers: bool) -> pa.Schema:
    return MESSAGE_ARROW_SCHEMA if include_headers else MESSAGE_ARROW_SCHEMA_WITHOUT_HEADERS


ENVELOPE_ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("store", pa.string()),
        pa.field("locator", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("messageId", pa.string()),
        pa.field("error", pa.string()),
    ]
)


def message_schema(include_headers: bool = True) -> Any:
    """``StructType`` of the ``hybrid-kafka`` rows; the ``headers`` column only with ``includeHeaders``, as Spark's."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    full = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
            StructField("route", StringType()),
            StructField("startingOffset", LongType()),
            StructField("error", StringType()),
        ]
    )
    return full if include_headers else StructType([f for f in full.fields if f.name != "headers"])


def envelope_schema() -> Any:
    """``StructType`` of the ``hybrid-kafka-envelopes`` rows (one per envelope record)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

    return StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("store", StringType()),
            StructField("locator", StringType()),
            StructField("size", LongType()),
            StructField("messageId", StringType()),
            StructField("error", StringType()),
        ]
    )
