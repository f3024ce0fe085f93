"""Google's Java storage client, left at its defaults, talking to fake-gcs-server: for bakdata's own writer.

bakdata builds its client from ``StorageOptions`` defaults: ``https://storage.googleapis.com``, with no
endpoint setting, and google-cloud-storage for Java does not read ``STORAGE_EMULATOR_HOST``. What it
does honour is the JVM's proxy settings (its ``NetHttpTransport`` opens ``HttpURLConnection``s). So the
writer runs with ``https.proxyHost`` at a loopback CONNECT proxy that answers for Google's two hosts
only: it ends TLS with a certificate for them from a throwaway CA (the only CA that JVM trusts) and
relays the plain HTTP to fake-gcs-server, or to a token endpoint that hands out a dummy access token
for the service-account key made here (bakdata's ``large.message.gs.key.path``). Any other CONNECT
is refused, so nothing leaves the machine.
"""

from __future__ import annotations

import http.server
import json
import selectors
import socket
import socketserver
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.testing.tls import make_tls_files

STORAGE_HOST = "storage.googleapis.com"
TOKEN_HOST = "oauth2.googleapis.com"
_TRUST_PASSWORD = "changeit"


class _TokenHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"access_token": "emulator", "expires_in": 3600, "token_type": "Bearer"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _ConnectProxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, routes: dict[str, int], tls: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), _ConnectHandler)
        self.routes, self.tls = routes, tls
        self.refused: list[str] = []


class _ConnectHandler(socketserver.BaseRequestHandler):
    server: _ConnectProxy

    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 8192:
            chunk = self.request.recv(1024)
            if not chunk:
                return
            head += chunk
        method, target, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        host = target.rsplit(":", 1)[0]
        port = self.server.routes.get(host)
        if method != "CONNECT" or port is None:
            self.server.refused.append(f"{method} {target}")
            self.request.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        with (
            self.server.tls.wrap_socket(self.request, server_side=True) as client,
            socket.create_connection(("127.0.0.1", port), timeout=30) as upstream,
        ):
            _relay(client, upstream)


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until either side closes."""
    peers = {a: b, b: a}
    with selectors.DefaultSelector() as selector:
        for end in peers:
            selector.register(end, selectors.EVENT_READ)
        while events := selector.select(timeout=60):  # a minute idle: the client has gone
            for key, _ in events:
                sock = peers[peers[key.fileobj]]  # type: ignore[index]  # the socket itself, typed
                data = sock.recv(65536)
                if not data:
                    return
                peers[sock].sendall(data)
            if isinstance(a, ssl.SSLSocket) and a.pending():  # TLS may hold decrypted bytes the selector cannot see
                peers[a].sendall(a.recv(a.pending()))


class GoogleEndpoint:
    """The proxy, the token endpoint, the JVM's trust store and the service-account key, in ``folder``."""

    def __init__(self, emulator_port: int, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        files = make_tls_files(folder / "tls", hosts=(STORAGE_HOST, TOKEN_HOST))
        self.trust_store = folder / "trust.p12"
        subprocess.run(
            ["keytool", "-importcert", "-noprompt", "-alias", "test-ca", "-file", str(files.ca_cert),
             "-keystore", str(self.trust_store), "-storetype", "PKCS12", "-storepass", _TRUST_PASSWORD],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self._token = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TokenHandler)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(files.server_cert, files.server_key)
        self._proxy = _ConnectProxy({STORAGE_HOST: emulator_port, TOKEN_HOST: self._token.server_address[1]}, tls)
        self.key_path = folder / "service-account.json"
        self.key_path.write_text(json.dumps(_service_account()))
        self._threads = [
            threading.Thread(target=server.serve_forever, daemon=True) for server in (self._token, self._proxy)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def refused(self) -> list[str]:
        """CONNECTs to anywhere but Google's two hosts: what would have left the machine."""
        return self._proxy.refused

    def jvm_options(self) -> list[str]:
        return [
            "-Dhttps.proxyHost=127.0.0.1",
            f"-Dhttps.proxyPort={self._proxy.server_address[1]}",
            f"-Djavax.net.ssl.trustStore={self.trust_store}",
            "-Djavax.net.ssl.trustStoreType=PKCS12",
            f"-Djavax.net.ssl.trustStorePassword={_TRUST_PASSWORD}",
        ]

    def close(self) -> None:
        for server in (self._proxy, self._token):
            server.shutdown()
            server.server_close()


def _service_account() -> dict[str, str]:
    """A service-account key of a made-up account: a real RSA key, so Google's client can sign with it."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return {
        "type": "service_account",
        "project_id": "test",
        "private_key_id": "emulator",
        "private_key": pem.decode(),
        "client_email": "bakdata-writer@test.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"https://{TOKEN_HOST}/token",
    }
