"""TLS for SSL listeners and for the connections brokers make to each other.

Kafka's `ssl.*` keys, read as Kafka reads them (SslConfigs, DefaultSslEngineFactory),
with `listener.name.<listener>.ssl.*` taking precedence for one listener:

- The keystore (this broker's key and certificate chain): `ssl.keystore.location` of
  type PKCS12 or PEM (one file, the private key and the chain), or PEM text in
  `ssl.keystore.key` and `ssl.keystore.certificate.chain`. A Java KeyStore (JKS, Kafka's
  default type) is refused with the keytool command that converts it; a file of the
  default type that is really PKCS12 or PEM is read as such, as Java's own
  keystore.type.compat does. `ssl.keystore.password` opens a PKCS12 file,
  `ssl.key.password` an encrypted PEM key.
- The truststore (the CAs a peer's certificate must chain to): `ssl.truststore.location`
  (PKCS12 or PEM) or `ssl.truststore.certificates`; none given: the system's CAs, as
  Kafka falls back to the JVM's.
- `ssl.client.auth` (none, requested, required), `ssl.enabled.protocols` (TLSv1.2 and
  TLSv1.3; older ones are refused), `ssl.endpoint.identification.algorithm` (https, the
  default: a broker checks the host name of the broker it connects to; empty: not).
- `ssl.cipher.suites`: the suites served and offered, by their standard (IANA) names as
  Java and Kafka give them (TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384), translated to
  OpenSSL's through OpenSSL's own table (`cipher_suites`). As under Java, a version none
  of whose suites is listed is not negotiated: a list of TLS 1.2 suites only serves
  TLS 1.2. One difference, said when the config loads: Python's ssl module cannot narrow
  TLS 1.3's suites, so those are listed all or none (OpenSSL's default three).

Everything is read and checked once, when the config loads (`settings`), so a wrong
password or a missing file stops `logkeeper serve` with the key named, before any
port is bound. The private key never reaches a file: it goes to OpenSSL through an
anonymous in-memory file (memfd), as OpenSSL takes a key chain only by path.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Kafka's ssl.* broker keys and defaults (SslConfigs, BrokerSecurityConfigs).
KEYSTORE_TYPES = ("JKS", "PKCS12", "PEM")
CLIENT_AUTH = ("none", "requested", "required")
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
OLD_TLS_VERSIONS = ("SSLv2", "SSLv3", "TLSv1", "TLSv1.1")
SSL_PROTOCOLS = ("TLS", "TLSv1.2", "TLSv1.3")  # ssl.protocol: the SSLContext's algorithm

_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
_PEM_BEGIN = b"-----BEGIN "


class TlsError(ValueError):
    """A TLS setting that cannot be used; names the key and what to do."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True, repr=False)
class TlsSettings:
    """One listener's TLS: its key material read and checked, ready for contexts."""

    listener: str
    chain_pem: bytes | None  # the private key (unencrypted) and its certificate chain
    subject: str  # the leaf certificate's subject, for the start-up line
    trusted_pem: str | None  # the truststore's certificates; None: the system's CAs
    client_auth: str
    versions: tuple[ssl.TLSVersion, ssl.TLSVersion]  # lowest, highest
    check_hostname: bool
    ciphers: str | None = None  # ssl.cipher.suites' TLS 1.2 suites, OpenSSL's names

    def __repr__(self) -> str:  # never the key
        return f"TlsSettings({self.listener}, {self.subject!r}, client_auth={self.client_auth})"

    def pem_parts(self) -> tuple[str, str] | None:
        """(private key, certificate chain) as PEM text, for a client that takes them
        apart (librdkafka's ssl.key.pem, ssl.certificate.pem); None without a keystore."""
        if self.chain_pem is None:
            return None
        key = b"".join(_pem_blocks(self.chain_pem, b"PRIVATE KEY")).decode()
        return key, b"".join(_pem_blocks(self.chain_pem, b"CERTIFICATE")).decode()

    def server_context(self) -> ssl.SSLContext:
        """What the listener serves with: its keystore, and the truststore for the
        client certificates `ssl.client.auth` asks for."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._common(ctx, ssl.Purpose.CLIENT_AUTH)
        if self.chain_pem is None:
            raise TlsError("ssl.keystore.location", f"listener {self.listener} has no keystore")
        _load_chain(ctx, self.chain_pem)
        ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[self.client_auth]
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """What this broker connects to other brokers' listener with: it checks their
        certificates against the truststore (and their host name, by
        ssl.endpoint.identification.algorithm), and offers its own keystore for a
        listener that requires client certificates."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = self.check_hostname
        self._common(ctx, ssl.Purpose.SERVER_AUTH)
        if self.chain_pem is not None:
            _load_chain(ctx, self.chain_pem)
        return ctx

    def alt_names(self) -> list[str]:
        """The leaf certificate's subject alternative names (DNS names and addresses),
        sorted; [] without a keystore or the extension."""
        from cryptography import x509

        if self.chain_pem is None:
            return []
        leaf = x509.load_pem_x509_certificate(_pem_blocks(self.chain_pem, b"CERTIFICATE")[0])
        try:
            ext = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return []
        return sorted([*map(str, ext.get_values_for_type(x509.DNSName)),
                       *map(str, ext.get_values_for_type(x509.IPAddress))])

    def renew_client_context(self, ctx: ssl.SSLContext) -> None:
        """Give a client context made from an earlier keystore and truststore of this
        listener (the one every inter-broker connection shares) this keystore, and this
        truststore's CAs too: later handshakes use them (the earlier CAs stay trusted, as
        OpenSSL cannot take a CA back out: what a CA rotation wants)."""
        if self.chain_pem is not None:
            _load_chain(ctx, self.chain_pem)
        if self.trusted_pem is not None:
            ctx.load_verify_locations(cadata=self.trusted_pem)

    def _common(self, ctx: ssl.SSLContext, purpose: ssl.Purpose) -> None:
        ctx.minimum_version, ctx.maximum_version = self.versions
        if self.ciphers is not None:
            ctx.set_ciphers(self.ciphers)
        if self.trusted_pem is not None:
            ctx.load_verify_locations(cadata=self.trusted_pem)
        else:
            ctx.load_default_certs(purpose)


def settings(listener: str, get: Callable[[str], Any], *, client: bool = False) -> TlsSettings:
    """`listener`'s TLS from its ssl.* keys (`get(key)`: the listener's own value or the
    broker-wide one); `client`: a client's (an admin command's), for which the keystore
    is optional (a certificate for listeners that require one). TlsError names the key
    at fault."""
    given = any(get(k) is not None for k in ("ssl.keystore.location", "ssl.keystore.key",
                                             "ssl.keystore.certificate.chain"))
    chain_pem, subject = _keystore(get) if given or not client else (None, "")
    trusted = _truststore(get)
    enabled = get("ssl.enabled.protocols")
    old = [p for p in enabled if p in OLD_TLS_VERSIONS]
    if old:
        raise TlsError("ssl.enabled.protocols",
                       f"{', '.join(old)} {'is' if len(old) == 1 else 'are'} not served (broken "
                       "protocols OpenSSL refuses); enable TLSv1.2 and/or TLSv1.3")
    unknown = [p for p in enabled if p not in TLS_VERSIONS]
    if unknown or not enabled:
        raise TlsError("ssl.enabled.protocols",
                       f"expected TLSv1.2 and/or TLSv1.3, got {','.join(enabled) or 'nothing'}")
    versions = sorted(TLS_VERSIONS[p] for p in enabled)
    ciphers, lowest, highest = _cipher_choice(get("ssl.cipher.suites") or (),
                                              versions[0], versions[-1])
    out = TlsSettings(listener=listener, chain_pem=chain_pem, subject=subject,
                      trusted_pem=trusted, client_auth=get("ssl.client.auth"),
                      versions=(lowest, highest),
                      check_hostname=get("ssl.endpoint.identification.algorithm") == "https",
                      ciphers=ciphers)
    try:  # what OpenSSL itself refuses (a key too weak for its security level, ...)
        out.client_context()
        if not client:
            out.server_context()
    except ssl.SSLError as err:
        raise TlsError("ssl.keystore.location", f"OpenSSL refuses the key material: "
                       f"{err.reason or err}") from err
    return out


# The zookeeper.ssl.* keys (Kafka's ZooKeeper client TLS, KafkaConfig.ZkSsl*) by the
# ssl.* key `settings` reads for each; the keys with no ZooKeeper twin are left unset.
_ZOOKEEPER_KEYS = {
    "ssl.keystore.location": "zookeeper.ssl.keystore.location",
    "ssl.keystore.password": "zookeeper.ssl.keystore.password",
    "ssl.keystore.type": "zookeeper.ssl.keystore.type",
    "ssl.key.password": "zookeeper.ssl.keystore.password",  # ZooKeeper has one password
    "ssl.truststore.location": "zookeeper.ssl.truststore.location",
    "ssl.truststore.password": "zookeeper.ssl.truststore.password",
    "ssl.truststore.type": "zookeeper.ssl.truststore.type",
    "ssl.cipher.suites": "zookeeper.ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm": "zookeeper.ssl.endpoint.identification.algorithm",
}
_SSL_KEY = re.compile(r"(?<![\w.])ssl\.")


def zookeeper_settings(get: Callable[[str], Any]) -> TlsSettings:
    """The TLS this broker connects to ZooKeeper with (zookeeper.ssl.client.enable),
    from Kafka's zookeeper.ssl.* keys, read and checked as a listener's are: the
    keystore (optional: for a ZooKeeper whose ssl.clientAuth wants a certificate, and
    the identity zookeeper.set.acl's znodes are created under), the truststore (unset:
    the system's CAs), zookeeper.ssl.protocol and zookeeper.ssl.enabled.protocols (unset:
    the protocol alone, Kafka's rule; TLSv1.2 by default), the cipher suites and host
    name checking (HTTPS by default). A keystore or truststore type left unset is read
    from the file. TlsError names the zookeeper.ssl.* key at fault."""
    for key in ("zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable"):
        if get(key):
            raise TlsError(key, f"logkeeper's ZooKeeper client cannot check revocation "
                           f"(Java's CRL and OCSP checks; {key} = true): unset it")
    protocol = get("zookeeper.ssl.protocol")
    enabled = get("zookeeper.ssl.enabled.protocols") or \
        (tuple(TLS_VERSIONS) if protocol == "TLS" else (protocol,))

    def ssl_get(key: str) -> Any:
        if key == "ssl.enabled.protocols":
            return enabled
        if key == "ssl.client.auth":
            return "none"
        zk_key = _ZOOKEEPER_KEYS.get(key)
        value = None if zk_key is None else get(zk_key)
        if value is None and key.endswith("store.type"):
            return "JKS"  # read from the file (`_form`), as Kafka's unset type is
        return value

    try:
        return settings("zookeeper", ssl_get, client=True)
    except TlsError as err:
        if err.key == "ssl.enabled.protocols" and get("zookeeper.ssl.enabled.protocols") is None:
            raise TlsError("zookeeper.ssl.protocol", f"{protocol} is not served: give TLSv1.2, "
                           "TLSv1.3 or TLS") from None
        raise TlsError("zookeeper." + err.key,
                       _SSL_KEY.sub("zookeeper.ssl.", str(err).partition(": ")[2])) from None


# ---- cipher suites ----

# What Java puts in a ClientHello's suite list as a signal, not a suite: OpenSSL sends
# it by itself, so a list copied from a JVM's may carry it.
_SIGNALLING_SUITES = ("TLS_EMPTY_RENEGOTIATION_INFO_SCSV",)
_cipher_table: dict[str, tuple[str, bool]] | None = None


def cipher_suites() -> dict[str, tuple[str, bool]]:
    """Every suite the running OpenSSL knows: standard (IANA) name -> (OpenSSL's name,
    whether it is a TLS 1.3 suite), read from OpenSSL itself (SSL_CIPHER_standard_name,
    OpenSSL 1.1.1 and later) through the libssl Python's ssl module runs on. {} when
    that library cannot be asked."""
    global _cipher_table
    if _cipher_table is None:
        try:
            _cipher_table = _ask_openssl()
        except (OSError, AttributeError):
            _cipher_table = {}
    return _cipher_table


def _ask_openssl() -> dict[str, tuple[str, bool]]:
    import ctypes
    import ctypes.util

    lib = ctypes.CDLL(ctypes.util.find_library("ssl") or "libssl.so.3")
    ptr, text = ctypes.c_void_p, ctypes.c_char_p
    for name, res, args in (("TLS_method", ptr, []), ("SSL_CTX_new", ptr, [ptr]),
                            ("SSL_CTX_free", None, [ptr]),
                            ("SSL_CTX_set_cipher_list", ctypes.c_int, [ptr, text]),
                            ("SSL_CTX_get_ciphers", ptr, [ptr]),
                            ("OPENSSL_sk_num", ctypes.c_int, [ptr]),
                            ("OPENSSL_sk_value", ptr, [ptr, ctypes.c_int]),
                            ("SSL_CIPHER_get_name", text, [ptr]),
                            ("SSL_CIPHER_standard_name", text, [ptr]),
                            ("SSL_CIPHER_get_version", text, [ptr])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    ctx = lib.SSL_CTX_new(lib.TLS_method())
    if not ctx:
        return {}
    try:
        lib.SSL_CTX_set_cipher_list(ctx, b"ALL:COMPLEMENTOFALL:@SECLEVEL=0")
        stack = lib.SSL_CTX_get_ciphers(ctx)
        table = {}
        for i in range(lib.OPENSSL_sk_num(stack) if stack else 0):
            cipher = lib.OPENSSL_sk_value(stack, i)
            standard = lib.SSL_CIPHER_standard_name(cipher)
            if standard:
                table[standard.decode()] = (lib.SSL_CIPHER_get_name(cipher).decode(),
                                            lib.SSL_CIPHER_get_version(cipher) == b"TLSv1.3")
        return table
    finally:
        lib.SSL_CTX_free(ctx)


def _cipher_choice(suites: tuple[str, ...], lowest: ssl.TLSVersion, highest: ssl.TLSVersion
                   ) -> tuple[str | None, ssl.TLSVersion, ssl.TLSVersion]:
    """ssl.cipher.suites as OpenSSL takes it: (the TLS 1.2 suites as an OpenSSL cipher
    list, None for OpenSSL's defaults; the lowest and highest version left to serve)."""
    suites = tuple(s for s in suites if s not in _SIGNALLING_SUITES)
    if not suites:
        return None, lowest, highest
    table = cipher_suites()
    if not table:
        raise TlsError("ssl.cipher.suites", f"this machine's OpenSSL ({ssl.OPENSSL_VERSION}) "
                       "cannot name its suites by their standard names; leave the key unset "
                       "to use OpenSSL's default suites")
    unknown = [s for s in suites if s not in table]
    if unknown:
        raise TlsError("ssl.cipher.suites", f"{', '.join(unknown)}: no cipher suite "
                       f"{ssl.OPENSSL_VERSION} knows by that name (give standard names, as "
                       "Java does: TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_AES_256_GCM_SHA384)")
    tls13 = {s for s in suites if table[s][1]}
    tls12 = [table[s][0] for s in suites if not table[s][1]]
    # A bare context (no CA certificates read): OpenSSL's default suites, TLS 1.3's among them.
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served13 = {c["name"] for c in probe.get_ciphers() if c["protocol"] == "TLSv1.3"}
    if tls13 and tls13 != served13:
        raise TlsError("ssl.cipher.suites", f"lists {', '.join(sorted(tls13))} of TLS 1.3's "
                       "suites: logkeeper serves TLS 1.3 with all of OpenSSL's "
                       f"({', '.join(sorted(served13))}) or, when none is listed, not at all "
                       "(Python's ssl module cannot narrow them); list all of them or none")
    v12, v13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
    if not tls13:
        highest = min(highest, v12)
    if not tls12:
        lowest = max(lowest, v13)
    if lowest > highest:
        raise TlsError("ssl.cipher.suites", "lists no suite of the TLS versions "
                       "ssl.enabled.protocols enables, so no connection could be made")
    if not tls12:
        return None, lowest, highest
    ciphers = ":".join(tls12)
    try:
        probe.set_ciphers(ciphers)
    except ssl.SSLError as err:
        raise TlsError("ssl.cipher.suites", f"OpenSSL refuses every TLS 1.2 suite listed "
                       f"({err.reason or err}; those below its security level are not "
                       "served)") from err
    return ciphers, lowest, highest


# ---- the keystore ----

def _keystore(get: Callable[[str], Any]) -> tuple[bytes | None, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    location = get("ssl.keystore.location")
    kind = get("ssl.keystore.type")
    inline_key, inline_chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    if location is None and inline_key is None and inline_chain is None:
        raise TlsError("ssl.keystore.location",
                       "an SSL listener needs this broker's key and certificate: set "
                       "ssl.keystore.location (a PKCS12 or PEM file), or ssl.keystore.key "
                       "and ssl.keystore.certificate.chain with ssl.keystore.type=PEM")
    if location is not None and (inline_key is not None or inline_chain is not None):
        raise TlsError("ssl.keystore.location",
                       "give either ssl.keystore.location or ssl.keystore.key with "
                       "ssl.keystore.certificate.chain, not both (Kafka's rule)")
    if location is None:
        if kind != "PEM":
            raise TlsError("ssl.keystore.type", "ssl.keystore.key and "
                           "ssl.keystore.certificate.chain need ssl.keystore.type=PEM")
        if inline_key is None or inline_chain is None:
            missing = "ssl.keystore.key" if inline_key is None else "ssl.keystore.certificate.chain"
            raise TlsError(missing, "ssl.keystore.key and ssl.keystore.certificate.chain "
                           "go together")
        key = _pem_key(inline_key.encode(), get("ssl.key.password"), "ssl.keystore.key")
        certs = _pem_certs(inline_chain.encode(), "ssl.keystore.certificate.chain")
        where = "ssl.keystore.key"
    else:
        data = _read("ssl.keystore.location", location)
        form = _form("ssl.keystore.location", location, data, kind, "ssl.keystore.type",
                     store="keystore")
        if form == "PEM":
            key = _pem_key(data, get("ssl.key.password"), "ssl.keystore.location")
            certs = _pem_certs(data, "ssl.keystore.location")
        else:
            key, certs = _pkcs12_key(data, location, get("ssl.keystore.password"),
                                     get("ssl.key.password"))
        where = "ssl.keystore.location"
    if not certs:
        raise TlsError(where, "holds no certificate")
    leaf = certs[0]
    if (leaf.public_key().public_bytes(serialization.Encoding.DER,
                                       serialization.PublicFormat.SubjectPublicKeyInfo)
            != key.public_key().public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)):
        raise TlsError(where, "the private key does not belong to the first certificate of "
                       "the chain (the broker's own certificate must come first)")
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    assert isinstance(leaf, x509.Certificate)
    return pem, leaf.subject.rfc4514_string()


def _pem_key(data: bytes, password: str | None, key: str) -> Any:
    from cryptography.hazmat.primitives import serialization

    block = _pem_blocks(data, b"PRIVATE KEY")
    if not block:
        raise TlsError(key, "holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)")
    try:
        return serialization.load_pem_private_key(
            block[0], password.encode() if password is not None else None)
    except TypeError as err:  # encrypted without a password, or a password for none
        if password is None:
            raise TlsError(key, "the private key is encrypted: set ssl.key.password") from err
        raise TlsError(key, "the private key is not encrypted: remove ssl.key.password") from err
    except ValueError as err:
        raise TlsError(key, "the private key cannot be read (a wrong ssl.key.password, or "
                       f"not a key): {err}") from err


def _pem_certs(data: bytes, key: str) -> list[Any]:
    from cryptography import x509

    blocks = _pem_blocks(data, b"CERTIFICATE")
    try:
        return [x509.load_pem_x509_certificate(b) for b in blocks]
    except ValueError as err:
        raise TlsError(key, f"a certificate cannot be read: {err}") from err


def _pem_blocks(data: bytes, label: bytes) -> list[bytes]:
    """The PEM blocks of `data` whose label ends with `label`, in order."""
    out = []
    pos = 0
    while True:
        start = data.find(_PEM_BEGIN, pos)
        if start < 0:
            return out
        eol = data.find(b"-----", start + len(_PEM_BEGIN))
        end_marker = b"-----END " + data[start + len(_PEM_BEGIN):eol] + b"-----"
        end = data.find(end_marker, eol)
        if eol < 0 or end < 0:
            return out
        if data[start + len(_PEM_BEGIN):eol].endswith(label):
            out.append(data[start:end + len(end_marker)] + b"\n")
        pos = end + len(end_marker)


def _pkcs12_key(data: bytes, location: str, store_password: str | None,
                key_password: str | None) -> tuple[Any, list[Any]]:
    from cryptography.hazmat.primitives.serialization import pkcs12

    last: Exception | None = None
    for password in dict.fromkeys((store_password, key_password)):
        try:
            store = pkcs12.load_pkcs12(data, password.encode() if password else None)
        except ValueError as err:
            last = err
            continue
        if store.key is None or store.cert is None:
            raise TlsError("ssl.keystore.location",
                           f"{location} holds no private key with its certificate")
        return store.key, [store.cert.certificate] + [c.certificate for c in store.additional_certs]
    raise TlsError("ssl.keystore.location",
                   f"{location} cannot be opened with ssl.keystore.password "
                   f"({'not set' if store_password is None else 'wrong password?'}): {last}")


# ---- the truststore ----

def _truststore(get: Callable[[str], Any]) -> str | None:
    from cryptography.hazmat.primitives import serialization

    location = get("ssl.truststore.location")
    inline = get("ssl.truststore.certificates")
    if location is not None and inline is not None:
        raise TlsError("ssl.truststore.location", "give either ssl.truststore.location or "
                       "ssl.truststore.certificates, not both")
    if location is None and inline is None:
        return None  # the system's CAs
    if inline is not None:
        certs = _pem_certs(inline.encode(), "ssl.truststore.certificates")
        where = "ssl.truststore.certificates"
    else:
        data = _read("ssl.truststore.location", location)
        form = _form("ssl.truststore.location", location, data, get("ssl.truststore.type"),
                     "ssl.truststore.type", store="truststore")
        where = "ssl.truststore.location"
        if form == "PEM":
            certs = _pem_certs(data, where)
        else:
            from cryptography.hazmat.primitives.serialization import pkcs12

            password = get("ssl.truststore.password")
            try:
                store = pkcs12.load_pkcs12(data, password.encode() if password else None)
            except ValueError as err:
                raise TlsError(where, f"{location} cannot be opened with "
                               f"ssl.truststore.password ("
                               f"{'not set' if password is None else 'wrong password?'}): "
                               f"{err}") from err
            certs = ([store.cert.certificate] if store.cert is not None else []) + \
                [c.certificate for c in store.additional_certs]
    if not certs:
        raise TlsError(where, "holds no certificate to trust")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


# ---- files ----

def _read(key: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as err:
        raise TlsError(key, f"cannot read {location}: {err.strerror or err}") from err


def _form(key: str, location: str, data: bytes, kind: str, type_key: str, *, store: str) -> str:
    """PEM or PKCS12, by the file's content: a file of type JKS (Kafka's default) that
    is really PKCS12 or PEM is read as such, as Java's keystore.type.compat does."""
    if data[:4] in _JKS_MAGIC:
        fmt = "JKS" if data[:4] == _JKS_MAGIC[0] else "JCEKS"
        raise TlsError(key, f"{location} is a Java KeyStore ({fmt}), which logkeeper cannot "
                       f"read; convert it to PKCS12 (keytool -importkeystore -srckeystore "
                       f"{location} -destkeystore {location}.p12 -deststoretype PKCS12) and "
                       f"set {type_key}=PKCS12")
    if data.lstrip()[:len(_PEM_BEGIN)] == _PEM_BEGIN or _PEM_BEGIN in data[:4096]:
        found = "PEM"
    elif data[:1] == b"\x30":
        found = "PKCS12"
    else:
        raise TlsError(key, f"{location} is neither a PKCS12 nor a PEM {store}")
    if kind != "JKS" and kind != found:
        raise TlsError(type_key, f"{type_key}={kind}, but {location} is a {found} file")
    return found


def _load_chain(ctx: ssl.SSLContext, pem: bytes) -> None:
    """Hand OpenSSL the key and chain through an anonymous in-memory file."""
    fd = os.memfd_create("logkeeper-keystore", os.MFD_CLOEXEC)
    try:
        view = memoryview(pem)
        while view:
            view = view[os.write(fd, view):]
        ctx.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def resolved(values: Mapping[str, Any], overrides: Mapping[str, Any]) -> Callable[[str], Any]:
    """`get(key)` for one listener: its listener.name.<listener>.<key> override, else the
    broker-wide value."""
    return lambda key: overrides[key] if key in overrides else values[key]


def connect(host: str, port: int, *, timeout: float,
            context: ssl.SSLContext | None) -> socket.socket:
    """A blocking connection to a broker's listener, TLS when `context` is given (the
    handshake done, the peer's certificate checked); OSError (ssl.SSLError among them)
    when it cannot be made."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if context is None:
        return sock
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


# ---- the principal of a client certificate (Kafka's SslPrincipalMapper) ----

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)


@dataclass(frozen=True)
class PrincipalRule:
    """One rule of `ssl.principal.mapping.rules`: DEFAULT (`pattern` None) takes the
    subject as it is; `RULE:pattern/replacement/[LU]` applies when the pattern matches
    the whole subject, with Java's `$n` group references, lower- or upper-cased."""

    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}/{self.case}"

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        if self.pattern.fullmatch(subject) is None:
            return None
        groups = self.pattern.groups
        out = self.pattern.sub(lambda m: _java_replacement(self.replacement, m, groups),
                               subject, count=1)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def _java_replacement(text: str, m: re.Match[str], groups: int) -> str:
    """Java's Matcher.replaceAll replacement: `\\x` is x, `$n` group n (the longest
    number of a group that exists, as Kafka's escapeLiteralBackReferences leaves it)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            digits = text[i + 1:j]
            n = len(digits)
            while n > 1 and int(digits[:n]) > groups:
                n -= 1
            if int(digits[:n]) > groups:
                out.append(text[i:j])  # no such group: literal, as in Kafka
            else:
                out.append(m.group(int(digits[:n])) or "")
                out.append(digits[n:])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def principal_rules(text: str) -> tuple[PrincipalRule, ...]:
    """`ssl.principal.mapping.rules` parsed as Kafka parses it; TlsError names a bad rule."""
    rules = []
    for m in _RULE_SPLITTER.finditer(text.strip()):
        rule = m.group(1)
        parsed = _RULE_PARSER.match(rule)
        if parsed is None or parsed.end() != len(rule):
            raise TlsError("ssl.principal.mapping.rules", f"Invalid rule: `{rule}`")
        if parsed.group(1) is not None:
            rules.append(PrincipalRule())
        elif parsed.group(2) is not None:
            try:
                pattern = re.compile(parsed.group(2))
            except re.error as err:
                raise TlsError("ssl.principal.mapping.rules",
                               f"Invalid rule: `{rule}`: {err}") from None
            rules.append(PrincipalRule(pattern, parsed.group(4), parsed.group(6)))
        elif parsed.group(7):
            raise TlsError("ssl.principal.mapping.rules",
                           f"Invalid rule: `{rule}` (expected DEFAULT or "
                           "RULE:pattern/replacement/[LU])")
        if m.end() == len(text.strip()):
            break
    return tuple(rules)


def certificate_principal(der: bytes | None, rules: tuple[PrincipalRule, ...]) -> str:
    """The principal of a TLS client (Kafka's DefaultKafkaPrincipalBuilder):
    `User:ANONYMOUS` without a certificate, else `User:` and the first rule's mapping of
    the certificate's subject in RFC 2253 form (CN=client,O=acme), written as Java's
    X500Principal.getName() writes it (`rfc2253_subject`). TlsError when no rule
    applies (Kafka fails the authentication then)."""
    if der is None:
        return "User:ANONYMOUS"
    from cryptography import x509
    subject = rfc2253_subject(x509.load_der_x509_certificate(der).subject)
    for rule in rules or (PrincipalRule(),):
        name = rule.apply(subject)
        if name is not None:
            return f"User:{name}"
    raise TlsError("ssl.principal.mapping.rules", f"No rules apply to {subject}")


# The attribute types RFC 2253 names, which Java's X500Principal.getName() writes by
# name; any other (emailAddress, serialNumber, ...) it writes as its OID and the value's
# DER in hex, `1.2.840.113549.1.9.1=#160d6a6f...`, where cryptography writes the text.
_RFC2253_KEYWORDS = frozenset(("2.5.4.3", "2.5.4.6", "2.5.4.7", "2.5.4.8", "2.5.4.10",
                               "2.5.4.11", "2.5.4.9", "0.9.2342.19200300.100.1.25",
                               "0.9.2342.19200300.100.1.1"))  # CN C L ST O OU STREET DC UID


def rfc2253_subject(name: Any) -> str:
    """A certificate's subject (a cryptography `x509.Name`) as Kafka's principals spell
    it: Java's X500Principal.getName(), RFC 2253, the last RDN first."""
    from cryptography import x509

    def ava(attr: x509.NameAttribute) -> str:
        if attr.oid.dotted_string in _RFC2253_KEYWORDS:
            return attr.rfc4514_string()
        body = x509.Name([attr]).public_bytes()
        for _ in range(3):  # into the Name's SEQUENCE, the RDN's SET, the attribute's SEQUENCE
            body, _rest = _der_split(body)
        _oid, value = _der_split(body)
        return f"{attr.oid.dotted_string}=#{value.hex()}"

    return ",".join("+".join(ava(a) for a in rdn) for rdn in reversed(name.rdns))


def _der_split(data: bytes) -> tuple[bytes, bytes]:
    """(the contents of the DER element `data` starts with, what follows that element)."""
    length, pos = data[1], 2
    if length & 0x80:
        pos = 2 + (length & 0x7F)
        length = int.from_bytes(data[2:pos], "big")
    return data[pos:pos + length], data[pos + length:]
