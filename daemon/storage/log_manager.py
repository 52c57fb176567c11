"""The daemon's log dirs: one worker thread each, their state, and partition placement.

Every blocking filesystem call on a log dir, and every call on a `LogDir` or one of its
`Log`s (neither is thread-safe), goes through `LogDirManager.submit`/`run`, which runs
it on that dir's own single worker thread. The asyncio event loop never touches a
disk, and a slow disk stalls only its own dir's queue (docs/architecture.md).

Calls submitted to one dir run in submission order (a single FIFO worker): the
produce path relies on this to keep each partition's appends in request order.

State: each dir's state (ONLINE, SATURATED, OFFLINE) lives in one `LogDirStates`
(daemon.dirstate); daemon.health turns evidence into transitions and carries them out.
`submit` is the one place that consults the state here: an OFFLINE dir refuses work
without queueing anything on its disk, and when a dir goes OFFLINE the calls still
waiting on its worker are failed at once (`fail_inflight`), so a request that also
touched a hung disk answers KAFKA_STORAGE_ERROR instead of hanging.

Errors: opening a dir that cannot be used raises the logstore error (StorageError,
LogDirLockedError, CheckpointError) naming the dir; calls on a worker raise whatever
the called function raised, on the awaiting coroutine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from checks import dir_identity
from logstore import (
    CheckpointError,
    FailureChannel,
    LogConfig,
    LogDir,
    LogDirLockedError,
    LogDirOfflineError,
    LogStoreError,
    StorageError,
    TopicPartition,
    Verdict,
)

from .dirstate import DirState, LogDirStates

T = TypeVar("T")
log = logging.getLogger("logkeeper.logdirs")

CORDON_FILE = ".logkeeper-cordoned"  # an operator's `log-dirs cordon`, kept across restarts
_VERDICTS = {DirState.ONLINE: Verdict.NONE, DirState.SATURATED: Verdict.SATURATED,
             DirState.OFFLINE: Verdict.OFFLINE}


# How long a replacement worker waits for its abandoned predecessor's running call.
PREDECESSOR_WAIT_S = 10.0


def _worker(index: int, path: Path, after: Iterable[Any] = ()) -> ThreadPoolExecutor:
    """`after`: threads of an abandoned worker; this one starts work once they are done
    (or after PREDECESSOR_WAIT_S, if one is still stuck on its disk)."""
    name = f"logdir{index}-{path.name}"[:15]  # thread names show in /proc
    after = list(after)
    if not after:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name,
                              initializer=_join_threads, initargs=(after, PREDECESSOR_WAIT_S))


def _join_threads(threads: list[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


@dataclass(eq=False)
class ManagedDir:
    """One log dir: its path, worker, state and (once opened) the LogDir."""

    index: int
    path: Path
    executor: ThreadPoolExecutor
    states: LogDirStates
    logdir: LogDir | None = None
    # Partitions placed here, kept on the event loop for placement decisions.
    partitions: set[TopicPartition] = field(default_factory=set)
    clean_shutdown: bool = False
    cordoned: bool = False  # no new partitions here (operator's choice)
    degraded: bool = False  # slow but serving (daemon.health)
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) when opened
    inflight: set[asyncio.Future[Any]] = field(default_factory=set)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def state(self) -> DirState:
        return self.states.state(str(self.path))

    @property
    def reason(self) -> str:
        return self.states.reason(str(self.path))

    def offline_error(self, op: str) -> LogDirOfflineError:
        why = self.reason
        return LogDirOfflineError(
            f"log dir {self.path} is offline" + (f" ({why})" if why else ""),
            log_dir=str(self.path), op=op, path=str(self.path), errno=None)

    def apply_verdict(self) -> None:
        """Make the LogDir's IoGuard refuse what the current state forbids."""
        if self.logdir is not None:
            self.logdir.guard.verdict = _VERDICTS[self.state]


@dataclass(frozen=True)
class DirSpace:
    device: int
    free_bytes: int  # available to the (unprivileged) daemon
    total_bytes: int


def _space(ld: LogDir) -> DirSpace:
    space = ld.space()
    with ld.guard.io("stat", ld.path):
        device = os.stat(ld.path).st_dev
    return DirSpace(device, space.avail_bytes, space.total_bytes)


class LogDirManager:
    """Owns the log dirs of this broker. Methods are called from the event loop only,
    except the functions handed to `submit`, which run on the dir's worker."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]], config: LogConfig, *,
                 broker_id: int, failure_channel: FailureChannel | None = None,
                 reserve_bytes: int = 0):
        self.config = config
        self.broker_id = broker_id
        self.reserve_bytes = reserve_bytes
        self.failure_channel = failure_channel or FailureChannel()
        resolved = [Path(os.path.abspath(os.fspath(p))) for p in paths]
        self.states = LogDirStates([str(p) for p in resolved])
        self.dirs: list[ManagedDir] = [ManagedDir(i, path, _worker(i, path), self.states)
                                       for i, path in enumerate(resolved)]

    # ---- running work on a dir's worker ----

    def submit(self, d: ManagedDir, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue `fn(*args)` on `d`'s worker now; await the returned future for its result.

        Queued immediately (not when awaited), so calls keep their submission order.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        if d.state is DirState.OFFLINE:
            fut.set_exception(d.offline_error(getattr(fn, "__name__", "call")))
            return fut
        work = d.executor.submit(fn, *args)
        d.inflight.add(fut)
        fut.add_done_callback(d.inflight.discard)

        def settle(_: concurrent.futures.Future[T]) -> None:
            try:
                loop.call_soon_threadsafe(_copy_outcome, work, fut)
            except RuntimeError:  # the loop is closed: a hung call finished after exit
                pass

        work.add_done_callback(settle)
        return fut

    async def run(self, d: ManagedDir, fn: Callable[..., T], *args: Any) -> T:
        return await self.submit(d, fn, *args)

    def fail_inflight(self, d: ManagedDir) -> None:
        """`d` went OFFLINE: every call still waiting on its worker fails now."""
        for fut in list(d.inflight):
            if not fut.done():
                fut.set_exception(d.offline_error("queued call"))
        d.inflight.clear()

    def replace_worker(self, d: ManagedDir) -> None:
        """A fresh worker for `d` (re-admission); the old one may be stuck on a hung disk
        and is abandoned: its queued calls are cancelled, and the event loop never waits
        for it. The new worker itself does wait (bounded) for the call the old one is
        still running: a probe let go by a disk that just stopped hanging must not run
        beside the re-admission's probe, or the two rewrite the one canary block at once
        and fail each other's read-back (a false EIO that refused the re-admission)."""
        old = d.executor
        old.shutdown(wait=False, cancel_futures=True)
        d.executor = _worker(d.index, d.path, after=getattr(old, "_threads", ()))

    # ---- opening and closing ----

    async def open_all(self, *, cluster_id: str | None) -> None:
        """Open every dir concurrently, each on its own worker (reserve, then recovery).

        A dir that cannot be opened because of its disk (an IO error, a lock held by
        another process, a vanished mount) is OFFLINE and the rest are served. A
        misconfiguration (another broker's or cluster's dir) stops start-up, and so does
        every dir being offline: `LogStoreError` naming each dir and why.
        """
        results = await asyncio.gather(
            *(self.run(d, self.open_dir, d, cluster_id) for d in self.dirs),
            return_exceptions=True)
        fatal = [(d, r) for d, r in zip(self.dirs, results, strict=True)
                 if isinstance(r, BaseException) and not _is_disk_failure(r)]
        for d, r in zip(self.dirs, results, strict=True):
            if isinstance(r, BaseException) and _is_disk_failure(r):
                self.states.on_open_failure(str(d.path), str(r))
        if fatal or self.states.all_offline():
            await self.release_all()
            if fatal:
                d, err = fatal[0]
                raise err
            raise LogStoreError(all_offline_message(self.dirs))

    def open_dir(self, d: ManagedDir, cluster_id: str | None) -> None:
        """On `d`'s worker: lock, identity, reserve, recovery, cordon marker."""
        ld = LogDir.open(d.path, self.config, broker_id=self.broker_id,
                         cluster_id=cluster_id, failure_channel=self.failure_channel,
                         reserve_bytes=self.reserve_bytes)
        try:
            with ld.guard.io("stat log dir", d.path):
                d.identity = dir_identity(d.path)
            d.cordoned = ld.read_root_file(CORDON_FILE) is not None
        except BaseException:
            ld.release()
            raise
        d.logdir = ld
        d.clean_shutdown = ld.clean_shutdown
        d.partitions = set(ld.logs)
        d.apply_verdict()

    async def release_all(self) -> None:
        await asyncio.gather(*(self.run(d, d.logdir.release) for d in self.dirs
                               if d.logdir is not None), return_exceptions=True)

    async def close_all(self, *, clean: bool = True) -> list[tuple[ManagedDir, BaseException]]:
        """Flush, checkpoint and close each dir on its worker; returns the failures."""
        async def close(d: ManagedDir) -> None:
            if d.logdir is not None and d.state is not DirState.OFFLINE:
                # A SATURATED dir is closed cleanly too if its disk lets us.
                await self.run(d, functools.partial(d.logdir.close, clean=clean))

        results = await asyncio.gather(*(close(d) for d in self.dirs), return_exceptions=True)
        return [(d, r) for d, r in zip(self.dirs, results, strict=True)
                if isinstance(r, BaseException)]

    def shutdown_workers(self) -> bool:
        """Stop the workers; an OFFLINE dir's (maybe stuck on a hung disk) is not waited
        for. Returns False when a worker thread is still alive, so the caller knows the
        process must exit without joining it."""
        for d in self.dirs:
            d.executor.shutdown(wait=d.state is not DirState.OFFLINE, cancel_futures=True)
        return not any(t.is_alive() for d in self.dirs for t in getattr(d.executor, "_threads", ()))

    # ---- placement ----

    async def spaces(self) -> dict[int, DirSpace | BaseException]:
        """Free space of each usable dir, probed on its own worker, by dir index."""
        usable = [d for d in self.dirs if d.state is not DirState.OFFLINE and d.logdir]
        results = await asyncio.gather(*(self.run(d, _space, d.logdir) for d in usable),
                                       return_exceptions=True)
        return {d.index: r for d, r in zip(usable, results, strict=True)}

    async def place(self, count: int) -> list[ManagedDir]:
        """Dirs for `count` new partitions: most free space first, ties to fewest partitions.

        Dirs on one filesystem share its free space, so they count as a tie whatever the
        probes' timing; within one call each placed partition counts toward its dir.
        """
        spaces = {i: s for i, s in (await self.spaces()).items() if isinstance(s, DirSpace)}
        candidates = [d for d in self.dirs if d.index in spaces
                      and d.state is DirState.ONLINE and not d.cordoned]
        if not candidates:
            states = ", ".join(f"{d.path}: {d.state.value}" + (" cordoned" if d.cordoned else "")
                               for d in self.dirs)
            raise LogDirOfflineError(
                f"no ONLINE, uncordoned log dir can take a new partition ({states})",
                log_dir="", op="place partition", path="", errno=None)
        device_free: dict[int, int] = {}
        for s in spaces.values():
            device_free[s.device] = max(device_free.get(s.device, 0), s.free_bytes)
        extra = {d.index: 0 for d in candidates}
        out = []
        for _ in range(count):
            best = min(candidates, key=lambda d: (
                -device_free[spaces[d.index].device],
                len(d.partitions) + extra[d.index], d.index))
            extra[best.index] += 1
            out.append(best)
        return out

    # ---- lookups (event loop only) ----

    def by_path(self, path: str) -> ManagedDir | None:
        for d in self.dirs:
            if str(d.path) == os.path.abspath(path):
                return d
        return None



def _copy_outcome(work: concurrent.futures.Future[Any], fut: asyncio.Future[Any]) -> None:
    if fut.done():  # failed early: its dir went OFFLINE while the call waited
        return
    err = work.exception() if not work.cancelled() else asyncio.CancelledError()
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(work.result())


def _is_disk_failure(err: BaseException) -> bool:
    """A dir that cannot open for its disk's sake (OFFLINE), not a misconfiguration."""
    if isinstance(err, CheckpointError):
        return False  # another broker's or cluster's dir: stop, as Kafka does
    return isinstance(err, (StorageError, LogDirLockedError, OSError))


def all_offline_message(dirs: Iterable[ManagedDir]) -> str:
    return "every log dir is offline: " + "; ".join(
        f"{d.path}: {d.reason or d.state.value}" for d in dirs)
