"""A real redis-server on loopback for tests and the demo, or ``REDIS_URL``."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.testing.processes import (
    LOOPBACK,
    LocalServer,
    ServerProcess,
    ServiceStartError,
    ServiceUnavailable,
    start_with_port_retry,
)

if TYPE_CHECKING:
    import redis

    from gateway.testing.tls import TlsFiles

_RedisT = TypeVar("_RedisT", bound="RedisServer")


def find_redis_server() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    for candidate in ("/usr/sbin/redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


class RedisServer(LocalServer):
    """A real redis-server on loopback, or ``REDIS_URL`` when set (then nothing is started).

    :meth:`stop` and :meth:`start` keep the port, so a test can take Redis away in the middle of a
    run and bring it back at the same URL, as a failover would look to a client. Persistence is
    off: a restart comes back empty, which is what a crashed cache looks like.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        from_env: bool = True,
        start_timeout: float = 15.0,
        password: str | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        """``password`` makes the server require it (``requirepass``, from a config file only its owner reads,
        never the command line); :attr:`url` then carries it, as a client needs it.

        ``tls`` makes the server speak TLS only (``port 0``, ``tls-port``), with that certificate and
        without client certificates; :attr:`url` is then ``rediss://...?ssl_ca_certs=CA``, the form a
        user gives the library, and :attr:`ca_certs` the CA's path.
        """
        env_url = os.environ.get("REDIS_URL") if from_env and password is None and tls is None else None
        self.password = password
        self.tls = tls
        self._external_url: str | None = url or env_url or None
        self.start_timeout = start_timeout
        self._proc: ServerProcess | None = None
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
        return self.url_for(password=self.password)

    def url_for(self, *, username: str | None = None, password: str | None = None, ca_certs: bool = True) -> str:
        """This server's URL with other credentials (a user without a password: ``rediss://user@...``, the password
        given apart), or (``ca_certs=False``) without the CA a TLS client needs."""
        from urllib.parse import quote

        if self._port is None:
            raise RuntimeError("RedisServer has not been started")
        userinfo = "" if username is None else quote(username, safe="")
        if password is not None:
            userinfo += f":{quote(password, safe='')}"
        userinfo += "@" if userinfo else ""
        if self.tls is None:
            return f"redis://{userinfo}{LOOPBACK}:{self._port}/0"
        query = f"?ssl_ca_certs={quote(str(self.tls.ca_cert), safe='/')}" if ca_certs else ""
        return f"rediss://{userinfo}{LOOPBACK}:{self._port}/0{query}"

    @property
    def ca_certs(self) -> str | None:
        """The path of the CA certificate that signed a TLS server's certificate; ``None`` without TLS."""
        return None if self.tls is None else str(self.tls.ca_cert)

    @property
    def port(self) -> int | None:
        return self._port

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
            self._binary = find_redis_server()
            if self._binary is None:
                raise ServiceUnavailable("redis-server not found (apt-get install redis-server, or set REDIS_URL)")
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="gw-redis-"))
        if self._port is None:
            self._proc, self._port = start_with_port_retry(self._launch, self._await_ready)
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

    def _launch(self, port: int) -> ServerProcess:
        assert self._binary is not None and self._workdir is not None
        lines: list[str] = []
        if self.password is not None:
            lines.append(f'requirepass "{self.password}"')
        ports = ["--port", str(port)]
        if self.tls is not None:
            ports = ["--port", "0", "--tls-port", str(port)]
            lines += [
                f'tls-cert-file "{self.tls.server_cert}"',
                f'tls-key-file "{self.tls.server_key}"',
                f'tls-ca-cert-file "{self.tls.ca_cert}"',
                "tls-auth-clients no",
            ]
        config: list[str] = []
        if lines:
            conf = self._workdir / "redis.conf"
            conf.touch(mode=0o600)
            conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
            config = [str(conf)]
        argv = [
            self._binary, *config, *ports, "--bind", LOOPBACK, "--save", "", "--appendonly", "no",
            "--dir", str(self._workdir), "--daemonize", "no",
        ]  # fmt: skip
        return ServerProcess("redis-server", argv, self._workdir)

    def _await_ready(self, proc: ServerProcess, port: int) -> None:
        import redis as redis_mod

        tls: dict[str, Any] = {} if self.tls is None else {"ssl": True, "ssl_ca_certs": str(self.tls.ca_cert)}
        probe = redis_mod.Redis(
            host=LOOPBACK, port=port, password=self.password, socket_connect_timeout=0.5, socket_timeout=1, **tls
        )

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

    def pause(self) -> None:
        """SIGSTOP the server: connections are accepted by the kernel but nothing answers, like a hung host."""
        if self._proc is None or self.external:
            raise ServiceUnavailable("only a local redis-server started here can be paused")
        self._proc.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None:
            self._proc.popen.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.resume()  # a stopped process cannot act on SIGTERM
        if not self.external:
            super().close()
