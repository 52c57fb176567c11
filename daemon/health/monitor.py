"""Log-dir health: evidence in, one transition per change out, each carried out once.

Evidence comes from four places, and all of it goes to the one `LogDirStates`
(daemon.dirstate), which decides:
- the failure channel: every OSError of a dir's files, classified by its IoGuard, is
  consumed here by one thread, off the request path;
- the availability and space probes, every `log.dir.probe.interval.ms` on the dir's own
  worker, bounded by `log.dir.probe.timeout.ms` (a hung disk stalls its worker only, and
  the timeout takes the dir OFFLINE);
- inotify (checks.watch): a dir deleted, moved, unmounted or chmod'ed is probed at once;
- the slow-disk detector (checks.slow): a persistent latency outlier among the host's
  dirs is DEGRADED, and OFFLINE too with `log.dir.slow.action = "offline"`.

Carrying out a transition (`_apply`, on the event loop):
- OFFLINE: the dir's IoGuard refuses everything at once, calls still queued on its
  worker fail with KAFKA_STORAGE_ERROR, its fetch long-polls wake, its files and
  `.lock` are released on its worker, the controller is notified (ZooKeeper), and
  when every dir is offline the daemon stops with a message naming each one;
- SATURATED: appends are refused by the IoGuard, the reserve file is deleted so
  retention and deletion have room, the controller is notified;
- back to ONLINE (free space above `log.dir.resume.free.bytes`): the reserve is
  re-created and appends are accepted again.

Operators: `readmit` brings a repaired OFFLINE dir back without a restart (probe, lock,
recover, serve); `cordon`/`uncordon` stop or allow new partitions in a dir.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from checks import (
    AvailabilityResult,
    LogDirWatcher,
    SlowDiskDetector,
    SpaceResult,
    WatchEvent,
    device_io_latency_ms,
    probe_availability,
    probe_space,
)
from checks.slow import device_for_path, io_counters
from logstore import LogStoreError, StorageError

from ..cluster.link import ClusterLink
from ..config import Config
from ..ops.metrics import Metrics
from ..replica.manager import Broker
from ..storage.dirstate import DirState, Transition
from ..storage.log_manager import CORDON_FILE, ManagedDir, all_offline_message

log = logging.getLogger("logkeeper.health")

LATENCY_WINDOW = 20  # probe latencies kept per dir for describe output


class AdminError(Exception):
    """An operator command that cannot be carried out; `status` is its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class PauseClock:
    """Notices when this process's event loop did not run for a while (the process was
    stopped or starved), so that time is not counted against a disk.

    A task ticks every `period` seconds; a gap between ticks longer than `min_stall`
    (beyond the period) is a stall. Loop-only: not thread-safe."""

    def __init__(self, *, min_stall: float, period: float = 0.05):
        self.min_stall = min_stall
        self.period = period
        self._last: float | None = None
        self._stalls: deque[tuple[float, float]] = deque(maxlen=32)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        while True:
            await asyncio.sleep(self.period)
            now = loop.time()
            if now - self._last > self.period + self.min_stall:
                self._stalls.append((self._last, now))
            self._last = now

    def stalled_between(self, start: float, end: float) -> float | None:
        """How long the loop stood still within [start, end], counting a stall still
        going on (no tick for a while: this very call may be the first thing to run
        after one); None when it never stood still for `min_stall`."""
        now = asyncio.get_running_loop().time()
        spans = list(self._stalls)
        if self._last is not None and now - self._last > self.period + self.min_stall:
            spans.append((self._last, now))
        longest = 0.0
        for a, b in spans:
            overlap = min(b, max(end, now)) - max(a, start)
            longest = max(longest, overlap)
        return longest if longest > self.min_stall else None


def _probe(d: ManagedDir, floor: int, resume: int) -> tuple[AvailabilityResult | None, SpaceResult]:
    """On the dir's worker. A SATURATED dir gets no canary write (it would only fail
    for want of space); its space probe decides when it may come back."""
    path = str(d.path)
    avail = None
    if d.state is DirState.ONLINE:
        avail = probe_availability(path, expect=d.identity)
    return avail, probe_space(path, floor_bytes=floor, resume_bytes=resume)


class LogDirHealth:
    def __init__(self, broker: Broker, metrics: Metrics, config: Config, *,
                 on_all_offline: Callable[[str], None]):
        self.broker = broker
        self.dirs = broker.dirs
        self.states = broker.dirs.states
        self.metrics = metrics
        self.interval = config["log.dir.probe.interval.ms"] / 1000
        self.timeout = config["log.dir.probe.timeout.ms"] / 1000
        self.floor = config["log.dir.min.free.bytes"]
        self.resume = config["log.dir.resume.free.bytes"]
        self.reserve = config["log.dir.reserve.bytes"]
        self.slow_offline = config["log.dir.slow.action"] == "offline"
        slow = {"min_ms": config["log.dir.slow.min.ms"], "factor": config["log.dir.slow.factor"]}
        self.detector = SlowDiskDetector(**slow)
        self.device_detector = SlowDiskDetector(**slow)
        self.on_all_offline = on_all_offline
        self.cluster: ClusterLink | None = None
        self.latencies: dict[str, deque[float]] = {
            str(d.path): deque(maxlen=LATENCY_WINDOW) for d in self.dirs.dirs}
        self.devices: dict[str, str | None] = {}
        self.transitions: deque[Transition] = deque(maxlen=1000)  # the latest, newest last
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: dict[str, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._probing: dict[str, asyncio.Future[Any]] = {}
        self._stop = threading.Event()
        self._consumer = threading.Thread(target=self._consume_failures,
                                          name="logkeeper-failures", daemon=True)
        self._watcher: LogDirWatcher | None = None
        self._io_before: dict[str, Any] = {}
        self.pauses = PauseClock(min_stall=max(self.timeout / 4, 0.1))
        self.states.subscribe(self._on_transition)

    # ---- lifecycle ----

    def attach(self) -> None:
        """Before the dirs open: failures during start-up are transitions too."""
        self._loop = asyncio.get_running_loop()
        self._wake = {str(d.path): asyncio.Event() for d in self.dirs.dirs}
        self._consumer.start()

    async def start(self) -> None:
        """Once the dirs are open: watches, probes and the slow-disk check."""
        for d in self.dirs.dirs:
            self._publish_state(d)
            # 0 from the start: an absent sample is not "not degraded" to an alert rule.
            self.metrics.set_degraded(str(d.path), d.degraded)
        self.devices = dict(zip(
            (str(d.path) for d in self.dirs.dirs),
            await asyncio.gather(*(asyncio.to_thread(device_for_path, d.path)
                                   for d in self.dirs.dirs)), strict=True))
        self._watcher = LogDirWatcher([str(d.path) for d in self.dirs.dirs], self._on_watch)
        self._watcher.start()
        self._io_before = io_counters()
        self._tasks = [asyncio.ensure_future(self.pauses.run())]
        self._tasks += [asyncio.ensure_future(self._probe_loop(d)) for d in self.dirs.dirs]
        self._tasks.append(asyncio.ensure_future(self._slow_loop()))
        self.publish()

    async def stop(self) -> None:
        self._stop.set()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._watcher is not None:
            self._watcher.stop()
        self._consumer.join(timeout=2)

    # ---- evidence ----

    def _consume_failures(self) -> None:
        """The one consumer of the failure channel: a burst is one transition."""
        channel = self.dirs.failure_channel
        while not self._stop.is_set():
            failure = channel.get(timeout=0.2)
            if failure is not None and failure.log_dir in self.latencies:
                self.states.on_failure(failure)

    def _on_watch(self, event: WatchEvent) -> None:
        # pyinotify's thread: hand over to the loop, which probes the dir now.
        wake = self._wake.get(event.log_dir)
        if wake is not None and self._loop is not None:
            log.info("log dir %s: %s (inotify); probing now", event.log_dir, event.reason)
            self._loop.call_soon_threadsafe(wake.set)

    async def _probe_loop(self, d: ManagedDir) -> None:
        wake = self._wake[str(d.path)]
        # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancel that
        # races with its inner future, and this loop would then outlive stop().
        while not self._stop.is_set():
            try:
                async with asyncio.timeout(self.interval):
                    await wake.wait()
            except TimeoutError:
                pass
            wake.clear()
            try:
                await self.probe(d)
            except Exception:  # noqa: BLE001 - a probe bug must not stop the probing
                log.exception("probing %s failed", d.path)

    async def _await_probe(self, path: str, fut: asyncio.Future[Any]) -> Any:
        """The probe's result, within the timeout counted in time this process ran.

        A timeout that ran out while the whole daemon was not running (SIGSTOP, a paused
        VM, a long swap or scheduler stall) says nothing about the disk: the probe's
        worker was frozen too. Such a timeout is started again, once per stall."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            deadline = loop.time() + self.timeout
            try:
                async with asyncio.timeout_at(deadline):
                    return await asyncio.shield(fut)
            except TimeoutError:
                stall = self.pauses.stalled_between(started, deadline)
                if stall is None:
                    raise
                log.warning("log dir %s: probe timeout ran out while the daemon itself did "
                            "not run for %.1f s (paused?); waiting again", path, stall)
                started = loop.time()

    async def probe(self, d: ManagedDir) -> None:
        """One availability + space probe of `d` on its worker, within the timeout."""
        path = str(d.path)
        if d.state is DirState.OFFLINE or d.logdir is None:
            return
        running = self._probing.get(path)
        if running is not None and not running.done():
            return  # the last one has not come back: its timeout already counted
        fut = self.dirs.submit(d, _probe, d, self.floor, self.resume)
        self._probing[path] = fut
        try:
            avail, space = await self._await_probe(path, fut)
        except TimeoutError:
            self.states.on_probe_timeout(path, self.timeout)
            return
        except StorageError:
            return  # went OFFLINE meanwhile
        if avail is not None:
            self.states.on_availability(avail)
            if avail.ok:
                ms = avail.latency_ns / 1e6
                self.metrics.observe_probe(path, ms / 1000)
                self.detector.record(path, ms)
                self.latencies[path].append(ms)
        if space.ok:
            self.metrics.dir_free.labels(path).set(space.avail_bytes)
            self.metrics.dir_total.labels(path).set(space.total_bytes)
        self.states.on_space(space)

    async def _slow_loop(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.interval)
            self.check_slow()

    def check_slow(self) -> None:
        """Compare each dir's probe latency (and its device's IO time) with its peers'."""
        after = io_counters()
        for path, dev in self.devices.items():
            if dev is None or self.states.state(path) is DirState.OFFLINE:
                continue
            ms = device_io_latency_ms(self._io_before, after, dev)
            if ms is not None:
                self.device_detector.record(path, ms)
        self._io_before = after
        verdicts = self.detector.evaluate()
        by_device = self.device_detector.evaluate()
        for d in self.dirs.dirs:
            path = str(d.path)
            if d.state is DirState.OFFLINE:
                continue
            probe, device = verdicts.get(path), by_device.get(path)
            degraded = bool((probe and probe.degraded) or (device and device.degraded))
            if degraded == d.degraded:
                continue
            d.degraded = degraded
            self.metrics.set_degraded(path, degraded)
            if degraded:
                why = probe if probe and probe.degraded else device
                assert why is not None
                detail = (f"median {why.median_ms:.1f} ms vs {why.peers_median_ms:.1f} ms "
                          "on the host's other dirs")
                log.warning("log dir %s is DEGRADED (slow disk): %s", path, detail)
                if self.slow_offline:
                    self.states.on_slow(path, detail)
            else:
                log.info("log dir %s is no longer slow", path)
            self.publish()

    # ---- carrying out transitions ----

    def _on_transition(self, t: Transition) -> None:
        # On whichever thread decided it: the IoGuard refuses from this moment on.
        d = self.dirs.by_path(t.log_dir)
        if d is None:
            return
        d.apply_verdict()
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._apply, d, t)
            except RuntimeError:  # the loop is gone: shutting down
                pass

    def _apply(self, d: ManagedDir, t: Transition) -> None:
        self.transitions.append(t)
        path = str(d.path)
        self._publish_state(d)
        if t.new is DirState.OFFLINE:
            self.dirs.fail_inflight(d)
            self.detector.forget(path)
            self.device_detector.forget(path)
            if d.degraded:
                d.degraded = False
                self.metrics.set_degraded(path, False)
            for p in self.broker.partitions.values():
                if p.dir is d:
                    p.notify()
            if d.logdir is not None:
                # On its worker, after whatever was running there: never close a file
                # under a running call. A worker stuck on a hung disk keeps the lock
                # until the disk answers or the process exits.
                d.executor.submit(d.logdir.release)
            if self.states.all_offline():
                self.on_all_offline(all_offline_message(self.dirs.dirs))
        elif t.new is DirState.SATURATED and d.logdir is not None:
            self._on_worker(d, d.logdir.delete_reserve, "delete the reserve")
            # Retention now rather than at its next round: it is what wins space back.
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.ensure_future(
                self.broker.maintenance(retention=True, checkpoints=False, only=d)))
        elif t.new is DirState.ONLINE and t.old is DirState.SATURATED and d.logdir is not None:
            self._on_worker(d, d.logdir.create_reserve, "re-create the reserve", self.reserve)
        if self.cluster is not None and t.new in (DirState.OFFLINE, DirState.SATURATED):
            self.cluster.announce_log_dir_event(path)
        self.publish()

    def _on_worker(self, d: ManagedDir, fn: Callable[..., Any], what: str, *args: Any) -> None:
        fut = self.dirs.submit(d, fn, *args)

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("log dir %s: could not %s: %s", d.path, what, f.exception())

        fut.add_done_callback(done)

    def _publish_state(self, d: ManagedDir) -> None:
        self.metrics.set_log_dir_state(str(d.path), d.state.value)
        snapshot = self.states.snapshot()
        offline = [p for p, s in snapshot.items() if s is DirState.OFFLINE]
        self.metrics.set_offline_counts(
            len(offline), sum(1 for p in self.broker.partitions.values() if p.offline),
            sum(1 for s in snapshot.values() if s is DirState.SATURATED))

    # ---- what operators and the controller see ----

    def describe(self) -> list[dict[str, Any]]:
        """Per dir, from memory (never touches a disk): state, why, DEGRADED, cordon."""
        out = []
        for d in self.dirs.dirs:
            lat = self.latencies[str(d.path)]
            out.append({
                "path": str(d.path), "state": d.state.value, "error": d.reason or None,
                "degraded": d.degraded, "cordoned": d.cordoned,
                "partitions": sorted(f"{tp.topic}-{tp.partition}" for tp in d.partitions),
                "free_bytes": _gauge(self.metrics.dir_free, str(d.path)),
                "probe_latency_ms_median": round(statistics.median(lat), 3) if lat else None,
            })
        return out

    def publish(self) -> None:
        if self.cluster is not None:
            self.cluster.publish_log_dirs(self.describe())

    # ---- operator commands ----

    async def readmit(self, path: str) -> dict[str, Any]:
        """Bring a repaired OFFLINE dir back: probe, lock, recover, serve."""
        d = self._find(path)
        if d.state is not DirState.OFFLINE:
            raise AdminError(409, f"log dir {d.path} is {d.state.value}, not offline")
        old = d.logdir
        self.dirs.replace_worker(d)
        loop = asyncio.get_running_loop()
        started = time.monotonic()

        def reopen() -> None:
            result = probe_availability(d.path)
            if not result.ok:
                raise AdminError(503, f"log dir {d.path} still fails its probe: {result.error}")
            if old is not None:
                old.release()  # a worker that never got to it: the lock is ours to drop
            self.dirs.open_dir(d, self.broker.cluster_id)

        try:
            async with asyncio.timeout(self.timeout * 4):
                await loop.run_in_executor(d.executor, reopen)
        except TimeoutError:
            raise AdminError(503, f"log dir {d.path} did not answer within "
                                  f"{self.timeout * 4:g} s") from None
        except LogStoreError as err:
            raise AdminError(503, f"log dir {d.path} cannot be opened: {err}") from err
        except OSError as err:
            raise AdminError(503, f"log dir {d.path} cannot be opened: {err}") from err
        assert d.logdir is not None
        clashes = [tp for tp in d.logdir.logs
                   if tp in self.broker.partitions and self.broker.partitions[tp].dir is not d]
        if clashes:
            await loop.run_in_executor(d.executor, d.logdir.release)
            raise AdminError(409, f"log dir {d.path} holds partitions now served from another "
                                  f"dir: {', '.join(str(tp) for tp in clashes)}; move them away")
        self.states.readmit(str(d.path))  # the IoGuard accepts work again
        lost = sorted(tp for tp, p in self.broker.partitions.items()
                      if p.dir is d and tp not in d.logdir.logs)
        await self.broker.adopt(d)
        for tp in lost:  # the disk came back without them (replaced): empty again
            lg = await self.dirs.run(d, d.logdir.create_log, tp.topic, tp.partition)
            self.broker.partitions[tp].log = lg
            d.partitions.add(tp)
            log.warning("log dir %s: partition %s was not on the re-admitted disk; "
                        "re-created empty (its records are lost)", d.path, tp)
        self.metrics.partitions_changed(self.broker)
        self._publish_state(d)
        if self._watcher is not None:
            self._watcher.watch(str(d.path))
        await self.broker.write_placement()
        self.publish()
        recovered = sum(1 for r in d.logdir.recovery if r.recovered)
        log.warning("log dir %s re-admitted in %.2f s: %d partitions, %d recovered",
                    d.path, time.monotonic() - started, len(d.partitions), recovered)
        return {"log_dir": str(d.path), "state": d.state.value,
                "partitions": len(d.partitions), "recovered": recovered,
                "recreated_empty": [str(tp) for tp in lost]}

    async def cordon(self, path: str, cordoned: bool) -> dict[str, Any]:
        """Stop (or allow again) new partitions in a dir; kept across restarts in the dir."""
        d = self._find(path)
        d.cordoned = cordoned
        kept = False
        if d.state is not DirState.OFFLINE and d.logdir is not None:
            try:
                await self.dirs.run(d, _mark_cordoned, d, cordoned)
                kept = True
            except LogStoreError as err:
                log.warning("log dir %s: cordon kept in memory only: %s", d.path, err)
        log.info("log dir %s %s", d.path, "cordoned" if cordoned else "uncordoned")
        self.publish()
        return {"log_dir": str(d.path), "cordoned": cordoned, "persisted": kept}

    def _find(self, path: str) -> ManagedDir:
        d = self.dirs.by_path(path)
        if d is None:
            known = ", ".join(str(x.path) for x in self.dirs.dirs)
            raise AdminError(404, f"{path} is not a log dir of this broker (log.dirs: {known})")
        return d


def _mark_cordoned(d: ManagedDir, cordoned: bool) -> None:
    assert d.logdir is not None
    if cordoned:
        d.logdir.write_root_file(CORDON_FILE, b"")
    else:
        d.logdir.remove_root_file(CORDON_FILE)


def _gauge(gauge: Any, label: str) -> int | None:
    for metric in gauge.collect():
        for sample in metric.samples:
            if sample.labels.get("log_dir") == label:
                return int(sample.value)
    return None
