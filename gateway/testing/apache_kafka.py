"""Apache Kafka itself as a child process: one KRaft node, or a cluster of several, for tests and benchmarks."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.testing.kafka_service import KafkaService
from gateway.testing.processes import (
    LOOPBACK,
    ServerProcess,
    ServiceStartError,
    ServiceUnavailable,
    await_kafka_metadata,
    free_port,
    log_tail,
    start_with_port_retry,
)

if TYPE_CHECKING:
    pass

def _repo_root() -> Path:
    """The source checkout this package runs from (an editable install), where the Maven projects live."""
    return Path(__file__).resolve().parents[2]


def kafka_lib_dir() -> Path:
    """Where the broker's jars are: ``KAFKA_LIB_DIR``, else what ``make kafka`` fetched into the checkout."""
    env = os.environ.get("KAFKA_LIB_DIR", "").strip()
    return Path(env) if env else _repo_root() / "tests" / "kafka" / "target" / "lib"


def _kafka_version(lib: Path) -> str | None:
    """The broker version, read from its jar's name (``kafka_2.13-4.1.2.jar``)."""
    for jar in sorted(lib.glob("kafka_2.13-*.jar")):
        return jar.name[len("kafka_2.13-") : -len(".jar")]
    return None


_LOG4J2_CONFIG = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


class ApacheKafka(KafkaService):
    """Apache Kafka itself: one KRaft node (broker and controller) as a JVM child process.

    This is the reference backend: users run Apache Kafka, and the emulators differ exactly where
    this library's promises live (retention, commit metadata, rebalances, transactions). The jars
    come from Maven Central through ``tests/kafka/pom.xml`` (``make kafka``); storage is formatted
    in a fresh temporary folder, so every session starts from an empty cluster.

    Broker defaults are kept where users keep them (``message.max.bytes``, retention, compression);
    only what a single node forces (replication factors of internal topics) and what makes tests
    slow without changing semantics (the initial rebalance delay) are set. ``overrides`` adds broker
    properties (benchmarks raise ``socket.request.max.bytes`` for 100 MB one-record ceilings).
    """

    name = "kafka"
    consumer_defaults = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    start_timeout: float = 90.0
    stop_grace: float = 15.0

    def __init__(self, *, heap: str | None = None, overrides: Mapping[str, str] | None = None) -> None:
        lib = kafka_lib_dir()
        version = _kafka_version(lib) if lib.is_dir() else None
        if version is None:
            raise ServiceUnavailable(
                f"Apache Kafka's jars are not in {lib}: run `make kafka` (Maven fetches them), or set KAFKA_LIB_DIR"
            )
        java = shutil.which("java")
        if java is None:
            raise ServiceUnavailable("java is not on PATH (Apache Kafka needs Java 17 or newer)")
        self._heap = heap or os.environ.get("KAFKA_HEAP", "768m")
        self._overrides = dict(overrides or {})
        self._workdir = Path(tempfile.mkdtemp(prefix="gw-kafka-"))
        self._java = java
        self._classpath = f"{lib}/*"
        try:
            self._proc, port = start_with_port_retry(self._launch, self._await_ready)
        except BaseException:
            shutil.rmtree(self._workdir, ignore_errors=True)
            raise
        super().__init__(version=f"Apache Kafka {version}", bootstrap_servers=f"{LOOPBACK}:{port}", pid=self._proc.pid)

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def log_path(self) -> Path:
        """The broker's own log (log4j), not the JVM's stdout."""
        return self._workdir / "server.log"

    def _properties(self, port: int, controller_port: int) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self._workdir / "data"),
            # one node: every internal topic can only have one replica
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # a test's group should not wait 3 s for members that will never come
            "group.initial.rebalance.delay.ms": "0",
            # KIP-848 groups reconcile on heartbeats, every 5 s by default: a test would mostly wait
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.min.heartbeat.interval.ms": "500",
            # fewer internal partitions: the first group and transaction start faster, semantics unchanged
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.num.partitions": "4",
        }
        props.update(self._overrides)
        return props

    def _launch(self, port: int) -> ServerProcess:
        controller_port = free_port()
        config = self._workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self._properties(port, controller_port).items()))
        log4j = self._workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2_CONFIG.format(log=self.log_path))
        jvm = [
            self._java, f"-Xmx{self._heap}", "-Xms256m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}", "-Dkafka.logs.dir=" + str(self._workdir), "-cp", self._classpath,
        ]  # fmt: skip
        data = self._workdir / "data"
        shutil.rmtree(data, ignore_errors=True)  # a retried start formats afresh
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        fmt = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if fmt.returncode != 0:
            raise ServiceStartError(f"formatting Kafka's storage failed ({fmt.returncode}):\n{fmt.stdout}{fmt.stderr}")
        return ServerProcess("kafka", [*jvm, "kafka.Kafka", str(config)], self._workdir)

    def _await_ready(self, proc: ServerProcess, port: int) -> None:
        """Ready means the broker answers metadata with itself in it (the controller has elected it)."""
        try:
            await_kafka_metadata(proc, port, self.start_timeout)
        except ServiceStartError as exc:
            raise ServiceStartError(f"{exc}\nbroker log {self.log_path}:\n{log_tail(self.log_path)}") from None

    # -- faults, for reliability tests: the same node, port and storage, as an operator would see it --

    @property
    def port(self) -> int:
        return int(self.bootstrap_servers.rsplit(":", 1)[1])

    def kill(self) -> None:
        """SIGKILL the broker: no clean shutdown, unflushed page cache is the kernel's to keep."""
        self._proc.stop(grace=0)

    def restart(self, *, timeout: float | None = None) -> None:
        """Start the killed or stopped node again on the same ports and storage, and wait until it answers."""
        if not self._proc.exited():
            raise RuntimeError("the broker is still running; kill() it first")
        argv = self._proc.argv
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while True:  # the old listener may linger a moment after a kill
            proc = ServerProcess("kafka", argv, self._workdir)
            try:
                await_kafka_metadata(proc, self.port, max(1.0, deadline - time.monotonic()))
            except ServiceStartError:
                proc.stop(grace=0)
                if time.monotonic() >= deadline:
                    raise ServiceStartError(f"broker did not come back; log:\n{log_tail(self.log_path)}") from None
                time.sleep(0.5)
                continue
            self._proc = proc
            self.pid = proc.pid
            return

    def pause(self) -> None:
        """SIGSTOP: the broker keeps its connections but answers nothing, like a long GC pause or a hung host."""
        self._proc.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._proc.popen.send_signal(signal.SIGCONT)

    def _shutdown(self) -> None:
        try:
            if not self._proc.exited():
                self.resume()  # a paused JVM cannot act on SIGTERM
            self._proc.stop(grace=self.stop_grace)
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)


