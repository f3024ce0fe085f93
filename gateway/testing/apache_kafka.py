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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    from gateway.testing.tls import TlsFiles  # cryptography: only the SASL_SSL listener's caller needs it


def repo_root() -> Path:
    """The source checkout this package runs from (an editable install), where the Maven projects live."""
    return Path(__file__).resolve().parents[2]


def kafka_lib_dir() -> Path:
    """Where the broker's jars are: ``KAFKA_LIB_DIR``, else what ``make kafka`` fetched into the checkout."""
    env = os.environ.get("KAFKA_LIB_DIR", "").strip()
    return Path(env) if env else repo_root() / "tests" / "kafka" / "target" / "lib"


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


_TEST_SPEED = {
    # a test's group should not wait 3 s for members that will never come
    "group.initial.rebalance.delay.ms": "0",
    # KIP-848 groups reconcile on heartbeats, every 5 s by default: a test would mostly wait
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    # fewer internal partitions: the first group and transaction start faster, semantics unchanged
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    # the log cleaner looks for dirty logs every 15 s by default: a compaction test would mostly wait
    "log.cleaner.backoff.ms": "500",
}


@dataclass
class _Jvm:
    """How to run Kafka's classes here: the java binary, the fetched jars and their version."""

    java: str
    classpath: str
    version: str

    @classmethod
    def find(cls) -> _Jvm:
        lib = kafka_lib_dir()
        version = _kafka_version(lib) if lib.is_dir() else None
        if version is None:
            raise ServiceUnavailable(
                f"Apache Kafka's jars are not in {lib}: run `make kafka` (Maven fetches them), or set KAFKA_LIB_DIR"
            )
        java = shutil.which("java")
        if java is None:
            raise ServiceUnavailable("java is not on PATH (Apache Kafka needs Java 17 or newer)")
        return cls(java, f"{lib}/*", version)

    def argv(self, heap: str, workdir: Path) -> list[str]:
        log4j = workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2_CONFIG.format(log=workdir / "server.log"))
        return [
            self.java, f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={workdir}", "-cp", self.classpath,
        ]  # fmt: skip


def new_cluster_id() -> str:
    """Kafka's cluster id form: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class KafkaNode:
    """One KRaft node (broker and controller in one JVM) with its ports and folder, running or not.

    Its storage and ports outlive its process, so a test can SIGKILL it and start it again as the
    same node, which is what a crashed and restarted broker looks like to clients and to the quorum.
    """

    node_id: int
    port: int
    controller_port: int
    workdir: Path
    argv: list[str] = field(default_factory=list)
    proc: ServerProcess | None = None

    @property
    def log_path(self) -> Path:
        """The broker's own log (log4j), not the JVM's stdout."""
        return self.workdir / "server.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and not self.proc.exited()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.running and self.proc is not None else None

    def configure(
        self, jvm: _Jvm, heap: str, props: Mapping[str, str], cluster_id: str, format_args: Iterable[str] = ()
    ) -> None:
        """Write the node's properties and format its storage (once: a restart keeps the data).

        ``format_args`` go to ``StorageTool format``: in KRaft, SCRAM users are records of the
        bootstrap metadata (``--add-scram``), so they exist before the first client connects.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        base = jvm.argv(heap, self.workdir)
        shutil.rmtree(self.workdir / "data", ignore_errors=True)
        fmt = subprocess.run(
            # "=": a random id may start with "-", which would read as an option
            [*base, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "--config", str(config),
             *format_args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if fmt.returncode != 0:
            raise ServiceStartError(f"formatting Kafka's storage failed ({fmt.returncode}):\n{fmt.stdout}{fmt.stderr}")
        self.argv = [*base, "kafka.Kafka", str(config)]

    def start(self) -> ServerProcess:
        self.proc = ServerProcess(f"kafka-{self.node_id}", self.argv, self.workdir)
        return self.proc

    def await_ready(self, timeout: float) -> None:
        """Ready means the broker answers metadata with a broker in it, not merely that its port is open."""
        assert self.proc is not None
        try:
            await_kafka_metadata(self.proc, self.port, timeout)
        except ServiceStartError as exc:
            raise ServiceStartError(f"{exc}\nbroker log {self.log_path}:\n{log_tail(self.log_path)}") from None

    def kill(self) -> None:
        """SIGKILL: no clean shutdown; what the JVM wrote stays in the kernel's page cache, as after a crash."""
        if self.proc is not None:
            self.proc.stop(grace=0)

    def restart(self, timeout: float) -> None:
        """Start the killed node again on its ports and storage, retrying while the old socket lingers."""
        if self.running:
            raise RuntimeError(f"node {self.node_id} is still running; kill() it first")
        deadline = time.monotonic() + timeout
        while True:
            self.start()
            try:
                self.await_ready(max(1.0, deadline - time.monotonic()))
                return
            except ServiceStartError:
                self.kill()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing answers, like a long GC pause or a hung host."""
        if self.proc is not None:
            self.proc.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.popen.send_signal(signal.SIGCONT)

    def stop(self, grace: float) -> None:
        if self.running:
            self.resume()  # a stopped JVM cannot act on SIGTERM
            assert self.proc is not None
            self.proc.stop(grace=grace)


def _node_properties(node: KafkaNode, voters: str, replicas: int) -> dict[str, str]:
    """A combined broker + controller; defaults kept where users keep them, replication sized to the cluster."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{LOOPBACK}:{node.port},CONTROLLER://{LOOPBACK}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.workdir / "data"),
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min(2, replicas)),
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min(2, replicas)),
        **_TEST_SPEED,
    }


@dataclass(frozen=True)
class ScramTls:
    """A SASL_SSL listener with SCRAM-SHA-512 for clients: one user, the server certificate of ``tls``.

    The broker keeps a PLAINTEXT listener of its own for the inter-broker traffic and the readiness
    probe; clients are given only the SASL_SSL address, whose metadata names only SASL_SSL endpoints,
    so nothing a client learns leads it to the plaintext port.
    """

    tls: TlsFiles
    username: str
    password: str
    mechanism: str = "SCRAM-SHA-512"

    def client_config(self) -> dict[str, str]:
        """The confluent-kafka keys an application sets for this listener."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
            "ssl.ca.location": str(self.tls.ca_cert),
        }

    def listener_properties(self, listeners: Mapping[str, str], port: int) -> dict[str, str]:
        """The node's ``listeners`` keys with a SASL_SSL listener on ``port`` added beside PLAINTEXT and CONTROLLER."""
        return {
            "listeners": f"{listeners['listeners']},SASL_SSL://{LOOPBACK}:{port}",
            "advertised.listeners": f"{listeners['advertised.listeners']},SASL_SSL://{LOOPBACK}:{port}",
            "listener.security.protocol.map": f"{listeners['listener.security.protocol.map']},SASL_SSL:SASL_SSL",
            **self.broker_properties(),
        }

    def broker_properties(self) -> dict[str, str]:
        """The listener's broker keys; the PEM key and chain go inline (``\\n`` is a newline to Java's parser)."""
        login = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "sasl.enabled.mechanisms": self.mechanism,
            f"listener.name.sasl_ssl.{self.mechanism.lower()}.sasl.jaas.config": login,
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.certificate.chain": _inline(self.tls.server_chain),
            "listener.name.sasl_ssl.ssl.keystore.key": _inline(self.tls.server_key.read_text()),
        }

    def format_args(self) -> list[str]:
        """``StorageTool format`` arguments that create the user (Kafka parses the brackets itself)."""
        return ["--add-scram", f"{self.mechanism}=[name={self.username},password={self.password}]"]


def _inline(pem: str) -> str:
    """A multi-line value as one properties line: Java's ``Properties.load`` reads ``\\n`` as a newline."""
    return pem.strip().replace("\n", "\\n")


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

    def __init__(
        self, *, heap: str | None = None, overrides: Mapping[str, str] | None = None, secure: ScramTls | None = None
    ) -> None:
        """``secure`` adds a SASL_SSL listener, and clients (``client_conf()``) are given only that one."""
        jvm = _Jvm.find()
        heap = heap or os.environ.get("KAFKA_HEAP", "768m")
        self._workdir = Path(tempfile.mkdtemp(prefix="gw-kafka-"))
        self.node = KafkaNode(1, 0, 0, self._workdir)
        self.secure_port: int | None = None

        def launch(port: int) -> ServerProcess:
            self.node.port, self.node.controller_port = port, free_port()
            voters = f"1@{LOOPBACK}:{self.node.controller_port}"
            props = _node_properties(self.node, voters, replicas=1)
            format_args: list[str] = []
            if secure is not None:
                self.secure_port = free_port()
                props.update(secure.listener_properties(props, self.secure_port))
                format_args = secure.format_args()
            self.node.configure(jvm, heap, {**props, **(overrides or {})}, new_cluster_id(), format_args)
            return self.node.start()

        try:
            start_with_port_retry(launch, lambda proc, port: self.node.await_ready(self.start_timeout))
        except BaseException:
            shutil.rmtree(self._workdir, ignore_errors=True)
            raise
        port = self.node.port if secure is None else self.secure_port
        super().__init__(
            version=f"Apache Kafka {jvm.version}",
            bootstrap_servers=f"{LOOPBACK}:{port}",
            client_config=None if secure is None else secure.client_config(),
            pid=self.node.pid,
        )

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def log_path(self) -> Path:
        return self.node.log_path

    @property
    def port(self) -> int:
        return self.node.port

    # -- faults, for reliability tests: the same node, port and storage, as an operator would see it --

    def kill(self) -> None:
        self.node.kill()

    def restart(self, *, timeout: float | None = None) -> None:
        self.node.restart(timeout or self.start_timeout)
        self.pid = self.node.pid

    def pause(self) -> None:
        self.node.pause()

    def resume(self) -> None:
        self.node.resume()

    def _shutdown(self) -> None:
        try:
            self.node.stop(self.stop_grace)
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)


class ApacheKafkaCluster(KafkaService):
    """Three Apache Kafka nodes, each broker and controller, forming one KRaft quorum.

    Topics get three replicas and ``min.insync.replicas=2`` by default and producers ``acks=all``
    with idempotence, the settings under which a cluster promises that an acknowledged record
    survives the loss of its leader. Any node can be SIGKILLed and restarted as itself.
    """

    name = "kafka3"
    consumer_defaults = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    start_timeout: float = 120.0
    stop_grace: float = 15.0

    def __init__(self, nodes: int = 3, *, heap: str = "512m", overrides: Mapping[str, str] | None = None) -> None:
        jvm = _Jvm.find()
        self._workdir = Path(tempfile.mkdtemp(prefix="gw-kafka3-"))
        self.nodes = [KafkaNode(i, free_port(), free_port(), self._workdir / f"node-{i}") for i in range(1, nodes + 1)]
        voters = ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in self.nodes)
        cluster_id = new_cluster_id()
        replicas = min(3, nodes)
        cluster_defaults = {
            "default.replication.factor": str(replicas),
            "min.insync.replicas": str(min(2, replicas)),
            # a dead node is fenced and its partitions move after 3 s instead of 9 s: tests wait less
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
        }
        try:
            for node in self.nodes:
                props = {**_node_properties(node, voters, replicas), **cluster_defaults, **(overrides or {})}
                node.configure(jvm, heap, props, cluster_id)
            for node in self.nodes:  # all at once: no node is ready before a quorum has formed
                node.start()
            self._await_brokers(len(self.nodes), self.start_timeout)
        except BaseException:
            self._stop_all(grace=0)
            raise
        super().__init__(
            version=f"Apache Kafka {jvm.version}, {nodes} nodes",
            bootstrap_servers=",".join(f"{LOOPBACK}:{n.port}" for n in self.nodes),
        )

    def _await_brokers(self, count: int, timeout: float) -> None:
        for node in self.nodes:
            if node.running:
                node.await_ready(timeout)
        deadline = time.monotonic() + timeout
        while True:
            from confluent_kafka import KafkaException
            from confluent_kafka.admin import AdminClient

            live = [n for n in self.nodes if n.running]
            try:
                admin = AdminClient({"bootstrap.servers": ",".join(f"{LOOPBACK}:{n.port}" for n in live)})
                if len(admin.list_topics(timeout=2).brokers) >= count:
                    return
            except KafkaException:
                pass
            if time.monotonic() >= deadline:
                logs = "\n".join(f"node {n.node_id}:\n{log_tail(n.log_path, 1500)}" for n in self.nodes)
                raise ServiceStartError(f"{count} brokers did not register within {timeout:.0f}s\n{logs}")
            time.sleep(0.2)

    def producer_config(self, **overrides: Any) -> dict[str, Any]:
        return super().producer_config(**{"acks": "all", "enable.idempotence": True, **overrides})

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def leader(self, topic: str, partition: int) -> int:
        """The node id that leads a partition now, as the cluster's metadata says."""
        meta = self.admin().list_topics(topic=topic, timeout=10).topics[topic]
        return int(meta.partitions[partition].leader)

    def isr(self, topic: str, partition: int) -> list[int]:
        meta = self.admin().list_topics(topic=topic, timeout=10).topics[topic]
        return [int(x) for x in meta.partitions[partition].isrs]

    def kill(self, node_id: int) -> None:
        self.node(node_id).kill()

    def restart(self, node_id: int, *, timeout: float | None = None) -> None:
        self.node(node_id).restart(timeout or self.start_timeout)

    def await_full_isr(self, topic: str, partitions: Iterable[int], timeout: float = 60.0) -> None:
        """Wait until every replica of the partitions is back in sync (after a restart)."""
        deadline = time.monotonic() + timeout
        while any(len(self.isr(topic, p)) < len(self.nodes) for p in partitions):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"replicas of {topic} not back in sync after {timeout:.0f}s")
            time.sleep(0.2)

    def _stop_all(self, grace: float) -> None:
        try:
            for node in self.nodes:
                node.stop(grace)
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _shutdown(self) -> None:
        self._stop_all(self.stop_grace)
