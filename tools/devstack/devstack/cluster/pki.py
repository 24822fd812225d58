"""Throw-away certificates for a local control plane.

One CA signs the API server's serving certificate and every client certificate (the admin user
and each control-plane component), and a separate key pair signs service-account tokens, whose
issuer is the API server by its in-cluster name (:data:`ISSUER`). Keys are ECDSA P-256: fast
to generate, accepted everywhere. Valid for a week, like envtest's.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=7)

# The in-cluster names of the API server (the `kubernetes` Service of `default`, and its
# cluster IP, the first of --service-cluster-ip-range), which its serving certificate covers
# as a cluster's does: a pod that reaches it by name (Knative's OIDC verifiers fetch the
# service-account issuer's discovery document from https://kubernetes.default.svc) checks
# the certificate against that name.
SERVICE_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local")
SERVICE_IP = "10.96.0.1"
# The issuer of ServiceAccount tokens, and where its OIDC discovery document and keys are
# served: the API server by its in-cluster name, Knative's default oidc-discovery-base-url
# (whose verifiers then check a token's issuer against the document's as go-oidc does).
ISSUER = "https://kubernetes.default.svc"
JWKS_URI = f"{ISSUER}/openid/v1/jwks"


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(parts)


class CertificateAuthority:
    """A CA that lives in ``directory`` as ``ca.crt``/``ca.key``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key = _key()
        now = dt.datetime.now(dt.UTC)
        subject = _name("local-control-plane-ca")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.files = CertFiles(directory / "ca.crt", directory / "ca.key")
        self.files.cert.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self.key, self.files.key)

    def issue(self, stem: str, common_name: str, *, organizations: tuple[str, ...] = (),
              server: bool = False, names: tuple[str, ...] = (),
              addresses: tuple[str, ...] = ()) -> CertFiles:
        """Sign a leaf certificate; a server one covers ``localhost`` and ``127.0.0.1``, and
        ``names`` and ``addresses`` besides."""
        key = _key()
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations)).issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                *(x509.DNSName(name) for name in ("localhost", *names)),
                *(x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", *addresses)),
            ]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        files = CertFiles(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, files.key)
        return files


def service_account_keys(directory: Path) -> CertFiles:
    """The key pair that signs (``sa.key``) and verifies (``sa.pub``) service-account tokens."""
    key = _key()
    files = CertFiles(directory / "sa.pub", directory / "sa.key")
    _write_key(key, files.key)
    files.cert.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return files
