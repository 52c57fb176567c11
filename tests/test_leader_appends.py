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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from daemon.api.errors import NONE, NOT_LEADER_OR_FOLLOWER
from daemon.cluster.metadata_cache import MetadataCache
from daemon.replica.leadership import ClusterLeadership, Standalone
from daemon.replica.manager import ReplicaManager
from daemon.replica.partition import Partition
from daemon.storage.log_manager import LogManager
from daemon.storage.workers import ManagedDir
from daemon.wire import views
from logstore import Log, LogConfig, TopicPartition
from logstore.records import Record, build_batch, iter_batches


def _leader_and_isr(leader: int, epoch: int) -> views.LeaderAndIsrPartition:
    return views.LeaderAndIsrPartition("t", 0, controller_epoch=1, leader=leader,
                                       leader_epoch=epoch, isr=(1, 2), partition_epoch=epoch,
                                       replicas=(1, 2))


@asynccontextmanager
async def one_partition(root: Path, isr: Any = None) -> AsyncIterator[
        tuple[LogManager, ManagedDir, Log, ClusterLeadership, ReplicaManager, Partition]]:
    """Broker 1 with one dir holding partition t-0: its LogManager (and dir worker),
    dir, log, cluster leadership, replica manager (with `isr`, given) and partition."""
    storage = LogManager([root / "d0"], LogConfig(), broker_id=1)
    await storage.start()
    try:
        d = storage.dirs[0]
        assert d.logdir is not None
        lg = await storage.run(d, d.logdir.create_log, "t", 0)
        leadership = ClusterLeadership(1, MetadataCache())
        replicas = ReplicaManager(storage, leadership, isr)
        p = Partition(TopicPartition("t", 0), lg, d, 0)
        replicas.add(p)
        yield storage, d, lg, leadership, replicas, p
    finally:
        await storage.stop()


async def _lead_at_12_with_a_first_record(storage: Any, d: Any, lg: Log, leadership: Any,
                                          replicas: Any, p: Partition) -> None:
    """Broker 1 leads at epoch 12 (started on the worker, applied on the loop) and has
    appended one record."""
    await storage.run(d, lg.start_leader_epoch, 12)
    leadership.apply(_leader_and_isr(1, 12))
    assert (await replicas.append([(p, build_batch([Record(b"k", b"first")]))]))[0].error == NONE


def test_a_batch_queued_as_leader_keeps_its_epoch_when_leadership_moves_before_it_lands(
        tmp_path: Path) -> None:
    async def main() -> None:
        async with one_partition(tmp_path) as (storage, d, lg, leadership, replicas, p):
            await _lead_at_12_with_a_first_record(storage, d, lg, leadership, replicas, p)

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

    asyncio.run(main())


async def _append_behind_next_epoch(storage: Any, d: Any, lg: Log, leadership: Any, replicas: Any,
                                    p: Partition, batch: bytes, epoch: int) -> list[Any]:
    """As a LeaderAndIsr keeping broker 1 leader at `epoch` does it: the epoch started on
    the (held) dir worker, then applied on the loop; an append of `batch` is stamped
    and queued in between. Its results."""
    gate = threading.Event()
    busy = asyncio.ensure_future(storage.run(d, gate.wait, 10))  # the worker is busy
    started = asyncio.ensure_future(storage.run(d, lg.start_leader_epoch, epoch))
    await asyncio.sleep(0)  # the start is queued on the worker (as the handler awaits it)
    queued = replicas.append([(p, batch)])
    gate.set()
    await busy
    await started
    leadership.apply(_leader_and_isr(1, epoch))
    return await queued


def test_an_append_stamped_before_the_same_leaders_next_epoch_is_refused_not_written(
        tmp_path: Path) -> None:
    """The same broker stays leader at the next epoch (a reassignment or an ISR change
    by the controller bumps it): the LeaderAndIsr starts epoch 13 on the dir worker and
    only then applies it on the loop, so a Produce in between is stamped 12 and queued
    behind the start. Written, its batch would set the epoch cache back to 12 at that
    offset and erase 13 and 12's real start (found by bench_chaos: a leader whose cache
    had lost where its epoch began let a diverged follower fetch forever). It is refused
    with 6, nothing written; asked again, it lands under 13."""
    async def main() -> None:
        async with one_partition(tmp_path) as (storage, d, lg, leadership, replicas, p):
            await _lead_at_12_with_a_first_record(storage, d, lg, leadership, replicas, p)

            [result] = await _append_behind_next_epoch(
                storage, d, lg, leadership, replicas, p, build_batch([Record(b"k", b"second")]), 13)
            assert result.error == NOT_LEADER_OR_FOLLOWER
            assert [(e.epoch, e.start_offset) for e in lg.epochs.entries] == [(12, 0), (13, 1)]
            assert lg.log_end_offset == 1

            [again] = await replicas.append([(p, build_batch([Record(b"k", b"second")]))])
            assert again.error == NONE and again.base_offset == 1
            epochs = [b.partition_leader_epoch
                      for b in iter_batches(await storage.run(d, lg.read, 0, 1 << 20))]
            assert epochs == [12, 13]
            assert [(e.epoch, e.start_offset) for e in lg.epochs.entries] == [(12, 0), (13, 1)]

            # An idempotent producer's retry of a batch already written, caught in the
            # same gap, is answered as written (its offset), not refused: a "not
            # written" would make the producer send it again as new (found by
            # bench_chaos seed 96871284: a record twice, the second under a bumped
            # producer epoch).
            sent = build_batch([Record(b"k", b"third")], producer_id=7, producer_epoch=0,
                               base_sequence=0)
            [first] = await replicas.append([(p, sent)])
            assert first.error == NONE and first.base_offset == 2
            [dup] = await _append_behind_next_epoch(storage, d, lg, leadership, replicas, p, sent, 14)
            assert (dup.error, dup.base_offset) == (NONE, 2)
            assert lg.log_end_offset == 3

    asyncio.run(main())


def test_a_fetch_read_across_an_isr_shrink_does_not_bring_its_follower_back(
        tmp_path: Path) -> None:
    """A follower's fetch is checked at leader epoch 5 and its read queued on the dir
    worker; the controller's LeaderAndIsr (epoch 6, follower 3 out of the ISR: its
    broker died) is applied before the read ends. The answer is from before the shrink:
    it must not count as follower 3 catching up, or the leader would propose it back
    into the ISR (its broker still looks alive until UpdateMetadata comes) and acks=all
    would wait for a dead broker until replica.lag.time.max.ms. The next fetch, at the
    new epoch, is refused (FENCED_LEADER_EPOCH, 74) and counts for nothing either."""
    from daemon.api.errors import FENCED_LEADER_EPOCH
    from daemon.replica.isr import IsrManager
    from daemon.replica.manager import ReadSpec

    proposed: list[tuple[int, ...]] = []

    async def write(tp: TopicPartition, state: object, version: int) -> int | None:
        proposed.append(tuple(state.isr))  # type: ignore[attr-defined]
        return version + 1

    async def read(tp: TopicPartition) -> None:
        return None

    async def main() -> None:
        isr = IsrManager(1, write_state=write, read_state=read, announce=lambda tp: None,
                         alive=lambda b: True)
        async with one_partition(tmp_path, isr) as (storage, d, lg, leadership, replicas, p):

            def lead(epoch: int, members: tuple[int, ...]) -> None:
                leadership.apply(views.LeaderAndIsrPartition(
                    "t", 0, controller_epoch=1, leader=1, leader_epoch=epoch, isr=members,
                    partition_epoch=epoch, replicas=(1, 2, 3)))
                isr.become_leader(p, leader_epoch=epoch, controller_epoch=1,
                                  partition_epoch=epoch, isr=members, replicas=(1, 2, 3),
                                  min_isr=1, log_end_offset=lg.log_end_offset)

            await storage.run(d, lg.start_leader_epoch, 5)
            lead(5, (1, 2, 3))
            for i in range(3):
                await replicas.append([(p, build_batch([Record(b"k", b"v%d" % i)]))])
            gate = threading.Event()
            busy = asyncio.ensure_future(storage.run(d, gate.wait, 10))
            fetch = asyncio.ensure_future(replicas.read(
                [ReadSpec(p, 3, 1 << 20, replica_id=3, leader_epoch=5)], 1 << 20))
            await asyncio.sleep(0.05)  # the fetch passed its check and waits on the worker
            lead(6, (1, 2))  # the controller: broker 3 died
            gate.set()
            await busy
            [answer] = await fetch
            assert answer.error == NONE
            await asyncio.sleep(0.05)
            assert proposed == [], "broker 3 proposed back into the ISR by a stale fetch"
            assert isr.state(p.tp).isr == (1, 2)
            [again] = await replicas.read(
                [ReadSpec(p, 3, 1 << 20, replica_id=3, leader_epoch=5)], 1 << 20)
            assert again.error == FENCED_LEADER_EPOCH
            assert proposed == []

    asyncio.run(main())


def test_standalone_leads_at_the_latest_epoch_its_log_holds_and_never_lower(
        tmp_path: Path) -> None:
    """Standalone, a new log is led at epoch 0 and one a Kafka leader wrote at epoch 5
    at 5: appends are taken and stamped with it (led at 0, they were refused as stale).
    A log that comes back holding less (a re-admitted dir that lost the partition,
    re-created empty) is still led at 5, and its first append records it."""
    async def main() -> None:
        storage = LogManager([tmp_path / "d0", tmp_path / "d1"], LogConfig(), broker_id=1)
        await storage.start()
        try:
            d0, d1 = storage.dirs
            assert d0.logdir is not None and d1.logdir is not None
            leadership = Standalone(1)
            replicas = ReplicaManager(storage, leadership)
            new = Partition(TopicPartition("t", 0),
                            await storage.run(d0, d0.logdir.create_log, "t", 0), d0, 0)
            kafka = await storage.run(d0, d0.logdir.create_log, "t", 1)
            await storage.run(d0, kafka.append, build_batch([Record(b"k", b"kafka")]), 5)
            taken = Partition(TopicPartition("t", 1), kafka, d0, 1)
            for p in (new, taken):
                replicas.add(p)
            assert [leadership.state(p).leader_epoch for p in (new, taken)] == [0, 5]

            def epochs(p: Partition) -> tuple[list[int], list[tuple[int, int]]]:
                assert p.log is not None
                return ([b.partition_leader_epoch for b in iter_batches(p.log.read(0, 1 << 20))],
                        [(e.epoch, e.start_offset) for e in p.log.epochs.entries])

            results = await replicas.append([(new, build_batch([Record(b"k", b"a")])),
                                             (taken, build_batch([Record(b"k", b"b")]))])
            assert [r.error for r in results] == [NONE, NONE]
            assert await storage.run(d0, epochs, new) == ([0], [(0, 0)])
            assert await storage.run(d0, epochs, taken) == ([5, 5], [(5, 0)])

            taken.log, taken.dir = await storage.run(d1, d1.logdir.create_log, "t", 1), d1
            assert leadership.fencing_epoch(taken) == 5
            [again] = await replicas.append([(taken, build_batch([Record(b"k", b"c")]))])
            assert (again.error, again.base_offset) == (NONE, 0)
            assert await storage.run(d1, epochs, taken) == ([5], [(5, 0)])
        finally:
            await storage.stop()

    asyncio.run(main())
