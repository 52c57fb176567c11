"""The follower's fetcher against a real leader: a `logkeeper serve` process.

The leader is a standalone daemon (its high watermark is its log end, as a one-broker
cluster's); the follower side is this test process: a `Fetcher` over `Peer`, appending
into real `Log`s through `LogFollowerStorage` on a worker thread, as the replica manager
will on each dir's worker. The leader serves Fetch v12 (a last fetched epoch in, a
diverging epoch out); the wiring into the daemon comes with the cluster's data plane.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import confluent_kafka as ck
import pytest

from daemon.replica.fetcher import (
    Fetcher,
    FetchState,
    LogFollowerStorage,
    LogStartFollower,
    whole_batches,
)
from daemon.wire.peer import Peer
from logstore import FailureChannel, IoGuard, Log, LogConfig, TopicPartition, Verdict, names
from logstore.records import Record, build_batch
from tests import faults
from tests.daemon_helpers import Daemon
from tests.sick_helpers import create_topic, placement

TOPIC = "repl"


def produce(d: Daemon, n: int, partitions: int, start: int = 0, size: int = 0) -> None:
    p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": "1", "linger.ms": 2,
                     "batch.num.messages": 37})
    for i in range(start, start + n):
        value = b"v%06d" % i * (1 + i % 7) + b"x" * size
        p.produce(TOPIC, value=value, key=b"k%d" % (i % 11),
                  partition=i % partitions)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def leader_bytes(d: Daemon, partition: int) -> bytes:
    pdir = placement(d, TOPIC)[partition] / names.partition_dir_name(TOPIC, partition)
    return b"".join(f.read_bytes() for f in sorted(pdir.glob("*.log")))


def follower_bytes(lg: Log) -> bytes:
    return b"".join(seg.log_path.read_bytes() for seg in lg.segments)


class Follower:
    """Logs in `root` (a partition per dir), a fetcher from the daemon into them."""

    def __init__(self, d: Daemon, roots: dict[int, Path], channel: FailureChannel):
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="follower-dir")
        for root in roots.values():
            root.mkdir(parents=True, exist_ok=True)
        self.logs = {
            TopicPartition(TOPIC, p): Log.open(root / f"{TOPIC}-{p}", LogConfig(
                segment_bytes=64 << 10), guard=IoGuard(root, channel))
            for p, root in roots.items()}

        async def run(tp: TopicPartition, fn, *args):  # noqa: ANN001, ANN202 - a test adapter
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

        self.storage = LogFollowerStorage(self.logs, run)
        self.fetcher = Fetcher(2, 1, Peer("127.0.0.1", d.port), self.storage,
                               max_wait_ms=100, backoff=0.2)

    def matches(self, d: Daemon, tps: list[TopicPartition] | None = None) -> bool:
        """Whether the copies of `tps` (all by default) are byte-identical to the leader's."""
        return all(follower_bytes(self.logs[tp]) == leader_bytes(d, tp.partition)
                   for tp in (self.logs if tps is None else tps))

    async def start(self) -> Fetcher:
        """Follow every partition from offset 0 and start fetching; the fetcher."""
        f = self.fetcher
        await f.add_partitions({tp: 0 for tp in self.logs})
        f.start()
        return f

    def close(self) -> None:
        for lg in self.logs.values():
            lg.close_quietly()
        self.pool.shutdown()


@contextlib.contextmanager
def _one_partition(tmp_path: Path, records: int):  # noqa: ANN202 - a test fixture
    """A leader daemon whose TOPIC has one partition holding `records` records, and a
    follower of it: (daemon, follower, the partition, the follower's log)."""
    with Daemon(tmp_path / "leader") as d:
        create_topic(d, TOPIC, 1)
        produce(d, records, 1)
        follower = Follower(d, {0: tmp_path / "f0"}, FailureChannel())
        tp = TopicPartition(TOPIC, 0)
        yield d, follower, tp, follower.logs[tp]


async def _until(pred, timeout: float) -> None:  # noqa: ANN001
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _run(follower: Follower, main) -> None:  # noqa: ANN001 - a coroutine function
    """Run `main` (which starts and stops the fetcher), then close the follower's logs."""
    try:
        asyncio.run(main())
    finally:
        follower.close()


def test_a_follower_replicates_byte_identical_logs(tmp_path: Path) -> None:
    with Daemon(tmp_path / "leader") as d:
        create_topic(d, TOPIC, 3)
        produce(d, 3000, 3)
        follower = Follower(d, {p: tmp_path / f"f{p}" for p in range(3)}, FailureChannel())

        async def main() -> None:
            f = await follower.start()
            try:
                await _until(lambda: follower.matches(d), 60)
                produce(d, 1000, 3, start=3000)  # keeps up with new data too
                await _until(lambda: follower.matches(d), 60)
            finally:
                await f.stop()

        try:
            asyncio.run(main())
            for tp, lg in follower.logs.items():
                assert lg.log_end_offset > 1000
                assert lg.high_watermark == lg.log_end_offset
                assert hashlib.sha256(follower_bytes(lg)).digest() == \
                    hashlib.sha256(leader_bytes(d, tp.partition)).digest()
            assert not follower.fetcher.failed
        finally:
            follower.close()


@pytest.mark.fault
def test_one_failing_partition_never_stops_the_fetcher(tmp_path: Path) -> None:
    """KIP-461 with a real fault: one follower partition lives on a tmpfs that fills up
    (ENOSPC on its appends); it is set aside once, the other two keep replicating."""
    with Daemon(tmp_path / "leader") as d, faults.tmpfs("256k") as small:
        create_topic(d, TOPIC, 3)
        produce(d, 300, 3)
        channel = FailureChannel()
        follower = Follower(d, {0: small, 1: tmp_path / "f1", 2: tmp_path / "f2"}, channel)
        sick = TopicPartition(TOPIC, 0)

        async def main() -> None:
            f = await follower.start()
            try:
                produce(d, 3000, 3, start=300, size=1000)  # ~1 MiB a partition: over the tmpfs
                await _until(lambda: sick in f.failed, 60)
                rounds = f.rounds
                healthy = [tp for tp in follower.logs if tp != sick]
                await _until(lambda: follower.matches(d, healthy), 60)
                produce(d, 600, 3, start=3300)
                await _until(lambda: follower.matches(d, healthy), 60)
                assert f.rounds > rounds and sick in f.failed and sick not in f.partitions
                # Never retried in a loop: its log stays where the disk stopped it.
                end = follower.logs[sick].log_end_offset
                await asyncio.sleep(1.0)
                assert follower.logs[sick].log_end_offset == end
                # A new leader epoch (re-adding it) clears the mark.
                await f.add_partitions({sick: 1})
                assert sick not in f.failed and sick in f.partitions
            finally:
                await f.stop()

        try:
            asyncio.run(main())
            failure = channel.get(timeout=1)
            assert failure is not None and failure.verdict.value == "saturated"
        finally:
            follower.close()


def test_whole_batches_keeps_only_complete_ones() -> None:
    a = build_batch([Record(b"k", b"v" * 50, [], 1)])
    b = build_batch([Record(b"k", b"w" * 80, [], 2)])
    assert whole_batches(a + b) == a + b
    assert whole_batches(a + b[:30]) == a
    assert whole_batches(b"") == b""


def test_a_diverged_follower_truncates_and_then_matches_the_leader(tmp_path: Path) -> None:
    """The follower holds a tail the leader does not have (records an old leader wrote and
    never committed): the leader answers Fetch v12 with the diverging epoch, the follower
    cuts its log back to where the leader's epoch ends, then the logs are byte-identical."""
    with _one_partition(tmp_path, 500) as (d, follower, tp, lg):

        async def main() -> None:
            f = await follower.start()
            await _until(lambda: follower_bytes(lg) == leader_bytes(d, 0), 60)
            await f.stop()
            committed = lg.log_end_offset
            assert lg.high_watermark == committed == 500
            # Past the leader's end, in the leader's epoch (0): an uncommitted tail.
            for i in range(5):
                lg.append(build_batch([Record(b"stale", b"x%d" % i, [], 1)]), leader_epoch=0)
            assert lg.log_end_offset == committed + 5
            f2 = Fetcher(2, 1, Peer("127.0.0.1", d.port), follower.storage, max_wait_ms=100,
                         backoff=0.2)
            await f2.add_partitions({tp: 0})
            f2.start()
            try:
                await _until(lambda: lg.log_end_offset == committed, 30)
                produce(d, 200, 1, start=500)
                await _until(lambda: follower_bytes(lg) == leader_bytes(d, 0), 60)
            finally:
                await f2.stop()
            assert not f2.failed

        try:
            asyncio.run(main())
            assert b"stale" not in follower_bytes(lg) and lg.log_end_offset == 700
        finally:
            follower.close()


def follower_of(lg: Log, pool: ThreadPoolExecutor, *, broker: int, leader: int) -> Fetcher:
    """A Fetcher of `broker` following `leader` into `lg` (partition 0 of TOPIC), its
    log calls run on `pool`; for calling its truncation directly (no leader needed)."""

    async def run(_tp: TopicPartition, fn, *args):  # noqa: ANN001, ANN202
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    return Fetcher(broker, leader, Peer("127.0.0.1", 9),
                   LogFollowerStorage({TopicPartition(TOPIC, 0): lg}, run))


def test_a_divergence_cuts_to_where_the_shared_epoch_ends_on_the_lower_side(
        tmp_path: Path) -> None:
    """Seen in a chaos run with leader rebalances: leader 2 (epoch 9) wrote up to offset
    15; broker 1 became leader at epoch 10 from its log end 10 and this follower took
    its epoch-10 records from there; broker 1 died and broker 2 leads again (epoch 11).
    Asked from epoch 10, broker 2 answers (epoch 9, ends at 15). The shared epoch 9
    ends at 10 here: the cut is to 10, where the follower's records stop being the
    leader's. Cut to 15, the follower kept epoch-10 records, asked from epoch 10 again
    and got the same answer, forever (it never rejoined the ISR)."""
    tp = TopicPartition(TOPIC, 0)
    lg = Log.open(tmp_path / names.partition_dir_name(TOPIC, 0))
    pool = ThreadPoolExecutor(1)
    try:
        for epoch in (9, 10):
            for i in range(10):
                lg.append(build_batch([Record(None, b"e%d-%d" % (epoch, i), [], 1)]),
                          leader_epoch=epoch)

        fetcher = follower_of(lg, pool, broker=3, leader=2)
        state = FetchState(leader_epoch=11, fetch_offset=20, last_fetched_epoch=10)
        asyncio.run(fetcher._truncate_on_divergence(tp, state, 9, 15))
        assert (lg.log_end_offset, state.fetch_offset, state.last_fetched_epoch) == (10, 10, 9)
        # Asked from (epoch 9, offset 10) now, the leader finds no divergence: its epoch 9
        # goes on to 15. A leader answer within the epoch we end with cuts to its end.
        state = FetchState(leader_epoch=11, fetch_offset=10, last_fetched_epoch=9)
        asyncio.run(fetcher._truncate_on_divergence(tp, state, 9, 7))
        assert (lg.log_end_offset, state.fetch_offset, state.last_fetched_epoch) == (7, 7, 9)
    finally:
        lg.close()
        pool.shutdown()


def test_a_divergence_at_our_own_log_end_drops_the_epoch_we_led_without_records(
        tmp_path: Path) -> None:
    """Seen in a chaos run with pauses: this broker became leader at epoch 12 at its log
    end 10 (the epoch cache says (12, 10)), was paused past its session, and broker 3
    led instead, from epoch 11's end. Asked from epoch 12, the leader answers (epoch 11,
    ends at 10): the cut is to 10, where the log already ends, so no record goes; the
    epoch 12 that began there must, or every fetch asks from epoch 12 again and is told
    the same, hundreds of times a second, and the follower never catches up."""
    tp = TopicPartition(TOPIC, 0)
    lg = Log.open(tmp_path / names.partition_dir_name(TOPIC, 0))
    pool = ThreadPoolExecutor(1)
    try:
        for i in range(10):
            lg.append(build_batch([Record(None, b"e11-%d" % i, [], 1)]), leader_epoch=11)
        lg.start_leader_epoch(12)
        assert lg.epochs.latest_epoch == 12

        fetcher = follower_of(lg, pool, broker=2, leader=3)
        state = FetchState(leader_epoch=13, fetch_offset=10, last_fetched_epoch=12)
        asyncio.run(fetcher._truncate_on_divergence(tp, state, 11, 10))
        assert (lg.log_end_offset, state.fetch_offset, state.last_fetched_epoch) == (10, 10, 11)
        assert [(e.epoch, e.start_offset) for e in lg.epochs.entries] == [(11, 0)]
    finally:
        lg.close()
        pool.shutdown()
    reopened = Log.open(tmp_path / names.partition_dir_name(TOPIC, 0))
    try:
        assert reopened.epochs.latest_epoch == 11  # the checkpoint says so too
    finally:
        reopened.close()


def test_offset_for_leader_epoch_and_epoch_fencing(tmp_path: Path) -> None:
    from kafka.protocol.consumer import FetchRequest, OffsetForLeaderEpochRequest

    from tests.daemon_helpers import RawClient

    with Daemon(tmp_path / "leader") as d:
        create_topic(d, TOPIC, 1)
        produce(d, 100, 1)
        c = RawClient(d.port)
        try:
            T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
            for version in (2, 3, 4):
                req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[T(
                    topic=TOPIC, partitions=[
                        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=0,
                                                   leader_epoch=0),
                        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                   leader_epoch=7),
                        T.OffsetForLeaderPartition(partition=9, current_leader_epoch=-1,
                                                   leader_epoch=0)])])
                got = [(p.error_code, p.leader_epoch, p.end_offset)
                       for p in c.request(req, version).topics[0].partitions]
                assert got == [(0, 0, 100), (0, -1, -1), (3, -1, -1)], version
            # Fetch v12 fencing: a client behind our epoch 74, ahead of it 75.
            F = FetchRequest.FetchTopic
            for epoch, code in ((0, 0), (1, 75)):
                resp = c.request(FetchRequest(
                    replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                    isolation_level=0, session_id=0, session_epoch=-1, topics=[F(
                        topic=TOPIC, partitions=[F.FetchPartition(
                            partition=0, current_leader_epoch=epoch, fetch_offset=0,
                            last_fetched_epoch=-1, log_start_offset=-1,
                            partition_max_bytes=1 << 20)])],
                    forgotten_topics_data=[], rack_id=""), 12)
                assert resp.responses[0].partitions[0].error_code == code
        finally:
            c.close()


@pytest.mark.fault
def test_a_partition_whose_truncation_fails_is_set_aside_and_the_others_keep_replicating(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """KIP-461's second case with a real fault: the follower's copy of partition 0 holds
    an uncommitted tail, so the leader answers with a diverging epoch, and the files of
    that copy are immutable (`chattr +i` on ext4: ftruncate fails with EPERM). The
    truncation fails, partition 0 is set aside once (the IO error goes to its dir's
    failure channel), and partitions 1 and 2 on the same fetcher keep replicating new
    data. The mark is logged once and not retried in a loop; a higher leader epoch
    clears it."""
    import subprocess

    with Daemon(tmp_path / "leader") as d, faults.loop_ext4(32) as disk:
        create_topic(d, TOPIC, 3)
        produce(d, 300, 3)
        channel = FailureChannel()
        follower = Follower(d, {0: disk / "f0", 1: tmp_path / "f1", 2: tmp_path / "f2"},
                            channel)
        sick = TopicPartition(TOPIC, 0)
        lg = follower.logs[sick]
        pdir = disk / "f0" / f"{TOPIC}-0"

        def chattr(flag: str) -> None:
            subprocess.run(["chattr", flag, *map(str, pdir.iterdir())], check=True)

        async def main() -> None:
            f = await follower.start()
            await _until(lambda: follower.matches(d), 60)
            await f.stop()
            committed = lg.log_end_offset
            for i in range(5):
                lg.append(build_batch([Record(b"stale", b"x%d" % i, [], 1)]), leader_epoch=0)
            chattr("+i")
            f2 = Fetcher(2, 1, Peer("127.0.0.1", d.port), follower.storage, max_wait_ms=100,
                         backoff=0.2)
            await f2.add_partitions({tp: 0 for tp in follower.logs})
            f2.start()
            try:
                await _until(lambda: sick in f2.failed, 30)
                healthy = [tp for tp in follower.logs if tp != sick]
                produce(d, 600, 3, start=300)
                await _until(lambda: follower.matches(d, healthy), 60)
                assert sick in f2.failed and sick not in f2.partitions
                assert lg.log_end_offset == committed + 5  # never retried in a loop
                assert [r.message for r in caplog.records].count(
                    next(r.message for r in caplog.records if "failed partition" in r.message)) == 1
                # A higher leader epoch clears the mark (its dir, OFFLINE now, waits for a
                # readmit before anything is written there again).
                await f2.add_partitions({sick: 1})
                assert sick not in f2.failed and sick in f2.partitions
            finally:
                await f2.stop()

        try:
            asyncio.run(main())
            failure = channel.get(timeout=1)
            assert failure is not None and failure.verdict.value == "offline"
        finally:
            with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
                subprocess.run(["chattr", "-R", "-i", str(disk)], check=True,
                               capture_output=True)
            follower.close()


def test_corrupt_data_from_the_leader_is_retried_not_set_aside(tmp_path: Path) -> None:
    """KIP-461's rule for corrupt fetched data: retried, not failed. One byte of a
    record the follower has not fetched yet is flipped in the leader's segment file (the
    leader serves bytes as stored): the follower's CRC check refuses the batch, the
    partition stays on the fetcher (not in its failed set) and keeps its log where it
    was, the other partition keeps replicating, and once the leader's byte is put back
    the partition catches up byte-identical."""
    with Daemon(tmp_path / "leader") as d:
        create_topic(d, TOPIC, 2)
        produce(d, 200, 2)
        follower = Follower(d, {p: tmp_path / f"f{p}" for p in range(2)}, FailureChannel())
        bad = TopicPartition(TOPIC, 0)
        lg = follower.logs[bad]

        async def main() -> None:
            f = await follower.start()
            try:
                await _until(lambda: follower.matches(d), 60)
            finally:
                await f.stop()
            end = lg.log_end_offset
            seg = sorted((placement(d, TOPIC)[0] / f"{TOPIC}-0").glob("*.log"))[-1]
            produce(d, 1, 2, start=10_000)  # partition 0 only (i % 2 == 0)
            at = seg.stat().st_size - 3  # a byte of that record's value
            with open(seg, "r+b") as fh:
                fh.seek(at)
                good = fh.read(1)
                fh.seek(at)
                fh.write(bytes([good[0] ^ 0xFF]))
            produce(d, 200, 2, start=200)
            f = Fetcher(2, 1, Peer("127.0.0.1", d.port), follower.storage, max_wait_ms=100,
                        backoff=0.2)
            await f.add_partitions({tp: 0 for tp in follower.logs})
            f.start()
            try:
                await _until(lambda: follower_bytes(follower.logs[TopicPartition(TOPIC, 1)])
                             == leader_bytes(d, 1), 60)
                assert bad not in f.failed and bad in f.partitions
                assert lg.log_end_offset == end  # the corrupt batch was not taken
                with open(seg, "r+b") as fh:
                    fh.seek(at)
                    fh.write(good)
                await _until(lambda: follower_bytes(lg) == leader_bytes(d, 0), 60)
            finally:
                await f.stop()
            assert not f.failed

        try:
            asyncio.run(main())
        finally:
            follower.close()


def test_a_partition_re_added_while_an_answer_is_being_written_resumes_at_its_real_end(
        tmp_path: Path) -> None:
    """A LeaderAndIsr (a new leader epoch, or a new leader) re-adds a partition to a
    fetcher while the records of the previous answer are still waiting to be written
    on the partition's dir worker (a slow disk: here the worker is held). Fetching
    resumes where the log ends once that write is done, not where it ended before it:
    the follower keeps up with new records, byte-identical, and nothing is set aside.
    (A fetch state taken before the write asked the leader again and again for a batch
    the log already held, refused as below the log end, and the follower left the ISR
    for good, in a full run's test_a_second_dir_then_the_last_dir_failing_on_one_broker.)"""
    with _one_partition(tmp_path, 100) as (d, follower, tp, lg):
        gate = threading.Event()
        appending = asyncio.Event()
        append = follower.storage.append

        async def noted_append(tp_: TopicPartition, records: bytes | memoryview,
                               fetch_offset: int) -> int:
            appending.set()
            return await append(tp_, records, fetch_offset)

        follower.storage.append = noted_append  # type: ignore[method-assign]

        async def main() -> None:
            f = await follower.start()
            try:
                await _until(lambda: follower.matches(d), 60)
                follower.pool.submit(gate.wait)  # the dir's worker is busy from now on
                appending.clear()
                end = lg.log_end_offset
                produce(d, 20, 1, start=100)
                await asyncio.wait_for(appending.wait(), 30)  # an answer waits to be written
                readd = asyncio.ensure_future(f.add_partitions({tp: 0}))
                await asyncio.sleep(0.3)
                assert lg.log_end_offset == end  # still waiting
                gate.set()
                await asyncio.wait_for(readd, 30)
                assert f.partitions[tp].fetch_offset == lg.log_end_offset > end
                produce(d, 20, 1, start=120)
                await _until(lambda: follower.matches(d), 30)
                assert lg.log_end_offset == end + 40
                assert not f.failed
            finally:
                gate.set()
                await f.stop()

        try:
            asyncio.run(main())
        finally:
            follower.close()


@pytest.mark.parametrize("where", ["behind", "ahead"])
def test_a_fetch_state_off_its_log_end_fetches_from_the_log_end(tmp_path: Path,
                                                                 where: str) -> None:
    """A fetch state behind its own log (how the stall above came about): the leader
    answers from that offset, and the append refuses records the log already holds.
    Asking again from the same offset would be refused forever (Kafka sets the partition
    aside). A fetch state ahead of its log: how a dir whose disk died came back without
    its last writes (its fetch position read from the log object of before); appending
    the answer would leave a hole of records the replica never has while its fetch
    offset says it is caught up and the leader takes it back into the ISR (found by
    bench_chaos with dead disks: a replica in the ISR missing 6,752 records). Either
    way the fetcher checks the log end first, as Kafka's does, and fetches from there:
    byte-identical, nothing set aside."""
    with _one_partition(tmp_path, 100) as (d, follower, tp, lg):

        async def main() -> None:
            f = await follower.start()
            try:
                await _until(lambda: follower.matches(d), 60)
                end = lg.log_end_offset
                await f.stop()  # no answer in flight moves the state meanwhile
                produce(d, 300, 1, start=100)  # batches of at most 37 records
                # Behind: the first batch again. Ahead: several batches past the log end.
                f.partitions[tp].fetch_offset = 0 if where == "behind" else end + 150
                f.start()
                await _until(lambda: follower.matches(d), 30)
                assert lg.log_end_offset == end + 300
                assert tp in f.partitions and not f.failed
            finally:
                await f.stop()

        _run(follower, main)


def test_a_follower_whose_log_ends_below_the_leaders_log_start_starts_over_there(
        tmp_path: Path) -> None:
    """Records deleted on the leader (DeleteRecords here; retention alike) while a
    replica was away, or a replica re-created empty (a replaced disk): its log ends
    below the leader's log start, and every fetch was answered OFFSET_OUT_OF_RANGE, for
    ever. As Kafka's follower does, it empties its log and starts at the leader's log
    start (at the batch holding it when that batch begins lower), then replicates."""
    with _one_partition(tmp_path, 300) as (d, follower, tp, lg):
        a = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
        for fut in a.delete_records([ck.TopicPartition(TOPIC, 0, 200)]).values():
            assert fut.result(30).low_watermark == 200

        async def main() -> None:
            f = await follower.start()  # from offset 0, below the leader's log start
            try:
                produce(d, 50, 1, start=300)
                await _until(lambda: lg.log_end_offset == 350, 30)
                assert lg.log_start_offset == 200
                assert leader_bytes(d, 0).endswith(follower_bytes(lg))
                assert tp in f.partitions and not f.failed
            finally:
                await f.stop()

        _run(follower, main)


def test_a_replica_on_a_saturated_dir_follows_its_leaders_log_start_without_fetching(
        tmp_path: Path) -> None:
    """A replica whose dir is SATURATED fetches nothing, so DeleteRecords at its leader
    never reached it and its full dir kept the records below the leader's log start for
    good. `LogStartFollower` asks the leader its log start offset (ListOffsets, as a
    replica at a leader epoch) and deletes the segments below it, appending nothing (the
    records the leader took since do not come). Asked at an epoch the leader is not at,
    the leader does not answer and nothing moves. A log ending below the leader's log
    start is emptied to start there."""
    with Daemon(tmp_path / "leader") as d:
        create_topic(d, TOPIC, 1)
        produce(d, 300, 1, size=1000)  # ~300 KB: a few of the follower's 64 KB segments
        follower = Follower(d, {0: tmp_path / "f0"}, FailureChannel())
        tp = TopicPartition(TOPIC, 0)
        lg = follower.logs[tp]
        a = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
        follower.fetcher.partition_max_bytes = 40_000  # a batch per fetch: segments roll

        async def main() -> None:
            f = await follower.start()
            try:
                await _until(lambda: follower.matches(d), 30)
            finally:
                await f.stop()
            lg.guard.verdict = Verdict.SATURATED  # as the daemon marks a full dir
            for fut in a.delete_records([ck.TopicPartition(TOPIC, 0, 200)]).values():
                assert fut.result(30).low_watermark == 200
            produce(d, 50, 1, start=300)
            segments = len(lg.segments)
            starts = LogStartFollower(2, follower.storage, lambda _: Peer("127.0.0.1", d.port))
            try:
                await starts.follow({tp: (1, 3)})  # the standalone leader is at epoch 0
                assert (lg.log_start_offset, len(lg.segments)) == (0, segments)
                await starts.follow({tp: (1, 0)})
                assert (lg.log_start_offset, lg.log_end_offset) == (200, 300)
                assert lg.segments[0].base_offset <= 200 < lg.segments[1].base_offset
                assert len(lg.segments) < segments
                assert follower_bytes(lg) in leader_bytes(d, 0)
                for fut in a.delete_records([ck.TopicPartition(TOPIC, 0, 320)]).values():
                    assert fut.result(30).low_watermark == 320
                await starts.follow({tp: (1, 0)})
                assert (lg.log_start_offset, lg.log_end_offset, follower_bytes(lg)) == (
                    320, 320, b"")
            finally:
                await starts.stop()

        _run(follower, main)


def test_a_partition_added_during_a_parked_fetch_is_fetched_at_once(tmp_path: Path) -> None:
    """A fetcher whose partitions are all caught up waits in a long poll at their log
    ends (max_wait_ms, here 20 s). A partition added meanwhile (a LeaderAndIsr moving it
    to this leader, the failover case) does not wait for that poll to end: the fetcher
    gives up the parked request and asks again with the new partition, which catches up
    within seconds; the connection that carried the abandoned request is not reused, so
    its late answer is read by nobody, and nothing is set aside."""
    with Daemon(tmp_path / "leader") as d:
        create_topic(d, TOPIC, 2)
        produce(d, 200, 2)
        follower = Follower(d, {p: tmp_path / f"f{p}" for p in range(2)}, FailureChannel())
        follower.fetcher.max_wait_ms = 20_000
        tp0, tp1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)

        async def main() -> None:
            f = follower.fetcher
            await f.add_partitions({tp0: 0})
            f.start()
            try:
                await _until(lambda: follower.matches(d, [tp0]), 60)
                rounds = f.rounds
                await asyncio.sleep(0.5)
                assert f.rounds == rounds, "the fetch should be parked at the log end"
                loop = asyncio.get_running_loop()
                added = loop.time()
                await f.add_partitions({tp1: 0})
                await _until(lambda: follower.matches(d, [tp1]), 10)
                assert loop.time() - added < 10
                produce(d, 20, 2, start=200)  # both keep up, on the new connection
                await _until(lambda: follower.matches(d), 30)
                assert not f.failed
            finally:
                await f.stop()

        _run(follower, main)


def test_a_follower_ahead_of_its_leader_on_a_new_topic_starts_within_moments(
        tmp_path: Path) -> None:
    """A follower applies the LeaderAndIsr of a new topic before its leader does, so its
    first fetch finds no such partition there (3). The leader answers that at once, not
    after max_wait_ms (20 s here), and the follower asks again within tens of
    milliseconds, not after its backoff (20 s here, Kafka's is 1 s): the topic created
    and written on the leader a moment later is replicated within seconds."""
    with Daemon(tmp_path / "leader") as d:
        follower = Follower(d, {0: tmp_path / "f0"}, FailureChannel())
        f = follower.fetcher
        f.max_wait_ms, f.backoff = 20_000, 20.0
        tp = TopicPartition(TOPIC, 0)

        async def main() -> None:
            await f.add_partitions({tp: 0})
            f.start()
            try:
                await _until(lambda: f.rounds >= 1, 10)  # answered 3: no such partition yet
                assert f.partitions[tp].errors >= 1
                await asyncio.to_thread(create_topic, d, TOPIC, 1)
                await asyncio.to_thread(produce, d, 100, 1)
                await _until(lambda: follower.matches(d), 10)
                assert not f.failed
            finally:
                await f.stop()

        _run(follower, main)
