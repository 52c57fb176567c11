"""Test certificates: a CA, and certificates it signs for brokers and clients, written as
the files operators hand Kafka (PEM, PKCS12), made with `cryptography` (EC P-256 keys:
quick to make)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    """One key and certificate, as files under the CA's dir."""

    key_pem: Path  # the private key alone (unencrypted PEM)
    cert_pem: Path  # the certificate, then the CA's
    keystore_pem: Path  # the key, then the chain: Kafka's PEM keystore file
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def pkcs12(self, path: Path, password: str | None) -> Path:
        enc = (serialization.BestAvailableEncryption(password.encode()) if password
               else serialization.NoEncryption())
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"broker", self.key, self.cert, None, enc))
        return path


class CertificateAuthority:
    def __init__(self, root: Path, name: str = "logkeeper test CA"):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(hours=1))
                     .not_valid_after(now + datetime.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                     .sign(self.key, hashes.SHA256()))
        self.cert_pem = root / "ca.pem"
        self.cert_pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
              client: bool = False, org: str | None = None) -> Issued:
        """A certificate for CN=`name` (CN=name,O=org with `org`), signed by this CA."""
        import ipaddress

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name(
                       ([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else [])
                       + [x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.ExtendedKeyUsage(
                       [ExtendedKeyUsageOID.CLIENT_AUTH] if client else
                       [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), False)
        cert = builder.sign(self.key, hashes.SHA256())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        chain = (cert.public_bytes(serialization.Encoding.PEM)
                 + self.cert.public_bytes(serialization.Encoding.PEM))
        issued = Issued(self.root / f"{name}.key", self.root / f"{name}.pem",
                        self.root / f"{name}.keystore.pem", key, cert)
        issued.key_pem.write_bytes(key_pem)
        issued.cert_pem.write_bytes(chain)
        issued.keystore_pem.write_bytes(key_pem + chain)
        return issued
