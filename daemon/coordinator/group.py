"""One consumer group as its coordinator holds it (Kafka's GroupMetadata and
MemberMetadata, classic protocol): its state, members, generation and committed offsets.

The rules that need no clock and no IO live here: which protocol the members agree on,
who leads, what a rebalance resets, what DescribeGroups shows, what is written to
`__consumer_offsets` after a rebalance. daemon.coordinator.coordinator drives the state
changes and their timers.

Event loop only.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from logstore import TopicPartition

from .records import CommittedOffset, GroupRecord, MemberRecord


class GroupState(enum.Enum):
    """Kafka's names: ListGroups and DescribeGroups report these strings."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class JoinResult:
    """What a member's JoinGroup is answered."""

    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    # (member id, group instance id, metadata) of every member: the leader's answer only.
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    # A static leader back in a Stable group: lead, but keep the assignment (KIP-814).
    skip_assignment: bool = False


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[tuple[int, bytes]] | None = None
    heartbeat_deadline: float = 0.0  # loop time after which the member is gone
    synced: bool = False  # sent SyncGroup in the current generation

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def record(self, protocol: str | None) -> MemberRecord:
        return MemberRecord(
            self.member_id, self.group_instance_id, self.client_id, self.client_host,
            self.rebalance_timeout_ms, self.session_timeout_ms,
            self.metadata(protocol) if protocol else b"", self.assignment)


@dataclass
class Group:
    group_id: str
    partition: int  # of __consumer_offsets
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED (JoinGroup v4+), until they join
    # again with it or their session timeout passes: member id -> deadline.
    pending_members: dict[str, float] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    # TxnOffsetCommit's offsets by producer id, written but not yet committed: its
    # transaction's marker decides (Kafka's pendingTransactionalOffsetCommits).
    pending_txn: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    # Where in the group's partition each offset of `offsets` and of `pending_txn` was
    # written: a transaction's offsets replace a committed one only when written after
    # it (Kafka's CommitRecordMetadataAndOffset.appendedBatchOffset and olderThan).
    offsets_at: dict[TopicPartition, int] = field(default_factory=dict)
    pending_txn_at: dict[int, dict[TopicPartition, int]] = field(default_factory=dict)
    state_timestamp: int = -1  # ms, when the state last changed (written with the group)
    # PreparingRebalance: the join completes once every member rejoined and the loop
    # time is past `join_not_before` (the initial delay of an empty group), or at
    # `rebalance_deadline` with whoever rejoined. CompletingRebalance: members that have
    # not sent SyncGroup by `rebalance_deadline` are removed.
    rebalance_deadline: float = 0.0
    join_not_before: float = 0.0
    initial_delay_until: float = 0.0  # how far new members may push join_not_before

    # ---- questions ----

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def is_empty(self) -> bool:
        return not self.members

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """Whether `member_id` speaks for a static instance that another member id now
        holds (Kafka's isStaticMemberFenced): answered FENCED_INSTANCE_ID before any
        membership check, so the replaced process stops instead of joining again and
        fencing its successor in turn."""
        known = self.static_members.get(instance_id) if instance_id else None
        return known is not None and known != member_id

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members of a consumer group subscribe to, from their
        subscriptions under the chosen protocol (Kafka's subscribedTopics); None when
        they cannot be known (another protocol type, or a subscription that does not
        decode), which counts as subscribed to everything."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                sub = ConsumerProtocolSubscription.decode(m.metadata(self.protocol_name))
            except Exception:  # noqa: BLE001 - a client's bytes: unknown, not an error
                return None
            topics.update(sub.topics or ())
        return topics

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols):
        an empty group takes any non-empty list; otherwise the type must match and at
        least one protocol must be shared with every member."""
        if not protocols:
            return False
        if self.is_empty:
            return bool(protocol_type)
        if protocol_type != self.protocol_type:
            return False
        names = {n for n, _ in protocols}
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes win, ties
        going to the protocol the first member prefers (Kafka's selectProtocol)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: the members share no protocol")
        votes: Counter[str] = Counter()
        order: list[str] = []
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in candidates:
                    votes[name] += 1
                    if name not in order:
                        order.append(name)
                    break
        best = max(votes.values())
        return next(n for n in order if votes[n] == best)

    # ---- what is written and shown ----

    def record(self) -> GroupRecord:
        """The group as written to __consumer_offsets after a rebalance (GroupMetadataValue)."""
        return GroupRecord(
            protocol_type=self.protocol_type or "", generation=self.generation,
            protocol=self.protocol_name, leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=tuple(m.record(self.protocol_name) for m in self.members.values()))

    def describe(self) -> dict[str, Any]:
        """DescribeGroups' view: member metadata and assignments only once the group is
        Stable, as Kafka's summary gives them."""
        stable = self.is_(GroupState.STABLE)
        return {
            "state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol": (self.protocol_name or "") if stable else "",
            "members": [
                (m.member_id, m.group_instance_id, m.client_id, m.client_host,
                 m.metadata(self.protocol_name) if stable and self.protocol_name else b"",
                 m.assignment if stable else b"")
                for m in self.members.values()],
        }


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31*h + c over the UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The __consumer_offsets partition whose leader coordinates `group_id` (Kafka's
    `Utils.abs(groupId.hashCode) % partitions`, where abs of Integer.MIN_VALUE is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
