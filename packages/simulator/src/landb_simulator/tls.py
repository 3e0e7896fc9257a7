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


def subject_name(common_name: str, organization: str = "landb-webhook simulator") -> x509.Name:
    """CN and O: a Kubernetes API server reads a client certificate's user from CN, its groups from O."""
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
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


@dataclass(frozen=True)
class CertificateAuthority:
    """A throw-away CA (ECDSA P-256) that issues leaf certificates valid for ``VALIDITY``."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    def __repr__(self) -> str:
        return f"CertificateAuthority({self.certificate.subject.rfc4514_string()})"

    @classmethod
    def create(cls, common_name: str = "landb-webhook simulator CA") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = subject_name(common_name)
        now = datetime.now(UTC) - timedelta(minutes=5)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @property
    def ca_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(
        self, subject: x509.Name, usage: x509.ObjectIdentifier, hosts: tuple[str, ...] = ()
    ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a fresh key for ``subject``, for one extended ``usage``
        (server or client authentication) and, for a server, the ``hosts`` it answers as."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC) - timedelta(minutes=5)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if hosts:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(_alternative_names(hosts)), critical=False
            )
        certificate = builder.sign(self.key, hashes.SHA256())
        return certificate.public_bytes(serialization.Encoding.PEM), key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def _alternative_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def loopback_certificate(
    hosts: tuple[str, ...] = ("127.0.0.1", "::1", "localhost"), authority: CertificateAuthority | None = None
) -> ServerCertificate:
    """A server certificate for ``hosts`` signed by ``authority`` (default: a fresh CA), valid 30 days."""
    authority = authority or CertificateAuthority.create()
    certificate_pem, key_pem = authority.issue(subject_name(hosts[0]), ExtendedKeyUsageOID.SERVER_AUTH, hosts)
    return ServerCertificate(ca_pem=authority.ca_pem, certificate_pem=certificate_pem, key_pem=key_pem)
