"""DeleteRecords (21), CreatePartitions (37), ElectLeaders (43),
AlterPartitionReassignments (45) and ListPartitionReassignments (46), as a ZooKeeper-mode
Kafka broker answers them (docs/cluster.md "Deleting records and adding partitions",
"Preferred leaders", "Reassigning partitions").

DeleteRecords is served by each partition's leader: the log start offset moves up to
the offset asked (-1: the high watermark), whole segments below it are deleted at once,
followers follow from the log start offset in their Fetch answers, and ListOffsets
EARLIEST answers it. As Kafka's DelayedDeleteRecords, the answer waits until the low
watermark (the least log start offset of the leader and of every replica on a live
broker, each follower's as its Fetch requests tell it; daemon.replica.isr) reaches the
offset asked, and answers it then: a leader lost after the answer leaves no replica
that could lead with the records back. A partition still waiting at `timeout_ms` answers
REQUEST_TIMED_OUT (7): the leader's delete is done and stays done, and the followers
follow at their next fetch. Leadership lost meanwhile answers 6. Standalone, the log
start offset is the low watermark: the answer is at once.

CreatePartitions: standalone, this broker adds the partitions to its dirs (placed by
free space, with the topic's config); in a cluster only the active controller takes it
(others answer 41), writes the longer assignment to `/brokers/topics/<t>`, and the
answer waits until this broker's metadata shows a leader for every partition, or
`timeout_ms` (7).

ElectLeaders: only the active controller takes it (others answer 41 per partition
asked, or for every partition they know when all are asked for);
PREFERRED moves leadership back to each partition's first replica when it is alive and
in the ISR (else 80), UNCLEAN elects a leader for leaderless partitions (else 83); a
partition that needs neither answers 84, and is left out when all partitions were asked
for. The answer waits until this broker's metadata shows the new leaders, or
`timeout_ms` (7). Standalone, this broker is every partition's only replica: 84.

AlterPartitionReassignments and ListPartitionReassignments: only the active controller
takes them (others answer 41 for the whole request); the controller starts, changes or
cancels each reassignment (daemon.controller.reassignment) and the answer comes once it
has started, as Kafka's; ListPartitionReassignments shows those in progress with their
replicas, adding and removing replicas. Standalone, this broker is every partition's
only replica: a reassignment to it alone is done already (0), one naming another
broker 39, a cancel 85; none is ever in progress.

Errors, per partition or topic, each changing nothing: a partition not led here 6, an
unknown one 3, an offset past the high watermark 1 (OFFSET_OUT_OF_RANGE), an offline
dir 56; a count not above the current one or a bad assignment 37 / 39
(INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT), a topic named twice 42.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsResponse,
    CreatePartitionsResponse,
    DeleteRecordsResponse,
    ElectLeadersResponse,
    ListPartitionReassignmentsResponse,
)

from logstore import TopicPartition

from ..replica.manager import ReplicaManager
from ..replica.partition import Partition, delayed
from ..replica.topics import TopicAdmin, TopicError, refuse_internal
from ..security.acls import Operation, ResourceType
from . import errors, protocol

log = logging.getLogger("logkeeper.handlers")


class PartitionApis:
    """Event loop only. `controller()` is the cluster's controller on this broker (None
    standalone); `stopping` ends the waits when the daemon stops."""

    def __init__(self, replicas: ReplicaManager, topic_admin: TopicAdmin, *,
                 controller: Callable[[], Any] | None = None,
                 metadata: Any | None = None,
                 stopping: asyncio.Event | None = None):
        self.replicas = replicas
        self.leadership = replicas.leadership
        self.topic_admin = topic_admin
        self.controller = controller or (lambda: None)
        self.metadata = metadata  # cluster: the metadata cache UpdateMetadata fills
        self.stopping = stopping or asyncio.Event()

    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        return {21: self.delete_records, 37: self.create_partitions, 43: self.elect_leaders,
                45: self.alter_partition_reassignments, 46: self.list_partition_reassignments}

    # ---- DeleteRecords ----

    async def delete_records(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        R = DeleteRecordsResponse.DeleteRecordsTopicResult
        P = R.DeleteRecordsPartitionResult
        slots: list[tuple[str, int, tuple[int, int] | None]] = []
        items: list[tuple[Partition, int]] = []
        for t in body.topics:
            allowed = conn.allowed(Operation.DELETE, ResourceType.TOPIC, t.name)
            for part in t.partitions:
                p = self.replicas.get(t.name, part.partition_index)
                if not allowed:
                    slots.append((t.name, part.partition_index,
                                  (errors.TOPIC_AUTHORIZATION_FAILED, -1)))
                elif p is None:
                    slots.append((t.name, part.partition_index,
                                  (errors.unknown_topic_code(t.name), -1)))
                elif not self.leadership.is_leader(p):
                    slots.append((t.name, part.partition_index,
                                  (errors.NOT_LEADER_OR_FOLLOWER, -1)))
                else:
                    slots.append((t.name, part.partition_index, None))
                    items.append((p, part.offset))
        deleted = await self.replicas.delete_records(items) if items else []
        answers = await self._await_low_watermarks(items, deleted, body.timeout_ms)
        done = iter(answers)
        out: dict[str, list[Any]] = {}
        for topic, index, res in slots:
            code, low = res if res is not None else next(done)
            if code == errors.NONE:
                log.info("DeleteRecords: %s-%d starts at %d now", topic, index, low)
            elif code == errors.REQUEST_TIMED_OUT:
                log.warning("DeleteRecords: %s-%d: deleted here, but a replica on a live "
                            "broker still started below the offset asked after %d ms "
                            "(low watermark %d)", topic, index, body.timeout_ms, low)
            out.setdefault(topic, []).append(P(partition_index=index, low_watermark=low,
                                               error_code=code))
        return DeleteRecordsResponse(throttle_time_ms=0, topics=[
            R(name=t, partitions=ps) for t, ps in out.items()])

    async def _await_low_watermarks(self, items: list[tuple[Partition, int]],
                                    deleted: list[tuple[int, int, int]], timeout_ms: int
                                    ) -> list[tuple[int, int]]:
        """Kafka's DelayedDeleteRecords: (error, low watermark) per partition deleted
        from (`deleted`: the leader's error, new log start, offset required), each one
        answered once its low watermark reaches the offset required, NOT_LEADER_OR_FOLLOWER
        (6) if leadership is lost first, REQUEST_TIMED_OUT (7) at `timeout_ms` with the
        low watermark as it was right after the delete (Kafka's)."""
        out = [(code, low) for code, low, _ in deleted]
        waiting = {i: p for i, ((p, _), (code, _, _)) in enumerate(zip(items, deleted, strict=True))
                   if code == errors.NONE}
        first: dict[int, int] = {}

        def settled(i: int) -> bool:
            low = self.replicas.low_watermark(waiting[i])
            if low is None:
                out[i] = (errors.NOT_LEADER_OR_FOLLOWER, -1)
                return True
            first.setdefault(i, low)
            out[i] = (errors.NONE, low)
            return low >= deleted[i][2]

        for i in await delayed(waiting, settled, timeout_ms, self.stopping):
            out[i] = (errors.REQUEST_TIMED_OUT, first.get(i, out[i][1]))
        return out

    # ---- CreatePartitions ----

    async def create_partitions(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        R = CreatePartitionsResponse.CreatePartitionsTopicResult
        twice = {n for n, c in Counter(t.name for t in body.topics).items() if c > 1}
        controller = self.controller()
        deadline = time.monotonic() + max(body.timeout_ms, 0) / 1000
        out = []
        for t in body.topics:
            assignments = ([list(a.broker_ids) for a in t.assignments]
                           if t.assignments is not None else None)
            try:
                if t.name in twice:
                    raise TopicError(errors.INVALID_REQUEST,
                                     f"Duplicate topic in request: {t.name}")
                if not conn.allowed(Operation.ALTER, ResourceType.TOPIC, t.name):
                    raise TopicError(errors.TOPIC_AUTHORIZATION_FAILED,
                                     "The topic authorization is failed.")
                refuse_internal(t.name, "add partitions to")
                if controller is None:
                    await self.topic_admin.create_partitions(
                        t.name, t.count, assignments, validate_only=body.validate_only)
                else:
                    await self._create_in_cluster(controller, t.name, t.count, assignments,
                                                  body.validate_only, deadline)
                out.append(R(name=t.name, error_code=errors.NONE, error_message=None))
            except TopicError as err:
                log.info("CreatePartitions of %s refused: %s", t.name, err)
                out.append(R(name=t.name, error_code=err.code, error_message=str(err)))
        return CreatePartitionsResponse(throttle_time_ms=0, results=out)

    async def _create_in_cluster(self, controller: Any, topic: str, count: int,
                                 assignments: list[list[int]] | None, validate_only: bool,
                                 deadline: float) -> None:
        if not controller.is_active:
            raise TopicError(errors.NOT_CONTROLLER, "this broker is not the controller")
        fut = controller.create_partitions(topic, count, assignments, validate_only)
        try:
            code, message = await asyncio.wait_for(
                asyncio.wrap_future(fut), max(deadline - time.monotonic(), 1.0))
        except TimeoutError:
            raise TopicError(errors.REQUEST_TIMED_OUT,
                             f"{topic}: partitions not added in time") from None
        except Exception as err:  # noqa: BLE001 - ZooKeeper trouble or a moved controller
            raise TopicError(*errors.error_of(err, f"add partitions to {topic}")) from err
        if code:
            raise TopicError(code, message)
        if not validate_only and not await self._wait_for_partitions(topic, count, deadline):
            raise TopicError(errors.REQUEST_TIMED_OUT,
                             f"{topic}: the new partitions have no leader yet")

    async def _wait_for_partitions(self, topic: str, count: int, deadline: float) -> bool:
        """Whether this broker's metadata shows `count` partitions of `topic`, each with
        a leader, by `deadline`."""
        while not self.stopping.is_set():
            parts = self.replicas.metadata_topic(topic) or []
            if len(parts) >= count and all(s.leader >= 0 for _, s in parts):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return False

    # ---- ElectLeaders ----

    async def elect_leaders(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        election = body.election_type if req.version >= 1 else 0  # v0: preferred only
        wanted = (None if body.topic_partitions is None else
                  [TopicPartition(t.topic, p) for t in body.topic_partitions
                   for p in t.partitions])
        controller = self.controller()
        if not conn.allowed(Operation.ALTER, ResourceType.CLUSTER):
            results = {tp: (errors.CLUSTER_AUTHORIZATION_FAILED, None) for tp in wanted or []}
        elif election not in (0, 1):
            results = {tp: (errors.INVALID_REQUEST, f"unknown election type {election}")
                       for tp in wanted or []}
        elif controller is None:
            results = self._elect_standalone(wanted)
        else:
            results = await self._elect_in_cluster(controller, election, wanted,
                                                   body.timeout_ms)
        if wanted is None:  # all partitions: only those that needed an election
            results = {tp: r for tp, r in results.items() if r[0] != errors.ELECTION_NOT_NEEDED}
        R = ElectLeadersResponse.ReplicaElectionResult
        by_topic: dict[str, list[Any]] = {}
        for tp, (code, message) in results.items():
            by_topic.setdefault(tp.topic, []).append(R.PartitionResult(
                partition_id=tp.partition, error_code=code, error_message=message))
        return ElectLeadersResponse(throttle_time_ms=0, error_code=errors.NONE,
                                    replica_election_results=[
                                        R(topic=t, partition_result=ps)
                                        for t, ps in by_topic.items()])

    def _elect_standalone(self, wanted: list[TopicPartition] | None
                          ) -> dict[TopicPartition, tuple[int, str | None]]:
        out: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp in wanted if wanted is not None else sorted(self.replicas.partitions):
            if self.replicas.get(tp.topic, tp.partition) is None:
                out[tp] = (errors.unknown_topic_code(tp.topic), "The partition does not exist.")
            else:
                out[tp] = (errors.ELECTION_NOT_NEEDED, "standalone: this broker is the only "
                           "replica and leads it")
        return out

    async def _elect_in_cluster(self, controller: Any, election: int,
                                wanted: list[TopicPartition] | None, timeout_ms: int
                                ) -> dict[TopicPartition, tuple[int, str | None]]:
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        if not controller.is_active:  # Kafka: 41 for each partition asked, or all it knows
            every = wanted
            if every is None:
                known = self.metadata.topics() if self.metadata else {}
                every = [TopicPartition(t, p.partition) for t, ps in known.items() for p in ps]
            return {tp: (errors.NOT_CONTROLLER, "this broker is not the controller")
                    for tp in every}
        try:
            results = await asyncio.wait_for(
                asyncio.wrap_future(controller.elect_leaders(election, wanted)),
                max(deadline - time.monotonic(), 1.0))
        except TimeoutError:
            return {tp: (errors.REQUEST_TIMED_OUT, "the election did not finish in time")
                    for tp in wanted or []}
        except Exception as err:  # noqa: BLE001 - ZooKeeper trouble or a moved controller
            code, message = errors.error_of(err, "elect leaders")
            return {tp: (code, message) for tp in wanted or []}
        # As Kafka's DelayedElectLeader: answered once this broker's metadata shows the
        # new leaders (their leader epoch), or at the timeout.
        waiting = {tp: epoch for tp, (code, _, epoch) in results.items() if code == errors.NONE}
        while waiting and not self.stopping.is_set() and time.monotonic() < deadline:
            waiting = {tp: epoch for tp, epoch in waiting.items()
                       if self._metadata_epoch(tp) < epoch}
            if waiting:
                await asyncio.sleep(0.05)
        out = {tp: (code, message) for tp, (code, message, _) in results.items()}
        for tp in waiting:
            out[tp] = (errors.REQUEST_TIMED_OUT, "the new leader is not in the metadata yet")
        return out

    def _metadata_epoch(self, tp: TopicPartition) -> int:
        p = self.metadata.partition(tp.topic, tp.partition) if self.metadata else None
        return p.leader_epoch if p is not None else -1

    # ---- AlterPartitionReassignments, ListPartitionReassignments ----

    async def alter_partition_reassignments(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        allow_rf_change = bool(body.allow_replication_factor_change) if req.version >= 1 else True
        wanted: dict[TopicPartition, tuple[int, ...] | None] = {}
        for t in body.topics:
            for part in t.partitions:
                tp = TopicPartition(t.name, part.partition_index)
                wanted[tp] = None if part.replicas is None else tuple(part.replicas)
        R = AlterPartitionReassignmentsResponse.ReassignableTopicResponse

        def answer(code: int, message: str | None,
                   results: dict[TopicPartition, tuple[int, str | None]]) -> Any:
            by_topic: dict[str, list[Any]] = {}
            for tp, (c, m) in results.items():
                by_topic.setdefault(tp.topic, []).append(R.ReassignablePartitionResponse(
                    partition_index=tp.partition, error_code=c, error_message=m))
            return AlterPartitionReassignmentsResponse(
                throttle_time_ms=0, allow_replication_factor_change=allow_rf_change,
                error_code=code, error_message=message,
                responses=[R(name=t, partitions=ps) for t, ps in by_topic.items()])

        if not conn.allowed(Operation.ALTER, ResourceType.CLUSTER):
            return answer(errors.CLUSTER_AUTHORIZATION_FAILED, None, {})
        controller = self.controller()
        if controller is None:
            return answer(errors.NONE, None, self._reassign_standalone(wanted))
        if not controller.is_active:
            return answer(errors.NOT_CONTROLLER, "this broker is not the controller", {})
        try:
            results = await asyncio.wait_for(asyncio.wrap_future(
                controller.alter_partition_reassignments(wanted, allow_rf_change)),
                max(body.timeout_ms, 0) / 1000 + 1.0)
        except TimeoutError:
            return answer(errors.REQUEST_TIMED_OUT, "the controller did not answer in time; the "
                          "reassignments may still start (ListPartitionReassignments shows "
                          "them)", {})
        except Exception as err:  # noqa: BLE001 - ZooKeeper trouble or a moved controller
            code, message = errors.error_of(err, "alter partition reassignments")
            return answer(code, message, {})
        return answer(errors.NONE, None, results)

    def _reassign_standalone(self, wanted: dict[TopicPartition, tuple[int, ...] | None]
                             ) -> dict[TopicPartition, tuple[int, str | None]]:
        me = self.leadership.broker_id
        out: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp, target in wanted.items():
            if self.replicas.get(tp.topic, tp.partition) is None:
                out[tp] = (errors.unknown_topic_code(tp.topic), "The partition does not exist.")
            elif target is None:
                out[tp] = (errors.NO_REASSIGNMENT_IN_PROGRESS, "no reassignment of the partition "
                           "is in progress")
            elif list(target) != [me]:
                out[tp] = (errors.INVALID_REPLICA_ASSIGNMENT, f"standalone: broker {me} is the only "
                           f"broker; replica list {list(target)}")
            else:
                out[tp] = (errors.NONE, None)
        return out

    async def list_partition_reassignments(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        wanted = (None if body.topics is None else
                  [TopicPartition(t.name, p) for t in body.topics for p in t.partition_indexes])
        T = ListPartitionReassignmentsResponse.OngoingTopicReassignment

        def answer(code: int, message: str | None, ongoing: dict[TopicPartition, Any]) -> Any:
            by_topic: dict[str, list[Any]] = {}
            for tp, a in ongoing.items():
                by_topic.setdefault(tp.topic, []).append(T.OngoingPartitionReassignment(
                    partition_index=tp.partition, replicas=list(a.replicas),
                    adding_replicas=list(a.adding), removing_replicas=list(a.removing)))
            return ListPartitionReassignmentsResponse(
                throttle_time_ms=0, error_code=code, error_message=message,
                topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()])

        if not conn.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
            return answer(errors.CLUSTER_AUTHORIZATION_FAILED, None, {})
        controller = self.controller()
        if controller is None:
            return answer(errors.NONE, None, {})
        try:
            ongoing = await asyncio.wait_for(asyncio.wrap_future(
                controller.list_partition_reassignments(wanted)),
                max(body.timeout_ms, 0) / 1000 + 1.0)
        except TimeoutError:
            return answer(errors.REQUEST_TIMED_OUT, "the controller did not answer in time", {})
        except Exception as err:  # noqa: BLE001 - a moved controller
            code, message = errors.error_of(err, "list partition reassignments")
            return answer(code, message, {})
        if ongoing is None:
            return answer(errors.NOT_CONTROLLER, "this broker is not the controller", {})
        return answer(errors.NONE, None, ongoing)
