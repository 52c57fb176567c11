"""What the group coordinator and the transaction coordinator share: each coordinates
the keys (group ids, transactional ids) of the partitions of its internal topic that
this broker leads, read whole when it starts leading one (Kafka 3.x's
GroupMetadataManager and TransactionStateManager loads).

`CoordinatedPartitions` keeps which partitions are loaded, at which leader epoch, and
which are being loaded; the coordinator gives `_load(p, epoch)` and `_unload(p)`.
Event loop only.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any

from ..api import errors
from .group import partition_for


class CoordinatedPartitions(abc.ABC):
    log: Any  # an InternalTopic (daemon.coordinator.internal_topic) or a test's stand-in
    loaded: dict[int, int]  # partition -> the leader epoch it was read at
    _loading: dict[int, tuple[int, asyncio.Task[None]]]

    @abc.abstractmethod
    async def _load(self, p: int, epoch: int) -> None:
        """Read partition `p` whole (led at `epoch`) and take on its keys."""

    @abc.abstractmethod
    def _unload(self, p: int) -> None:
        """Drop the keys of partition `p`, no longer led here."""

    def leadership_changed(self) -> None:
        """LeaderAndIsr, StopReplica or a dir transition happened: drop what is no
        longer led here, start loading what newly is."""
        count = self.log.partition_count()
        for p in list(self.loaded):
            if count is None or self.log.led_epoch(p) != self.loaded[p]:
                self._unload(p)
        if count is not None:
            for p in range(count):
                epoch = self.log.led_epoch(p)
                if epoch is not None and self.loaded.get(p) != epoch:
                    self._start_load(p, epoch)

    def partition_of(self, key: str) -> int | None:
        count = self.log.partition_count()
        return None if count is None else partition_for(key, count)

    def _owner_of(self, key: str) -> tuple[int, int, int]:
        """(error, partition, leader epoch): NONE when this broker coordinates `key` and
        has loaded its partition (else the load is started: LOAD_IN_PROGRESS)."""
        count = self.log.partition_count()
        if count is None:
            return errors.COORDINATOR_NOT_AVAILABLE, -1, -1
        p = partition_for(key, count)
        epoch = self.log.led_epoch(p)
        if epoch is None:
            if p in self.loaded:
                self._unload(p)
            return errors.NOT_COORDINATOR, p, -1
        if self.loaded.get(p) == epoch:
            return errors.NONE, p, epoch
        if p in self.loaded:
            self._unload(p)
        self._start_load(p, epoch)
        return errors.COORDINATOR_LOAD_IN_PROGRESS, p, -1

    def _start_load(self, p: int, epoch: int) -> None:
        running = self._loading.get(p)
        if running is not None and running[0] == epoch and not running[1].done():
            return
        if running is not None:
            running[1].cancel()
        self._loading[p] = (epoch, asyncio.ensure_future(self._load(p, epoch)))
