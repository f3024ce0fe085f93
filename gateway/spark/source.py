"""The Python data sources: ``hybrid-kafka`` (messages) and ``hybrid-kafka-envelopes`` (a raw scan).

Spark creates the data source and its readers in a Python worker on the driver side (the stream
reader in a long-lived one), pickles the batch reader and every input partition to the
executors, and calls ``read`` there. So a reader holds only parsed options; Kafka consumers are
opened where they are used: one per planning call, one per task, one per stream reader process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no stubs
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from gateway.protocol.records import TopicPartitionKey
from gateway.spark.offset_ranges import offsets_for_times, open_consumer, subscribed_partitions, watermarks
from gateway.spark.options import (
    DEFAULT_NETWORK_TIMEOUT_MS,
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    SourceOptions,
    include_headers,
    parse_options,
)
from gateway.spark.planning import (
    DataLossError,
    OffsetRange,
    batch_ranges,
    check_specs_name_all,
    offsets_by_time,
    offsets_from_json,
    offsets_to_json,
    prorate,
    resolve_offset,
    split_ranges,
    timestamps_wanted,
)
from gateway.spark.reading import read_envelopes, read_messages
from gateway.spark.schema import envelope_schema, message_schema

log = logging.getLogger(__name__)

FORMAT = "hybrid-kafka"
ENVELOPE_FORMAT = "hybrid-kafka-envelopes"


class KafkaRangePartition(InputPartition):
    """One task's work: an :class:`OffsetRange` (pickled to the executor)."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng

    def __repr__(self) -> str:
        r = self.rng
        return f"KafkaRangePartition({r.topic}[{r.partition}] {r.from_offset}..{r.until_offset})"


def _check_schema(schema: Any, expected: Any, name: str) -> None:
    if schema is not None and schema != expected:
        raise ValueError(f"{name} has a fixed schema ({expected.simpleString()}); a user schema is not supported")


def plan_batch(options: SourceOptions) -> list[OffsetRange]:
    """The ranges of a batch query: offsets fixed now, split as the options ask."""
    consumer = open_consumer(options)
    try:
        tps = subscribed_partitions(consumer, options)
        check_specs_name_all(
            tps,
            ("startingOffsets", options.starting_offsets),
            ("endingOffsets", options.ending_offsets),
            ("startingOffsetsByTimestamp", options.starting_timestamps),
            ("endingOffsetsByTimestamp", options.ending_timestamps),
        )
        marks = watermarks(consumer, tps, method=options.high_watermark_from)
        starting = _starting(consumer, options, tps)
        ending_times = options.ending_timestamps
        found = offsets_for_times(consumer, timestamps_wanted(ending_times, tps))
        ending = offsets_by_time(options.ending_offsets, ending_times, found, name="endingTimestamp", missing="latest")
    finally:
        consumer.close()
    ranges = batch_ranges(starting, ending, marks, fail_on_data_loss=options.fail_on_data_loss)
    return split_ranges(ranges, max_records=options.max_records_per_partition, min_partitions=options.min_partitions)


def _starting(consumer: Any, options: SourceOptions, tps: Sequence[TopicPartitionKey]) -> OffsetSpec:
    """``startingOffsets``, with ``startingTimestamp`` / ``startingOffsetsByTimestamp`` resolved to offsets."""
    times = options.starting_timestamps
    found = offsets_for_times(consumer, timestamps_wanted(times, tps))
    return offsets_by_time(
        options.starting_offsets, times, found, name="startingTimestamp", missing=options.timestamp_strategy
    )


def _partitions(ranges: Sequence[OffsetRange]) -> list[InputPartition]:
    return [KafkaRangePartition(r) for r in ranges]


class HybridKafkaDataSource(DataSource):
    """``spark.read.format("hybrid-kafka")`` and ``spark.readStream.format("hybrid-kafka")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    network_timeout_ms = DEFAULT_NETWORK_TIMEOUT_MS
    """The session's ``spark.network.timeout``, set by :func:`gateway.spark.register` on a subclass."""

    def schema(self) -> Any:
        return message_schema(include_headers(self.options))

    def _parse(self, streaming: bool) -> SourceOptions:
        return parse_options(self.options, streaming=streaming, network_timeout_ms=self.network_timeout_ms)

    def reader(self, schema: Any) -> DataSourceReader:
        _check_schema(schema, self.schema(), FORMAT)
        return HybridKafkaBatchReader(self._parse(streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        _check_schema(schema, self.schema(), FORMAT)
        return HybridKafkaStreamReader(self._parse(streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        from gateway.spark.sink import HybridKafkaWriter, check_columns, parse_sink_options

        if overwrite:  # as Spark's kafka sink: a topic cannot be truncated by a write
            raise OptionError("hybrid-kafka cannot overwrite a topic: write with mode append (the default)")
        options = parse_sink_options(self.options)
        check_columns(schema, options)
        return HybridKafkaWriter(options)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        from gateway.spark.sink import HybridKafkaStreamWriter, check_columns, parse_sink_options

        options = parse_sink_options(self.options)
        check_columns(schema, options)
        return HybridKafkaStreamWriter(options)


class HybridKafkaBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return _partitions(plan_batch(self.options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rng: OffsetRange | None = partition.value
        if rng is None:  # Spark reads one partition without a value when the plan has none: nothing to read
            return iter(())
        return read_messages(self.options, rng)


class HybridKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches are offset ranges like any other, so the range rule gives exactly-once across them.

    The offsets Spark checkpoints are Spark's Kafka shape, ``{"topic": {"0": 23}}``: the next
    offset to read per partition, nothing else. A restart re-plans an unfinished batch from
    them, and its tasks read back over whatever chunked messages were open at its start.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._consumer: Any = None
        self._target: dict[TopicPartitionKey, int] | None = None

    # -- offsets (driver side) ------------------------------------------------------------------
    def _kafka(self) -> Any:
        if self._consumer is None:
            self._consumer = open_consumer(self.options)
        return self._consumer

    def _watermarks(self) -> dict[TopicPartitionKey, tuple[int, int]]:
        consumer = self._kafka()
        tps = subscribed_partitions(consumer, self.options, must_exist=False)
        return watermarks(consumer, tps, method=self.options.high_watermark_from)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        marks = self._watermarks()
        check_specs_name_all(
            marks,
            ("startingOffsets", self.options.starting_offsets),
            ("startingOffsetsByTimestamp", self.options.starting_timestamps),
        )
        starting = _starting(self._kafka(), self.options, list(marks))
        start = {tp: resolve_offset(starting.for_partition(tp), wm) for tp, wm in marks.items()}
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: high for tp, (_, high) in self._watermarks().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        begin = offsets_from_json(start)
        marks = self._watermarks()
        for tp in begin:
            if tp not in marks:
                self._lost(f"{tp[0]}[{tp[1]}] no longer exists")
        latest: dict[TopicPartitionKey, int] = {}
        origin: dict[TopicPartitionKey, int] = {}
        for tp, (low, high) in marks.items():
            if self._target is not None:
                if tp not in self._target:
                    continue  # appeared after the availableNow target was fixed: not this run's data
                high = min(high, self._target[tp])
            origin[tp] = begin.get(tp, low)
            if high < origin[tp]:
                self._lost(f"{tp[0]}[{tp[1]}] ends at {high}, before the checkpointed offset {origin[tp]}")
                high = origin[tp]
            latest[tp] = high
        if isinstance(limit, ReadMaxRows):
            latest = prorate(origin, latest, limit.max_rows)
        end = {**begin, **latest}
        return offsets_to_json(end)

    def _lost(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise DataLossError(message + " (set failOnDataLoss=false to go on without it)")
        log.warning("%s; going on (failOnDataLoss=false)", message)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = offsets_from_json(start)
        finish = offsets_from_json(end)
        ranges: list[OffsetRange] = []
        new = [tp for tp in finish if tp not in begin]
        lows = {tp: low for tp, (low, _) in watermarks(self._kafka(), new).items()} if new else {}
        for tp, until in sorted(finish.items()):
            if tp in begin:
                ranges.append(OffsetRange(tp[0], tp[1], begin[tp], until))
            else:  # a partition added since the last batch starts at its beginning, as Spark's source does
                ranges.append(OffsetRange(tp[0], tp[1], min(lows.get(tp, 0), until), until, True))
        return _partitions(
            split_ranges(
                ranges, max_records=self.options.max_records_per_partition, min_partitions=self.options.min_partitions
            )
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rng: OffsetRange = partition.value
        return read_messages(self.options, rng)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, never in Kafka group offsets."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class EnvelopeScanDataSource(DataSource):
    """``hybrid-kafka-envelopes``: one row per envelope record, payloads not fetched (for reconcile)."""

    @classmethod
    def name(cls) -> str:
        return ENVELOPE_FORMAT

    def schema(self) -> Any:
        return envelope_schema()

    def reader(self, schema: Any) -> DataSourceReader:
        _check_schema(schema, envelope_schema(), ENVELOPE_FORMAT)
        return EnvelopeScanReader(parse_options(self.options, streaming=False))


class EnvelopeScanReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return _partitions(plan_batch(self.options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rng: OffsetRange | None = partition.value
        return iter(()) if rng is None else read_envelopes(self.options, rng)


__all__ = [
    "EARLIEST",
    "ENVELOPE_FORMAT",
    "FORMAT",
    "LATEST",
    "EnvelopeScanDataSource",
    "HybridKafkaDataSource",
    "KafkaRangePartition",
    "plan_batch",
]
