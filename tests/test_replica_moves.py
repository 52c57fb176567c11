"""Replica moves between a broker's log dirs (AlterReplicaLogDirs, KIP-113): an operator
moves a partition off a filling disk onto another of the same broker while producers
keep writing. Real daemons, a real slow disk (FUSE with write latency, so the copy is
seen under way), kafka-python's `alter_replica_log_dirs` and `describe_log_dirs`, real
idempotent producers; the copy algorithm itself against real logs whose source is
truncated and diverges mid-copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import kafka.errors as ke
import pytest
from kafka.admin import KafkaAdminClient

from daemon.replica import moves
from daemon.replica.producer import PartitionProducers
from logstore import LogConfig, LogDir, LogMovedError, TopicPartition, names
from logstore.records import build_batch, iter_batches
from tests import faults
from tests.fusefs import faulty_fuse

from .cluster_helpers import Cluster, wait_for
from .daemon_helpers import Daemon, RawClient
from .sick_helpers import KAFKA_STORAGE_ERROR, create_topic, fill, metric, produce_raw
from .test_cluster_disks import holding_dir
from .test_replication import (
    Load,
    assert_every_ack_read_once,
    create,
    replicas_identical,
    start_producers,
)

BROKER = 1  # the test daemons' broker.id
REPO = Path(__file__).resolve().parents[1]


Replicas = dict[tuple[str, int], tuple[int, int, bool]]


def log_dirs_view(admin: KafkaAdminClient, broker: int) -> dict[str, Replicas]:
    """DescribeLogDirs of `broker`: dir -> (topic, partition) -> (size, lag, is_future)."""
    out: dict[str, Replicas] = {}
    for b in admin.describe_log_dirs():
        if b["broker"] != broker:
            continue
        for d in b["log_dirs"]:
            view = out.setdefault(d["log_dir"], {})
            for t in d["topics"]:
                for p in t["partitions"]:
                    view[(t["name"], p["partition_index"])] = (
                        p["partition_size"], p["offset_lag"], p["is_future_key"])
    return out


def read_back(bootstrap: str, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record of the partition from its log start to its high watermark."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "verify",
                     "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(ck.TopicPartition(topic, partition), 30)
        c.assign([ck.TopicPartition(topic, partition, low)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 120
        while len(got) < high - low:
            assert time.monotonic() < deadline, f"read {len(got)} of {high - low}"
            for m in c.consume(10000, 0.5):
                if m.error() is None:
                    got[m.offset()] = m.value()
        return sorted(got.items())
    finally:
        c.close()


def futures_under(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.endswith(("-future", "-delete")))


def test_a_partition_moves_to_another_disk_under_load_and_stays_there(tmp_path: Path) -> None:
    """The operator's move off a filling disk: partition `moving` (several segments,
    its log start moved past 0 by DeleteRecords) is moved from dir A to dir B, a slow
    disk, while an idempotent producer keeps writing to it. DescribeLogDirs shows the
    copy in B as a future replica with its lag while A still serves; then the replica
    is in B alone, A keeps no trace, and the placement record says B. Every record
    acknowledged before, during and after the move is read back once, the log start
    is kept, and a restart serves the partition from B. Asking again is a no-op; a
    path that is not a log dir and a partition not hosted get Kafka's errors."""
    with faulty_fuse() as fs:
        a, b = tmp_path / "a", fs.path / "b"
        d = Daemon(tmp_path / "run", {"log.dirs": [str(a), str(b)], "log.segment.bytes": 1 << 20,
                                      "log.dir.probe.timeout.ms": 10000})
        d.log_dirs = [a, b]
        with d:
            assert d.admin("log-dirs/cordon", b)[0] == 200
            admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
            try:
                from kafka.admin import NewTopic

                admin.create_topics([NewTopic("moving", 1, 1)])
                assert d.admin("log-dirs/uncordon", b)[0] == 200
                assert (a / "moving-0").is_dir()
                pre = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 20,
                                   "enable.idempotence": True})
                for i in range(3000):  # ~6 MiB: six segments
                    pre.produce("moving", b"p%05d" % i + b"." * 2000, partition=0)
                assert pre.flush(60) == 0
                admin.delete_records({ck_tp("moving"): 100})

                # The copy's writes are slow: its progress can be watched.
                fs.delay(0.02, ("write",), "*")
                with Load(d.bootstrap, "moving", 1) as load:
                    wait_for(lambda: len(load.acked) > 200, 30, "the load running")
                    got = admin.alter_replica_log_dirs({("moving", 0, BROKER): str(b)})
                    assert list(got.values()) == [ke.NoError]
                    wait_for(lambda: log_dirs_view(admin, BROKER)[str(b)].get(("moving", 0), (0, 0, False))[2]
                             and ("moving", 0) in log_dirs_view(admin, BROKER)[str(a)], 30,
                             "the copy in B listed as a future replica while A serves")
                    assert metric(d, "logkeeper_replica_moves_in_progress") == 1
                    # Asking again for the same dir changes nothing.
                    assert list(admin.alter_replica_log_dirs(
                        {("moving", 0, BROKER): str(b)}).values()) == [ke.NoError]
                    fs.delay(0)

                    def moved() -> bool:
                        view = log_dirs_view(admin, BROKER)
                        entry = view[str(b)].get(("moving", 0))
                        return (entry is not None and not entry[2]
                                and ("moving", 0) not in view[str(a)])
                    wait_for(moved, 60, lambda: f"the move to finish: {log_dirs_view(admin, BROKER)}")
                    before = len(load.acked)
                    wait_for(lambda: len(load.acked) > before + 200, 30, "acks after the move")
                    unanswered = load.finish()
                assert unanswered == 0 and load.failed == []

                bad = admin.alter_replica_log_dirs({("moving", 0, BROKER): "/no/such/dir",
                                                    ("nosuch", 0, BROKER): str(a)})
                assert {k.topic: v for k, v in bad.items()} == {
                    "moving": ke.LogDirNotFoundError, "nosuch": ke.ReplicaNotAvailableError}
            finally:
                admin.close()

            assert metric(d, "logkeeper_replica_moves_in_progress") == 0
            assert not (a / "moving-0").exists() and (b / "moving-0").is_dir()
            assert futures_under(a) == [] and futures_under(b) == []
            for root in (a, b):
                record = json.loads((root / "logkeeper-placement.json").read_text())
                assert "moving-0" in record["log_dirs"][str(b)]
                assert "moving-0" not in record["log_dirs"][str(a)]
            records = read_back(d.bootstrap, "moving", 0)
            assert records[0][0] == 100  # the log start stayed where DeleteRecords put it
            assert_each_ack_once(records, load)

        d.start()  # a restart serves it from B
        try:
            assert read_back(d.bootstrap, "moving", 0) == records
            assert not (a / "moving-0").exists()
        finally:
            d.stop()


def test_a_replica_asked_for_before_it_exists_is_created_in_the_dir_named(tmp_path: Path) -> None:
    """Kafka's preferred log dir: AlterReplicaLogDirs for a partition this broker does
    not hold answers REPLICA_NOT_AVAILABLE and is remembered; when the partition comes
    (here a topic created after) its log is created in that dir, the others placed as
    usual (spread from the first dir). A dir that is not a log dir is refused and
    remembers nothing."""
    a, b = tmp_path / "a", tmp_path / "b"
    d = Daemon(tmp_path / "run", {"log.dirs": [str(a), str(b)]})
    d.log_dirs = [a, b]
    with d:
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            got = admin.alter_replica_log_dirs({("later", 0, BROKER): str(b),
                                                ("later", 2, BROKER): "/no/such/dir"})
            assert {k.partition: v for k, v in got.items()} == {
                0: ke.ReplicaNotAvailableError, 2: ke.LogDirNotFoundError}
            create_topic(d, "later", 3)
        finally:
            admin.close()
        placed = sorted((p.name, p.parent.name) for root in (a, b) for p in root.glob("later-*"))
        assert placed == [("later-0", "b"), ("later-1", "a"), ("later-2", "b")], placed


def test_moves_copy_at_the_rate_replica_alter_log_dirs_io_max_bytes_per_second_allows(
        tmp_path: Path) -> None:
    """Kafka's throttle on moves between a broker's own dirs, a dynamic broker config:
    at 1 MiB/s a 6 MiB replica takes seconds to move (without it, well under one), is
    listed as a future replica with its lag meanwhile, and arrives whole. (Measured
    over 3 samples of 1 s, not Kafka's 11: a new throttle lets 2 s' worth through
    first, not 10.)"""
    from .test_cli import cli

    a, b = tmp_path / "a", tmp_path / "b"
    d = Daemon(tmp_path / "run", {"log.dirs": [str(a), str(b)],
                                  "alter.log.dirs.replication.quota.window.num": 3})
    d.log_dirs = [a, b]
    with d:
        assert d.admin("log-dirs/cordon", b)[0] == 200
        create_topic(d, "slow", 1)
        assert d.admin("log-dirs/uncordon", b)[0] == 200
        assert (a / "slow-0").is_dir()
        fill(d.port, "slow", 0, 30, b"m")  # 6 MiB
        before = read_back(d.bootstrap, "slow", 0)
        rate = 1 << 20
        set_ = cli("configs", "alter", "--bootstrap-server", d.bootstrap, "--broker", str(BROKER),
                   "--add-config", f"replica.alter.log.dirs.io.max.bytes.per.second={rate}")
        assert set_.returncode == 0, set_.stderr
        shown = cli("configs", "describe", "--bootstrap-server", d.bootstrap, "--broker", str(BROKER))
        assert f"replica.alter.log.dirs.io.max.bytes.per.second={rate}" in shown.stdout, shown.stdout
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            started = time.monotonic()
            got = admin.alter_replica_log_dirs({("slow", 0, BROKER): str(b)})
            assert list(got.values()) == [ke.NoError]
            time.sleep(2.5)  # past the 2 s' burst a new throttle allows
            copy = log_dirs_view(admin, BROKER)[str(b)].get(("slow", 0))
            assert copy is not None and copy[2] and copy[1] > 0, \
                f"the copy in B still under way, with its lag: {copy}"

            def moved() -> bool:
                view = log_dirs_view(admin, BROKER)
                entry = view[str(b)].get(("slow", 0))
                return entry is not None and not entry[2] and ("slow", 0) not in view[str(a)]
            wait_for(moved, 60, lambda: f"the move to finish: {log_dirs_view(admin, BROKER)}")
            took = time.monotonic() - started
        finally:
            admin.close()
        # 6 MiB at 1 MiB/s less the 2 s' burst and one chunk: about 3 s at the least.
        assert took > 2.5, f"the throttled move took {took:.1f} s"
        assert read_back(d.bootstrap, "slow", 0) == before


def test_a_move_cut_short_by_a_stop_or_a_kill_carries_on_after_the_restart(
        tmp_path: Path) -> None:
    """A move is not ended by its broker's stop nor by a kill -9, as in Kafka, which
    resumes a future replica at start-up: a 6 MiB replica moving from A to B at 1 MiB/s
    is stopped (SIGTERM) while its copy is under way, then killed while the copy is
    under way again; each time the broker comes back moving it (a copy listed in B as
    a future replica), and the move ends in B with every record, without the operator
    asking again."""
    from .test_cli import cli as lk

    a, b = tmp_path / "a", tmp_path / "b"
    d = Daemon(tmp_path / "run", {"log.dirs": [str(a), str(b)],
                                  "alter.log.dirs.replication.quota.window.num": 3})
    d.log_dirs = [a, b]

    def copy_under_way() -> bool:
        return any(p.name.startswith("slow-0.") and p.name.endswith("-future")
                   for p in b.iterdir())

    with d:
        assert d.admin("log-dirs/cordon", b)[0] == 200
        create_topic(d, "slow", 1)
        assert d.admin("log-dirs/uncordon", b)[0] == 200
        fill(d.port, "slow", 0, 30, b"m")  # 6 MiB
        before = read_back(d.bootstrap, "slow", 0)
        set_ = lk("configs", "alter", "--bootstrap-server", d.bootstrap, "--broker", str(BROKER),
                  "--add-config", f"replica.alter.log.dirs.io.max.bytes.per.second={1 << 20}")
        assert set_.returncode == 0, set_.stderr
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            got = admin.alter_replica_log_dirs({("slow", 0, BROKER): str(b)})
            assert list(got.values()) == [ke.NoError]
        finally:
            admin.close()
        wait_for(copy_under_way, 30, "the copy under way in B")
    assert (a / "slow-0").is_dir()
    d.start()
    try:
        wait_for(copy_under_way, 30, "the copy under way in B after the stop")
        assert "the move to " + str(b) + " starts over" in d.stderr()
    finally:
        d.kill()
    assert (a / "slow-0").is_dir()
    d.start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            def moved() -> bool:
                view = log_dirs_view(admin, BROKER)
                entry = view[str(b)].get(("slow", 0))
                return entry is not None and not entry[2] and ("slow", 0) not in view[str(a)]
            wait_for(moved, 90, lambda: f"the move to finish: {log_dirs_view(admin, BROKER)}")
        finally:
            admin.close()
        assert not (a / "slow-0").exists() and (b / "slow-0").is_dir()
        assert read_back(d.bootstrap, "slow", 0) == before
    finally:
        d.stop()


def test_moving_a_partition_off_a_full_disk_brings_the_disk_back_online(tmp_path: Path) -> None:
    """The disk-full story with a move instead of a deletion: dir A (a small tmpfs) fills
    up with partition `big` until appends answer 56 and A turns SATURATED. The operator
    moves big-0 to dir B with `logkeeper log-dirs move --wait`: the copy is read from
    the full disk, the switch frees it, and A comes back ONLINE by itself with its
    reserve. Every acknowledged record of `big` is served from B, which takes appends
    again; `keep`, which stayed on A, takes them too."""
    reserve = 1 << 20
    with faults.tmpfs("20m") as small:
        a, b = small / "a", tmp_path / "b"
        d = Daemon(tmp_path / "run", {"log.dirs": [str(a), str(b)], "log.segment.bytes": 1 << 20,
                                      "log.dir.reserve.bytes": reserve,
                                      "log.dir.probe.interval.ms": 100})
        d.log_dirs = [a, b]
        with d:
            assert d.admin("log-dirs/cordon", b)[0] == 200
            create_topic(d, "big", 1)
            create_topic(d, "keep", 1)
            assert d.admin("log-dirs/uncordon", b)[0] == 200
            c = RawClient(d.port)
            try:
                values, code = [], 0
                while len(values) < 400:
                    value = b"%04d" % len(values) + os.urandom(100 << 10)
                    code, _ = produce_raw(c, "big", 0, [value])
                    if code:
                        break
                    values.append(value)
                assert code == KAFKA_STORAGE_ERROR, "the tmpfs never filled"
                wait_for(lambda: d.log_dir_states()[str(a)] == "saturated", 10, "SATURATED")
                assert produce_raw(c, "keep", 0, [b"refused"])[0] == KAFKA_STORAGE_ERROR

                done = cli("log-dirs", "move", "--bootstrap-server", d.bootstrap, "--broker",
                           str(BROKER), "--wait", "60", str(b), "big-0")
                assert done.returncode == 0, done.stderr
                wait_for(lambda: d.log_dir_states()[str(a)] == "online", 10, "ONLINE again")
                wait_for(lambda: (a / ".logkeeper-reserve").exists(), 10, "the reserve back")
                assert holding_dir(d, "big", 0) == b and not (a / "big-0").exists()
                assert [v for _, v in read_back(d.bootstrap, "big", 0)] == values
                assert produce_raw(c, "big", 0, [b"after"]) == (0, len(values))
                assert produce_raw(c, "keep", 0, [b"kept"]) == (0, 0)
            finally:
                c.close()
        said = d.stderr()
        assert "online -> saturated" in said and "saturated -> online" in said


def ck_tp(topic: str) -> Any:
    from kafka.structs import TopicPartition as KTP

    return KTP(topic, 0)


def assert_each_ack_once(records: list[tuple[int, bytes]], load: Load) -> None:
    values = [v for _, v in records if v.startswith(load.tag)]
    assert len(values) == len(set(values)), "a record was written twice"
    assert values == sorted(values), "records out of order"
    assert {v for _, v in load.acked} <= set(values), "an acknowledged record was lost"


def test_an_interrupted_moves_copy_is_removed_at_start_up_and_a_lone_one_kept(
        tmp_path: Path) -> None:
    """A stop in the middle of a move leaves `<t>-<p>.<id>-future` in the destination.
    The replica is whole in its source, so start-up removes the copy (and says so);
    a future dir with no replica of its partition here is not ours to judge and stays."""
    d = Daemon(tmp_path, dirs=2)
    a, b = d.log_dirs
    with d:
        create_topic(d, "kept", 1)
        p = ck.Producer({"bootstrap.servers": d.bootstrap})
        for i in range(50):
            p.produce("kept", b"%d" % i, partition=0)
        assert p.flush(30) == 0
    src = holding_dir(d, "kept", 0)
    other = b if src == a else a
    partial = other / "kept-0.0123456789abcdef0123456789abcdef-future"
    partial.mkdir()
    (partial / "00000000000000000000.log").write_bytes(b"\0" * 100)
    lone = other / "orphan-0.fedcba9876543210fedcba9876543210-future"
    lone.mkdir()
    d.start()
    try:
        assert not partial.exists()
        assert lone.is_dir()
        said = d.stderr()
        assert "removed the copy of an interrupted move of kept-0" in said
        assert "orphan-0" in said
        assert [v for _, v in read_back(d.bootstrap, "kept", 0)] == [b"%d" % i for i in range(50)]

        # The operator asks again, with logkeeper's own command, and waits for it.
        done = cli("log-dirs", "move", "--bootstrap-server", d.bootstrap, "--broker",
                   str(BROKER), "--wait", "30", str(other), "kept-0")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["partitions"] == [
            {"partition": "kept-0", "logDir": str(other), "error": None}]
        assert holding_dir(d, "kept", 0) == other and not (src / "kept-0").exists()
        assert [v for _, v in read_back(d.bootstrap, "kept", 0)] == [b"%d" % i for i in range(50)]
        refused = cli("log-dirs", "move", "--bootstrap-server", d.bootstrap, "--broker",
                      str(BROKER), "/no/such/dir", "kept-0")
        assert refused.returncode == 1
        assert json.loads(refused.stdout)["partitions"][0]["error"] == "LogDirNotFoundException"
        assert "kept-0: LogDirNotFoundException" in refused.stderr
        assert holding_dir(d, "kept", 0) == other

        # Draining a disk: every replica in it, without naming them.
        drained = cli("log-dirs", "move", "--bootstrap-server", d.bootstrap, "--broker",
                      str(BROKER), "--wait", "30", "--from", str(other), str(src))
        assert drained.returncode == 0, drained.stderr
        moved = [e["partition"] for e in json.loads(drained.stdout)["partitions"]]
        assert "kept-0" in moved  # and the __consumer_offsets partitions read_back made
        assert holding_dir(d, "kept", 0) == src
        assert [p.name for p in other.iterdir() if names.parse_partition_dir(p.name)] == []
        assert [v for _, v in read_back(d.bootstrap, "kept", 0)] == [b"%d" % i for i in range(50)]
        unknown = cli("log-dirs", "move", "--bootstrap-server", d.bootstrap, "--broker",
                      str(BROKER), "--from", "/no/such/dir", str(src))
        assert unknown.returncode == 2 and "has no log dir /no/such/dir" in unknown.stderr
    finally:
        d.stop()


def test_of_two_whole_copies_left_by_a_move_cut_short_the_one_with_more_records_is_served(
        tmp_path: Path) -> None:
    """A move killed between its copy's rename (the destination holds the replica, and
    takes the appends from then on) and the removal of the old files leaves two whole
    copies: the old one as it was at the switch, the new one with everything since.
    Start-up serves the new one, whichever dir comes first in log.dirs: every record
    acknowledged after the switch is still read back. (The old copy's files are put back
    as the kill left them: the copy taken before the move.)"""
    d = Daemon(tmp_path, dirs=2)
    first, second = d.log_dirs
    with d:
        create_topic(d, "cut", 1)
        if holding_dir(d, "cut", 0) != first:
            moved = cli("log-dirs", "move", "--bootstrap-server", d.bootstrap, "--broker",
                        str(BROKER), "--wait", "30", str(first), "cut-0")
            assert moved.returncode == 0, moved.stderr
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": "all"})
        for i in range(50):
            p.produce("cut", b"%d" % i, partition=0)
        assert p.flush(30) == 0
    assert holding_dir(d, "cut", 0) == first
    old = tmp_path / "old-copy"
    shutil.copytree(first / "cut-0", old)
    d.start()
    try:
        moved = cli("log-dirs", "move", "--bootstrap-server", d.bootstrap, "--broker",
                    str(BROKER), "--wait", "30", str(second), "cut-0")
        assert moved.returncode == 0, moved.stderr
        assert holding_dir(d, "cut", 0) == second
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": "all"})
        for i in range(50, 80):
            p.produce("cut", b"%d" % i, partition=0)
        assert p.flush(30) == 0
    finally:
        d.stop()
    shutil.copytree(old, first / "cut-0")  # the old copy, as the kill left it
    d.start()
    try:
        assert [v for _, v in read_back(d.bootstrap, "cut", 0)] == [
            b"%d" % i for i in range(80)]
        assert (f"cut-0 is in log dir {second} and in {first}: served from {second}"
                in d.stderr())
    finally:
        d.stop()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _batch(offset: int, epoch: int, value: bytes) -> bytes:
    return build_batch([(b"k", value)], base_offset=offset, partition_leader_epoch=epoch)


def test_the_copy_follows_a_source_truncated_and_diverged_mid_copy(tmp_path: Path) -> None:
    """The copy loop's steps against real logs: the source (a follower) is cut back to
    its new leader and takes that leader's records of a new epoch between two steps;
    the copy is cut where the epoch they share ends and then takes the new records, so
    the replica it becomes is the source byte for byte, epochs included. Once retired,
    the source refuses appends without touching a file; a move given up unretires it."""
    cfg = LogConfig(segment_bytes=1 << 20)
    src_dir, dest_dir = LogDir.open(tmp_path / "src", cfg), LogDir.open(tmp_path / "dest", cfg)
    tp = TopicPartition("t", 0)
    src = src_dir.create_log("t", 0)
    for i in range(40):
        src.append(_batch(i, 1 if i < 20 else 2, b"v%d" % i), assign_offsets=False)

    future = moves._create_future(dest_dir, tp, src.config, moves._copy_start(src))
    txns = PartitionProducers()
    nxt, epoch = 0, -1
    while nxt < 30:  # part of the way: batches are read from where the copy ends
        kind, data = moves._read_source(src, nxt, epoch)
        assert kind == "data"
        first = next(iter_batches(data))
        nxt, epoch = moves._append_copy(future, bytes(data[:first.size]), txns)
    assert (nxt, epoch) == (30, 2)

    # The source follows a new leader: epoch 2 ended at 25 there; epoch 3 follows.
    src.truncate_to(25)
    for i in range(25, 45):
        src.append(_batch(i, 3, b"w%d" % i), assign_offsets=False)
    step = moves._read_source(src, nxt, epoch)
    assert step[0] == "diverged"
    nxt, epoch = moves._truncate_copy(future, step[1], step[2], txns)
    assert nxt == 25
    while True:
        step = moves._read_source(src, nxt, epoch)
        assert step[0] == "data"
        if not step[1]:
            break
        nxt, epoch = moves._append_copy(future, step[1], txns)

    src.append(_batch(45, 3, b"tail"), assign_offsets=False)  # lands before the retirement
    src.start_leader_epoch(4)  # an epoch with no batch yet: it must come along
    retired = moves._retire_source(src_dir, src, tp, nxt, epoch, str(dest_dir.path))
    assert isinstance(retired, moves._Retired)
    assert src.retired and tp not in src_dir.logs
    size = os.path.getsize(src.dir / "00000000000000000000.log")
    with pytest.raises(LogMovedError):
        src.append(_batch(46, 4, b"late"), assign_offsets=False)
    with pytest.raises(LogMovedError):
        src.truncate_to(10)
    assert os.path.getsize(src.dir / "00000000000000000000.log") == size

    moved = moves._promote(dest_dir, future, tp, retired, txns)
    assert moved.dir == dest_dir.path / "t-0" and dest_dir.logs[tp] is moved
    assert not list(dest_dir.path.glob("*-future"))
    assert (moved.dir / "00000000000000000000.log").read_bytes() == \
        (src.dir / "00000000000000000000.log").read_bytes()
    assert moved.epochs.entries == src.epochs.entries
    assert moved.epochs.latest_epoch == 4 and moved.log_end_offset == 46

    # A move given up after the retirement gives the source back as it was.
    moves._unretire(src_dir, src, tp, None)
    assert not src.retired and src_dir.logs[tp] is src
    src.append(_batch(46, 4, b"again"), assign_offsets=False)
    assert src.log_end_offset == 47
    src_dir.close()
    dest_dir.close()


def test_moves_in_a_cluster_under_acks_all_load_keep_every_ack_and_identical_replicas(
        tmp_path: Path) -> None:
    """Three brokers, RF 3, min ISR 2, idempotent acks=all load. The leader's replica
    of p0 and a follower's replica of p1 move to their brokers' other dirs at once: the
    leader's appends and the follower's fetches meet the retired logs and go on in the
    new ones. Every acknowledged record is read back once and the replicas end
    byte-identical, each in its new dir."""
    with Cluster(tmp_path) as cl:
        create(cl, "mv", 2)
        loads = start_producers(cl, "mv", 2)
        try:
            wait_for(lambda: all(len(x.acked) > 300 for x in loads), 60, "load running")
            parts = cl.metadata(1, ["mv"])["partitions"]
            leader0 = parts[("mv", 0)][0]
            follower1 = next(r for r in parts[("mv", 1)][2] if r != parts[("mv", 1)][0])
            targets = {}
            for broker, part in ((leader0, 0), (follower1, 1)):
                dirs = cl.brokers[broker].log_dirs
                here = holding_dir(cl.brokers[broker], "mv", part)
                targets[(broker, part)] = next(x for x in dirs if x != here)
            admin = KafkaAdminClient(bootstrap_servers=cl.brokers[1].bootstrap)
            try:
                got = admin.alter_replica_log_dirs({("mv", part, broker): str(dest)
                                                    for (broker, part), dest in targets.items()})
                assert set(got.values()) == {ke.NoError}, got
            finally:
                admin.close()
            wait_for(lambda: all(holding_dir(cl.brokers[b], "mv", p) == dest
                                 and not (futures_under(dest))
                                 for (b, p), dest in targets.items()), 60, "both moves done")
            before = [len(x.acked) for x in loads]
            wait_for(lambda: all(len(x.acked) > n + 200 for x, n in zip(loads, before, strict=True)),
                     60, "acks after the moves")
        finally:
            unanswered = [x.finish() for x in loads]
        assert_every_ack_read_once(cl, "mv", 2, loads, unanswered)
        wait_for(lambda: replicas_identical(cl, "mv", 2), 30, "replicas byte-identical")
        for (b, p), dest in targets.items():
            assert holding_dir(cl.brokers[b], "mv", p) == dest
