"""Log-dir health, the evidence side: what each dir's disk is telling us.

Evidence comes from four places, and all of it goes to the one `LogDirStates`
(daemon.storage.dirstate), which decides; daemon.health.transitions carries out what
it decides, and daemon.health.commands the operators' commands:
- the failure channel: every OSError of a dir's files, classified by its IoGuard, is
  consumed here by one thread, off the request path;
- the availability and space probes, every `log.dir.probe.interval.ms` on the dir's own
  worker, bounded by `log.dir.probe.timeout.ms` (a hung disk stalls its worker only, and
  the timeout takes the dir OFFLINE; time the daemon itself stood still is not counted,
  daemon.health.pause);
- inotify (checks.watch): a dir deleted, moved, unmounted or chmod'ed is probed at once;
- the slow-disk detector (checks.slow): a persistent latency outlier among the host's
  dirs is DEGRADED, and OFFLINE too with `log.dir.slow.action = "offline"`.

It also keeps what operators and the controller see of each dir (`describe`, published
to ZooKeeper with `publish`) and the dir-state metrics (`publish_state`).
Errors: a probe that fails is evidence, never an exception; a bug in one probe round is
logged and the probing goes on.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import threading
from collections import deque
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
from logstore import StorageError

from ..cluster.link import ClusterLink
from ..config import Config
from ..ops.metrics import Metrics
from ..replica.manager import ReplicaManager
from ..storage.dirstate import DirState
from ..storage.log_manager import LogManager
from ..storage.workers import ManagedDir
from .pause import PauseClock

log = logging.getLogger("logkeeper.health")

LATENCY_WINDOW = 20  # probe latencies kept per dir for describe output


def _probe(d: ManagedDir, floor: int, resume: int) -> tuple[AvailabilityResult | None, SpaceResult]:
    """On the dir's worker. A SATURATED dir gets no canary write (it would only fail
    for want of space); its space probe decides when it may come back."""
    path = str(d.path)
    avail = None
    if d.state is DirState.ONLINE:
        avail = probe_availability(path, expect=d.identity)
    return avail, probe_space(path, floor_bytes=floor, resume_bytes=resume)


class LogDirMonitor:
    def __init__(self, storage: LogManager, replicas: ReplicaManager, metrics: Metrics,
                 config: Config):
        self.dirs = storage
        self.replicas = replicas
        self.states = storage.states
        self.metrics = metrics
        self.interval = config["log.dir.probe.interval.ms"] / 1000
        self.timeout = config["log.dir.probe.timeout.ms"] / 1000
        self.floor = config["log.dir.min.free.bytes"]
        self.resume = config["log.dir.resume.free.bytes"]
        self.slow_offline = config["log.dir.slow.action"] == "offline"
        slow = {"min_ms": config["log.dir.slow.min.ms"], "factor": config["log.dir.slow.factor"]}
        self.detector = SlowDiskDetector(**slow)
        self.device_detector = SlowDiskDetector(**slow)
        self.cluster: ClusterLink | None = None
        self.latencies: dict[str, deque[float]] = {
            str(d.path): deque(maxlen=LATENCY_WINDOW) for d in self.dirs.dirs}
        self.devices: dict[str, str | None] = {}
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

    # ---- lifecycle ----

    def attach(self) -> None:
        """Before the dirs open: failures during start-up are transitions too."""
        self._loop = asyncio.get_running_loop()
        self._wake = {str(d.path): asyncio.Event() for d in self.dirs.dirs}
        self._consumer.start()

    async def start(self) -> None:
        """Once the dirs are open: watches, probes and the slow-disk check."""
        for d in self.dirs.dirs:
            self.publish_state(d)
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

    # ---- what the transition handler asks of the evidence side ----

    def forget(self, d: ManagedDir) -> None:
        """`d` went OFFLINE: its latency history is void and it is no longer DEGRADED."""
        path = str(d.path)
        self.detector.forget(path)
        self.device_detector.forget(path)
        if d.degraded:
            d.degraded = False
            self.metrics.set_degraded(path, False)

    def watch(self, d: ManagedDir) -> None:
        """`d` was re-admitted: watch it again."""
        if self._watcher is not None:
            self._watcher.watch(str(d.path))

    def publish_state(self, d: ManagedDir) -> None:
        self.metrics.set_log_dir_state(str(d.path), d.state.value)
        snapshot = self.states.snapshot()
        offline = [p for p, s in snapshot.items() if s is DirState.OFFLINE]
        self.metrics.set_offline_counts(
            len(offline), self.replicas.offline_count(),
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


def _gauge(gauge: Any, label: str) -> int | None:
    for metric in gauge.collect():
        for sample in metric.samples:
            if sample.labels.get("log_dir") == label:
                return int(sample.value)
    return None
