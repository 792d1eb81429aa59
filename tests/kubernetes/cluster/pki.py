"""Throw-away certificates and keys for the test cluster.

Everything is generated per cluster start (nothing long-lived is stored), with the
`cryptography` package that the project venv already has, so no openssl calls are needed.
One CA signs the API server's serving cert, the API server's client cert for the kubelet and
the node agent's serving cert; the API server is told to verify the kubelet against it, so
`read_namespaced_pod_log` goes through a properly verified TLS hop.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_LOCAL_IPS = ("127.0.0.1",)
_LOCAL_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")


@dataclass(frozen=True)
class KeyPair:
    """Paths of a PEM certificate and its PEM private key."""

    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
    )


class CertAuthority:
    """A CA living in `directory` (ca.crt / ca.key) that issues leaf certificates."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kinetic-test-ca")])
        self._name = name
        self._cert = (
            _builder(name, name, self._key.public_key())
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
            .sign(self._key, hashes.SHA256())
        )
        self.cert_path = directory / "ca.crt"
        self.cert_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(directory / "ca.key", self._key)

    def issue(
        self, name: str, common_name: str, *, server: bool, organizations: tuple[str, ...] = ()
    ) -> KeyPair:
        """Issue `<name>.crt`/`<name>.key`; server certs get SANs for 127.0.0.1/localhost."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            _builder(x509.Name(attrs), self._name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in _LOCAL_NAMES]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in _LOCAL_IPS]
            sans.append(x509.IPAddress(ipaddress.ip_address("10.0.0.1")))  # service IP
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair


def self_signed(directory: Path, name: str) -> KeyPair:
    """A server cert for 127.0.0.1 from a throw-away CA (the agent's fallback without certs)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertAuthority(directory)
    return ca.issue(name, name, server=True)


def service_account_keys(directory: Path) -> KeyPair:
    """RSA key pair that signs/verifies service-account tokens (`sa.pub` in `.cert`)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    _write_key(pair.key, key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pair
