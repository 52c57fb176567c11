"""The records of `__consumer_offsets`: committed offsets and group metadata, in Kafka's
own key and value schemas (docs/formats.md, "Group records"), so Kafka's tools read ours
and we read theirs.

A record's key starts with an int16 version: 0 or 1 is an offset commit (group, topic,
partition), 2 is a group's metadata (group). The value is the same kind's schema at its
own version; a null value is a tombstone (the offset or the group was deleted). We write
what Kafka 3.x writes: keys at 1 and 2, offset values at 3 (1 when they carry an
expire timestamp), group values at 3.

Errors: `decode` raises `GroupRecordError` naming what does not parse; it never returns
a half-read record.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_data import ApiData

from logstore import TopicPartition

from . import schemas

_SCHEMAS = schemas.__name__

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3


class OffsetCommitKey(ApiData, load_json=_SCHEMAS):
    pass


class OffsetCommitValue(ApiData, load_json=_SCHEMAS):
    pass


class GroupMetadataKey(ApiData, load_json=_SCHEMAS):
    pass


class GroupMetadataValue(ApiData, load_json=_SCHEMAS):
    pass


class GroupRecordError(ValueError):
    """A `__consumer_offsets` record that does not parse."""


@dataclass(frozen=True)
class CommittedOffset:
    """One committed offset (Kafka's OffsetAndMetadata)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """A group's state as written after each rebalance (Kafka's GroupMetadataValue)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


@dataclass(frozen=True)
class OffsetEntry:
    """A decoded offset record; `value` None is a tombstone."""

    group: str
    tp: TopicPartition
    value: CommittedOffset | None


@dataclass(frozen=True)
class GroupEntry:
    """A decoded group record; `value` None is a tombstone (the group was deleted)."""

    group: str
    value: GroupRecord | None


# ---- encoding ----


def offset_key(group: str, tp: TopicPartition) -> bytes:
    return OffsetCommitKey(group=group, topic=tp.topic, partition=tp.partition).encode(
        version=OFFSET_KEY_VERSION)


def offset_value(c: CommittedOffset) -> bytes:
    version = OFFSET_VALUE_VERSION if c.expire_timestamp < 0 else OFFSET_VALUE_VERSION_WITH_EXPIRY
    return OffsetCommitValue(offset=c.offset, leader_epoch=c.leader_epoch, metadata=c.metadata,
                             commit_timestamp=c.commit_timestamp,
                             expire_timestamp=c.expire_timestamp).encode(version=version)


def group_key(group: str) -> bytes:
    return GroupMetadataKey(group=group).encode(version=GROUP_KEY_VERSION)


def group_value(g: GroupRecord) -> bytes:
    M = GroupMetadataValue.MemberMetadata
    return GroupMetadataValue(
        protocol_type=g.protocol_type, generation=g.generation, protocol=g.protocol,
        leader=g.leader, current_state_timestamp=g.current_state_timestamp,
        members=[M(member_id=m.member_id, group_instance_id=m.group_instance_id,
                   client_id=m.client_id, client_host=m.client_host,
                   rebalance_timeout=m.rebalance_timeout, session_timeout=m.session_timeout,
                   subscription=m.subscription, assignment=m.assignment)
                 for m in g.members]).encode(version=GROUP_VALUE_VERSION)


# ---- decoding ----


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise GroupRecordError(f"{what} of {len(data)} bytes has no version")
    return int.from_bytes(data[:2], "big", signed=True)


def _decode(cls: Any, data: bytes, what: str) -> Any:
    version = _version(data, what)
    if not 0 <= version <= cls.max_version:
        raise GroupRecordError(f"{what} at version {version}: only 0-{cls.max_version} are known")
    stream = io.BytesIO(data)
    try:
        obj = cls.decode(stream, header=True)
    except Exception as err:  # noqa: BLE001 - the decoder raises many types on bad bytes
        raise GroupRecordError(f"{what} v{version} does not parse: {type(err).__name__}: "
                               f"{err}") from err
    # Kafka reads newer versions of a value with the newest schema it knows and ignores
    # the rest; a key must be read whole.
    return obj, version, stream.tell() == len(data)


def decode(key: bytes | None, value: bytes | None) -> OffsetEntry | GroupEntry:
    """One `__consumer_offsets` record."""
    if key is None:
        raise GroupRecordError("a __consumer_offsets record without a key")
    version = _version(key, "key")
    if version in (0, 1):
        k, _, whole = _decode(OffsetCommitKey, key, "offset commit key")
        if not whole:
            raise GroupRecordError("offset commit key has bytes past its fields")
        tp = TopicPartition(k.topic, k.partition)
        if value is None:
            return OffsetEntry(k.group, tp, None)
        v, _, _ = _decode(OffsetCommitValue, value, f"offset commit value of {k.group}/{tp}")
        expire = v.expire_timestamp if v.expire_timestamp is not None else -1
        return OffsetEntry(k.group, tp, CommittedOffset(
            v.offset, v.leader_epoch if v.leader_epoch is not None else -1, v.metadata or "",
            v.commit_timestamp, expire))
    if version == GROUP_KEY_VERSION:
        k, _, whole = _decode(GroupMetadataKey, key, "group metadata key")
        if not whole:
            raise GroupRecordError("group metadata key has bytes past its fields")
        if value is None:
            return GroupEntry(k.group, None)
        v, _, _ = _decode(GroupMetadataValue, value, f"group metadata value of {k.group}")
        members = tuple(MemberRecord(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.rebalance_timeout if m.rebalance_timeout is not None else -1, m.session_timeout,
            bytes(m.subscription or b""), bytes(m.assignment or b"")) for m in v.members)
        ts = v.current_state_timestamp
        return GroupEntry(k.group, GroupRecord(v.protocol_type, v.generation, v.protocol,
                                               v.leader, ts if ts is not None else -1, members))
    raise GroupRecordError(f"key version {version} is neither an offset commit (0, 1) nor "
                           "group metadata (2)")


def describe(entry: OffsetEntry | GroupEntry) -> dict[str, Any]:
    """A JSON-ready view, as `kafka-dump-log.sh --offsets-decoder` prints one."""
    if isinstance(entry, OffsetEntry):
        key = {"type": "offset_commit", "group": entry.group, "topic": entry.tp.topic,
               "partition": entry.tp.partition}
        if entry.value is None:
            return {"key": key, "payload": None}
        v = entry.value
        return {"key": key, "payload": {"offset": v.offset, "leaderEpoch": v.leader_epoch,
                                        "metadata": v.metadata,
                                        "commitTimestamp": v.commit_timestamp,
                                        "expireTimestamp": v.expire_timestamp}}
    key = {"type": "group_metadata", "group": entry.group}
    if entry.value is None:
        return {"key": key, "payload": None}
    g = entry.value
    return {"key": key, "payload": {
        "protocolType": g.protocol_type, "protocol": g.protocol, "generationId": g.generation,
        "leader": g.leader, "currentStateTimestamp": g.current_state_timestamp,
        "members": [{"memberId": m.member_id, "groupInstanceId": m.group_instance_id,
                     "clientId": m.client_id, "clientHost": m.client_host,
                     "rebalanceTimeout": m.rebalance_timeout,
                     "sessionTimeout": m.session_timeout,
                     "subscription": m.subscription.hex(), "assignment": m.assignment.hex()}
                    for m in g.members]}}
