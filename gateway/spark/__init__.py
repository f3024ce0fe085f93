"""Spark source for hybrid topics: ``spark.read.format("hybrid-kafka")`` / ``spark.readStream...``.

Register once per session with :func:`register`; see ``docs/spark.md`` for options and examples.
The source is a Python data source on confluent-kafka (pyspark ships no Kafka jar), and it gives
the rows ``HybridConsumer`` would give for the same records: whole chunked messages (key, offset
and timestamp of their last segment, ``_lm`` rewritten), resolved references, plain records.

Range boundaries: exactly once without shared state
---------------------------------------------------
Every task reads one offset range ``[from, until)`` of one partition; batch queries split large
partitions into several ranges, and a stream's micro-batches are ranges between checkpointed
offsets. A chunked message may straddle any of these boundaries. The rule:

*A message belongs to the range that holds its completing record* (the segment that makes it
whole: LinkedIn's delivery offset). Plain records and envelopes complete at their own offset.

So a range task must be able to complete messages whose first segments lie before ``from``. It
starts reading at ``from - lookbackOffsets`` (never below the log start), runs the consumer's
own pipeline (``RecordProcessor`` over ``MessageAssembler``) over everything, and emits only
messages completing at an offset in ``[from, until)``. Messages completed before ``from`` are
rebuilt and thrown away (the previous range emitted them); messages still open at ``until`` are
left to the next range, which reads back over their segments. Ranges tile each partition, so
each message is emitted once; no task needs another's state, a retried task gives the same
rows, and a stream's checkpoint holds nothing but plain per-partition offsets.

How far back is enough: LinkedIn's assembler drops a message once the partition has moved more
than ``message.assembler.expiration.offset.gap`` offsets past its first segment, checked after
each segment is added, so a message can still complete ``gap + 1`` offsets after its first
segment and never later. The default ``lookbackOffsets`` is therefore ``gap + 1``; and because
offsets can have holes (transaction markers, compaction), a task checks the last offset it saw
before ``from`` and reads further back, before emitting anything, when that is not enough.
A message whose first segment lies further back than that was expired by the consumer too:
neither delivers it (a warning is logged). A ``lookbackOffsets`` below ``gap + 1`` trades that
equivalence for less read-back: messages spanning more than the lookback *and* crossing a range
boundary are then lost.

Differences from ``HybridConsumer`` that remain, all by design: the ``_so`` (safe offset) header
the consumer appends while a message is pending is left out (its value depends on where a
reader started, and Spark commits nothing to Kafka); each range has its own assembler buffer, so
eviction under ``message.assembler.buffer.capacity`` is per range rather than per consumer; and
a message whose segments were re-sent (duplicates from a non-idempotent producer) may complete
in a range that began after its first copy, where a consumer reading from the start expired it.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import extra_required

with extra_required("spark", "The hybrid-kafka Spark data source"):
    import pyarrow  # type: ignore[import-untyped]  # noqa: F401  # PySpark's Python data sources need it too
    import pyspark  # noqa: F401

from gateway.spark.options import OptionError, SourceOptions, network_timeout_ms, parse_options
from gateway.spark.planning import DataLossError, OffsetRange
from gateway.spark.reconcile import Dangling, Orphan, ReconcileReport, reconcile
from gateway.spark.session import local_session
from gateway.spark.source import ENVELOPE_FORMAT, FORMAT, EnvelopeScanDataSource, HybridKafkaDataSource


def register(spark: Any) -> None:
    """Make ``hybrid-kafka`` and ``hybrid-kafka-envelopes`` available on ``spark`` (idempotent).

    Also makes ``append`` the default save mode of ``hybrid-kafka`` writes, so that
    ``df.write.format("hybrid-kafka")...save()`` works as it does with Spark's ``kafka`` sink, which
    takes the default mode (ErrorIfExists) as an append. Python data sources otherwise refuse every
    mode but append and overwrite at analysis time. An explicit ``.mode(...)`` still wins.

    The session's ``spark.network.timeout`` becomes the default of ``kafkaConsumer.pollTimeoutMs``,
    as in Spark's Kafka source. A Python data source runs in a worker that cannot see the session's
    configuration, so the value travels on the registered class (a subclass pickled by value).
    """
    timeout = network_timeout_ms(_conf(spark, "spark.network.timeout"))
    source = type(
        HybridKafkaDataSource.__name__,
        (HybridKafkaDataSource,),
        {"network_timeout_ms": timeout, "__module__": HybridKafkaDataSource.__module__, "__doc__": None},
    )
    spark.dataSource.register(source)
    spark.dataSource.register(EnvelopeScanDataSource)
    _append_by_default()


def _conf(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a session without the key (or a Connect session refusing it): Spark's default
        return None
    return None if value is None else str(value)


def _append_by_default() -> None:
    from pyspark.sql.readwriter import DataFrameWriter

    original = DataFrameWriter.format
    if getattr(original, "_hybrid_kafka_append", False):
        return

    def format(self: Any, source: str) -> Any:
        writer = original(self, source)
        if source == FORMAT:
            writer.mode("append")
        return writer

    format._hybrid_kafka_append = True  # type: ignore[attr-defined]
    format.__doc__ = original.__doc__
    DataFrameWriter.format = format  # type: ignore[method-assign]


__all__ = [
    "ENVELOPE_FORMAT",
    "FORMAT",
    "Dangling",
    "DataLossError",
    "EnvelopeScanDataSource",
    "HybridKafkaDataSource",
    "OffsetRange",
    "OptionError",
    "Orphan",
    "ReconcileReport",
    "SourceOptions",
    "local_session",
    "parse_options",
    "reconcile",
    "register",
]
