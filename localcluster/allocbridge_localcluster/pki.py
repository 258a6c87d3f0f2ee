"""Certificates and kubeconfigs for the local control plane.

One CA signs the API server's serving certificate (SANs 127.0.0.1, ::1, localhost and the
in-cluster `kubernetes.default...` names) and an admin client certificate in `system:masters`,
so the API server authenticates clients by certificate (`--client-ca-file`) and RBAC can be tested
with ServiceAccount tokens, which are signed by a separate service-account key pair. Everything is
ECDSA P-256: quick to generate and accepted by every component. Files are reused when they exist,
so a kept state directory (`.dev/`) keeps its kubeconfig valid across restarts.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "allocbridge-admin"
ADMIN_GROUP = "system:masters"
SERVICE_IP = "10.96.0.1"
_VALIDITY = dt.timedelta(days=365)
_SERVING_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_SERVING_IPS = ("127.0.0.1", "::1", SERVICE_IP)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files in a state directory's `pki/` folder."""

    folder: Path

    @property
    def ca_cert(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.folder / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.folder / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.folder / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.folder / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.folder / "sa.pub"

    def _complete(self) -> bool:
        files = (self.ca_cert, self.ca_key, self.serving_cert, self.serving_key)
        more = (self.admin_cert, self.admin_key, self.sa_key, self.sa_pub)
        return all(p.is_file() for p in files + more)

    def ensure(self) -> Pki:
        """Create whatever is missing (all of it, if any part is missing)."""
        if self._complete():
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        ca_key = _new_key()
        ca_name = _name("allocbridge-local-ca")
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _VALIDITY * 10)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
            .sign(ca_key, hashes.SHA256())
        )
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in _SERVING_DNS]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in _SERVING_IPS]
        serving_key = _new_key()
        serving = _leaf(
            ca_cert,
            ca_key=ca_key,
            key=serving_key,
            subject=_name("kube-apiserver"),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            sans=sans,
        )
        admin_key = _new_key()
        admin = _leaf(
            ca_cert,
            ca_key=ca_key,
            key=admin_key,
            subject=_name(ADMIN_USER, ADMIN_GROUP),
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            sans=[],
        )
        sa_key = _new_key()
        _write(self.ca_key, _key_pem(ca_key))
        _write(self.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
        _write(self.serving_key, _key_pem(serving_key))
        _write(self.serving_cert, serving.public_bytes(serialization.Encoding.PEM))
        _write(self.admin_key, _key_pem(admin_key))
        _write(self.admin_cert, admin.public_bytes(serialization.Encoding.PEM))
        _write(self.sa_key, _key_pem(sa_key))
        _write(
            self.sa_pub,
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        return self

    def issue_node(self, node: str, node_ip: str) -> tuple[Path, Path, Path, Path]:
        """A real node's kubelet credentials from this CA: its client certificate
        (`system:node:<node>` in `system:nodes`, as the Node authorizer expects) and its serving
        certificate for `node_ip` (which the API server checks when it proxies logs and exec).
        Returns (client cert, client key, serving cert, serving key); reissued on every call.
        """
        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        parts = ("client.crt", "client.key", "serving.crt", "serving.key")
        paths = tuple(self.folder / f"{node}-{part}" for part in parts)
        client_key, serving_key = _new_key(), _new_key()
        client = _leaf(
            ca_cert,
            ca_key=ca_key,
            key=client_key,
            subject=_name(f"system:node:{node}", "system:nodes"),
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            sans=[],
        )
        serving = _leaf(
            ca_cert,
            ca_key=ca_key,
            key=serving_key,
            subject=_name(node),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            sans=[x509.DNSName(node), x509.IPAddress(ipaddress.ip_address(node_ip))],
        )
        _write(paths[0], client.public_bytes(serialization.Encoding.PEM))
        _write(paths[1], _key_pem(client_key))
        _write(paths[2], serving.public_bytes(serialization.Encoding.PEM))
        _write(paths[3], _key_pem(serving_key))
        return paths[0], paths[1], paths[2], paths[3]

    def write_node_kubeconfig(self, path: Path, server: str, cert: Path, key: Path) -> Path:
        """A kubeconfig for a kubelet: its node client certificate, this CA."""
        user = {
            "client-certificate-data": _b64(cert.read_bytes()),
            "client-key-data": _b64(key.read_bytes()),
        }
        return _write_kubeconfig(path, server, self.ca_cert.read_bytes(), "node", user)

    def write_admin_kubeconfig(self, path: Path, server: str, name: str = "allocbridge") -> Path:
        """A kubeconfig for the admin user (client certificate, CA embedded, one context)."""
        user = {
            "client-certificate-data": _b64(self.admin_cert.read_bytes()),
            "client-key-data": _b64(self.admin_key.read_bytes()),
        }
        return _write_kubeconfig(path, server, self.ca_cert.read_bytes(), name, user)


def write_token_kubeconfig(
    path: Path, server: str, ca_pem: bytes, token: str, name: str = "allocbridge-token"
) -> Path:
    """A kubeconfig that authenticates with a bearer token (e.g. a TokenRequest result)."""
    return _write_kubeconfig(path, server, ca_pem, name, {"token": token})


def _write_kubeconfig(
    path: Path, server: str, ca_pem: bytes, name: str, user: dict[str, str]
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }
    _write(path, yaml.safe_dump(config, sort_keys=False).encode())
    return path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not cert_sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _leaf(
    ca_cert: x509.Certificate,
    *,
    ca_key: ec.EllipticCurvePrivateKey,
    key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _write(path: Path, data: bytes) -> None:
    """Write a secret-bearing file readable by its owner only, atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
