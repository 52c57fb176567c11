"""The daemon's configuration: TOML whose keys are Kafka's broker property names.

`load(path)` reads a TOML file (or, with no path, the embedded defaults: three log
dirs under ./data, no ZooKeeper, Kafka on 127.0.0.1:9092, /metrics and /healthz on
127.0.0.1:9308) and returns a frozen `Config` keyed by the Kafka property names
(`cfg["log.segment.bytes"]`), with properties for the few read everywhere
(`broker_id`, `log_dirs`, `listener`, `http_listen`, `standalone`).

Keys may be written as TOML dotted keys (`log.dirs = [...]`), as quoted flat keys
(`"log.dirs" = [...]`) or inside tables (`[log]` then `dirs = ...`); all three name
the same Kafka property. Every key is checked against `KEYS`, the one
table of known properties with their types, Kafka's defaults and validators.

Errors: an unknown key, a value of the wrong type or out of range, or a file that is
not valid TOML raises `ConfigError` whose message names the file and the key (and the
line, for TOML syntax errors). Nothing is started before the whole file validates.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from logstore import LogConfig


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
    if isinstance(value, tuple) and value and all(isinstance(v, Listener) for v in value):
        value = [str(v) for v in value]  # Config.replace hands back parsed listeners
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ValueError(f"expected \"PLAINTEXT://host:port\", got {value!r}")
    if len(items) != 1:
        # Kafka requires one listener name per endpoint and maps names to security
        # protocols; this daemon speaks PLAINTEXT only, so there is one endpoint.
        raise ValueError(f"exactly one PLAINTEXT listener is supported, got {len(items)}")
    out = []
    for item in items:
        match = _LISTENER.match(item)
        if not match or match.group("name") != "PLAINTEXT":
            raise ValueError(f"{item!r} is not PLAINTEXT://host:port (the only protocol served)")
        host, port = parse_host_port(match.group("addr"))
        out.append(Listener("PLAINTEXT", host, port))
    return tuple(out)


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
    default: Any
    check: Callable[[Any], Any]
    doc: str


# Kafka's defaults (KafkaConfig / ServerLogConfig), except where the doc says why not.
KEYS: dict[str, Key] = {k.name: k for k in (
    Key("broker.id", 0, _int(0, 2**31 - 1),
        "this broker's id (Kafka's default -1 asks ZooKeeper for one; standalone uses 0)"),
    Key("log.dirs", DEFAULT_LOG_DIRS, _log_dirs, "log directories, one per disk"),
    Key("listeners", (Listener("PLAINTEXT", "127.0.0.1", 9092),), _listeners,
        "the Kafka protocol endpoint, PLAINTEXT://host:port"),
    Key("zookeeper.connect", None, _zookeeper,
        "ZooKeeper connect string; unset = standalone (this broker leads everything)"),
    Key("zookeeper.session.timeout.ms", 18000, _int(1000, 600000),
        "ZooKeeper session timeout; after an expiry the broker registers again"),
    Key("log.segment.bytes", 1024 * 1024 * 1024, _int(14, 2**31 - 1), "segment size"),
    Key("log.roll.ms", 7 * 24 * 3600 * 1000, _int(1), "roll a segment this old"),
    Key("log.retention.ms", 7 * 24 * 3600 * 1000, _int(-1), "-1 keeps forever"),
    Key("log.retention.bytes", -1, _int(-1), "per partition; -1 = no limit"),
    Key("log.retention.check.interval.ms", 300000, _int(1), "how often retention runs"),
    Key("log.index.interval.bytes", 4096, _int(0, 2**31 - 1), "bytes between index entries"),
    Key("message.max.bytes", 1024 * 1024 + 12, _int(0, 2**31 - 1), "largest batch accepted"),
    Key("num.partitions", 1, _int(1, 100000), "partitions of auto-created topics"),
    Key("default.replication.factor", 1, _int(1, 32767), "replication of auto-created topics"),
    Key("auto.create.topics.enable", True, _bool, "create topics named in Metadata requests"),
    Key("socket.request.max.bytes", 100 * 1024 * 1024, _int(1, 2**31 - 1),
        "largest request frame; bigger ones are refused before their body is read"),
    Key("http.listen", DEFAULT_HTTP_LISTEN, _host_port,
        "host:port of /metrics and /healthz; \"\" turns the endpoint off"),
    # Log-dir health (daemon.health; ARCHITECTURE.md, "Log dir states").
    Key("log.dir.reserve.bytes", DEFAULT_RESERVE_BYTES, _int(0),
        "reserve file written in every ONLINE dir, deleted when it saturates"),
    Key("log.dir.resume.free.bytes", None, _int(0),
        "free space above which a SATURATED dir is ONLINE again (default 2 x reserve)"),
    Key("log.dir.min.free.bytes", 0, _int(0),
        "free space under which a dir is SATURATED before writes fail (0: on ENOSPC only)"),
    Key("log.dir.probe.interval.ms", 1000, _int(1), "availability probe period"),
    Key("log.dir.probe.timeout.ms", 5000, _int(1), "a probe slower than this = OFFLINE"),
    Key("log.dir.slow.action", "report", _choice(*SLOW_ACTIONS),
        "what a persistently slow disk triggers: \"report\" (DEGRADED) or \"offline\""),
    Key("log.dir.slow.min.ms", 50, _int(1),
        "probe latency under which no disk counts as slow, whatever its peers do"),
    Key("log.dir.slow.factor", 5, _int(2), "slow = this many times the peers' median latency"),
)}


@dataclass(frozen=True)
class Config:
    """Validated settings, keyed by Kafka property name in `values`."""

    values: Mapping[str, Any]
    source: str  # the file it came from, or "<embedded defaults>"

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def log_dirs(self) -> tuple[str, ...]:
        return self.values["log.dirs"]

    @property
    def listener(self) -> Listener:
        return self.values["listeners"][0]

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
            index_interval_bytes=self["log.index.interval.bytes"],
            retention_ms=self["log.retention.ms"],
            retention_bytes=self["log.retention.bytes"],
            max_message_bytes=self["message.max.bytes"],
        )

    def replace(self, **changes: Any) -> Config:
        """A copy with `{"dotted.key": value}` style changes, validated like a file."""
        raw = dict(self.values)
        raw.update(changes)
        return from_mapping(raw, source=self.source)


def _flatten(table: Mapping[str, Any], prefix: str, out: dict[str, Any], source: str) -> None:
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, name + ".", out, source)
            continue
        if name in out:
            raise ConfigError(f"{source}: key {name!r} is given twice")
        out[name] = value


def from_mapping(raw: Mapping[str, Any], *, source: str = "<mapping>") -> Config:
    """Validate `{"dotted.key": value}` (or nested tables) into a Config."""
    flat: dict[str, Any] = {}
    _flatten(raw, "", flat, source)
    unknown = sorted(set(flat) - set(KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], KEYS, n=1)
        hint = (f"; did you mean {close[0]!r}?" if close
                else " (`logkeeper serve --help-config` lists the keys)")
        raise ConfigError(f"{source}: unknown key {unknown[0]!r}{hint}")
    values: dict[str, Any] = {}
    for name, key in KEYS.items():
        if name not in flat:
            values[name] = key.default
            continue
        value = flat[name]
        try:
            values[name] = key.check(value)
        except ValueError as err:
            raise ConfigError(f"{source}: {name} = {value!r}: {err}") from err
    if values["log.dir.resume.free.bytes"] is None:
        values["log.dir.resume.free.bytes"] = max(2 * values["log.dir.reserve.bytes"],
                                                  2 * values["log.dir.min.free.bytes"])
    if values["log.dir.resume.free.bytes"] <= values["log.dir.min.free.bytes"] > 0:
        raise ConfigError(
            f"{source}: log.dir.resume.free.bytes = {values['log.dir.resume.free.bytes']} "
            f"must be above log.dir.min.free.bytes = {values['log.dir.min.free.bytes']}, "
            "or a dir would flap between SATURATED and ONLINE")
    if values["message.max.bytes"] + 1024 > values["socket.request.max.bytes"]:
        raise ConfigError(
            f"{source}: socket.request.max.bytes = {values['socket.request.max.bytes']} "
            f"cannot carry a batch of message.max.bytes = {values['message.max.bytes']}")
    try:
        LogConfig(segment_bytes=values["log.segment.bytes"])
    except ValueError as err:  # one more guard: LogConfig has its own floor
        raise ConfigError(f"{source}: log.segment.bytes: {err}") from err
    return Config(values=MappingProxyType(values), source=source)


def load(path: str | Path | None) -> Config:
    """Read and validate a TOML file; None gives the embedded defaults."""
    if path is None:
        return from_mapping({}, source="<embedded defaults>")
    source = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"{source}: cannot read config: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: not UTF-8 text: {err}") from err
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source}: not valid TOML: {err}") from err
    return from_mapping(raw, source=source)


def describe() -> str:
    """The known keys with defaults, for `logkeeper serve --help-config`."""
    lines = []
    for key in KEYS.values():
        default = key.default
        if isinstance(default, tuple) and default and isinstance(default[0], Listener):
            default = ",".join(str(x) for x in default)
        lines.append(f"{key.name:<34} default {default!r}\n    {key.doc}")
    return "\n".join(lines)
