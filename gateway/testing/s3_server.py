"""moto's S3 server as a separate process for tests and the demo, or ``S3_ENDPOINT_URL``."""

from __future__ import annotations

import http.client
import importlib.metadata
import importlib.util
import os
import signal
import ssl
import sys
import tempfile
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
    from gateway.testing.tls import TlsFiles

_S3T = TypeVar("_S3T", bound="S3Server")


class S3Server(LocalServer):
    """moto's S3 as a separate process, or the endpoint in ``S3_ENDPOINT_URL`` when set.

    A separate process rather than moto's in-process server, because Spark workers and other
    subprocesses must reach it too, and because in-process it would share our GIL and distort
    timings. An empty ``S3_ENDPOINT_URL`` means AWS itself.
    """

    _DUMMY_KEY = "testing"

    def __init__(
        self,
        endpoint_url: str | None = None,
        *,
        from_env: bool = True,
        start_timeout: float = 30.0,
        tls: TlsFiles | None = None,
    ) -> None:
        """``tls`` serves HTTPS only, with that certificate; clients need :attr:`ca_bundle` (boto3's ``verify=``)."""
        env_set = from_env and tls is None and "S3_ENDPOINT_URL" in os.environ
        self.tls = tls
        self._external = endpoint_url is not None or env_set
        env_url = os.environ.get("S3_ENDPOINT_URL") if env_set else None
        self._endpoint_url: str | None = endpoint_url or env_url or None
        self.region = (os.environ.get("AWS_REGION") if self._external else None) or "us-east-1"
        #: The pre-created bucket to use against an external endpoint (tests then work under a key prefix).
        self.bucket: str | None = (os.environ.get("S3_BUCKET") or None) if self._external else None
        self.start_timeout = start_timeout
        self._proc: ServerProcess | None = None
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
    def ca_bundle(self) -> str | None:
        """The CA certificate's path a client verifies an HTTPS server with; ``None`` without TLS."""
        return None if self.tls is None else str(self.tls.ca_cert)

    def client(self, **config: Any) -> Any:
        return self.service_client("s3", **config)

    def kms_client(self) -> Any:
        """A boto3 KMS client on the same endpoint: moto's server answers every AWS service it emulates."""
        return self.service_client("kms")

    def service_client(self, service: str, **config: Any) -> Any:
        """A boto3 client of ``service``; for S3 with path-style addressing, which emulators need (no wildcard DNS).

        Against moto it uses dummy keys explicitly, so real credentials in the environment are never
        sent to it, nor could a test touch a real account by accident.
        """
        import boto3
        from botocore.config import Config

        kwargs: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "config": Config(
                **{"s3": {"addressing_style": "path"}, "retries": {"max_attempts": 3, "mode": "standard"}, **config}
            ),
        }
        if not self._external:
            kwargs["aws_access_key_id"] = self._DUMMY_KEY
            kwargs["aws_secret_access_key"] = self._DUMMY_KEY
        if self.ca_bundle is not None:
            kwargs["verify"] = self.ca_bundle
        return boto3.client(service, **kwargs)

    def create_bucket(self, name: str) -> str:
        params: dict[str, Any] = {"Bucket": name}
        if self.region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        self.client().create_bucket(**params)
        return name

    def require_authentication(self) -> None:
        """From now on every request must be signed by an IAM user of this server and allowed by its policies.

        moto authorizes nothing by default; after this, S3 requests are checked against the IAM users,
        access keys and policies made on this server so far (through :meth:`service_client` ``("iam")``),
        and the dummy keys of :meth:`client` stop working. There is no way back for this server.
        """
        if self._external or self._endpoint_url is None:
            raise ServiceUnavailable("only a local moto server started here can be made to require authentication")
        conn = self._connection(int(self._endpoint_url.rpartition(":")[2]), timeout=10)
        try:
            conn.request("POST", "/moto-api/reset-auth", body=b"0", headers={"Content-Type": "text/plain"})
            reply = conn.getresponse()
            body = reply.read()
        finally:
            conn.close()
        if reply.status != 200:
            raise ServiceStartError(f"moto refused to require authentication: {reply.status} {body[:200]!r}")

    def _argv(self, port: int) -> list[str]:
        tls = [] if self.tls is None else ["-c", str(self.tls.server_cert), "-k", str(self.tls.server_key)]
        script = Path(sys.executable).parent / "moto_server"
        if os.access(script, os.X_OK):
            return [str(script), "-H", LOOPBACK, "-p", str(port), *tls]
        if importlib.util.find_spec("moto") is None:
            raise ServiceUnavailable(
                "moto is not installed (pip install 'moto[server]'), and S3_ENDPOINT_URL is not set"
            )
        return [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port), *tls]

    def _connection(self, port: int, timeout: float) -> http.client.HTTPConnection:
        if self.tls is None:
            return http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        return http.client.HTTPSConnection(LOOPBACK, port, timeout=timeout, context=context)

    def _await_ready(self, proc: ServerProcess, port: int) -> None:
        def answers() -> bool:
            conn = self._connection(port, timeout=2)
            try:
                conn.request("GET", "/")
                conn.getresponse().read()
                return True
            except OSError:
                return False
            finally:
                conn.close()

        proc.wait_until(answers, timeout=self.start_timeout, what="an HTTP response")

    def pause(self) -> None:
        """SIGSTOP the server: connections are accepted by the kernel but nothing answers, like a hung endpoint."""
        if self._proc is None or self._external:
            raise ServiceUnavailable("only a local S3 server started here can be paused")
        self._proc.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None:
            self._proc.popen.send_signal(signal.SIGCONT)

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
        self._proc, port = start_with_port_retry(
            lambda p: ServerProcess("moto_server", self._argv(p), workdir, env=env), self._await_ready
        )
        self._endpoint_url = f"{'http' if self.tls is None else 'https'}://{LOOPBACK}:{port}"
        return self
