"""Keys, certificates and tokens for a throwaway local control plane.

We make our own CA and serving certificate (rather than let kube-apiserver self-sign) so the
kubeconfig can carry the CA and clients verify TLS as they would against a real cluster.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True, slots=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_public_key: Path
    sa_private_key: Path


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def generate(directory: Path) -> Pki:
    """CA + serving cert for 127.0.0.1/localhost, and the service-account signing key pair.

    EC P-256 for TLS keeps generation instant; the service-account key is RSA because
    kube-apiserver's token signer expects RSA or ECDSA and RSA is what every guide shows.
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    not_before = now - dt.timedelta(minutes=5)  # tolerate small clock differences
    not_after = now + dt.timedelta(days=30)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpusched-devcluster-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(serving_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_public = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return Pki(
        ca_cert=_write(directory / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM)),
        serving_cert=_write(
            directory / "apiserver.crt", serving_cert.public_bytes(serialization.Encoding.PEM)
        ),
        serving_key=_write(directory / "apiserver.key", _pem_key(serving_key)),
        sa_public_key=_write(directory / "sa.pub", sa_public),
        sa_private_key=_write(directory / "sa.key", _pem_key(sa_key)),
    )


@dataclass(frozen=True, slots=True)
class Identity:
    """A static-token user. ``groups`` decide its rights through RBAC's bootstrap bindings."""

    user: str
    groups: tuple[str, ...] = ()
    token: str = ""


# The identities the harness needs. kube-scheduler gets the real bootstrap user, so the
# baseline runs with exactly the rights the ClusterRole system:kube-scheduler grants.
ADMIN = Identity("gpusched-admin", ("system:masters",))
KUBE_SCHEDULER = Identity("system:kube-scheduler")
# Its bootstrap role lets it get tokens for the controllers' own service accounts in
# kube-system (--use-service-account-credentials): each controller then acts with its
# system:controller:* role, as on a kubeadm cluster.
KUBE_CONTROLLER_MANAGER = Identity("system:kube-controller-manager")
KWOK = Identity("gpusched-kwok", ("system:masters",))
NO_RIGHTS = Identity("gpusched-no-rights")  # only system:authenticated: discovery, no more


def write_token_file(path: Path, identities: list[Identity]) -> dict[str, Identity]:
    """kube-apiserver --token-auth-file: ``token,user,uid,"group1,group2"`` per line."""
    issued: dict[str, Identity] = {}
    lines = []
    for ident in identities:
        token = secrets.token_hex(24)
        issued[ident.user] = Identity(ident.user, ident.groups, token)
        groups = ",".join(ident.groups)
        lines.append(f'{token},{ident.user},{ident.user},"{groups}"')
    _write(path, ("\n".join(lines) + "\n").encode())
    return issued
