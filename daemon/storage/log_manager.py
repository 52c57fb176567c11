"""The log manager: this broker's log dirs opened, recovered, placed into, kept
(retention, flush and checkpoints), described, and closed.

`LogManager` owns the dirs (daemon.storage.workers runs every call on a dir's own
worker) and their one `LogDirStates` (daemon.storage.dirstate); daemon.health turns
evidence into transitions and carries them out. At start-up it agrees on the cluster
id, opens every dir concurrently (reserve, then recovery), and reads the placement
record: `logkeeper-placement.json`, kept in every usable dir, says which dir holds which
partition, so a partition whose dir is offline at start-up is known and reported
offline, never created again on another dir (KIP-112's isNewReplica rule). The newest
generation wins. New partitions go to the ONLINE, uncordoned dir with the most free
space (`place`).

Errors: opening a dir that cannot be used raises the logstore error (StorageError,
LogDirLockedError, CheckpointError) naming the dir; a dir that fails for its disk's
sake is OFFLINE and the rest are served. The periodic rounds and `describe_dirs` report
a dir's failure in its own entry (or log it) and go on with the others.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checks import dir_identity, mount_point
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
    checkpoint,
    names,
)

from ..api.errors import KAFKA_STORAGE_ERROR, NONE, error_of
from .dirstate import DirState, LogDirStates
from .workers import DirWorkers, ManagedDir, new_worker

log = logging.getLogger("logkeeper.logdirs")

CORDON_FILE = ".logkeeper-cordoned"  # an operator's `log-dirs cordon`, kept across restarts
PLACEMENT_FILE = "logkeeper-placement.json"


@dataclass(frozen=True)
class DirSpace:
    device: int
    free_bytes: int  # available to the (unprivileged) daemon
    total_bytes: int


def new_cluster_id() -> str:
    """A Kafka-style cluster id: a random UUID in unpadded base64url (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LogManager(DirWorkers):
    """Owns the log dirs of this broker. Methods are called from the event loop only,
    except the functions handed to `submit`, which run on the dir's worker."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]], config: LogConfig, *,
                 broker_id: int, failure_channel: FailureChannel | None = None,
                 reserve_bytes: int = 0):
        self.config = config
        self.broker_id = broker_id
        self.reserve_bytes = reserve_bytes
        self.failure_channel = failure_channel or FailureChannel()
        self.cluster_id = ""
        self._placement_generation = 0
        # Kafka's preferredLogDirs: where an operator asked (AlterReplicaLogDirs) for a
        # replica this broker does not hold yet to be created; used once, in memory only.
        self.preferred: dict[TopicPartition, ManagedDir] = {}
        resolved = [Path(os.path.abspath(os.fspath(p))) for p in paths]
        self.states = LogDirStates([str(p) for p in resolved])
        super().__init__([ManagedDir(i, path, new_worker(i, path), self.states)
                          for i, path in enumerate(resolved)])

    # ---- opening and closing ----

    async def start(self, cluster_id_of: Callable[[str | None], Awaitable[str]] | None = None
                    ) -> dict[str, Any] | None:
        """Agree on the cluster id, open every dir, and return the newest placement record
        (None when no dir holds one). `cluster_id_of(found)`, given, decides the id from
        the one the dirs hold (None for new dirs): ZooKeeper's, in a cluster; a dir that
        names another cluster then stops start-up."""
        found = [(d, r) for d, r in await self.run_each(self.dirs, _read_before_open)
                 if isinstance(r, _BeforeOpen)]  # a dir that fails here: the open judges
        ids = {r.cluster_id for _, r in found if r.cluster_id}
        if len(ids) > 1:
            raise LogStoreError(f"log dirs disagree on cluster.id: {sorted(ids)}")
        held = ids.pop() if ids else None
        self.cluster_id = (await cluster_id_of(held) if cluster_id_of is not None
                           else held or new_cluster_id())
        newest = max((r.placement for _, r in found if r.placement is not None),
                     key=lambda r: r.get("generation", 0), default=None)
        if newest is not None:
            self._placement_generation = int(newest.get("generation", 0))
        await self.open_all(cluster_id=self.cluster_id, missing=_missing(found, newest))
        return newest

    async def open_all(self, *, cluster_id: str | None,
                       missing: dict[ManagedDir, str] | None = None) -> None:
        """Open every dir concurrently, each on its own worker (reserve, then recovery).

        A dir that cannot be opened because of its disk (an IO error, a lock held by
        another process, a vanished mount) is OFFLINE and the rest are served; so is each
        of `missing` (not opened: dir -> why). A misconfiguration (another broker's or
        cluster's dir) stops start-up, and so does every dir being offline:
        `LogStoreError` naming each dir and why.
        """
        missing = missing or {}
        for d, why in missing.items():
            self.states.on_open_failure(str(d.path), why)
        results = await self.run_each([d for d in self.dirs if d not in missing],
                                      self.open_dir, cluster_id)
        fatal = [(d, r) for d, r in results
                 if isinstance(r, BaseException) and not _is_disk_failure(r)]
        for d, r in results:
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
                d.mount_point = mount_point(d.path)
            d.cordoned = ld.read_root_file(CORDON_FILE) is not None
        except BaseException:
            ld.release()
            raise
        d.logdir = ld
        d.clean_shutdown = ld.clean_shutdown
        d.partitions = set(ld.logs)
        d.apply_verdict()

    async def release_all(self) -> None:
        await self.run_each([d for d in self.dirs if d.logdir is not None], _release)

    async def close_all(self, *, clean: bool = True) -> list[tuple[ManagedDir, BaseException]]:
        """Flush, checkpoint and close each dir on its worker; returns the failures.
        A SATURATED dir is closed cleanly too if its disk lets us."""
        done = await self.run_each([d for d in self.dirs if d.usable], _close, clean)
        return [(d, r) for d, r in done if isinstance(r, BaseException)]

    async def stop(self) -> tuple[list[tuple[ManagedDir, BaseException]], bool]:
        """Flush, checkpoint and mark a clean shutdown in every dir that is not offline.
        Returns the failures and whether a worker is stuck (on a hung disk)."""
        failures = await self.close_all(clean=True)
        return failures, not self.shutdown_workers()

    # ---- placement ----

    async def spaces(self) -> dict[int, DirSpace | BaseException]:
        """Free space of each usable dir, probed on its own worker, by dir index."""
        done = await self.run_each([d for d in self.dirs if d.usable], _space)
        return {d.index: r for d, r in done}

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

    async def place_partitions(self, tps: list[TopicPartition]) -> list[ManagedDir]:
        """Dirs for these new partitions, in order: each one's preferred dir (an
        operator's AlterReplicaLogDirs before it arrived) while that dir is ONLINE, the
        others as `place` chooses. A preference is used once; one whose dir is not
        ONLINE is dropped with a warning (the replica goes where `place` puts it)."""
        chosen: dict[TopicPartition, ManagedDir] = {}
        for tp in tps:
            d = self.preferred.pop(tp, None)
            if d is None:
                continue
            if d.state is DirState.ONLINE and d.logdir is not None:
                chosen[tp] = d
            else:
                log.warning("%s was to be created in log dir %s, which is %s: placed as "
                            "usual instead", tp, d.path, d.state.value)
        others = iter(await self.place(len(tps) - len(chosen)) if len(chosen) < len(tps) else [])
        return [chosen[tp] if tp in chosen else next(others) for tp in tps]

    async def write_placement(self) -> None:
        """Record where every partition lives, in every dir that can take a write."""
        self._placement_generation += 1
        record = {"version": 1, "broker": self.broker_id,
                  "generation": self._placement_generation,
                  "log_dirs": {str(d.path): sorted(f"{tp.topic}-{tp.partition}"
                                                   for tp in d.partitions)
                               for d in self.dirs}}
        data = json.dumps(record, indent=1).encode() + b"\n"
        usable = [d for d in self.dirs if d.logdir is not None and d.state is DirState.ONLINE]
        for d, r in await self.run_each(usable, _write_placement, data):
            if isinstance(r, BaseException):
                log.warning("writing %s in %s failed: %s", PLACEMENT_FILE, d.path, r)

    # ---- keeping the logs ----

    async def maintenance(self, *, retention: bool, checkpoints: bool,
                          only: ManagedDir | None = None, watermarks: bool = False,
                          flushes: bool = False) -> None:
        """Retention and/or flush + checkpoints (or the high-watermark checkpoint alone,
        or the flush of the logs whose flush.ms is due) on every dir (or `only` one),
        each on its own worker. A failed round is logged here and retried at the next."""
        dirs = [d for d in self.dirs if only in (None, d) and d.usable]
        for d, deleted in await self.run_each(dirs, _maintain, retention, checkpoints,
                                              watermarks, flushes):
            if isinstance(deleted, BaseException):
                error_of(deleted, f"maintenance of {d.path}")
            elif deleted:
                log.info("retention deleted %d segments in %s", deleted, d.path)

    async def describe_dirs(self) -> list[dict[str, Any]]:
        """Per dir: path, state, partitions with size and lag, total and usable bytes."""
        entries = {d.index: {"dir": d, "error": KAFKA_STORAGE_ERROR, "partitions": {},
                             "total_bytes": -1, "usable_bytes": -1} for d in self.dirs}
        for d, r in await self.run_each([d for d in self.dirs if d.usable], _describe_dir):
            if isinstance(r, BaseException):
                entries[d.index]["error"] = error_of(r, f"describe {d.path}")[0]
            else:
                entries[d.index].update(r, error=NONE)
        return list(entries.values())

    # ---- lookups (event loop only) ----

    def by_path(self, path: str) -> ManagedDir | None:
        for d in self.dirs:
            if str(d.path) == os.path.abspath(path):
                return d
        return None


# ---- functions that run on a dir's worker ----


def _release(d: ManagedDir) -> None:
    assert d.logdir is not None
    d.logdir.release()


def _close(d: ManagedDir, clean: bool) -> None:
    assert d.logdir is not None
    d.logdir.close(clean=clean)


def _space(d: ManagedDir) -> DirSpace:
    ld = d.logdir
    assert ld is not None
    space = ld.space()
    with ld.guard.io("stat", ld.path):
        device = os.stat(ld.path).st_dev
    return DirSpace(device, space.avail_bytes, space.total_bytes)


@dataclass(frozen=True)
class _BeforeOpen:
    """What start-up reads of a dir before opening it: its cluster id (None: none, or no
    meta.properties), whether it has a meta.properties, and its placement record."""

    cluster_id: str | None
    new: bool
    placement: dict[str, Any] | None


def _read_before_open(d: ManagedDir) -> _BeforeOpen:
    """On `d`'s worker, in one pass: meta.properties and the placement record (an error
    here is the open's to judge)."""
    meta = d.path / names.META_PROPERTIES
    new = not meta.exists()
    cluster_id = None if new else checkpoint.read_meta_properties(meta).get("cluster.id")
    placement = None
    try:
        placement = json.loads((d.path / PLACEMENT_FILE).read_bytes())
    except FileNotFoundError:
        pass
    except ValueError as err:
        log.warning("%s: unreadable, ignored: %s", d.path / PLACEMENT_FILE, err)
    return _BeforeOpen(cluster_id, new, placement if isinstance(placement, dict) else None)


def _missing(found: list[tuple[ManagedDir, _BeforeOpen]], placement: dict[str, Any] | None
             ) -> dict[ManagedDir, str]:
    """The dirs that are empty (no meta.properties) where the placement record puts
    partitions: their disk is not mounted, or was replaced. Opened, such a dir would be
    taken for a new one and its partitions made again, empty (a leader's among them, it
    would then truncate its followers to nothing): it stays OFFLINE instead, with why,
    and its partitions are reported offline."""
    placed = placement.get("log_dirs", {}) if placement is not None else {}
    out = {}
    for d, r in found:
        held = placed.get(str(d.path)) if r.new else None
        if held:
            out[d] = (f"it holds no {names.META_PROPERTIES} but the placement record "
                      f"puts {len(held)} partitions there ({', '.join(held[:5])}"
                      f"{', ...' if len(held) > 5 else ''}): its disk is missing or not "
                      "mounted. Mount it and restart, or `logkeeper log-dirs readmit` "
                      "it to serve those partitions again from empty")
    return out


def _write_placement(d: ManagedDir, data: bytes) -> None:
    assert d.logdir is not None
    d.logdir.write_root_file(PLACEMENT_FILE, data)


def _describe_dir(d: ManagedDir) -> dict[str, Any]:
    ld = d.logdir
    assert ld is not None
    space = ld.space()
    # offsetLag is a future replica's lag behind the current one; we keep no future logs.
    partitions: dict[TopicPartition, tuple[int, int]] = {
        tp: (lg.size_bytes, 0) for tp, lg in ld.logs.items()}
    return {"partitions": partitions, "total_bytes": space.total_bytes,
            "usable_bytes": space.avail_bytes}


def _maintain(d: ManagedDir, retention: bool, checkpoints: bool, watermarks: bool,
              flushes: bool = False) -> int:
    ld = d.logdir
    assert ld is not None
    deleted = 0
    if flushes:
        now = int(time.time() * 1000)
        for lg in ld.logs.values():
            lg.flush_if_due(now)
    if retention:
        ld.purge_deleted()
        now = int(time.time() * 1000)
        for lg in ld.logs.values():
            deleted += lg.apply_retention(now, replicated=True)
    if checkpoints:
        ld.flush()
        ld.write_checkpoints()
    elif watermarks:
        ld.write_high_watermarks()
    return deleted


def _is_disk_failure(err: BaseException) -> bool:
    """A dir that cannot open for its disk's sake (OFFLINE), not a misconfiguration."""
    if isinstance(err, CheckpointError):
        return False  # another broker's or cluster's dir: stop, as Kafka does
    return isinstance(err, (StorageError, LogDirLockedError, OSError))


def all_offline_message(dirs: Iterable[ManagedDir]) -> str:
    return "every log dir is offline: " + "; ".join(
        f"{d.path}: {d.reason or d.state.value}" for d in dirs)
