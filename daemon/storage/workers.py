"""One worker thread per log dir, and the one way work reaches it.

Every blocking filesystem call on a log dir, and every call on a `LogDir` or one of its
`Log`s (neither is thread-safe), goes through `DirWorkers.submit`/`run`, which runs it
on that dir's own single worker thread. The asyncio event loop never touches a disk,
and a slow disk stalls only its own dir's queue (docs/architecture.md).

Calls submitted to one dir run in submission order (a single FIFO worker): the
produce path relies on this to keep each partition's appends in request order.
`fan_out` is the one place work on many partitions is grouped by dir, queued on each
dir's worker, and its results put back in the order given; `run_each` runs one call on
each of several dirs at once.

State: `submit` is the one place that consults a dir's state here: an OFFLINE dir
refuses work without queueing anything on its disk, and when a dir goes OFFLINE the
calls still waiting on its worker are failed at once (`fail_inflight`), so a request
that also touched a hung disk answers KAFKA_STORAGE_ERROR instead of hanging.

Errors: calls on a worker raise whatever the called function raised, on the awaiting
coroutine; `fan_out` and `run_each` hand each failure back in place of its result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from logstore import LogDir, LogDirOfflineError, TopicPartition, Verdict

from .dirstate import DirState, LogDirStates

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - an item of a fan-out
R = TypeVar("R")

_VERDICTS = {DirState.ONLINE: Verdict.NONE, DirState.SATURATED: Verdict.SATURATED,
             DirState.OFFLINE: Verdict.OFFLINE}

# How long a replacement worker waits for its abandoned predecessor's running call.
PREDECESSOR_WAIT_S = 10.0


def new_worker(index: int, path: Path, after: Iterable[Any] = ()) -> ThreadPoolExecutor:
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

    @property
    def usable(self) -> bool:
        """Opened and not OFFLINE: its worker may be given work on its LogDir."""
        return self.logdir is not None and self.state is not DirState.OFFLINE

    def offline_error(self, op: str) -> LogDirOfflineError:
        why = self.reason
        return LogDirOfflineError(
            f"log dir {self.path} is offline" + (f" ({why})" if why else ""),
            log_dir=str(self.path), op=op, path=str(self.path), errno=None)

    def apply_verdict(self) -> None:
        """Make the LogDir's IoGuard refuse what the current state forbids."""
        if self.logdir is not None:
            self.logdir.guard.verdict = _VERDICTS[self.state]


class DirWorkers:
    """The dirs' workers. Methods are called from the event loop only, except the
    functions handed to `submit`, which run on the dir's worker."""

    def __init__(self, dirs: list[ManagedDir]):
        self.dirs = dirs

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

    def fan_out(self, items: Sequence[I], dir_of: Callable[[I], ManagedDir],
                fn: Callable[..., list[R]], *args: Any,
                on_error: Callable[[I, BaseException], R]) -> asyncio.Future[list[R]]:
        """Group `items` by dir and queue `fn(group, *args)` on each dir's worker now
        (so order is kept per dir); `fn` returns one result per item of its group. The
        future gives one result per item, in the order given; the items of a dir whose
        call failed as a whole (offline, a bug) get `on_error(item, exception)`.

        One hop each way: the future is settled by the dirs' own completions, with no
        task in between (a produce's latency is mostly thread wake-ups)."""
        groups: dict[int, tuple[ManagedDir, list[int]]] = {}
        for i, item in enumerate(items):
            d = dir_of(item)
            group = groups.get(d.index)
            if group is None:
                groups[d.index] = (d, [i])
            else:
                group[1].append(i)
        out: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        results: list[Any] = [None] * len(items)
        left = len(groups)
        if not left:
            out.set_result(results)
            return out

        def settle(idxs: list[int], done: asyncio.Future[list[R]]) -> None:
            nonlocal left
            err = asyncio.CancelledError() if done.cancelled() else done.exception()
            got = done.result() if err is None else None
            for j, i in enumerate(idxs):
                results[i] = on_error(items[i], err) if got is None else got[j]
            left -= 1
            if not left and not out.done():
                out.set_result(results)

        for d, idxs in groups.values():
            group_items = items if len(idxs) == len(items) else [items[i] for i in idxs]
            self.submit(d, fn, group_items, *args).add_done_callback(
                functools.partial(settle, idxs))
        return out

    async def run_each(self, dirs: Iterable[ManagedDir], fn: Callable[..., T], *args: Any
                       ) -> list[tuple[ManagedDir, T | BaseException]]:
        """`fn(d, *args)` on each dir's worker at once; (dir, result or exception) each."""
        dirs = list(dirs)
        done = await asyncio.gather(*(self.run(d, fn, d, *args) for d in dirs),
                                    return_exceptions=True)
        return list(zip(dirs, done, strict=True))

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
        d.executor = new_worker(d.index, d.path, after=getattr(old, "_threads", ()))

    def shutdown_workers(self) -> bool:
        """Stop the workers; an OFFLINE dir's (maybe stuck on a hung disk) is not waited
        for. Returns False when a worker thread is still alive, so the caller knows the
        process must exit without joining it."""
        for d in self.dirs:
            d.executor.shutdown(wait=d.state is not DirState.OFFLINE, cancel_futures=True)
        return not any(t.is_alive() for d in self.dirs for t in getattr(d.executor, "_threads", ()))


def _copy_outcome(work: concurrent.futures.Future[Any], fut: asyncio.Future[Any]) -> None:
    if fut.done():  # failed early: its dir went OFFLINE while the call waited
        return
    err = work.exception() if not work.cancelled() else asyncio.CancelledError()
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(work.result())
