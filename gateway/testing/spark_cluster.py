"""A real Spark standalone cluster on loopback, started from the pip-installed PySpark: one master and
two workers, each its own JVM with its own working folder.

``local[*]`` runs driver and executors in one process tree on one filesystem, so it cannot show
that the source works where executors are elsewhere: a package importable only on the driver, a
path only the driver sees, or a setting that reaches the driver's Python workers but not the
executors'. Here every executor is a child of a worker JVM, runs in that worker's folder, and gets
only the environment the application ships to it.

The pyspark wheel carries the whole of Spark (``pyspark/jars``) and its launcher scripts; the
daemons are started directly with ``java -cp "<pyspark>/jars/*"`` (the scripts only add log and
PID-file handling that would fight :class:`ServerProcess`), and ``SPARK_HOME`` points the workers
at the wheel so they can build the executors' classpath from the same jars.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from gateway.testing.processes import (
    LOOPBACK,
    ServerProcess,
    ServiceStartError,
    ServiceUnavailable,
    free_port,
    package_dir,
    start_with_port_retry,
)

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_START_TIMEOUT = 90.0


@dataclass(frozen=True, slots=True)
class SparkWorker:
    """One worker daemon: its process, its folder (executors run in ``work_dir/<app>/<executor>``)."""

    name: str
    process: ServerProcess
    root: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def work_dir(self) -> Path:
        return self.root / "work"

    @property
    def local_dir(self) -> Path:
        return self.root / "local"


class SparkStandaloneCluster:
    """``with SparkStandaloneCluster() as cluster:`` then ``master(cluster.url)`` in a SparkSession.

    Workers get ``cores`` cores and ``worker_memory`` each; an application must ask for executors
    that fit (:meth:`session_conf` does). The daemons' heap is kept small since the machine is shared.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        worker_memory: str = "1g",
        daemon_memory: str = "256m",
        java: str | None = None,
    ) -> None:
        self.worker_count = workers
        self.cores = cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.java = java or _java()
        self.spark_home = _pyspark_home()
        self.scala_version = _scala_version(self.spark_home)
        self.root: Path | None = None
        self.master: ServerProcess | None = None
        self.workers: list[SparkWorker] = []
        self.port = 0
        self.ui_port = 0

    @property
    def url(self) -> str:
        """The master URL an application connects to: ``spark://127.0.0.1:<port>``."""
        return f"spark://{LOOPBACK}:{self.port}"

    def start(self) -> SparkStandaloneCluster:
        self.root = Path(tempfile.mkdtemp(prefix="gw-spark-cluster-"))
        try:
            self._start_master()
            for i in range(self.worker_count):
                self.workers.append(self._start_worker(f"worker{i + 1}"))
            self._await_workers()
        except BaseException:
            self.close()
            raise
        return self

    def session_conf(self) -> dict[str, str]:
        """Settings for an application on this cluster: one executor per worker, all of them before any task.

        Without the registration wait the first executor up may take every task, and the test of
        "tasks ran on both workers" would depend on timing.
        """
        return {
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": "512m",
            "spark.cores.max": str(self.cores * self.worker_count),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.enabled": "false",
        }

    def state(self) -> dict[str, Any]:
        """The master's own view (``/json`` on its web UI): workers, their state, applications."""
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ui_port}/json", timeout=2) as response:
            data: dict[str, Any] = json.loads(response.read())
        return data

    def alive_workers(self) -> list[dict[str, Any]]:
        try:
            workers = self.state().get("workers", [])
        except (OSError, urllib.error.URLError, ValueError):
            return []
        return [w for w in workers if w.get("state") == "ALIVE"]

    # -- daemons ---------------------------------------------------------------------------------

    def _env(self, root: Path) -> dict[str, str]:
        """A worker's environment: Spark's folders under ``root``, and nothing of the caller's Python setup.

        ``PYTHONPATH`` is dropped on purpose: executors inherit the worker's environment, and a
        test must prove that what the application ships (``spark.submit.pyFiles``,
        ``spark.executorEnv.*``) is enough, not that the test runner's path leaked through.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK", "SPARK_"))}
        env.update(
            {
                "SPARK_HOME": str(self.spark_home),
                "SPARK_LOCAL_DIRS": str(root / "local"),
                "SPARK_WORKER_DIR": str(root / "work"),
                "SPARK_LOG_DIR": str(root / "logs"),
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_NO_DAEMONIZE": "1",
                # the launcher inside a worker builds each executor's classpath and needs the Scala
                # version, which bin/load-spark-env.sh would export; without it: "Cannot find any build directories"
                "SPARK_SCALA_VERSION": self.scala_version,
            }
        )
        for sub in ("local", "work", "logs"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        return env

    def _java_argv(self, main_class: str, *args: str) -> list[str]:
        return [
            self.java,
            f"-Xmx{self.daemon_memory}",
            "-cp",
            str(self.spark_home / "jars" / "*"),
            "-Dspark.ui.showConsoleProgress=false",
            main_class,
            *args,
        ]

    def _start_master(self) -> None:
        assert self.root is not None
        root = self.root / "master"
        env = self._env(root)
        self.ui_port = free_port()

        def start(port: int) -> ServerProcess:
            argv = self._java_argv(
                _MASTER_CLASS, "--host", LOOPBACK, "--port", str(port), "--webui-port", str(self.ui_port)
            )
            return ServerProcess("spark-master", argv, root, env)

        def ready(proc: ServerProcess, port: int) -> None:
            proc.wait_until(lambda: self._master_answers(), timeout=_START_TIMEOUT, what="its /json page")

        self.master, self.port = start_with_port_retry(start, ready)

    def _master_answers(self) -> bool:
        try:
            return self.state().get("status") == "ALIVE"
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def _start_worker(self, name: str) -> SparkWorker:
        assert self.root is not None
        root = self.root / name
        env = self._env(root)
        argv = self._java_argv(
            _WORKER_CLASS,
            "--host",
            LOOPBACK,
            "--port",
            str(free_port()),
            "--webui-port",
            str(free_port()),
            "--cores",
            str(self.cores),
            "--memory",
            self.worker_memory,
            "--work-dir",
            str(root / "work"),
            self.url,
        )
        return SparkWorker(name, ServerProcess(f"spark-{name}", argv, root, env), root)

    def _await_workers(self) -> None:
        assert self.master is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while len(self.alive_workers()) < self.worker_count:
            for proc in [self.master, *(w.process for w in self.workers)]:
                if proc.exited():
                    raise ServiceStartError(
                        f"{proc.name} exited with code {proc.popen.returncode} before all"
                        f" workers registered; log {proc.log_path}:\n{proc.log_tail()}"
                    )
            if time.monotonic() >= deadline:
                logs = "\n".join(f"--- {w.name}:\n{w.process.log_tail()}" for w in self.workers)
                raise ServiceStartError(
                    f"only {len(self.alive_workers())} of {self.worker_count} Spark workers"
                    f" registered within {_START_TIMEOUT:.0f}s\n{logs}"
                )
            time.sleep(0.2)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the workers (their executors die with them), then the master; remove every folder."""
        for worker in reversed(self.workers):
            worker.process.stop(grace=10.0)
        self.workers = []
        if self.master is not None:
            self.master.stop(grace=10.0)
            self.master = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> SparkStandaloneCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _pyspark_home() -> Path:
    home = package_dir("pyspark")
    if home is None or not (home / "jars").is_dir():
        raise ServiceUnavailable("PySpark with its jars is not installed: install the `spark` extra")
    return home


def _scala_version(spark_home: Path) -> str:
    for jar in (spark_home / "jars").glob("spark-core_*.jar"):
        return jar.name[len("spark-core_") :].split("-", 1)[0]
    raise ServiceUnavailable(f"no spark-core jar in {spark_home / 'jars'}")


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME", "").strip()
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not found or not Path(found).exists():
        raise ServiceUnavailable("no java on PATH (nor JAVA_HOME): Spark's daemons need a JDK 17 or newer")
    return found
