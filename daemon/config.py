"""The daemon's configuration: Kafka's broker property names, from TOML or Java properties.

`load(path)` reads a file (or, with no path, the embedded defaults: three log dirs
under ./data, no ZooKeeper, Kafka on 127.0.0.1:9092, /metrics and /healthz on
127.0.0.1:9308) and returns a frozen `Config` keyed by the Kafka property names
(`cfg["log.segment.bytes"]`), with properties for the few read everywhere
(`broker_id`, `log_dirs`, `listener`, `advertised_listener`, `http_listen`,
`standalone`).

Two formats. A `.properties` file, or one that does not parse as TOML, is read as
Java properties, the format of Kafka's own `server.properties` (`parse_properties`
follows `java.util.Properties.load`); its values are strings, converted to each key's
type with the same checks as TOML values. Otherwise the file is TOML: keys may be
dotted (`log.dirs = [...]`), quoted (`"log.dirs" = [...]`) or inside tables (`[log]`
then `dirs = ...`); all three name the same Kafka property.

Every key is checked against `KEYS`, the one table of properties logkeeper uses, with
their types, Kafka's defaults and validators. Kafka's key families resolve as Kafka
resolves them: `log.retention.ms` > `.minutes` > `.hours`, `log.roll.ms` > `.hours`,
`log.roll.jitter.ms` > `.hours`,
`log.dirs` > `log.dir`, `advertised.listeners` defaulting to `listeners`. A KRaft-mode
file (Kafka 4's) is read as one broker: `node.id` is the broker id, the listeners of
`controller.listener.names` are set aside (`_kraft_file`, `_broker_listeners`). A key of
Kafka's that logkeeper does not use (`daemon.kafka_keys`) is accepted and named in
`Config.warnings`, which `serve` logs once at start-up.

Errors: a key nobody knows (with the closest known key as a hint), a value of the
wrong type or out of range, or a file that does not parse raises `ConfigError` whose
message names the file, the format read, the key and the value (and the line, where
there is one). Nothing is started before the whole file validates.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from logstore import LogConfig
from logstore.config import (
    COMPRESSION_LEVELS,
    COMPRESSION_TYPES,
    TIMESTAMP_TYPES,
    compression_level_ok,
    compression_level_range,
)

from .kafka_keys import KAFKA_BROKER_KEYS
from .security import acls, sasl, tls


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the file and the key."""


DEFAULT_LOG_DIRS = ("./data/disk0", "./data/disk1", "./data/disk2")
DEFAULT_LISTENER = "PLAINTEXT://127.0.0.1:9092"
DEFAULT_HTTP_LISTEN = "127.0.0.1:9308"  # the port kafka_exporter made familiar
DEFAULT_RESERVE_BYTES = 40 * 1024 * 1024
SLOW_ACTIONS = ("report", "offline")

_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\[\]/\s]*):(?P<port>\d{1,5})$")
_LISTENER = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<addr>.*)$")
_ZK_HOST = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


# ---- validators: each returns the normalised value or raises ValueError(reason) ----


def _int(minimum: int | None = None, maximum: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {type(value).__name__} {value!r}")
        if minimum is not None and value < minimum:
            raise ValueError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be <= {maximum}, got {value}")
        return value

    return check


def _ratio(value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"expected a number from 0 to 1, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"expected a number from 0 to 1, got {value!r}")
    return float(value)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"expected true or false, got {value!r}")


def _log_dirs(value: Any) -> tuple[str, ...]:
    # Kafka's form is one comma-separated string; a TOML array reads better.
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ValueError(f"expected a list of paths or a comma-separated string, got {value!r}")
    if not items or any(not v for v in items):
        raise ValueError(f"needs at least one non-empty path, got {value!r}")
    resolved = [str(Path(v).expanduser().absolute()) for v in items]
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"lists the same directory twice: {items!r}")
    for a in resolved:
        for b in resolved:
            if a != b and (b + "/").startswith(a + "/"):
                raise ValueError(f"{b} is inside {a}: log dirs must not nest")
    return tuple(items)


def parse_host_port(value: str) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets) -> (host, port); ValueError naming the problem."""
    match = _HOST_PORT.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"expected host:port, got {value!r}")
    port = int(match.group("port"))
    if port > 65535:
        raise ValueError(f"port {port} is over 65535")
    return match.group("host").strip("[]"), port


def local_address(host: str, port: int) -> str:
    """The `host:port` a tool on this host reaches a bound address at: a socket bound
    to every interface ("", 0.0.0.0, ::) answers on loopback."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _host_port(value: Any) -> str | None:
    if value is None or value == "":
        return None  # http.listen = "" turns the HTTP endpoint off
    if not isinstance(value, str):
        raise ValueError(f"expected a \"host:port\" string, got {value!r}")
    parse_host_port(value)
    return value


@dataclass(frozen=True)
class Listener:
    name: str
    host: str  # "" binds every interface
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def _listeners(value: Any) -> tuple[Listener, ...]:
    """Kafka's `NAME://host:port[,...]`, names unique. Which of them is served is
    decided once every key is known (`_broker_listeners`)."""
    if isinstance(value, tuple) and value and all(isinstance(v, Listener) for v in value):
        value = [str(v) for v in value]  # Config.replace hands back parsed listeners
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ValueError(f"expected \"PLAINTEXT://host:port\", got {value!r}")
    if not items:
        raise ValueError("expected \"PLAINTEXT://host:port\", got nothing")
    out = []
    for item in items:
        match = _LISTENER.match(item)
        if not match:
            raise ValueError(f"{item!r} is not NAME://host:port")
        host, port = parse_host_port(match.group("addr"))
        out.append(Listener(match.group("name").upper(), host, port))
    names = [lst.name for lst in out]
    if len(set(names)) != len(names):
        raise ValueError("each listener name may appear once (Kafka's rule)")
    return tuple(out)


def _names(value: Any) -> tuple[str, ...]:
    """A comma-separated list of names (`controller.listener.names`, `process.roles`)."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    elif isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    else:
        raise ValueError(f"expected a comma-separated list of names, got {value!r}")
    return tuple(v for v in items if v)


def _process_roles(value: Any) -> tuple[str, ...]:
    roles = _names(value)
    if any(r not in ("broker", "controller") for r in roles) or len(set(roles)) != len(roles):
        raise ValueError("expected broker, controller or broker,controller")
    return roles


# The "any address" a socket binds to is no address a client can connect to. Kafka
# refuses 0.0.0.0 in the effective advertised listeners; "::" is the same for IPv6.
UNADVERTISABLE_HOSTS = ("0.0.0.0", "::")


def _advertised_listeners(value: Any) -> tuple[Listener, ...] | None:
    if value is None or value == "":
        return None  # Kafka's default: advertise what `listeners` binds
    listeners = _listeners(value)
    for lst in listeners:
        if lst.host in UNADVERTISABLE_HOSTS:
            raise ValueError(f"cannot advertise the non-routable meta-address {lst.host}; "
                             "give a host name or address clients can reach")
    return listeners


# Kafka's SecurityProtocol names, and its default listener.security.protocol.map.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = tuple((p, p) for p in SECURITY_PROTOCOLS)
SERVED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
# Kafka's PASSWORD-type keys: DescribeConfigs never shows their values.
SENSITIVE_KEYS = frozenset({"ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
                            "ssl.keystore.certificate.chain", "ssl.truststore.password",
                            "ssl.truststore.certificates", "zookeeper.ssl.keystore.password",
                            "zookeeper.ssl.truststore.password"})


def _protocol_map(value: Any) -> tuple[tuple[str, str], ...]:
    """`NAME:PROTOCOL[,...]` (listener.security.protocol.map), names upper-cased."""
    out: dict[str, str] = {}
    for item in _names(value):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ValueError(f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{protocol} is not a security protocol (one of "
                             f"{', '.join(SECURITY_PROTOCOLS)})")
        if name in out:
            raise ValueError(f"listener {name} is mapped twice")
        out[name] = protocol
    if not out:
        raise ValueError("expected LISTENER_NAME:SECURITY_PROTOCOL pairs, got nothing")
    return tuple(out.items())


def _listener_name(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value.strip()):
        raise ValueError(f"expected a listener name, got {value!r}")
    return value.strip().upper()


def _inter_broker_protocol(value: Any) -> str:
    name = _listener_name(value)
    if name not in SECURITY_PROTOCOLS:
        raise ValueError(f"expected one of {', '.join(SECURITY_PROTOCOLS)}, got {value!r}")
    return name


def _sasl_mechanism(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a SASL mechanism, got {value!r}")
    return value.strip().upper()


def _optional_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value if value.strip() else None  # Kafka's empty value: not set


def _keystore_type(value: Any) -> str:
    if not isinstance(value, str) or value.strip().upper() not in tls.KEYSTORE_TYPES:
        raise ValueError(f"expected one of {', '.join(tls.KEYSTORE_TYPES)}, got {value!r}")
    return value.strip().upper()


def _tls_protocols(value: Any) -> tuple[str, ...]:
    protocols = _names(value)
    for p in protocols:
        if p not in tls.TLS_VERSIONS and p not in tls.OLD_TLS_VERSIONS:
            raise ValueError(f"{p} is not a TLS protocol version (TLSv1.2, TLSv1.3)")
    return protocols


def _ssl_protocol(value: Any) -> str:
    if not isinstance(value, str) or value.strip() not in tls.SSL_PROTOCOLS + tls.OLD_TLS_VERSIONS:
        raise ValueError(f"expected one of {', '.join(tls.SSL_PROTOCOLS)}, got {value!r}")
    return value.strip()


def _endpoint_identification(value: Any) -> str:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return ""
    if not isinstance(value, str) or value.strip().lower() != "https":
        raise ValueError(f"expected https or nothing, got {value!r}")
    return "https"


def _authorizer(value: Any) -> str:
    text = str(value).strip()
    if text and text not in acls.AUTHORIZERS:
        raise ValueError(f"logkeeper's authorizer is Kafka's {acls.ACL_AUTHORIZER} (or "
                         f"{acls.STANDARD_AUTHORIZER}); it cannot load {text}, and running "
                         "without it would leave every client free to do anything")
    return text


def _super_users(value: Any) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        entries = [str(v).strip() for v in value]
    else:
        entries = [v.strip() for v in str(value).split(";")]
    try:
        return tuple(acls.parse_principal(e) for e in entries if e)
    except acls.AclError as err:
        raise ValueError(f"{err} (super.users is a ;-separated list)") from None


def _principal_rules(value: Any) -> tuple[tls.PrincipalRule, ...]:
    try:
        return tls.principal_rules(str(value))
    except tls.TlsError as err:
        raise ValueError(str(err)) from None


def _compression_type(value: Any) -> str:
    if not isinstance(value, str) or value.strip() not in COMPRESSION_TYPES:
        raise ValueError(f"expected one of {', '.join(COMPRESSION_TYPES)}, got {value!r}")
    return value.strip()


def _compression_level(codec: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        value = _int()(value)
        if not compression_level_ok(codec, value):
            raise ValueError(f"must be {compression_level_range(codec)}, got {value}")
        return value

    return check


def _rack(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a rack name, got {value!r}")
    return value.strip()


# Kafka's rack-aware selector (KIP-392), the one replica.selector.class logkeeper has.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _replica_selector(value: Any) -> str:
    if not isinstance(value, str) or value.strip() != RACK_AWARE_REPLICA_SELECTOR:
        raise ValueError(f"the one replica selector logkeeper has is Kafka's "
                         f"{RACK_AWARE_REPLICA_SELECTOR}, got {value!r}")
    return value.strip()


def _timestamp_type(value: Any) -> str:
    if not isinstance(value, str) or value.strip() not in TIMESTAMP_TYPES:
        raise ValueError(f"expected CreateTime or LogAppendTime, got {value!r}")
    return value.strip()


def _cleanup_policy(value: Any) -> tuple[str, ...]:
    # Kafka's form is a comma-separated list of "delete" and "compact".
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ValueError(f"expected \"delete\", \"compact\" or \"compact,delete\", got {value!r}")
    if not items or any(v not in ("delete", "compact") for v in items):
        raise ValueError(f"expected \"delete\", \"compact\" or \"compact,delete\", got {value!r}")
    return tuple(sorted(set(items)))


def _zookeeper(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected \"host:port[,host:port...][/chroot]\", got {value!r}")
    hosts, _, chroot = value.partition("/")
    if not all(_ZK_HOST.match(h.strip()) for h in hosts.split(",")):
        raise ValueError(f"expected \"host:port[,host:port...][/chroot]\", got {value!r}")
    if chroot and (chroot.endswith("/") or "//" in chroot):
        raise ValueError(f"bad chroot /{chroot!r}")
    return value


def _choice(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    return check


@dataclass(frozen=True)
class Key:
    name: str
    kind: type  # int, bool, str or list: how a Java-properties string converts
    default: Any
    check: Callable[[Any], Any]
    doc: str


_HOUR_MS = 3600 * 1000

# Kafka's defaults (KafkaConfig / ServerLogConfigs), except where the doc says why not.
KEYS: dict[str, Key] = {k.name: k for k in (
    Key("broker.id", int, -1, _int(-1, 2**31 - 1),
        "this broker's id; -1: the one its log dirs' meta.properties hold, else in a "
        "cluster one ZooKeeper generates above reserved.broker.max.id (Kafka's), "
        "standalone 0"),
    Key("broker.id.generation.enable", bool, True, _bool,
        "a cluster broker without a broker.id gets one from ZooKeeper (false: broker.id "
        "must be given)"),
    Key("reserved.broker.max.id", int, 1000, _int(0, 2**31 - 1),
        "the highest broker.id a file may give while generation is on; generated ids "
        "start above it"),
    Key("node.id", int, None, _int(0, 2**31 - 1),
        "a KRaft-mode file's id for this node: the broker id (must equal broker.id when "
        "both are given, as in Kafka)"),
    Key("process.roles", str, (), _process_roles,
        "a KRaft-mode file's roles: logkeeper runs no KRaft quorum; a single combined "
        "broker,controller node is served standalone (or in ZooKeeper mode), a "
        "controller-only node or one of a larger quorum is refused"),
    Key("controller.listener.names", str, (), _names,
        "a KRaft-mode file's controller listeners: not bound, not advertised"),
    Key("log.dirs", list, DEFAULT_LOG_DIRS, _log_dirs, "log directories, one per disk"),
    Key("log.dir", list, None, _log_dirs, "used when log.dirs is not given (Kafka's rule)"),
    Key("listeners", str, (Listener("PLAINTEXT", "127.0.0.1", 9092),), _listeners,
        "the Kafka protocol endpoints bound, NAME://host:port[,...] (empty host: every "
        "interface), each on its own port (besides a KRaft file's controller listeners)"),
    Key("advertised.listeners", str, None, _advertised_listeners,
        "the endpoints Metadata and ZooKeeper give clients, by listener name (a client is "
        "told the brokers' endpoints of the listener it connected to); default: listeners "
        "(empty host: this host's name; port 0: the bound port; 0.0.0.0 is refused, as in "
        "Kafka)"),
    Key("listener.security.protocol.map", str, DEFAULT_PROTOCOL_MAP, _protocol_map,
        "each listener name's security protocol (default: PLAINTEXT, SSL, SASL_PLAINTEXT "
        "and SASL_SSL to themselves); TLS by the ssl.* keys, SASL by the sasl.* keys"),
    Key("inter.broker.listener.name", str, None, _listener_name,
        "the listener brokers and the controller reach each other on; default: the one "
        "security.inter.broker.protocol names, or the only one"),
    Key("security.inter.broker.protocol", str, "PLAINTEXT", _inter_broker_protocol,
        "the inter-broker listener's name when inter.broker.listener.name is not set "
        "(a security protocol's name)"),
    # TLS (daemon.security.tls), Kafka's keys and defaults; each may be given for one
    # listener as listener.name.<listener>.<key>.
    Key("ssl.keystore.type", str, "JKS", _keystore_type,
        "PKCS12 or PEM (a JKS file is refused with the keytool command that converts it; "
        "a PKCS12 or PEM file under the default JKS is read as what it is)"),
    Key("ssl.keystore.location", str, None, _optional_text,
        "an SSL listener's key and certificate chain: a PKCS12 file, or a PEM file with "
        "the private key and the chain (this broker's certificate first)"),
    Key("ssl.keystore.password", str, None, _optional_text, "opens a PKCS12 keystore"),
    Key("ssl.key.password", str, None, _optional_text, "decrypts an encrypted PEM key"),
    Key("ssl.keystore.key", str, None, _optional_text,
        "the private key as PEM text (ssl.keystore.type=PEM, instead of a location)"),
    Key("ssl.keystore.certificate.chain", str, None, _optional_text,
        "the certificate chain as PEM text (with ssl.keystore.key)"),
    Key("ssl.truststore.type", str, "JKS", _keystore_type,
        "PKCS12 or PEM, as ssl.keystore.type"),
    Key("ssl.truststore.location", str, None, _optional_text,
        "the CAs a client's or another broker's certificate must chain to (PKCS12 or "
        "PEM); unset: the system's CAs"),
    Key("ssl.truststore.password", str, None, _optional_text, "opens a PKCS12 truststore"),
    Key("ssl.truststore.certificates", str, None, _optional_text,
        "the trusted CAs as PEM text (instead of a location)"),
    Key("ssl.client.auth", str, "none", _choice(*tls.CLIENT_AUTH),
        "required: a client must present a certificate the truststore trusts; requested: "
        "checked when offered; none"),
    Key("ssl.enabled.protocols", str, ("TLSv1.2", "TLSv1.3"), _tls_protocols,
        "the TLS versions served and used (TLSv1.2, TLSv1.3)"),
    Key("ssl.protocol", str, "TLSv1.3", _ssl_protocol,
        "Java's SSLContext algorithm: accepted, ssl.enabled.protocols decides"),
    Key("ssl.endpoint.identification.algorithm", str, "https", _endpoint_identification,
        "https: a broker checks the host name in the certificate of the broker it "
        "connects to; empty: it does not"),
    Key("ssl.allow.dn.changes", bool, False, _bool,
        "a keystore rotated without a restart may have another subject (default false)"),
    Key("ssl.allow.san.changes", bool, False, _bool,
        "... or other subject alternative names (default false)"),
    Key("ssl.cipher.suites", str, (), _names,
        "the suites served and offered, by standard name (TLS_ECDHE_RSA_WITH_AES_256_GCM_"
        "SHA384); a TLS version none of whose suites is listed is not served; TLS 1.3's "
        "all or none; empty: OpenSSL's defaults"),
    # SASL (daemon.security.sasl), Kafka's keys and defaults; per listener as
    # listener.name.<listener>.sasl.enabled.mechanisms and, for each mechanism, its JAAS
    # config as listener.name.<listener>.<mechanism>.sasl.jaas.config.
    Key("sasl.enabled.mechanisms", str, ("GSSAPI",), _names,
        "a SASL listener's mechanisms: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's "
        "default GSSAPI, Kerberos, is not served)"),
    Key("sasl.mechanism.inter.broker.protocol", str, "GSSAPI", _sasl_mechanism,
        "the mechanism brokers log in to each other with on a SASL inter-broker listener"),
    Key("connections.max.reauth.ms", int, 0, _int(0, 2**63 - 1),
        "a SASL login lasts this long: the client logs in again on its connection before "
        "then (KIP-368), else the connection is closed; 0: as long as the connection"),
    # ACLs (daemon.security.acls): Kafka's AclAuthorizer and its keys.
    Key("authorizer.class.name", str, "", _authorizer,
        "Kafka's kafka.security.authorizer.AclAuthorizer (or KRaft's StandardAuthorizer): "
        "every request is checked against the ACLs; empty: no authorizer, every client "
        "may do everything"),
    Key("super.users", str, (), _super_users,
        "principals allowed everything, User:name;User:other (the brokers' own, when "
        "their inter-broker requests are not granted ClusterAction by an ACL)"),
    Key("allow.everyone.if.no.acl.found", bool, False, _bool,
        "a resource no ACL names is open to everyone (Kafka's default false: closed)"),
    Key("ssl.principal.mapping.rules", str, tls.principal_rules("DEFAULT"), _principal_rules,
        "how a TLS client certificate's subject becomes its principal's name: Kafka's "
        "RULE:pattern/replacement/[LU],...,DEFAULT (DEFAULT: the whole subject, "
        "CN=...,O=...)"),
    Key("broker.rack", str, None, _rack,
        "this broker's rack (or availability zone): with every broker's set, a topic's "
        "replicas are spread across racks"),
    Key("replica.selector.class", str, None, _replica_selector,
        "with Kafka's RackAwareReplicaSelector, a consumer that gives its client.rack is "
        "sent to read from an in-sync replica in its rack (KIP-392); unset: the leader"),
    Key("zookeeper.connect", str, None, _zookeeper,
        "ZooKeeper connect string; unset = standalone (this broker leads everything)"),
    Key("zookeeper.session.timeout.ms", int, 18000, _int(1000, 600000),
        "ZooKeeper session timeout; after an expiry the broker registers again"),
    # ZooKeeper over TLS (daemon.cluster.zk_client), Kafka's zookeeper.ssl.* keys and
    # defaults; the key material is read as the ssl.* keys' (daemon.security.tls).
    Key("zookeeper.ssl.client.enable", bool, False, _bool,
        "connect to ZooKeeper over TLS (its secureClientPort); zookeeper.clientCnxnSocket, "
        "which Java needs for it, is not"),
    Key("zookeeper.ssl.keystore.location", str, None, _optional_text,
        "this broker's key and certificate for ZooKeeper (PKCS12 or PEM): for a ZooKeeper "
        "that asks for a client certificate, and zookeeper.set.acl's identity"),
    Key("zookeeper.ssl.keystore.password", str, None, _optional_text,
        "opens the PKCS12 keystore (or decrypts a PEM key)"),
    Key("zookeeper.ssl.keystore.type", str, None, _keystore_type,
        "PKCS12 or PEM; unset: read from the file"),
    Key("zookeeper.ssl.truststore.location", str, None, _optional_text,
        "the CAs ZooKeeper's certificate must chain to (PKCS12 or PEM); unset: the "
        "system's CAs"),
    Key("zookeeper.ssl.truststore.password", str, None, _optional_text,
        "opens a PKCS12 truststore"),
    Key("zookeeper.ssl.truststore.type", str, None, _keystore_type,
        "PKCS12 or PEM; unset: read from the file"),
    Key("zookeeper.ssl.protocol", str, "TLSv1.2", _ssl_protocol,
        "the TLS version used when zookeeper.ssl.enabled.protocols is unset (TLS: 1.2 "
        "and 1.3)"),
    Key("zookeeper.ssl.enabled.protocols", str, None, _tls_protocols,
        "the TLS versions offered to ZooKeeper (TLSv1.2, TLSv1.3); unset: "
        "zookeeper.ssl.protocol"),
    Key("zookeeper.ssl.cipher.suites", str, (), _names,
        "the suites offered to ZooKeeper, by standard name, as ssl.cipher.suites"),
    Key("zookeeper.ssl.endpoint.identification.algorithm", str, "https",
        _endpoint_identification,
        "https: ZooKeeper's certificate must name the host connected to; empty: not checked"),
    Key("zookeeper.ssl.crl.enable", bool, False, _bool,
        "certificate revocation lists: not served (true is refused)"),
    Key("zookeeper.ssl.ocsp.enable", bool, False, _bool,
        "OCSP: not served (true is refused)"),
    Key("zookeeper.set.acl", bool, False, _bool,
        "create znodes readable by all and writable only by this broker's ZooKeeper "
        "identity (its TLS certificate); user and broker configs readable by it alone"),
    Key("controlled.shutdown.enable", bool, True, _bool,
        "ZooKeeper mode: before it stops, the broker asks the controller to move its "
        "partitions' leadership to other in-sync replicas"),
    Key("controlled.shutdown.max.retries", int, 3, _int(1),
        "how many times it asks while partitions are left to move"),
    Key("controlled.shutdown.retry.backoff.ms", int, 5000, _int(0),
        "the wait between those asks"),
    Key("log.segment.bytes", int, 1024 * 1024 * 1024, _int(14, 2**31 - 1), "segment size"),
    Key("log.roll.ms", int, None, _int(1), "roll a segment this old (default: log.roll.hours)"),
    Key("log.roll.hours", int, 168, _int(1), "used when log.roll.ms is not given"),
    Key("log.roll.jitter.ms", int, None, _int(0),
        "each segment rolls up to this much before its roll time, at random (default: "
        "log.roll.jitter.hours)"),
    Key("log.roll.jitter.hours", int, 0, _int(0), "used when log.roll.jitter.ms is not given"),
    Key("log.retention.ms", int, None, _int(-1),
        "-1 keeps forever (default: log.retention.minutes, else log.retention.hours)"),
    Key("log.retention.minutes", int, None, _int(-1), "used when log.retention.ms is not given"),
    Key("log.retention.hours", int, 168, _int(-1),
        "used when neither log.retention.ms nor log.retention.minutes is given"),
    Key("log.retention.bytes", int, -1, _int(-1), "per partition; -1 = no limit"),
    Key("log.retention.check.interval.ms", int, 300000, _int(1), "how often retention runs"),
    Key("log.cleanup.policy", list, ("delete",), _cleanup_policy,
        "delete (retention), compact (the log cleaner keeps the latest record per key) or both"),
    # The log cleaner (logstore.cleaner, daemon.storage.cleaner), Kafka's keys and defaults.
    Key("log.cleaner.enable", bool, True, _bool, "run the log cleaner on compacted topics"),
    Key("log.cleaner.backoff.ms", int, 15000, _int(0),
        "how long a dir's cleaner sleeps when no log is due"),
    Key("log.cleaner.dedupe.buffer.size", int, 128 * 1024 * 1024, _int(1024),
        "key-map memory (24 bytes a key), shared by the dirs' cleaners"),
    Key("log.cleaner.io.buffer.size", int, 512 * 1024, _int(1024),
        "read and write buffer of a cleaner"),
    Key("log.cleaner.min.cleanable.ratio", str, 0.5, _ratio,
        "dirty bytes over total bytes above which a compacted log is cleaned"),
    Key("log.cleaner.delete.retention.ms", int, 24 * _HOUR_MS, _int(0),
        "how long a tombstone stays after the clean that first kept it"),
    Key("log.cleaner.min.compaction.lag.ms", int, 0, _int(0),
        "a record stays uncompacted at least this long"),
    Key("log.cleaner.max.compaction.lag.ms", int, 2**63 - 1, _int(1),
        "a dirty segment older than this is cleaned whatever the dirty ratio"),
    Key("compression.type", str, "producer", _compression_type,
        "the codec of the batches a leader writes: producer (each as its producer sent "
        "it), or uncompressed, gzip, snappy, lz4, zstd (recompressed when in another)"),
    *(Key(f"compression.{codec}.level", int, COMPRESSION_LEVELS[codec][2],
          _compression_level(codec), f"the level {codec} batches are written at, when "
          f"compression.type = {codec} has the leader compress them")
      for codec in COMPRESSION_LEVELS),
    Key("log.message.timestamp.type", str, "CreateTime", _timestamp_type,
        "CreateTime keeps the producers' timestamps; LogAppendTime stamps each batch with "
        "the time its leader wrote it"),
    Key("log.message.timestamp.before.max.ms", int, 2**63 - 1, _int(0, 2**63 - 1),
        "how far behind the leader's clock a CreateTime timestamp may be (2**63-1: any, "
        "or log.message.timestamp.difference.max.ms when that is set)"),
    Key("log.message.timestamp.after.max.ms", int, 2**63 - 1, _int(0, 2**63 - 1),
        "how far ahead of the leader's clock a CreateTime timestamp may be (2**63-1: any, "
        "or log.message.timestamp.difference.max.ms when that is set)"),
    Key("log.message.timestamp.difference.max.ms", int, 2**63 - 1, _int(0, 2**63 - 1),
        "Kafka's deprecated bound both ways, for a before/after key left at 2**63-1"),
    Key("log.flush.interval.messages", int, 2**63 - 1, _int(1, 2**63 - 1),
        "fsync a log once this many messages are unflushed (2**63-1: never; the 60 s "
        "checkpoint round and replication keep records)"),
    Key("log.flush.interval.ms", int, None, _int(0, 2**63 - 1),
        "fsync a log once its last fsync is this old (default: "
        "log.flush.scheduler.interval.ms)"),
    Key("log.flush.scheduler.interval.ms", int, 2**63 - 1, _int(0, 2**63 - 1),
        "how often flush.ms is checked (2**63-1: each second)"),
    Key("log.index.interval.bytes", int, 4096, _int(0, 2**31 - 1),
        "bytes between index entries"),
    Key("log.index.size.max.bytes", int, 10 * 1024 * 1024, _int(4, 2**31 - 1),
        "the size a segment's offset and time indexes are preallocated to; a full one "
        "rolls the segment"),
    Key("message.max.bytes", int, 1024 * 1024 + 12, _int(0, 2**31 - 1),
        "largest batch accepted"),
    Key("num.partitions", int, 1, _int(1, 100000), "partitions of auto-created topics"),
    Key("default.replication.factor", int, 1, _int(1, 32767),
        "replication of auto-created topics"),
    Key("min.insync.replicas", int, 1, _int(1, 32767),
        "acks=all needs this many in-sync replicas (a topic's own value overrides it)"),
    Key("unclean.leader.election.enable", bool, False, _bool,
        "elect an out-of-sync replica when no in-sync one is left (data loss); a topic's "
        "own value overrides it"),
    Key("auto.leader.rebalance.enable", bool, True, _bool,
        "the controller moves leadership back to preferred replicas (each partition's "
        "first) once a broker leads too few of those it is preferred for"),
    Key("leader.imbalance.check.interval.seconds", int, 300, _int(1),
        "how often the controller checks the leader imbalance"),
    Key("leader.imbalance.per.broker.percentage", int, 10, _int(0, 100),
        "the share of a broker's preferred partitions led elsewhere that starts a rebalance"),
    Key("replica.lag.time.max.ms", int, 30000, _int(1),
        "a follower that has not caught up for this long leaves the ISR"),
    Key("replica.fetch.max.bytes", int, 1024 * 1024, _int(0, 2**31 - 1),
        "bytes a follower's fetch asks of each partition (a larger first batch still "
        "comes whole)"),
    Key("replica.fetch.response.max.bytes", int, 10 * 1024 * 1024, _int(0, 2**31 - 1),
        "bytes a follower's fetch asks for in all"),
    Key("replica.fetch.wait.max.ms", int, 500, _int(0, 2**31 - 1),
        "how long a leader holds a follower's fetch at the log ends (at most "
        "replica.lag.time.max.ms)"),
    Key("replica.fetch.min.bytes", int, 1, _int(0, 2**31 - 1),
        "bytes a follower's fetch waits for before the leader answers"),
    Key("replica.fetch.backoff.ms", int, 1000, _int(0, 2**31 - 1),
        "a follower's wait after a failed fetch before it asks again"),
    Key("replication.quota.window.num", int, 11, _int(1, 2**31 - 1),
        "samples the replication throttles' byte rates are measured over"),
    Key("replication.quota.window.size.seconds", int, 1, _int(1, 2**31 - 1),
        "length of each of those samples"),
    Key("quota.window.num", int, 11, _int(1, 2**31 - 1),
        "samples the client quotas' byte rates (producer_byte_rate, consumer_byte_rate) "
        "are measured over"),
    Key("quota.window.size.seconds", int, 1, _int(1, 2**31 - 1),
        "length of each of those samples"),
    Key("alter.log.dirs.replication.quota.window.num", int, 11, _int(1, 2**31 - 1),
        "samples the replica moves' byte rate (between this broker's dirs) is measured over"),
    Key("alter.log.dirs.replication.quota.window.size.seconds", int, 1, _int(1, 2**31 - 1),
        "length of each of those samples"),
    Key("replica.high.watermark.checkpoint.interval.ms", int, 5000, _int(1),
        "how often the high watermarks are written to replication-offset-checkpoint"),
    Key("auto.create.topics.enable", bool, True, _bool,
        "create topics named in Metadata requests"),
    Key("delete.topic.enable", bool, True, _bool,
        "false: DeleteTopics is refused (TOPIC_DELETION_DISABLED) and nothing is deleted"),
    Key("socket.request.max.bytes", int, 100 * 1024 * 1024, _int(1, 2**31 - 1),
        "largest request frame; bigger ones are refused before their body is read"),
    Key("fetch.max.bytes", int, 55 * 1024 * 1024, _int(1024, 2**31 - 1),
        "most record bytes one Fetch answer carries, whatever the fetch asks (its first "
        "batch still comes whole)"),
    Key("http.listen", str, DEFAULT_HTTP_LISTEN, _host_port,
        "host:port of /metrics and /healthz; \"\" turns the endpoint off"),
    # Consumer groups and committed offsets (daemon.coordinator; docs/groups.md).
    Key("offsets.topic.num.partitions", int, 50, _int(1, 100000),
        "partitions of __consumer_offsets, made when a coordinator is first looked up"),
    Key("offsets.topic.replication.factor", int, 3, _int(1, 32767),
        "replicas of __consumer_offsets (standalone: 1); creation waits for this many brokers"),
    Key("offsets.topic.segment.bytes", int, 100 * 1024 * 1024, _int(14, 2**31 - 1),
        "segment size of __consumer_offsets"),
    Key("offsets.commit.timeout.ms", int, 5000, _int(1),
        "how long a commit waits for the ISR before it is answered"),
    Key("offsets.retention.minutes", int, 10080, _int(1),
        "an empty group's committed offsets are dropped after this long"),
    Key("offsets.retention.check.interval.ms", int, 600000, _int(1),
        "how often committed offsets are checked for expiry"),
    Key("offset.metadata.max.bytes", int, 4096, _int(0),
        "largest metadata string a committed offset may carry"),
    Key("group.initial.rebalance.delay.ms", int, 3000, _int(0),
        "how long an empty group waits for more members before its first rebalance"),
    Key("group.min.session.timeout.ms", int, 6000, _int(1), "shortest session timeout allowed"),
    Key("group.max.session.timeout.ms", int, 1800000, _int(1), "longest session timeout allowed"),
    Key("group.max.size", int, 2**31 - 1, _int(1), "most members a group may have"),
    # Transactions (daemon.coordinator.transactions; docs/transactions.md).
    Key("transaction.state.log.num.partitions", int, 50, _int(1, 100000),
        "partitions of __transaction_state, made when a transaction coordinator is first "
        "looked up"),
    Key("transaction.state.log.replication.factor", int, 3, _int(1, 32767),
        "replicas of __transaction_state (standalone: 1); creation waits for this many "
        "brokers"),
    Key("transaction.state.log.min.isr", int, 2, _int(1, 32767),
        "min.insync.replicas of __transaction_state (standalone: 1)"),
    Key("transaction.state.log.segment.bytes", int, 100 * 1024 * 1024, _int(14, 2**31 - 1),
        "segment size of __transaction_state"),
    Key("transaction.max.timeout.ms", int, 900000, _int(1),
        "longest transaction.timeout.ms a producer may ask for"),
    Key("transactional.id.expiration.ms", int, 604800000, _int(1),
        "a transactional id idle (no transaction open) this long is forgotten"),
    Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10000, _int(1),
        "how often transactions past their timeout are looked for and aborted"),
    Key("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3600000, _int(1),
        "how often expired transactional ids are looked for and removed"),
    Key("transaction.partition.verification.enable", bool, True, _bool,
        "a partition leader asks the transaction coordinator before it writes the first "
        "batch of a transaction (KIP-890), so no hanging transaction can start"),
    Key("producer.id.expiration.ms", int, 86400000, _int(1),
        "a producer idle this long (no transaction open) is forgotten by each partition"),
    Key("producer.id.expiration.check.interval.ms", int, 600000, _int(1),
        "how often each partition's expired producers are looked for"),
    # Log-dir health (daemon.health; docs/architecture.md, "Log dir states").
    Key("log.dir.reserve.bytes", int, DEFAULT_RESERVE_BYTES, _int(0),
        "reserve file written in every ONLINE dir, deleted when it saturates"),
    Key("log.dir.resume.free.bytes", int, None, _int(0),
        "free space above which a SATURATED dir is ONLINE again (default 2 x reserve)"),
    Key("log.dir.min.free.bytes", int, 0, _int(0),
        "free space under which a dir is SATURATED before writes fail (0: on ENOSPC only)"),
    Key("log.dir.probe.interval.ms", int, 1000, _int(1), "availability probe period"),
    Key("log.dir.probe.timeout.ms", int, 5000, _int(1), "a probe slower than this = OFFLINE"),
    Key("log.dir.slow.action", str, "report", _choice(*SLOW_ACTIONS),
        "what a persistently slow disk triggers: \"report\" (DEGRADED) or \"offline\""),
    Key("log.dir.slow.min.ms", int, 50, _int(1),
        "probe latency under which no disk counts as slow, whatever its peers do"),
    Key("log.dir.slow.factor", int, 5, _int(2),
        "slow = this many times the peers' median latency"),
)}


@dataclass(frozen=True)
class Config:
    """Validated settings, keyed by Kafka property name in `values`.

    Key families are resolved: `values["log.retention.ms"]`, `values["log.roll.ms"]`
    and `values["log.dirs"]` hold what applies, whichever key of the family gave it."""

    values: Mapping[str, Any]
    source: str  # the file it came from, or "<embedded defaults>"
    # For the operator, once at start-up: Kafka keys accepted but not used, and the like.
    warnings: tuple[str, ...] = ()
    # The keys the file gave, validated but not resolved (what `replace` starts from).
    given: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # Each SSL (and SASL_SSL) listener's TLS, by listener name (daemon.security.tls).
    tls: Mapping[str, tls.TlsSettings] = field(default_factory=lambda: MappingProxyType({}))
    # Each SASL listener's mechanisms and logins (daemon.security.sasl).
    sasl: Mapping[str, sasl.SaslSettings] = field(default_factory=lambda: MappingProxyType({}))
    # The TLS ZooKeeper is reached with (zookeeper.ssl.client.enable); None: plaintext.
    zookeeper_tls: tls.TlsSettings | None = None

    @property
    def inter_broker_login(self) -> tuple[str, str, str] | None:
        """(mechanism, username, password) this broker logs in to the others with, when
        the inter-broker listener is a SASL one."""
        own = self.sasl.get(self.inter_broker_listener)
        mechanism = self.values["sasl.mechanism.inter.broker.protocol"]
        if own is None or mechanism not in own.logins:  # not SASL, or standalone
            return None
        return (mechanism, *own.logins[mechanism])

    def tls_with(self, dynamic: Mapping[str, str]) -> dict[str, tls.TlsSettings]:
        """Each TLS listener's TLS with this broker's dynamic `listener.name.<l>.ssl.*`
        keys (a rotated keystore or truststore) over the config file's, read and checked
        now. ValueError says what is wrong: a key naming no TLS listener, a value or key
        material that cannot be used, or a certificate of another subject (Kafka refuses
        that too)."""
        out = dict(self.tls)
        wanted: dict[str, dict[str, Any]] = {}
        for name, value in dynamic.items():
            if not name.startswith(LISTENER_PREFIX) or ".ssl." not in name:
                continue
            lname, _, key = name[len(LISTENER_PREFIX):].partition(".")
            if lname.upper() not in self.tls:
                raise ValueError(f"{name}: {lname.upper()} is no SSL or SASL_SSL listener of "
                                 f"this broker ({', '.join(sorted(self.tls)) or 'none'})")
            try:
                wanted.setdefault(lname.upper(), {})[key] = KEYS[key].check(
                    _from_text(KEYS[key], value))
            except (KeyError, ValueError) as err:
                raise ValueError(f"{name} = {value!r}: {err}") from None
        for lname, overrides in wanted.items():
            prefix = f"{LISTENER_PREFIX}{lname.lower()}."
            static = {k[len(prefix):]: v for k, v in self.given.items() if k.startswith(prefix)}
            get = tls.resolved(self.values, {**static, **overrides})
            try:
                new = tls.settings(lname, get)
            except tls.TlsError as err:
                raise ValueError(f"listener {lname}: {err}") from None
            old = self.tls[lname]
            if new.subject != old.subject and not get("ssl.allow.dn.changes"):
                raise ValueError(f"listener {lname}: Keystore DistinguishedName does not match: "
                                 f"existing={{{old.subject}}}, new={{{new.subject}}} "
                                 "(ssl.allow.dn.changes)")
            if new.alt_names() != old.alt_names() and not get("ssl.allow.san.changes"):
                raise ValueError(f"listener {lname}: Keystore SubjectAltName does not match: "
                                 f"existing={old.alt_names()}, new={new.alt_names()} "
                                 "(ssl.allow.san.changes)")
            out[lname] = new
        return out

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def log_dirs(self) -> tuple[str, ...]:
        return self.values["log.dirs"]

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """The Kafka listeners bound (a KRaft file's controller listeners set aside)."""
        return self.values["listeners"]

    @property
    def listener(self) -> Listener:
        """The Kafka listener this host's tools connect to (`--config FILE`): one where
        they log in as the broker does, with its own SASL login (the principal
        super.users names), the inter-broker listener first; else the first listener."""
        listeners = self.values["listeners"]
        inter = self.values["inter.broker.listener.name"]
        for x in sorted(listeners, key=lambda x: x.name != inter):  # stable: inter first
            own = self.sasl.get(x.name)
            if own is not None and own.logins:
                return x
        return listeners[0]

    @property
    def advertised_listeners(self) -> tuple[Listener, ...]:
        """What clients are told to connect to, by listener name: an empty host stands
        for this host's name and port 0 for the bound port, both filled in once the
        listeners are bound. A listener not among them is bound but not advertised."""
        return self.values["advertised.listeners"] or self.values["listeners"]

    @property
    def inter_broker_listener(self) -> str:
        """The listener name other brokers and the controller connect to."""
        return self.values["inter.broker.listener.name"]

    @property
    def advertised_listener(self) -> Listener:
        """The inter-broker listener's advertised endpoint."""
        return next(a for a in self.advertised_listeners if a.name == self.inter_broker_listener)

    @property
    def http_listen(self) -> tuple[str, int] | None:
        raw = self.values["http.listen"]
        return None if raw is None else parse_host_port(raw)

    @property
    def standalone(self) -> bool:
        return self.values["zookeeper.connect"] is None

    def log_config(self) -> LogConfig:
        """The per-partition settings every log gets (no per-topic overrides yet)."""
        return LogConfig(
            segment_bytes=self["log.segment.bytes"],
            segment_ms=self["log.roll.ms"],
            segment_jitter_ms=self["log.roll.jitter.ms"],
            flush_messages=self["log.flush.interval.messages"],
            flush_ms=self["log.flush.interval.ms"],
            index_interval_bytes=self["log.index.interval.bytes"],
            max_index_bytes=self["log.index.size.max.bytes"],
            retention_ms=self["log.retention.ms"],
            retention_bytes=self["log.retention.bytes"],
            max_message_bytes=self["message.max.bytes"],
            delete_retention_ms=self["log.cleaner.delete.retention.ms"],
            min_cleanable_dirty_ratio=self["log.cleaner.min.cleanable.ratio"],
            min_compaction_lag_ms=self["log.cleaner.min.compaction.lag.ms"],
            max_compaction_lag_ms=self["log.cleaner.max.compaction.lag.ms"],
            compression_type=self["compression.type"],
            timestamp_type=self["log.message.timestamp.type"],
            timestamp_before_max_ms=self["log.message.timestamp.before.max.ms"],
            timestamp_after_max_ms=self["log.message.timestamp.after.max.ms"],
            timestamp_difference_max_ms=self["log.message.timestamp.difference.max.ms"],
            compression_gzip_level=self["compression.gzip.level"],
            compression_lz4_level=self["compression.lz4.level"],
            compression_zstd_level=self["compression.zstd.level"],
            **LogConfig.policy_fields(self["log.cleanup.policy"]),
        )

    def replace(self, **changes: Any) -> Config:
        """A copy with `{"dotted.key": value}` style changes, validated like a file."""
        return from_mapping({**self.given, **changes}, source=self.source)


@dataclass(frozen=True)
class _Origin:
    """Where values came from, for error messages: the file, its format, the lines."""

    source: str
    format: str | None = None  # "TOML", "Java properties"; None for a mapping
    why: str = ""  # why this format was chosen, when the file did not say
    lines: Mapping[str, int] = field(default_factory=dict)

    def at(self, name: str | None = None) -> str:
        line = self.lines.get(name) if name else None
        where = self.source if line is None else f"{self.source}:{line}"
        if self.format is None:
            return where
        return f"{where} (read as {self.format}{'; ' + self.why if self.why else ''})"


def _flatten(table: Mapping[str, Any], prefix: str, out: dict[str, Any], source: str) -> None:
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, name + ".", out, source)
            continue
        if name in out:
            raise ConfigError(f"{source}: key {name!r} is given twice")
        out[name] = value


_INT_TEXT = re.compile(r"[+-]?[0-9]+")


def _from_text(key: Key, text: str) -> Any:
    """A Java-properties string as the value TOML would have given for `key`."""
    # java.util.Properties keeps trailing blanks in a value; Kafka trims every value it
    # parses as a number, boolean or list, and so does this for every key.
    text = text.strip()
    if key.kind is int:
        if not _INT_TEXT.fullmatch(text):
            raise ValueError(f"expected an integer, got {text!r}")
        return int(text)
    return text  # _bool, _log_dirs, _listeners, ... take strings as Kafka writes them


def from_mapping(raw: Mapping[str, Any], *, source: str = "<mapping>") -> Config:
    """Validate `{"dotted.key": value}` (or nested tables) into a Config."""
    flat: dict[str, Any] = {}
    _flatten(raw, "", flat, source)
    return _validate(flat, _Origin(source))


def _validate(flat: Mapping[str, Any], origin: _Origin, *, text: bool = False,
              notes: tuple[str, ...] = ()) -> Config:
    """Check every key of `flat` (strings to convert when `text`), resolve the families."""
    source = origin.source
    flat, per_listener, unused_per_listener = _listener_keys(flat, origin, text)
    unknown = sorted(set(flat) - set(KEYS) - KAFKA_BROKER_KEYS)
    if unknown:
        known = sorted(set(KEYS) | KAFKA_BROKER_KEYS)
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
        raise ConfigError(f"{origin.at(unknown[0])}: unknown key{'s' * (len(unknown) > 1)} "
                          f"{', '.join(hints)}; neither logkeeper nor Kafka has "
                          f"{'them' if len(unknown) > 1 else 'it'} "
                          "(`logkeeper serve --help-config` lists logkeeper's keys)")
    warnings = list(notes)
    unused = sorted(set(flat) - set(KEYS)) + unused_per_listener
    if unused:
        warnings.append(f"{source}: {len(unused)} Kafka broker setting"
                        f"{'s' * (len(unused) > 1)} that logkeeper does not use, ignored: "
                        f"{', '.join(unused)}")
    given: dict[str, Any] = {}
    for name in KEYS.keys() & flat.keys():
        value = flat[name]
        try:
            given[name] = KEYS[name].check(_from_text(KEYS[name], value) if text else value)
        except ValueError as err:
            raise ConfigError(f"{origin.at(name)}: {name} = {value!r}: {err}") from err
    values = {name: given.get(name, key.default) for name, key in KEYS.items()}
    _resolve_families(values, given)
    _kraft_file(values, given, flat, origin, warnings)
    _check_broker_id(values, origin)
    for name in ("listeners", "advertised.listeners"):
        values[name] = _broker_listeners(values, name, origin)
    _check_listeners(values, given, origin)
    tls_settings = _tls(values, per_listener, origin, warnings)
    zookeeper_tls = _zookeeper_tls(values, origin, warnings)
    sasl_settings = _sasl(values, per_listener, origin)
    for lname, overrides in per_listener.items():
        for key, value in overrides.items():
            given[f"{LISTENER_PREFIX}{lname.lower()}.{key}"] = value
    if "compact" in values["log.cleanup.policy"] and not values["log.cleaner.enable"]:
        warnings.append(f"{source}: log.cleanup.policy has compact but log.cleaner.enable = "
                        "false: compacted logs are neither cleaned nor deleted by retention")
    if values["log.dir.resume.free.bytes"] is None:
        values["log.dir.resume.free.bytes"] = max(2 * values["log.dir.reserve.bytes"],
                                                  2 * values["log.dir.min.free.bytes"])
    if values["log.dir.resume.free.bytes"] <= values["log.dir.min.free.bytes"] > 0:
        raise ConfigError(
            f"{origin.at('log.dir.resume.free.bytes')}: log.dir.resume.free.bytes = "
            f"{values['log.dir.resume.free.bytes']} must be above log.dir.min.free.bytes = "
            f"{values['log.dir.min.free.bytes']}, or a dir would flap between SATURATED "
            "and ONLINE")
    if values["replica.fetch.wait.max.ms"] > values["replica.lag.time.max.ms"]:
        # Kafka refuses this too: a follower waiting longer than the lag allowance at a
        # leader with nothing new would fall out of the ISR while fully caught up.
        raise ConfigError(
            f"{origin.at('replica.fetch.wait.max.ms')}: replica.fetch.wait.max.ms = "
            f"{values['replica.fetch.wait.max.ms']} must not exceed replica.lag.time.max.ms "
            f"= {values['replica.lag.time.max.ms']}, or caught-up followers would leave "
            "the ISR")
    if values["message.max.bytes"] + 1024 > values["socket.request.max.bytes"]:
        raise ConfigError(
            f"{origin.at('socket.request.max.bytes')}: socket.request.max.bytes = "
            f"{values['socket.request.max.bytes']} cannot carry a batch of "
            f"message.max.bytes = {values['message.max.bytes']}")
    try:
        LogConfig(segment_bytes=values["log.segment.bytes"])
    except ValueError as err:  # one more guard: LogConfig has its own floor
        raise ConfigError(f"{origin.at('log.segment.bytes')}: log.segment.bytes: {err}") from err
    return Config(values=MappingProxyType(values), source=source, warnings=tuple(warnings),
                  given=MappingProxyType(given), tls=MappingProxyType(tls_settings),
                  sasl=MappingProxyType(sasl_settings), zookeeper_tls=zookeeper_tls)


LISTENER_PREFIX = "listener.name."
_JAAS_KEY = re.compile(r"([a-z0-9-]+)\.sasl\.jaas\.config")
# Kafka's SASL keys given per listener are prefixed by a mechanism too
# (listener.name.<listener>.<mechanism>.sasl.jaas.config).
_MECHANISM_PREFIX = re.compile(r"[a-z0-9-]+\.(?=sasl\.)")


def _listener_keys(flat: Mapping[str, Any], origin: _Origin, text: bool
                   ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[str]]:
    """Kafka's per-listener keys, listener.name.<listener>.<key>, set aside from `flat`:
    the ssl.* ones checked, by listener name (upper-cased); other Kafka keys listed as
    unused; anything else refused as unknown."""
    rest: dict[str, Any] = {}
    per_listener: dict[str, dict[str, Any]] = {}
    unused: list[str] = []
    for name, value in flat.items():
        if not name.startswith(LISTENER_PREFIX):
            rest[name] = value
            continue
        lname, _, key = name[len(LISTENER_PREFIX):].partition(".")
        jaas = _JAAS_KEY.fullmatch(key)
        if jaas is not None:
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{origin.at(name)}: {name}: expected a JAAS config string")
            per_listener.setdefault(lname.upper(), {})[
                f"{jaas.group(1).upper()}.sasl.jaas.config"] = value
        elif key in KEYS and key.startswith(("ssl.", "sasl.")):
            try:
                checked = KEYS[key].check(_from_text(KEYS[key], value) if text else value)
            except ValueError as err:
                raise ConfigError(f"{origin.at(name)}: {name} = {value!r}: {err}") from err
            per_listener.setdefault(lname.upper(), {})[key] = checked
        elif _MECHANISM_PREFIX.sub("", key, count=1) in KAFKA_BROKER_KEYS or key in KEYS:
            unused.append(name)
        else:
            raise ConfigError(f"{origin.at(name)}: unknown key {name!r}: {key!r} is no Kafka "
                              "key a listener can have its own value of")
    return rest, per_listener, unused


def zookeeper_client_tls(props: Mapping[str, str], source: str) -> tls.TlsSettings | None:
    """An admin tool's ZooKeeper TLS from its --zk-tls-config-file (Kafka's
    zookeeper.ssl.* keys, as text; other keys are ignored, as Kafka's tools do); None
    unless zookeeper.ssl.client.enable is true. ConfigError names the file and the key."""
    values = _client_keys(props, source, "zookeeper.ssl.")
    if not values["zookeeper.ssl.client.enable"]:
        return None
    try:
        return tls.zookeeper_settings(values.__getitem__)
    except tls.TlsError as err:
        raise ConfigError(f"{source}: {err}") from err


def _client_keys(props: Mapping[str, str], source: str, prefix: str) -> dict[str, Any]:
    """Every key of ours starting with `prefix`, from a client's properties (text) or
    its default, checked; ConfigError names the file and the key."""
    values: dict[str, Any] = {}
    for name, key in KEYS.items():
        if not name.startswith(prefix):
            continue
        try:
            values[name] = key.check(_from_text(key, props[name])) if name in props \
                else key.default
        except ValueError as err:
            raise ConfigError(f"{source}: {name} = {props[name]!r}: {err}") from err
    return values


def client_tls(props: Mapping[str, str], source: str) -> tls.TlsSettings | None:
    """A Kafka client's TLS from its properties (an admin command's --command-config:
    security.protocol and Kafka's ssl.* client keys, as text); None unless SSL or
    SASL_SSL.
    ConfigError names the file and the key."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"{source}: security.protocol = {protocol}: expected one of "
                          f"{', '.join(SECURITY_PROTOCOLS)}")
    if protocol not in TLS_PROTOCOLS:
        return None
    values = _client_keys(props, source, "ssl.")
    try:
        return tls.settings("client", values.__getitem__, client=True)
    except tls.TlsError as err:
        raise ConfigError(f"{source}: {err}") from err


def _sasl(values: Mapping[str, Any], per_listener: Mapping[str, Mapping[str, Any]],
          origin: _Origin) -> dict[str, sasl.SaslSettings]:
    """Each SASL listener's mechanisms and JAAS configs, checked now; and the login the
    inter-broker listener needs when it is a SASL one."""
    protocols = dict(values["listener.security.protocol.map"])
    out = {}
    for lst in values["listeners"]:
        if protocols.get(lst.name) not in SASL_PROTOCOLS:
            continue
        own = per_listener.get(lst.name, {})
        mechanisms = tuple(m.upper() for m in own.get("sasl.enabled.mechanisms",
                                                      values["sasl.enabled.mechanisms"]))
        jaas = {m: own.get(f"{m}.sasl.jaas.config") for m in mechanisms}
        try:
            out[lst.name] = sasl.settings(lst.name, mechanisms, jaas)
        except sasl.SaslError as err:
            key = ("sasl.enabled.mechanisms" if "sasl.enabled.mechanisms" in str(err) else
                   f"{LISTENER_PREFIX}{lst.name.lower()}.sasl.enabled.mechanisms")
            raise ConfigError(f"{origin.at(key)}: listener {lst.name} "
                              f"({protocols[lst.name]}): {err}") from err
    inter = values["inter.broker.listener.name"]
    if inter in out and values["zookeeper.connect"] is not None:  # standalone: no peers
        mechanism = values["sasl.mechanism.inter.broker.protocol"]
        where = origin.at("sasl.mechanism.inter.broker.protocol")
        if mechanism not in out[inter].mechanisms:
            raise ConfigError(
                f"{where}: sasl.mechanism.inter.broker.protocol = {mechanism} is not enabled "
                f"on the inter-broker listener {inter} ({', '.join(out[inter].mechanisms)})")
        if mechanism not in out[inter].logins:
            raise ConfigError(
                f"{where}: the brokers log in to each other on {inter} with {mechanism}: set "
                f'username="..." password="..." in {LISTENER_PREFIX}{inter.lower()}.'
                f"{mechanism.lower()}.sasl.jaas.config")
    return out


def client_login(props: Mapping[str, str], source: str) -> tuple[str, str, str] | None:
    """A Kafka client's SASL login from its properties (security.protocol SASL_*,
    sasl.mechanism, sasl.jaas.config): (mechanism, username, password), None without
    SASL. ConfigError names the file and the key."""
    try:
        return sasl.client_login(props)
    except sasl.SaslError as err:
        raise ConfigError(f"{source}: {err}") from err


def _tls(values: Mapping[str, Any], per_listener: Mapping[str, Mapping[str, Any]],
         origin: _Origin, warnings: list[str]) -> dict[str, tls.TlsSettings]:
    """Each SSL listener's TLS, its key material read and checked now."""
    protocols = dict(values["listener.security.protocol.map"])
    names = {lst.name for lst in values["listeners"]}
    for lname in per_listener:
        if lname not in names:
            warnings.append(f"{origin.source}: {LISTENER_PREFIX}{lname.lower()}.* keys name "
                            f"no listener of listeners ({', '.join(sorted(names))}), ignored")
    out = {}
    for lst in values["listeners"]:
        if protocols.get(lst.name) not in TLS_PROTOCOLS:
            continue
        get = tls.resolved(values, per_listener.get(lst.name, {}))
        try:
            out[lst.name] = tls.settings(lst.name, get)
        except tls.TlsError as err:
            key = err.key if err.key not in per_listener.get(lst.name, {}) \
                else f"{LISTENER_PREFIX}{lst.name.lower()}.{err.key}"
            raise ConfigError(f"{origin.at(key)}: listener {lst.name} "
                              f"({protocols[lst.name]}): {err}") from err
    return out


def _zookeeper_tls(values: Mapping[str, Any], origin: _Origin, warnings: list[str]
                   ) -> tls.TlsSettings | None:
    """The TLS the broker connects to ZooKeeper with (zookeeper.ssl.client.enable), its
    key material read and checked now; None: plaintext. zookeeper.set.acl needs it, and
    a keystore: the znodes' ACLs name the certificate's identity, as Kafka refuses
    secure ACLs without a ZooKeeper login."""
    if values["zookeeper.connect"] is None:
        return None
    if not values["zookeeper.ssl.client.enable"]:
        given = [k for k in KEYS if k.startswith("zookeeper.ssl.") and values[k] != KEYS[k].default]
        if given:
            warnings.append(f"{origin.source}: {', '.join(given)} set, but "
                            "zookeeper.ssl.client.enable is false: ZooKeeper is reached "
                            "without TLS")
        if values["zookeeper.set.acl"]:
            raise ConfigError(f"{origin.at('zookeeper.set.acl')}: zookeeper.set.acl = true "
                              "needs an identity at ZooKeeper: set zookeeper.ssl.client.enable "
                              "and zookeeper.ssl.keystore.location (its certificate names the "
                              "znodes' owner)")
        return None
    try:
        out = tls.zookeeper_settings(values.__getitem__)
    except tls.TlsError as err:
        raise ConfigError(f"{origin.at(err.key)}: ZooKeeper TLS: {err}") from err
    if values["zookeeper.set.acl"] and out.chain_pem is None:
        raise ConfigError(f"{origin.at('zookeeper.set.acl')}: zookeeper.set.acl = true needs "
                          "zookeeper.ssl.keystore.location: its certificate is the identity "
                          "the znodes' ACLs name")
    return out


def _check_broker_id(values: dict[str, Any], origin: _Origin) -> None:
    """broker.id as ZooKeeper-mode Kafka takes it: with broker.id.generation.enable a
    given id is at most reserved.broker.max.id (generated ones lie above it), and -1 (the
    default) is resolved at start-up (daemon.app.resolve_broker_id); without it one must
    be given. Standalone, -1 is broker 0."""
    broker_id = values["broker.id"]
    if values["zookeeper.connect"] is None:
        if broker_id < 0:
            values["broker.id"] = values["node.id"] = 0
        return
    if not values["broker.id.generation.enable"]:
        if broker_id < 0:
            raise ConfigError(f"{origin.at('broker.id')}: broker.id must be greater than or "
                              "equal to 0 when broker.id.generation.enable is false")
    elif broker_id > values["reserved.broker.max.id"]:
        raise ConfigError(
            f"{origin.at('broker.id')}: broker.id = {broker_id}: must be greater than or "
            f"equal to -1 and not greater than reserved.broker.max.id "
            f"({values['reserved.broker.max.id']}), which generated ids start above "
            "(Kafka's rule; or set broker.id.generation.enable = false)")


def _kraft_file(values: dict[str, Any], given: Mapping[str, Any], flat: Mapping[str, Any],
                origin: _Origin, warnings: list[str]) -> None:
    """A KRaft-mode server.properties (Kafka 4's only kind): its node.id is the broker
    id; a single broker,controller node (Kafka's quickstart) is served as a broker, its
    controller listeners left unbound. logkeeper runs no KRaft quorum, so a node of a
    larger quorum, or one that is no broker, is refused rather than run alone."""
    node_id = values["node.id"]
    if node_id is not None:
        if "broker.id" in given and given["broker.id"] != node_id:
            raise ConfigError(
                f"{origin.at('broker.id')}: broker.id = {given['broker.id']} and node.id = "
                f"{node_id} differ; if both are given they must be equal (Kafka's rule)")
        values["broker.id"] = node_id
    else:
        values["node.id"] = values["broker.id"]  # Kafka's populateSynonyms: one id, two names
    roles = values["process.roles"]
    if not roles:
        return
    if "broker" not in roles:
        raise ConfigError(
            f"{origin.at('process.roles')}: process.roles = {','.join(roles)}: a KRaft "
            "controller-only node holds no topics; logkeeper is a broker (give it "
            "process.roles=broker,controller or none, and its log.dirs)")
    quorum = set()
    for key in ("controller.quorum.voters", "controller.quorum.bootstrap.servers"):
        raw = flat.get(key)
        for entry in (_names(raw) if raw not in (None, "") else ()):
            quorum.add(entry.rpartition("@")[2])
    if len(quorum) > 1:
        raise ConfigError(
            f"{origin.at('process.roles')}: process.roles = {','.join(roles)} with a KRaft "
            f"quorum of {len(quorum)} controllers ({', '.join(sorted(quorum))}): logkeeper "
            "cannot join a KRaft cluster, and this node alone would lead topics the others "
            "lead too. For a cluster, give every broker zookeeper.connect; for one broker, "
            "drop the controller.quorum.* keys")
    mode = "standalone" if values["zookeeper.connect"] is None else "in ZooKeeper mode"
    unbound = ", ".join(values["controller.listener.names"]) or "none named"
    warnings.append(
        f"{origin.source}: process.roles = {','.join(roles)} is a KRaft-mode file; logkeeper "
        f"runs no KRaft quorum and serves this node as broker {values['broker.id']}, "
        f"{mode}; controller listeners ({unbound}) are not bound")


def _broker_listeners(values: Mapping[str, Any], name: str,
                      origin: _Origin) -> tuple[Listener, ...] | None:
    """The listeners served (or advertised) once a KRaft file's controller listeners are
    set aside: each a PLAINTEXT or SSL one by listener.security.protocol.map, and (of
    `listeners`) each on its own port, as Kafka requires."""
    given = values[name]
    if given is None:
        return None
    controllers = set(values["controller.listener.names"])
    served = tuple(lst for lst in given if lst.name not in controllers)
    spelled = ",".join(str(lst) for lst in given)
    if not served:
        raise ConfigError(f"{origin.at(name)}: {name} = {spelled!r}: no listener besides the "
                          f"controller listeners ({', '.join(sorted(controllers))})")
    protocols = dict(values["listener.security.protocol.map"])
    for lst in served:
        protocol = protocols.get(lst.name)
        if protocol is None:
            raise ConfigError(
                f"{origin.at(name)}: {name} = {spelled!r}: no security protocol is defined "
                f"for listener {lst.name}; map it in listener.security.protocol.map (e.g. "
                f"{lst.name}:PLAINTEXT), which names {', '.join(protocols)}")

    ports = [lst.port for lst in served if lst.port]
    if name == "listeners" and len(set(ports)) != len(ports):
        raise ConfigError(f"{origin.at(name)}: {name} = {spelled!r}: each listener must have "
                          "a different port (Kafka's rule)")
    return served


def _check_listeners(values: dict[str, Any], given: Mapping[str, Any], origin: _Origin) -> None:
    """Kafka's rules between listeners, advertised.listeners and the inter-broker
    listener; sets inter.broker.listener.name when it was left to its default."""
    names = [lst.name for lst in values["listeners"]]
    advertised = values["advertised.listeners"]
    if advertised is not None:
        unknown = [a.name for a in advertised if a.name not in names]
        if unknown:
            raise ConfigError(
                f"{origin.at('advertised.listeners')}: advertised.listeners names "
                f"{', '.join(unknown)}, which listeners does not define; its listener names "
                f"must be among those of listeners ({', '.join(names)})")
    else:
        for lst in values["listeners"]:
            if lst.host in UNADVERTISABLE_HOSTS:
                raise ConfigError(
                    f"{origin.at('listeners')}: listeners = {str(lst)!r} binds every "
                    f"interface, but {lst.host} is no address a client can connect to and "
                    f"advertised.listeners is not set (Kafka refuses this too): set "
                    f"advertised.listeners to {lst.name}://<this host's name>:{lst.port}, or "
                    f"bind {lst.name}://:{lst.port} to advertise this host's name")
    offered = [a.name for a in (advertised or values["listeners"])]
    inter = values["inter.broker.listener.name"]
    if inter is not None and "security.inter.broker.protocol" in given:
        raise ConfigError(f"{origin.at('inter.broker.listener.name')}: only one of "
                          "inter.broker.listener.name and security.inter.broker.protocol may "
                          "be set (Kafka's rule)")
    if inter is None:
        inter = values["security.inter.broker.protocol"]
        if inter not in offered:
            if len(offered) != 1:
                raise ConfigError(
                    f"{origin.at('listeners')}: no advertised listener is named {inter}, so "
                    "set inter.broker.listener.name to the one brokers reach each other on "
                    f"(one of {', '.join(offered)})")
            inter = offered[0]  # the only listener (Kafka would ask for the name)
    elif inter not in offered:
        raise ConfigError(
            f"{origin.at('inter.broker.listener.name')}: inter.broker.listener.name = {inter} "
            f"must be a listener name of advertised.listeners (one of {', '.join(offered)})")
    values["inter.broker.listener.name"] = inter


def _resolve_families(values: dict[str, Any], given: Mapping[str, Any]) -> None:
    """Kafka's precedence within a family of keys (KafkaConfig.logRetentionTimeMillis,
    logRollTimeMillis, logDirs): the most precise key given wins, silently."""
    if values["log.retention.ms"] is None:
        minutes = values["log.retention.minutes"]
        values["log.retention.ms"] = (minutes * 60 * 1000 if minutes is not None
                                      else values["log.retention.hours"] * _HOUR_MS)
    if values["log.retention.ms"] < 0:
        values["log.retention.ms"] = -1  # any negative time means unlimited, as in Kafka
    if values["log.roll.ms"] is None:
        values["log.roll.ms"] = values["log.roll.hours"] * _HOUR_MS
    if values["log.flush.interval.ms"] is None:
        values["log.flush.interval.ms"] = values["log.flush.scheduler.interval.ms"]
    if values["log.roll.jitter.ms"] is None:
        values["log.roll.jitter.ms"] = values["log.roll.jitter.hours"] * _HOUR_MS
    if "log.dirs" not in given and values["log.dir"] is not None:
        values["log.dirs"] = values["log.dir"]


# ---- Java properties (java.util.Properties.load), Kafka's server.properties ----

_BLANK = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, source: str = "<properties>") -> list[tuple[str, str, int]]:
    """`(key, value, line)` for each entry, in file order, as `Properties.load` reads them.

    Lines end at \\n, \\r or \\r\\n. A line whose first non-blank character is `#` or `!`
    is a comment (never continued). A line ending in an odd number of backslashes
    continues on the next, whose leading blanks are dropped. The key ends at the first
    unescaped `=`, `:` or blank; blanks and one `=` or `:` after it are skipped; the rest
    of the line, trailing blanks included, is the value. `\\t \\n \\r \\f \\uXXXX` are
    escapes and a backslash before any other character stands for that character.
    A malformed `\\uXXXX` raises ConfigError naming the line."""
    natural = re.split(r"\r\n|\r|\n", text)
    out: list[tuple[str, str, int]] = []
    i = 0
    while i < len(natural):
        lineno = i + 1
        line = natural[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(natural):
            line = line[:-1] + natural[i].lstrip(_BLANK)
            i += 1
        if _continues(line):
            line = line[:-1]  # a continuation at the end of the file continues into nothing
        key_end, value_start, escaped = len(line), len(line), False
        for pos, ch in enumerate(line):
            if not escaped and ch in "=:" + _BLANK:
                key_end = pos
                value_start = pos + 1
                if ch in _BLANK:  # blanks, then at most one separator, then blanks
                    rest = line[value_start:].lstrip(_BLANK)
                    if rest[:1] in ("=", ":"):
                        rest = rest[1:]
                    value_start = len(line) - len(rest)
                break
            escaped = ch == "\\" and not escaped
        value = line[value_start:].lstrip(_BLANK)
        try:
            out.append((_unescape(line[:key_end]), _unescape(value), lineno))
        except ValueError as err:
            raise ConfigError(f"{source}:{lineno} (read as Java properties): {err}") from err
    return out


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(raw: str) -> str:
    out, pos = [], 0
    while pos < len(raw):
        ch = raw[pos]
        pos += 1
        if ch != "\\" or pos == len(raw):
            out.append(ch)
            continue
        ch = raw[pos]
        pos += 1
        if ch == "u":
            digits = raw[pos:pos + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uXXXX escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            pos += 4
        else:
            out.append(_ESCAPES.get(ch, ch))
    return "".join(out)


def _from_properties(text: str, source: str, *, why: str = "") -> Config:
    entries = parse_properties(text, source)
    flat: dict[str, str] = {}
    lines: dict[str, int] = {}
    notes = []
    for key, value, lineno in entries:
        if key in flat:
            # Properties.load keeps the last, so Kafka does: say so rather than refuse.
            notes.append(f"{source}:{lineno}: {key} is given again (first on line "
                         f"{lines[key]}); the last one applies, as in Kafka")
        flat[key], lines[key] = value, lineno
    return _validate(flat, _Origin(source, "Java properties", why, lines), text=True,
                     notes=tuple(notes))


def load(path: str | Path | None) -> Config:
    """Read and validate a config file; None gives the embedded defaults.

    `*.properties` is read as Java properties and `*.toml` as TOML; any other file as
    TOML when it parses as TOML, else as Java properties."""
    if path is None:
        return from_mapping({}, source="<embedded defaults>")
    source = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"{source}: cannot read config: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: not UTF-8 text: {err}") from err
    suffix = Path(path).suffix.lower()
    if suffix == ".properties":
        return _from_properties(text, source)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        if suffix == ".toml":
            raise ConfigError(f"{source}: not valid TOML: {err}") from err
        return _from_properties(text, source, why=f"it is not valid TOML: {err}")
    flat: dict[str, Any] = {}
    _flatten(raw, "", flat, source)
    return _validate(flat, _Origin(source, "TOML"))


def describe() -> str:
    """The known keys with defaults, for `logkeeper serve --help-config`."""
    lines = []
    for key in KEYS.values():
        default = key.default
        if isinstance(default, tuple) and default and isinstance(default[0], Listener):
            default = ",".join(str(x) for x in default)
        elif isinstance(default, tuple) and default and isinstance(default[0], tuple):
            default = ",".join(":".join(x) for x in default)
        elif isinstance(default, tuple) and default and isinstance(default[0], tls.PrincipalRule):
            default = ",".join(str(x) for x in default)
        lines.append(f"{key.name:<34} default {default!r}\n    {key.doc}")
    return "\n".join(lines)
