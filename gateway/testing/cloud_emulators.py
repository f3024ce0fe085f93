"""The GCS and Azure Blob emulators as child processes for tests and benchmarks, or real accounts.

``fake-gcs-server`` (a Go module) and Azurite (an npm package) are built into ``tests/gcs/target`` and
``tests/azure/target`` by ``make emulators``; each is started on a free loopback port with a scratch
folder of its own and stopped at teardown, as moto is for S3. ``GCS_ENDPOINT_URL`` (+ ``GCS_BUCKET``)
and ``AZURE_STORAGE_CONNECTION_STRING`` (+ ``AZURE_CONTAINER``) point the same tests at a real account.
"""

from __future__ import annotations

import http.client
import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from gateway.testing.apache_kafka import repo_root
from gateway.testing.processes import (
    LOOPBACK,
    LocalServer,
    ServerProcess,
    ServiceUnavailable,
    start_with_port_retry,
)

_T = TypeVar("_T", bound="_Emulator")

AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's well-known development account (public, documented by Microsoft): never a real secret."""


def gcs_emulator_binary() -> Path:
    return Path(os.environ.get("FAKE_GCS_SERVER", repo_root() / "tests" / "gcs" / "target" / "bin" / "fake-gcs-server"))


def azurite_script() -> Path:
    default = (
        repo_root() / "tests" / "azure" / "target" / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
    )
    return Path(os.environ.get("AZURITE_BLOB", default))


class _Emulator(LocalServer):
    _env_var: str
    _what: str

    def __init__(self, *, from_env: bool = True, start_timeout: float = 30.0) -> None:
        self._external_value = (os.environ.get(self._env_var) or None) if from_env else None
        self.start_timeout = start_timeout
        self._proc: ServerProcess | None = None
        self._workdir: Path | None = None
        self.port: int | None = None

    @property
    def external(self) -> bool:
        return self._external_value is not None

    def _argv(self, port: int, workdir: Path) -> list[str]:
        raise NotImplementedError

    def _probe_path(self) -> str:
        return "/"

    def _await_ready(self, proc: ServerProcess, port: int) -> None:
        def answers() -> bool:
            conn = http.client.HTTPConnection(LOOPBACK, port, timeout=2)
            try:
                conn.request("GET", self._probe_path())
                conn.getresponse().read()
                return True
            except OSError:
                return False
            finally:
                conn.close()

        proc.wait_until(answers, timeout=self.start_timeout, what="an HTTP response")

    def start(self: _T) -> _T:
        if self.external or self.pid is not None:
            return self
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix=f"gw-{self._what}-"))
        workdir = self._workdir
        self._proc, self.port = start_with_port_retry(
            lambda p: ServerProcess(self._what, self._argv(p, workdir), workdir), self._await_ready
        )
        return self


class GCSServer(_Emulator):
    """fake-gcs-server on loopback (HTTP, in-memory backend), or ``GCS_ENDPOINT_URL`` when set."""

    _env_var = "GCS_ENDPOINT_URL"
    _what = "fake-gcs-server"

    def __init__(self, *, from_env: bool = True, start_timeout: float = 30.0) -> None:
        super().__init__(from_env=from_env, start_timeout=start_timeout)
        #: The pre-created bucket to use against a real endpoint (tests then work under a prefix).
        self.bucket: str | None = (os.environ.get("GCS_BUCKET") or None) if self.external else None

    @property
    def endpoint_url(self) -> str:
        if self._external_value is not None:
            return self._external_value
        if self.port is None:
            raise RuntimeError("GCSServer has not been started")
        return f"http://{LOOPBACK}:{self.port}"

    def _argv(self, port: int, workdir: Path) -> list[str]:
        binary = gcs_emulator_binary()
        if not os.access(binary, os.X_OK):
            raise ServiceUnavailable(f"{binary} is missing: run `make emulators` (or set GCS_ENDPOINT_URL)")
        return [
            str(binary), "-scheme", "http", "-host", LOOPBACK, "-port", str(port), "-backend", "memory",
            "-public-host", f"{LOOPBACK}:{port}", "-external-url", f"http://{LOOPBACK}:{port}", "-log-level", "warn",
        ]  # fmt: skip

    def _probe_path(self) -> str:
        return "/storage/v1/b"

    def client(self) -> Any:
        """A google-cloud-storage client; anonymous against the emulator, so no real credential is ever sent."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        if self.external and os.environ.get("GCS_ENDPOINT_URL", "").startswith("https://storage.googleapis.com"):
            return storage.Client()
        return storage.Client(
            project="test",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.endpoint_url},
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(name)
        return name


class AzuriteServer(_Emulator):
    """Azurite's blob service on loopback (data in a scratch folder), or ``AZURE_STORAGE_CONNECTION_STRING``."""

    _env_var = "AZURE_STORAGE_CONNECTION_STRING"
    _what = "azurite-blob"

    def __init__(self, *, from_env: bool = True, start_timeout: float = 30.0) -> None:
        super().__init__(from_env=from_env, start_timeout=start_timeout)
        #: The pre-created container to use against a real account.
        self.container: str | None = (os.environ.get("AZURE_CONTAINER") or None) if self.external else None

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("AzuriteServer has not been started (or is external)")
        return f"http://{LOOPBACK}:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        if self._external_value is not None:
            return self._external_value
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.endpoint_url};"
        )

    def _argv(self, port: int, workdir: Path) -> list[str]:
        script = azurite_script()
        if not script.is_file():
            raise ServiceUnavailable(
                f"{script} is missing: run `make emulators` (or set AZURE_STORAGE_CONNECTION_STRING)"
            )
        return [
            os.environ.get("NODE", "node"), str(script), "--blobHost", LOOPBACK, "--blobPort", str(port),
            "--location", str(workdir), "--loose", "--skipApiVersionCheck",
            "--disableProductStyleUrl", "--silent",
        ]  # fmt: skip

    def client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def create_container(self, name: str) -> str:
        self.client().create_container(name)
        return name


__all__ = ["AZURITE_ACCOUNT", "AZURITE_KEY", "AzuriteServer", "GCSServer", "azurite_script", "gcs_emulator_binary"]
