"""Replica moves between this broker's log dirs (Kafka's AlterReplicaLogDirs, KIP-113).

An operator moves a partition's replica off a filling or failing disk onto another of
the same broker (kafka-reassign-partitions.sh with log dirs, kafka-python's
`alter_replica_log_dirs`) while it keeps serving. As in Kafka, the replica is copied
into `<topic>-<p>.<id>-future` on the destination (DescribeLogDirs lists it there with
`is_future_key` and its lag), batch by batch as the log grows, on each dir's own worker.
Once the copy has caught up, the source log is retired on its worker: the tail written
since the last read is taken with the source's log start, epochs and high watermark,
and from that call on every call on the source log is refused with LogMovedError,
touching nothing (answered NOT_LEADER_OR_FOLLOWER, which clients and followers retry).
The destination's worker appends the tail, renames the copy to `<topic>-<p>` and opens
it; the partition is then served from there, and the source's files go.

A source truncated meanwhile (a follower cut to its leader) is followed as a follower
follows its leader: the copy is cut where the epoch they share ends. A move is given up,
its copy removed, when either dir leaves ONLINE or the partition is deleted or goes
offline. A stop (its copy is closed and kept) or a kill does not end it, as Kafka
resumes a future replica at start-up: the copy of an interrupted move found at
start-up is removed (the replica is whole in its source dir) and the move starts over
into the same dir (ReplicaMoves.clean_leftovers, then resume_interrupted). The
copying of every move together is capped by the dynamic broker config
`replica.alter.log.dirs.io.max.bytes.per.second` (Kafka's; daemon.replica.quota): a move
waits while that rate is exceeded; the retiring step's tail is never held back.

Errors per partition are Kafka's: LOG_DIR_NOT_FOUND (57) for a path not in log.dirs,
KAFKA_STORAGE_ERROR (56) for a destination not ONLINE, an offline replica or any
offline dir on this broker (Kafka creates no future log then), REPLICA_NOT_AVAILABLE
(9) for a partition not hosted here. As in Kafka, that last one is remembered: when the
replica arrives (a reassignment adding this broker, a topic created after), its log is
created in the dir asked for if that dir is ONLINE then (LogManager.place_partitions),
so kafka-reassign-partitions.sh's `log_dirs` places a new replica on the disk named.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logstore import Log, LogConfig, LogDir, LogMovedError, LogStoreError, TopicPartition, names
from logstore.epochs import EpochEntry
from logstore.records import iter_batches

from ..api import errors
from ..storage.dirstate import DirState
from ..storage.log_manager import LogManager
from ..storage.workers import ManagedDir
from . import producer
from .manager import ReplicaManager
from .partition import Partition
from .quota import ReplicationQuota

log = logging.getLogger("logkeeper.moves")

CHUNK_BYTES = 1 << 20  # read from the source per step
THROTTLE_WAIT_S = 0.1  # how long a throttled move waits before it looks at the rate again


@dataclass
class Move:
    partition: Partition
    source: ManagedDir
    dest: ManagedDir
    future: Log | None = None
    next_offset: int = 0  # the copy's log end
    last_epoch: int = -1  # the epoch of the copy's last batch
    task: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    # From the source's retirement to the switch: milliseconds the move is let finish,
    # never cancelled (cancelled there, both dirs would end up holding the replica).
    switching: bool = False
    # The transactions of what was copied so far: the copy writes its own `.txnindex`
    # entries as it appends abort markers, as a follower does (daemon.replica.producer).
    txns: producer.PartitionProducers = field(default_factory=producer.PartitionProducers)

    @property
    def lag(self) -> int:
        """How far the copy is behind the source (DescribeLogDirs' offsetLag)."""
        src = self.partition.log
        if src is None or self.future is None:
            return 0
        return max(0, src.log_end_offset - self.next_offset)


@dataclass
class _Retired:
    """What the source gave at its retirement: the tail and its state."""

    tail: list[bytes]
    log_start_offset: int
    high_watermark: int
    epochs: list[EpochEntry]
    config: LogConfig
    cleaner_offset: int | None
    partition_metadata: bytes | None


class ReplicaMoves:
    """The moves under way on this broker, by partition. Event loop only."""

    def __init__(self, replicas: ReplicaManager, storage: LogManager, *,
                 quota: ReplicationQuota | None = None):
        self.replicas = replicas
        self.storage = storage
        self.quota = quota  # replica.alter.log.dirs.io.max.bytes.per.second
        self.moves: dict[TopicPartition, Move] = {}
        self.stopping = False  # the broker is stopping: interrupted moves keep their copy
        self.interrupted: list[tuple[str, TopicPartition]] = []  # to resume: (dest, tp)

    # ---- AlterReplicaLogDirs ----

    def alter(self, path: str, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, str]]:
        """Start moving each partition's replica to log dir `path`; (code, why) each."""
        dest = self.storage.by_path(path) if path.startswith("/") else None
        out = {}
        for tp in tps:
            out[tp] = code, why = self._alter_one(tp, dest, path)
            if code == errors.REPLICA_NOT_AVAILABLE:
                log.info("%s", why)
            elif code != errors.NONE:
                log.warning("moving %s to %s refused: %s", tp, path, why)
        return out

    def _alter_one(self, tp: TopicPartition, dest: ManagedDir | None, path: str
                   ) -> tuple[int, str]:
        if dest is None:
            return errors.LOG_DIR_NOT_FOUND, f"{path} is not one of this broker's log.dirs"
        if dest.state is not DirState.ONLINE or dest.logdir is None:
            return errors.KAFKA_STORAGE_ERROR, f"log dir {path} is {dest.state.value}"
        try:
            # A future dir's name must fit the filesystem's (Kafka's KAFKA-4893 check).
            future = names.future_dir_name(tp.topic, tp.partition, "0" * 32)
            too_long = len(future) > names.MAX_DIR_NAME
        except LogStoreError as err:
            return errors.INVALID_TOPIC_EXCEPTION, str(err)
        if too_long:
            return errors.INVALID_TOPIC_EXCEPTION, "the topic name is too long to move"
        p = self.replicas.partitions.get(tp)
        if p is None or p.deleted:
            # Kafka's maybeUpdatePreferredLogDir: a replica on its way here (a
            # reassignment adding this broker) is created in `dest` when it arrives.
            self.storage.preferred[tp] = dest
            return errors.REPLICA_NOT_AVAILABLE, (f"{tp} has no replica on this broker yet; "
                                                  f"it will be created in {path}")
        if p.offline:
            return errors.KAFKA_STORAGE_ERROR, f"{tp} is offline (log dir {p.dir.path})"
        current = self.moves.get(tp)
        if current is not None:
            if current.dest is dest:
                return errors.NONE, ""
            self._cancel(current, f"asked to move to {path} instead")
        if p.dir is dest:
            return errors.NONE, ""
        offline = [str(d.path) for d in self.storage.dirs if d.state is DirState.OFFLINE]
        if offline:
            # Kafka's rule: no future replica while a dir is offline, which may hold one.
            return errors.KAFKA_STORAGE_ERROR, (f"log dirs {', '.join(offline)} are offline; "
                                                "no replica moves until they are back")
        m = Move(p, p.dir, dest)
        self.moves[tp] = m
        m.task = asyncio.ensure_future(self._run(m))
        log.info("moving %s from log dir %s to %s", tp, m.source.path, dest.path)
        return errors.NONE, ""

    def futures_in(self, d: ManagedDir) -> list[Move]:
        """The moves copying into `d` (DescribeLogDirs' future replicas)."""
        return [m for m in self.moves.values() if m.dest is d and m.future is not None]

    # ---- the move ----

    def _cancel(self, m: Move, why: str) -> None:
        if m.switching:
            log.info("move of %s to %s is switching over; it finishes (%s)", m.partition.tp,
                     m.dest.path, why)
            return
        if m.task is not None and not m.task.done():
            log.warning("move of %s to %s given up: %s", m.partition.tp, m.dest.path, why)
            m.task.cancel()

    def _live(self, m: Move) -> str | None:
        """Why the move cannot go on, or None."""
        p = m.partition
        if p.deleted or self.replicas.partitions.get(p.tp) is not p:
            return "the partition was deleted"
        if p.dir is not m.source or p.log is None:
            return "the replica is no longer in its source dir"
        for d in (m.source, m.dest):
            if d.state is not DirState.ONLINE and not (d is m.source
                                                       and d.state is DirState.SATURATED):
                return f"log dir {d.path} is {d.state.value}"
        return None

    async def _run(self, m: Move) -> None:
        p, tp = m.partition, m.partition.tp
        try:
            src_log = p.log
            assert src_log is not None and m.dest.logdir is not None
            start = await self.storage.run(m.source, _copy_start, src_log)
            m.future = await self.storage.run(m.dest, _create_future, m.dest.logdir, tp,
                                              src_log.config, start)
            m.next_offset, m.last_epoch = start, -1
            while True:
                if (why := self._live(m)) is not None:
                    raise _GiveUp(why)
                if self.quota is not None and self.quota.is_exceeded():
                    await asyncio.sleep(THROTTLE_WAIT_S)
                    continue
                step = await self.storage.run(m.source, _read_source, src_log, m.next_offset,
                                              m.last_epoch)
                if await self._apply(m, step):
                    continue
                # Caught up: retire the source with whatever came since.
                if (why := self._live(m)) is not None:
                    raise _GiveUp(why)
                m.switching = True
                retired = await self.storage.run(m.source, _retire_source, m.source.logdir,
                                                 src_log, tp, m.next_offset, m.last_epoch,
                                                 str(m.dest.path))
                if isinstance(retired, tuple):  # the source moved on after all: follow it
                    m.switching = False
                    await self._apply(m, retired)
                    continue
                break
            try:
                if (why := self._live(m)) is not None:
                    raise _GiveUp(why)
                moved = await self.storage.run(m.dest, _promote, m.dest.logdir, m.future, tp,
                                               retired, m.txns)
                if m.dest.state is not DirState.ONLINE:
                    # The new disk failed at the last moment: the source stays the replica.
                    raise _GiveUp(f"log dir {m.dest.path} is {m.dest.state.value}")
            except BaseException:
                await self.storage.run(m.source, _unretire, m.source.logdir, src_log, tp,
                                       retired.cleaner_offset)
                raise
            m.future = None
            # What the leader's ISR moved on the loop since the retirement, if anything.
            moved.high_watermark = max(moved.high_watermark,
                                       min(p.high_watermark, moved.log_end_offset))
            p.log, p.dir = moved, m.dest
            m.source.partitions.discard(tp)
            m.dest.partitions.add(tp)
            p.notify()
            log.info("moved %s from log dir %s to %s (offsets %d-%d)", tp, m.source.path,
                     m.dest.path, moved.log_start_offset, moved.log_end_offset)
            try:
                await self.storage.run(m.source, _remove_retired, m.source.logdir, src_log)
            except Exception as err:  # noqa: BLE001 - the move is done; the disk's verdict is given
                log.warning("%s: the moved replica's old files in %s stay: %s", tp,
                            m.source.path, err)
            await self.storage.write_placement()
        except asyncio.CancelledError:
            if self.stopping:  # kept for the next start, which carries the move on
                await self._close_future(m)
            else:
                await self._drop_future(m)
            raise
        except _GiveUp as err:
            log.warning("move of %s to %s given up: %s", tp, m.dest.path, err)
            await self._drop_future(m)
        except Exception as err:  # noqa: BLE001 - a failed move leaves the replica where it was
            code, msg = errors.error_of(err, f"move {tp} to {m.dest.path}")
            log.warning("move of %s to %s failed (%d): %s; the replica stays in %s", tp,
                        m.dest.path, code, msg, m.source.path)
            await self._drop_future(m)
        finally:
            if self.moves.get(tp) is m:
                del self.moves[tp]
            m.done.set()
        if p.deleted:
            await self._delete_everywhere(m)

    async def _delete_everywhere(self, m: Move) -> None:
        """The partition was deleted while it moved: its deletion went to the dir that
        held it when asked, which may be the other one by now. Neither keeps it."""
        tp = m.partition.tp
        for d in (m.source, m.dest):
            if d.logdir is None or not d.usable:
                continue
            try:
                await self.storage.run(d, d.logdir.delete_log, tp.topic, tp.partition)
            except Exception as err:  # noqa: BLE001 - the dir's verdict is the guard's
                log.warning("deleting %s from %s after its move failed: %s", tp, d.path, err)

    async def _apply(self, m: Move, step: tuple[Any, ...]) -> bool:
        """Apply one read of the source to the copy; False when there was nothing new."""
        kind = step[0]
        assert m.future is not None
        if kind == "data":
            if not step[1]:
                return False
            m.next_offset, m.last_epoch = await self.storage.run(m.dest, _append_copy,
                                                                 m.future, step[1], m.txns)
            if self.quota is not None:
                self.quota.record(len(step[1]))
        elif kind == "diverged":
            m.next_offset, m.last_epoch = await self.storage.run(
                m.dest, _truncate_copy, m.future, step[1], step[2], m.txns)
        else:  # "restart": the source's start passed the copy's end (retention)
            m.next_offset, m.last_epoch = await self.storage.run(
                m.dest, _restart_copy, m.future, step[1], m.txns)
        return True

    async def _close_future(self, m: Move) -> None:
        fut, m.future = m.future, None
        if fut is None or m.dest.logdir is None or not m.dest.usable:
            return
        try:
            await self.storage.run(m.dest, fut.close_quietly)
        except Exception as err:  # noqa: BLE001 - the next start-up judges the copy
            log.warning("the copy of %s in %s was not closed: %s", m.partition.tp,
                        m.dest.path, err)

    async def _drop_future(self, m: Move) -> None:
        fut, m.future = m.future, None
        if fut is None or m.dest.logdir is None or not m.dest.usable:
            return
        try:
            await self.storage.run(m.dest, _remove_future, m.dest.logdir, fut)
        except Exception as err:  # noqa: BLE001 - removed at the next start-up instead
            log.warning("the copy of %s in %s stays until the next start: %s",
                        m.partition.tp, m.dest.path, err)

    # ---- start-up and stop ----

    async def clean_leftovers(self) -> None:
        """At start-up: the copies of moves a stop or a kill interrupted are removed when
        the replica is whole in another dir of this broker, and those moves noted for
        `resume_interrupted`; any other `-future` dir is left as it is."""
        for d in self.storage.dirs:
            ld = d.logdir
            if ld is None or not d.usable:
                continue
            for path, tp in list(ld.future_logs.items()):
                p = self.replicas.partitions.get(tp)
                if p is None or p.offline or p.dir is d:
                    log.warning("%s: a replica move's copy of %s with no source replica in "
                                "another dir here: left as it is", path, tp)
                    continue
                try:
                    await self.storage.run(d, ld.remove_dir, path)
                except Exception as err:  # noqa: BLE001 - the dir's verdict is the guard's
                    log.warning("%s: cannot remove: %s", path, err)
                    continue
                log.warning("%s: removed the copy of an interrupted move of %s (the replica "
                            "is whole in %s); the move to %s starts over", path, tp,
                            p.dir.path, d.path)
                self.interrupted.append((str(d.path), tp))

    def resume_interrupted(self) -> None:
        """Start the moves `clean_leftovers` found interrupted again, from the start, as
        Kafka resumes a future replica at start-up; called once the broker's configs
        (replica.alter.log.dirs.io.max.bytes.per.second among them) are loaded, from its
        config files or ZooKeeper."""
        interrupted, self.interrupted = self.interrupted, []
        for path, tp in interrupted:
            self.alter(path, [tp])

    async def stop(self) -> None:
        self.stopping = True
        for m in list(self.moves.values()):
            self._cancel(m, "the broker is stopping")
        tasks = [m.task for m in self.moves.values() if m.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)


class _GiveUp(Exception):
    pass


# ---- functions that run on a dir's worker ----


def _copy_start(src: Log) -> int:
    """Where the copy begins: the base offset of the batch holding the source's log
    start (DeleteRecords and retention may have put the start inside a batch)."""
    if src.log_start_offset >= src.log_end_offset:
        return src.log_start_offset
    first = next(iter_batches(src.read(src.log_start_offset, 1), verify_crc=False), None)
    return first.base_offset if first is not None else src.log_start_offset


def _create_future(ld: LogDir, tp: TopicPartition, config: LogConfig, start: int) -> Log:
    full = ld.path / names.future_dir_name(tp.topic, tp.partition, uuid.uuid4().hex)
    with ld.guard.io("create future log", full, writing=True):
        full.mkdir()
    future = Log.open(full, config, guard=ld.guard, recover=False)
    if start > 0:
        future.truncate_fully_and_start_at(start)
    return future


def _diverged(src: Log, next_offset: int, last_epoch: int) -> tuple[Any, ...] | None:
    """The copy's records from `next_offset` back are not the source's any more (the
    source was truncated): where to cut the copy, as a follower cuts to its leader."""
    if next_offset > src.log_end_offset:
        epoch, end = src.epochs.end_offset_for(last_epoch, src.log_end_offset) \
            if last_epoch >= 0 else (-1, src.log_end_offset)
        return ("diverged", epoch, min(end, src.log_end_offset))
    if last_epoch >= 0:
        epoch, end = src.epochs.end_offset_for(last_epoch, src.log_end_offset)
        if epoch < last_epoch or end < next_offset:
            return ("diverged", epoch, end)
    return None


def _moved_on(src: Log, next_offset: int, last_epoch: int) -> tuple[Any, ...] | None:
    """What the copy must do before it goes on, when the source changed under it: cut
    to a divergence ("diverged"), or start again past a risen log start ("restart")."""
    diverged = _diverged(src, next_offset, last_epoch)
    if diverged is not None:
        return diverged
    if next_offset < src.log_start_offset and next_offset < (start := _copy_start(src)):
        return ("restart", start)
    return None


def _read_source(src: Log, next_offset: int, last_epoch: int) -> tuple[Any, ...]:
    step = _moved_on(src, next_offset, last_epoch)
    if step is not None:
        return step
    if next_offset >= src.log_end_offset:
        return ("data", b"")
    return ("data", bytes(src.read(max(next_offset, src.log_start_offset), CHUNK_BYTES)))


def _append_copy(future: Log, data: bytes, txns: producer.PartitionProducers
                 ) -> tuple[int, int]:
    future.append(data, assign_offsets=False)
    producer.record_replicated(txns, data, future)
    return future.log_end_offset, future.epochs.latest_epoch


def _truncate_copy(future: Log, epoch: int, end: int, txns: producer.PartitionProducers
                   ) -> tuple[int, int]:
    """Cut the copy where the epoch it shares with the source ends, on whichever side
    is lower (the fetcher's rule, daemon.replica.fetcher)."""
    if epoch >= 0:
        _, ours = future.epochs.end_offset_for(epoch, future.log_end_offset)
        end = min(end, ours)
    future.truncate_to(max(end, future.log_start_offset))
    producer.truncate(txns, future.log_end_offset)
    return future.log_end_offset, future.epochs.latest_epoch


def _restart_copy(future: Log, start: int, txns: producer.PartitionProducers
                  ) -> tuple[int, int]:
    future.truncate_fully_and_start_at(start)
    txns.clear()
    return future.log_end_offset, -1


def _retire_source(ld: LogDir, src: Log, tp: TopicPartition, next_offset: int,
                   last_epoch: int, dest: str) -> _Retired | tuple[Any, ...]:
    """Take the tail and the state, and retire the source: from here on every call on
    it is refused, so nothing more lands in it. A source truncated since the last read
    is not retired; the divergence is handed back instead."""
    step = _moved_on(src, next_offset, last_epoch)
    if step is not None:
        return step
    tail = []
    offset = next_offset
    while offset < src.log_end_offset:
        chunk = bytes(src.read(max(offset, src.log_start_offset), CHUNK_BYTES))
        if not chunk:
            break
        tail.append(chunk)
        offset = _end_of(chunk)
    metadata = None
    with ld.guard.io("read partition metadata", src.dir, writing=False):
        try:
            metadata = (src.dir / names.PARTITION_METADATA).read_bytes()
        except FileNotFoundError:
            pass
    src.flush()
    retired = _Retired(tail, src.log_start_offset, src.high_watermark,
                       list(src.epochs.entries), src.config, ld.cleaner_offsets.pop(tp, None),
                       metadata)
    src.retire(dest)
    ld.logs.pop(tp, None)  # no more retention, checkpoints or cleaning of it here
    return retired


def _end_of(chunk: bytes) -> int:
    """The offset after the last batch of whole batches `chunk`."""
    end = -1
    for b in iter_batches(chunk, verify_crc=False):
        end = b.last_offset + 1
    return end


def _unretire(ld: LogDir, src: Log, tp: TopicPartition, cleaner_offset: int | None) -> None:
    src.unretire()
    ld.logs[tp] = src
    if cleaner_offset is not None:
        ld.cleaner_offsets[tp] = cleaner_offset


def _promote(ld: LogDir, future: Log, tp: TopicPartition, r: _Retired,
             txns: producer.PartitionProducers) -> Log:
    """The tail, the source's state, then the copy's own name: the replica lives here."""
    for chunk in r.tail:
        future.append(chunk, assign_offsets=False)
        producer.record_replicated(txns, chunk, future)
    if r.log_start_offset > future.log_start_offset:
        future.delete_records(r.log_start_offset)
    # The source's epochs, including any begun with no batch yet (a leader's newest).
    future.epochs.clear()
    for e in r.epochs:
        future.epochs.assign(e.epoch, e.start_offset)
    future.high_watermark = r.high_watermark
    future.flush()
    end = future.log_end_offset
    future.close()
    final = ld.path / names.partition_dir_name(tp.topic, tp.partition)
    with ld.guard.io("rename future log", final, writing=True):
        if r.partition_metadata is not None:
            (future.dir / names.PARTITION_METADATA).write_bytes(r.partition_metadata)
        future.dir.rename(final)
    ld.topic_configs[tp.topic] = r.config
    moved = Log.open(final, r.config, guard=ld.guard, recover=False,
                     recovery_point=end,
                     log_start_offset=r.log_start_offset, high_watermark=r.high_watermark)
    for e in r.epochs:  # opening drops an epoch begun at the log end: it is live here
        if e.start_offset >= moved.log_end_offset:
            moved.epochs.assign(e.epoch, e.start_offset)
    ld.logs[tp] = moved
    if r.cleaner_offset is not None:
        ld.cleaner_offsets[tp] = r.cleaner_offset
    return moved


def _remove_retired(ld: LogDir, src: Log) -> None:
    src.close_quietly()
    ld.remove_dir(Path(src.dir))


def _remove_future(ld: LogDir, future: Log) -> None:
    future.close_quietly()
    ld.remove_dir(Path(future.dir))


__all__ = ["LogMovedError", "Move", "ReplicaMoves"]
