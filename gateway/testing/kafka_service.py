"""What a test needs to know about a Kafka-protocol cluster: its address, client configs, topics, and
which of Kafka's behaviours it really has.

Local brokers are emulations with known gaps, so every backend carries capability flags that tests
consult instead of assuming Kafka semantics; Apache Kafka itself has them all.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    pass

_KafkaT = TypeVar("_KafkaT", bound="KafkaService")

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
        # the test may start Apache Kafka nodes of its own and SIGKILL, SIGSTOP and restart them
        "broker_faults",
        # Apache Kafka's own Java clients work against it, as Spark's Kafka source needs (kafka-clients
        # 3.9's AdminClient never gets past listNodes on the librdkafka mock; noida and tansu are unmeasured)
        "java_clients",
        # the log cleaner compacts topics with cleanup.policy=compact, and DescribeConfigs reports it
        "compaction",
        # AdminClient.delete_records moves a partition's log start (the mock answers _UNSUPPORTED_FEATURE)
        "delete_records",
    }
)

#: Measured per backend (docs/development.md lists what each lacks). A real cluster gets everything.
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
    "kafka3": CAPABILITIES,  # three Apache Kafka nodes, replication factor 3
    # a cluster someone else runs cannot be killed by a test
    "external": CAPABILITIES - {"broker_faults"},
}

BACKENDS: tuple[str, ...] = tuple(BACKEND_CAPABILITIES)


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
