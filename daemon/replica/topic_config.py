"""Topic configs and dynamic broker configs: names, validation, what applies, and
applying a change at runtime (docs/cluster.md "Topic and broker configs").

What applies to a topic is, per config, the first of (Kafka's ConfigHelper and
LogConfig.fromProps): the topic's override (`/config/topics/<t>` with ZooKeeper, the
config file of the log dirs standalone), this broker's dynamic config
(`/config/brokers/<id>`), the cluster's dynamic default (`/config/brokers/<default>`),
the broker's config file, Kafka's default. `TOPIC_CONFIGS` is the one table of the topic
configs logkeeper applies, each with its broker synonyms; `DYNAMIC_BROKER_KEYS` the
broker keys that may change without a restart.

`TopicConfigs` holds the overrides this broker knows and applies them: each log of a
topic gets its new `LogConfig` on its dir's worker, a leader's `min.insync.replicas`
changes what acks=all answers at once, and a retention round runs on the topic's logs
at once (a lowered retention frees a full dir without waiting for the next round). The
logs a dir opens after start-up (`log-dirs readmit`) get theirs from `configure`.

Errors: `validate_topic_configs` and `validate_broker_configs` raise `ConfigValueError`
(answered INVALID_CONFIG, 40) naming the config and the value; nothing is stored or
applied then. Applying a change to a log that fails (its dir went offline) is logged
and left to the next change or restart: the stored config is the truth.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from logstore import LogConfig
from logstore.config import (
    COMPRESSION_LEVELS,
    COMPRESSION_TYPES,
    TIMESTAMP_TYPES,
    compression_level_ok,
    compression_level_range,
)

from ..config import KEYS, Config
from ..kafka_keys import KAFKA_BROKER_KEYS
from . import quota
from .partition import on_log

log = logging.getLogger("logkeeper.configs")

# DescribeConfigs' ConfigSource ids (Kafka's DescribeConfigsResponse.ConfigSource).
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
# DescribeConfigs v3+ config types (Kafka's DescribeConfigsResponse.ConfigType).
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 5, 6, 7
TYPE_PASSWORD = 9

DEFAULT_BROKER = "<default>"  # Kafka's ZooKeeperInternals.DEFAULT_STRING


class ConfigValueError(ValueError):
    """A config name or value that cannot be used (INVALID_CONFIG); names both."""


# ---- values ----

def _parse_int(name: str, text: str, lo: int | None, hi: int | None) -> int:
    s = text.strip()
    try:
        value = int(s)
    except ValueError:
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: "
                               "Not a number") from None
    if lo is not None and value < lo:
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: Value must "
                               f"be at least {lo}")
    if hi is not None and value > hi:
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: Value must "
                               f"be no more than {hi}")
    return value


def _parse_bool(name: str, text: str) -> bool:
    s = text.strip().lower()
    if s not in ("true", "false"):
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: Expected "
                               "value to be either true or false")
    return s == "true"


def _parse_ratio(name: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: Not a "
                               "number") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: Value must "
                               "be between 0 and 1")
    return value


def _parse_policy(name: str, text: str) -> tuple[str, ...]:
    items = [v.strip() for v in text.split(",") if v.strip()]
    if not items or any(v not in ("delete", "compact") for v in items):
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: String must "
                               "be one of: compact, delete")
    return tuple(sorted(set(items)))


def _parse_compression(name: str, text: str) -> str:
    s = text.strip()
    if s not in COMPRESSION_TYPES:
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: String must "
                               f"be one of: {', '.join(COMPRESSION_TYPES)}")
    return s


def _level_key(codec: str) -> Callable[[str, str], int]:
    def parse(name: str, text: str) -> int:
        value = _parse_int(name, text, None, None)
        if not compression_level_ok(codec, value):
            raise ConfigValueError(f"Invalid value {text} for configuration {name}: Value "
                                   f"must be {compression_level_range(codec)}")
        return value

    return parse


def _parse_timestamp_type(name: str, text: str) -> str:
    s = text.strip()
    if s not in TIMESTAMP_TYPES:
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: String must "
                               f"be one of: {', '.join(TIMESTAMP_TYPES)}")
    return s


_FORMAT_VERSION = re.compile(r"(0\.(8|9|10|11)\.[0-9]+(\.[0-9]+)?|[1-3]\.[0-9]+)(-IV[0-9]+)?")


def _parse_format_version(name: str, text: str) -> str:
    s = text.strip()
    if not _FORMAT_VERSION.fullmatch(s):
        raise ConfigValueError(f"Invalid value {text} for configuration {name}: Version "
                               f"`{s}` is not a valid version")
    return s


def _false_only(refusal: Callable[[str, str], str]) -> Callable[[str, str], bool]:
    """A boolean key logkeeper takes only as false: true is refused with `refusal(name,
    text)`."""
    def parse(name: str, text: str) -> bool:
        if _parse_bool(name, text):
            raise ConfigValueError(refusal(name, text))
        return False

    return parse


# Kafka's answer on a broker with remote.log.storage.system.enable=false.
_parse_remote_storage = _false_only(lambda name, text: (
    "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
    "with remote log storage."))
_parse_preallocate = _false_only(lambda name, text: (
    f"Invalid value {text} for configuration {name}: logkeeper does not preallocate "
    "segment files (false is supported)"))


def _parse_throttled(name: str, text: str) -> tuple[str, ...]:
    try:
        return quota.parse_throttled_replicas(name, text)
    except quota.ThrottledReplicasError as err:
        raise ConfigValueError(str(err)) from None


@dataclass(frozen=True)
class TopicKey:
    """One topic config: its type, its broker synonyms with their unit in ms (or 1),
    how a string is checked, Kafka's default and the LogConfig field it sets."""

    name: str
    kind: int  # TYPE_*
    synonyms: tuple[tuple[str, int], ...]
    parse: Callable[[str, str], Any]
    default: Any
    field: str | None  # LogConfig field; None for configs read elsewhere


def _int_key(lo: int | None, hi: int | None = None) -> Callable[[str, str], int]:
    return lambda name, text: _parse_int(name, text, lo, hi)


_H, _M = 3600 * 1000, 60 * 1000
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

TOPIC_CONFIGS: dict[str, TopicKey] = {k.name: k for k in (
    TopicKey("cleanup.policy", TYPE_LIST, (("log.cleanup.policy", 1),), _parse_policy,
             ("delete",), "compacted"),
    TopicKey("retention.ms", TYPE_LONG, (("log.retention.ms", 1), ("log.retention.minutes", _M),
                                         ("log.retention.hours", _H)),
             _int_key(-1, _LONG_MAX), 7 * 24 * _H, "retention_ms"),
    TopicKey("retention.bytes", TYPE_LONG, (("log.retention.bytes", 1),),
             _int_key(-1, _LONG_MAX), -1, "retention_bytes"),
    TopicKey("segment.bytes", TYPE_INT, (("log.segment.bytes", 1),), _int_key(14, _INT_MAX),
             1 << 30, "segment_bytes"),
    TopicKey("segment.ms", TYPE_LONG, (("log.roll.ms", 1), ("log.roll.hours", _H)),
             _int_key(1, _LONG_MAX), 7 * 24 * _H, "segment_ms"),
    # fsync policies (Kafka's defaults: never; replication keeps the records).
    TopicKey("flush.messages", TYPE_LONG, (("log.flush.interval.messages", 1),),
             _int_key(1, _LONG_MAX), _LONG_MAX, "flush_messages"),
    TopicKey("flush.ms", TYPE_LONG, (("log.flush.interval.ms", 1),
                                     ("log.flush.scheduler.interval.ms", 1)),
             _int_key(0, _LONG_MAX), _LONG_MAX, "flush_ms"),
    TopicKey("segment.jitter.ms", TYPE_LONG, (("log.roll.jitter.ms", 1),
                                              ("log.roll.jitter.hours", _H)),
             _int_key(0, _LONG_MAX), 0, "segment_jitter_ms"),
    TopicKey("min.insync.replicas", TYPE_INT, (("min.insync.replicas", 1),),
             _int_key(1, _INT_MAX), 1, None),
    TopicKey("max.message.bytes", TYPE_INT, (("message.max.bytes", 1),),
             _int_key(0, _INT_MAX), 1024 * 1024 + 12, "max_message_bytes"),
    TopicKey("unclean.leader.election.enable", TYPE_BOOLEAN,
             (("unclean.leader.election.enable", 1),), _parse_bool, False, None),
    TopicKey("index.interval.bytes", TYPE_INT, (("log.index.interval.bytes", 1),),
             _int_key(0, _INT_MAX), 4096, "index_interval_bytes"),
    # The preallocated size of a new segment's offset and time indexes: a full one rolls.
    TopicKey("segment.index.bytes", TYPE_INT, (("log.index.size.max.bytes", 1),),
             _int_key(4, _INT_MAX), 10 * 1024 * 1024, "max_index_bytes"),
    # Kept and described with no effect, as in Kafka 3.x: the record format is always
    # v2 there (message.format.version is ignored from inter.broker.protocol 3.0).
    TopicKey("message.format.version", TYPE_STRING, (), _parse_format_version, "3.0-IV1", None),
    # false: a consumer's Fetch below v4, which needs magic 0/1 messages, is refused
    # (daemon.api.handlers: Handlers._old_fetch_refusal).
    TopicKey("message.downconversion.enable", TYPE_BOOLEAN,
             (("log.message.downconversion.enable", 1),), _parse_bool, True, None),
    # "producer" keeps batches as their producers wrote them; a codec has the leader
    # recompress the others (logstore.records.recompress).
    TopicKey("compression.type", TYPE_STRING, (("compression.type", 1),), _parse_compression,
             "producer", "compression_type"),
    *(TopicKey(f"compression.{codec}.level", TYPE_INT, ((f"compression.{codec}.level", 1),),
               _level_key(codec), COMPRESSION_LEVELS[codec][2], f"compression_{codec}_level")
      for codec in COMPRESSION_LEVELS),
    TopicKey("message.timestamp.type", TYPE_STRING, (("log.message.timestamp.type", 1),),
             _parse_timestamp_type, "CreateTime", "timestamp_type"),
    # How far a CreateTime timestamp may be from the leader's clock (KIP-937); each
    # left at Long.MAX_VALUE falls back to the deprecated difference key.
    *(TopicKey(f"message.timestamp.{which}.max.ms", TYPE_LONG,
               ((f"log.message.timestamp.{which}.max.ms", 1),), _int_key(0, _LONG_MAX),
               _LONG_MAX, f"timestamp_{which}_max_ms")
      for which in ("before", "after", "difference")),
    # Kept, described and handed to LogConfig when it has the field: the log cleaner's.
    TopicKey("delete.retention.ms", TYPE_LONG, (("log.cleaner.delete.retention.ms", 1),),
             _int_key(0, _LONG_MAX), 24 * _H, "delete_retention_ms"),
    TopicKey("min.cleanable.dirty.ratio", TYPE_DOUBLE,
             (("log.cleaner.min.cleanable.ratio", 1),), _parse_ratio, 0.5,
             "min_cleanable_dirty_ratio"),
    TopicKey("min.compaction.lag.ms", TYPE_LONG, (("log.cleaner.min.compaction.lag.ms", 1),),
             _int_key(0, _LONG_MAX), 0, "min_compaction_lag_ms"),
    TopicKey("max.compaction.lag.ms", TYPE_LONG, (("log.cleaner.max.compaction.lag.ms", 1),),
             _int_key(1, _LONG_MAX), _LONG_MAX, "max_compaction_lag_ms"),
    # Tiered storage (KIP-405), which logkeeper does not have: a topic may say so, as on a
    # Kafka broker with remote.log.storage.system.enable=false, where the local.* and
    # remote.log.* keys are taken and have no effect; remote.storage.enable=true is
    # refused with that broker's message. Topic-cloning tools send them all.
    TopicKey("remote.storage.enable", TYPE_BOOLEAN, (), _parse_remote_storage, False, None),
    TopicKey("local.retention.ms", TYPE_LONG, (), _int_key(-2, _LONG_MAX), -2, None),
    TopicKey("local.retention.bytes", TYPE_LONG, (), _int_key(-2, _LONG_MAX), -2, None),
    TopicKey("remote.log.copy.disable", TYPE_BOOLEAN, (), _parse_bool, False, None),
    TopicKey("remote.log.delete.on.disable", TYPE_BOOLEAN, (), _parse_bool, False, None),
    # Segment files are not preallocated (Kafka's default, false; true is refused).
    TopicKey("preallocate", TYPE_BOOLEAN, (), _parse_preallocate, False, None),
    # Replication throttles (daemon.replica.quota): topic-only, no broker synonym.
    TopicKey(quota.LEADER_REPLICAS, TYPE_LIST, (), _parse_throttled, (), None),
    TopicKey(quota.FOLLOWER_REPLICAS, TYPE_LIST, (), _parse_throttled, (), None),
)}

# Kafka topic configs logkeeper knows but does not apply: refused with a clear message
# rather than stored and silently ignored.
# file.delete.delay.ms: logkeeper unlinks a deleted segment's files at once (a reader
# that has them open keeps reading), and a full disk gets its space back at once.
UNSUPPORTED_TOPIC_CONFIGS = frozenset({"file.delete.delay.ms"})

# Broker keys that change without a restart (a subset of Kafka's
# DynamicBrokerConfig.AllDynamicConfigs: the log defaults of the topic configs above,
# and the replication throttles' rates and the replica moves' one, which exist only as
# dynamic configs).
# Dynamic broker keys that are no topic config's synonym and no key of the config file.
DYNAMIC_ONLY_BROKER_KEYS = (quota.LEADER_RATE, quota.FOLLOWER_RATE, quota.ALTER_LOG_DIRS_RATE)
DYNAMIC_BROKER_KEYS: dict[str, TopicKey] = {
    syn: k for k in TOPIC_CONFIGS.values() for syn, _ in k.synonyms}
DYNAMIC_BROKER_KEYS.update({name: TopicKey(name, TYPE_LONG, ((name, 1),), _int_key(0, _LONG_MAX),
                                           quota.UNBOUNDED, None)
                            for name in DYNAMIC_ONLY_BROKER_KEYS})
# Broker keys of the config file that change at runtime too (Kafka's
# DynamicProducerStateManagerConfig): transaction verification on or off
# (daemon.replica.txn_verification).
TXN_VERIFICATION = "transaction.partition.verification.enable"
DYNAMIC_BROKER_KEYS[TXN_VERIFICATION] = TopicKey(
    TXN_VERIFICATION, TYPE_BOOLEAN, ((TXN_VERIFICATION, 1),), _parse_bool, True, None)
_BROKER_UNITS = {syn: unit for k in TOPIC_CONFIGS.values() for syn, unit in k.synonyms}


def to_text(key: TopicKey, value: Any) -> str:
    """A value as Kafka's ConfigDef.convertToString writes it."""
    if key.kind == TYPE_BOOLEAN:
        return "true" if value else "false"
    if key.kind == TYPE_LIST:
        return ",".join(value)
    return str(value)


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check a topic's overrides (Kafka's LogConfig.validate); the same mapping back,
    each value trimmed. ConfigValueError names the first bad one."""
    out = {}
    for name, value in configs.items():
        if name in UNSUPPORTED_TOPIC_CONFIGS:
            raise ConfigValueError(f"Topic config {name} is not supported by logkeeper "
                                   f"(supported: {', '.join(sorted(TOPIC_CONFIGS))})")
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise ConfigValueError(f"Unknown topic config name: {name}")
        if not isinstance(value, str):
            raise ConfigValueError(f"Invalid value {value} for configuration {name}: a "
                                   "value is required")
        key.parse(name, value)
        out[name] = value.strip()
    lags = [int(out[n]) for n in ("min.compaction.lag.ms", "max.compaction.lag.ms") if n in out]
    if len(lags) == 2 and lags[0] > lags[1]:
        raise ConfigValueError(f"conflict topic config setting min.compaction.lag.ms ({lags[0]}) "
                               f"> max.compaction.lag.ms ({lags[1]})")
    return out


# A listener's keystore and truststore, changed without a restart (a certificate
# rotation): Kafka's reconfigurable SSL configs, as listener.name.<listener>.<key> on one
# broker. Their password-type companions are not taken: logkeeper keeps no secret in
# ZooKeeper (Kafka encrypts them with password.encoder.secret), so a rotated keystore
# keeps its password.
DYNAMIC_TLS_KEYS = ("ssl.keystore.location", "ssl.keystore.type", "ssl.truststore.location",
                    "ssl.truststore.type")
DYNAMIC_TLS_SECRETS = ("ssl.keystore.password", "ssl.key.password", "ssl.truststore.password",
                       "ssl.keystore.key", "ssl.keystore.certificate.chain",
                       "ssl.truststore.certificates")
_LISTENER_KEY = re.compile(r"listener\.name\.([^.]+)\.(ssl\..+)")


def listener_tls_key(name: str) -> tuple[str, str] | None:
    """(listener name, ssl key) of a `listener.name.<listener>.ssl.*` key, else None."""
    m = _LISTENER_KEY.fullmatch(name)
    return (m.group(1).upper(), m.group(2)) if m else None


def validate_broker_configs(configs: Mapping[str, str | None], static: Config) -> dict[str, str]:
    """Check dynamic broker configs (Kafka's DynamicBrokerConfig.validate)."""
    out = {}
    for name, value in configs.items():
        key = DYNAMIC_BROKER_KEYS.get(name)
        tls_key = listener_tls_key(name)
        if tls_key is not None and tls_key[1] in DYNAMIC_TLS_SECRETS:
            raise ConfigValueError(
                f"{name} is a password: logkeeper keeps no secret in ZooKeeper (Kafka would "
                "need password.encoder.secret); give the new keystore the password the "
                "config file has, or change it there and restart")
        if tls_key is not None and tls_key[1] in DYNAMIC_TLS_KEYS:
            if not isinstance(value, str) or not value.strip():
                raise ConfigValueError(f"Invalid value {value} for configuration {name}: a "
                                       "value is required")
            out[name] = value.strip()
            continue
        if key is None:
            if name in static.values or name in KAFKA_BROKER_KEYS:
                raise ConfigValueError(f"Cannot update these configs dynamically: [{name}]")
            raise ConfigValueError(f"Unknown broker config name: {name}")
        if not isinstance(value, str):
            raise ConfigValueError(f"Invalid value {value} for configuration {name}: a "
                                   "value is required")
        key.parse(name, value)
        out[name] = value.strip()
    return out


# ---- what applies ----

@dataclass(frozen=True)
class Entry:
    """One described config: its value, where it came from, and the chain (synonyms)."""

    name: str
    value: str | None
    source: int
    kind: int
    synonyms: tuple[tuple[str, str | None, int], ...]  # (name, value, source), first wins
    read_only: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == SOURCE_DEFAULT


class Layers:
    """The dynamic broker configs (per broker and cluster default) over the static file."""

    def __init__(self, static: Config, broker_id: int):
        self.static = static
        self.broker_id = broker_id
        self.dynamic: dict[str, str] = {}  # /config/brokers/<id>
        self.dynamic_default: dict[str, str] = {}  # /config/brokers/<default>

    def broker_chain(self, name: str) -> list[tuple[str, str | None, int]]:
        """(synonym, value, source) for broker key `name` and its synonyms, in the order
        they win (Kafka's ConfigHelper.configSynonyms)."""
        key = DYNAMIC_BROKER_KEYS.get(name)
        names = [s for s, _ in key.synonyms] if key is not None else [name]
        names = names[names.index(name):] if name in names else names
        chain: list[tuple[str, str | None, int]] = []
        for layer, source in ((self.dynamic, SOURCE_DYNAMIC_BROKER),
                              (self.dynamic_default, SOURCE_DYNAMIC_DEFAULT_BROKER)):
            chain += [(n, layer[n], source) for n in names if n in layer]
        for n in names:
            if n in self.static.given:
                chain.append((n, _static_text(n, self.static.given[n]), SOURCE_STATIC_BROKER))
        # Kafka lists the default of every synonym that has one.
        for n in names:
            default = _static_default(self.static, n)
            if default is not None:
                chain.append((n, default, SOURCE_DEFAULT))
        return chain

    def topic_value(self, key: TopicKey) -> tuple[Any, list[tuple[str, str | None, int]]]:
        """The broker's value for topic config `key` and the chain it came from."""
        if not key.synonyms:
            return key.default, []
        chain = self.broker_chain(key.synonyms[0][0])
        for n, text, _source in chain:
            if text is None:
                continue
            unit = _BROKER_UNITS.get(n, 1)
            if unit != 1:
                return key.parse(n, text) * unit, chain
            if key.synonyms[0][0] == n:
                return key.parse(n, text), chain
        return key.default, chain


def _static_text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):  # pairs: listener.security.protocol.map
        return ",".join(":".join(v) if isinstance(v, tuple) else str(v) for v in value)
    return str(value)


def _static_default(static: Config, name: str) -> str | None:
    """Kafka's default for broker key `name` as text (None: it has none, e.g. the
    minutes of log.retention.minutes)."""
    k = KEYS.get(name)
    if k is not None:
        return _static_text(name, k.default)
    key = DYNAMIC_BROKER_KEYS.get(name)
    if key is not None and key.synonyms[0][0] == name:
        return to_text(key, key.default)
    return None


def effective(layers: Layers, overrides: Mapping[str, str]) -> dict[str, Entry]:
    """Every topic config of a topic with `overrides`, as DescribeConfigs shows it."""
    out = {}
    for name, key in TOPIC_CONFIGS.items():
        value, chain = layers.topic_value(key)
        synonyms = list(chain)
        if name in overrides:
            value = key.parse(name, overrides[name])
            synonyms.insert(0, (name, overrides[name], SOURCE_TOPIC))
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
        out[name] = Entry(name, to_text(key, value), source, key.kind, tuple(synonyms))
    return out


def typed(layers: Layers, overrides: Mapping[str, str]) -> dict[str, Any]:
    """Every topic config's value, typed."""
    out = {}
    for name, key in TOPIC_CONFIGS.items():
        value, _ = layers.topic_value(key)
        out[name] = key.parse(name, overrides[name]) if name in overrides else value
    return out


_LOG_FIELDS = {f.name for f in dataclasses.fields(LogConfig)}


def log_config(base: LogConfig, values: Mapping[str, Any]) -> LogConfig:
    """`base` with the typed topic configs that LogConfig carries."""
    changes: dict[str, Any] = {}
    for name, key in TOPIC_CONFIGS.items():
        if key.field is None or key.field not in _LOG_FIELDS:
            continue
        value = values[name]
        if key.field == "compacted":  # both fields the policy sets: compact, and delete too
            changes.update(LogConfig.policy_fields(value))
            continue
        if key.field == "retention_ms" and value < 0:
            value = -1
        changes[key.field] = value
    return dataclasses.replace(base, **changes)


def broker_entries(layers: Layers) -> list[Entry]:
    """The broker's effective config, as DescribeConfigs for BROKER shows it: every key
    logkeeper reads (config.KEYS), read-only unless it may change at runtime."""
    out = []
    for name in KEYS:
        chain = layers.broker_chain(name)
        current = layers.static.values.get(name)
        if name in DYNAMIC_BROKER_KEYS:
            for n, text, source in chain:
                if source in (SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER) and n == name:
                    current = text
                    break
        value = _static_text(name, current)
        source = next((s for n, _, s in chain if n == name), SOURCE_DEFAULT)
        key = DYNAMIC_BROKER_KEYS.get(name)
        kind = key.kind if key is not None else _kind_of(KEYS[name].kind)
        out.append(Entry(name, value, source, kind, tuple(chain),
                         read_only=name not in DYNAMIC_BROKER_KEYS))
    # A listener's dynamic keystore and truststore: listed where set.
    for name, value in sorted(layers.dynamic.items()):
        if listener_tls_key(name) is not None:
            out.append(Entry(name, value, SOURCE_DYNAMIC_BROKER, TYPE_STRING,
                             ((name, value, SOURCE_DYNAMIC_BROKER),)))
    # The throttle rates exist only as dynamic configs: listed where set, as Kafka does.
    for name in DYNAMIC_ONLY_BROKER_KEYS:
        chain = [link for link in layers.broker_chain(name) if link[2] != SOURCE_DEFAULT]
        if chain:
            out.append(Entry(name, chain[0][1], chain[0][2], TYPE_LONG, tuple(chain)))
    return out


def _kind_of(kind: type) -> int:
    return {int: TYPE_LONG, bool: TYPE_BOOLEAN, list: TYPE_LIST}.get(kind, TYPE_STRING)


# ---- incremental changes (IncrementalAlterConfigs) ----

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def apply_ops(current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]],
              kind_of: Callable[[str], int | None], defaults: Callable[[str], str]
              ) -> dict[str, str]:
    """Kafka's prepareIncrementalConfigs: SET, DELETE, and APPEND/SUBTRACT on list
    configs (starting from the value that applies when the entity has none)."""
    out = dict(current)
    for name, op, value in ops:
        if op == OP_SET:
            if value is None:
                raise ConfigValueError(f"Null value not supported for: {name}")
            out[name] = value
        elif op == OP_DELETE:
            out.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if kind_of(name) != TYPE_LIST:
                raise ConfigValueError(f"Config value append is not allowed for config key: "
                                       f"{name}" if op == OP_APPEND else
                                       f"Config value subtract is not allowed for config key: "
                                       f"{name}")
            items = [v for v in (out.get(name) or defaults(name)).split(",") if v]
            given = [v.strip() for v in (value or "").split(",") if v.strip()]
            if op == OP_APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            out[name] = ",".join(items)
        else:
            raise ConfigValueError(f"Unknown operation {op} for config {name}")
    return out


# ---- the runtime side ----

class TopicConfigs:
    """The overrides and dynamic broker configs this broker knows, and their application
    to its logs. Event loop only.

    `hosted(topic)` lists the partitions held here of a topic: objects with `tp`, `log`
    and `dir`; `run(dir, fn, *args)` runs `fn` on a dir's worker; `set_min_isr(tp, n)`
    tells a leader's ISR state (None standalone). `quotas`, the replication throttles,
    follow every change of the configs that name them."""

    def __init__(self, static: Config, *,
                 hosted: Callable[[str | None], list[Any]],
                 run: Callable[..., Awaitable[Any]],
                 set_min_isr: Callable[[Any, int], None] | None = None,
                 quotas: quota.ReplicationQuotas | None = None):
        self.static = static
        self.quotas = quotas
        self.layers = Layers(static, static.broker_id)
        # Called when this broker's dynamic config changes (the listeners' TLS).
        self.on_broker_change: Callable[[], None] | None = None
        self.base = static.log_config()
        self.topics: dict[str, dict[str, str]] = {}
        self.hosted = hosted
        self.run = run
        self.set_min_isr = set_min_isr

    def overrides(self, topic: str) -> dict[str, str]:
        return dict(self.topics.get(topic, {}))

    def values(self, topic: str) -> dict[str, Any]:
        return typed(self.layers, self.topics.get(topic, {}))

    def log_config(self, topic: str) -> LogConfig:
        return log_config(self.base, self.values(topic))

    def min_isr(self, topic: str) -> int:
        return int(self.values(topic)["min.insync.replicas"])

    def unclean(self, topic: str) -> bool:
        return bool(self.values(topic)["unclean.leader.election.enable"])

    def describe(self, topic: str) -> dict[str, Entry]:
        return effective(self.layers, self.topics.get(topic, {}))

    def broker_value(self, name: str) -> Any:
        """Dynamic broker key `name`'s value here, typed (its default when not set)."""
        key = DYNAMIC_BROKER_KEYS[name]
        for n, text, source in self.layers.broker_chain(name):
            if n == name and text is not None and source != SOURCE_DEFAULT:
                try:
                    return key.parse(n, text)
                except ConfigValueError as err:  # stored by hand, not through a broker
                    log.warning("%s; %s applies", err, to_text(key, key.default))
        return key.default

    def configure_quotas(self) -> None:
        """Point the replication throttles at what the configs now say."""
        if self.quotas is not None:
            self.quotas.configure(self.topics, self.broker_value)

    def dynamic_brokers(self) -> dict[str, dict[str, str]]:
        """The dynamic broker configs this broker keeps: the default's and its own."""
        return {e: self.broker_dynamic(e) for e in (DEFAULT_BROKER, str(self.static.broker_id))}

    def broker_dynamic(self, entity: str) -> dict[str, str]:
        layer = self.layers.dynamic_default if entity == DEFAULT_BROKER else self.layers.dynamic
        return dict(layer)

    def load(self, topics: Mapping[str, Mapping[str, str]],
             brokers: Mapping[str, Mapping[str, str]]) -> None:
        """Everything stored (start-up); apply with `apply_all`."""
        self.topics = {t: dict(c) for t, c in topics.items() if c}
        self.layers.dynamic = dict(brokers.get(str(self.static.broker_id), {}))
        self.layers.dynamic_default = dict(brokers.get(DEFAULT_BROKER, {}))
        self.configure_quotas()
        if self.on_broker_change is not None:
            self.on_broker_change()

    async def set_topic(self, topic: str, overrides: Mapping[str, str]) -> None:
        """`topic`'s overrides are now `overrides`: apply them to its logs here (nothing
        to do when they did not change)."""
        before = self.topics.get(topic, {})
        if dict(before) == dict(overrides):
            return
        if overrides:
            self.topics[topic] = dict(overrides)
        else:
            self.topics.pop(topic, None)
        log.info("topic %s: config overrides %s", topic, dict(overrides) or "none")
        self.configure_quotas()
        await self.apply(topic)

    async def set_broker(self, entity: str, configs: Mapping[str, str]) -> None:
        """This broker's (or the cluster default) dynamic config is now `configs`."""
        if entity == DEFAULT_BROKER:
            self.layers.dynamic_default = dict(configs)
        elif entity == str(self.static.broker_id):
            self.layers.dynamic = dict(configs)
        else:
            return
        log.info("dynamic broker config %s: %s", entity, dict(configs) or "none")
        self.configure_quotas()
        if self.on_broker_change is not None:
            self.on_broker_change()
        await self.apply(None)

    def forget(self, topic: str) -> None:
        self.topics.pop(topic, None)
        self.configure_quotas()

    async def configure(self, d: Any) -> None:
        """Give every log of dir `d`, opened after start-up (a re-admitted dir), the config
        that applies to its topic, as `apply` gave the logs start-up opened; retention
        follows at its round. One call on the dir's worker, queued at once: made before
        the logs are served (before `ReplicaManager.adopt`), it runs before any call on
        them. Raises what that call raises (the dir failing again)."""
        ld = d.logdir
        await self.run(d, _configure_logs, ld, {tp: self.log_config(tp.topic) for tp in ld.logs})

    async def apply(self, topic: str | None, why: str = "after a config change") -> None:
        """Give `topic`'s logs here (every topic's with None) the config that applies,
        set each leader's min.insync.replicas, then run retention on them at once
        (`why` is said with what retention deleted)."""
        now = int(time.time() * 1000)
        for p in self.hosted(topic):
            if p.log is None or p.dir.logdir is None:
                continue
            cfg = self.log_config(p.tp.topic)
            try:
                deleted = await on_log(self.run, p, _apply_to_log, p.tp.topic, cfg, now)
            except Exception as err:  # noqa: BLE001 - the stored config is the truth
                log.warning("applying the config of %s failed: %s: %s", p.tp,
                            type(err).__name__, err)
                continue
            if deleted:
                log.info("%s: retention deleted %d segments %s", p.tp, deleted, why)
            p.high_watermark = p.log.high_watermark
            if self.set_min_isr is not None:
                self.set_min_isr(p.tp, self.min_isr(p.tp.topic))


def _apply_to_log(logdir: Any, lg: Any, topic: str, cfg: LogConfig, now: int) -> int:
    """On the dir's worker: the log's new config, then a retention pass."""
    _set_config(logdir, lg, topic, cfg)
    return lg.apply_retention(now, replicated=True)


def _configure_logs(logdir: Any, configs: Mapping[Any, LogConfig]) -> None:
    """On the dir's worker: each of the LogDir's logs its config (no disk IO)."""
    for tp, cfg in configs.items():
        _set_config(logdir, logdir.logs[tp], tp.topic, cfg)


def _set_config(logdir: Any, lg: Any, topic: str, cfg: LogConfig) -> None:
    logdir.topic_configs[topic] = cfg  # what the dir's new logs of `topic` are opened with
    lg.update_config(cfg)
