"""Log-dir health, the acting side: each transition `LogDirStates` decides, carried out once.

`TransitionHandler` is the one listener that acts on a dir's change of state. It runs
the first step on whichever thread decided the change (the dir's IoGuard refuses from
that moment on), then the rest on the event loop, through narrow methods of storage,
replica, cluster and the evidence side:
- OFFLINE: calls still queued on the dir's worker fail with KAFKA_STORAGE_ERROR
  (storage), its fetch long-polls wake (replica), its files and `.lock` are released on
  its worker, its slow-disk history is dropped (monitor), the controller is notified
  (cluster), and when every dir is offline the daemon stops with a message naming each;
- SATURATED: appends are refused by the IoGuard, the reserve file is deleted so
  retention and deletion have room, retention runs at once, the controller is notified;
- back to ONLINE (free space above `log.dir.resume.free.bytes`, or an OFFLINE dir
  readmitted): the reserve is re-created, appends are accepted again, and the
  controller is notified, so the dir's replicas follow again and rejoin the ISR.

Errors: a step that fails on a dir's worker is logged; the transition stands.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ..cluster.link import ClusterLink
from ..replica.manager import ReplicaManager
from ..storage.dirstate import DirState, Transition
from ..storage.log_manager import LogManager, all_offline_message
from ..storage.workers import ManagedDir
from .monitor import LogDirMonitor

log = logging.getLogger("logkeeper.health")


class TransitionHandler:
    def __init__(self, storage: LogManager, replicas: ReplicaManager, monitor: LogDirMonitor,
                 *, reserve_bytes: int, on_all_offline: Callable[[str], None],
                 on_dir_offline: Callable[[ManagedDir], None] = lambda d: None):
        self.storage = storage
        self.replicas = replicas
        self.monitor = monitor
        self.reserve = reserve_bytes
        self.on_all_offline = on_all_offline
        # In a cluster: the dir's partitions are neither led nor followed from now on
        # (daemon.replica.control.ControlRequests.dir_offline).
        self.on_dir_offline = on_dir_offline
        self.cluster: ClusterLink | None = None
        self.transitions: deque[Transition] = deque(maxlen=1000)  # the latest, newest last
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        storage.states.subscribe(self._on_transition)

    def attach(self) -> None:
        """Before the dirs open: failures during start-up are transitions too."""
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _on_transition(self, t: Transition) -> None:
        # On whichever thread decided it: the IoGuard refuses from this moment on.
        d = self.storage.by_path(t.log_dir)
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
        self.monitor.publish_state(d)
        if t.new is DirState.OFFLINE:
            self.storage.fail_inflight(d)
            self.monitor.forget(d)
            self.replicas.on_dir_offline(d)
            self.on_dir_offline(d)
            if d.logdir is not None:
                # On its worker, after whatever was running there: never close a file
                # under a running call. A worker stuck on a hung disk keeps the lock
                # until the disk answers or the process exits.
                d.executor.submit(d.logdir.release)
            if self.storage.states.all_offline():
                self.on_all_offline(all_offline_message(self.storage.dirs))
        elif t.new is DirState.SATURATED and d.logdir is not None:
            self._on_worker(d, d.logdir.delete_reserve, "delete the reserve")
            # Retention now rather than at its next round: it is what wins space back.
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.ensure_future(
                self.storage.maintenance(retention=True, checkpoints=False, only=d)))
        elif t.new is DirState.ONLINE and t.old is DirState.SATURATED and d.logdir is not None:
            self._on_worker(d, d.logdir.create_reserve, "re-create the reserve", self.reserve)
        if t.new in (DirState.OFFLINE, DirState.SATURATED) or t.old is DirState.SATURATED:
            # Coming back by itself (SATURATED -> ONLINE) is announced too: the
            # controller probes again and its replicas follow, catch up and rejoin the
            # ISR without a restart (docs/cluster.md, "What we chose" 7). A re-admitted
            # OFFLINE dir is announced by the readmit once its recovered logs are
            # served (daemon.health.commands): announced now, the controller's
            # LeaderAndIsr could reach the logs of before the disk died.
            self.announce(path)
        self.monitor.publish()

    def announce(self, path: str) -> None:
        """Tell the controller (a log dir event) that a dir changed, in a cluster."""
        if self.cluster is not None:
            self.cluster.announce_log_dir_event(path)

    def _on_worker(self, d: ManagedDir, fn: Callable[..., Any], what: str, *args: Any) -> None:
        fut = self.storage.submit(d, fn, *args)

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("log dir %s: could not %s: %s", d.path, what, f.exception())

        fut.add_done_callback(done)
