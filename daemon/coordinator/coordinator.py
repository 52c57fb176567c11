"""The group coordinator (Kafka's GroupCoordinator and GroupMetadataManager, classic
protocol), docs/groups.md.

A group belongs to one partition of `__consumer_offsets` (`partition_for`); the broker
leading that partition coordinates it. When this broker becomes that leader (start-up,
LeaderAndIsr, a dir back) the partition is read from its start and its groups and
offsets rebuilt (until then: COORDINATOR_LOAD_IN_PROGRESS); when it stops leading (a new
leader elsewhere, its dir failing) the groups are dropped and their waiting members
answered NOT_COORDINATOR, so clients look the coordinator up again. Whether this broker
leads, and at which leader epoch, is asked at every request: a new epoch is a reload.

Rebalances follow Kafka: a member joining, leaving, changing its protocols or missing
its session timeout moves the group to PreparingRebalance; the join completes once
every member has rejoined (after `group.initial.rebalance.delay.ms` for an empty group)
or at the rebalance timeout without the missing ones; the leader's SyncGroup
assignment is written to `__consumer_offsets` (acks=all) before any member gets it.
Committed offsets are written first and served after, so an acknowledged commit
survives the coordinator's loss.

Errors from the log become Kafka's coordinator codes (`_coordinator_error`). Event loop
only; the log work runs on the dirs' workers through `OffsetsLog`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from logstore import TopicPartition
from logstore.names import OFFSETS_TOPIC
from logstore.records import CONTROL_COMMIT, Record, build_batch

from ..api import errors
from . import records
from .group import Group, GroupState, JoinResult, Member
from .internal_topic import Logged
from .partitions import CoordinatedPartitions
from .records import CommittedOffset, OffsetEntry

log = logging.getLogger("logkeeper.coordinator")

SWEEP_S = 0.1  # how often heartbeat, join and sync deadlines are checked


class OffsetsLog(Protocol):
    """The `__consumer_offsets` partitions as the coordinator needs them."""

    def partition_count(self) -> int | None:
        """How many partitions the topic has; None while it does not exist."""

    def led_epoch(self, partition: int) -> int | None:
        """The leader epoch at which this broker leads `partition` and can write it;
        None when it does not (led elsewhere, offline, not hosted)."""

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> int:
        """Append `batch` as the leader and wait for the ISR (acks=all): an error code."""

    async def append_at(self, partition: int, batch: bytes, timeout_ms: int, *,
                        guard: Any = None) -> tuple[int, int]:
        """`append` (`guard`: a transactional batch's verification), and the offset the
        batch was written at: (error code, base offset)."""

    async def read_all(self, partition: int) -> list[Logged]:
        """Every record of `partition`, and its transaction markers, oldest first."""


@dataclass(frozen=True)
class GroupSettings:
    """The broker's group.* and offset* keys (Kafka's names and defaults)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    max_metadata_bytes: int = 4096
    commit_timeout_ms: int = 5000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_interval_ms: int = 600000


@dataclass(frozen=True)
class OffsetCommit:
    tp: TopicPartition
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp: int = -1  # OffsetCommit v1's own timestamp; -1: the time of the commit


def _coordinator_error(code: int, *, offsets: bool) -> int:
    """What a failed write to __consumer_offsets answers (Kafka's mapping)."""
    if code in (errors.UNKNOWN_TOPIC_OR_PARTITION, errors.NOT_ENOUGH_REPLICAS,
                errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, errors.REQUEST_TIMED_OUT):
        return errors.COORDINATOR_NOT_AVAILABLE
    if code in (errors.NOT_LEADER_OR_FOLLOWER, errors.KAFKA_STORAGE_ERROR):
        return errors.NOT_COORDINATOR
    if code in (errors.MESSAGE_TOO_LARGE, errors.RECORD_LIST_TOO_LARGE):
        return errors.INVALID_COMMIT_OFFSET_SIZE if offsets else errors.UNKNOWN_SERVER_ERROR
    if code == errors.NETWORK_EXCEPTION:  # a transaction's coordinator not reached
        return errors.COORDINATOR_LOAD_IN_PROGRESS  # retried without a new lookup
    if code in _VERIFICATION_ERRORS:
        return code  # a TxnOffsetCommit's transaction verification: as it came
    return code if code in (errors.NONE,) else errors.UNKNOWN_SERVER_ERROR


# What a transaction's verification answers a TxnOffsetCommit, passed on as they are.
_VERIFICATION_ERRORS = frozenset({
    errors.INVALID_TXN_STATE, errors.INVALID_PRODUCER_ID_MAPPING,
    errors.INVALID_PRODUCER_EPOCH, errors.CONCURRENT_TRANSACTIONS,
    errors.COORDINATOR_LOAD_IN_PROGRESS, errors.COORDINATOR_NOT_AVAILABLE,
    errors.NOT_COORDINATOR})


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator(CoordinatedPartitions):
    def __init__(self, offsets: OffsetsLog, settings: GroupSettings | None = None, *,
                 clock: Callable[[], float] | None = None):
        self.log = offsets
        self.settings = settings or GroupSettings()
        self.groups: dict[str, Group] = {}
        self.loaded: dict[int, int] = {}  # partition -> leader epoch its groups were read at
        self._loading: dict[int, tuple[int, asyncio.Task[None]]] = {}
        self._clock = clock
        self._sweeper: asyncio.Task[None] | None = None
        self._cleanups: set[asyncio.Task[int]] = set()  # tombstones of deleted partitions

    def _now(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    # ---- life cycle ----

    def start(self) -> None:
        self._sweeper = asyncio.ensure_future(self._sweep_forever())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        # Tombstones of deleted partitions being written: each ends within the commit
        # timeout, and a reload without them would bring the offsets back.
        await asyncio.gather(*self._cleanups, return_exceptions=True)
        for _, task in self._loading.values():
            task.cancel()
        for p in list(self.loaded):
            self._unload(p)

    async def _sweep_forever(self) -> None:
        rounds = 0
        next_expiry = time.monotonic() + self.settings.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(SWEEP_S)
            rounds += 1
            try:
                self.sweep()
                if rounds % 10 == 0:  # a dir back online, a leadership the hooks missed
                    self.leadership_changed()
                if time.monotonic() >= next_expiry:
                    next_expiry = time.monotonic() + self.settings.retention_check_interval_ms / 1000
                    await self.expire_offsets(_now_ms())
            except Exception:  # noqa: BLE001 - a bug must not stop every group's timers
                log.exception("group coordinator sweep failed")

    # ---- who coordinates a group ----

    def _owner(self, group_id: str) -> tuple[int, int]:
        """(error, partition): NONE when this broker coordinates `group_id` and has
        loaded its partition."""
        code, p, _ = self._owner_of(group_id)
        return code, p

    async def _load(self, p: int, epoch: int) -> None:
        started = time.monotonic()
        try:
            recs = await self.log.read_all(p)
        except Exception as err:  # noqa: BLE001 - the dir failed: answered NOT_COORDINATOR next
            log.warning("loading %s-%d failed (%s: %s)", OFFSETS_TOPIC, p, type(err).__name__, err)
            self._loading.pop(p, None)
            return
        if self.log.led_epoch(p) != epoch:
            self._loading.pop(p, None)
            return
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        offsets_at: dict[str, dict[TopicPartition, int]] = {}
        metas: dict[str, records.GroupRecord | None] = {}
        # TxnOffsetCommits by producer id, until its marker: (group, partition, offset)
        # and where each was written
        pending: dict[int, list[tuple[OffsetEntry, int]]] = {}
        bad = 0
        for item in recs:
            rec = item.record
            if rec is None:  # a transaction marker: its producer's offsets count or go
                done = pending.pop(item.producer_id, [])
                if item.marker == CONTROL_COMMIT:
                    for e, at in done:
                        _apply_offset(offsets.setdefault(e.group, {}),
                                      offsets_at.setdefault(e.group, {}), e, at, txn=True)
                continue
            try:
                entry = records.decode(rec.key, rec.value)
            except records.GroupRecordError as err:
                bad += 1
                if bad == 1:
                    log.warning("%s-%d offset %s: %s (skipped)", OFFSETS_TOPIC, p, rec.offset, err)
                continue
            if isinstance(entry, OffsetEntry):
                at = -1 if rec.offset is None else rec.offset
                if item.producer_id >= 0:
                    pending.setdefault(item.producer_id, []).append((entry, at))
                else:
                    _apply_offset(offsets.setdefault(entry.group, {}),
                                  offsets_at.setdefault(entry.group, {}), entry, at)
            else:
                metas[entry.group] = entry.value
        now = self._now()
        open_txns: dict[str, dict[int, dict[TopicPartition, CommittedOffset]]] = {}
        open_txns_at: dict[str, dict[int, dict[TopicPartition, int]]] = {}
        for pid, entries in pending.items():  # transactions still open: offsets pending
            for e, at in entries:
                if e.value is not None:
                    open_txns.setdefault(e.group, {}).setdefault(pid, {})[e.tp] = e.value
                    open_txns_at.setdefault(e.group, {}).setdefault(pid, {})[e.tp] = at
        for gid in set(offsets) | set(metas) | set(open_txns):
            meta = metas.get(gid)
            group_offsets = offsets.get(gid, {})
            if meta is None and not group_offsets and gid not in open_txns:
                continue  # deleted
            g = Group(gid, p)
            g.offsets = dict(group_offsets)
            g.offsets_at = {tp: at for tp, at in offsets_at.get(gid, {}).items()
                            if tp in g.offsets}
            g.pending_txn = open_txns.get(gid, {})
            g.pending_txn_at = open_txns_at.get(gid, {})
            if meta is not None:
                g.protocol_type = meta.protocol_type or None
                g.generation = meta.generation
                g.protocol_name = meta.protocol
                g.leader_id = meta.leader
                g.state_timestamp = meta.current_state_timestamp
                for m in meta.members:
                    member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout if m.rebalance_timeout >= 0
                                    else m.session_timeout, m.session_timeout,
                                    g.protocol_type or "",
                                    [(meta.protocol or "", m.subscription)], m.assignment)
                    member.heartbeat_deadline = now + m.session_timeout / 1000
                    g.members[m.member_id] = member
                    if m.group_instance_id:
                        g.static_members[m.group_instance_id] = m.member_id
                g.state = GroupState.STABLE if g.members else GroupState.EMPTY
            self.groups[gid] = g
        self.loaded[p] = epoch
        self._loading.pop(p, None)
        n = sum(1 for g in self.groups.values() if g.partition == p)
        log.info("loaded %d groups from %s-%d (leader epoch %d, %d records) in %.0f ms", n,
                 OFFSETS_TOPIC, p, epoch, len(recs), (time.monotonic() - started) * 1000)

    def _unload(self, p: int) -> None:
        self.loaded.pop(p, None)
        for gid in [gid for gid, g in self.groups.items() if g.partition == p]:
            g = self.groups.pop(gid)
            for m in g.members.values():
                _answer_join(m, JoinResult(errors.NOT_COORDINATOR))
                _answer_sync(m, errors.NOT_COORDINATOR)
        log.info("no longer coordinating the groups of %s-%d", OFFSETS_TOPIC, p)

    # ---- JoinGroup ----

    async def join(self, group_id: str, member_id: str, instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], *, require_known_member_id: bool,
                   skip_assignment_supported: bool = False) -> JoinResult:
        """JoinGroup. `skip_assignment_supported`: the request is v9+, whose static
        leader back in a Stable group is told to skip its assignor (KIP-814)."""
        if not group_id:
            return JoinResult(errors.INVALID_GROUP_ID, member_id=member_id)
        code, p = self._owner(group_id)
        if code:
            return JoinResult(code, member_id=member_id)
        s = self.settings
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResult(errors.INVALID_SESSION_TIMEOUT, member_id=member_id)
        g = self.groups.get(group_id)
        if g is None:
            if member_id:
                return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member_id)
            g = self.groups[group_id] = Group(group_id, p)
        if g.is_(GroupState.DEAD):
            return JoinResult(errors.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not g.supports(protocol_type, protocols):
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        now = self._now()
        if not member_id:
            if instance_id and instance_id in g.static_members:
                return await self._rejoin_static(g, instance_id, client_id, client_host,
                                                 session_timeout_ms, rebalance_timeout_ms,
                                                 protocol_type, protocols,
                                                 skip_assignment_supported)
            if len(g.members) + len(g.pending_members) >= s.max_size:
                return JoinResult(errors.GROUP_MAX_SIZE_REACHED)
            new_id = f"{client_id}-{uuid.uuid4()}"
            if require_known_member_id and not instance_id:
                # JoinGroup v4+: the member joins again with its id (KIP-394).
                g.pending_members[new_id] = now + session_timeout_ms / 1000
                return JoinResult(errors.MEMBER_ID_REQUIRED, member_id=new_id)
            member = Member(new_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                            session_timeout_ms, protocol_type, protocols)
            return await self._add_and_wait(g, member, now)
        if member_id in g.pending_members:
            del g.pending_members[member_id]
            member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                            session_timeout_ms, protocol_type, protocols)
            return await self._add_and_wait(g, member, now)
        if g.is_fenced(instance_id, member_id):
            return JoinResult(errors.FENCED_INSTANCE_ID, member_id=member_id)
        member = g.members.get(member_id)
        if member is None:
            return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member_id)
        if instance_id and g.static_members.get(instance_id) != member_id:
            return JoinResult(errors.FENCED_INSTANCE_ID, member_id=member_id)
        member.heartbeat_deadline = now + member.session_timeout_ms / 1000
        if g.is_(GroupState.PREPARING_REBALANCE):
            self._update_member(member, client_id, client_host, session_timeout_ms,
                                rebalance_timeout_ms, protocols)
            return await self._wait_join(g, member)
        if g.is_(GroupState.COMPLETING_REBALANCE) or g.is_(GroupState.STABLE):
            unchanged = member.same_protocols(protocols)
            if unchanged and (g.is_(GroupState.COMPLETING_REBALANCE)
                              or member_id != g.leader_id):
                # A member rejoining with what it had: the current generation again.
                return self._join_result(g, member)
            self._update_member(member, client_id, client_host, session_timeout_ms,
                                rebalance_timeout_ms, protocols)
            self._prepare_rebalance(g, f"member {member_id} rejoined"
                                    + ("" if unchanged else " with new protocols"))
            return await self._wait_join(g, member)
        return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member_id)  # Empty

    async def _rejoin_static(self, g: Group, instance_id: str, client_id: str,
                             client_host: str, session_timeout_ms: int,
                             rebalance_timeout_ms: int, protocol_type: str,
                             protocols: list[tuple[str, bytes]],
                             skip_assignment_supported: bool) -> JoinResult:
        """A static member (group.instance.id) back with no member id: it replaces its
        old member id, which is fenced from then on; no rebalance when the group is
        Stable and its protocols are the same (KIP-345). Then the group's assignment
        stands: a leader back through JoinGroup v9+ is told it leads but to skip its
        assignor (KIP-814); through an older version it is given the old leader's id
        and no members, so it does not take itself for the leader (Kafka's answers)."""
        old_id = g.static_members[instance_id]
        previous_leader = g.leader_id or ""
        old = g.members.pop(old_id)
        new_id = f"{client_id}-{uuid.uuid4()}"
        _answer_join(old, JoinResult(errors.FENCED_INSTANCE_ID, member_id=old_id))
        _answer_sync(old, errors.FENCED_INSTANCE_ID)
        member = Member(new_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols, assignment=old.assignment)
        member.heartbeat_deadline = self._now() + session_timeout_ms / 1000
        g.members[new_id] = member
        g.static_members[instance_id] = new_id
        if g.leader_id == old_id:
            g.leader_id = new_id
        if g.is_(GroupState.STABLE) and old.same_protocols(protocols):
            member.synced = True
            # Kafka stores the group with the new member id before answering: a
            # coordinator that loads it later knows the instance by its new id.
            gen = g.generation
            code = await self._store_group(g, gen)
            if not code and skip_assignment_supported:
                res = self._join_result(g, member)
                return replace(res, skip_assignment=g.leader_id == new_id)
            if not code:
                return replace(self._join_result(g, member), leader=previous_leader,
                                           members=())
            if g.generation == gen and g.members.get(new_id) is member:
                del g.members[new_id]  # not persisted: the old member id stays
                g.members[old_id] = old
                g.static_members[instance_id] = old_id
                if g.leader_id == new_id:
                    g.leader_id = old_id
            return JoinResult(code, member_id=new_id)
        self._prepare_rebalance(g, f"static member {instance_id} rejoined")
        return await self._wait_join(g, member)

    async def _add_and_wait(self, g: Group, member: Member, now: float) -> JoinResult:
        member.heartbeat_deadline = now + member.session_timeout_ms / 1000
        if g.is_empty:
            g.protocol_type = member.protocol_type  # the first member sets the group's type
        g.members[member.member_id] = member
        if member.group_instance_id:
            g.static_members[member.group_instance_id] = member.member_id
        if g.is_(GroupState.PREPARING_REBALANCE) and now < g.initial_delay_until:
            # Kafka's InitialDelayedJoin: each new member pushes the join out once more.
            g.join_not_before = min(now + self.settings.initial_rebalance_delay_ms / 1000,
                                    g.initial_delay_until)
        self._prepare_rebalance(g, f"member {member.member_id} joined")
        return await self._wait_join(g, member)

    @staticmethod
    def _update_member(m: Member, client_id: str, client_host: str, session_timeout_ms: int,
                       rebalance_timeout_ms: int, protocols: list[tuple[str, bytes]]) -> None:
        m.client_id, m.client_host = client_id, client_host
        m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        m.protocols = protocols

    async def _wait_join(self, g: Group, member: Member) -> JoinResult:
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(errors.REBALANCE_IN_PROGRESS,
                                                     member_id=member.member_id))
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = fut
        self._maybe_complete_join(g)
        return await fut

    def _join_result(self, g: Group, member: Member) -> JoinResult:
        leader = member.member_id == g.leader_id
        assert g.protocol_name is not None
        return JoinResult(
            errors.NONE, g.generation, g.protocol_type, g.protocol_name, g.leader_id or "",
            member.member_id,
            tuple((m.member_id, m.group_instance_id, m.metadata(g.protocol_name))
                  for m in g.members.values()) if leader else ())

    def _prepare_rebalance(self, g: Group, why: str) -> None:
        if g.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(g)
            return
        now = self._now()
        if g.is_(GroupState.COMPLETING_REBALANCE):
            for m in g.members.values():
                m.assignment = b""
                _answer_sync(m, errors.REBALANCE_IN_PROGRESS)
        was_empty = g.is_(GroupState.EMPTY)
        self._transition(g, GroupState.PREPARING_REBALANCE)
        timeout = g.max_rebalance_timeout_ms() / 1000
        # An empty group waits group.initial.rebalance.delay.ms for more members, each
        # new one pushing the join out again, never past the rebalance timeout.
        delay = self.settings.initial_rebalance_delay_ms / 1000 if was_empty else 0.0
        g.join_not_before = now + delay
        g.initial_delay_until = now + max(timeout, delay) if was_empty else 0.0
        g.rebalance_deadline = max(now + timeout, g.join_not_before)
        log.info("group %s: preparing to rebalance (generation %d): %s", g.group_id,
                 g.generation, why)
        self._maybe_complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if not g.is_(GroupState.PREPARING_REBALANCE):
            return
        now = self._now()
        if (g.all_joined() and now >= g.join_not_before) or now >= g.rebalance_deadline:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        for mid in [mid for mid, m in g.members.items() if not m.awaiting_join]:
            m = g.members[mid]
            if m.group_instance_id:
                continue  # a static member stays until its session timeout (KIP-345)
            self._remove_member(g, mid, "did not rejoin within the rebalance timeout")
        g.pending_members.clear()
        g.generation += 1
        now = self._now()
        if g.is_empty:
            g.protocol_name = None
            g.leader_id = None
            self._transition(g, GroupState.EMPTY)
            log.info("group %s: generation %d with no members", g.group_id, g.generation)
            asyncio.ensure_future(self._store_group(g, g.generation))
            return
        joined = [m for m in g.members.values() if m.awaiting_join]
        if g.leader_id not in g.members or not g.members[g.leader_id].awaiting_join:
            g.leader_id = (joined[0] if joined else next(iter(g.members.values()))).member_id
        g.protocol_type = next(iter(g.members.values())).protocol_type
        g.protocol_name = g.select_protocol()
        self._transition(g, GroupState.COMPLETING_REBALANCE)
        g.rebalance_deadline = now + g.max_rebalance_timeout_ms() / 1000
        for m in g.members.values():
            m.synced = False
            m.assignment = b""
            m.heartbeat_deadline = now + m.session_timeout_ms / 1000
            if m.awaiting_join:
                _answer_join(m, self._join_result(g, m))
        log.info("group %s: generation %d, protocol %s, leader %s, %d members", g.group_id,
                 g.generation, g.protocol_name, g.leader_id, len(g.members))

    def _transition(self, g: Group, state: GroupState) -> None:
        g.state = state
        g.state_timestamp = _now_ms()

    def _remove_member(self, g: Group, member_id: str, why: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        if m.group_instance_id and g.static_members.get(m.group_instance_id) == member_id:
            del g.static_members[m.group_instance_id]
        _answer_join(m, JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member_id))
        _answer_sync(m, errors.UNKNOWN_MEMBER_ID)
        log.info("group %s: member %s left: %s", g.group_id, member_id, why)

    # ---- SyncGroup ----

    async def sync(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes]
                   ) -> tuple[int, bytes]:
        code, _ = self._owner(group_id)
        if code:
            return code, b""
        g = self.groups.get(group_id)
        if g is not None and g.is_fenced(instance_id, member_id):
            return errors.FENCED_INSTANCE_ID, b""
        if g is None or member_id not in g.members:
            return errors.UNKNOWN_MEMBER_ID, b""
        if instance_id and g.static_members.get(instance_id) != member_id:
            return errors.FENCED_INSTANCE_ID, b""
        if generation != g.generation:
            return errors.ILLEGAL_GENERATION, b""
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
                protocol_name is not None and protocol_name != g.protocol_name):
            return errors.INCONSISTENT_GROUP_PROTOCOL, b""
        member = g.members[member_id]
        member.heartbeat_deadline = self._now() + member.session_timeout_ms / 1000
        if g.is_(GroupState.PREPARING_REBALANCE):
            return errors.REBALANCE_IN_PROGRESS, b""
        if g.is_(GroupState.STABLE):
            member.synced = True
            return errors.NONE, member.assignment
        if not g.is_(GroupState.COMPLETING_REBALANCE):
            return errors.UNKNOWN_MEMBER_ID, b""
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        _answer_sync(member, errors.REBALANCE_IN_PROGRESS)
        member.sync_future = fut
        member.synced = True
        if member_id == g.leader_id:
            for mid, m in g.members.items():
                m.assignment = assignments.get(mid, b"")
            gen = g.generation
            code = await self._store_group(g, gen)
            if g.is_(GroupState.COMPLETING_REBALANCE) and g.generation == gen:
                if code:
                    for m in g.members.values():
                        m.assignment = b""
                        _answer_sync(m, code)
                    self._prepare_rebalance(g, f"storing generation {gen} failed ({code})")
                else:
                    self._transition(g, GroupState.STABLE)
                    for m in g.members.values():
                        _answer_sync(m, errors.NONE, m.assignment)
                    log.info("group %s: generation %d stable", group_id, gen)
        return await fut

    async def _store_group(self, g: Group, generation: int) -> int:
        """Write the group as it is now (after a rebalance); a coordinator error code."""
        if g.generation != generation:
            return errors.REBALANCE_IN_PROGRESS
        value = records.group_value(g.record())
        batch = build_batch([Record(records.group_key(g.group_id), value)])
        code = await self.log.append(g.partition, batch, self.settings.commit_timeout_ms)
        if code:
            log.warning("group %s: writing generation %d to %s-%d failed: %s", g.group_id,
                        generation, OFFSETS_TOPIC, g.partition, errors.name_of(code))
        return _coordinator_error(code, offsets=False)

    # ---- Heartbeat and LeaveGroup ----

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        code, _ = self._owner(group_id)
        if code == errors.COORDINATOR_LOAD_IN_PROGRESS:
            return errors.NONE  # answered blindly while the group loads, as Kafka's
        if code:
            return code
        g = self.groups.get(group_id)
        if g is not None and g.is_(GroupState.DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE  # gone meanwhile: find the coordinator again
        if g is not None and g.is_fenced(instance_id, member_id):
            return errors.FENCED_INSTANCE_ID
        if g is None or g.is_(GroupState.EMPTY) or member_id not in g.members:
            return errors.UNKNOWN_MEMBER_ID
        if instance_id and g.static_members.get(instance_id) != member_id:
            return errors.FENCED_INSTANCE_ID
        if generation != g.generation:
            return errors.ILLEGAL_GENERATION
        m = g.members[member_id]
        m.heartbeat_deadline = self._now() + m.session_timeout_ms / 1000
        if g.is_(GroupState.PREPARING_REBALANCE):
            return errors.REBALANCE_IN_PROGRESS
        return errors.NONE

    def leave(self, group_id: str, members: list[tuple[str, str | None]]
              ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """(group error, [(member id, instance id, error)]) for LeaveGroup; a static
        member may be named by its instance id alone (v3+). A group not here has
        none of the members (each UNKNOWN_MEMBER_ID, the group's error NONE, as Kafka
        answers)."""
        code, _ = self._owner(group_id)
        if code:
            return code, []
        g = self.groups.get(group_id)
        if g is None:
            return errors.NONE, [(m, i, errors.UNKNOWN_MEMBER_ID) for m, i in members]
        if g.is_(GroupState.DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE, []
        out = []
        gone = []
        for member_id, instance_id in members:
            mid = member_id
            if not member_id and instance_id:  # the admin's removal by instance id
                known = g.static_members.get(instance_id)
                if known is None:
                    out.append((member_id, instance_id, errors.UNKNOWN_MEMBER_ID))
                    continue
                mid = known
            elif g.is_fenced(instance_id, member_id):
                out.append((member_id, instance_id, errors.FENCED_INSTANCE_ID))
                continue
            if mid in g.pending_members:
                del g.pending_members[mid]
                out.append((member_id, instance_id, errors.NONE))
                continue
            if mid not in g.members:
                out.append((member_id, instance_id, errors.UNKNOWN_MEMBER_ID))
                continue
            self._remove_member(g, mid, "left the group")
            gone.append(mid)
            out.append((member_id, instance_id, errors.NONE))
        if gone:
            self._after_removal(g, f"{', '.join(gone)} left")
        return errors.NONE, out

    def _after_removal(self, g: Group, why: str) -> None:
        if g.is_(GroupState.STABLE) or g.is_(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g, why)
        elif g.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(g)

    # ---- timers ----

    def sweep(self) -> None:
        """Expire members past their session timeout, complete joins whose time came,
        and rebalance groups whose members did not sync in time."""
        now = self._now()
        for g in list(self.groups.values()):
            for mid, deadline in list(g.pending_members.items()):
                if now >= deadline:
                    del g.pending_members[mid]
            expired = [mid for mid, m in g.members.items()
                       if now >= m.heartbeat_deadline and not m.awaiting_join
                       and not m.awaiting_sync]
            for mid in expired:
                self._remove_member(g, mid, "session timeout passed without a heartbeat")
            if expired:
                self._after_removal(g, "session timeout")
            if g.is_(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join(g)
            elif g.is_(GroupState.COMPLETING_REBALANCE) and now >= g.rebalance_deadline:
                late = [mid for mid, m in g.members.items() if not m.synced]
                for mid in late:
                    self._remove_member(g, mid, "did not send SyncGroup in time")
                self._prepare_rebalance(g, "members did not sync within the rebalance timeout")

    # ---- offsets ----

    async def commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None, commits: list[OffsetCommit],
                     retention_ms: int = -1) -> tuple[int, dict[TopicPartition, int]]:
        """(group error, error per partition) for OffsetCommit. Generation -1 with no
        member id is a commit from outside any group membership ("simple" consumers,
        admin tools), allowed while the group has no members (else UNKNOWN_MEMBER_ID,
        as Kafka's validateOffsetCommit). `retention_ms` is OffsetCommit v2-4's own
        retention: other than -1, the offsets expire that long after now (Kafka's
        expireTimestamp), not `offsets.retention.minutes` after their commit."""
        code, p = self._owner(group_id)
        if code:
            return code, {}
        if not group_id:
            return errors.INVALID_GROUP_ID, {}
        g = self.groups.get(group_id)
        if g is None and generation >= 0:
            return errors.ILLEGAL_GENERATION, {}  # a member of a group gone since
        code = _validate_offset_commit(g, generation, member_id, instance_id, txn=False)
        if code:
            return code, {}
        if g is not None and member_id in g.members:
            if g.is_(GroupState.COMPLETING_REBALANCE):
                return errors.REBALANCE_IN_PROGRESS, {}
            m = g.members[member_id]
            m.heartbeat_deadline = self._now() + m.session_timeout_ms / 1000
        out, written = self._to_write(commits, retention_ms)
        if written:
            batch = build_batch([Record(records.offset_key(group_id, tp), records.offset_value(v))
                                 for tp, v in written])
            code, at = await self.log.append_at(p, batch, self.settings.commit_timeout_ms)
            code = _coordinator_error(code, offsets=True)
            live = self.groups.get(group_id)
            if live is None and not code:  # a commit from outside any membership
                live = self.groups[group_id] = Group(group_id, p)
            for tp, v in written:
                out[tp] = code
                if not code and live is not None:
                    live.offsets[tp] = v
                    live.offsets_at[tp] = at
        return errors.NONE, out

    async def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int,
                         generation: int, member_id: str, instance_id: str | None,
                         commits: list[OffsetCommit], *,
                         verify: Callable[[int], Awaitable[tuple[int, object]]] | None = None
                         ) -> tuple[int, dict[TopicPartition, int]]:
        """TxnOffsetCommit: the offsets written to `__consumer_offsets` in a batch of the
        producer's transaction, pending until its marker (`txn_completed`); (group error,
        error per partition). A member id given is checked as OffsetCommit checks it.
        `verify` (transaction verification is on, daemon.replica.txn_verification):
        asked with the partition before the batch is written, it gives an error code
        and the guard to append with."""
        code, p = self._owner(group_id)
        if code:
            return code, {}
        if not group_id:
            return errors.INVALID_GROUP_ID, {}
        code = _validate_offset_commit(self.groups.get(group_id), generation, member_id,
                                       instance_id, txn=True)
        if code:
            return code, {}
        out, written = self._to_write(commits, -1)
        if not written:
            return errors.NONE, out
        batch = build_batch([Record(records.offset_key(group_id, tp), records.offset_value(v))
                             for tp, v in written], producer_id=producer_id,
                            producer_epoch=producer_epoch, transactional=True)
        at = -1
        if verify is None:
            appended, at = await self.log.append_at(p, batch, self.settings.commit_timeout_ms)
        else:
            appended, guard = await verify(p)
            if not appended:
                appended, at = await self.log.append_at(
                    p, batch, self.settings.commit_timeout_ms, guard=guard)
        code = _coordinator_error(appended, offsets=True)
        live = self.groups.get(group_id)
        if live is None and not code:
            live = self.groups[group_id] = Group(group_id, p)
        for tp, v in written:
            out[tp] = code
            if not code and live is not None:
                live.pending_txn.setdefault(producer_id, {})[tp] = v
                live.pending_txn_at.setdefault(producer_id, {})[tp] = at
        return errors.NONE, out

    def _to_write(self, commits: list[OffsetCommit], retention_ms: int
                  ) -> tuple[dict[TopicPartition, int], list[tuple[TopicPartition, CommittedOffset]]]:
        """(the partitions refused, with their errors; the offsets to write)."""
        out: dict[TopicPartition, int] = {}
        written: list[tuple[TopicPartition, CommittedOffset]] = []
        now = _now_ms()
        expire_timestamp = -1 if retention_ms == -1 else now + retention_ms
        for c in commits:
            meta = c.metadata or ""
            if len(meta.encode()) > self.settings.max_metadata_bytes:
                out[c.tp] = errors.OFFSET_METADATA_TOO_LARGE
                continue
            stamp = now if c.commit_timestamp == -1 else c.commit_timestamp
            written.append((c.tp, CommittedOffset(c.offset, c.leader_epoch, meta, stamp,
                                                  expire_timestamp)))
        return out, written

    def txn_completed(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of `producer_id`'s transaction was written to `__consumer_offsets`-
        `partition`: its pending offsets there become the groups' committed offsets, or
        go (Kafka's handleTxnCompletion)."""
        for g in self.groups.values():
            if g.partition != partition:
                continue
            done = g.pending_txn.pop(producer_id, None)
            done_at = g.pending_txn_at.pop(producer_id, {})
            if done and commit:
                for tp, v in done.items():
                    _apply_offset(g.offsets, g.offsets_at, OffsetEntry(g.group_id, tp, v),
                                  done_at.get(tp, -1), txn=True)

    def unstable(self, group_id: str, tps: list[TopicPartition] | None) -> set[TopicPartition]:
        """The partitions of `tps` (None: all) with offsets in an open transaction: a
        consumer that requires stable offsets is told UNSTABLE_OFFSET_COMMIT for them."""
        g = self.groups.get(group_id)
        if g is None or not g.pending_txn:
            return set()
        held = {tp for offsets in g.pending_txn.values() for tp in offsets}
        return held if tps is None else held & set(tps)

    def fetch_offsets(self, group_id: str, tps: list[TopicPartition] | None
                      ) -> tuple[int, dict[TopicPartition, CommittedOffset | None]]:
        """(group error, committed offset or None per partition); `tps` None: every
        partition the group has committed."""
        code, _ = self._owner(group_id)
        if code:
            return code, {}
        g = self.groups.get(group_id)
        have = g.offsets if g is not None else {}
        if tps is None:
            return errors.NONE, dict(have)
        return errors.NONE, {tp: have.get(tp) for tp in tps}

    async def expire_offsets(self, now_ms: int) -> int:
        """Kafka's offsets retention (KIP-211, GroupMetadata.removeExpiredOffsets): a
        consumer group that has been Empty for `offsets.retention.minutes` loses its
        committed offsets, and then the group itself; a group that never had members
        (commits from outside any membership) loses each offset that long after it was
        committed; a Stable consumer group loses, that long after they were committed,
        the offsets of topics none of its members subscribes to (a topic it no longer
        reads) and keeps the others. An offset committed with an expire timestamp
        expires then instead. Tombstones are written first; the cache forgets only what
        was written. Returns how many offsets expired."""
        retention = self.settings.offsets_retention_ms

        def expired(c: CommittedOffset, since: int) -> bool:
            if c.expire_timestamp >= 0:
                return c.expire_timestamp <= now_ms
            return since <= now_ms - retention

        expired_total = 0
        for g in list(self.groups.values()):
            if g.partition not in self.loaded:
                continue
            if g.is_(GroupState.EMPTY):
                # A consumer group counts from when it became Empty (a group written
                # without that time, by an old Kafka, from each commit).
                since = g.state_timestamp if g.protocol_type and g.state_timestamp >= 0 else None
                gone = [tp for tp, c in g.offsets.items()
                        if expired(c, c.commit_timestamp if since is None else since)]
                # Kafka's hasOffsets: offsets of an open transaction keep the group.
                drop_group = len(gone) == len(g.offsets) and not any(g.pending_txn.values())
            elif g.is_(GroupState.STABLE) and g.protocol_type == "consumer" \
                    and (subscribed := g.subscribed_topics()) is not None:
                gone = [tp for tp, c in g.offsets.items()
                        if tp.topic not in subscribed and expired(c, c.commit_timestamp)]
                drop_group = False
            else:
                continue
            if not gone and not drop_group:
                continue
            tombstones = _tombstones(g.group_id, gone, drop_group)
            code = await self.log.append(g.partition, build_batch(tombstones),
                                         self.settings.commit_timeout_ms)
            if code:
                log.warning("group %s: expiring %d offsets failed: %s", g.group_id, len(gone),
                            errors.name_of(code))
                continue
            for tp in gone:
                g.offsets.pop(tp, None)
                g.offsets_at.pop(tp, None)
            expired_total += len(gone)
            if drop_group and g.is_(GroupState.EMPTY) and not g.offsets \
                    and not any(g.pending_txn.values()) and self.groups.get(g.group_id) is g:
                self._transition(g, GroupState.DEAD)
                del self.groups[g.group_id]
            log.info("group %s: %d committed offsets expired (offsets.retention.minutes)%s",
                     g.group_id, len(gone), "; group removed" if drop_group else "")
        return expired_total

    def partitions_deleted(self, tps: Iterable[TopicPartition]) -> asyncio.Task[int]:
        """Partitions of a deleted topic (Kafka's GroupCoordinator.handleDeletedPartitions
        and GroupMetadataManager.cleanupGroupMetadata): each group coordinated here
        forgets its committed offsets of them, and the pending ones of open transactions,
        at once, so OffsetFetch no longer answers them and a consumer of a re-created
        topic starts from auto.offset.reset. A group this leaves Empty with no offsets
        goes Dead. Then, per group, the offsets' tombstones (and the group's, when it went
        and was ever written: generation above 0) are appended, so a reload finds them
        gone too; a failed append is logged, as Kafka does (nothing asks again).
        Returns the task writing the tombstones (how many offsets went); a caller may
        wait for it or not."""
        gone = set(tps)
        batches: list[tuple[Group, list[Record], int]] = []
        for g in list(self.groups.values()):
            if g.partition not in self.loaded or g.is_(GroupState.DEAD):
                continue
            dropped = sorted(tp for tp in g.offsets if tp in gone)
            pending = False
            for offsets in g.pending_txn.values():
                for tp in gone & offsets.keys():
                    del offsets[tp]
                    pending = True
            if not dropped and not pending:
                continue
            for tp in dropped:
                del g.offsets[tp]
                g.offsets_at.pop(tp, None)
            dead = g.is_(GroupState.EMPTY) and not g.offsets and not any(g.pending_txn.values())
            if dead:
                self._transition(g, GroupState.DEAD)
                del self.groups[g.group_id]
            tombstones = _tombstones(g.group_id, dropped, dead and g.generation > 0)
            log.info("group %s: offsets of deleted partitions dropped: %s%s", g.group_id,
                     ", ".join(str(tp) for tp in dropped) or "pending ones only",
                     "; group removed" if dead else "")
            if tombstones:
                batches.append((g, tombstones, len(dropped)))
        task = asyncio.ensure_future(self._write_tombstones(batches))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        return task

    async def _write_tombstones(self, batches: list[tuple[Group, list[Record], int]]) -> int:
        written = 0
        for g, tombstones, offsets in batches:
            try:
                code = await self.log.append(g.partition, build_batch(tombstones),
                                             self.settings.commit_timeout_ms)
            except Exception as err:  # noqa: BLE001 - logged; the other groups' still go
                log.warning("group %s: writing the tombstones of %d offsets of deleted "
                            "partitions to %s-%d failed (%s: %s)", g.group_id, offsets,
                            OFFSETS_TOPIC, g.partition, type(err).__name__, err)
                continue
            if code:
                log.warning("group %s: writing the tombstones of %d offsets of deleted "
                            "partitions to %s-%d failed (%s); a reload of it brings them back",
                            g.group_id, offsets, OFFSETS_TOPIC, g.partition,
                            errors.name_of(code))
            else:
                written += offsets
        return written

    # ---- ListGroups, DescribeGroups, DeleteGroups ----

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values()
                if g.partition in self.loaded and not g.is_(GroupState.DEAD)]

    def loading(self) -> bool:
        return any(not t.done() for _, t in self._loading.values())

    def describe(self, group_id: str) -> tuple[int, Group | None]:
        code, _ = self._owner(group_id)
        if code:
            return code, None
        return errors.NONE, self.groups.get(group_id)

    async def delete(self, group_id: str) -> int:
        code, p = self._owner(group_id)
        if code:
            return code
        g = self.groups.get(group_id)
        if g is None or g.is_(GroupState.DEAD):
            return errors.GROUP_ID_NOT_FOUND
        if not g.is_(GroupState.EMPTY):
            return errors.NON_EMPTY_GROUP
        tombstones = [Record(records.offset_key(group_id, tp), None) for tp in g.offsets]
        tombstones.append(Record(records.group_key(group_id), None))
        self._transition(g, GroupState.DEAD)
        code = await self.log.append(p, build_batch(tombstones), self.settings.commit_timeout_ms)
        if code:
            self._transition(g, GroupState.EMPTY)
            return _coordinator_error(code, offsets=False)
        if self.groups.get(group_id) is g:
            del self.groups[group_id]
        log.info("group %s deleted (%d committed offsets)", group_id, len(g.offsets))
        return errors.NONE

    async def delete_offsets(self, group_id: str, tps: list[TopicPartition]
                             ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete (KIP-496): the group's committed offsets of `tps` go (tombstones
        first, then the cache). An Empty group loses any of them; an active consumer
        group only those of topics no member subscribes to (the others answer
        GROUP_SUBSCRIBED_TO_TOPIC); any other active group none (NON_EMPTY_GROUP).
        Returns the group's code and one code per partition."""
        code, p = self._owner(group_id)
        if code:
            return code, {}
        g = self.groups.get(group_id)
        if g is None or g.is_(GroupState.DEAD):
            return errors.GROUP_ID_NOT_FOUND, {}
        refused: dict[TopicPartition, int] = {}
        if not g.is_(GroupState.EMPTY):
            if g.protocol_type != "consumer":
                return errors.NON_EMPTY_GROUP, {}
            subscribed = g.subscribed_topics()
            refused = {tp: errors.GROUP_SUBSCRIBED_TO_TOPIC for tp in tps
                       if subscribed is None or tp.topic in subscribed}
        gone = sorted({tp for tp in tps if tp not in refused and tp in g.offsets})
        if gone:
            tombstones = [Record(records.offset_key(group_id, tp), None) for tp in gone]
            code = await self.log.append(p, build_batch(tombstones),
                                         self.settings.commit_timeout_ms)
            if code:
                return _coordinator_error(code, offsets=False), {}
            for tp in gone:
                g.offsets.pop(tp, None)
                g.offsets_at.pop(tp, None)
            log.info("group %s: committed offsets of %s deleted", group_id,
                     ", ".join(str(tp) for tp in gone))
        return errors.NONE, {tp: refused.get(tp, errors.NONE) for tp in tps}


def _validate_offset_commit(g: Group | None, generation: int, member_id: str,
                            instance_id: str | None, *, txn: bool) -> int:
    """Who may commit offsets to group `g` (None: no such group yet), Kafka's
    validateOffsetCommit: generation -1 commits from outside any membership (admin
    tools, "simple" consumers, a transactional producer's sendOffsetsToTransaction
    without group metadata) while the group has no members, whatever member id they
    carry; a generation, member id or instance id otherwise names a current member;
    and a plain commit without one is refused while the group has members (a
    transactional one is not: older TxnOffsetCommit versions carry no member)."""
    if g is not None and g.is_(GroupState.DEAD):
        return errors.COORDINATOR_NOT_AVAILABLE
    empty = g is None or g.is_(GroupState.EMPTY)
    if generation < 0 and empty:
        return errors.NONE
    if generation >= 0 or member_id or instance_id is not None:
        return _check_member(g, generation, member_id, instance_id)
    if not txn and not empty:
        return errors.UNKNOWN_MEMBER_ID
    return errors.NONE


def _check_member(g: Group | None, generation: int, member_id: str,
                  instance_id: str | None) -> int:
    """A commit naming a member: it must be one, of this generation (and its static
    instance's)."""
    if g is not None and g.is_fenced(instance_id, member_id):
        return errors.FENCED_INSTANCE_ID
    if g is None or member_id not in g.members:
        return errors.UNKNOWN_MEMBER_ID
    if instance_id and g.static_members.get(instance_id) != member_id:
        return errors.FENCED_INSTANCE_ID
    if generation != g.generation:
        return errors.ILLEGAL_GENERATION
    return errors.NONE


def _apply_offset(group_offsets: dict[TopicPartition, CommittedOffset],
                  offsets_at: dict[TopicPartition, int], e: OffsetEntry, at: int, *,
                  txn: bool = False) -> None:
    """`e`, written at offset `at`, as the group's offset. A committed transaction's
    offset does not replace one written after it (an OffsetCommit while the transaction
    was open): Kafka's completePendingTxnOffsetCommit and its loader keep the newer."""
    if txn and e.tp in group_offsets and offsets_at.get(e.tp, -1) > at >= 0:
        return
    if e.value is None:
        group_offsets.pop(e.tp, None)
        offsets_at.pop(e.tp, None)
    else:
        group_offsets[e.tp] = e.value
        offsets_at[e.tp] = at


def _answer_join(m: Member, result: JoinResult) -> None:
    if m.join_future is not None and not m.join_future.done():
        m.join_future.set_result(result)


def _answer_sync(m: Member, code: int, assignment: bytes = b"") -> None:
    if m.sync_future is not None and not m.sync_future.done():
        m.sync_future.set_result((code, assignment))


def _tombstones(group_id: str, tps: Iterable[TopicPartition], group: bool) -> list[Record]:
    """The __consumer_offsets tombstones of a group's committed offsets of `tps`, and of
    the group itself when `group`."""
    out = [Record(records.offset_key(group_id, tp), None) for tp in tps]
    if group:
        out.append(Record(records.group_key(group_id), None))
    return out
