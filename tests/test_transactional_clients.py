"""Transactions on one broker, through every Kafka client we test with: a transactional
producer's committed records reach read_committed consumers exactly once, its aborted
ones never do (read_uncommitted consumers see both), an open transaction holds
read_committed consumers at its first offset (the last stable offset), a new producer
instance fences the old one and aborts its transaction, a transaction past its timeout
is aborted, and transactions outlive a restart and a kill -9 of the broker. The
consume-transform-produce loop of an exactly-once application (offsets committed in
the transaction) delivers each input once, across an abort and an application restart.

Reading transactional data a Kafka broker wrote is test_kafka_transactions.py; the
cluster side (markers across brokers, a coordinator killed) test_cluster_transactions.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import kafka.errors as ke
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.admin import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.structs import OffsetAndMetadata

from logstore import txnindex
from tests.daemon_helpers import Daemon, RawClient, running

SETTINGS = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("txn"), SETTINGS, dirs=2) as d:
        yield d


def create(d: Daemon, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": d.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def producer(d: Daemon, tid: str, **conf: object) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": d.bootstrap, "transactional.id": tid, **conf})
    p.init_transactions(30)
    return p


def consume(d: Daemon, topic: str, *, committed: bool = True, expect: int | None = None,
            wait: float = 6.0) -> list[bytes]:
    """Every record of `topic` a fresh confluent-kafka consumer gets (read_committed
    unless told): until `expect` records came, or `wait` s passed without one."""
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": f"check-{time.time_ns()}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": "read_committed" if committed else "read_uncommitted"})
    c.subscribe([topic])
    got: list[bytes] = []
    quiet_until = time.monotonic() + wait
    try:
        while time.monotonic() < quiet_until and (expect is None or len(got) < expect):
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m.value())
            quiet_until = time.monotonic() + (1.0 if expect is None else wait)
    finally:
        c.close()
    return got


def partition_dirs(d: Daemon, topic: str) -> list[Path]:
    return [p for root in d.log_dirs for p in root.glob(f"{topic}-*")]


def test_confluent_kafka_commits_and_aborts_and_every_client_reads_committed_only(
        daemon: Daemon) -> None:
    create(daemon, "orders")
    p = producer(daemon, "orders-app")
    p.begin_transaction()
    for i in range(20):
        p.produce("orders", b"commit-1-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("orders", b"abort-%d" % i, partition=i % 2)
    p.flush(30)  # in the log, then aborted
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce("orders", b"commit-2-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    committed = sorted([b"commit-1-%d" % i for i in range(20)]
                       + [b"commit-2-%d" % i for i in range(6)])

    assert sorted(consume(daemon, "orders", expect=26)) == committed
    everything = sorted(consume(daemon, "orders", committed=False, expect=36))
    assert everything == sorted(committed + [b"abort-%d" % i for i in range(10)])

    # kafka-python and aiokafka read_committed consumers skip the aborted records too.
    kc = KafkaConsumer("orders", bootstrap_servers=daemon.bootstrap,
                       isolation_level="read_committed", auto_offset_reset="earliest",
                       consumer_timeout_ms=4000)
    try:
        assert sorted(m.value for m in kc) == committed
    finally:
        kc.close()

    async def aio() -> list[bytes]:
        c = AIOKafkaConsumer("orders", bootstrap_servers=daemon.bootstrap,
                             isolation_level="read_committed", auto_offset_reset="earliest")
        await c.start()
        try:
            got: list[bytes] = []
            while len(got) < 26:
                batch = await c.getmany(timeout_ms=5000)
                if not batch:
                    break
                got += [m.value for ms in batch.values() for m in ms]
            return got
        finally:
            await c.stop()

    assert sorted(asyncio.run(aio())) == committed
    # Each partition lists its aborted transaction in Kafka's .txnindex.
    aborted = [txnindex.parse(f.read_bytes()) for pd in partition_dirs(daemon, "orders")
               for f in pd.glob("*.txnindex")]
    assert len(aborted) == 2 and all(len(entries) == 1 for entries in aborted)


def test_kafka_python_and_aiokafka_producers_commit_and_abort(daemon: Daemon) -> None:
    create(daemon, "kp-orders", 1)
    kp = KafkaProducer(bootstrap_servers=daemon.bootstrap, transactional_id="kp-app")
    try:
        kp.init_transactions()
        kp.begin_transaction()
        kp.send("kp-orders", b"kp-commit")
        kp.commit_transaction()
        kp.begin_transaction()
        kp.send("kp-orders", b"kp-abort")
        kp.flush()
        kp.abort_transaction()
    finally:
        kp.close(5)

    async def aio() -> None:
        ap = AIOKafkaProducer(bootstrap_servers=daemon.bootstrap, transactional_id="aio-app")
        await ap.start()
        try:
            async with ap.transaction():
                await ap.send_and_wait("kp-orders", b"aio-commit")
            await ap.begin_transaction()
            await ap.send_and_wait("kp-orders", b"aio-abort")
            await ap.abort_transaction()
        finally:
            await ap.stop()

    asyncio.run(aio())
    assert sorted(consume(daemon, "kp-orders", expect=2)) == [b"aio-commit", b"kp-commit"]
    assert sorted(consume(daemon, "kp-orders", committed=False, expect=4)) == [
        b"aio-abort", b"aio-commit", b"kp-abort", b"kp-commit"]


def latest(d: Daemon, topic: str, committed: bool, timestamp: int = -1) -> int:
    """ListOffsets (v7: MAX_TIMESTAMP too) of partition 0: the latest offset, or the
    offset for `timestamp`."""
    c = RawClient(d.port)
    try:
        T = ListOffsetsRequest[7].ListOffsetsTopic
        P = T.ListOffsetsPartition
        r = c.request(ListOffsetsRequest[7](replica_id=-1, isolation_level=int(committed), topics=[
            T(name=topic, partitions=[P(partition_index=0, current_leader_epoch=-1,
                                        timestamp=timestamp)])]), 7)
        return r.topics[0].partitions[0].offset
    finally:
        c.close()


def open_transaction_among(d: Daemon, topic: str, app: str,
                           before: list[tuple[bytes, int | None]], inside: bytes,
                           after: list[tuple[bytes, int | None]],
                           inside_timestamp: int | None = None) -> ck.Producer:
    """Plain records `before` (value, timestamp or None), then `inside` in a transaction
    of `app` left open, then plain records `after`: the open transaction's producer."""
    plain = ck.Producer({"bootstrap.servers": d.bootstrap})

    def send(records: list[tuple[bytes, int | None]]) -> None:
        for value, ts in records:
            plain.produce(topic, value, **({} if ts is None else {"timestamp": ts}))
        plain.flush(10)

    send(before)
    p = producer(d, app)
    p.begin_transaction()
    p.produce(topic, inside, **({} if inside_timestamp is None else {"timestamp": inside_timestamp}))
    p.flush(10)
    send(after)
    return p


def test_an_open_transaction_holds_read_committed_consumers_at_its_first_offset(
        daemon: Daemon) -> None:
    create(daemon, "held", 1)
    p = open_transaction_among(daemon, "held", "held-app",
                               [(b"before-%d" % i, None) for i in range(3)], b"in-txn",
                               [(b"after-%d" % i, None) for i in range(3)])
    # The last stable offset is the open transaction's first offset (3); the high
    # watermark is past everything (7).
    assert (latest(daemon, "held", True), latest(daemon, "held", False)) == (3, 7)
    assert consume(daemon, "held", wait=2) == [b"before-%d" % i for i in range(3)]
    p.commit_transaction(30)
    assert latest(daemon, "held", True) == 8  # past the commit marker
    assert consume(daemon, "held", expect=7) == (
        [b"before-%d" % i for i in range(3)] + [b"in-txn"] + [b"after-%d" % i for i in range(3)])


def test_a_read_committed_time_lookup_finds_only_offsets_below_the_last_stable_one(
        daemon: Daemon) -> None:
    """ListOffsets by timestamp (and MAX_TIMESTAMP) answers a read_committed consumer
    only offsets below the last stable offset, as Kafka's lastFetchableOffset: none
    inside a transaction still open; once it commits, its offsets."""
    create(daemon, "timed", 1)
    now = int(time.time() * 1000)
    p = open_transaction_among(daemon, "timed", "timed-app", [(b"before", now - 10_000)],
                               b"in-txn", [(b"after", now)], inside_timestamp=now - 5_000)
    assert [latest(daemon, "timed", True, ts) for ts in (now - 10_000, now - 5_000, -3)] == [
        0, -1, -1]
    assert [latest(daemon, "timed", False, ts) for ts in (now - 10_000, now - 5_000, -3)] == [
        0, 1, 2]
    p.commit_transaction(30)
    assert latest(daemon, "timed", True, now - 5_000) == 1


def test_the_last_stable_offset_never_lags_the_log_start(daemon: Daemon) -> None:
    """Records deleted past the start of a transaction still open (DeleteRecords here;
    retention does the same): as in Kafka (maybeIncrementFirstUnstableOffset) the last
    stable offset is then the log start, never an offset below it, so read_committed
    consumers start there and read on once the transaction is decided."""
    create(daemon, "cut", 1)
    p = open_transaction_among(daemon, "cut", "cut-app", [(b"before", None)], b"in-txn",
                               [(b"after-%d" % i, None) for i in range(4)])
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    [done] = admin.delete_records([ck.TopicPartition("cut", 0, 4)]).values()
    assert done.result(30).low_watermark == 4
    assert (latest(daemon, "cut", True), latest(daemon, "cut", False)) == (4, 6)
    assert consume(daemon, "cut", wait=2) == []
    p.commit_transaction(30)
    assert latest(daemon, "cut", True) == 7
    assert consume(daemon, "cut", expect=2) == [b"after-2", b"after-3"]


def test_offsets_retention_keeps_a_group_whose_offsets_are_in_an_open_transaction(
        tmp_path: Path) -> None:
    """A group with no members and no committed offsets yet, whose first offsets sit in
    a transaction still open, is not removed by the offsets retention check (Kafka's
    hasOffsets counts them): once the transaction commits, the group has them."""
    with running(tmp_path, {**SETTINGS, "offsets.retention.check.interval.ms": 100},
                 dirs=1) as d:
        create(d, "in", 1)
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "eos-assigned",
                         "enable.auto.commit": False})
        p = producer(d, "eos-app")
        p.begin_transaction()
        p.send_offsets_to_transaction([ck.TopicPartition("in", 0, 7)],
                                      c.consumer_group_metadata(), 30)
        time.sleep(1)  # several retention checks while the transaction is open
        p.commit_transaction(30)
        [got] = c.committed([ck.TopicPartition("in", 0)], 10)
        c.close()
        assert got.offset == 7


def test_a_new_producer_instance_fences_the_old_one_and_aborts_its_transaction(
        daemon: Daemon) -> None:
    create(daemon, "fenced", 1)
    old = producer(daemon, "fence-app")
    old.begin_transaction()
    old.produce("fenced", b"zombie")
    old.flush(10)
    new = producer(daemon, "fence-app")  # aborts old's transaction, bumps the epoch
    new.begin_transaction()
    new.produce("fenced", b"new")
    new.commit_transaction(30)
    with pytest.raises(ck.KafkaException) as info:
        old.produce("fenced", b"zombie-2")
        old.commit_transaction(10)
    assert info.value.args[0].fatal()
    assert consume(daemon, "fenced", expect=1) == [b"new"]
    assert sorted(consume(daemon, "fenced", committed=False, expect=2)) == [b"new", b"zombie"]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
        daemon: Daemon) -> None:
    create(daemon, "slow", 1)
    p = producer(daemon, "slow-app", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce("slow", b"too-late")
    p.flush(10)
    deadline = time.monotonic() + 15
    while latest(daemon, "slow", True) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # aborted by the coordinator: the marker moves the LSO on
    assert latest(daemon, "slow", True) == 2
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(10)
    assert consume(daemon, "slow", wait=2) == []
    c = RawClient(daemon.port)
    try:
        r = c.request(DescribeTransactionsRequest(transactional_ids=["slow-app", "nobody"]), 0)
        states = {s.transactional_id: (s.error_code, s.transaction_state)
                  for s in r.transaction_states}
        assert states["slow-app"] == (0, "CompleteAbort")
        assert states["nobody"][0] == ke.TransactionalIdNotFoundError.errno
        r = c.request(ListTransactionsRequest[1](state_filters=["CompleteAbort"],
                                                 producer_id_filters=[], duration_filter=-1), 1)
        assert "slow-app" in {s.transactional_id for s in r.transaction_states}
    finally:
        c.close()


def test_consume_transform_produce_delivers_each_input_once(daemon: Daemon) -> None:
    """An exactly-once application: read `src` (read_committed, no auto-commit), write
    each record upper-cased to `dst` and the consumed offsets in the same transaction.
    One transaction is aborted (its input is processed again), then the application
    stops without committing and a new instance takes over: `dst` holds each input once."""
    create(daemon, "src", 2)
    create(daemon, "dst", 2)
    src = ck.Producer({"bootstrap.servers": daemon.bootstrap})
    for i in range(200):
        src.produce("src", b"rec-%03d" % i, partition=i % 2)
    src.flush(10)

    def instance(limit: int, abort_first: bool = False, finish: bool = True) -> int:
        c = ck.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": "eos-app",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
        c.subscribe(["src"])
        p = producer(daemon, "eos-app")
        done = 0
        idle = time.monotonic() + 8
        try:
            while done < limit and time.monotonic() < idle:
                msgs = c.consume(20, 0.5)
                if not msgs:
                    continue
                idle = time.monotonic() + 8
                p.begin_transaction()
                for m in msgs:
                    assert m.error() is None
                    p.produce("dst", m.value().upper(), partition=m.partition())
                p.send_offsets_to_transaction(c.position(c.assignment()),
                                              c.consumer_group_metadata(), 30)
                if abort_first:
                    abort_first = False
                    p.abort_transaction(30)
                    # Rewind to the committed offsets: the aborted input comes again.
                    for tp in c.committed(c.assignment(), 10):
                        c.seek(ck.TopicPartition(tp.topic, tp.partition,
                                                 tp.offset if tp.offset >= 0 else 0))
                    continue
                if not finish and done + len(msgs) >= limit:
                    p.flush(10)  # written, never committed: the next instance aborts it
                    return done
                p.commit_transaction(30)
                done += len(msgs)
        finally:
            c.close()
        return done

    first = instance(120, abort_first=True, finish=False)
    assert 0 < first < 200
    instance(200 - first)
    out = consume(daemon, "dst", expect=200)
    assert sorted(out) == [b"REC-%03d" % i for i in range(200)]


def committed_offset(d: Daemon, group: str, tp: ck.TopicPartition) -> int:
    """The group's committed offset of `tp` once no transaction holds one pending
    (confluent-kafka asks for stable offsets: UNSTABLE_OFFSET_COMMIT until its marker)."""
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": group,
                     "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                [got] = c.committed([ck.TopicPartition(tp.topic, tp.partition)], 10)
                if got.error is None:
                    return got.offset
            except ck.KafkaException:
                pass
            assert time.monotonic() < deadline, f"{group} {tp} never stable"
            time.sleep(0.2)
    finally:
        c.close()


def test_an_offset_commit_made_during_a_transaction_outlives_the_transactions_commit(
        tmp_path: Path) -> None:
    """A group's offset is the one written last, as in Kafka: a plain OffsetCommit (an
    operator's reset, a consumer without transactions) written while a transaction holds
    an older offset of the same partition pending stays when that transaction commits,
    and after the coordinator loads the partition again (Kafka's
    completePendingTxnOffsetCommit and its loader keep a transaction's offset only when
    it was written after the committed one). The transaction's offset replaced it: the
    group went back to where the transaction had been and read its input again."""
    with running(tmp_path / "b", SETTINGS, dirs=1) as d:
        create(d, "resetting", 1)
        tp = ck.TopicPartition("resetting", 0)
        group = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "reset-app",
                             "enable.auto.commit": False})
        meta = group.consumer_group_metadata()
        p = producer(d, "reset-app")
        p.begin_transaction()
        p.produce("resetting", b"in-transaction")
        p.send_offsets_to_transaction([ck.TopicPartition("resetting", 0, 5)], meta, 30)
        group.commit(offsets=[ck.TopicPartition("resetting", 0, 42)], asynchronous=False)
        group.close()
        p.commit_transaction(30)
        assert committed_offset(d, "reset-app", tp) == 42

        # Written the other way round, the transaction's offset is the newer one.
        p.begin_transaction()
        p.produce("resetting", b"second")
        p.send_offsets_to_transaction([ck.TopicPartition("resetting", 0, 50)], meta, 30)
        p.commit_transaction(30)
        assert committed_offset(d, "reset-app", tp) == 50

        p.begin_transaction()
        p.produce("resetting", b"third")
        p.send_offsets_to_transaction([ck.TopicPartition("resetting", 0, 60)], meta, 30)
        plain = KafkaConsumer(bootstrap_servers=d.bootstrap, group_id="reset-app",
                              enable_auto_commit=False)
        plain.commit({TopicPartition("resetting", 0): OffsetAndMetadata(7, "", -1)})
        plain.close()
        p.commit_transaction(30)
        assert committed_offset(d, "reset-app", tp) == 7
        p.flush(10)

        assert d.stop() == 0
        d.start()
        assert committed_offset(d, "reset-app", tp) == 7


def test_transactions_outlive_a_restart_and_a_kill(tmp_path: Path) -> None:
    with running(tmp_path / "b", SETTINGS, dirs=1) as d:
        create(d, "kept", 1)
        p = producer(d, "kept-app")
        p.begin_transaction()
        p.produce("kept", b"across-restart")
        p.flush(10)
        assert d.stop() == 0
        d.start()
        # The coordinator reads its state back; the partition knows the open
        # transaction again: read_committed consumers are still held before it.
        assert latest(d, "kept", True) == 0
        p.commit_transaction(60)
        assert consume(d, "kept", expect=1) == [b"across-restart"]

        p.begin_transaction()
        p.produce("kept", b"killed")
        p.flush(10)
        d.kill()
        d.start()
        assert latest(d, "kept", True) == 2
        again = producer(d, "kept-app")  # the next instance aborts what the kill left
        again.begin_transaction()
        again.produce("kept", b"after-kill")
        again.commit_transaction(30)
        assert consume(d, "kept", expect=2) == [b"across-restart", b"after-kill"]
        assert latest(d, "kept", True) == latest(d, "kept", False)


def test_producer_perf_test_sends_in_transactions(daemon: Daemon) -> None:
    import subprocess
    import sys

    from tests.daemon_helpers import REPO

    create(daemon, "perf-txn", 1)
    r = subprocess.run([sys.executable, "-m", "daemon.cli", "producer-perf-test",
                        "--bootstrap-server", daemon.bootstrap, "--topic", "perf-txn",
                        "--num-records", "500", "--record-size", "50", "--throughput", "-1",
                        "--transactional-id", "perf-app", "--transaction-duration-ms", "100"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(consume(daemon, "perf-txn", expect=500)) == 500
    assert latest(daemon, "perf-txn", True) == latest(daemon, "perf-txn", False)


def _open_then_bury(d: Daemon, topic: str, records: int) -> None:
    """Open a transaction on `topic` (one record), then write `records` records of 8 KB
    after it with a plain producer."""
    p = producer(d, f"{topic}-app")
    p.begin_transaction()
    p.produce(topic, b"opened-early")
    p.flush(10)
    plain = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 5})
    for i in range(records):
        plain.produce(topic, b"x" * 8000 + b"%d" % i)
    plain.flush(30)
    assert latest(d, topic, True) == 0


def _kill_and_abort(d: Daemon, topic: str, records: int) -> None:
    """kill -9 and restart: the open transaction still holds read_committed consumers at
    its first offset, and its abort (by the next producer instance) hides its record."""
    d.kill()
    d.start()
    assert latest(d, topic, True) == 0  # still held at the open transaction
    again = producer(d, f"{topic}-app")  # aborts it
    again.begin_transaction()
    again.produce(topic, b"after")
    again.commit_transaction(30)
    got = consume(d, topic, expect=records + 1, wait=10)
    assert b"opened-early" not in got and got[-1] == b"after" and len(got) == records + 1
    assert latest(d, topic, True) == latest(d, topic, False)


def test_a_long_transaction_is_known_open_after_a_kill_past_the_logs_last_mib(
        tmp_path: Path) -> None:
    """A transaction whose first batch lies more than a MiB before the log end when the
    broker is killed: its producer snapshot (Kafka's `.snapshot`, written every few
    seconds while a transaction is open) tells the restarted broker it is open."""
    with running(tmp_path / "b", SETTINGS, dirs=1) as d:
        create(d, "long", 1)
        _open_then_bury(d, "long", 300)
        time.sleep(6)  # a snapshot round
        pdir = partition_dirs(d, "long")[0]
        assert list(pdir.glob("*.snapshot")), "no producer snapshot written"
        _kill_and_abort(d, "long", 300)


def test_a_transaction_is_known_open_after_a_kill_right_after_its_segment_rolled(
        tmp_path: Path) -> None:
    """As above with no pause before the kill -9 (no periodic snapshot needed): the
    segment rolls after the transaction's first batch, and the snapshot written at the
    roll (Kafka's) holds the open transaction; the restart replays from it."""
    with running(tmp_path / "b", SETTINGS, dirs=1) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([NewTopic("rolled", 1, 1, config={
            "segment.bytes": str(1 << 20)})])["rolled"].result(30)
        _open_then_bury(d, "rolled", 400)
        pdir = partition_dirs(d, "rolled")[0]
        assert len(list(pdir.glob("*.log"))) >= 3, "the segment rolled"
        _kill_and_abort(d, "rolled", 400)


def test_recovery_rebuilds_a_txnindex_the_crash_lost(tmp_path: Path) -> None:
    """kill -9, and the `.txnindex` entries of two aborted transactions lost with it (a
    power cut before their writeback, a kill between the marker and its entry, a Kafka
    dir copied without them): recovery rebuilds the file from the abort markers, byte
    for byte what it was, and read_committed consumers still skip the aborted records."""
    with running(tmp_path / "b", SETTINGS, dirs=1) as d:
        create(d, "lost-idx", 1)
        p = producer(d, "lost-idx-app")
        for kind in (b"kept-1", b"gone-1", b"kept-2", b"gone-2", b"kept-3"):
            p.begin_transaction()
            p.produce("lost-idx", kind)
            p.flush(10)
            if kind.startswith(b"gone"):
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
        kept = [b"kept-1", b"kept-2", b"kept-3"]
        assert consume(d, "lost-idx", expect=3) == kept
        (pdir,) = partition_dirs(d, "lost-idx")
        (index,) = pdir.glob("*.txnindex")
        before = index.read_bytes()
        assert len(txnindex.parse(before)) == 2
        d.kill()
        index.unlink()
        d.start()
        assert consume(d, "lost-idx", expect=3) == kept
        assert consume(d, "lost-idx", committed=False, expect=5) == [
            b"kept-1", b"gone-1", b"kept-2", b"gone-2", b"kept-3"]
        assert index.read_bytes() == before
        assert "recovery rebuilt" in d.stderr()


def test_a_replica_moved_to_another_dir_keeps_its_aborted_transactions(daemon: Daemon) -> None:
    """AlterReplicaLogDirs copies the partition into another log dir: the copy writes its
    own `.txnindex` as it copies the abort markers, so read_committed consumers still
    skip the aborted records once the copy is the replica."""
    from kafka import KafkaAdminClient

    from tests.cluster_helpers import wait_for
    from tests.test_replica_moves import log_dirs_view

    create(daemon, "moved", 1)
    p = producer(daemon, "moved-app")
    for kind in (b"kept", b"gone", b"kept-too"):
        p.begin_transaction()
        p.produce("moved", kind)
        p.flush(10)
        if kind == b"gone":
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    admin = KafkaAdminClient(bootstrap_servers=daemon.bootstrap)
    try:
        where = {d for d, parts in log_dirs_view(admin, 1).items() if ("moved", 0) in parts}
        (src,) = where
        dest = next(str(d) for d in daemon.log_dirs if str(d) != src)
        admin.alter_replica_log_dirs({("moved", 0, 1): dest})
        wait_for(lambda: ("moved", 0) in log_dirs_view(admin, 1).get(dest, {})
                 and not log_dirs_view(admin, 1)[dest][("moved", 0)][2]
                 and ("moved", 0) not in log_dirs_view(admin, 1).get(src, {}), 60,
                 "the move to finish")
    finally:
        admin.close()
    moved_dir = Path(dest) / "moved-0"
    assert [e for f in moved_dir.glob("*.txnindex") for e in txnindex.parse(f.read_bytes())]
    assert consume(daemon, "moved", expect=2) == [b"kept", b"kept-too"]
