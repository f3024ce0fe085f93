"""Server child processes for tests, the demo and benchmarks: start on a free loopback port, wait until
they really answer, stop exactly what was started.

Output goes to a file, never a pipe, and readiness means a real answer (PING, an HTTP response, a
metadata response), not an open port, because a server that accepts connections may still refuse work.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from gateway.errors import GatewayError

if TYPE_CHECKING:
    pass

LOOPBACK = "127.0.0.1"

_LOG_TAIL_CHARS = 4000


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


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path, chars: int = _LOG_TAIL_CHARS) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no log)"
    return data[-chars:].decode("utf-8", errors="replace")


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies, even by SIGKILL.

    A test run killed by its timeout or a demo killed with ``kill -9`` cannot stop its servers;
    Linux's parent-death signal does it for them, so no redis-server or broker outlives its owner.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class ServerProcess:
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
                preexec_fn=_die_with_parent,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> bool:
        return self.popen.poll() is not None

    def log_tail(self) -> str:
        return log_tail(self.log_path)

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


def start_with_port_retry(
    start: Callable[[int], ServerProcess], ready: Callable[[ServerProcess, int], None], attempts: int = 3
) -> tuple[ServerProcess, int]:
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


def await_kafka_metadata(proc: ServerProcess, port: int, timeout: float) -> None:
    """Ready means a metadata request is answered with a broker in it, not merely that the port is open."""
    deadline = time.monotonic() + timeout
    proc.wait_until(lambda: port_accepts(LOOPBACK, port), timeout=timeout, what="its port")

    def metadata_answers() -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": f"{LOOPBACK}:{port}"}).list_topics(timeout=2)
        except KafkaException:
            return False
        return bool(md.brokers)

    proc.wait_until(metadata_answers, timeout=max(1.0, deadline - time.monotonic()), what="a metadata response")


def package_dir(package: str) -> Path | None:
    """The directory of an installed package, found without importing (and so running) it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def binary_version(binary: Path, fallback: str) -> str:
    """The binary's own ``--version`` line: wheels may carry a binary newer than their metadata."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return fallback
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else fallback


ServerT = TypeVar("ServerT", bound="LocalServer")


class LocalServer:
    """A server child process with a scratch directory: started on enter, stopped and cleaned on exit."""

    _proc: ServerProcess | None
    _workdir: Path | None

    def start(self: ServerT) -> ServerT:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The server process while it runs; ``None`` when external or stopped."""
        if self._proc is None or self._proc.exited():
            return None
        return self._proc.pid

    @property
    def log_path(self) -> Path | None:
        return self._proc.log_path if self._proc is not None else None

    def close(self) -> None:
        """Stop for good and remove the scratch directory; safe to call twice."""
        if self._proc is not None:
            self._proc.stop(grace=5.0)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self: ServerT) -> ServerT:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
