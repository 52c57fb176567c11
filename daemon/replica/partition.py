"""A partition hosted on this broker, and the outcomes of the work done on it.

`Partition` is kept on the event loop; its `log` and `producers` are touched only on
its dir's worker (daemon.storage.workers). Who leads it is not recorded here: that is
daemon.replica.leadership's answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from logstore import Log, LogMovedError, TopicPartition

from ..api.errors import NONE
from ..storage.dirstate import DirState
from ..storage.spliced import SplicedRecords
from ..storage.workers import ManagedDir
from .producer import PartitionProducers

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class Partition:
    """One partition held here. `log` and `producers` are touched only on `dir`'s worker.

    `log` is None for a partition known (from the placement record) to live in a dir
    that was offline at start-up: it is reported offline until its dir is re-admitted.
    Slotted, and its Fetch waiters' set made only while a Fetch waits on it: a broker
    holds thousands of these (an empty set alone is 216 bytes).
    """

    tp: TopicPartition
    log: Log | None
    dir: ManagedDir
    high_watermark: int = 0  # cached on the loop after each worker call
    waiters: set[asyncio.Future[None]] | None = None  # Fetch long-polls waiting on it
    producers: PartitionProducers = field(default_factory=PartitionProducers)
    deleted: bool = False
    # Brought back by a readmit, so it may hold fewer records than it acknowledged: its
    # disk was replaced (re-created empty), or recovered from a disk whose fault could
    # drop writes it had taken. In a cluster it may not lead until it has followed a
    # leader, or the records the other replicas hold would be truncated away to its
    # shorter log (daemon.replica.control).
    lost_records: bool = False

    @property
    def offline(self) -> bool:
        return self.log is None or self.dir.state is DirState.OFFLINE

    def wait(self, fut: asyncio.Future[None]) -> None:
        """Have `notify` wake `fut` (a Fetch long-poll's) at the next append."""
        if self.waiters is None:
            self.waiters = set()
        self.waiters.add(fut)

    def stop_waiting(self, fut: asyncio.Future[None]) -> None:
        if self.waiters is not None:
            self.waiters.discard(fut)
            if not self.waiters:
                self.waiters = None

    def notify(self) -> None:
        """Wake every Fetch long-poll waiting on this partition."""
        waiters = self.waiters
        if waiters is None:
            return
        self.waiters = None
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


async def wait_for_change(parts: Iterable[Partition], timeout: float,
                          stopping: asyncio.Event) -> None:
    """Sleep until one of `parts` is notified (an append, a move of its high watermark,
    ISR, leadership or a follower's log start), `timeout` seconds pass, or `stopping`."""
    parts = list(parts)
    if not parts:
        await asyncio.sleep(timeout)
        return
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for p in parts:
        p.wait(fut)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait([fut, stop], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        for p in parts:
            p.stop_waiting(fut)


async def delayed(waiting: Mapping[K, Partition], settled: Callable[[K], bool],
                  timeout_ms: int, stopping: asyncio.Event) -> list[K]:
    """Kafka's purgatory (DelayedProduce, DelayedDeleteRecords): `settled(key)` is asked
    for each key now and again at each notify of its partition, until it says True (its
    answer is known: done, or failed) for every key, `timeout_ms` passes or `stopping`
    is set. The keys still unsettled then: the caller answers them REQUEST_TIMED_OUT."""
    pending = dict(waiting)
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    while pending:
        for key in [k for k in pending if settled(k)]:
            del pending[key]
        remaining = deadline - time.monotonic()
        if not pending or remaining <= 0 or stopping.is_set():
            break
        await wait_for_change(pending.values(), remaining, stopping)
    return list(pending)


async def on_log(run: Callable[..., Awaitable[T]], p: Partition, fn: Callable[..., T],
                 *args: Any) -> T:
    """`fn(logdir, log, *args)` with `p`'s log dir and log, on that dir's worker (`run`
    is LogManager.run). A replica move (daemon.replica.moves) that retired the log
    meanwhile refused the call untouched: it is made again on the log's new dir."""
    while True:
        lg, d = p.log, p.dir
        try:
            return await run(d, fn, d.logdir, lg, *args)
        except LogMovedError:
            # The move's last step (the new log in place) follows within milliseconds;
            # a move that failed instead gives the old log back, unretired.
            for _ in range(MOVE_WAIT_STEPS):
                if p.log is not lg or lg is None or not lg.retired:
                    break
                await asyncio.sleep(0.01)
            else:
                raise


MOVE_WAIT_STEPS = 500  # 5 s


@dataclass
class AppendResult:
    error: int = NONE
    base_offset: int = -1
    log_start_offset: int = -1
    high_watermark: int = -1
    records: int = 0
    size: int = 0
    message: str | None = None
    end_offset: int = -1  # past the appended batch's last offset: what acks=all waits for
    log_append_time: int = -1  # the time it was stamped with (LogAppendTime), else -1
    # (a record's index in its batch, why) for each record refused (Produce v8+)
    record_errors: Sequence[tuple[int, str]] = ()


@dataclass
class ReadResult:
    error: int = NONE
    # b"", or the range read, spliced into pipes on the dir worker (daemon.storage.spliced)
    records: bytes | SplicedRecords = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    message: str | None = None
    log_end_offset: int = -1  # the log's end when it was read (a follower's fetch is held to it)
    # (epoch, end offset) where a fetcher's log left this one (Fetch v12), else None.
    diverging_epoch: tuple[int, int] | None = None
    # A read_committed consumer's: (producer id, first offset) of the aborted
    # transactions in the records, else None.
    aborted_transactions: list[tuple[int, int]] | None = None
    last_stable_offset: int = -1  # where read_committed consumers stop (Kafka's LSO)

    def release(self) -> None:
        """Close the records' pipes: they will not be sent."""
        if isinstance(self.records, SplicedRecords):
            self.records.close()
