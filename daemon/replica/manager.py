"""Partition state of a standalone broker and the storage operations the APIs need.

In standalone mode (no `zookeeper.connect`) this broker leads every partition and the
ISR is itself: the high watermark is the log end offset right after an append, so
acks=all is the same as acks=1. Each operation groups its partitions by log dir and
runs one call per dir on that dir's worker (daemon.logdirs), so the event loop never
touches a disk and the dirs work in parallel.

Errors: per-partition outcomes are returned as Kafka error codes (logstore errors carry
their own `error_code`); a bug in this module surfaces as UNKNOWN_SERVER_ERROR (-1) for
the partitions involved and is logged with its traceback, never as a crash of the
daemon. Topic admin raises `TopicError` with the Kafka code and a message.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from logstore import Log, LogStoreError, StorageError, TopicPartition, checkpoint, names
from logstore.errors import InvalidTopicError
from logstore.records import ATTR_TRANSACTIONAL, batch_attributes, batch_producer

from ..api.errors import (
    INVALID_PARTITIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    INVALID_TXN_STATE,
    KAFKA_STORAGE_ERROR,
    NONE,
    OFFSET_OUT_OF_RANGE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_of,
)
from ..config import Config
from ..ops.metrics import Metrics
from ..storage.log_manager import DirState, LogDirManager, ManagedDir

log = logging.getLogger("logkeeper.broker")

_PRODUCER_WINDOW = 5  # Kafka keeps the metadata of the last 5 batches per producer

# Where this broker's partitions live, kept in every usable log dir so that a partition
# whose dir is offline at start-up is known and reported offline, never re-created on
# another dir (KIP-112's isNewReplica rule). The newest generation wins.
PLACEMENT_FILE = "logkeeper-placement.json"


class TopicError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class _BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int


@dataclass
class _ProducerState:
    epoch: int
    batches: collections.deque[_BatchMeta] = field(
        default_factory=lambda: collections.deque(maxlen=_PRODUCER_WINDOW))


@dataclass
class Partition:
    """One partition led here. `log` and `producers` are touched only on `dir`'s worker.

    `log` is None for a partition known (from the placement record) to live in a dir
    that was offline at start-up: it is reported offline until its dir is re-admitted.
    """

    tp: TopicPartition
    log: Log | None
    dir: ManagedDir
    high_watermark: int = 0  # cached on the loop after each worker call
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    producers: dict[int, _ProducerState] = field(default_factory=dict)
    deleted: bool = False

    @property
    def offline(self) -> bool:
        return self.log is None or self.dir.state is DirState.OFFLINE

    def notify(self) -> None:
        """Wake every Fetch long-poll waiting on this partition."""
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)
        self.waiters.clear()


@dataclass
class AppendResult:
    error: int = NONE
    base_offset: int = -1
    log_start_offset: int = -1
    high_watermark: int = -1
    records: int = 0
    size: int = 0
    message: str | None = None


@dataclass
class ReadResult:
    error: int = NONE
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    message: str | None = None


def new_cluster_id() -> str:
    """A Kafka-style cluster id: a random UUID in unpadded base64url (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# ---- functions that run on a dir's worker ----


def _check_producer(p: Partition, records: bytes) -> tuple[int, AppendResult | None, Any]:
    """Kafka's idempotent-producer check for one batch: (error, duplicate result, token).

    The window lives in memory only: after a restart every producer starts fresh, as
    with a Kafka broker that lost its producer snapshots.
    """
    fields = batch_producer(records)
    if fields is None:
        return NONE, None, None
    pid, epoch, base_seq, count = fields
    if pid < 0 or base_seq < 0 or count <= 0:
        return NONE, None, None
    last_seq = (base_seq + count - 1) % 2**31
    state = p.producers.get(pid)
    if state is not None:
        if epoch < state.epoch:
            return INVALID_PRODUCER_EPOCH, None, None
        if epoch == state.epoch and state.batches:
            for meta in state.batches:
                if meta.first_seq == base_seq and meta.last_seq == last_seq:
                    return NONE, AppendResult(base_offset=meta.first_offset), None
            expected = (state.batches[-1].last_seq + 1) % 2**31
            if base_seq != expected:
                return OUT_OF_ORDER_SEQUENCE_NUMBER, None, None
    return NONE, None, (pid, epoch, base_seq, last_seq)


def _append_all(items: list[tuple[Partition, bytes]]) -> list[AppendResult]:
    """Append each partition's batches, in order; one partition's failure is its own."""
    out = []
    for p, records in items:
        where = f"append to {p.tp}"
        try:
            if p.deleted:
                out.append(AppendResult(UNKNOWN_TOPIC_OR_PARTITION, message=f"{p.tp} was deleted"))
                continue
            if (batch_attributes(records) or 0) & ATTR_TRANSACTIONAL:
                out.append(AppendResult(INVALID_TXN_STATE,
                                        message="transactional batches need a transaction "
                                                "coordinator, which this broker does not run"))
                continue
            code, duplicate, token = _check_producer(p, records)
            if code:
                out.append(AppendResult(code, message=f"{where}: producer sequence check"))
                continue
            lg = p.log
            if duplicate is not None:
                duplicate.log_start_offset = lg.log_start_offset
                duplicate.high_watermark = lg.high_watermark
                out.append(duplicate)
                continue
            info = lg.append(records)
            lg.high_watermark = lg.log_end_offset  # standalone: ISR = {self}
            if token is not None:
                pid, epoch, first_seq, last_seq = token
                state = p.producers.get(pid)
                if state is None or state.epoch != epoch:
                    state = p.producers[pid] = _ProducerState(epoch)
                state.batches.append(_BatchMeta(first_seq, last_seq, info.base_offset))
            out.append(AppendResult(NONE, info.base_offset, lg.log_start_offset,
                                    lg.high_watermark, info.record_count, info.size))
        except Exception as err:  # noqa: BLE001 - per-partition isolation, see error_of
            code, message = error_of(err, where)
            out.append(AppendResult(code, message=message))
    return out


def _read_all(items: list[tuple[Partition, int, int]], budget: int) -> list[ReadResult]:
    """Read each (partition, offset, max_bytes) up to its high watermark.

    `budget` bounds the bytes of this dir's share of the response; the first partition
    with data gets at least one whole batch (Kafka's minOneMessage).
    """
    out = []
    total = 0
    for p, offset, max_bytes in items:
        try:
            if p.deleted:
                out.append(ReadResult(UNKNOWN_TOPIC_OR_PARTITION))
                continue
            lg = p.log
            hw = lg.high_watermark
            limit = min(max_bytes, budget - total)
            if offset < lg.log_start_offset or offset > lg.log_end_offset:
                out.append(ReadResult(OFFSET_OUT_OF_RANGE, b"", hw, lg.log_start_offset,
                                      f"offset {offset} of {p.tp} is outside "
                                      f"[{lg.log_start_offset}, {lg.log_end_offset}]"))
                continue
            if offset >= hw or (limit <= 0 and total > 0):
                out.append(ReadResult(NONE, b"", hw, lg.log_start_offset))
                continue
            data = lg.read(offset, max(limit, 1), max_offset=hw)
            total += len(data)
            out.append(ReadResult(NONE, data, hw, lg.log_start_offset))
        except Exception as err:  # noqa: BLE001 - per-partition isolation
            code, message = error_of(err, f"read {p.tp} at {offset}")
            out.append(ReadResult(code, message=message))
    return out


def _list_offsets(items: list[tuple[Partition, int]]) -> list[tuple[int, int, int]]:
    """(error, timestamp, offset) per (partition, timestamp query)."""
    out = []
    for p, ts in items:
        try:
            lg = p.log
            if p.deleted:
                out.append((UNKNOWN_TOPIC_OR_PARTITION, -1, -1))
            elif ts == -1:  # LATEST: what a read_uncommitted consumer may read to
                out.append((NONE, -1, lg.high_watermark))
            elif ts == -2:  # EARLIEST
                out.append((NONE, -1, lg.log_start_offset))
            elif ts < 0:
                out.append((INVALID_REQUEST, -1, -1))
            else:
                found = lg.offset_for_timestamp(ts)
                if found is None or found[0] >= lg.high_watermark:
                    out.append((NONE, -1, -1))
                else:
                    out.append((NONE, found[1], max(found[0], lg.log_start_offset)))
        except Exception as err:  # noqa: BLE001 - per-partition isolation
            out.append((error_of(err, f"list offsets of {p.tp}")[0], -1, -1))
    return out


class Broker:
    """The standalone broker's partitions, on top of the LogDirManager."""

    def __init__(self, config: Config, metrics: Metrics):
        self.config = config
        self.metrics = metrics
        self.broker_id = config.broker_id
        self.dirs = LogDirManager(config.log_dirs, config.log_config(),
                                  broker_id=config.broker_id,
                                  reserve_bytes=config["log.dir.reserve.bytes"])
        self.partitions: dict[TopicPartition, Partition] = {}
        self._placement_generation = 0
        self.cluster_id = ""
        self._admin_lock = asyncio.Lock()
        self._next_producer_id = (int(time.time()) & 0x7FFFFFFF) << 16
        self.ready = False

    # ---- start and stop ----

    async def start(self) -> None:
        """Open every log dir (recovering what needs it) and take the lead of each log.

        Dirs that cannot be opened are OFFLINE (daemon.logdirs); their partitions, known
        from the placement record in the other dirs, are reported offline."""
        self.cluster_id = await self._find_cluster_id()
        await self.dirs.open_all(cluster_id=self.cluster_id)
        records = await asyncio.gather(*(self.dirs.run(d, _read_placement, d.logdir)
                                         for d in self.dirs.dirs if d.logdir is not None),
                                       return_exceptions=True)
        for d in self.dirs.dirs:
            if d.logdir is not None and d.state is not DirState.OFFLINE:
                await self.adopt(d)
        newest = max((r for r in records if isinstance(r, dict)),
                     key=lambda r: r.get("generation", 0), default=None)
        if newest is not None:
            self._placement_generation = int(newest.get("generation", 0))
            self._add_offline_placeholders(newest)
        self.ready = True
        self.metrics.partitions_changed(self)
        await self.write_placement()

    async def adopt(self, d: ManagedDir) -> list[TopicPartition]:
        """Lead every log of `d` (just opened or re-admitted); returns the partitions
        that live in another dir too and were left alone (the caller decides)."""
        assert d.logdir is not None
        hws = await self.dirs.run(d, _lead_all, d.logdir)
        clashes = []
        for tp, lg in d.logdir.logs.items():
            other = self.partitions.get(tp)
            if other is not None and other.dir is not d:
                clashes.append(tp)
                continue
            self.partitions[tp] = Partition(tp, lg, d, hws[tp])
        d.partitions = set(d.logdir.logs) - set(clashes)
        return clashes

    def _add_offline_placeholders(self, record: dict[str, Any]) -> None:
        for path, partitions in record.get("log_dirs", {}).items():
            d = self.dirs.by_path(path)
            if d is None:
                log.warning("placement record names %s, which is not in log.dirs: its "
                            "partitions %s are not served", path, ", ".join(partitions))
                continue
            if d.state is not DirState.OFFLINE:
                continue
            for name in partitions:
                tp = names.parse_partition_dir(name)
                if tp is not None and tp not in self.partitions:
                    self.partitions[tp] = Partition(tp, None, d, -1)
                    d.partitions.add(tp)
            if d.partitions:
                log.warning("log dir %s is offline: its %d partitions are reported offline "
                            "and not re-created elsewhere", d.path, len(d.partitions))

    async def write_placement(self) -> None:
        """Record where every partition lives, in every dir that can take a write."""
        self._placement_generation += 1
        record = {"version": 1, "broker": self.broker_id,
                  "generation": self._placement_generation,
                  "log_dirs": {str(d.path): sorted(f"{tp.topic}-{tp.partition}"
                                                   for tp in d.partitions)
                               for d in self.dirs.dirs}}
        data = json.dumps(record, indent=1).encode() + b"\n"
        usable = [d for d in self.dirs.dirs
                  if d.logdir is not None and d.state is DirState.ONLINE]
        done = await asyncio.gather(*(self.dirs.run(d, _write_placement, d.logdir, data)
                                      for d in usable), return_exceptions=True)
        for d, r in zip(usable, done, strict=True):
            if isinstance(r, BaseException):
                log.warning("writing %s in %s failed: %s", PLACEMENT_FILE, d.path, r)

    async def _find_cluster_id(self) -> str:
        found = await asyncio.gather(*(self.dirs.run(d, _read_cluster_id, d.path)
                                       for d in self.dirs.dirs), return_exceptions=True)
        ids = {c for c in found if isinstance(c, str) and c}
        if len(ids) > 1:
            raise LogStoreError(f"log dirs disagree on cluster.id: {sorted(ids)}")
        return ids.pop() if ids else new_cluster_id()

    async def stop(self) -> tuple[list[tuple[ManagedDir, BaseException]], bool]:
        """Flush, checkpoint and mark a clean shutdown in every dir that is not offline.
        Returns the failures and whether a worker is stuck (on a hung disk)."""
        self.ready = False
        for p in self.partitions.values():
            p.notify()
        failures = await self.dirs.close_all(clean=True)
        stuck = not self.dirs.shutdown_workers()
        return failures, stuck

    # ---- lookups ----

    def topics(self) -> dict[str, list[Partition]]:
        out: dict[str, list[Partition]] = {}
        for tp, p in self.partitions.items():
            out.setdefault(tp.topic, []).append(p)
        for parts in out.values():
            parts.sort(key=lambda p: p.tp.partition)
        return out

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get(TopicPartition(topic, partition))

    # ---- data path ----

    def append(self, items: list[tuple[Partition, bytes]]) -> asyncio.Future[list[AppendResult]]:
        """Queue the appends on their dirs' workers now (order kept per dir); the future
        gives one AppendResult per item, in the order given."""
        by_dir: dict[int, list[int]] = {}
        for i, (p, _) in enumerate(items):
            by_dir.setdefault(p.dir.index, []).append(i)
        futures = []
        for idxs in by_dir.values():
            d = items[idxs[0]][0].dir
            futures.append(self.dirs.submit(d, _append_all, [items[i] for i in idxs]))

        async def collect() -> list[AppendResult]:
            results: list[AppendResult | None] = [None] * len(items)
            done = await asyncio.gather(*futures, return_exceptions=True)
            for idxs, res in zip(by_dir.values(), done, strict=True):
                for j, i in enumerate(idxs):
                    if isinstance(res, BaseException):
                        code, msg = error_of(res, f"append to {items[i][0].tp}")
                        results[i] = AppendResult(code, message=msg)
                    else:
                        results[i] = res[j]
            for (p, _), r in zip(items, results, strict=True):
                if r is not None and r.error == NONE and r.high_watermark >= 0:
                    p.high_watermark = r.high_watermark
                    p.notify()
            return [r for r in results if r is not None]

        return asyncio.ensure_future(collect())

    async def read(self, items: list[tuple[Partition, int, int]], max_bytes: int
                   ) -> list[ReadResult]:
        by_dir: dict[int, list[int]] = {}
        for i, (p, _, _) in enumerate(items):
            by_dir.setdefault(p.dir.index, []).append(i)
        futures = [self.dirs.submit(items[idxs[0]][0].dir, _read_all,
                                    [items[i] for i in idxs], max_bytes)
                   for idxs in by_dir.values()]
        done = await asyncio.gather(*futures, return_exceptions=True)
        results: list[ReadResult] = [ReadResult()] * len(items)
        for idxs, res in zip(by_dir.values(), done, strict=True):
            for j, i in enumerate(idxs):
                if isinstance(res, BaseException):
                    code, msg = error_of(res, f"read {items[i][0].tp}")
                    results[i] = ReadResult(code, message=msg)
                else:
                    results[i] = res[j]
        return results

    async def list_offsets(self, items: list[tuple[Partition, int]]) -> list[tuple[int, int, int]]:
        by_dir: dict[int, list[int]] = {}
        for i, (p, _) in enumerate(items):
            by_dir.setdefault(p.dir.index, []).append(i)
        futures = [self.dirs.submit(items[idxs[0]][0].dir, _list_offsets,
                                    [items[i] for i in idxs]) for idxs in by_dir.values()]
        done = await asyncio.gather(*futures, return_exceptions=True)
        results: list[tuple[int, int, int]] = [(UNKNOWN_SERVER_ERROR, -1, -1)] * len(items)
        for idxs, res in zip(by_dir.values(), done, strict=True):
            for j, i in enumerate(idxs):
                results[i] = ((error_of(res, "list offsets")[0], -1, -1)
                              if isinstance(res, BaseException) else res[j])
        return results

    def new_producer_id(self) -> int:
        self._next_producer_id += 1
        return self._next_producer_id

    # ---- topics ----

    async def create_topic(self, topic: str, num_partitions: int, replication_factor: int, *,
                           validate_only: bool = False) -> None:
        """Create `topic` with partitions placed by free space; TopicError on refusal.

        The name is validated before anything touches a disk."""
        try:
            names.validate_topic(topic)
        except InvalidTopicError as err:
            raise TopicError(INVALID_TOPIC_EXCEPTION, str(err)) from err
        if num_partitions == -1:
            num_partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if num_partitions < 1:
            raise TopicError(INVALID_PARTITIONS, f"{topic}: number of partitions must be at "
                                                 f"least 1, got {num_partitions}")
        if replication_factor != 1:
            raise TopicError(INVALID_REPLICATION_FACTOR,
                             f"{topic}: replication factor {replication_factor} is larger "
                             "than the 1 available broker (standalone)")
        async with self._admin_lock:
            if topic in self.topics():
                raise TopicError(TOPIC_ALREADY_EXISTS, f"topic {topic!r} already exists")
            collide = _collision(topic, self.topics())
            if collide:
                raise TopicError(INVALID_TOPIC_EXCEPTION,
                                 f"topic {topic!r} collides with existing topic {collide!r} "
                                 "('.' and '_' map to the same metric names)")
            if validate_only:
                return
            try:
                placed = await self.dirs.place(num_partitions)
            except StorageError as err:
                raise TopicError(KAFKA_STORAGE_ERROR, str(err)) from err
            futures = [self.dirs.submit(d, d.logdir.create_log, topic, i)  # type: ignore[union-attr]
                       for i, d in enumerate(placed)]
            done = await asyncio.gather(*futures, return_exceptions=True)
            failed = None
            for i, (d, res) in enumerate(zip(placed, done, strict=True)):
                if isinstance(res, BaseException):
                    failed = failed or res
                    continue
                tp = TopicPartition(topic, i)
                d.partitions.add(tp)
                self.partitions[tp] = Partition(tp, res, d, 0)
            self.metrics.partitions_changed(self)
            await self.write_placement()
            if failed is not None:
                code, msg = error_of(failed, f"create {topic}")
                raise TopicError(code, f"creating {topic}: {msg}")
            log.info("created topic %s with %d partitions on %s", topic, num_partitions,
                     ", ".join(sorted({str(d.path) for d in placed})))

    async def delete_topic(self, topic: str) -> None:
        async with self._admin_lock:
            parts = self.topics().get(topic)
            if not parts:
                raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
            offline = sorted({str(p.dir.path) for p in parts if p.offline})
            if offline:
                # Deleting only part of a topic would bring the rest back on re-admission.
                raise TopicError(KAFKA_STORAGE_ERROR, (
                    f"topic {topic!r} has partitions in offline log dirs ({', '.join(offline)}); "
                    "nothing deleted: re-admit the dirs (logkeeper log-dirs readmit) first"))
            futures = []
            for p in parts:
                del self.partitions[p.tp]
                p.dir.partitions.discard(p.tp)
                p.deleted = True  # appends already queued on the worker see it
                p.notify()
                futures.append(self.dirs.submit(p.dir, p.dir.logdir.delete_log,  # type: ignore[union-attr]
                                                p.tp.topic, p.tp.partition))
            done = await asyncio.gather(*futures, return_exceptions=True)
            self.metrics.partitions_changed(self)
            await self.write_placement()
            errors = [r for r in done if isinstance(r, BaseException)]
            if errors:
                code, msg = error_of(errors[0], f"delete {topic}")
                raise TopicError(code, f"deleting {topic}: {msg}")
            log.info("deleted topic %s (%d partitions)", topic, len(parts))

    # ---- log dirs ----

    async def describe_dirs(self) -> list[dict[str, Any]]:
        """Per dir: path, state, partitions with size and lag, total and usable bytes."""
        async def one(d: ManagedDir) -> dict[str, Any]:
            entry: dict[str, Any] = {"dir": d, "error": NONE, "partitions": {},
                                     "total_bytes": -1, "usable_bytes": -1}
            if d.state is DirState.OFFLINE or d.logdir is None:
                entry["error"] = KAFKA_STORAGE_ERROR
                return entry
            try:
                entry.update(await self.dirs.run(d, _describe_dir, d.logdir))
            except Exception as err:  # noqa: BLE001 - reported per dir
                entry["error"] = error_of(err, f"describe {d.path}")[0]
            return entry

        return list(await asyncio.gather(*(one(d) for d in self.dirs.dirs)))

    async def maintenance(self, *, retention: bool, checkpoints: bool,
                          only: ManagedDir | None = None) -> None:
        """Retention and/or flush + checkpoints on every dir (or `only` one), each on its
        own worker."""
        async def one(d: ManagedDir) -> None:
            if d.logdir is None or d.state is DirState.OFFLINE:
                return
            try:
                deleted = await self.dirs.run(d, _maintain, d.logdir, retention, checkpoints)
            except Exception as err:  # noqa: BLE001 - next round retries; logged here
                error_of(err, f"maintenance of {d.path}")
                return
            if deleted:
                log.info("retention deleted %d segments in %s", deleted, d.path)

        await asyncio.gather(*(one(d) for d in self.dirs.dirs if only in (None, d)))

    async def refresh_dir_metrics(self) -> None:
        described = await self.describe_dirs()
        for entry in described:
            d = entry["dir"]
            size = sum(s for s, _ in entry["partitions"].values())
            self.metrics.log_dir(str(d.path), state=d.state.value, size=size,
                                 free=entry["usable_bytes"], total=entry["total_bytes"],
                                 partitions=len(d.partitions))


def _collision(topic: str, existing: Iterable[str]) -> str | None:
    key = topic.replace(".", "_")
    for other in existing:
        if other != topic and other.replace(".", "_") == key:
            return other
    return None


def _lead_all(ld: Any) -> dict[TopicPartition, int]:
    """Standalone: this broker leads every partition, so HW = LEO from the start."""
    out = {}
    for tp, lg in ld.logs.items():
        lg.high_watermark = lg.log_end_offset
        out[tp] = lg.high_watermark
    return out


def _read_placement(ld: Any) -> dict[str, Any] | None:
    data = ld.read_root_file(PLACEMENT_FILE)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError as err:
        log.warning("%s: unreadable, ignored: %s", ld.path / PLACEMENT_FILE, err)
        return None


def _write_placement(ld: Any, data: bytes) -> None:
    ld.write_root_file(PLACEMENT_FILE, data)


def _read_cluster_id(path: Any) -> str | None:
    meta = path / names.META_PROPERTIES
    if not meta.exists():
        return None
    return checkpoint.read_meta_properties(meta).get("cluster.id")


def _describe_dir(ld: Any) -> dict[str, Any]:
    space = ld.space()
    partitions = {tp: (lg.size_bytes, 0) for tp, lg in ld.logs.items()}  # leader: lag 0
    return {"partitions": partitions, "total_bytes": space.total_bytes,
            "usable_bytes": space.avail_bytes}


def _maintain(ld: Any, retention: bool, checkpoints: bool) -> int:
    deleted = 0
    if retention:
        now = int(time.time() * 1000)
        for lg in ld.logs.values():
            deleted += lg.apply_retention(now)
    if checkpoints:
        ld.flush()
        ld.write_checkpoints()
    return deleted
