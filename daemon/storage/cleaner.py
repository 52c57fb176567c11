"""The log cleaner of this broker (Kafka's LogCleaner): compacted logs cleaned on each
log dir's own worker, one bounded step at a time.

One asyncio task per log dir drives that dir's `logstore.cleaner.LogDirCleaner`: each
step (1 MiB read, or a swap) is submitted to the dir's worker like any other call
on its logs, so appends and fetches queued there run between steps and a clean never
touches a dir from another thread (docs/architecture.md "Threads and workers"). The
key map's memory, `log.cleaner.dedupe.buffer.size`, is shared out between the dirs as
Kafka shares it between its cleaner threads.

States (docs/architecture.md "Log dir states"): only an ONLINE dir is cleaned. When a
dir leaves ONLINE the clean under way is given up on its worker (its `.cleaned` files
removed: on a SATURATED dir that is space back), and cleaning starts again once the
dir is ONLINE. An ENOSPC while a `.cleaned` file is written is the IoGuard's SATURATED
verdict, like any other full write: the cleaner adds no verdict of its own. A dir
without room for a clean's copy (`NoRoomToCleanError`) waits a backoff, with no verdict.

A clean stays below each partition's last stable offset and keeps each active
producer's last entry (`producers_of`: ReplicaManager.producers_for_cleaner).

Errors: a step's failure is logged and the dir's loop goes on after a backoff; a log
whose batches do not decode is left uncleaned until the next start (Kafka's
uncleanable partitions).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from logstore import CorruptRecordError, LogStoreError, StorageError
from logstore.cleaner import Cleaner, LogDirCleaner, NoRoomToCleanError, OffsetMap, ProducersOf

from .dirstate import DirState
from .log_manager import LogManager
from .workers import ManagedDir

log = logging.getLogger("logkeeper.cleaner")


class LogCleanerService:
    """Methods are called from the event loop; the steps run on the dirs' workers."""

    def __init__(self, storage: LogManager, *, enabled: bool = True, backoff_ms: int = 15000,
                 dedupe_buffer_bytes: int = 128 * 1024 * 1024,
                 io_buffer_bytes: int = 512 * 1024, producers_of: ProducersOf | None = None):
        self.storage = storage
        self.producers_of = producers_of  # each partition's LSO and producers (replica layer)
        self.enabled = enabled
        self.backoff_s = backoff_ms / 1000
        self.map_bytes = max(dedupe_buffer_bytes // max(len(storage.dirs), 1), 1024)
        self.io_buffer_bytes = io_buffer_bytes
        self._cleaners: dict[int, LogDirCleaner] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._waiting: dict[int, str] = {}  # dir index -> why it does not clean (logged once)

    def start(self) -> None:
        if self.enabled:
            self._tasks = [asyncio.ensure_future(self._run(d)) for d in self.storage.dirs]

    async def stop(self) -> None:
        """Cancel the loops and give up the cleans under way on their workers."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for d in self.storage.dirs:
            self._give_up(d)

    def cleaner_of(self, d: ManagedDir) -> LogDirCleaner | None:
        return self._cleaners.get(d.index)

    def _cleaner_for(self, d: ManagedDir) -> LogDirCleaner | None:
        cleaner = self._cleaners.get(d.index)
        if d.logdir is None:
            return None
        if cleaner is None or cleaner.logdir is not d.logdir:  # first time, or re-admitted
            cleaner = LogDirCleaner(d.logdir, Cleaner(OffsetMap(self.map_bytes),
                                                      io_buffer_bytes=self.io_buffer_bytes),
                                    producers_of=self.producers_of)
            self._cleaners[d.index] = cleaner
        return cleaner

    def _give_up(self, d: ManagedDir) -> None:
        """Close the clean under way on the dir's worker (never on the loop: its files
        are on that disk), even an OFFLINE dir's, after whatever runs there."""
        cleaner = self._cleaners.get(d.index)
        if cleaner is not None and cleaner.busy:
            d.executor.submit(cleaner.abort)

    def _wait(self, d: ManagedDir, why: str) -> None:
        if self._waiting.get(d.index) != why:
            self._waiting[d.index] = why
            log.info("log dir %s: cleaning paused: %s", d.path, why)

    async def _run(self, d: ManagedDir) -> None:
        while True:
            more = False
            if d.state is not DirState.ONLINE or d.logdir is None:
                self._give_up(d)
                self._wait(d, f"the dir is {d.state.value}")
            else:
                cleaner = self._cleaner_for(d)
                assert cleaner is not None
                more = await self._step(d, cleaner)
            await asyncio.sleep(0 if more else self.backoff_s)

    async def _step(self, d: ManagedDir, cleaner: LogDirCleaner) -> bool:
        done = len(cleaner.cleaned)
        try:
            more = await self.storage.run(d, cleaner.step)
        except NoRoomToCleanError as err:
            self._wait(d, str(err))
            return False
        except StorageError as err:  # the dir's verdict is the IoGuard's, already given
            self._wait(d, str(err))
            return False
        except CorruptRecordError as err:
            log.error("log dir %s: a log is left uncleaned: %s", d.path, err)
            return True
        except LogStoreError as err:
            log.warning("log dir %s: cleaning failed: %s", d.path, err)
            return False
        except Exception:  # noqa: BLE001 - a bug in one step must not stop the loop
            log.exception("log dir %s: cleaning failed", d.path)
            return False
        self._waiting.pop(d.index, None)
        if len(cleaner.cleaned) > done:
            tp, end, stats = cleaner.cleaned[-1]
            log.info("cleaned %s in %s up to offset %d: %d of %d bytes kept, %d of %d records, "
                     "in %.2f s", tp, d.path, end, stats.bytes_written, stats.bytes_read,
                     stats.records_kept, stats.records_read, stats.seconds)
        return more

    def describe(self) -> dict[str, Any]:
        """Per dir: the log being cleaned and the logs given up on (for /log-dirs)."""
        out = {}
        for d in self.storage.dirs:
            c = self._cleaners.get(d.index)
            out[str(d.path)] = {
                "cleaning": str(c.job.topic_partition) if c is not None and c.job else None,
                "uncleanable": sorted(str(tp) for tp in c.uncleanable) if c else [],
                "paused": self._waiting.get(d.index),
            }
        return out
