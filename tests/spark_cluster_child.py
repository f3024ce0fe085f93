"""A Spark driver on a standalone cluster, run as its own process as ``spark-submit`` would run it.

The test process already holds a ``local[2]`` SparkContext, and a Python process can hold only one;
so the cluster's driver is this script. It reads the topic with ``hybrid-kafka``, runs ``reconcile``,
writes what it read through the ``hybrid-kafka`` sink, and runs a stream (source to sink, with a
checkpoint) twice: once over the first wave, then, after it produced the second wave itself, again
from the checkpoint. It writes, as JSON, the rows, the report, each stream run's micro-batches, and
where each task's Python code really ran.

Input (a JSON file): ``master``, ``conf`` (session settings), ``read`` (source options),
``reconcile`` (options), ``now_ms``, ``grace_seconds``, ``sink`` (sink options for the copy of
``read``), ``stream`` (``source`` and ``sink`` options, ``checkpoint``, ``producer`` config with
``redis.url``/``redis.prefix`` of the store, and ``wave`` ``[key, size, seed, route]`` to produce
between the runs).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

RowView = list[Any]


def row_view(row: Any) -> RowView:
    """One output row as JSON-friendly values, identical for the cluster's rows and ``local[2]``'s."""
    value = row["value"]
    return [
        row["partition"],
        row["offset"],
        None if value is None else hashlib.sha256(value).hexdigest(),
        None if row["key"] is None else bytes(row["key"]).hex(),
        [[h["key"], None if h["value"] is None else bytes(h["value"]).hex()] for h in (row["headers"] or ())],
        row["ts"],
        row["route"],
        row["startingOffset"],
        row["error"],
    ]


def select_rows(frame: Any) -> list[Any]:
    from pyspark.sql import functions as F

    return frame.select(
        "partition",
        "offset",
        "value",
        "key",
        "headers",
        F.expr("unix_millis(timestamp)").alias("ts"),
        "route",
        "startingOffset",
        "error",
    ).collect()


def _where_am_i() -> str:
    """Inside a task: this Python worker's pid, folder, ancestor pids and where ``gateway`` came from."""
    import os

    import gateway.spark.reading

    ancestors = []
    pid = os.getpid()
    while pid > 1 and len(ancestors) < 32:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        ancestors.append(pid)
    return json.dumps(
        {
            "pid": os.getpid(),
            "cwd": os.getcwd(),
            "ancestors": ancestors,
            "module": os.path.abspath(gateway.spark.reading.__file__),
        }
    )


def run_stream(spark: Any, job: dict[str, Any]) -> list[list[int]]:
    """One run of the query from its checkpoint, draining what is there; ``[batch id, input rows]`` per batch."""
    query = (
        spark.readStream.format("hybrid-kafka")
        .options(**job["source"])
        .load()
        .select("key", "value", "headers", "partition")
        .writeStream.format("hybrid-kafka")
        .options(**job["sink"])
        .option("checkpointLocation", job["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(240):
            raise TimeoutError("the stream did not finish within 240 s")
    finally:
        query.stop()
    return [[int(p.batchId), int(p.numInputRows)] for p in query.recentProgress]


def produce_wave(job: dict[str, Any]) -> None:
    """The second wave, produced by this driver between two runs of the stream."""
    import redis

    from gateway import HybridProducer
    from gateway.testing.demo import (
        pattern_bytes,
    )  # tests.helpers.payload's bytes: this script runs outside the tests package
    from stores import RedisStore

    conf = dict(job["producer"])
    store = RedisStore(redis.Redis.from_url(conf.pop("redis.url")), prefix=conf.pop("redis.prefix"))
    producer = HybridProducer(conf, stores={"redis": store})
    for key, size, seed, route in job["wave"]:
        producer.produce(job["topic"], pattern_bytes(str(seed), size), key.encode(), route=route)
    if producer.flush(60):
        raise RuntimeError("the second wave was not delivered")
    producer.close()


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from gateway.spark import reconcile, register

    builder = SparkSession.builder.master(job["master"]).appName("gateway-cluster-test")
    for key, value in job["conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        register(spark)
        frame = spark.read.format("hybrid-kafka").options(**job["read"]).load()
        rows = [row_view(r) for r in select_rows(frame)]
        where = F.udf(_where_am_i, "string").asNondeterministic()
        # the same read again, with where each of its partitions' rows were handled
        places = sorted({r[0] for r in frame.select(where().alias("w")).collect()})
        report = reconcile(spark, job["reconcile"], grace_seconds=job["grace_seconds"], now_ms=job["now_ms"])
        # the rows just read, written again through the sink: the sink's tasks run in the executors
        frame.select("key", "value", "headers", "partition").write.format("hybrid-kafka").options(**job["sink"]).save()
        runs = [run_stream(spark, job["stream"])]
        produce_wave(job["stream"])
        runs.append(run_stream(spark, job["stream"]))  # a restart: a new query on the same checkpoint
        out = {
            "driver": os.getpid(),
            "rows": rows,
            "places": [json.loads(p) for p in places],
            "report": report.lines(),
            "stream_runs": runs,
            "pyFiles": spark.sparkContext.getConf().get("spark.submit.pyFiles"),
        }
        Path(job["out"]).write_text(json.dumps(out))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
