"""The daemon's log dirs: one worker thread each, their state, and partition placement.

Every blocking filesystem call on a log dir, and every call on a `LogDir` or one of its
`Log`s (neither is thread-safe), goes through `LogDirManager.submit`/`run`, which runs
it on that dir's own single worker thread. The asyncio event loop never touches a
disk, and a slow disk stalls only its own dir's queue (ARCHITECTURE.md).

Calls submitted to one dir run in submission order (a single FIFO worker): the
produce path relies on this to keep each partition's appends in request order.

State: each dir has a `state` (ONLINE here; the next issue adds SATURATED and OFFLINE
and their transitions). `submit` is the one place that consults it, so a dir that is
not usable refuses work without queueing anything on its disk.

Errors: opening a dir that cannot be used raises the logstore error (StorageError,
LogDirLockedError, CheckpointError) naming the dir; calls on a worker raise whatever
the called function raised, on the awaiting coroutine.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from logstore import FailureChannel, LogConfig, LogDir, LogDirOfflineError, TopicPartition

T = TypeVar("T")


class DirState(enum.Enum):
    ONLINE = "online"
    SATURATED = "saturated"
    OFFLINE = "offline"


@dataclass
class ManagedDir:
    """One log dir: its path, worker, state and (once opened) the LogDir."""

    index: int
    path: Path
    executor: ThreadPoolExecutor
    state: DirState = DirState.ONLINE
    logdir: LogDir | None = None
    # Partitions placed here, kept on the event loop for placement decisions.
    partitions: set[TopicPartition] = field(default_factory=set)
    clean_shutdown: bool = False

    def __str__(self) -> str:
        return str(self.path)


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
                 broker_id: int, failure_channel: FailureChannel | None = None):
        self.config = config
        self.broker_id = broker_id
        self.failure_channel = failure_channel or FailureChannel()
        self.dirs: list[ManagedDir] = []
        for i, p in enumerate(paths):
            path = Path(os.path.abspath(os.fspath(p)))
            name = f"logdir{i}-{path.name}"[:15]  # thread names show in /proc
            self.dirs.append(ManagedDir(i, path, ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=name)))
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- running work on a dir's worker ----

    def submit(self, d: ManagedDir, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue `fn(*args)` on `d`'s worker now; await the returned future for its result.

        Queued immediately (not when awaited), so calls keep their submission order.
        """
        loop = asyncio.get_running_loop()
        if d.state is DirState.OFFLINE:
            fut: asyncio.Future[T] = loop.create_future()
            fut.set_exception(LogDirOfflineError(
                f"log dir {d.path} is offline", log_dir=str(d.path), op=getattr(
                    fn, "__name__", "call"), path=str(d.path), errno=None))
            return fut
        return loop.run_in_executor(d.executor, fn, *args)

    async def run(self, d: ManagedDir, fn: Callable[..., T], *args: Any) -> T:
        return await self.submit(d, fn, *args)

    # ---- opening and closing ----

    async def open_all(self, *, cluster_id: str | None) -> None:
        """Open every dir concurrently, each on its own worker (recovery included)."""
        results = await asyncio.gather(
            *(self.run(d, self._open, d, cluster_id) for d in self.dirs),
            return_exceptions=True)
        failures = [(d, r) for d, r in zip(self.dirs, results, strict=True)
                    if isinstance(r, BaseException)]
        if failures:
            # This issue runs with every dir healthy: one bad dir stops start-up. Release
            # the dirs that did open so a restart can take their locks.
            await asyncio.gather(*(self.run(d, d.logdir.release) for d in self.dirs
                                   if d.logdir is not None), return_exceptions=True)
            d, err = failures[0]
            raise err

    def _open(self, d: ManagedDir, cluster_id: str | None) -> None:
        ld = LogDir.open(d.path, self.config, broker_id=self.broker_id,
                         cluster_id=cluster_id, failure_channel=self.failure_channel)
        d.logdir = ld
        d.clean_shutdown = ld.clean_shutdown
        d.partitions = set(ld.logs)

    async def close_all(self, *, clean: bool = True) -> list[tuple[ManagedDir, BaseException]]:
        """Flush, checkpoint and close each dir on its worker; returns the failures."""
        async def close(d: ManagedDir) -> None:
            if d.logdir is not None:
                await self.run(d, functools.partial(d.logdir.close, clean=clean))

        results = await asyncio.gather(*(close(d) for d in self.dirs), return_exceptions=True)
        return [(d, r) for d, r in zip(self.dirs, results, strict=True)
                if isinstance(r, BaseException)]

    def shutdown_workers(self) -> None:
        for d in self.dirs:
            d.executor.shutdown(wait=True, cancel_futures=False)

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
        candidates = [d for d in self.dirs if d.index in spaces and d.state is DirState.ONLINE]
        if not candidates:
            raise LogDirOfflineError("no ONLINE log dir can take a new partition",
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

