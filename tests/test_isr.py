"""The leader's replication rules (daemon.replica.isr) on a real log: follower state,
the high watermark, ISR expansion and shrinking, and what a conditional ISR write does
when the partition state moved under it (docs/cluster.md, "Replication").

The ZooKeeper write is a recording function here (the cluster tests run the real one,
against a real ZooKeeper); the clock is a settable number so that lag is exact.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from daemon.cluster import znodes
from daemon.replica.isr import FollowerState, IsrManager
from daemon.replica.partition import Partition
from daemon.storage.dirstate import LogDirStates
from daemon.storage.workers import ManagedDir
from logstore import Log, LogConfig, TopicPartition
from logstore.failure import FailureChannel, IoGuard
from logstore.records import Record, build_batch

TP = TopicPartition("t", 0)
ME, F1, F2 = 1, 2, 3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Zk:
    """Stands in for the partition's state znode: a version and what was written."""

    def __init__(self) -> None:
        self.version = 0
        self.state: znodes.PartitionState | None = None
        self.writes: list[tuple[int, ...]] = []
        self.announced: list[TopicPartition] = []
        self.moved_under_us = False

    async def write(self, tp: TopicPartition, state: znodes.PartitionState, version: int) -> int | None:
        if self.moved_under_us or version != self.version:
            return None
        self.version += 1
        self.state = state
        self.writes.append(tuple(state.isr))
        return self.version

    async def read(self, tp: TopicPartition) -> tuple[znodes.PartitionState, int] | None:
        return (self.state, self.version) if self.state is not None else None


@pytest.fixture
def setup(tmp_path: Path):  # noqa: ANN201
    pool = ThreadPoolExecutor(1)
    root = tmp_path / "d"
    root.mkdir()
    lg = Log.open(root / "t-0", LogConfig(), guard=IoGuard(root, FailureChannel()))
    d = ManagedDir(0, root, pool, LogDirStates([str(root)]))
    p = Partition(TP, lg, d)
    clock, zk = Clock(), Zk()
    alive = {ME, F1, F2}
    isr = IsrManager(ME, write_state=zk.write, read_state=zk.read, announce=zk.announced.append,
                     alive=lambda b: b in alive, lag_time_ms=10_000, clock=clock)
    yield p, lg, isr, clock, zk, alive
    lg.close_quietly()
    pool.shutdown()


def in_loop(fn):  # noqa: ANN001, ANN201 - runs an async test body on a fresh event loop
    def run(setup):  # noqa: ANN001, ANN202
        return asyncio.run(fn(setup))
    run.__name__ = fn.__name__
    return run


def append(lg: Log, n: int) -> None:
    lg.append(build_batch([Record(None, b"x%d" % i, [], 0) for i in range(n)]), leader_epoch=1)


def lead(isr: IsrManager, p: Partition, isr_members: tuple[int, ...], min_isr: int = 1) -> None:
    isr.become_leader(p, leader_epoch=1, controller_epoch=1, partition_epoch=0,
                      isr=isr_members, replicas=(ME, F1, F2), min_isr=min_isr,
                      log_end_offset=p.log.log_end_offset)


def test_follower_caught_up_rules() -> None:
    f = FollowerState()
    f.on_fetch(5, 10, now=1.0)  # behind, first fetch: not caught up
    assert f.last_caught_up_time == 0.0 and not f.caught_up(10, 100.0, 30)
    f.on_fetch(10, 12, now=2.0)  # reached what the leader had at its previous fetch
    assert f.last_caught_up_time == 1.0
    f.on_fetch(12, 12, now=3.0)  # at the leader's end
    assert f.last_caught_up_time == 3.0 and f.caught_up(12, 3.0, 0)
    assert f.caught_up(20, 3.0 + 30, 30) and not f.caught_up(20, 3.0 + 30.1, 30)


def test_high_watermark_is_the_least_isr_log_end_and_only_moves_forward(setup) -> None:  # noqa: ANN001
    p, lg, isr, clock, zk, _ = setup
    append(lg, 10)
    lead(isr, p, (ME, F1, F2))
    assert lg.high_watermark == 0  # a new leader knows no follower's log end yet
    isr.on_follower_fetch(p, F1, 10, 10)
    assert lg.high_watermark == 0  # F2 unknown
    isr.on_follower_fetch(p, F2, 6, 10)
    assert lg.high_watermark == 6
    append(lg, 5)
    isr.on_append(p)
    assert lg.high_watermark == 6
    isr.on_follower_fetch(p, F2, 15, 15)
    assert lg.high_watermark == 10  # F1 is at 10
    isr.on_follower_fetch(p, F1, 15, 15)
    assert lg.high_watermark == 15
    # A stale fetch offset never moves it back.
    isr.on_follower_fetch(p, F1, 12, 15)
    assert lg.high_watermark == 15


def test_high_watermark_holds_while_the_isr_is_below_min_insync(setup) -> None:  # noqa: ANN001
    p, lg, isr, clock, zk, _ = setup
    append(lg, 4)
    lead(isr, p, (ME,), min_isr=2)
    assert lg.high_watermark == 0 and isr.state(TP).under_min_isr
    append(lg, 4)
    isr.on_append(p)
    assert lg.high_watermark == 0  # durability first: nothing committed below min ISR


@in_loop
async def test_a_caught_up_follower_is_added_and_the_change_announced(setup) -> None:  # noqa: ANN001
    p, lg, isr, clock, zk, alive = setup
    append(lg, 8)
    lead(isr, p, (ME, F1))
    isr.on_follower_fetch(p, F1, 8, 8)
    assert lg.high_watermark == 8
    isr.on_follower_fetch(p, F2, 3, 8)  # behind the high watermark: not yet
    await asyncio.sleep(0)
    assert zk.writes == []
    alive.discard(F2)
    isr.on_follower_fetch(p, F2, 8, 8)  # caught up, but its broker is not alive
    await asyncio.sleep(0)
    assert zk.writes == []
    alive.add(F2)
    isr.on_follower_fetch(p, F2, 8, 8)
    assert isr.state(TP).maximal_isr == (ME, F1, F2)  # pending: the HW waits for it too
    for _ in range(3):
        await asyncio.sleep(0)
    assert zk.writes == [(ME, F1, F2)]
    st = isr.state(TP)
    assert st.isr == (ME, F1, F2) and st.pending_isr is None and st.partition_epoch == 1
    assert zk.announced == [TP] and isr.isr_expands == 1
    assert zk.state.leader == ME and zk.state.leader_epoch == 1


@in_loop
async def test_a_lagging_follower_is_removed_after_the_lag_time(setup) -> None:  # noqa: ANN001
    p, lg, isr, clock, zk, _ = setup
    append(lg, 5)
    lead(isr, p, (ME, F1, F2))
    isr.on_follower_fetch(p, F1, 5, 5)
    isr.on_follower_fetch(p, F2, 5, 5)
    append(lg, 5)  # F2 stops fetching from here; F1 keeps up
    clock.now += 9
    isr.on_follower_fetch(p, F1, 10, 10)
    isr.shrink_out_of_sync()
    await asyncio.sleep(0)
    assert zk.writes == []  # F2 is within the lag
    clock.now += 2
    isr.on_follower_fetch(p, F1, 10, 10)
    isr.shrink_out_of_sync()
    for _ in range(3):
        await asyncio.sleep(0)
    assert zk.writes == [(ME, F1)] and isr.state(TP).isr == (ME, F1)
    assert isr.isr_shrinks == 1
    # The high watermark no longer waits for F2.
    assert lg.high_watermark == 10


@in_loop
async def test_a_leader_on_an_offline_dir_does_not_shrink_its_isr(setup) -> None:  # noqa: ANN001
    """Its followers stop catching up because its own disk died, not theirs: an ISR of
    the leader alone would leave the partition with no leader to elect once the
    controller hears of the dir (Kafka's offline partitions are not shrunk)."""
    p, lg, isr, clock, zk, _ = setup
    append(lg, 5)
    lead(isr, p, (ME, F1, F2))
    isr.on_follower_fetch(p, F1, 5, 5)
    isr.on_follower_fetch(p, F2, 5, 5)
    append(lg, 5)  # appended; the dir dies before the followers fetch it
    p.dir.states.on_probe_timeout(str(p.dir.path), 1)
    assert p.offline
    clock.now += 11
    isr.shrink_out_of_sync()
    for _ in range(3):
        await asyncio.sleep(0)
    assert zk.writes == [] and isr.state(TP).isr == (ME, F1, F2)


@in_loop
async def test_a_write_refused_by_a_moved_state_stays_pending(setup) -> None:  # noqa: ANN001
    p, lg, isr, clock, zk, _ = setup
    append(lg, 5)
    lead(isr, p, (ME, F1))
    zk.state = znodes.PartitionState(ME, 2, 1, (ME,))  # the controller wrote meanwhile
    zk.moved_under_us = True
    isr.on_follower_fetch(p, F2, 5, 5)  # would expand; HW 0 <= 5
    for _ in range(3):
        await asyncio.sleep(0)
    st = isr.state(TP)
    assert st.isr == (ME, F1) and st.pending_isr == (ME, F1, F2)
    assert zk.announced == []
    # The controller's next LeaderAndIsr replaces the state and clears the pending change.
    isr.become_leader(p, leader_epoch=2, controller_epoch=1, partition_epoch=5, isr=(ME,),
                      replicas=(ME, F1, F2), min_isr=1, log_end_offset=lg.log_end_offset)
    assert isr.state(TP).pending_isr is None and isr.state(TP).isr == (ME,)


@in_loop
async def test_resigning_wakes_the_waiters(setup) -> None:  # noqa: ANN001
    p, lg, isr, clock, zk, _ = setup
    lead(isr, p, (ME, F1))
    fut = asyncio.get_running_loop().create_future()
    p.wait(fut)
    isr.resign(TP)
    assert fut.done() and isr.state(TP) is None
