"""A local SparkSession that works on the first try with this package.

Each setting here is the fix for a failure seen on a plain ``SparkSession.builder``: Python
workers starting another interpreter that lacks pyarrow (``PYSPARK_PYTHON``), a UI port clash
between concurrent sessions, and 200 shuffle partitions turning a small job into thousands of
tiny tasks on a two-core machine.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
    "spark.sql.session.timeZone": "UTC",
}


def local_session(
    master: str | None = None, *, app_name: str = "kafka-hybrid-gateway", conf: Mapping[str, str] | None = None
) -> Any:
    """``getOrCreate`` a session on ``master`` (``SPARK_MASTER`` or ``local[2]``) with :data:`DEFAULTS`.

    ``PYSPARK_PYTHON`` is set to this interpreter unless the caller chose one: Spark's workers
    must import this package, pyarrow and confluent-kafka, which live in this environment.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master or os.environ.get("SPARK_MASTER") or "local[2]").appName(app_name)
    for key, value in {**DEFAULTS, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
