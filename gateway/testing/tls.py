"""A throwaway certificate authority and a loopback server certificate, for TLS on the test servers.

Apache Kafka, redis-server and moto's server all take PEM files, and every client the library uses
(librdkafka, redis-py, boto3/urllib3, the Java peers) verifies a server against a PEM CA file, so one
CA and one server certificate (for ``127.0.0.1`` and ``localhost``) serve them all. The keys are made
fresh per set-up, in a folder of the caller's, and never leave the machine.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import extra_required

with extra_required("testing", "TLS on the test servers"):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA's certificate (what clients trust) and the server's certificate and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    @property
    def server_chain(self) -> str:
        """The server certificate then the CA's, as one PEM text (Kafka's ``ssl.keystore.certificate.chain``)."""
        return self.server_cert.read_text() + self.ca_cert.read_text()


def make_tls_files(folder: Path, *, days: int = 2, hosts: Sequence[str] = ()) -> TlsFiles:
    """A new CA and a server certificate it signed, valid for ``days`` from an hour ago, written to ``folder``.

    The certificate names ``127.0.0.1`` and ``localhost``, and ``hosts`` besides (a test that stands in
    for a cloud endpoint names the endpoint's host).
    """
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)  # a clock a little behind still accepts them
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kafka-hybrid-gateway test CA")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    alt_names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    alt_names += [x509.DNSName(host) for host in hosts]
    server_cert = (
        _builder(server_name, ca_name, server_key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(folder / "ca.pem", folder / "server.pem", folder / "server.key")
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    files.server_key.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    files.server_key.chmod(0o600)
    return files


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePublicKey, start: dt.datetime, days: int
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days))
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=not ca,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
