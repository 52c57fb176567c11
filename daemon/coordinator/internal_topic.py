"""`__consumer_offsets` and `__transaction_state` as their coordinators see them
(daemon.coordinator.coordinator's `OffsetsLog`): the topic's partitions held here,
whether this broker leads one and at which leader epoch, appends as its leader with
acks=all, and reading one whole when its groups (transactional ids) are loaded. Each
topic is created the first time a coordinator is looked up (daemon.app), compacted as
Kafka's are.

Event loop only; the log work runs on the partitions' dir workers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from logstore import Log, LogStoreError
from logstore.records import LegacyMessage, Record, control_record, iter_batches

from ..api import errors
from ..replica.manager import ReplicaManager
from ..replica.partition import AppendResult, on_log

_log = logging.getLogger("logkeeper.coordinator")

READ_CHUNK = 1 << 20


class Logged(NamedTuple):
    """One record of a coordinator's partition as the coordinator reads it back: a
    record of a transactional batch names its producer (a TxnOffsetCommit, pending until
    that producer's marker), and a transaction marker comes as `marker` (COMMIT or
    ABORT) with no record."""

    record: Record | None
    producer_id: int = -1  # of a transactional batch or a marker, else -1
    marker: int = -1  # logstore.records.CONTROL_COMMIT or CONTROL_ABORT, else -1


class InternalTopic:
    def __init__(self, topic: str, replicas: ReplicaManager,
                 append_replicated: Callable[..., Awaitable[AppendResult]],
                 partition_count: Callable[[], int | None]):
        self.topic = topic
        self.replicas = replicas
        self._append = append_replicated
        self._partition_count = partition_count

    def partition_count(self) -> int | None:
        return self._partition_count()

    def led_epoch(self, partition: int) -> int | None:
        p = self.replicas.get(self.topic, partition)
        # A SATURATED dir still coordinates: heartbeats and fetches of committed offsets
        # need no room, and a commit fails there as any write does (56 -> NOT_COORDINATOR).
        # In a cluster the controller moves the leadership off the full disk anyway.
        if p is None or p.offline or p.deleted:
            return None
        if not self.replicas.leadership.is_leader(p):
            return None
        # The epoch its appends are stamped with (standalone: the latest its log holds).
        return self.replicas.leadership.fencing_epoch(p)

    async def append(self, partition: int, batch: bytes, timeout_ms: int, *,
                     guard: Any = None) -> int:
        """Append `batch` to `partition` as its leader, acks=all; `guard`: a
        transactional batch's verification (daemon.replica.txn_verification)."""
        return (await self.append_at(partition, batch, timeout_ms, guard=guard))[0]

    async def append_at(self, partition: int, batch: bytes, timeout_ms: int, *,
                        guard: Any = None) -> tuple[int, int]:
        """`append`, and the offset the batch was written at: (error, base offset)."""
        p = self.replicas.get(self.topic, partition)
        if p is None:
            return errors.NOT_LEADER_OR_FOLLOWER, -1
        result = await self._append(p, batch, timeout_ms,
                                    guards=None if guard is None else {p.tp: guard})
        return result.error, result.base_offset

    async def read_all(self, partition: int) -> list[Logged]:
        p = self.replicas.get(self.topic, partition)
        if p is None or p.log is None:
            raise LookupError(f"{self.topic}-{partition} is not held here")
        return await on_log(self.replicas.storage.run, p, lambda _logdir, lg: read_records(lg))


def read_records(log: Log) -> list[Logged]:
    """Every record of `log` from its start to its end (on its dir's worker), and its
    transaction markers. Old Kafka's legacy (magic 0/1) messages hold commits in the
    same schemas, and count as records too."""
    out: list[Logged] = []
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        data = log.read(offset, READ_CHUNK)
        if not data:
            break
        for b in iter_batches(data):
            if isinstance(b, LegacyMessage):
                try:
                    inner = b.messages()
                except LogStoreError as err:  # a codec not installed here, a broken wrapper
                    _log.warning("%s: legacy message at %d skipped: %s", log.dir.name,
                                 b.position, err)
                    inner = []
                out.extend(Logged(Record(m.key, m.value, [], m.timestamp, m.offset))
                           for m in inner if m.offset >= offset)
                offset = max(offset, b.offset + 1)
                continue
            if b.is_control:
                kind, _ = control_record(b.data)
                if kind >= 0 and b.producer_id >= 0:
                    out.append(Logged(None, b.producer_id, kind))
            elif b.next_offset > offset:
                pid = b.producer_id if b.is_transactional else -1
                out.extend(Logged(r, pid) for r in b.records()
                           if r.offset is None or r.offset >= offset)
            offset = max(offset, b.next_offset)
    return out
