"""A leader's appends keep the leader epoch they were accepted under.

A Produce is checked for leadership on the event loop and its append queued on the
partition's dir worker. A LeaderAndIsr that makes this broker a follower can be applied
before the worker reaches the append. The batch must then carry the epoch this broker
led, never the new one: that epoch is another broker's, and records written here under
it would pass every epoch check a follower makes while differing from that leader's
(found by bench_chaos with leader rebalances: a follower kept them, or fetched forever
across a batch boundary it did not share with its leader).

Real parts: a LogManager with its dir worker, a real log, the cluster leadership the
LeaderAndIsr handler applies to.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from daemon.api.errors import NONE
from daemon.cluster.metadata_cache import MetadataCache
from daemon.replica.leadership import ClusterLeadership
from daemon.replica.manager import ReplicaManager
from daemon.replica.partition import Partition
from daemon.storage.log_manager import LogManager
from daemon.wire import views
from logstore import LogConfig, TopicPartition
from logstore.records import Record, build_batch, iter_batches


def _leader_and_isr(leader: int, epoch: int) -> views.LeaderAndIsrPartition:
    return views.LeaderAndIsrPartition("t", 0, controller_epoch=1, leader=leader,
                                       leader_epoch=epoch, isr=(1, 2), partition_epoch=epoch,
                                       replicas=(1, 2))


def test_a_batch_queued_as_leader_keeps_its_epoch_when_leadership_moves_before_it_lands(
        tmp_path: Path) -> None:
    async def main() -> None:
        storage = LogManager([tmp_path / "d0"], LogConfig(), broker_id=1)
        await storage.start()
        try:
            d = storage.dirs[0]
            lg = await storage.run(d, d.logdir.create_log, "t", 0)
            leadership = ClusterLeadership(1, MetadataCache())
            replicas = ReplicaManager(storage, leadership)
            p = Partition(TopicPartition("t", 0), lg, d, 0)
            replicas.add(p)
            await storage.run(d, lg.start_leader_epoch, 12)
            leadership.apply(_leader_and_isr(1, 12))
            assert (await replicas.append([(p, build_batch([Record(b"k", b"first")]))]))[0] \
                .error == NONE

            gate = threading.Event()
            busy = asyncio.ensure_future(storage.run(d, gate.wait, 10))  # the worker is busy
            queued = replicas.append([(p, build_batch([Record(b"k", b"second")]))])
            # The LeaderAndIsr moving leadership to broker 2 at epoch 13 is applied
            # before the worker gets to the queued append.
            leadership.apply(_leader_and_isr(2, 13))
            gate.set()
            await busy
            [result] = await queued
            assert result.error == NONE
            epochs = [b.partition_leader_epoch
                      for b in iter_batches(await storage.run(d, lg.read, 0, 1 << 20))]
            assert epochs == [12, 12]
            assert [(e.epoch, e.start_offset) for e in lg.epochs.entries] == [(12, 0)]
        finally:
            await storage.stop()

    asyncio.run(main())
