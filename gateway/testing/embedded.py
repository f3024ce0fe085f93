"""An in-process Kafka-protocol cluster on loopback, for tests, demos and local Spark jobs.

The cluster is librdkafka's *mock cluster*, which ships inside every confluent-kafka wheel.  It speaks
the real Kafka wire protocol on ``127.0.0.1`` TCP ports, so ordinary clients -- confluent-kafka in this
process, in a subprocess, in a Spark worker -- connect to it exactly as to a broker, with no JVM, no
Docker and a start-up time of a few milliseconds::

    from gateway.testing.embedded import EmbeddedKafka

    with EmbeddedKafka(brokers=3) as cluster:
        cluster.bootstrap_servers              # "127.0.0.1:port,..."
        cluster.create_topic(name, partitions=3)

It is a *mock*: what it does not do is listed in :data:`LIMITS`; read it before trusting a test
that passes here to say anything about a real cluster.

Other processes can share one cluster that outlives them through the standalone mode::

    python -m gateway.testing.embedded --brokers 3 [--bootstrap-file PATH] [--topic NAME:PARTITIONS ...]

which prints the bootstrap string as stdout line 1 and serves until SIGTERM/SIGINT;
:meth:`EmbeddedKafka.spawn` wraps that for Python callers.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import enum
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, Final

from gateway.errors import GatewayError
from gateway.librdkafka.binding import LIB_ENV, candidate_library_paths

__all__ = [
    "ALL_BROKERS",
    "LIMITS",
    "ApiKey",
    "EmbeddedKafka",
    "EmbeddedKafkaError",
    "EmbeddedKafkaProcess",
    "main",
]

LIMITS: Final[str] = """\
EmbeddedKafka is librdkafka's mock cluster, not Apache Kafka. Known limits (librdkafka 2.x):
- Lifetime: the cluster lives exactly as long as its owning process/object. After stop() (or the
  owner's exit) every client gets _TRANSPORT / connection-refused errors; nothing is persisted.
- Fork: the cluster's threads do not survive fork(); a forked child cannot control or stop it.
- Topics: any topic a client names is auto-created with 4 partitions (hard-coded in librdkafka;
  default_partitions only affects create_topic). The CreateTopics/DeleteTopics admin APIs are not
  implemented: AdminClient.create_topics()/delete_topics() hang until their request timeout. Use
  create_topic()/delete_topic(), which work only in the owning process.
- No topic or broker configs: no retention.ms, no cleanup.policy=compact, no max.message.bytes.
- No broker-side size limit: any record batch up to max_request_bytes is accepted. Requests larger
  than max_request_bytes are silently dropped (the connection is closed, the client retries).
- Retention: a ring buffer of about 5 MiB (or 100k batches) per partition; older data is dropped
  silently and the log-start offset moves forward. Large-message tests must read promptly.
- offsets_for_times() is not implemented (returns offset -1).
- No transaction isolation: read_committed consumers see aborted and open transactions.
- Fetch returns one record batch per partition per request (slower catch-up than Kafka).
- Consumer groups work; the first classic-protocol join waits group.initial.rebalance.delay.ms
  (3 s by default, settable with group_initial_rebalance_delay_ms). Commit metadata is kept.
- Seek, watermarks, headers and keys behave like Kafka.
"""

ALL_BROKERS: Final[int] = -1
"""Broker id that librdkafka's fault-injection calls treat as "every broker"."""

# librdkafka error codes this module interprets itself (rdkafka.h, rd_kafka_resp_err_t).
_ERR_NO_ERROR: Final[int] = 0
_ERR_UNKNOWN_TOPIC_OR_PART: Final[int] = 3
_ERR_TOPIC_ALREADY_EXISTS: Final[int] = 36

_RD_KAFKA_PRODUCER: Final[int] = 0
_RD_KAFKA_CONF_OK: Final[int] = 0
_MAX_TOPIC_NAME: Final[int] = 249
_TOPIC_NAME_RE: Final[re.Pattern[str]] = re.compile(r"[A-Za-z0-9._-]+")
_DEFAULT_MAX_REQUEST_BYTES: Final[int] = 300_000_000
_RECEIVE_MAX_RANGE: Final[tuple[int, int]] = (1000, 2_147_483_647)


class EmbeddedKafkaError(GatewayError):
    """The embedded cluster refused or failed an operation; ``code`` is librdkafka's error code if any."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class ApiKey(enum.IntEnum):
    """Kafka protocol request types, for :meth:`EmbeddedKafka.push_request_errors`.

    Named as in the Kafka protocol guide (and librdkafka's ``RD_KAFKAP_*``) so they can be looked up
    there. Only requests a client of this library sends are listed; any int in 0..32767 is accepted.
    """

    Produce = 0
    Fetch = 1
    ListOffsets = 2
    Metadata = 3
    OffsetCommit = 8
    OffsetFetch = 9
    FindCoordinator = 10
    JoinGroup = 11
    Heartbeat = 12
    LeaveGroup = 13
    SyncGroup = 14
    DescribeGroups = 15
    ListGroups = 16
    ApiVersions = 18
    InitProducerId = 22
    OffsetForLeaderEpoch = 23
    AddPartitionsToTxn = 24
    AddOffsetsToTxn = 25
    EndTxn = 26
    TxnOffsetCommit = 28
    ConsumerGroupHeartbeat = 68


# --------------------------------------------------------------------------------------------------
# ctypes binding to librdkafka's mock API
# --------------------------------------------------------------------------------------------------

_VP = ctypes.c_void_p
_REQUIRED: Final[dict[str, tuple[Any, list[Any]]]] = {
    # name: (restype, argtypes); signatures from rdkafka.h / rdkafka_mock.h.
    "rd_kafka_version": (ctypes.c_int, []),
    "rd_kafka_err2name": (ctypes.c_char_p, [ctypes.c_int]),
    "rd_kafka_conf_new": (_VP, []),
    "rd_kafka_conf_set": (
        ctypes.c_int,
        [_VP, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t],
    ),
    "rd_kafka_conf_destroy": (None, [_VP]),
    "rd_kafka_new": (_VP, [ctypes.c_int, _VP, ctypes.c_char_p, ctypes.c_size_t]),
    "rd_kafka_destroy": (None, [_VP]),
    "rd_kafka_mock_cluster_new": (_VP, [_VP, ctypes.c_int]),
    "rd_kafka_mock_cluster_destroy": (None, [_VP]),
    "rd_kafka_mock_cluster_bootstraps": (ctypes.c_char_p, [_VP]),
    "rd_kafka_mock_topic_create": (ctypes.c_int, [_VP, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
    "rd_kafka_mock_broker_set_down": (ctypes.c_int, [_VP, ctypes.c_int32]),
    "rd_kafka_mock_broker_set_up": (ctypes.c_int, [_VP, ctypes.c_int32]),
    "rd_kafka_mock_push_request_errors_array": (
        None,
        [_VP, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)],
    ),
}
_OPTIONAL: Final[dict[str, tuple[Any, list[Any]]]] = {
    # Newer or less central calls: the feature using one raises if the library lacks it.
    "rd_kafka_mock_topic_delete": (ctypes.c_int, [_VP, ctypes.c_char_p]),
    "rd_kafka_mock_clear_request_errors": (None, [_VP, ctypes.c_int16]),
    "rd_kafka_mock_broker_set_rtt": (ctypes.c_int, [_VP, ctypes.c_int32, ctypes.c_int]),
    "rd_kafka_mock_topic_set_error": (None, [_VP, ctypes.c_char_p, ctypes.c_int]),
    "rd_kafka_mock_partition_set_leader": (
        ctypes.c_int,
        [_VP, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32],
    ),
    "rd_kafka_mock_group_initial_rebalance_delay_ms": (None, [_VP, ctypes.c_int32]),
}


class _Lib:
    """Typed wrapper over the few librdkafka functions used here.

    Every call goes through ctypes, which releases the GIL, so blocking mock commands (they wait for
    the cluster thread to apply them) never stall other Python threads.
    """

    _instance: _Lib | None = None
    _lock = threading.Lock()

    def __init__(self, cdll: ctypes.CDLL, path: str) -> None:
        self.path = path
        self._cdll = cdll
        self._fns: dict[str, Any] = {}
        for table, required in ((_REQUIRED, True), (_OPTIONAL, False)):
            for name, (restype, argtypes) in table.items():
                try:
                    fn = getattr(cdll, name)
                except AttributeError:
                    if required:
                        raise
                    continue
                fn.restype = restype
                fn.argtypes = argtypes
                self._fns[name] = fn

    @classmethod
    def get(cls) -> _Lib:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls._load()
            return cls._instance

    @classmethod
    def _load(cls) -> _Lib:
        problems: list[str] = []
        for path in candidate_library_paths():
            try:
                return cls(ctypes.CDLL(path), path)
            except (OSError, AttributeError) as exc:
                problems.append(f"{path}: {exc}")
        raise EmbeddedKafkaError(
            "cannot find a librdkafka with the mock-cluster API (rd_kafka_mock_*); "
            f"set {LIB_ENV} to its path. Tried: " + ("; ".join(problems) or "nothing found")
        )

    def has(self, name: str) -> bool:
        return name in self._fns

    def call(self, name: str, *args: Any) -> Any:
        fn = self._fns.get(name)
        if fn is None:
            raise NotImplementedError(f"{name} is not exported by {self.path}")
        return fn(*args)

    def err_name(self, code: int) -> str:
        raw = self.call("rd_kafka_err2name", code)
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(code)

    def check(self, code: int, what: str) -> None:
        if code != _ERR_NO_ERROR:
            raise EmbeddedKafkaError(f"{what} failed: {self.err_name(code)} ({code})", code)


def _destroy_native(lib: _Lib, rk: int, mcluster: int, owner_pid: int) -> None:
    """Tear down cluster then owner handle, in that order (the cluster uses the handle's threads).

    Skipped in a forked child: the mock thread does not exist there, and joining it would hang.
    """
    if os.getpid() != owner_pid:
        return
    lib.call("rd_kafka_mock_cluster_destroy", mcluster)
    lib.call("rd_kafka_destroy", rk)


def _validate_topic_name(name: str) -> bytes:
    """Apply Kafka's own topic-name rules: the mock accepts anything, a real broker would not."""
    if not isinstance(name, str) or not name or len(name) > _MAX_TOPIC_NAME or name in (".", ".."):
        raise EmbeddedKafkaError(f"invalid topic name {name!r}")
    if not _TOPIC_NAME_RE.fullmatch(name):
        raise EmbeddedKafkaError(f"invalid topic name {name!r}: only [A-Za-z0-9._-] allowed")
    return name.encode("ascii")


class EmbeddedKafka:
    """An in-process Kafka-protocol cluster on loopback (librdkafka's mock cluster).

    Limits (also in :data:`LIMITS`): topics a client names are auto-created with 4 partitions;
    no CreateTopics/DeleteTopics admin API (use :meth:`create_topic` / :meth:`delete_topic`, owner
    process only); no topic or broker configs and no broker-side message size limit; requests above
    ``max_request_bytes`` are silently dropped; about 5 MiB (or 100k batches) retained per partition,
    older data lost silently; ``offsets_for_times`` unsupported (-1); no transaction isolation; one
    batch per partition per Fetch; the cluster dies with this object (or its process).

    How the cluster is owned: librdkafka attaches every mock cluster to an ``rd_kafka_t`` handle
    whose configuration and threads it borrows. Rather than reach into a confluent-kafka client's
    C struct for its handle (that depends on the binding's private memory layout and would crash,
    not fail, if it changed), this class creates its own handle through librdkafka's public C API
    (``rd_kafka_conf_new``/``rd_kafka_new``) and attaches a cluster to it with
    ``rd_kafka_mock_cluster_new``. Only documented, exported functions are called; the handle
    never connects anywhere, so broker faults injected here never produce errors on it; and since
    clients reach the cluster over TCP, they work even if a different librdkafka copy were loaded.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        max_request_bytes: int = _DEFAULT_MAX_REQUEST_BYTES,
        default_partitions: int | None = None,
        group_initial_rebalance_delay_ms: int | None = None,
    ) -> None:
        """Describe a cluster; nothing runs until :meth:`start` or ``with``.

        ``max_request_bytes`` becomes the owner's ``receive.message.max.bytes``, which the mock
        brokers use as their request-size ceiling: librdkafka's 100 MB default would silently drop
        a 100 MB produce, hence 300 MB here. ``default_partitions`` is the partition count
        :meth:`create_topic` uses when none is given; it cannot change the 4 partitions of
        auto-created topics (librdkafka has no setter for that). ``group_initial_rebalance_delay_ms``
        shortens the 3 s wait before the first consumer-group assignment, for fast tests.
        """
        if not isinstance(brokers, int) or brokers < 1:
            raise ValueError(f"brokers must be a positive int, got {brokers!r}")
        lo, hi = _RECEIVE_MAX_RANGE
        if not lo <= max_request_bytes <= hi:
            raise ValueError(f"max_request_bytes must be in [{lo}, {hi}], got {max_request_bytes}")
        if default_partitions is not None and default_partitions < 1:
            raise ValueError(f"default_partitions must be >= 1, got {default_partitions}")
        if group_initial_rebalance_delay_ms is not None and group_initial_rebalance_delay_ms < 0:
            raise ValueError("group_initial_rebalance_delay_ms must be >= 0")
        self._brokers = brokers
        self._max_request_bytes = max_request_bytes
        self._default_partitions = default_partitions
        self._rebalance_delay_ms = group_initial_rebalance_delay_ms
        self._lock = threading.RLock()
        self._lib: _Lib | None = None
        self._mcluster: int | None = None
        self._bootstrap: str | None = None
        self._owner_pid: int | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._topics: dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> EmbeddedKafka:
        """Start the cluster (no-op if running) and return ``self`` for chaining."""
        with self._lock:
            if self._mcluster is not None:
                self._check_owner()
                return self
            lib = _Lib.get()
            rk = self._new_owner_handle(lib)
            mcluster = lib.call("rd_kafka_mock_cluster_new", rk, self._brokers)
            if not mcluster:
                lib.call("rd_kafka_destroy", rk)
                raise EmbeddedKafkaError(f"rd_kafka_mock_cluster_new({self._brokers}) failed")
            raw = lib.call("rd_kafka_mock_cluster_bootstraps", mcluster)
            pid = os.getpid()
            # finalize() guarantees teardown at interpreter exit even if stop() is never called.
            self._finalizer = weakref.finalize(self, _destroy_native, lib, rk, mcluster, pid)
            self._lib, self._mcluster, self._owner_pid = lib, int(mcluster), pid
            self._bootstrap = raw.decode("ascii") if isinstance(raw, bytes) else ""
            self._topics = {}
            if not self._bootstrap:
                self.stop()
                raise EmbeddedKafkaError("mock cluster reported no bootstrap servers")
            if self._rebalance_delay_ms is not None:
                try:
                    lib.call("rd_kafka_mock_group_initial_rebalance_delay_ms", mcluster, self._rebalance_delay_ms)
                except NotImplementedError:
                    self.stop()
                    raise
            return self

    def _new_owner_handle(self, lib: _Lib) -> int:
        conf = lib.call("rd_kafka_conf_new")
        errbuf = ctypes.create_string_buffer(512)
        settings = {
            "client.id": "gateway-embedded-kafka",
            "receive.message.max.bytes": str(self._max_request_bytes),
            # The owner never connects; its "no bootstrap.servers" notice is noise.
            "log_level": "4",
        }
        for key, value in settings.items():
            if lib.call("rd_kafka_conf_set", conf, key.encode(), value.encode(), errbuf, 512) != _RD_KAFKA_CONF_OK:
                lib.call("rd_kafka_conf_destroy", conf)
                raise EmbeddedKafkaError(f"owner config {key}={value}: {errbuf.value.decode(errors='replace')}")
        rk = lib.call("rd_kafka_new", _RD_KAFKA_PRODUCER, conf, errbuf, 512)
        if not rk:
            lib.call("rd_kafka_conf_destroy", conf)  # rd_kafka_new keeps conf only on success
            raise EmbeddedKafkaError(f"rd_kafka_new failed: {errbuf.value.decode(errors='replace')}")
        return int(rk)

    def stop(self) -> None:
        """Stop the cluster (no-op if not running); connected clients start failing at once."""
        with self._lock:
            finalizer, self._finalizer = self._finalizer, None
            self._mcluster = None
            self._bootstrap = None
            self._topics = {}
            if finalizer is not None:
                finalizer()

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self._bootstrap if self._bootstrap else "stopped"
        return f"EmbeddedKafka(brokers={self._brokers}, {state})"

    # -- properties --------------------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        return self._mcluster is not None

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:port,..."``, one entry per broker, for any client's ``bootstrap.servers``."""
        with self._lock:
            self._require()
            assert self._bootstrap is not None
            return self._bootstrap

    @property
    def broker_ids(self) -> tuple[int, ...]:
        """Broker ids, which librdkafka numbers 1..brokers."""
        return tuple(range(1, self._brokers + 1))

    # -- topics ------------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int = 1) -> None:
        """Create ``name`` with exactly ``partitions`` partitions (owner process only).

        Needed because the mock has no CreateTopics API and auto-creates 4 partitions. Calling it
        again with the same count is a no-op, so fixtures can be idempotent; a different count, or a
        topic a client already auto-created with another count, raises :class:`EmbeddedKafkaError`.
        """
        raw_name = _validate_topic_name(name)
        count = partitions if partitions is not None else (self._default_partitions or 1)
        if not isinstance(count, int) or count < 1:
            raise EmbeddedKafkaError(f"partitions must be a positive int, got {count!r}")
        if not isinstance(replication_factor, int) or not 1 <= replication_factor <= self._brokers:
            # Kafka refuses this with INVALID_REPLICATION_FACTOR; the mock would quietly clamp it.
            raise EmbeddedKafkaError(f"replication_factor must be in [1, {self._brokers}], got {replication_factor!r}")
        with self._native() as (lib, mcluster):
            code = int(lib.call("rd_kafka_mock_topic_create", mcluster, raw_name, count, replication_factor))
            if code == _ERR_NO_ERROR:
                self._topics[name] = count
                return
            if code != _ERR_TOPIC_ALREADY_EXISTS:
                lib.check(code, f"create_topic({name!r}, partitions={count})")
            existing = self._topics.get(name)
            if existing is None:
                existing = self._partition_count(name)
                self._topics[name] = existing
        if existing != count:
            raise EmbeddedKafkaError(
                f"topic {name!r} already exists with {existing} partitions, not {count}"
                + (" (auto-created by a client?)" if existing == 4 else ""),
                code,
            )

    def _partition_count(self, name: str) -> int:
        """Ask the cluster over the wire: the mock API has no getter, and the topic exists already."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 3})
        metadata = admin.list_topics(name, timeout=10)
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            raise EmbeddedKafkaError(f"cannot read metadata of existing topic {name!r}")
        return len(topic.partitions)

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` and its data (owner process only).

        The mock has no DeleteTopics API (``AdminClient.delete_topics`` hangs), so this uses
        ``rd_kafka_mock_topic_delete``, which only recent librdkafka exports; with an older one
        this raises :class:`NotImplementedError`. A client that still names the topic afterwards
        (a producer retrying, a consumer refreshing metadata) auto-creates it again with 4 partitions.
        """
        raw_name = _validate_topic_name(name)
        with self._native() as (lib, mcluster):
            if not lib.has("rd_kafka_mock_topic_delete"):
                raise NotImplementedError(
                    "the mock cluster has no DeleteTopics API and this librdkafka "
                    f"({lib.path}) does not export rd_kafka_mock_topic_delete"
                )
            code = int(lib.call("rd_kafka_mock_topic_delete", mcluster, raw_name))
            self._topics.pop(name, None)
        if code == _ERR_UNKNOWN_TOPIC_OR_PART:
            raise EmbeddedKafkaError(f"topic {name!r} does not exist", code)
        lib.check(code, f"delete_topic({name!r})")

    # -- fault injection ---------------------------------------------------------------------------

    def set_broker_down(self, broker_id: int) -> None:
        """Drop the broker's connections and refuse new ones (``ALL_BROKERS`` for all).

        Leadership does not move, so partitions led by this broker become unavailable -- the
        situation a client's timeouts and retries are meant for.
        """
        self._check_broker(broker_id)
        with self._native() as (lib, mcluster):
            code = int(lib.call("rd_kafka_mock_broker_set_down", mcluster, broker_id))
        lib.check(code, f"set_broker_down({broker_id})")

    def set_broker_up(self, broker_id: int) -> None:
        """Accept connections again after :meth:`set_broker_down`; clients reconnect on their backoff."""
        self._check_broker(broker_id)
        with self._native() as (lib, mcluster):
            code = int(lib.call("rd_kafka_mock_broker_set_up", mcluster, broker_id))
        lib.check(code, f"set_broker_up({broker_id})")

    def set_broker_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of the broker by ``rtt_ms`` (0 to undo), to exercise timeouts."""
        self._check_broker(broker_id)
        if rtt_ms < 0:
            raise ValueError("rtt_ms must be >= 0")
        with self._native() as (lib, mcluster):
            code = int(lib.call("rd_kafka_mock_broker_set_rtt", mcluster, broker_id, rtt_ms))
        lib.check(code, f"set_broker_rtt({broker_id}, {rtt_ms})")

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """Make the next ``len(errors)`` requests of type ``api_key`` fail with these codes, in order.

        Codes are Kafka/librdkafka error codes (``confluent_kafka.KafkaError.*``); 0 lets a request
        through, ``KafkaError._TRANSPORT`` makes the broker drop the connection instead of answering.
        Retriable codes are retried by clients (consuming further entries); non-retriable ones reach
        the application, e.g. a producer's delivery callback. The errors are cluster-wide: whichever
        broker receives the next such request answers with the next error.
        """
        key = self._check_api_key(api_key)
        codes = [int(e) for e in errors]
        array = (ctypes.c_int * len(codes))(*codes)
        with self._native() as (lib, mcluster):
            if codes:
                lib.call("rd_kafka_mock_push_request_errors_array", mcluster, key, len(codes), array)

    def clear_request_errors(self, api_key: int) -> None:
        """Drop errors still queued by :meth:`push_request_errors` for ``api_key``."""
        key = self._check_api_key(api_key)
        with self._native() as (lib, mcluster):
            lib.call("rd_kafka_mock_clear_request_errors", mcluster, key)

    def set_topic_error(self, topic: str, error: int) -> None:
        """Report ``error`` for ``topic`` in Metadata responses (0 to clear); creates the topic if missing."""
        raw_name = _validate_topic_name(topic)
        with self._native() as (lib, mcluster):
            lib.call("rd_kafka_mock_topic_set_error", mcluster, raw_name, int(error))

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move a partition's leadership (``-1`` for leader-less); creates the topic if missing."""
        raw_name = _validate_topic_name(topic)
        self._check_broker(broker_id)
        with self._native() as (lib, mcluster):
            code = int(lib.call("rd_kafka_mock_partition_set_leader", mcluster, raw_name, partition, broker_id))
        lib.check(code, f"set_partition_leader({topic!r}, {partition}, {broker_id})")

    # -- helpers -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _native(self) -> Iterator[tuple[_Lib, int]]:
        """Hold the lock across a native call so a concurrent stop() cannot free the cluster under it."""
        with self._lock:
            yield self._require()

    def _require(self) -> tuple[_Lib, int]:
        lib, mcluster = self._lib, self._mcluster
        if mcluster is None or lib is None:
            raise EmbeddedKafkaError("EmbeddedKafka is not running; call start() or use it in a with block")
        self._check_owner()
        return lib, mcluster

    def _check_owner(self) -> None:
        if self._owner_pid is not None and self._owner_pid != os.getpid():
            raise EmbeddedKafkaError(
                f"this cluster belongs to process {self._owner_pid}; after fork() it can only be "
                "reached over TCP (bootstrap_servers), not controlled"
            )

    def _check_broker(self, broker_id: int) -> None:
        if broker_id != ALL_BROKERS and broker_id not in self.broker_ids:
            raise EmbeddedKafkaError(f"unknown broker id {broker_id}; brokers are {self.broker_ids}")

    @staticmethod
    def _check_api_key(api_key: int) -> int:
        key = int(api_key)
        if not 0 <= key <= 32767:
            raise ValueError(f"api_key must be in [0, 32767], got {api_key}")
        return key

    # -- other processes ---------------------------------------------------------------------------

    @staticmethod
    def spawn(
        brokers: int = 1,
        *,
        topics: Mapping[str, int] | None = None,
        max_request_bytes: int = _DEFAULT_MAX_REQUEST_BYTES,
        group_initial_rebalance_delay_ms: int | None = None,
        bootstrap_file: str | os.PathLike[str] | None = None,
        timeout: float = 30.0,
    ) -> EmbeddedKafkaProcess:
        """Run a cluster in a child process (``python -m gateway.testing.embedded``) and wait until it serves.

        For clients that must outlive, or live outside, the caller's cluster object: subprocess
        tests, Spark workers. Topics that need an exact partition count are passed as ``topics``
        because :meth:`create_topic` only works in the process that owns the cluster. The child
        exits when :meth:`EmbeddedKafkaProcess.stop` is called or when this process dies.
        """
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        argv = [
            sys.executable,
            "-m",
            "gateway.testing.embedded",
            "--brokers",
            str(brokers),
            "--max-request-bytes",
            str(max_request_bytes),
            "--exit-on-stdin-eof",
        ]
        if group_initial_rebalance_delay_ms is not None:
            argv += ["--group-initial-rebalance-delay-ms", str(group_initial_rebalance_delay_ms)]
        if bootstrap_file is not None:
            argv += ["--bootstrap-file", os.fspath(bootstrap_file)]
        for name, partitions in (topics or {}).items():
            argv += ["--topic", f"{name}:{partitions}"]
        return EmbeddedKafkaProcess._launch(argv, timeout)


# --------------------------------------------------------------------------------------------------
# Standalone mode
# --------------------------------------------------------------------------------------------------


class EmbeddedKafkaProcess:
    """A cluster served by a child process; see :meth:`EmbeddedKafka.spawn`."""

    def __init__(self, popen: subprocess.Popen[bytes], bootstrap_servers: str, stderr: IO[bytes]) -> None:
        self._popen = popen
        self._bootstrap = bootstrap_servers
        self._stderr = stderr
        self._finalizer = weakref.finalize(self, _terminate, popen, 5.0)

    @classmethod
    def _launch(cls, argv: list[str], timeout: float) -> EmbeddedKafkaProcess:
        env = dict(os.environ)
        # Let the child import gateway even when it is not installed (e.g. run from a checkout).
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        # stderr goes to a file, not a pipe: librdkafka logs must never fill a pipe and block the child.
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- owned by the returned object, closed in stop()
        popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, close_fds=True
        )
        stdout = popen.stdout
        assert stdout is not None
        lines: list[bytes] = []
        # A thread, not select(): it works on every platform, and readline() may block indefinitely.
        reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        line = lines[0].decode("utf-8", "replace").strip() if lines else ""
        if not line:
            timed_out = reader.is_alive()
            if not timed_out:
                # stdout hit EOF: the child is exiting; give it a moment so its exit code is real.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    popen.wait(5.0)
            code = _terminate(popen, 5.0)
            stdout.close()
            detail = _read_all(stderr).strip() or "(no stderr)"
            stderr.close()
            why = f"gave no bootstrap line within {timeout:g}s" if timed_out else f"exited with {code}"
            raise EmbeddedKafkaError(f"embedded Kafka process {why}: {detail}")
        stdout.close()  # the child writes nothing after line 1
        return cls(popen, line, stderr)

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    @property
    def is_running(self) -> bool:
        return self._popen.poll() is None

    def stderr_output(self) -> str:
        """What the child wrote to stderr so far (librdkafka logs, tracebacks)."""
        return _read_all(self._stderr)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM the child, wait for it (SIGKILL after ``timeout``), reap it; returns its exit code."""
        self._finalizer.detach()
        code = _terminate(self._popen, timeout)
        if not self._stderr.closed:
            self._stderr.close()
        return code

    def __enter__(self) -> EmbeddedKafkaProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedKafkaProcess(pid={self.pid}, {self._bootstrap}, returncode={self.returncode})"


def _terminate(popen: subprocess.Popen[bytes], timeout: float) -> int:
    if popen.poll() is None:
        try:
            popen.terminate()
            return popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
    code = popen.wait()
    if popen.stdin is not None and not popen.stdin.closed:
        popen.stdin.close()
    return code


def _read_all(handle: IO[bytes]) -> str:
    if handle.closed:
        return ""
    handle.flush()
    handle.seek(0)
    return handle.read().decode("utf-8", "replace")


def _parse_topic(spec: str) -> tuple[str, int]:
    name, sep, count = spec.rpartition(":")
    if not sep:
        return spec, 1
    try:
        return name, int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--topic {spec!r}: expected NAME or NAME:PARTITIONS") from None


def _write_atomically(path: str, text: str) -> None:
    """Readers polling for the file must never see it half-written, so write aside and rename."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a cluster until SIGTERM/SIGINT (or stdin EOF with ``--exit-on-stdin-eof``).

    Returns 0 after a clean stop, 1 if the cluster or a requested topic could not be created.
    """
    parser = argparse.ArgumentParser(
        prog="python -m gateway.testing.embedded",
        description="Serve an in-process Kafka-protocol cluster (librdkafka mock) on loopback. "
        "Prints the bootstrap servers as stdout line 1.",
        epilog=LIMITS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--bootstrap-file", help="also write the bootstrap string here (removed on exit)")
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        type=_parse_topic,
        metavar="NAME[:PARTITIONS]",
        help="create a topic with an exact partition count (repeatable)",
    )
    parser.add_argument("--max-request-bytes", type=int, default=_DEFAULT_MAX_REQUEST_BYTES)
    parser.add_argument("--group-initial-rebalance-delay-ms", type=int, default=None)
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="stop when stdin closes (i.e. when the parent dies)"
    )
    args = parser.parse_args(argv)
    if args.brokers < 1:
        parser.error("--brokers must be >= 1")

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # Install handlers before announcing the bootstrap, so a SIGTERM sent right after it is graceful.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    wrote_file = False
    cluster = EmbeddedKafka(
        args.brokers,
        max_request_bytes=args.max_request_bytes,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
    )
    try:
        with cluster:
            for name, partitions in args.topic:
                cluster.create_topic(name, partitions)
            bootstrap = cluster.bootstrap_servers
            if args.bootstrap_file:
                _write_atomically(args.bootstrap_file, bootstrap + "\n")
                wrote_file = True
            sys.stdout.write(bootstrap + "\n")
            sys.stdout.flush()
            if args.exit_on_stdin_eof:
                threading.Thread(target=_wait_for_eof, args=(stop,), daemon=True).start()
            # A timed wait keeps the main thread returning to the interpreter so handlers run promptly.
            while not stop.wait(0.5):
                pass
    except EmbeddedKafkaError as exc:
        print(f"gateway.testing.embedded: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if wrote_file:
            with contextlib.suppress(OSError):
                Path(args.bootstrap_file).unlink()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _wait_for_eof(stop: threading.Event) -> None:
    """Set ``stop`` when stdin reaches EOF, i.e. when the parent holding the pipe has gone.

    Reads the raw descriptor: a daemon thread parked inside ``sys.stdin.buffer.read`` holds the
    buffer's lock, and the interpreter aborts (SIGABRT) if it finds that lock taken at shutdown.
    """
    try:
        fd = sys.stdin.fileno()
        while os.read(fd, 65536):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


if __name__ == "__main__":
    sys.exit(main())
