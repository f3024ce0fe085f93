"""``gateway reconcile`` shows its Spark stages' tasks on stderr while the job runs.

The work of reconcile happens in Spark jobs the driver only waits for, so the progress line polls
Spark's status tracker. Here a real stage is held open (its tasks wait for a file the test writes
only once a progress line arrived), so the line is seen without depending on how fast Spark runs.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from gateway.gc.progress import Progress, watch_spark


def _wait_for(flag: str) -> Any:
    def run(rows: Any) -> Any:
        import os
        import time

        while not os.path.exists(flag):
            time.sleep(0.05)
        return rows

    return run


@pytest.mark.spark
def test_the_spark_poller_reports_the_tasks_of_a_running_stage(spark: Any, tmp_path: Path) -> None:
    flag = tmp_path / "release"
    seen: list[Progress] = []
    arrived = threading.Event()

    def show(progress: Progress) -> None:
        seen.append(progress)
        arrived.set()

    stop = watch_spark(spark, show, every=0.0)
    job = threading.Thread(
        target=lambda: spark.sparkContext.parallelize(range(4), 2).mapPartitions(_wait_for(str(flag))).count()
    )
    job.start()
    try:
        assert arrived.wait(120), "no progress while a stage was running"
    finally:
        flag.write_text("go")
        job.join(120)
        stop()
    assert seen[0].phase == "spark" and seen[0].subject.startswith("stage ") and seen[0].unit == "tasks"
    assert seen[0].total == 2 and 0 <= seen[0].done <= 2
