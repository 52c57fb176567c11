"""The dir workers (daemon.storage.workers): order, hand-over to the event loop, and what
an OFFLINE dir or a shutdown does to calls still queued. Real threads, a real loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from daemon.storage.dirstate import LogDirStates
from daemon.storage.workers import DirWorkers, ManagedDir, new_worker
from logstore import LogDirOfflineError


def one_dir(tmp_path: Path) -> tuple[DirWorkers, ManagedDir]:
    d = ManagedDir(0, tmp_path, new_worker(0, tmp_path), LogDirStates([str(tmp_path)]))
    return DirWorkers([d]), d


def test_calls_run_in_order_and_every_result_reaches_the_loop_thread(tmp_path: Path) -> None:
    workers, d = one_dir(tmp_path)
    ran: list[int] = []

    def work(i: int) -> tuple[int, str]:
        ran.append(i)
        return i * i, threading.current_thread().name

    async def main() -> None:
        loop_thread = threading.current_thread()
        seen: list[tuple[int, threading.Thread]] = []
        futures = [workers.submit(d, work, i) for i in range(500)]
        for f in futures:
            f.add_done_callback(lambda f: seen.append((f.result()[0], threading.current_thread())))
        results = await asyncio.gather(*futures)
        assert [r for r, _ in results] == [i * i for i in range(500)]
        assert {name for _, name in results} == {"logdir0-" + tmp_path.name[:7]}
        assert all(t is loop_thread for _, t in seen)
        # fan_out gives one result per item, in the order given
        got = await workers.fan_out(list(range(10)), lambda _: d,
                                    lambda items: [x + 1 for x in items],
                                    on_error=lambda item, err: -1)
        assert got == list(range(1, 11))
        # the Executor API (run_in_executor) runs on the same worker, after the rest
        assert await asyncio.get_running_loop().run_in_executor(d.executor, work, 7) == (
            49, results[0][1])

    try:
        asyncio.run(main())
        assert ran == [*range(500), 7]
    finally:
        d.executor.shutdown()


class Stuck:
    """A call that blocks its dir's worker until `release` is set, then returns `value`."""

    def __init__(self, value: object):
        self.value = value
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> object:
        self.started.set()
        self.release.wait(10)
        return self.value


def test_an_offline_dir_fails_its_queued_calls_and_their_late_results_are_dropped(
        tmp_path: Path) -> None:
    workers, d = one_dir(tmp_path)
    stuck = Stuck("late")
    started, release = stuck.started, stuck.release

    async def main() -> None:
        first = workers.submit(d, stuck)
        second = workers.fan_out(["a", "b"], lambda _: d, lambda items: items,
                                 on_error=lambda item, err: f"{item}: {type(err).__name__}")
        await asyncio.to_thread(started.wait, 10)
        d.states.on_probe_timeout(str(tmp_path), 1.0)  # the hung disk goes OFFLINE
        workers.fail_inflight(d)
        with pytest.raises(LogDirOfflineError, match="hung disk"):
            await first
        assert await second == ["a: LogDirOfflineError", "b: LogDirOfflineError"]
        assert not d.inflight
        release.set()
        await asyncio.sleep(0.2)  # the stuck call returns; nobody hears of it
        assert isinstance(first.exception(), LogDirOfflineError)
        # while OFFLINE, nothing is queued on the dir's worker at all
        refused = workers.submit(d, lambda: pytest.fail("ran on an offline dir"))
        with pytest.raises(LogDirOfflineError):
            await refused

    try:
        asyncio.run(main())
    finally:
        release.set()
        d.executor.shutdown()


def test_a_shutdown_answers_the_calls_not_started_with_cancellation(tmp_path: Path) -> None:
    workers, d = one_dir(tmp_path)
    stuck = Stuck(1)
    started, release = stuck.started, stuck.release

    async def main() -> None:
        running = workers.submit(d, stuck)
        queued = workers.submit(d, lambda: pytest.fail("ran after the shutdown"))
        plain = d.executor.submit(lambda: pytest.fail("ran after the shutdown"))
        await asyncio.to_thread(started.wait, 10)
        d.executor.shutdown(wait=False, cancel_futures=True)
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert plain.cancelled()
        with pytest.raises(RuntimeError, match="shut down"):
            d.executor.submit(int)
        late = workers.submit(d, int)  # the worker is gone: answered, not queued forever
        with pytest.raises(RuntimeError, match="shut down"):
            await late
        release.set()
        assert await running == 1  # the call already running still answers

    try:
        asyncio.run(main())
    finally:
        release.set()
        d.executor.shutdown()
    assert not any(t.is_alive() for t in d.executor._threads)
