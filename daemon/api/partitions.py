"""DeleteRecords (21) and CreatePartitions (37), as a ZooKeeper-mode Kafka broker
answers them (docs/cluster.md "Deleting records and adding partitions").

DeleteRecords is served by each partition's leader: the log start offset moves up to
the offset asked (-1: the high watermark), whole segments below it are deleted at once,
followers follow from the log start offset in their Fetch answers, and ListOffsets
EARLIEST answers it. The low watermark answered is the leader's new log start offset
(Kafka waits until every replica has moved; here followers move at their next fetch).

CreatePartitions: standalone, this broker adds the partitions to its dirs (placed by
free space, with the topic's config); in a cluster only the active controller takes it
(others answer 41), writes the longer assignment to `/brokers/topics/<t>`, and the
answer waits until this broker's metadata shows a leader for every partition, or
`timeout_ms` (7).

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

from kafka.protocol.admin import CreatePartitionsResponse, DeleteRecordsResponse

from ..replica.manager import ReplicaManager
from ..replica.partition import Partition
from ..replica.topics import TopicAdmin, TopicError
from . import errors, protocol

log = logging.getLogger("logkeeper.handlers")


class PartitionApis:
    """Event loop only. `controller()` is the cluster's controller on this broker (None
    standalone); `stopping` ends the waits when the daemon stops."""

    def __init__(self, replicas: ReplicaManager, topic_admin: TopicAdmin, *,
                 controller: Callable[[], Any] | None = None,
                 stopping: asyncio.Event | None = None):
        self.replicas = replicas
        self.leadership = replicas.leadership
        self.topic_admin = topic_admin
        self.controller = controller or (lambda: None)
        self.stopping = stopping or asyncio.Event()

    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        return {21: self.delete_records, 37: self.create_partitions}

    # ---- DeleteRecords ----

    async def delete_records(self, req: protocol.Request, _conn: Any) -> Any:
        body = req.body
        R = DeleteRecordsResponse.DeleteRecordsTopicResult
        P = R.DeleteRecordsPartitionResult
        slots: list[tuple[str, int, tuple[int, int] | None]] = []
        items: list[tuple[Partition, int]] = []
        for t in body.topics:
            for part in t.partitions:
                p = self.replicas.get(t.name, part.partition_index)
                if p is None:
                    slots.append((t.name, part.partition_index,
                                  (errors.unknown_topic_code(t.name), -1)))
                elif not self.leadership.is_leader(p):
                    slots.append((t.name, part.partition_index,
                                  (errors.NOT_LEADER_OR_FOLLOWER, -1)))
                else:
                    slots.append((t.name, part.partition_index, None))
                    items.append((p, part.offset))
        done = iter(await self.replicas.delete_records(items) if items else [])
        out: dict[str, list[Any]] = {}
        for topic, index, res in slots:
            code, low = res if res is not None else next(done)
            if code == errors.NONE:
                log.info("DeleteRecords: %s-%d starts at %d now", topic, index, low)
            out.setdefault(topic, []).append(P(partition_index=index, low_watermark=low,
                                               error_code=code))
        return DeleteRecordsResponse(throttle_time_ms=0, topics=[
            R(name=t, partitions=ps) for t, ps in out.items()])

    # ---- CreatePartitions ----

    async def create_partitions(self, req: protocol.Request, _conn: Any) -> Any:
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
            parts = self.leadership.metadata_topics(self.replicas.topics()).get(topic, [])
            if len(parts) >= count and all(s.leader >= 0 for _, s in parts):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return False
