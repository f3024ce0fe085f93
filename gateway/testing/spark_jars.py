"""Spark's own Kafka source (``spark-sql-kafka-0-10``) for the tests and benchmarks that compare with it.

``make spark-kafka`` copies it, with what ``pyspark/jars/`` lacks, into ``tests/spark/target/lib/``;
``SPARK_KAFKA_LIB_DIR`` points elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from gateway.testing.apache_kafka import repo_root
from gateway.testing.processes import ServiceUnavailable


def spark_kafka_lib_dir() -> Path:
    """Where Spark's own Kafka source is: ``SPARK_KAFKA_LIB_DIR``, else what ``make spark-kafka`` fetched."""
    env = os.environ.get("SPARK_KAFKA_LIB_DIR", "").strip()
    return Path(env) if env else repo_root() / "tests" / "spark" / "target" / "lib"


_SPARK_KAFKA_JAR = "spark-sql-kafka-0-10_2.13-"


def spark_kafka_jars(spark_version: str | None = None) -> list[Path]:
    """The jars that give a SparkSession Spark's ``kafka`` format (for ``spark.jars``).

    Spark's connector reaches into Spark's internals, so a connector built for another Spark
    version fails at query time with linkage errors far from the cause; the version is checked
    here, against ``spark_version`` or the installed PySpark's, and a mismatch is unavailable.
    """
    lib = spark_kafka_lib_dir()
    connectors = sorted(lib.glob(f"{_SPARK_KAFKA_JAR}*.jar")) if lib.is_dir() else []
    if not connectors:
        raise ServiceUnavailable(
            f"Spark's Kafka source is not in {lib}: run `make spark-kafka` (Maven fetches it)"
            " or set SPARK_KAFKA_LIB_DIR"
        )
    if spark_version is None:
        import pyspark

        spark_version = str(pyspark.__version__)
    found = [jar.name[len(_SPARK_KAFKA_JAR) : -len(".jar")] for jar in connectors]
    if found != [spark_version]:
        raise ServiceUnavailable(
            f"{lib} holds Spark's Kafka source for Spark {', '.join(found)}, but PySpark is {spark_version}:"
            " install the pinned PySpark (`make setup`), then fetch its connector (`make spark-kafka`)"
        )
    return sorted(lib.glob("*.jar"))


def spark_kafka_conf(spark_version: str | None = None) -> dict[str, str]:
    """SparkSession settings that add Spark's ``kafka`` format (give them before the session starts)."""
    return {"spark.jars": ",".join(str(jar) for jar in spark_kafka_jars(spark_version))}
