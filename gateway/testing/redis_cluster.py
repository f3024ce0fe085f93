"""A real Redis Cluster on loopback for tests: masters and replicas from the Debian ``redis-server``.

Every node gets a free client port, a free cluster-bus port (``cluster-port``: the default, port +
10000, may be above 65535 for an ephemeral port) and its own folder. ``redis-cli --cluster create``
joins them; the cluster is ready when every node reports ``cluster_state:ok``, knows every other
node, and every master has its replicas attached, because a failover test needs the replica to be
in sync before it kills the master.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.testing.processes import (
    LOOPBACK,
    ServerProcess,
    ServiceStartError,
    ServiceUnavailable,
    free_port,
)
from gateway.testing.redis_server import find_redis_server

if TYPE_CHECKING:
    import redis
    from redis.cluster import RedisCluster


@dataclass
class ClusterNode:
    """One redis-server of the cluster."""

    port: int
    bus_port: int
    workdir: Path
    proc: ServerProcess

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def alive(self) -> bool:
        return not self.proc.exited()

    def client(self, **kwargs: Any) -> redis.Redis:
        """A plain client on this node alone (CLUSTER, INFO, DEBUG, CLIENT commands)."""
        import redis as redis_mod

        kwargs.setdefault("socket_connect_timeout", 2)
        kwargs.setdefault("socket_timeout", 5)
        return redis_mod.Redis(host=LOOPBACK, port=self.port, **kwargs)

    def info(self, section: str) -> dict[str, Any]:
        with self.client() as c:
            return dict(c.info(section))

    def cluster_info(self) -> dict[str, str]:
        with self.client(decode_responses=True) as c:
            text = str(c.execute_command("CLUSTER", "INFO"))
        return dict(line.split(":", 1) for line in text.split() if ":" in line)


@dataclass(frozen=True)
class NodeRole:
    """A row of ``CLUSTER NODES`` as seen by one node."""

    node_id: str
    port: int
    master: bool
    master_id: str | None
    failed: bool
    slots: int


class RedisClusterServer:
    """``masters`` masters with ``replicas`` replicas each, stopped and removed again by :meth:`close`.

    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a silent master takes to be declared
    failed, and so most of the time a failover takes. It is short here so tests stay fast. Replica
    output buffers are unlimited, so that a transaction holding a 200 MB payload is never cut off
    on its way to the replica (production sizing: docs/stores.md).
    """

    def __init__(
        self, *, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1500, start_timeout: float = 60.0
    ) -> None:
        if masters < 3:
            raise ValueError("Redis Cluster needs at least three masters")
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.start_timeout = start_timeout
        self.nodes: list[ClusterNode] = []
        self._root: Path | None = None
        self._binary: str | None = None
        self._replicas_of_killed: dict[int, set[int]] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> RedisClusterServer:
        if self.nodes:
            return self
        self._binary = find_redis_server()
        cli = shutil.which("redis-cli")
        if self._binary is None or cli is None:
            raise ServiceUnavailable("redis-server and redis-cli are needed (apt-get install redis-server)")
        self._root = Path(tempfile.mkdtemp(prefix="gw-redis-cluster-"))
        try:
            for i in range(self.masters * (1 + self.replicas)):
                self.nodes.append(self._start_node(i))
            create = subprocess.run(
                [cli, "--cluster", "create", *[n.address for n in self.nodes],
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=self.start_timeout, check=False,
            )  # fmt: skip
            if create.returncode != 0:
                raise ServiceStartError(f"redis-cli --cluster create failed:\n{create.stdout[-3000:]}{create.stderr}")
            self.wait_until(self._healthy, what="cluster_state:ok with every replica attached")
        except BaseException:
            self.close()
            raise
        return self

    def _start_node(self, index: int) -> ClusterNode:
        assert self._binary is not None and self._root is not None
        workdir = self._root / f"node{index}"
        workdir.mkdir()
        for _ in range(3):  # a port taken between free_port() and bind: try new ports
            port, bus_port = free_port(), free_port()
            if port == bus_port:
                continue
            argv = [
                self._binary, "--port", str(port), "--bind", LOOPBACK, "--dir", str(workdir), "--daemonize", "no",
                "--save", "", "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-port", str(bus_port),
                "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-replica-validity-factor", "0", "--client-output-buffer-limit", "replica 0 0 0",
            ]  # fmt: skip
            node = ClusterNode(port, bus_port, workdir, ServerProcess("redis-server", argv, workdir))
            try:
                node.proc.wait_until(partial(_pings, node), timeout=self.start_timeout, what="PING")
            except ServiceStartError:
                died = node.proc.exited()
                node.proc.stop(grace=0)
                if not died:
                    raise
                continue
            return node
        raise ServiceStartError(f"could not start cluster node {index} on a free port; see {workdir}")

    def close(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL) and remove all folders; safe to call twice."""
        for node in self.nodes:
            node.proc.stop(grace=5.0)
        self.nodes = []
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def __enter__(self) -> RedisClusterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- clients ---------------------------------------------------------------------------------
    def client(self, **kwargs: Any) -> RedisCluster:
        """A cluster client that knows every node as a startup node, so it bootstraps with one dead."""
        from redis.cluster import ClusterNode as StartupNode
        from redis.cluster import RedisCluster

        kwargs.setdefault("socket_connect_timeout", 2)
        kwargs.setdefault("socket_timeout", 10)
        startup = [StartupNode(LOOPBACK, n.port) for n in self.nodes if n.alive]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=startup, **kwargs)

    @property
    def startup_nodes(self) -> list[str]:
        return [n.address for n in self.nodes if n.alive]

    # -- topology ----------------------------------------------------------------------------------
    def roles(self) -> list[NodeRole]:
        """``CLUSTER NODES`` as a live node sees it."""
        for node in self.nodes:
            if not node.alive:
                continue
            try:
                with node.client(decode_responses=True) as c:
                    text = str(c.execute_command("CLUSTER", "NODES"))
            except Exception:  # noqa: BLE001 - a node in the middle of dying: ask the next one
                continue
            return [_parse_node_line(line) for line in text.splitlines() if line.strip()]
        raise ServiceStartError("no live node answers CLUSTER NODES")

    def node(self, port: int) -> ClusterNode:
        return next(n for n in self.nodes if n.port == port)

    def master_nodes(self) -> list[ClusterNode]:
        ports = {r.port for r in self.roles() if r.master and not r.failed and r.slots}
        return [n for n in self.nodes if n.port in ports and n.alive]

    def master_of_key(self, key: str | bytes) -> ClusterNode:
        """The live node that serves the slot of ``key``, as the cluster sees it now."""
        from redis.crc import key_slot

        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for node in self.nodes:
            if not node.alive:
                continue
            with node.client() as c:
                for start, end, *owners in c.execute_command("CLUSTER", "SLOTS"):
                    if int(start) <= slot <= int(end):
                        return self.node(int(owners[0][1]))
        raise ServiceStartError(f"no node serves slot {slot}")

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        roles = self.roles()
        master_id = next(r.node_id for r in roles if r.port == master.port)
        ports = {r.port for r in roles if r.master_id == master_id}
        return [n for n in self.nodes if n.port in ports]

    # -- faults ------------------------------------------------------------------------------------
    def kill(self, node: ClusterNode) -> None:
        """SIGKILL: no shutdown, no last replication, as a crashed machine looks to its replica.

        The node's replicas are noted first, so :meth:`wait_for_failover` knows whom to wait for.
        """
        self._replicas_of_killed[node.port] = {r.port for r in self.replicas_of(node)} if node.alive else set()
        node.proc.popen.send_signal(signal.SIGKILL)
        node.proc.popen.wait(timeout=10)

    def wait_for_failover(self, dead: ClusterNode, timeout: float = 60.0) -> ClusterNode:
        """Wait until a former replica of ``dead`` is master of slots and every live node says ok; return it."""
        candidates = self._replicas_of_killed.get(dead.port, set())
        if not candidates:
            raise ValueError(f"{dead.address} was not killed with kill(), or had no replica")
        promoted: list[ClusterNode] = []

        def done() -> bool:
            try:
                new = [r for r in self.roles() if r.port in candidates and r.master and r.slots and not r.failed]
            except ServiceStartError:
                return False
            if not new or not self._healthy(expect_replicas=False):
                return False
            promoted[:] = [self.node(new[0].port)]
            return True

        self.wait_until(done, what=f"a replica of {dead.address} to take over", timeout=timeout)
        return promoted[0]

    def _healthy(self, expect_replicas: bool = True) -> bool:
        live = [n for n in self.nodes if n.alive]
        try:
            for node in live:
                info = node.cluster_info()
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                    return False
                if int(info.get("cluster_known_nodes", "0")) != len(self.nodes):
                    return False
            if expect_replicas:
                for node in self.master_nodes():
                    if int(node.info("replication").get("connected_slaves", 0)) < self.replicas:
                        return False
                for node in live:
                    rep = node.info("replication")
                    if rep.get("role") == "slave" and rep.get("master_link_status") != "up":
                        return False
        except Exception:  # noqa: BLE001 - a node still starting or just killed errs: not healthy yet
            return False
        return True

    def wait_until(self, ready: Callable[[], bool], *, what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        while not ready():
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n.proc.log_path}:\n{n.proc.log_tail()[-1500:]}" for n in self.nodes)
                raise ServiceStartError(f"Redis Cluster: timed out waiting for {what}\n{logs}")
            time.sleep(0.1)

    def flushall(self) -> None:
        """Empty every master (replicas follow)."""
        for node in self.master_nodes():
            with node.client() as c:
                c.flushall()

    def dbsize(self) -> int:
        """Keys on all masters together."""
        total = 0
        for node in self.master_nodes():
            with node.client() as c:
                total += int(c.dbsize())
        return total


def _pings(node: ClusterNode) -> bool:
    import redis as redis_mod

    try:
        with node.client(socket_connect_timeout=0.5, socket_timeout=1) as c:
            return bool(c.ping())
    except redis_mod.RedisError:
        return False


def _parse_node_line(line: str) -> NodeRole:
    parts = line.split()
    address, flags, master_id = parts[1], parts[2].split(","), parts[3]
    port = int(address.split("@")[0].rsplit(":", 1)[1])
    slots = 0
    for item in parts[8:]:
        if item.startswith("["):
            continue  # a slot being migrated
        start, _, end = item.partition("-")
        slots += int(end or start) - int(start) + 1
    return NodeRole(
        node_id=parts[0],
        port=port,
        master="master" in flags,
        master_id=None if master_id == "-" else master_id,
        failed="fail" in flags or "fail?" in flags,
        slots=slots,
    )


__all__ = ["ClusterNode", "NodeRole", "RedisClusterServer"]
