"""A Spark driver on a standalone cluster, run as its own process as ``spark-submit`` would run it.

The test process already holds a ``local[2]`` SparkContext, and a Python process can hold only one;
so the cluster's driver is this script. It reads the topic with ``hybrid-kafka``, runs ``reconcile``
and writes, as JSON, the rows, the report, and where each task's Python code really ran.

Input (a JSON file): ``master``, ``conf`` (session settings), ``read`` (source options),
``reconcile`` (options), ``now_ms``, ``grace_seconds``.
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
        out = {
            "driver": os.getpid(),
            "rows": rows,
            "places": [json.loads(p) for p in places],
            "report": report.lines(),
            "pyFiles": spark.sparkContext.getConf().get("spark.submit.pyFiles"),
        }
        Path(job["out"]).write_text(json.dumps(out))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
