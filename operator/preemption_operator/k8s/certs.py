"""A self-signed CA and a serving certificate for the admission webhooks, so no cert-manager is
needed: the CA goes into the webhook configurations' caBundle, the certificate into the server."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 3650
RENEW_DAYS = 30
"""A certificate this close to its end is made anew."""


@dataclass(frozen=True)
class ServingCert:
    ca: bytes
    """PEM: the CA that signed `cert` (the webhook configurations' caBundle)."""
    cert: bytes
    key: bytes

    def hosts(self) -> set[str]:
        cert = x509.load_pem_x509_certificate(self.cert)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return {
            *names.get_values_for_type(x509.DNSName),
            *(str(ip) for ip in names.get_values_for_type(x509.IPAddress)),
        }

    def fresh(self, hosts: list[str], now: dt.datetime | None = None) -> bool:
        """Whether it serves `hosts` and is not about to expire."""
        now = now or dt.datetime.now(dt.UTC)
        try:
            cert = x509.load_pem_x509_certificate(self.cert)
            x509.load_pem_x509_certificate(self.ca)
            serialization.load_pem_private_key(self.key, None)
        except ValueError:
            return False
        return set(hosts) <= self.hosts() and cert.not_valid_after_utc - now > dt.timedelta(days=RENEW_DAYS)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _ca(common: str, start: dt.datetime, end: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(common)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .sign(ca_key, hashes.SHA256())
    )
    return ca, ca_key


def _signed(
    subject: str,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    start: dt.datetime,
    end: dt.datetime,
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName],
) -> ServingCert:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pem = serialization.Encoding.PEM
    return ServingCert(
        ca=ca.public_bytes(pem),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def issue(hosts: list[str], now: dt.datetime | None = None) -> ServingCert:
    """A new CA and a certificate for `hosts` (DNS names or IP addresses) signed by it."""
    now = now or dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(hours=1), now + dt.timedelta(days=VALID_DAYS)
    ca, ca_key = _ca("preemption-operator-webhook-ca", start, end)
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return _signed(hosts[0], ca, ca_key, start, end, x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, names)


def issue_client(common_name: str, now: dt.datetime | None = None) -> ServingCert:
    """A new CA and a client certificate with `common_name` signed by it (a test control plane's
    front proxy: kube-apiserver's --proxy-client-cert-file and --requestheader-client-ca-file)."""
    now = now or dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(hours=1), now + dt.timedelta(days=VALID_DAYS)
    ca, ca_key = _ca(f"{common_name}-ca", start, end)
    return _signed(common_name, ca, ca_key, start, end, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH, [])
