"""The Metadata answer, coded by hand.

Clients send Metadata again and again: at start, at each refresh, and whenever a
leader moves (NOT_LEADER_OR_FOLLOWER sends them back for the partitions they lost), so
a failover brings a burst of them from every client at once. kafka-python's classes
cost about 8 us a partition to build and as much again to encode: a Metadata answer of
200 partitions held the event loop for over 5 ms. Here `MetadataAnswer` (with
`TopicMetadata`, `PartitionMetadata` and `BrokerMetadata`) is what daemon.api.handlers
builds, and `encode_metadata` writes it at v0-v12 (v9+ is flexible: compact strings and
arrays, tagged fields).

The layout is Kafka's MetadataResponse.json; tests/test_protocol.py checks it byte for
byte against kafka-python's encoder.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from .codec import I16, I32, put_count, put_name, put_nullable, response_head, seal_frame

# KIP-430's authorized operations when not asked for (None here): bit 31 alone
# (Kafka's Integer.MIN_VALUE).
_NOT_ASKED_BITS = -0x80000000
_ZERO_UUID = bytes(16)
_PARTITION = struct.Struct(">hii")  # error, index, leader
_PARTITION_V7 = struct.Struct(">hiii")  # error, index, leader, leader epoch


@dataclass(slots=True)
class PartitionMetadata:
    """One partition of a Metadata answer (the names are Kafka's schema's)."""

    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int  # v7+
    replica_nodes: list[int]
    isr_nodes: list[int]
    offline_replicas: list[int]  # v5+


@dataclass(slots=True)
class TopicMetadata:
    """One topic of a Metadata answer; `name` None only at v12+ (a topic id asked for
    that may not be described), `topic_id` None for none (v10+: all zeros)."""

    error_code: int
    name: str | None
    partitions: list[PartitionMetadata] = field(default_factory=list)
    is_internal: bool = False
    topic_id: uuid.UUID | None = None
    authorized_operations: Collection[int] | None = None  # v8+


class BrokerMetadata(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None  # v1+


@dataclass(slots=True)
class MetadataAnswer:
    """A whole Metadata answer; `encode_metadata` writes it."""

    brokers: list[BrokerMetadata]
    topics: list[TopicMetadata]
    cluster_id: str | None = None  # v2+
    controller_id: int = -1  # v1+
    throttle_time_ms: int = 0  # v3+
    cluster_authorized_operations: Collection[int] | None = None  # v8-10


def _operations(ops: Collection[int] | None) -> int:
    """KIP-430's bit field of operation codes, as a signed INT32."""
    if ops is None:
        return _NOT_ASKED_BITS
    bits = 0
    for op in ops:
        bits |= 1 << op
    return bits - (1 << 32) if bits & 0x80000000 else bits


@lru_cache(maxsize=1024)
def _partition_struct(version: int, replicas: int, isr: int, offline: int) -> struct.Struct:
    """One partition at `version` with these many replicas, ISR members and offline
    replicas, as one struct: its fields, each array's count (compact: one byte, for
    fewer than 127) and ints, and an empty tag buffer (flexible)."""
    count = "B" if version >= 9 else "i"
    fmt = ">hiii" if version >= 7 else ">hii"
    fmt += f"{count}{replicas}i{count}{isr}i"
    if version >= 5:
        fmt += f"{count}{offline}i"
    return struct.Struct(fmt + ("B" if version >= 9 else ""))


def _put_partition(buf: bytearray, p: PartitionMetadata, version: int) -> None:
    """One partition at `version`: a single struct's pack (`_partition_struct`)."""
    flexible = version >= 9
    replicas, isr = p.replica_nodes, p.isr_nodes
    offline = p.offline_replicas if version >= 5 else ()
    if flexible and max(len(replicas), len(isr), len(offline)) >= 127:
        _put_partition_longhand(buf, p, version)
        return
    extra = 1 if flexible else 0  # a compact count is n + 1
    fields: list[int] = [p.error_code, p.partition_index, p.leader_id]
    if version >= 7:
        fields.append(p.leader_epoch)
    fields.append(len(replicas) + extra)
    fields += replicas
    fields.append(len(isr) + extra)
    fields += isr
    if version >= 5:
        fields.append(len(offline) + extra)
        fields += offline
    if flexible:
        fields.append(0)  # no tagged fields
    buf += _partition_struct(version, len(replicas), len(isr), len(offline)).pack(*fields)


def _put_partition_longhand(buf: bytearray, p: PartitionMetadata, version: int) -> None:
    """`_put_partition` field by field: for arrays too long for a one-byte compact
    count (a replica set of 127 brokers or more)."""
    flexible = version >= 9
    if version >= 7:
        buf += _PARTITION_V7.pack(p.error_code, p.partition_index, p.leader_id,
                                  p.leader_epoch)
    else:
        buf += _PARTITION.pack(p.error_code, p.partition_index, p.leader_id)
    arrays = [p.replica_nodes, p.isr_nodes] + ([p.offline_replicas] if version >= 5 else [])
    for ints in arrays:
        put_count(buf, len(ints), flexible)
        buf += struct.pack(f">{len(ints)}i", *ints)
    if flexible:
        buf.append(0)  # no tagged fields


def encode_metadata(answer: MetadataAnswer, version: int, correlation_id: int) -> bytearray:
    """The framed Metadata response v0-v12 (size prefix, header, body)."""
    flexible = version >= 9
    buf = response_head(correlation_id, flexible)
    if version >= 3:
        buf += I32.pack(answer.throttle_time_ms)
    put_count(buf, len(answer.brokers), flexible)
    for b in answer.brokers:
        buf += I32.pack(b.node_id)
        put_name(buf, b.host, flexible)
        buf += I32.pack(b.port)
        if version >= 1:
            put_nullable(buf, b.rack, flexible)
        if flexible:
            buf.append(0)
    if version >= 2:
        put_nullable(buf, answer.cluster_id, flexible)
    if version >= 1:
        buf += I32.pack(answer.controller_id)
    put_count(buf, len(answer.topics), flexible)
    for t in answer.topics:
        buf += I16.pack(t.error_code)
        if version >= 12:
            put_nullable(buf, t.name, True)
        else:
            put_name(buf, t.name if t.name is not None else "", flexible)
        if version >= 10:
            buf += t.topic_id.bytes if t.topic_id is not None else _ZERO_UUID
        if version >= 1:
            buf.append(1 if t.is_internal else 0)
        put_count(buf, len(t.partitions), flexible)
        for p in t.partitions:
            _put_partition(buf, p, version)
        if version >= 8:
            buf += I32.pack(_operations(t.authorized_operations))
        if flexible:
            buf.append(0)
    if 8 <= version <= 10:
        buf += I32.pack(_operations(answer.cluster_authorized_operations))
    if flexible:
        buf.append(0)
    seal_frame(buf)
    return buf

