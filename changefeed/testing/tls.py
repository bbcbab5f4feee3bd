"""Throw-away TLS certificates for tests: a CA, a server certificate signed by it, a client certificate.

`make_certificates` writes PEM files into a directory (the caller's temp dir) with the
``cryptography`` package (a runtime dependency already): RSA 2048 keys, valid for a day, the
server certificate naming ``127.0.0.1`` and ``localhost`` unless told other names. Nothing here
is fit for anything but a test service on this machine.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TLSFiles", "make_certificates"]


@dataclass(frozen=True)
class TLSFiles:
    """PEM files: the CA certificate, the server's certificate and key, a client certificate and key."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def make_certificates(
    directory: str | Path, names: Sequence[str] = ("127.0.0.1", "localhost"), *, prefix: str = ""
) -> TLSFiles:
    """Write a fresh CA and a server and a client certificate signed by it into ``directory``.

    ``names`` go into the server certificate's subjectAltName (IP addresses as IP entries, the rest
    as DNS names); the first is also its common name. ``prefix`` starts every file name (two sets in
    one directory: a CA the server uses and an unrelated one).
    """
    from cryptography import x509  # noqa: PLC0415 - only tests that want TLS pay for it
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: PLC0415

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)

    def new_key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def subject(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def write_key(key: rsa.RSAPrivateKey, name: str) -> Path:
        path = out / f"{prefix}{name}"
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )
        path.chmod(0o600)
        return path

    def write_cert(cert: x509.Certificate, name: str) -> Path:
        path = out / f"{prefix}{name}"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    ca_key = new_key()
    ca_name = subject(f"changefeed test CA {prefix or 'main'}")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        common_name: str, usage: x509.ObjectIdentifier, alt: Sequence[str]
    ) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
        key = new_key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject(common_name))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        if alt:
            entries: list[x509.GeneralName] = []
            for name in alt:
                try:
                    entries.append(x509.IPAddress(ipaddress.ip_address(name)))
                except ValueError:
                    entries.append(x509.DNSName(name))
            builder = builder.add_extension(x509.SubjectAlternativeName(entries), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    server, server_key = leaf(names[0] if names else "server", ExtendedKeyUsageOID.SERVER_AUTH, names)
    client, client_key = leaf("changefeed test client", ExtendedKeyUsageOID.CLIENT_AUTH, ())
    return TLSFiles(
        ca=write_cert(ca, "ca.pem"),
        cert=write_cert(server, "server-cert.pem"),
        key=write_key(server_key, "server-key.pem"),
        client_cert=write_cert(client, "client-cert.pem"),
        client_key=write_key(client_key, "client-key.pem"),
    )
