"""One worker thread per log dir, and the one way work reaches it.

Every blocking filesystem call on a log dir, and every call on a `LogDir` or one of its
`Log`s (neither is thread-safe), goes through `DirWorkers.submit`/`run`, which runs it
on that dir's own single worker thread. The asyncio event loop never touches a disk,
and a slow disk stalls only its own dir's queue (docs/architecture.md).

Calls submitted to one dir run in submission order (a single FIFO worker,
`DirExecutor`): the produce path relies on this to keep each partition's appends in
request order. A call's result reaches the event loop through the executor's hand-off,
which wakes the loop once for however many results pile up while it is busy (under a
produce load the thread hops, not the appends, were most of the broker's CPU).
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
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
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
# How long a stop waits for an OFFLINE dir's worker before it counts as stuck on its disk.
OFFLINE_WORKER_GRACE_S = 2.0


log = logging.getLogger("logkeeper.workers")

Done = Callable[[Any, BaseException | None], None]  # (result, error): one of them


class DirExecutor(concurrent.futures.Executor):
    """One log dir's worker: a thread running calls one at a time, in the order given.

    `call(loop, fn, args, on_done)` is the data path: `on_done(result, error)` runs on
    `loop` once `fn(*args)` returned or raised. Results are handed over in a list the
    loop drains in one callback, and a call_soon_threadsafe (a write to the loop's wake-up
    socket) is made only when that list was empty, so a busy loop is woken once for many
    results, not once each. `submit` is the Executor API (a concurrent Future), for
    `run_in_executor` and calls nobody waits for.

    `shutdown(cancel_futures=True)` answers the calls not started with CancelledError;
    a call running on a hung disk is never waited for unless `wait` says so. The thread is
    a daemon thread: a process exiting with a worker stuck on a hung disk is not held."""

    def __init__(self, name: str, initializer: Callable[..., None] | None = None,
                 initargs: tuple[Any, ...] = ()):
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopped = False
        self._lock = threading.Lock()  # guards _stopped against a racing submit
        self._handoff_lock = threading.Lock()
        # Results not yet handed over, per event loop (one in a daemon).
        self._ready: dict[asyncio.AbstractEventLoop, list[tuple[Done, Any, BaseException | None]]] = {}
        thread = threading.Thread(target=self._work, name=name, daemon=True,
                                  args=(initializer, initargs))
        self._threads = (thread,)  # what a replacement worker waits for
        thread.start()

    # ---- the way in ----

    def call(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any],
             args: tuple[Any, ...], on_done: Done) -> None:
        with self._lock:
            if self._stopped:
                raise RuntimeError("the dir's worker was shut down")
            self._queue.put((fn, args, loop, on_done))

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
               ) -> concurrent.futures.Future[T]:
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._stopped:
                raise RuntimeError("the dir's worker was shut down")
            self._queue.put((fn, args, kwargs, fut))
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._stopped = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        self._cancel(item)
            self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()

    # ---- the worker thread ----

    def _work(self, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
        if initializer is not None:
            try:
                initializer(*initargs)
            except BaseException:  # noqa: BLE001 - the worker still serves its dir
                log.exception("a dir worker's initializer failed")
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            if isinstance(item[3], concurrent.futures.Future):
                fn, args, kwargs, fut = item
                if not fut.set_running_or_notify_cancel():
                    continue
                try:
                    result = fn(*args, **kwargs)
                except BaseException as err:  # noqa: BLE001 - handed to the caller
                    fut.set_exception(err)
                else:
                    fut.set_result(result)
                del item, fn, args, kwargs, fut
                continue
            fn, args, loop, on_done = item
            try:
                result, error = fn(*args), None
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                result, error = None, err
            self._hand_over(loop, on_done, result, error)
            del item, fn, args, result, error

    def _cancel(self, item: tuple[Any, ...]) -> None:
        if isinstance(item[3], concurrent.futures.Future):
            item[3].cancel()
        else:
            _, _, loop, on_done = item
            self._hand_over(loop, on_done, None, asyncio.CancelledError())

    def _hand_over(self, loop: asyncio.AbstractEventLoop, on_done: Done, result: Any,
                   error: BaseException | None) -> None:
        with self._handoff_lock:
            ready = self._ready.get(loop)
            if ready:
                ready.append((on_done, result, error))
                return  # the loop has a drain coming
            self._ready[loop] = [(on_done, result, error)]
        try:
            loop.call_soon_threadsafe(self._drain, loop)
        except RuntimeError:  # the loop is closed: a hung call finished after exit
            with self._handoff_lock:
                self._ready.pop(loop, None)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`: run its results' on_done, in the order the calls ran."""
        with self._handoff_lock:
            ready = self._ready.pop(loop, ())
        for on_done, result, error in ready:
            on_done(result, error)


def new_worker(index: int, path: Path, after: Iterable[Any] = ()) -> DirExecutor:
    """`after`: threads of an abandoned worker; this one starts work once they are done
    (or after PREDECESSOR_WAIT_S, if one is still stuck on its disk)."""
    name = f"logdir{index}-{path.name}"[:15]  # thread names show in /proc
    after = list(after)
    if not after:
        return DirExecutor(name)
    return DirExecutor(name, initializer=_join_threads, initargs=(after, PREDECESSOR_WAIT_S))


def _join_threads(threads: list[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


@dataclass(eq=False)
class ManagedDir:
    """One log dir: its path, worker, state and (once opened) the LogDir."""

    index: int
    path: Path
    executor: DirExecutor
    states: LogDirStates
    logdir: LogDir | None = None
    # Partitions placed here, kept on the event loop for placement decisions.
    partitions: set[TopicPartition] = field(default_factory=set)
    clean_shutdown: bool = False
    cordoned: bool = False  # no new partitions here (operator's choice)
    degraded: bool = False  # slow but serving (daemon.health)
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) when opened
    mount_point: str | None = None  # of the filesystem it was on when opened
    inflight: set[_Pending] = field(default_factory=set)

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
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running event loop, remembered: `asyncio.get_running_loop` makes a getpid
        system call on each call (CPython 3.11), and every append and read asks."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def call(self, d: ManagedDir, fn: Callable[..., Any], args: tuple[Any, ...],
             on_done: Done) -> None:
        """Queue `fn(*args)` on `d`'s worker now; `on_done(result, error)` runs on the
        loop once it returned or raised, or at once (synchronously) with the dir's offline
        error when `d` is OFFLINE, or later with it when `d` goes OFFLINE while the call
        waits (`fail_inflight`). Exactly once either way."""
        if d.state is DirState.OFFLINE:
            on_done(None, d.offline_error(getattr(fn, "__name__", "call")))
            return
        pending = _Pending(on_done, d.inflight)
        d.inflight.add(pending)
        try:
            d.executor.call(self.loop(), fn, args, pending.settle)
        except RuntimeError as err:  # a worker shut down (the daemon is stopping)
            pending.settle(None, err)

    def submit(self, d: ManagedDir, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue `fn(*args)` on `d`'s worker now; await the returned future for its result.

        Queued immediately (not when awaited), so calls keep their submission order.
        """
        fut: asyncio.Future[T] = self.loop().create_future()
        self.call(d, fn, args, lambda result, error: _settle(fut, result, error))
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
        out: asyncio.Future[list[R]] = self.loop().create_future()
        results: list[Any] = [None] * len(items)
        left = len(groups)
        if not left:
            out.set_result(results)
            return out

        def settle(idxs: list[int], got: list[R] | None, err: BaseException | None) -> None:
            nonlocal left
            for j, i in enumerate(idxs):
                results[i] = on_error(items[i], err) if err is not None else got[j]
            left -= 1
            if not left and not out.done():
                out.set_result(results)

        for d, idxs in groups.values():
            group_items = items if len(idxs) == len(items) else [items[i] for i in idxs]
            self.call(d, fn, (group_items, *args),
                      lambda got, err, idxs=idxs: settle(idxs, got, err))
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
        for pending in list(d.inflight):
            pending.settle(None, d.offline_error("queued call"))
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
        # An OFFLINE dir's idle worker takes its stop a moment after it was queued: only
        # one still running after a short grace is stuck (an offline dir's worker was
        # reported stuck at every stop, a hung disk or not).
        deadline = time.monotonic() + OFFLINE_WORKER_GRACE_S
        threads = [t for d in self.dirs for t in getattr(d.executor, "_threads", ())]
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)


class _Pending:
    """A call queued on a dir's worker and not yet answered: settled once, by its result
    or by its dir going OFFLINE first (then its late result is dropped)."""

    __slots__ = ("on_done", "inflight")

    def __init__(self, on_done: Done, inflight: set[_Pending]):
        self.on_done: Done | None = on_done
        self.inflight = inflight

    def settle(self, result: Any, error: BaseException | None) -> None:
        on_done = self.on_done
        if on_done is None:
            return
        self.on_done = None
        self.inflight.discard(self)
        on_done(result, error)


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # cancelled by its awaiter
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
