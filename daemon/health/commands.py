"""Operators' log-dir commands: readmit, cordon and uncordon (`logkeeper log-dirs ...`,
through the HTTP endpoint's `POST /admin/log-dirs/<command>`).

`readmit` brings a repaired OFFLINE dir back without a restart: a fresh worker, an
availability probe, lock, recovery, each log given its topic's config (as at start-up),
then its partitions are served again (those the disk came back without are re-created
empty, and said so). `cordon`/`uncordon` stop or allow new partitions in a dir, kept
across restarts in the dir (`.logkeeper-cordoned`).

Errors: a command that cannot be carried out raises `AdminError` with the HTTP status
to answer and a message naming the dir and why.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from checks import mount_point, probe_availability
from logstore import LogStoreError

from ..replica.manager import ReplicaManager
from ..replica.topic_config import TopicConfigs
from ..storage.dirstate import DirState
from ..storage.log_manager import CORDON_FILE, LogManager
from ..storage.workers import ManagedDir
from .monitor import LogDirMonitor

log = logging.getLogger("logkeeper.health")


class AdminError(Exception):
    """An operator command that cannot be carried out; `status` is its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class OperatorCommands:
    """Event loop only."""

    def __init__(self, storage: LogManager, replicas: ReplicaManager, monitor: LogDirMonitor,
                 configs: TopicConfigs, *, timeout: float,
                 on_partitions_changed: Callable[[], None], announce: Callable[[str], None]):
        self.dirs = storage
        self.states = storage.states
        self.replicas = replicas
        self.configs = configs
        self.monitor = monitor
        self.timeout = timeout  # the probe timeout; a re-admission gets four of them
        self.on_partitions_changed = on_partitions_changed
        self.announce = announce  # a log dir event for the controller (in a cluster)

    async def readmit(self, path: str) -> dict[str, Any]:
        """Bring a repaired OFFLINE dir back: probe, lock, recover, configure, serve."""
        d = self._find(path)
        if d.state is not DirState.OFFLINE:
            raise AdminError(409, f"log dir {d.path} is {d.state.value}, not offline")
        old = d.logdir
        self.dirs.replace_worker(d)
        loop = asyncio.get_running_loop()
        started = time.monotonic()

        def reopen() -> None:
            unmounted(d)
            result = probe_availability(d.path)
            if not result.ok:
                raise AdminError(503, f"log dir {d.path} still fails its probe: {result.error}")
            if old is not None:
                old.release()  # a worker that never got to it: the lock is ours to drop
            self.dirs.open_dir(d, self.dirs.cluster_id)

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
                   if tp in self.replicas.partitions and self.replicas.partitions[tp].dir is not d]
        if clashes:
            await loop.run_in_executor(d.executor, d.logdir.release)
            raise AdminError(409, f"log dir {d.path} holds partitions now served from another "
                                  f"dir: {', '.join(str(tp) for tp in clashes)}; move them away")
        self.states.readmit(str(d.path))  # the IoGuard accepts work again
        lost = sorted(tp for tp, p in self.replicas.partitions.items()
                      if p.dir is d and tp not in d.logdir.logs)
        # The logs were opened with the config file's defaults: their topics' configs
        # before they are served (a compacted topic's key check, max.message.bytes).
        await self.configs.configure(d)
        await self.replicas.adopt(d)
        for tp in d.partitions:
            # Recovered from a disk whose fault may have dropped writes it had taken
            # (FS_IOC_SHUTDOWN, a controller reset): the replica follows before it
            # leads again (daemon.replica.control).
            self.replicas.partitions[tp].lost_records = True
        for tp in lost:  # the disk came back without them (replaced): empty again
            lg = await self.dirs.run(d, d.logdir.create_log, tp.topic, tp.partition,
                                     self.configs.log_config(tp.topic))
            self.replicas.partitions[tp].log = lg
            self.replicas.partitions[tp].lost_records = True
            d.partitions.add(tp)
            log.warning("log dir %s: partition %s was not on the re-admitted disk; "
                        "re-created empty (its records are lost)", d.path, tp)
        self.on_partitions_changed()
        self.monitor.publish_state(d)
        self.monitor.watch(d)
        await self.dirs.write_placement()
        self.monitor.publish()
        # Only now, with the recovered logs served, may the controller's LeaderAndIsr
        # come: before, a follower's fetch resumed from the end of the log of before the
        # disk died, past what the disk came back with.
        self.announce(str(d.path))
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
        self.monitor.publish()
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


def unmounted(d: ManagedDir) -> None:
    """Refuse a readmit whose dir's filesystem is no longer mounted: the path now
    lies on the filesystem below it (the root's, most often), and a readmit would fill
    that one with re-created partitions and hide them under the next mount."""
    if d.mount_point is None:
        return  # never opened: nothing to compare with
    now = mount_point(d.path)
    if now != d.mount_point and os.path.commonpath([now, d.mount_point]) == now:
        raise AdminError(409, f"log dir {d.path} was on the filesystem mounted at "
                              f"{d.mount_point}, which is no longer mounted (the path is "
                              f"now on {now}'s): mount the repaired or new disk at "
                              f"{d.mount_point}, then readmit")
