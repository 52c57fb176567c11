"""The Kafka APIs of consumer groups and committed offsets: FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups
and DeleteGroups (docs/groups.md).

Requests are decoded into calls on the group coordinator (daemon.coordinator) and its
answers encoded back at the request's version; nothing here decides group state. A
group request that reaches a broker which does not coordinate the group is answered
NOT_COORDINATOR (16), or COORDINATOR_LOAD_IN_PROGRESS (14) while its partition of
`__consumer_offsets` is read, and the client looks the coordinator up again.
FindCoordinator creates `__consumer_offsets` the first time it is asked (Kafka does),
and answers COORDINATOR_NOT_AVAILABLE (15) until that partition has a leader.

With an authorizer (daemon.security.acls), each request is checked as Kafka checks it:
Read on the group to join, sync, heartbeat, leave and commit (and Read on each committed
topic), Describe on the group to find its coordinator, fetch its offsets (Describe on
each topic: others are left out or answered TOPIC_AUTHORIZATION_FAILED) and describe it,
Delete to delete it or its offsets; ListGroups lists every group with Describe on the
cluster, else only those the principal may describe.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kafka.protocol.admin import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from logstore import TopicPartition

from ..coordinator.coordinator import GroupCoordinator, OffsetCommit
from ..coordinator.group import GroupState
from ..security.acls import Operation, ResourceType
from . import errors, protocol

log = logging.getLogger("logkeeper.groups")

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


class GroupApis:
    """The handlers; `coordinator_of` answers (error, node id, host, port) for a
    partition of __consumer_offsets, `ensure_offsets_topic` creates the topic."""

    def __init__(self, coordinator: GroupCoordinator,
                 coordinator_node: Callable[[int, str], tuple[int, int, str, int]],
                 ensure_offsets_topic: Callable[[], Awaitable[int]],
                 partition_exists: Callable[[TopicPartition], bool]):
        self.coordinator = coordinator
        self.coordinator_node = coordinator_node
        self.ensure_offsets_topic = ensure_offsets_topic
        self.partition_exists = partition_exists
        # FindCoordinator for a transactional id (key type 1): daemon.api.transactions.
        self.transactions: Any = None

    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        return {8: self.offset_commit, 9: self.offset_fetch, 10: self.find_coordinator,
                11: self.join_group, 12: self.heartbeat, 13: self.leave_group,
                14: self.sync_group, 15: self.describe_groups, 16: self.list_groups,
                42: self.delete_groups, 47: self.offset_delete}

    # ---- FindCoordinator ----

    async def find_coordinator(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        keys = list(body.coordinator_keys) if req.version >= 4 else [body.key]
        key_type = body.key_type if req.version >= 1 else KEY_TYPE_GROUP
        answers = [await self._coordinator_for(k, key_type, conn)
                   if key_type != KEY_TYPE_GROUP or conn.allowed(
                       Operation.DESCRIBE, ResourceType.GROUP, k)
                   else (errors.GROUP_AUTHORIZATION_FAILED, None, -1, "", -1) for k in keys]
        if req.version >= 4:
            C = FindCoordinatorResponse.Coordinator
            return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
                C(key=k, node_id=n, host=h, port=p, error_code=e, error_message=m)
                for k, (e, m, n, h, p) in zip(keys, answers, strict=True)])
        e, m, n, h, p = answers[0]
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=e, error_message=m,
                                       node_id=n, host=h, port=p)

    async def _coordinator_for(self, key: str, key_type: int, conn: Any
                               ) -> tuple[int, str | None, int, str, int]:
        """The coordinator of `key` (a group id, or a transactional id for key type 1),
        at its endpoint on the listener the request came on."""
        listener = conn.listener
        if key_type == KEY_TYPE_TRANSACTION and self.transactions is not None:
            return await self.transactions.coordinator_for(key, listener, conn)
        if key_type != KEY_TYPE_GROUP:
            return errors.INVALID_REQUEST, f"unknown coordinator key type {key_type}", -1, "", -1
        if not key:
            return errors.INVALID_REQUEST, "an empty group id", -1, "", -1
        return await coordinator_endpoint(key, self.coordinator.partition_of,
                                          self.ensure_offsets_topic, self.coordinator_node,
                                          listener, "group", "__consumer_offsets")

    # ---- membership ----

    async def join_group(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        v = req.version
        if not conn.allowed(Operation.READ, ResourceType.GROUP, b.group_id):
            return JoinGroupResponse(
                throttle_time_ms=0, error_code=errors.GROUP_AUTHORIZATION_FAILED,
                generation_id=-1, protocol_type=None, protocol_name=None if v >= 7 else "",
                leader="", skip_assignment=False, member_id=b.member_id, members=[])
        res = await self.coordinator.join(
            b.group_id, b.member_id, b.group_instance_id if v >= 5 else None,
            req.client_id or "", _host(conn), b.session_timeout_ms,
            b.rebalance_timeout_ms if v >= 1 else b.session_timeout_ms, b.protocol_type,
            [(p.name, bytes(p.metadata)) for p in b.protocols],
            require_known_member_id=v >= 4, skip_assignment_supported=v >= 9)
        M = JoinGroupResponse.JoinGroupResponseMember
        return JoinGroupResponse(
            throttle_time_ms=0, error_code=res.error, generation_id=res.generation,
            protocol_type=res.protocol_type, protocol_name=res.protocol_name
            if res.protocol_name is not None or v >= 7 else "",
            leader=res.leader, skip_assignment=res.skip_assignment, member_id=res.member_id,
            members=[M(member_id=mid, group_instance_id=iid, metadata=meta)
                     for mid, iid, meta in res.members])

    async def sync_group(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        v = req.version
        if not conn.allowed(Operation.READ, ResourceType.GROUP, b.group_id):
            return SyncGroupResponse(throttle_time_ms=0,
                                     error_code=errors.GROUP_AUTHORIZATION_FAILED,
                                     protocol_type=None, protocol_name=None, assignment=b"")
        code, assignment = await self.coordinator.sync(
            b.group_id, b.generation_id, b.member_id, b.group_instance_id if v >= 3 else None,
            b.protocol_type if v >= 5 else None, b.protocol_name if v >= 5 else None,
            {a.member_id: bytes(a.assignment) for a in b.assignments})
        g = self.coordinator.groups.get(b.group_id)
        return SyncGroupResponse(
            throttle_time_ms=0, error_code=code,
            protocol_type=g.protocol_type if g is not None and not code else None,
            protocol_name=g.protocol_name if g is not None and not code else None,
            assignment=assignment)

    async def heartbeat(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        if not conn.allowed(Operation.READ, ResourceType.GROUP, b.group_id):
            return HeartbeatResponse(throttle_time_ms=0,
                                     error_code=errors.GROUP_AUTHORIZATION_FAILED)
        code = self.coordinator.heartbeat(b.group_id, b.generation_id, b.member_id,
                                          b.group_instance_id if req.version >= 3 else None)
        return HeartbeatResponse(throttle_time_ms=0, error_code=code)

    async def leave_group(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        if not conn.allowed(Operation.READ, ResourceType.GROUP, b.group_id):
            return LeaveGroupResponse(throttle_time_ms=0,
                                      error_code=errors.GROUP_AUTHORIZATION_FAILED, members=[])
        if req.version >= 3:
            who = [(m.member_id, m.group_instance_id) for m in b.members]
        else:
            who = [(b.member_id, None)]
        code, results = self.coordinator.leave(b.group_id, who)
        if req.version < 3 and not code and results:
            code = results[0][2]
        R = LeaveGroupResponse.MemberResponse
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code, members=[
            R(member_id=m, group_instance_id=i, error_code=e) for m, i, e in results])

    # ---- offsets ----

    async def offset_commit(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        v = req.version
        T = OffsetCommitResponse.OffsetCommitResponseTopic
        P = T.OffsetCommitResponsePartition
        if not conn.allowed(Operation.READ, ResourceType.GROUP, b.group_id):
            return OffsetCommitResponse(throttle_time_ms=0, topics=[T(name=t.name, partitions=[
                P(partition_index=p.partition_index, error_code=errors.GROUP_AUTHORIZATION_FAILED)
                for p in t.partitions]) for t in b.topics])
        asked = [OffsetCommit(TopicPartition(t.name, p.partition_index), p.committed_offset,
                              p.committed_leader_epoch if v >= 6 else -1,
                              p.committed_metadata,
                              p.commit_timestamp if v == 1 else -1)
                 for t in b.topics for p in t.partitions]
        refused = refused_offsets((c.tp for c in asked), conn, self.partition_exists)
        commits = [c for c in asked if c.tp not in refused]
        code, per_partition = errors.NONE, {}
        if commits or not asked:
            code, per_partition = await self.coordinator.commit(
                b.group_id, b.generation_id_or_member_epoch, b.member_id,
                b.group_instance_id if v >= 7 else None, commits,
                b.retention_time_ms if 2 <= v <= 4 else -1)
        out: dict[str, list[Any]] = {}
        for c in asked:
            e = refused.get(c.tp) or code or per_partition.get(c.tp, errors.NONE)
            out.setdefault(c.tp.topic, []).append(P(partition_index=c.tp.partition, error_code=e))
        return OffsetCommitResponse(throttle_time_ms=0, topics=[
            T(name=t, partitions=ps) for t, ps in out.items()])

    async def offset_fetch(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        v = req.version
        if v >= 8:
            G = OffsetFetchResponse.OffsetFetchResponseGroup
            T = G.OffsetFetchResponseTopics
            P = T.OffsetFetchResponsePartitions
            groups = []
            for grp in b.groups:
                code, topics = self._fetch(grp.group_id, grp.topics, T, P, v, conn,
                                           bool(b.require_stable))
                groups.append(G(group_id=grp.group_id, topics=topics, error_code=code))
            return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
        T = OffsetFetchResponse.OffsetFetchResponseTopic
        P = T.OffsetFetchResponsePartition
        code, topics = self._fetch(b.group_id, b.topics, T, P, v, conn,
                                   v >= 7 and bool(b.require_stable))
        if v < 2 and code:
            # v0-1 have no group error: every partition asked for carries it.
            for t in topics:
                for p in t.partitions:
                    p.error_code = code
        return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=code)

    def _fetch(self, group_id: str, asked: Any, T: Any, P: Any, v: int,
               conn: Any, require_stable: bool = False) -> tuple[int, list[Any]]:
        tps = None if asked is None else [TopicPartition(t.name, i)
                                          for t in asked for i in t.partition_indexes]
        unstable: set[TopicPartition] = set()
        if not conn.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            code, got = errors.GROUP_AUTHORIZATION_FAILED, {}
        else:
            code, got = self.coordinator.fetch_offsets(group_id, tps)
            if require_stable and not code:
                # Offsets a transaction holds open (v7+, a read_committed consumer's):
                # UNSTABLE_OFFSET_COMMIT until its marker, and the consumer asks again.
                unstable = self.coordinator.unstable(group_id, tps)
        if code:
            got = {tp: None for tp in tps or []}
        # Offsets of a topic it may not describe: left out of "all", refused when asked.
        described = {t: conn.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t,
                                     log_denied=tps is not None)
                     for t in {tp.topic for tp in got}}
        out: dict[str, list[Any]] = {}
        for tp in sorted(got):
            c = got[tp]
            if not described[tp.topic]:
                if tps is not None:
                    out.setdefault(tp.topic, []).append(P(
                        partition_index=tp.partition, committed_offset=-1,
                        committed_leader_epoch=-1, metadata="",
                        error_code=errors.TOPIC_AUTHORIZATION_FAILED))
                continue
            if tp in unstable:
                out.setdefault(tp.topic, []).append(P(
                    partition_index=tp.partition, committed_offset=-1,
                    committed_leader_epoch=-1, metadata="",
                    error_code=errors.UNSTABLE_OFFSET_COMMIT))
                continue
            out.setdefault(tp.topic, []).append(P(
                partition_index=tp.partition, committed_offset=c.offset if c else -1,
                committed_leader_epoch=c.leader_epoch if c else -1,
                metadata=c.metadata if c else "", error_code=errors.NONE))
        return code, [T(name=t, partitions=ps) for t, ps in out.items()]

    # ---- admin ----

    async def list_groups(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        states = {s.lower() for s in b.states_filter} if req.version >= 4 else set()
        types = {t.lower() for t in b.types_filter} if req.version >= 5 else set()
        G = ListGroupsResponse.ListedGroup
        every = conn.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, log_denied=False)
        groups = [G(group_id=g.group_id, protocol_type=g.protocol_type or "",
                    group_state=g.state.value, group_type="classic")
                  for g in self.coordinator.list_groups()
                  if (not states or g.state.value.lower() in states)
                  and (not types or "classic" in types)
                  and (every or conn.allowed(Operation.DESCRIBE, ResourceType.GROUP, g.group_id,
                                             log_denied=False))]
        code = errors.COORDINATOR_LOAD_IN_PROGRESS if self.coordinator.loading() else errors.NONE
        return ListGroupsResponse(throttle_time_ms=0, error_code=code, groups=groups)

    async def describe_groups(self, req: protocol.Request, conn: Any) -> Any:
        D = DescribeGroupsResponse.DescribedGroup
        M = D.DescribedGroupMember
        out = []
        for gid in req.body.groups:
            if not conn.allowed(Operation.DESCRIBE, ResourceType.GROUP, gid):
                out.append(D(error_code=errors.GROUP_AUTHORIZATION_FAILED, group_id=gid,
                             group_state="", protocol_type="", protocol_data="", members=[]))
                continue
            code, g = self.coordinator.describe(gid)
            ops = None  # not asked, or an error: INT32_MIN on the wire
            if not code and req.version >= 3 and req.body.include_authorized_operations:
                # Also for a group that is not there (Dead), as Kafka answers it.
                ops = conn.authorized_operations(ResourceType.GROUP, gid)
            if code or g is None:
                out.append(D(error_code=code, group_id=gid,
                             group_state=GroupState.DEAD.value if not code else "",
                             authorized_operations=ops,
                             protocol_type="", protocol_data="", members=[]))
                continue
            view = g.describe()
            out.append(D(error_code=errors.NONE, group_id=gid, group_state=view["state"],
                         authorized_operations=ops,
                         protocol_type=view["protocol_type"], protocol_data=view["protocol"],
                         members=[M(member_id=mid, group_instance_id=iid, client_id=cid,
                                    client_host=host, member_metadata=meta,
                                    member_assignment=assignment)
                                  for mid, iid, cid, host, meta, assignment in view["members"]]))
        return DescribeGroupsResponse(throttle_time_ms=0, groups=out)

    async def delete_groups(self, req: protocol.Request, conn: Any) -> Any:
        R = DeleteGroupsResponse.DeletableGroupResult
        results = []
        for gid in req.body.groups_names:
            if not conn.allowed(Operation.DELETE, ResourceType.GROUP, gid):
                results.append(R(group_id=gid, error_code=errors.GROUP_AUTHORIZATION_FAILED))
                continue
            results.append(R(group_id=gid, error_code=await self.coordinator.delete(gid)))
        return DeleteGroupsResponse(throttle_time_ms=0, results=results)

    # ---- OffsetDelete ----

    async def offset_delete(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        T = OffsetDeleteResponse.OffsetDeleteResponseTopic
        P = T.OffsetDeleteResponsePartition
        if not conn.allowed(Operation.DELETE, ResourceType.GROUP, body.group_id):
            return OffsetDeleteResponse(error_code=errors.GROUP_AUTHORIZATION_FAILED,
                                        throttle_time_ms=0, topics=[])
        asked = [TopicPartition(t.name, p.partition_index)
                 for t in body.topics for p in t.partitions]
        refused = refused_offsets(asked, conn, self.partition_exists)
        tps = [tp for tp in asked if tp not in refused]
        code, per = await self.coordinator.delete_offsets(body.group_id, tps)
        by_topic: dict[str, list[Any]] = {}
        if not code:
            for tp in asked:
                by_topic.setdefault(tp.topic, []).append(P(
                    partition_index=tp.partition, error_code=refused.get(tp) or per[tp]))
        return OffsetDeleteResponse(error_code=code, throttle_time_ms=0, topics=[
            T(name=t, partitions=ps) for t, ps in by_topic.items()])


def refused_offsets(tps: Iterable[TopicPartition], conn: Any,
                    partition_exists: Callable[[TopicPartition], bool]) -> dict[TopicPartition, int]:
    """The partitions of an OffsetCommit, TxnOffsetCommit or OffsetDelete the coordinator
    is not asked about, each with its error, as Kafka's KafkaApis checks them first: a
    topic the principal may not read TOPIC_AUTHORIZATION_FAILED, a topic or partition
    the cluster does not have UNKNOWN_TOPIC_OR_PARTITION (an offset of it would be kept
    for a partition no consumer can read, and listed with the group's)."""
    out = {}
    readable: dict[str, bool] = {}
    for tp in tps:
        if tp.topic not in readable:
            readable[tp.topic] = conn.allowed(Operation.READ, ResourceType.TOPIC, tp.topic)
        if not readable[tp.topic]:
            out[tp] = errors.TOPIC_AUTHORIZATION_FAILED
        elif not partition_exists(tp):
            out[tp] = errors.UNKNOWN_TOPIC_OR_PARTITION
    return out


async def coordinator_endpoint(key: str, partition_of: Callable[[str], int | None],
                               ensure_topic: Callable[[], Awaitable[int]],
                               coordinator_node: Callable[[int, str], tuple[int, int, str, int]],
                               listener: str, what: str, topic: str
                               ) -> tuple[int, str | None, int, str, int]:
    """(error, message, node, host, port) of the coordinator of `key` (a `what`): the
    leader of its partition of `topic`, created at the first lookup (Kafka does), at its
    endpoint on `listener`."""
    p = partition_of(key)
    if p is None:
        code = await ensure_topic()
        p = partition_of(key)
        if p is None:
            return (code or errors.COORDINATOR_NOT_AVAILABLE,
                    f"the {topic} topic is being created", -1, "", -1)
    code, node, host, port = coordinator_node(p, listener)
    if code:
        return code, f"the {what}'s {topic} partition has no leader", -1, "", -1
    return errors.NONE, None, node, host, port


def _host(conn: Any) -> str:
    """The client's address as Kafka reports it ("/127.0.0.1")."""
    peer = getattr(conn, "peer", "") or ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return f"/{host.strip('[]')}"
