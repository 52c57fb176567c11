"""The transaction coordinator (Kafka's TransactionCoordinator, TransactionStateManager
and TransactionMarkerChannelManager), docs/transactions.md.

A transactional id belongs to one partition of `__transaction_state` (`partition_for`,
Kafka's hash); the broker leading that partition coordinates it, and that partition's
leader epoch is its coordinator epoch, which every marker it writes carries. When this
broker becomes that leader the partition is read from its start: the last record of
each id is its state (until then: COORDINATOR_LOAD_IN_PROGRESS). A transaction the old
coordinator left prepared (PrepareCommit, PrepareAbort) is completed: its markers are
written again, which is harmless (a partition ignores a marker for a transaction it has
already closed).

A transaction's life (Kafka's TransactionState):
- InitProducerId: a new id gets a producer id and epoch 0 (Empty); a known one gets its
  epoch bumped (a new producer id once the epoch is exhausted), which fences the previous
  producer. An id whose transaction is open has it aborted first, under the bumped epoch,
  and is answered CONCURRENT_TRANSACTIONS until that is done.
- AddPartitionsToTxn, AddOffsetsToTxn (the group's `__consumer_offsets` partition): the
  partitions join the transaction (Ongoing), written to the log before the answer.
- EndTxn: PrepareCommit or PrepareAbort is written (acks=all) and answered; then the
  markers go to every partition of the transaction (`MarkerWriter`, retried until each
  is written or its topic is gone), and CompleteCommit / CompleteAbort is written.
- A transaction open longer than its timeout is aborted with the epoch bumped: its
  producer is fenced (INVALID_PRODUCER_EPOCH / PRODUCER_FENCED on its next request).
- An id with no transaction open for `transactional.id.expiration.ms` is forgotten (a
  tombstone).

Every change is written to the log before it counts: a write that fails leaves the state
as it was, and the client is told to retry (or to find the coordinator again). Event
loop only; one request per transactional id at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from logstore import TopicPartition
from logstore.names import TRANSACTION_STATE_TOPIC
from logstore.records import Record, build_batch

from ..api import errors
from ..replica.manager import Marker
from . import txn_records
from .internal_topic import Logged
from .partitions import CoordinatedPartitions
from .txn_records import TxnMetadata, TxnState

log = logging.getLogger("logkeeper.transactions")

MAX_EPOCH = 32767  # Short.MaxValue: an epoch this high gets a new producer id instead
MARKER_RETRY_S = 0.1

_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)
_AT_REST = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


class TxnLog(Protocol):
    """`__transaction_state` as the coordinator needs it (daemon.coordinator.internal_topic)."""

    def partition_count(self) -> int | None: ...

    def led_epoch(self, partition: int) -> int | None: ...

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> int: ...

    async def read_all(self, partition: int) -> list[Logged]: ...


# Writes each marker through the partition's leader (this broker's replica manager, or
# WriteTxnMarkers to another broker): an error code per partition.
MarkerWriter = Callable[[dict[TopicPartition, Marker]], Awaitable[dict[TopicPartition, int]]]


@dataclass(frozen=True)
class TxnSettings:
    """The broker's transaction.* keys (Kafka's names and defaults)."""

    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    abort_interval_ms: int = 10000
    expire_interval_ms: int = 3600000
    write_timeout_ms: int = 5000


def _now_ms() -> int:
    return int(time.time() * 1000)


def _write_error(code: int) -> int:
    """What a failed write to __transaction_state answers (Kafka's mapping)."""
    if code in (errors.UNKNOWN_TOPIC_OR_PARTITION, errors.NOT_ENOUGH_REPLICAS,
                errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, errors.REQUEST_TIMED_OUT):
        return errors.COORDINATOR_NOT_AVAILABLE
    if code in (errors.NOT_LEADER_OR_FOLLOWER, errors.KAFKA_STORAGE_ERROR):
        return errors.NOT_COORDINATOR
    return code if code == errors.NONE else errors.UNKNOWN_SERVER_ERROR


class TransactionCoordinator(CoordinatedPartitions):
    def __init__(self, txn_log: TxnLog, next_producer_id: Callable[[], Awaitable[int]],
                 markers: MarkerWriter, settings: TxnSettings | None = None):
        self.log = txn_log
        self.next_producer_id = next_producer_id
        self.markers = markers
        self.settings = settings or TxnSettings()
        self.txns: dict[str, TxnMetadata] = {}
        self.partition_of_id: dict[str, int] = {}
        self.loaded: dict[int, int] = {}  # partition -> coordinator epoch it was read at
        self._loading: dict[int, tuple[int, asyncio.Task[None]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._completing: dict[str, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    # ---- life cycle ----

    def start(self) -> None:
        self._sweeper = asyncio.ensure_future(self._sweep_forever())

    async def stop(self) -> None:
        tasks = [t for _, t in self._loading.values()] + list(self._completing.values())
        if self._sweeper is not None:
            tasks.append(self._sweeper)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _sweep_forever(self) -> None:
        s = self.settings
        next_expiry = time.monotonic() + s.expire_interval_ms / 1000
        while True:
            await asyncio.sleep(s.abort_interval_ms / 1000)
            try:
                self.leadership_changed()
                self.abort_timed_out(_now_ms())
                if time.monotonic() >= next_expiry:
                    next_expiry = time.monotonic() + s.expire_interval_ms / 1000
                    await self.expire_ids(_now_ms())
            except Exception:  # noqa: BLE001 - a bug must not stop every transaction's timers
                log.exception("transaction coordinator sweep failed")

    # ---- who coordinates an id ----

    def _owner(self, transactional_id: str) -> tuple[int, int, int]:
        return self._owner_of(transactional_id)

    def _still_owner(self, p: int, epoch: int) -> bool:
        return self.loaded.get(p) == epoch and self.log.led_epoch(p) == epoch

    async def _load(self, p: int, epoch: int) -> None:
        started = time.monotonic()
        try:
            recs = await self.log.read_all(p)
        except Exception as err:  # noqa: BLE001 - the dir failed: answered NOT_COORDINATOR next
            log.warning("loading %s-%d failed (%s: %s)", TRANSACTION_STATE_TOPIC, p,
                        type(err).__name__, err)
            self._loading.pop(p, None)
            return
        if self.log.led_epoch(p) != epoch:
            self._loading.pop(p, None)
            return
        found: dict[str, TxnMetadata | None] = {}
        bad = 0
        for item in recs:
            if item.record is None:
                continue
            try:
                tid, meta = txn_records.decode(item.record.key, item.record.value)
            except txn_records.TxnRecordError as err:
                bad += 1
                if bad == 1:
                    log.warning("%s-%d offset %s: %s (skipped)", TRANSACTION_STATE_TOPIC, p,
                                item.record.offset, err)
                continue
            found[tid] = meta
        for tid, meta in found.items():
            if meta is not None and meta.state is not TxnState.DEAD:
                self.txns[tid] = meta
                self.partition_of_id[tid] = p
        self.loaded[p] = epoch
        self._loading.pop(p, None)
        prepared = [m for tid, m in self.txns.items()
                    if self.partition_of_id[tid] == p and m.state in _PREPARED]
        for m in prepared:  # the old coordinator's unfinished work
            self._start_completion(m, p, epoch)
        n = sum(1 for q in self.partition_of_id.values() if q == p)
        log.info("loaded %d transactional ids from %s-%d (coordinator epoch %d, %d records, "
                 "%d to complete) in %.0f ms", n, TRANSACTION_STATE_TOPIC, p, epoch,
                 len(recs), len(prepared), (time.monotonic() - started) * 1000)

    def _unload(self, p: int) -> None:
        self.loaded.pop(p, None)
        for tid in [t for t, q in self.partition_of_id.items() if q == p]:
            del self.partition_of_id[tid]
            self.txns.pop(tid, None)
            task = self._completing.pop(tid, None)
            if task is not None:
                task.cancel()
        log.info("no longer coordinating the transactions of %s-%d", TRANSACTION_STATE_TOPIC, p)

    def _lock(self, tid: str) -> asyncio.Lock:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = asyncio.Lock()
        return lock

    async def _write(self, p: int, meta: TxnMetadata | None, tid: str) -> int:
        """Write `meta` (None: a tombstone) as `tid`'s state; an error code."""
        value = None if meta is None else txn_records.value(meta)
        batch = build_batch([Record(txn_records.key(tid), value)])
        return _write_error(await self.log.append(p, batch, self.settings.write_timeout_ms))

    # ---- InitProducerId ----

    async def init_producer_id(self, tid: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[int, int, int]:
        """(error, producer id, epoch) for a transactional producer's InitProducerId."""
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return errors.INVALID_TRANSACTION_TIMEOUT, -1, -1
        code, p, epoch = self._owner(tid)
        if code:
            return code, -1, -1
        async with self._lock(tid):
            if not self._still_owner(p, epoch):
                return errors.NOT_COORDINATOR, -1, -1
            m = self.txns.get(tid)
            if m is None:
                pid = await self.next_producer_id()
                new = TxnMetadata(tid, pid, 0, timeout_ms, TxnState.EMPTY, set(), _now_ms())
            else:
                if producer_id >= 0 and (producer_id, producer_epoch) != (
                        m.producer_id, m.producer_epoch):
                    # KIP-360: a producer asking to bump an epoch that is not the current
                    # one was fenced already.
                    return errors.PRODUCER_FENCED, -1, -1
                if m.state in _PREPARED:
                    return errors.CONCURRENT_TRANSACTIONS, -1, -1
                if m.state is TxnState.ONGOING:
                    # A new producer instance: the old one's transaction is aborted under
                    # the bumped epoch (fencing the old one), then the client asks again.
                    self._abort(m, p, epoch, "a new producer instance took the id over")
                    return errors.CONCURRENT_TRANSACTIONS, -1, -1
                if m.producer_epoch + 1 >= MAX_EPOCH:
                    pid, pepoch = await self.next_producer_id(), 0
                else:
                    pid, pepoch = m.producer_id, m.producer_epoch + 1
                new = TxnMetadata(tid, pid, pepoch, timeout_ms, TxnState.EMPTY, set(),
                                  _now_ms())
            code = await self._write(p, new, tid)
            if code:
                return code, -1, -1
            self.txns[tid] = new
            self.partition_of_id[tid] = p
            return errors.NONE, new.producer_id, new.producer_epoch

    # ---- AddPartitionsToTxn, AddOffsetsToTxn ----

    def _check_producer(self, m: TxnMetadata | None, producer_id: int,
                        producer_epoch: int) -> int:
        if m is None or m.producer_id != producer_id:
            return errors.INVALID_PRODUCER_ID_MAPPING
        if m.producer_epoch != producer_epoch:
            return errors.PRODUCER_FENCED
        return errors.NONE

    async def _change(self, tid: str, producer_id: int, producer_epoch: int,
                      decide: Callable[[TxnMetadata], int | TxnMetadata]
                      ) -> tuple[int, TxnMetadata | None, int, int]:
        """A producer's change of `tid`'s state, one at a time: checked (coordinator,
        producer id and epoch), `decide`d (an error code, or the new state), written,
        applied. Returns (error, the new state, partition, coordinator epoch)."""
        code, p, epoch = self._owner(tid)
        if code:
            return code, None, p, epoch
        async with self._lock(tid):
            if not self._still_owner(p, epoch):
                return errors.NOT_COORDINATOR, None, p, epoch
            m = self.txns.get(tid)
            code = self._check_producer(m, producer_id, producer_epoch)
            if code:
                return code, None, p, epoch
            assert m is not None
            new = decide(m)
            if isinstance(new, int):
                return new, None, p, epoch
            if new is m:
                return errors.NONE, m, p, epoch  # nothing to write
            code = await self._write(p, new, tid)
            if code:
                return code, None, p, epoch
            self.txns[tid] = new
            return errors.NONE, new, p, epoch

    async def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> int:
        """The partitions join `tid`'s transaction: an error code for all of them."""
        wanted = set(partitions)

        def decide(m: TxnMetadata) -> int | TxnMetadata:
            if m.state in _PREPARED:
                return errors.CONCURRENT_TRANSACTIONS
            if m.state is TxnState.ONGOING and wanted <= m.partitions:
                return m
            now = _now_ms()
            return replace(m, state=TxnState.ONGOING, partitions=m.partitions | wanted,
                           last_update_ms=now,
                           start_ms=m.start_ms if m.state is TxnState.ONGOING else now)

        return (await self._change(tid, producer_id, producer_epoch, decide))[0]

    def verify_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """A partition leader's question before it writes the first batch of `tid`'s
        transaction (AddPartitionsToTxn v4, verifyOnly; Kafka's
        handleVerifyPartitionsInTransaction): NONE for each partition the transaction
        holds, TRANSACTION_ABORTABLE for one it does not. Nothing is written; the state
        as it stands answers (partitions join it once written, and leave it when the
        markers are)."""
        wanted = list(partitions)
        if not tid:
            return dict.fromkeys(wanted, errors.INVALID_REQUEST)
        code = self._owner(tid)[0]
        m = self.txns.get(tid)
        if not code:
            code = self._check_producer(m, producer_id, producer_epoch)
        if not code and m is not None and m.state in (TxnState.PREPARE_COMMIT,
                                                       TxnState.PREPARE_ABORT):
            code = errors.CONCURRENT_TRANSACTIONS
        if code or m is None:
            return dict.fromkeys(wanted, code)
        return {tp: errors.NONE if tp in m.partitions else errors.TRANSACTION_ABORTABLE
                for tp in wanted}

    # ---- EndTxn ----

    async def end_txn(self, tid: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> int:
        """Commit or abort `tid`'s transaction: answered once it is prepared (written);
        its markers and completion follow."""
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT

        def decide(m: TxnMetadata) -> int | TxnMetadata:
            if m.state is done:
                return m  # a retry of an EndTxn that was done
            if m.state is prepare:
                return errors.CONCURRENT_TRANSACTIONS
            if m.state is not TxnState.ONGOING:
                return errors.INVALID_TXN_STATE
            return replace(m, state=prepare, last_update_ms=_now_ms())

        code, new, p, epoch = await self._change(tid, producer_id, producer_epoch, decide)
        if not code and new is not None and new.state is prepare:
            self._start_completion(new, p, epoch)
        return code

    def _abort(self, m: TxnMetadata, p: int, epoch: int, why: str) -> None:
        """Abort `m`'s open transaction with its epoch bumped, in the background."""
        async def run() -> None:
            async with self._lock(m.transactional_id):
                cur = self.txns.get(m.transactional_id)
                if cur is None or cur.state is not TxnState.ONGOING or \
                        not self._still_owner(p, epoch):
                    return
                bumped = cur.producer_epoch + 1 if cur.producer_epoch + 1 < MAX_EPOCH \
                    else cur.producer_epoch
                new = replace(cur, producer_epoch=bumped, state=TxnState.PREPARE_ABORT,
                              last_update_ms=_now_ms())
                if await self._write(p, new, m.transactional_id):
                    return  # the sweep or the next InitProducerId tries again
                log.info("aborting the transaction of %r (producer %d, epoch %d -> %d): %s",
                         m.transactional_id, cur.producer_id, cur.producer_epoch, bumped, why)
                self.txns[m.transactional_id] = new
                self._start_completion(new, p, epoch)

        asyncio.ensure_future(run())

    def abort_timed_out(self, now_ms: int) -> None:
        """Abort every open transaction past its timeout (the producer is fenced)."""
        for tid, m in list(self.txns.items()):
            if m.state is TxnState.ONGOING and m.start_ms + m.timeout_ms < now_ms:
                p = self.partition_of_id.get(tid)
                epoch = self.loaded.get(p) if p is not None else None
                if p is not None and epoch is not None:
                    self._abort(m, p, epoch, f"open past its timeout of {m.timeout_ms} ms")

    def _start_completion(self, m: TxnMetadata, p: int, epoch: int) -> None:
        tid = m.transactional_id
        running = self._completing.get(tid)
        if running is not None and not running.done():
            return
        self._completing[tid] = asyncio.ensure_future(self._complete(m, p, epoch))

    async def _complete(self, m: TxnMetadata, p: int, epoch: int) -> None:
        """Write the markers of prepared `m` to every partition in it, then its
        completion; gives up when this broker stops coordinating it."""
        tid = m.transactional_id
        commit = m.state is TxnState.PREPARE_COMMIT
        marker = Marker(m.producer_id, m.producer_epoch, epoch, commit)
        left = set(m.partitions)
        try:
            while left:
                if not self._still_owner(p, epoch):
                    return
                try:
                    results = await self.markers({tp: marker for tp in left})
                except Exception:  # noqa: BLE001 - a bug: logged, tried again
                    log.exception("writing the markers of %r failed", tid)
                    results = {}
                for tp, code in results.items():
                    if code in (errors.NONE, errors.UNKNOWN_TOPIC_OR_PARTITION):
                        left.discard(tp)  # written, or the topic is gone
                    elif code in (errors.TRANSACTION_COORDINATOR_FENCED,
                                  errors.INVALID_PRODUCER_EPOCH):
                        # A newer coordinator or epoch wrote this partition's marker:
                        # nothing to do here any more (Kafka logs and drops it too).
                        log.warning("marker of %r for %s refused (%s): dropped", tid, tp,
                                    errors.name_of(code))
                        left.discard(tp)
                if left:
                    await asyncio.sleep(MARKER_RETRY_S)
            async with self._lock(tid):
                cur = self.txns.get(tid)
                if cur is None or cur.state is not m.state or not self._still_owner(p, epoch):
                    return
                new = replace(cur, state=TxnState.COMPLETE_COMMIT if commit
                              else TxnState.COMPLETE_ABORT, partitions=set(),
                              last_update_ms=_now_ms())
                while self._still_owner(p, epoch):
                    if not await self._write(p, new, tid):
                        self.txns[tid] = new
                        return
                    await asyncio.sleep(MARKER_RETRY_S)
        finally:
            if self._completing.get(tid) is asyncio.current_task():
                del self._completing[tid]

    # ---- expiry and admin ----

    async def expire_ids(self, now_ms: int) -> int:
        """Forget the ids with no transaction open for transactional.id.expiration.ms
        (a tombstone each); returns how many went."""
        gone = 0
        for tid, m in list(self.txns.items()):
            if m.state not in _AT_REST or now_ms - m.last_update_ms <= self.settings.id_expiration_ms:
                continue
            p = self.partition_of_id.get(tid)
            if p is None:
                continue
            async with self._lock(tid):
                cur = self.txns.get(tid)
                if cur is not m or not self._still_owner(p, self.loaded.get(p, -1)):
                    continue
                if not await self._write(p, None, tid):
                    del self.txns[tid]
                    del self.partition_of_id[tid]
                    gone += 1
        if gone:
            log.info("forgot %d transactional ids idle past transactional.id.expiration.ms", gone)
        return gone

    def describe(self, tid: str) -> tuple[int, TxnMetadata | None]:
        code, _, _ = self._owner(tid)
        if code:
            return code, None
        m = self.txns.get(tid)
        return (errors.NONE, m) if m is not None else (errors.TRANSACTIONAL_ID_NOT_FOUND, None)

    def list(self) -> list[TxnMetadata]:
        return [m for tid, m in self.txns.items() if self.partition_of_id.get(tid) in self.loaded]

    def loading(self) -> bool:
        return bool(self._loading)
