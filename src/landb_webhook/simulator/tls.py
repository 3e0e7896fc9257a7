"""A throw-away certificate authority and loopback server certificate for the simulator's TLS port.

kubectl and every client-go program (external-dns included) only send a kubeconfig's bearer token over
TLS, so the Kubernetes side needs an ``https://`` address even on loopback. The key never leaves memory
except for the moment uvicorn loads it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = timedelta(days=30)


@dataclass(frozen=True)
class ServerCertificate:
    ca_pem: bytes
    """What clients trust (``certificate-authority-data``, ``cacert``)."""
    certificate_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:
        return "ServerCertificate(<loopback>)"


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "landb-webhook simulator"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_usage(*, key_cert_sign: bool = False, crl_sign: bool = False) -> x509.KeyUsage:
    """Signing only (the ECDSA keys never encipher); the CA's key also signs certificates and CRLs."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def loopback_certificate(hosts: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")) -> ServerCertificate:
    """A fresh CA and a server certificate for ``hosts`` signed by it, valid for 30 days."""
    now = datetime.now(UTC) - timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("landb-webhook simulator CA")
    ca_certificate = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    alternative_names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alternative_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alternative_names.append(x509.DNSName(host))
    server_certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServerCertificate(
        ca_pem=ca_certificate.public_bytes(serialization.Encoding.PEM),
        certificate_pem=server_certificate.public_bytes(serialization.Encoding.PEM),
        key_pem=server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
