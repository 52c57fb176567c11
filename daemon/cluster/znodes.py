"""Every ZooKeeper path logkeeper's cluster side uses, and the JSON in each znode.

The layouts are ZooKeeper-mode Kafka 3.9's (`kafka.zk.ZkData`), so a Kafka controller or
Kafka's tools can read what logkeeper writes and the other way round. Encoders write
compact JSON (no spaces, UTF-8, keys in the order Kafka's encoders list them, which is
the order of docs/formats.md's examples); decoders read by key, accept the older versions
Kafka still reads, and ignore keys they do not know.

Errors: a decoder given bytes that are not the expected JSON (not UTF-8, not JSON, a
missing key, a value of the wrong type, an unsupported version) raises `ZnodeError`,
a ValueError whose message names the znode's path and what was wrong. Encoders raise
ValueError for values Kafka could not read back (a topic id that is not 16 bytes, ...).
The znode's stat (zkVersion = partition epoch, czxid = broker epoch) is never part of the
JSON: callers keep it next to the decoded value.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from logstore import TopicPartition

# -- paths ------------------------------------------------------------------------------

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
# Bumped by each broker that asks for a generated id (broker.id -1): its new version.
BROKER_SEQUENCE_ID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CLIENTS = "/config/clients"  # client quotas, by sanitized client-id
CONFIG_USERS = "/config/users"  # SCRAM credentials, by sanitized user name
CONFIG_CHANGES = "/config/changes"
# ACLs (Kafka's ZkAclStore): LITERAL patterns under /kafka-acl/<Type>/<name>, PREFIXED ones
# under /kafka-acl-extended/prefixed/<Type>/<name>; a change of each kind is announced
# under its own notification path.
ACL = "/kafka-acl"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
CONFIG_CHANGE_PREFIX = "config_change_"
DEFAULT_BROKER_ENTITY = "<default>"  # Kafka's ZooKeeperInternals.DEFAULT_STRING
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"  # the older tools' way to ask
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
CLUSTER_ID = "/cluster/id"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"

# Persistent parents a broker or controller creates if missing (Kafka's
# KafkaZkClient.createTopLevelPaths, less the paths out of our scope).
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, DELETE_TOPICS,
                    ISR_CHANGE_NOTIFICATION, LOG_DIR_EVENT_NOTIFICATION)

LOG_DIR_FAILURE_EVENT = 1  # the only log_dir_event Kafka defines
LEADER_RECOVERED = 0
LEADER_RECOVERING = 1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def logkeeper_log_dirs_path(broker_id: int) -> str:
    """Ours: each of a logkeeper broker's dirs, its state and the partitions it holds."""
    return f"/logkeeper/brokers/{broker_id}/log_dirs"


def decode_hosted_partitions(broker_id: int, data: bytes) -> set[tuple[str, int]]:
    """The partitions `logkeeper_log_dirs_path` lists on any of the broker's dirs."""
    path = logkeeper_log_dirs_path(broker_id)
    out = set()
    dirs = _loads(path, data).get("log_dirs")
    if not isinstance(dirs, list):
        raise ZnodeError(path, "'log_dirs' is not a list", data)
    for d in dirs:
        names = d.get("partitions") if isinstance(d, dict) else None
        if not isinstance(names, list):
            raise ZnodeError(path, "a log dir without a 'partitions' list", data)
        for name in names:
            topic, _, p = str(name).rpartition("-")
            if not topic or not p.isdigit():
                raise ZnodeError(path, f"partition {name!r} is not <topic>-<n>", data)
            out.add((topic, int(p)))
    return out


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """`/config/brokers/<id>`, or `/config/brokers/<default>` for the cluster default."""
    return f"{CONFIG_BROKERS}/{entity}"


def config_change_path(sequence: str = "") -> str:
    """With no sequence: the prefix to create a sequential node with."""
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}{sequence}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def isr_change_path(sequence: str = "") -> str:
    """With no sequence: the prefix to create a sequential node with."""
    return f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}{sequence}"


def log_dir_event_path(sequence: str = "") -> str:
    """With no sequence: the prefix to create a sequential node with."""
    return f"{LOG_DIR_EVENT_NOTIFICATION}/{LOG_DIR_EVENT_PREFIX}{sequence}"


def sequence_number(path_or_name: str) -> str:
    """The ZooKeeper sequence suffix of a notification node (`0000000042`), as Kafka
    keeps it: a string, so that it rebuilds the exact path."""
    for prefix in (ISR_CHANGE_PREFIX, LOG_DIR_EVENT_PREFIX, CONFIG_CHANGE_PREFIX,
                   ACL_CHANGE_PREFIX):
        i = path_or_name.rfind(prefix)
        if i >= 0:
            return path_or_name[i + len(prefix):]
    raise ValueError(f"{path_or_name!r} is not a change notification")


# -- errors and helpers -----------------------------------------------------------------

class ZnodeError(ValueError):
    """A znode's bytes are not the JSON Kafka writes there."""

    def __init__(self, path: str, problem: str, data: bytes | None = None):
        shown = "" if data is None else f": {data[:200]!r}"
        super().__init__(f"{path}: {problem}{shown}")
        self.path = path


def _dumps(obj: object) -> bytes:
    # Jackson's defaults, as Kafka's Json.encodeAsBytes: compact, raw UTF-8.
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _loads(path: str, data: bytes | None) -> dict[str, Any]:
    if not data:
        raise ZnodeError(path, "no data where JSON was expected")
    try:
        obj = json.loads(bytes(data).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ZnodeError(path, f"not JSON ({err})", data) from err
    if not isinstance(obj, dict):
        raise ZnodeError(path, f"expected a JSON object, got {type(obj).__name__}", data)
    return obj


_MISSING = object()


def _int(path: str, obj: Mapping[str, Any], key: str, default: Any = _MISSING) -> int:
    v = obj.get(key, _MISSING)
    if v is _MISSING:
        if default is _MISSING:
            raise ZnodeError(path, f"missing {key!r}")
        return default
    if not isinstance(v, int) or isinstance(v, bool):
        raise ZnodeError(path, f"{key!r} is {v!r}, not an integer")
    return v


def _str(path: str, obj: Mapping[str, Any], key: str) -> str:
    v = obj.get(key, _MISSING)
    if v is _MISSING:
        raise ZnodeError(path, f"missing {key!r}")
    if not isinstance(v, str):
        raise ZnodeError(path, f"{key!r} is {v!r}, not a string")
    return v


def _ints(path: str, v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ZnodeError(path, f"{what} is {v!r}, not a list of integers")
    return tuple(v)


def _object(path: str, obj: Mapping[str, Any], key: str, required: bool = True) -> dict[str, Any]:
    v = obj.get(key, _MISSING)
    if v is _MISSING or (v is None and not required):
        if required:
            raise ZnodeError(path, f"missing {key!r}")
        return {}
    if not isinstance(v, dict):
        raise ZnodeError(path, f"{key!r} is {v!r}, not an object")
    return v


def _timestamp(path: str, obj: Mapping[str, Any]) -> int:
    # Kafka writes the timestamp as a decimal string.
    v = obj.get("timestamp", _MISSING)
    if v is _MISSING:
        raise ZnodeError(path, "missing 'timestamp'")
    try:
        return int(v)
    except (TypeError, ValueError) as err:
        raise ZnodeError(path, f"'timestamp' is {v!r}, not milliseconds") from err


# -- topic ids --------------------------------------------------------------------------

def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: 22 characters of unpadded base64url (as in partition.metadata)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError unless it is 22 base64url characters of 16 bytes."""
    if len(text) != 22:
        raise ValueError(f"topic id {text!r} is not 22 base64url characters")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as err:
        raise ValueError(f"topic id {text!r} is not base64url") from err
    if len(raw) != 16 or topic_id_to_str(uuid.UUID(bytes=raw)) != text:
        raise ValueError(f"topic id {text!r} is not base64url of 16 bytes")
    return uuid.UUID(bytes=raw)


# -- /brokers/ids/<id> ------------------------------------------------------------------

# Kafka's default listener -> protocol map, used when a registration has none (v2, v3).
DEFAULT_SECURITY_PROTOCOL_MAP = {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")  # Kafka's uriParseExp


@dataclass(frozen=True)
class BrokerEndpoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6, as Utils.formatAddress
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    timestamp_ms: int
    jmx_port: int = -1
    rack: str | None = None
    features: Mapping[str, Any] = field(default_factory=dict)
    version: int = 5

    def endpoint(self, listener: str = "PLAINTEXT") -> BrokerEndpoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


def encode_broker(reg: BrokerRegistration) -> bytes:
    """Version 5, as Kafka 2.7+ registers. The top-level host and port are the first
    PLAINTEXT endpoint's (null and -1 without one), for old clients."""
    plain = next((e for e in reg.endpoints if e.security_protocol == "PLAINTEXT"), None)
    obj: dict[str, Any] = {
        "version": 5,
        "host": plain.host if plain else None,
        "port": plain.port if plain else -1,
        "endpoints": [e.connection_string() for e in reg.endpoints],
        "jmx_port": reg.jmx_port,
        "timestamp": str(reg.timestamp_ms),
    }
    if reg.rack is not None:
        obj["rack"] = reg.rack
    obj["listener_security_protocol_map"] = {e.listener: e.security_protocol for e in reg.endpoints}
    obj["features"] = dict(reg.features)
    return _dumps(obj)


def decode_broker(broker_id: int, data: bytes) -> BrokerRegistration:
    """Versions 1-5 (v1: host and port only, a PLAINTEXT endpoint)."""
    path = broker_path(broker_id)
    obj = _loads(path, data)
    version = _int(path, obj, "version")
    if not 1 <= version <= 5:
        raise ZnodeError(path, f"unsupported broker registration version {version}", data)
    jmx_port = _int(path, obj, "jmx_port")
    if version == 1:
        endpoints: tuple[BrokerEndpoint, ...] = (
            BrokerEndpoint("PLAINTEXT", _str(path, obj, "host"), _int(path, obj, "port")),)
    else:
        protocols = _object(path, obj, "listener_security_protocol_map", required=False) \
            or DEFAULT_SECURITY_PROTOCOL_MAP
        raw = obj.get("endpoints")
        if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
            raise ZnodeError(path, f"'endpoints' is {raw!r}, not a list of strings", data)
        eps = []
        for s in raw:
            m = _ENDPOINT.match(s)
            if m is None:
                raise ZnodeError(path, f"endpoint {s!r} is not LISTENER://host:port", data)
            listener, host, port = m.group(1), m.group(2), int(m.group(3))
            if listener not in protocols:
                raise ZnodeError(path, f"endpoint {s!r}: no security protocol for listener {listener!r}",
                                 data)
            eps.append(BrokerEndpoint(listener, host, port, protocols[listener]))
        endpoints = tuple(eps)
    rack = obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise ZnodeError(path, f"'rack' is {rack!r}, not a string", data)
    features = _object(path, obj, "features", required=False)
    return BrokerRegistration(broker_id, endpoints, _timestamp(path, obj), jmx_port, rack,
                              features, version)


# -- /controller and /controller_epoch --------------------------------------------------

@dataclass(frozen=True)
class ControllerRegistration:
    broker_id: int
    timestamp_ms: int
    kraft_controller_epoch: int | None = None  # None in v1; -1 from a ZK controller in v2
    version: int = 2


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    """Version 2 with kraftControllerEpoch -1, as a ZK-mode Kafka 3.4+ controller writes."""
    return _dumps({"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms),
                   "kraftControllerEpoch": -1})


def decode_controller(data: bytes) -> ControllerRegistration:
    """Versions 1 and 2. A kraftControllerEpoch other than -1 means a KRaft controller
    holds the node (a migration); callers must not treat it as a ZK controller."""
    obj = _loads(CONTROLLER, data)
    version = _int(CONTROLLER, obj, "version")
    if version not in (1, 2):
        raise ZnodeError(CONTROLLER, f"unsupported controller version {version}", data)
    kraft = _int(CONTROLLER, obj, "kraftControllerEpoch", default=None)
    return ControllerRegistration(_int(CONTROLLER, obj, "brokerid"), _timestamp(CONTROLLER, obj),
                                  kraft, version)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    text = bytes(data or b"").decode(errors="replace").strip()
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ZnodeError(CONTROLLER_EPOCH, "not an ASCII integer", data)
    return int(text)


# -- /brokers/topics/<t> ----------------------------------------------------------------

@dataclass(frozen=True)
class TopicAssignment:
    partitions: Mapping[int, tuple[int, ...]]  # partition -> replicas, in preference order
    topic_id: uuid.UUID | None = None
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def encode_topic(assignment: TopicAssignment) -> bytes:
    """Version 3. adding/removing list only partitions with a non-empty set, as Kafka's."""
    def by_partition(m: Mapping[int, Iterable[int]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(m.items()) if list(r)}

    obj: dict[str, Any] = {
        "version": 3,
        "partitions": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
        "adding_replicas": by_partition(assignment.adding_replicas),
        "removing_replicas": by_partition(assignment.removing_replicas),
    }
    if assignment.topic_id is not None:
        obj["topic_id"] = topic_id_to_str(assignment.topic_id)
    return _dumps(obj)


def decode_topic(topic: str, data: bytes) -> TopicAssignment:
    """Versions 1-3 (v1 had only partitions; topic_id since 2.8)."""
    path = topic_path(topic)
    obj = _loads(path, data)
    version = _int(path, obj, "version", default=1)
    if not 1 <= version <= 3:
        raise ZnodeError(path, f"unsupported topic version {version}", data)

    def replicas(key: str, required: bool) -> dict[int, tuple[int, ...]]:
        out = {}
        for p, r in _object(path, obj, key, required).items():
            if not re.fullmatch(r"[0-9]+", p):
                raise ZnodeError(path, f"{key}: partition {p!r} is not a number", data)
            out[int(p)] = _ints(path, r, f"{key}[{p}]")
        return out

    topic_id = None
    if obj.get("topic_id") is not None:
        try:
            topic_id = topic_id_from_str(_str(path, obj, "topic_id"))
        except ValueError as err:
            if isinstance(err, ZnodeError):
                raise
            raise ZnodeError(path, str(err), data) from err
    return TopicAssignment(replicas("partitions", False), topic_id,
                           replicas("adding_replicas", False), replicas("removing_replicas", False))


# -- /admin/reassign_partitions ----------------------------------------------------------

def encode_reassign_partitions(targets: Mapping[tuple[str, int], Iterable[int]]) -> bytes:
    """Version 1: `{"version":1,"partitions":[{"topic":t,"partition":p,"replicas":[...]}]}`."""
    return _dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(targets.items())]})


def decode_reassign_partitions(data: bytes) -> dict[tuple[str, int], tuple[int, ...]]:
    """(topic, partition) -> target replicas; ZnodeError naming what is wrong."""
    path = REASSIGN_PARTITIONS
    obj = _loads(path, data)
    version = _int(path, obj, "version")
    if version != 1:
        raise ZnodeError(path, f"unsupported reassignment version {version}", data)
    entries = obj.get("partitions")
    if not isinstance(entries, list):
        raise ZnodeError(path, "'partitions' is not a list", data)
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ZnodeError(path, f"partitions[{i}] is not an object", data)
        key = (_str(path, e, "topic"), _int(path, e, "partition"))
        out[key] = _ints(path, e.get("replicas"), f"partitions[{i}].replicas")
    return out


# -- /brokers/topics/<t>/partitions/<p>/state -------------------------------------------

@dataclass(frozen=True)
class PartitionState:
    leader: int  # -1 none
    leader_epoch: int
    controller_epoch: int  # of the controller that made the leadership decision
    isr: tuple[int, ...]
    leader_recovery_state: int = LEADER_RECOVERED


def encode_partition_state(state: PartitionState) -> bytes:
    obj: dict[str, Any] = {"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                           "controller_epoch": state.controller_epoch, "isr": list(state.isr)}
    if state.leader_recovery_state != LEADER_RECOVERED:
        obj["leader_recovery_state"] = state.leader_recovery_state
    return _dumps(obj)


def decode_partition_state(topic: str, partition: int, data: bytes) -> PartitionState:
    path = partition_state_path(topic, partition)
    obj = _loads(path, data)
    recovery = _int(path, obj, "leader_recovery_state", default=LEADER_RECOVERED)
    if recovery not in (LEADER_RECOVERED, LEADER_RECOVERING):
        raise ZnodeError(path, f"unknown leader_recovery_state {recovery}", data)
    return PartitionState(_int(path, obj, "leader"), _int(path, obj, "leader_epoch"),
                          _int(path, obj, "controller_epoch"),
                          _ints(path, obj.get("isr"), "'isr'"), recovery)


# -- /config/topics/<t> -----------------------------------------------------------------

def encode_topic_config(config: Mapping[str, str]) -> bytes:
    """Version 1; values are strings, as Kafka keeps them (a java.util.Properties)."""
    for k, v in config.items():
        if not isinstance(v, str):
            raise ValueError(f"topic config {k}={v!r}: values must be strings")
    return _dumps({"version": 1, "config": dict(config)})


def decode_topic_config(topic: str, data: bytes | None) -> dict[str, str]:
    """No data means no overrides (Kafka reads an empty node so)."""
    path = topic_config_path(topic)
    if not data:
        return {}
    obj = _loads(path, data)
    config = _object(path, obj, "config", required=False)
    for k, v in config.items():
        if not isinstance(v, str):
            raise ZnodeError(path, f"config {k!r} is {v!r}, not a string", data)
    return dict(config)


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    """`/config/brokers/<id>` (and any config entity): the layout of `/config/topics/<t>`."""
    return encode_topic_config(config)


def decode_entity_config(path: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    obj = _loads(path, data)
    config = _object(path, obj, "config", required=False)
    for k, v in config.items():
        if not isinstance(v, str):
            raise ZnodeError(path, f"config {k!r} is {v!r}, not a string", data)
    return dict(config)


# -- /config/changes/config_change_<seq> ------------------------------------------------

def encode_config_change(entity_type: str, entity_name: str) -> bytes:
    """Version 2 (Kafka 1.1+): `{"version":2,"entity_path":"topics/<t>"}`."""
    return _dumps({"version": 2, "entity_path": f"{entity_type}/{entity_name}"})


def decode_config_change(path: str, data: bytes) -> tuple[str, str]:
    """(entity type, entity name) of a version 2 notification; version 1's
    `{"version":1,"entity_type":..,"entity_name":..}` is read too."""
    obj = _loads(path, data)
    version = _int(path, obj, "version")
    if version == 1:
        return _str(path, obj, "entity_type"), _str(path, obj, "entity_name")
    if version != 2:
        raise ZnodeError(path, f"unsupported version {version}", data)
    entity_type, sep, name = _str(path, obj, "entity_path").partition("/")
    if not sep or not name:
        raise ZnodeError(path, "entity_path is not <type>/<name>", data)
    return entity_type, name


# -- /cluster/id -------------------------------------------------------------------------

def encode_cluster_id(cluster_id: str) -> bytes:
    """Kafka's ClusterIdZNode: the version is a string there."""
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return _str(CLUSTER_ID, _loads(CLUSTER_ID, data), "id")


# -- /latest_producer_id_block ----------------------------------------------------------

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


@dataclass(frozen=True)
class ProducerIdBlock:
    """The last block of producer ids a broker claimed; both ends inclusive."""

    broker: int
    start: int
    end: int


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    """Kafka's ProducerIdBlockZNode: the ends are strings there."""
    return _dumps({"version": 1, "broker": block.broker, "block_start": str(block.start),
                   "block_end": str(block.end)})


def decode_producer_id_block(data: bytes) -> ProducerIdBlock:
    path = LATEST_PRODUCER_ID_BLOCK
    obj = _loads(path, data)
    try:
        start, end = int(obj["block_start"]), int(obj["block_end"])
    except (KeyError, TypeError, ValueError) as err:
        raise ZnodeError(path, f"block_start/block_end are not integers ({err})", data) from err
    if not 0 <= start <= end:
        raise ZnodeError(path, f"block {start}..{end} is not a block of producer ids", data)
    return ProducerIdBlock(_int(path, obj, "broker"), start, end)


# -- /admin/delete_topics/<t> -----------------------------------------------------------

DELETE_TOPIC_DATA = b""  # the node's existence is the request


# -- notifications ----------------------------------------------------------------------

def encode_isr_change(partitions: Iterable[tuple[str, int]]) -> bytes:
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_isr_change(path: str, data: bytes) -> frozenset[TopicPartition]:
    obj = _loads(path, data)
    raw = obj.get("partitions")
    if not isinstance(raw, list):
        raise ZnodeError(path, f"'partitions' is {raw!r}, not a list", data)
    out = set()
    for item in raw:
        if not isinstance(item, dict):
            raise ZnodeError(path, f"partition entry {item!r} is not an object", data)
        out.add(TopicPartition(_str(path, item, "topic"), _int(path, item, "partition")))
    return frozenset(out)


@dataclass(frozen=True)
class LogDirEvent:
    broker_id: int
    event: int = LOG_DIR_FAILURE_EVENT


def encode_log_dir_event(broker_id: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(path: str, data: bytes) -> LogDirEvent:
    obj = _loads(path, data)
    return LogDirEvent(_int(path, obj, "broker"), _int(path, obj, "event", default=LOG_DIR_FAILURE_EVENT))
