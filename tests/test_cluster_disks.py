"""Sick disks across the cluster (KIP-112 end to end): a real ZooKeeper, three broker
processes with two log dirs each, real kernel faults on one broker's dirs, real
clients under idempotent acks=all load. One dir of one broker dies; that broker keeps
serving its other dir, the controller moves leadership to replicas on other brokers,
followers keep replicating everything else, and nothing acknowledged is lost
(docs/cluster.md; Kafka's log_dir_failure_test.py, case 1 and 2).
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
import pytest
from kazoo.client import KazooClient

from logstore.records import iter_batches
from tests import faults

from .cluster_helpers import Cluster, IsrWatch, no_log_dir_event_left, wait_for
from .daemon_helpers import RawClient
from .sick_helpers import KAFKA_STORAGE_ERROR, metric, produce_raw
from .test_cli import cli
from .test_replication import (
    assert_every_ack_read_once,
    consume_all,
    create,
    partition_bytes,
    replicas_identical,
    start_producers,
)

NOT_LEADER_OR_FOLLOWER = 6


class NoRetries:
    """A plain (not idempotent) acks=all producer with retries=0 writing to partition 0
    (LogDirFailureTest's case 6), its metadata warmed up by one acknowledged record."""

    def __init__(self, cl: Cluster, topic: str):
        import confluent_kafka as ck

        self.topic = topic
        self.p = ck.Producer({"bootstrap.servers": ",".join(d.bootstrap for d in cl.brokers.values()),
                              "acks": "all", "retries": 0, "enable.idempotence": False,
                              "linger.ms": 0})
        assert self.send() == 0

    def send(self) -> int:
        """The error code the one record's delivery report carried (0: acknowledged)."""
        got: list[int] = []
        self.p.produce(self.topic, b"no-retries", partition=0,
                       on_delivery=lambda err, msg: got.append(err.code() if err else 0))
        assert self.p.flush(60) == 0
        return got[0]

    def close(self) -> None:
        self.p.flush(10)


def holding_dir(d: Any, topic: str, partition: int) -> Path | None:
    for ld in d.log_dirs:
        if (ld / f"{topic}-{partition}").is_dir():
            return ld
    return None


def create_on(cl: Cluster, only: Path, topic: str, assignment: list[list[int]],
              min_isr: int = 2, config: dict[str, str] | None = None) -> None:
    """Create `topic` with broker 1's replicas on its dir `only` (its others cordoned)."""
    b1 = cl.brokers[1]
    others = [d for d in b1.log_dirs if d != only]
    for d in others:
        assert b1.admin("log-dirs/cordon", d)[0] == 200
    try:
        create(cl, topic, len(assignment), min_isr=min_isr, assignment=assignment,
               config=config)
    finally:
        for d in others:
            assert b1.admin("log-dirs/uncordon", d)[0] == 200
    assert all(holding_dir(b1, topic, p) == only for p in range(len(assignment)))


@contextmanager
def disk_under_broker_1(tmp_path: Path) -> Iterator[tuple[Cluster, Path, Path]]:
    """3 brokers; broker 1's dirs are a loop-mounted ext4 (`sick`, under `mnt`) and a
    plain dir, probed every 100 ms: (cluster, mount point, sick dir)."""
    with faults.loop_ext4(64) as mnt:
        sick, good = mnt / "d", tmp_path / "b1-good"
        extra = {"log.dir.probe.interval.ms": 100, "log.dir.probe.timeout.ms": 1000}
        with Cluster(tmp_path, log_dirs={1: [sick, good]}, extra=extra) as cl:
            yield cl, mnt, sick


@contextmanager
def saturable(tmp_path: Path, brokers: int = 3) -> Iterator[tuple[Cluster, Path, list[Path]]]:
    """`brokers` brokers; broker 1's first dir is a 16 MiB tmpfs with a 6 MiB free-space
    floor and a 9 MiB resume mark (a 10 MiB ballast file saturates it), its second a
    plain dir."""
    with faults.tmpfs("16m") as small:
        dirs = [small / "d", tmp_path / "b1-other"]
        extra = {"log.dir.min.free.bytes": 6 << 20, "log.dir.resume.free.bytes": 9 << 20,
                 "log.dir.probe.interval.ms": 100, "log.dir.probe.timeout.ms": 1000}
        with Cluster(tmp_path, brokers=brokers, log_dirs={1: dirs}, extra=extra) as cl:
            yield cl, small, dirs



def replace_disk_and_readmit(broker: Any, mnt: Path, sick: Path, recreated: list[str]) -> None:
    """The operator's repair: a new, empty filesystem mounted where the dead one was,
    then `log-dirs readmit`, which re-creates `recreated` empty."""
    subprocess.run(["umount", "-l", str(mnt)], check=True)
    image = mnt.parent / "disk.img"
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    sick.mkdir()
    code, body = broker.admin("log-dirs/readmit", sick)
    assert code == 200, body
    assert body["recreated_empty"] == recreated

def test_eio_on_a_dir_moves_its_leaders_drops_its_followers_and_loses_nothing(
        tmp_path: Path) -> None:
    """KIP-112 cases 1 and 2 at once, with LogDirFailureTest's cases 6 and 7. On broker
    1, dir A holds t-0 (broker 1 leads it) and t-1 (broker 1 follows broker 2); dir B
    holds h-0 (broker 1 leads it, min.insync.replicas 1) and g-0 (broker 1 follows
    broker 2, on the same fetcher as t-1). Dir A gets EIO (FS_IOC_SHUTDOWN) while
    idempotent acks=all producers write to t. A producer with retries=0 writing to t-0
    gets 56 or 6 (case 6). Through the log_dir_event (not a ZooKeeper timeout): t-0
    gets another leader, t-1 keeps its leader; broker 1 leaves both ISRs and is listed
    in their offline replicas on every broker; h-0 stays led by broker 1 with a full ISR
    and takes acks=all writes; g-0 keeps broker 1 in its ISR in every sample taken
    (case 7); broker 1 stays alive, no log_dir_event znode is left, every acknowledged
    record is read back once.

    Then the other two brokers stop (case 1's second half): broker 1 is the only ISR
    member of h-0 and keeps serving it (acks=all writes, reads), while t-0, whose ISR
    has no live member, has no leader."""
    topic = "t"
    with faults.loop_ext4(64) as m0, faults.loop_ext4(64) as m1:
        dirs = [m0 / "d", m1 / "d"]
        with Cluster(tmp_path, log_dirs={1: dirs}) as cl:
            b1 = cl.brokers[1]
            sick, good = dirs
            create_on(cl, sick, topic, [[1, 2, 3], [2, 1, 3]])
            create_on(cl, good, "h", [[1, 2, 3]], min_isr=1)
            create_on(cl, good, "g", [[2, 1, 3]])
            on_sick = [0, 1]
            c = RawClient(b1.port)
            try:
                assert produce_raw(c, "h", 0, [b"h-before"]) == (0, 0)
            finally:
                c.close()
            no_retries = NoRetries(cl, topic)
            loads = start_producers(cl, topic, 2)
            g_isr = IsrWatch(cl, "g", [0], [1, 2, 3])
            try:
                wait_for(lambda: all(len(x.acked) > 100 for x in loads), 60,
                         lambda: f"load running: acked {[len(x.acked) for x in loads]}, "
                                 f"sent {[x.sent for x in loads]}, failed {[x.failed[:2] for x in loads]}")
                t1_leader = cl.metadata(2, [topic])["partitions"][(topic, 1)][0]
                failed_at = time.monotonic()
                faults.shutdown_fs(sick.parent)
                assert no_retries.send() in (KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER)

                def moved() -> Any:
                    views = [cl.metadata(b, [topic])["partitions"] for b in cl.brokers]
                    for p in on_sick:
                        for v in views:
                            leader, _, _, isr, offline = v[(topic, p)]
                            if leader in (1, -1) or 1 in isr or 1 not in offline:
                                return None
                    return views

                views = wait_for(moved, 30, "leadership off the dead dir, on every broker")
                elapsed = time.monotonic() - failed_at
                assert all(v[(topic, 1)][0] == t1_leader for v in views)  # no election
                for b in cl.brokers:
                    leader, _, _, isr, offline = cl.metadata(b, ["h"])["partitions"][("h", 0)]
                    assert (leader, sorted(isr), offline) == (1, [1, 2, 3], [])
                c = RawClient(b1.port)
                try:
                    assert produce_raw(c, "h", 0, [b"h-after"]) == (0, 1)
                finally:
                    c.close()
                before = [len(x.acked) for x in loads]
                wait_for(lambda: all(len(x.acked) > n + 100
                                     for x, n in zip(loads, before, strict=True)), 60,
                         lambda: f"acks=all writes acknowledged after the failure: before "
                                 f"{before}, now {[len(x.acked) for x in loads]}")
            finally:
                unanswered = [x.finish() for x in loads]
                g_isr.stop()
                no_retries.close()
            assert elapsed < 15, f"leadership moved only after {elapsed:.1f} s"
            assert b1.proc is not None and b1.proc.poll() is None, "broker 1 died"
            assert b1.log_dir_states()[str(sick)] == "offline"
            assert g_isr.samples > 3 and not g_isr.bad, \
                f"g-0's ISR left [1, 2, 3] ({g_isr.samples} samples): {g_isr.bad[:5]}"
            assert_every_ack_read_once(cl, topic, 2, loads, unanswered)
            no_log_dir_event_left(cl, 10)
            # Case 1, second half: the other brokers go; broker 1 alone serves h-0.
            for b in (2, 3):
                cl.brokers[b].stop()
            wait_for(lambda: cl.metadata(1, ["h", topic])["partitions"][("h", 0)][:4:3]
                     == (1, [1]), 30, lambda: "broker 1 the only ISR member of h-0; now "
                     f"{cl.metadata(1, ['h', topic])['partitions']}")
            # t-0's last in-sync replica, broker 3, asked in vain to hand it over, then
            # stopped; the controller takes t-0 offline once its registration is gone,
            # which can come after h-0's ISR already shows broker 1 alone.
            wait_for(lambda: cl.metadata(1, [topic])["partitions"][(topic, 0)][0] == -1, 30,
                     lambda: f"t-0 without a leader; now {cl.metadata(1, [topic])['partitions']}")
            c = RawClient(b1.port)
            try:
                assert produce_raw(c, "h", 0, [b"h-alone"]) == (0, 2)
            finally:
                c.close()
            assert [v for _, v in consume_all(cl, "h", 1)[0]] == [b"h-before", b"h-after",
                                                                  b"h-alone"]
            assert cl.alive() == [1]


def test_a_saturated_leader_dir_hands_leadership_over_and_rejoins_when_space_returns(
        tmp_path: Path) -> None:
    """The disk-full proposal through the controller: broker 1's dir holding f-0 (it
    leads it) falls under its free-space floor; the dir turns SATURATED, its replica
    answers 56 to the controller's probe, leadership moves to another broker and broker
    1 leaves the ISR, while acks=all writes go on at the new leader. Space comes back:
    the dir is ONLINE by itself, tells the controller, and broker 1's replica follows,
    catches up (cutting what the new leader does not have) and rejoins the ISR, no
    restart. Every replica ends byte-identical; every acknowledged record is there."""
    topic = "f"
    with saturable(tmp_path) as (cl, small, dirs):
        b1 = cl.brokers[1]
        create_on(cl, dirs[0], topic, [[1, 2, 3]])
        c = RawClient(b1.port)
        try:
            for i in range(5):
                assert produce_raw(c, topic, 0, [b"before%d" % i]) == (0, i)
        finally:
            c.close()
        ballast = small / "ballast"
        ballast.write_bytes(b"\0" * (10 << 20))
        wait_for(lambda: b1.log_dir_states()[str(dirs[0])] == "saturated", 10, "SATURATED")

        def moved() -> Any:
            views = [cl.metadata(b, [topic])["partitions"][(topic, 0)] for b in cl.brokers]
            return all(v[0] not in (1, -1) and 1 not in v[3] and 1 in v[4] for v in views) \
                and views[0]
        view = wait_for(moved, 20, "leadership off the saturated dir, on every broker")
        leader = view[0]
        c = RawClient(cl.brokers[leader].port)
        try:
            for i in range(5):
                assert produce_raw(c, topic, 0, [b"during%d" % i]) == (0, 5 + i)
        finally:
            c.close()
        ballast.unlink()
        wait_for(lambda: b1.log_dir_states()[str(dirs[0])] == "online", 10, "ONLINE again")

        def rejoined() -> Any:
            views = [cl.metadata(b, [topic])["partitions"][(topic, 0)] for b in cl.brokers]
            return all(sorted(v[3]) == [1, 2, 3] and v[4] == [] for v in views)
        wait_for(rejoined, 30, "broker 1 back in the ISR, no offline replica")
        assert b1.proc is not None and b1.proc.poll() is None
        wait_for(lambda: replicas_identical(cl, topic, 1), 30, "replicas byte-identical")
        values = [v for _, v in consume_all(cl, topic, 1)[0]]
        assert values == [b"before%d" % i for i in range(5)] + [b"during%d" % i for i in range(5)]


def test_deleting_a_topic_with_a_replica_on_a_saturated_dir_completes_and_frees_it(
        tmp_path: Path) -> None:
    """Decision 6 (the disk-full proposal): DeleteTopics sends StopReplica(delete=true)
    to every replica on a live broker; on broker 1's SATURATED dir the replica is
    deleted (its files go, freeing their space) and the deletion completes: the topic's
    znodes go and no broker's Metadata lists it. Broker 1 is a follower there, so the
    leader's writes reached the full dir before it filled."""
    import confluent_kafka.admin as ck_admin

    with saturable(tmp_path) as (cl, small, dirs):
        b1 = cl.brokers[1]
        create_on(cl, dirs[0], "gone", [[2, 1, 3]], min_isr=1)
        c = RawClient(cl.brokers[2].port)
        try:
            for _ in range(3):
                assert produce_raw(c, "gone", 0, [b"x" * 100_000])[0] == 0
        finally:
            c.close()
        wait_for(lambda: replicas_identical(cl, "gone", 1), 30, "replicated to broker 1")
        (small / "ballast").write_bytes(b"\0" * (9 << 20))
        wait_for(lambda: b1.log_dir_states()[str(dirs[0])] == "saturated", 10, "SATURATED")
        # What is checked is the deletion itself (znodes, files, Metadata), not the
        # admin client's answer: under a loaded CI run that answer once failed to come
        # within 30 s while the deletion went on (see the issue note).
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[cl.controller()].bootstrap})
        a.delete_topics(["gone"], operation_timeout=30, request_timeout=60)
        wait_for(lambda: holding_dir(b1, "gone", 0) is None, 30,
                 "the replica deleted from the saturated dir")
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            wait_for(lambda: not zc.exists("/brokers/topics/gone")
                     and not zc.exists("/admin/delete_topics/gone"), 30, "deletion complete")
        finally:
            zc.stop()
            zc.close()
        for b in cl.brokers:
            wait_for(lambda b=b: ("gone", 0) not in cl.metadata(b)["partitions"], 20,
                     f"broker {b} no longer lists the topic")
        assert b1.proc is not None and b1.proc.poll() is None


def replica_batches(cl: Cluster, broker: int, topic: str, partition: int,
                    start: int) -> list[bytes]:
    """One replica's batches holding offsets at or above `start`, as bytes: replicas may
    cut their segments at different offsets, never their batches."""
    data = partition_bytes(cl, broker, topic, partition) or b""
    return [bytes(b.data) for b in iter_batches(data, verify_crc=False)
            if b.last_offset >= start]


@pytest.mark.parametrize("free_by", ["delete_records", "retention.bytes", "retention.ms"])
def test_a_saturated_follower_dir_frees_when_its_leader_deletes_and_rejoins(
        tmp_path: Path, free_by: str) -> None:
    """RF 2: broker 2 leads s-0, broker 1 follows it on its small dir. What broker 1
    replicates fills that dir until it turns SATURATED: broker 1 stops fetching s-0, the
    controller takes its replica out of the ISR and lists it offline, and the leader goes
    on taking writes. The operator then frees space as a Kafka operator does, at the
    leader: DeleteRecords below three quarters of what the follower holds, or
    retention.bytes or retention.ms lowered (AlterConfigs). The follower, which appends
    nothing on its full dir, still deletes its segments below the leader's new log
    start offset (DeleteRecords; it never learned it before: the dir stayed SATURATED
    for good), or runs its own retention with the new config: the dir is ONLINE again
    by itself, and broker 1 follows, catches up and rejoins the ISR, no restart, no new
    leader epoch. Both replicas end with one log start offset and the same batches
    from it on."""
    topic = "s"
    filler = random.Random(7).randbytes(10_000)  # incompressible records of ~10 KB
    with saturable(tmp_path, brokers=2) as (cl, _small, dirs):
        b1 = cl.brokers[1]
        create_on(cl, dirs[0], topic, [[2, 1]], min_isr=1,
                  config={"segment.bytes": str(256 << 10)})
        producer = ck.Producer({"bootstrap.servers": cl.brokers[2].bootstrap, "acks": "1",
                                "linger.ms": 5})
        sent = 0

        def produce(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                producer.produce(topic, value=b"%06d" % sent + filler, partition=0)
                sent += 1
            assert producer.flush(30) == 0

        def saturated() -> bool:
            assert sent < 3000, "30 MB written and broker 1's dir is not SATURATED"
            produce(20)
            return b1.log_dir_states()[str(dirs[0])] == "saturated"

        wait_for(saturated, 60, "broker 1's dir SATURATED by what it replicates")
        produce(50)  # the leader goes on: records the follower does not get

        def parted() -> Any:
            views = [cl.metadata(b, [topic])["partitions"][(topic, 0)] for b in cl.brokers]
            return all(v[0] == 2 and v[3] == [2] and v[4] == [1] for v in views) and views[0]

        leader_epoch = wait_for(parted, 30, "broker 1 out of the ISR and listed offline")[1]
        held = metric(b1, "kafka_log_log_logendoffset", topic=topic, partition="0")
        assert held is not None and 0 < held < sent
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
        if free_by == "delete_records":
            deleted_to = int(held) * 3 // 4
            for fut in a.delete_records([ck.TopicPartition(topic, 0, deleted_to)]).values():
                assert fut.result(30).low_watermark == deleted_to
        else:
            value = str(2 << 20) if free_by == "retention.bytes" else "1000"
            time.sleep(1.5)  # retention.ms: every record is older than it, on both replicas
            entry = ck_admin.ConfigEntry(free_by, value,
                                         incremental_operation=ck_admin.AlterConfigOpType.SET)
            [fut] = a.incremental_alter_configs([ck_admin.ConfigResource(
                "topic", topic, incremental_configs=[entry])]).values()
            fut.result(30)

        def log_start(b: int) -> int:
            got = metric(cl.brokers[b], "kafka_log_log_logstartoffset", topic=topic,
                         partition="0")
            return -1 if got is None else int(got)

        wait_for(lambda: b1.log_dir_states()[str(dirs[0])] == "online", 30,
                 lambda: f"broker 1's dir ONLINE again; its replica starts at {log_start(1)}, "
                         f"the leader's at {log_start(2)}")

        def rejoined() -> bool:
            views = [cl.metadata(b, [topic])["partitions"][(topic, 0)] for b in cl.brokers]
            return all(v[:2] == (2, leader_epoch) and sorted(v[3]) == [1, 2] and v[4] == []
                       for v in views)

        wait_for(rejoined, 60, lambda: "broker 1 back in the ISR at leader epoch "
                 f"{leader_epoch}: {cl.metadata(2, [topic])['partitions'][(topic, 0)]}")
        produce(20)  # replicated as before the dir filled

        def same_from_log_start() -> bool:
            start = log_start(2)
            return start > 0 and log_start(1) == start and \
                replica_batches(cl, 1, topic, 0, start) == replica_batches(cl, 2, topic, 0, start)

        wait_for(same_from_log_start, 30, lambda: f"one log start ({log_start(1)} on broker "
                 f"1, {log_start(2)} on broker 2) and the same batches from it on")
        if free_by == "delete_records":
            assert log_start(2) == deleted_to
        assert b1.proc is not None and b1.proc.poll() is None


def test_a_readmitted_dir_rejoins_leads_its_leaderless_partitions_and_ends_a_queued_deletion(
        tmp_path: Path) -> None:
    """KIP-112 ends with a broker restart; we don't (the issue's section 5, and case 19's
    second half). Broker 1's dir A (a loop ext4) holds t-0 (broker 1 leads, RF 3), solo-0
    (RF 1: only broker 1 has it) and a follower of gone-0. Dir A gets EIO under acks=all
    load on t: t-0 moves, solo-0 has no leader. Deleting gone then stays queued: brokers
    2 and 3 delete their replicas, broker 1's answers 56 from the OFFLINE dir, and the
    topic's znodes stay. The disk is repaired (unmounted and mounted again) and an
    operator runs `log-dirs readmit`: broker 1 tells the controller, which completes the
    deletion (gone-0's files leave dir A), gives solo-0 its leader back with its record,
    and makes broker 1 a follower of t-0 again: it catches up and re-enters the ISR, all
    without a restart. Every acknowledged record of t is read back once, and t-0's three
    replicas end byte-identical."""
    with disk_under_broker_1(tmp_path) as (cl, mnt, sick):
        b1 = cl.brokers[1]
        create_on(cl, sick, "t", [[1, 2, 3]])
        create_on(cl, sick, "solo", [[1]], min_isr=1)
        create_on(cl, sick, "gone", [[2, 1, 3]], min_isr=1)
        c = RawClient(b1.port)
        try:
            assert produce_raw(c, "solo", 0, [b"solo-before"]) == (0, 0)
        finally:
            c.close()
        wait_for(lambda: replicas_identical(cl, "gone", 1), 30, "gone-0 replicated")
        faults.sync_fs(mnt)  # what the repaired disk will hold
        loads = start_producers(cl, "t", 1)
        try:
            wait_for(lambda: all(len(x.acked) > 100 for x in loads), 60, "load running")
            faults.shutdown_fs(mnt)

            def parted() -> bool:
                for b in cl.brokers:
                    parts = cl.metadata(b, ["t", "solo"])["partitions"]
                    leader, _, _, isr, offline = parts[("t", 0)]
                    if leader in (1, -1) or 1 in isr or offline != [1]:
                        return False
                    if parts[("solo", 0)][0] != -1:
                        return False
                return True

            wait_for(parted, 30, "t-0 led elsewhere and solo-0 leaderless on every broker")
            a = ck_admin.AdminClient({"bootstrap.servers":
                                      cl.brokers[cl.controller()].bootstrap})
            a.delete_topics(["gone"], operation_timeout=0)
            wait_for(lambda: holding_dir(cl.brokers[2], "gone", 0) is None
                     and holding_dir(cl.brokers[3], "gone", 0) is None, 30,
                     "brokers 2 and 3 deleting their replicas of gone-0")
            zc = KazooClient(hosts=cl.zk.hosts)
            zc.start(15)
            try:
                time.sleep(2)  # the controller has broker 1's 56 by now; nothing completes
                assert zc.exists("/admin/delete_topics/gone")
                assert zc.exists("/brokers/topics/gone")

                # The repair, then the operator's readmit.
                subprocess.run(["umount", "-l", str(mnt)], check=True)
                subprocess.run(["mount", "-o", "loop", str(mnt.parent / "disk.img"),
                                str(mnt)], check=True)
                code, body = b1.admin("log-dirs/readmit", sick)
                assert code == 200, body
                assert b1.log_dir_states()[str(sick)] == "online"
                wait_for(lambda: not zc.exists("/brokers/topics/gone")
                         and not zc.exists("/admin/delete_topics/gone"), 30,
                         "the queued deletion completing after the readmit")
            finally:
                zc.stop()
                zc.close()
            no_log_dir_event_left(cl, 10)
            wait_for(lambda: not (sick / "gone-0").exists(), 30, "gone-0 off dir A")

            def healed() -> bool:
                for b in cl.brokers:
                    parts = cl.metadata(b, ["t", "solo"])["partitions"]
                    _, _, _, isr, offline = parts[("t", 0)]
                    if sorted(isr) != [1, 2, 3] or offline != []:
                        return False
                    if parts[("solo", 0)][0] != 1:
                        return False
                return True

            wait_for(healed, 60, lambda: "broker 1 back in t-0's ISR and leading solo-0: "
                     + str(cl.metadata(2, ["t", "solo"])["partitions"]))
            before = [len(x.acked) for x in loads]
            wait_for(lambda: all(len(x.acked) > n + 50
                                 for x, n in zip(loads, before, strict=True)), 60,
                     "acks=all writes after the readmit")
        finally:
            unanswered = [x.finish() for x in loads]
        assert b1.proc is not None and b1.proc.poll() is None, "broker 1 died"
        assert_every_ack_read_once(cl, "t", 1, loads, unanswered)
        wait_for(lambda: replicas_identical(cl, "t", 1), 30, "t-0 byte-identical")
        c = RawClient(b1.port)
        try:
            assert produce_raw(c, "solo", 0, [b"solo-after"]) == (0, 1)
        finally:
            c.close()
        assert [v for _, v in consume_all(cl, "solo", 1)[0]] == [b"solo-before",
                                                                 b"solo-after"]


def test_a_replaced_disk_is_refilled_from_the_leaders_log_start(tmp_path: Path) -> None:
    """The disk under broker 1's replica of t-0 dies for good and an empty one (a fresh
    filesystem) takes its place, while the leader had deleted the records below offset
    150 (DeleteRecords; retention alike). After `log-dirs readmit`, broker 1 re-creates
    the replica empty; its log ends below the leader's log start, where the leader
    answers OFFSET_OUT_OF_RANGE (the replica never came back before: it asked from 0
    forever). It starts at the leader's log start (at the batch holding it), catches up
    and rejoins the ISR without a restart, its records the leader's from there on."""
    with disk_under_broker_1(tmp_path) as (cl, mnt, sick):
        b1 = cl.brokers[1]
        create_on(cl, sick, "t", [[2, 1, 3]])
        c = RawClient(cl.brokers[2].port)
        try:
            for i in range(3):  # three batches of 100: offset 150 is inside the second
                assert produce_raw(c, "t", 0, [b"r%d" % j for j in range(
                    100 * i, 100 * i + 100)]) == (0, 100 * i)
        finally:
            c.close()
        wait_for(lambda: replicas_identical(cl, "t", 1), 30, "t-0 replicated")
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
        for fut in a.delete_records([ck.TopicPartition("t", 0, 150)]).values():
            assert fut.result(30).low_watermark == 150

        faults.shutdown_fs(mnt)
        wait_for(lambda: b1.log_dir_states()[str(sick)] == "offline", 30, "dir OFFLINE")
        # The replacement: a new, empty filesystem where the dead one was.
        replace_disk_and_readmit(b1, mnt, sick, ["t-0"])

        c = RawClient(cl.brokers[2].port)
        try:
            assert produce_raw(c, "t", 0, [b"after"]) == (0, 300)
        finally:
            c.close()

        def rejoined() -> bool:
            return all(sorted(cl.metadata(b, ["t"])["partitions"][("t", 0)][3])
                       == [1, 2, 3] for b in cl.brokers)

        wait_for(rejoined, 60, lambda: "broker 1 back in t-0's ISR: "
                 + str(cl.metadata(2, ["t"])["partitions"]))
        leader = partition_bytes(cl, 2, "t", 0)
        wait_for(lambda: leader.endswith(partition_bytes(cl, 1, "t", 0) or b"x"), 30,
                 "broker 1's replica the leader's from its log start on")
        # It starts at the batch holding offset 150, the second.
        assert [f.name for f in (sick / "t-0").glob("*.log")] == [
            "00000000000000000100.log"]
        assert len(partition_bytes(cl, 1, "t", 0) or b"") < len(leader)


def test_a_replica_readmitted_empty_does_not_lead_over_the_records_of_the_others(
        tmp_path: Path) -> None:
    """t-0 (min.insync.replicas 1) takes 100 records on its full ISR, then brokers 2 and
    3 stop, so broker 1 is its only ISR member, and broker 1's disk dies: t-0 has no
    leader. Brokers 2 and 3 come back (out of sync, unclean election off); broker 1's
    disk is replaced by an empty one and readmitted. Its replica, re-created empty, is
    still the ISR's one member: made leader, brokers 2 and 3 would truncate the 100
    records away to its empty log. It answers 56 instead; t-0 stays without a leader
    and the 100 records stay on brokers 2 and 3, for a replica that holds them (or an
    operator's unclean election, after which broker 1's replica follows and catches up
    without a restart) to serve. solo-0, whose only replica is broker 1's, leads again
    empty: there are no records elsewhere to keep."""
    with disk_under_broker_1(tmp_path) as (cl, mnt, sick):
        b1 = cl.brokers[1]
        create_on(cl, sick, "t", [[1, 2, 3]], min_isr=1)
        create_on(cl, sick, "solo", [[1]], min_isr=1)
        c = RawClient(b1.port)
        try:
            assert produce_raw(c, "t", 0, [b"r%d" % i for i in range(100)]) == (0, 0)
            assert produce_raw(c, "solo", 0, [b"s"]) == (0, 0)
        finally:
            c.close()
        wait_for(lambda: replicas_identical(cl, "t", 1), 30, "t-0 replicated")
        cl.brokers[2].stop()
        cl.brokers[3].stop()
        wait_for(lambda: cl.metadata(1, ["t"])["partitions"][("t", 0)][3] == [1], 30,
                 "broker 1 t-0's only ISR member")
        faults.shutdown_fs(mnt)
        wait_for(lambda: b1.log_dir_states()[str(sick)] == "offline", 30, "dir OFFLINE")
        cl.brokers[2].start()
        cl.brokers[3].start()
        wait_for(lambda: all(cl.metadata(b, ["t"])["partitions"].get(("t", 0), (0,))[0] == -1
                             for b in (2, 3)), 30, "t-0 without a leader")
        held = partition_bytes(cl, 2, "t", 0)
        assert held and held == partition_bytes(cl, 3, "t", 0)

        replace_disk_and_readmit(b1, mnt, sick, ["solo-0", "t-0"])
        no_log_dir_event_left(cl, 20)
        # solo-0 had no other replica to keep records: it leads again, empty, as a
        # Kafka broker's would after a restart.
        wait_for(lambda: cl.metadata(2, ["solo"])["partitions"][("solo", 0)][0] == 1, 30,
                 "solo-0 led by broker 1 again")
        c = RawClient(b1.port)
        try:
            assert produce_raw(c, "solo", 0, [b"again"]) == (0, 0)
        finally:
            c.close()
        time.sleep(3)  # the controller's election, had it made one, is done by now
        assert cl.metadata(2, ["t"])["partitions"][("t", 0)][0] == -1
        assert partition_bytes(cl, 2, "t", 0) == held
        assert partition_bytes(cl, 3, "t", 0) == held

        # The operator's unclean election gives t-0 a leader that holds the records.
        # Broker 1's replica, held offline by the controller since its 56, then follows
        # it and catches up: no broker restart (Kafka's would need one).
        elected = cli("leader-election", "--bootstrap-server", cl.brokers[2].bootstrap,
                      "--election-type", "unclean", "--topic", "t", "--partition", "0")
        assert elected.returncode == 0, elected.stderr
        wait_for(lambda: sorted(cl.metadata(2, ["t"])["partitions"][("t", 0)][3]) == [1, 2, 3],
                 60, "broker 1 back in t-0's ISR")
        wait_for(lambda: replicas_identical(cl, "t", 1), 30, "t-0's replicas identical")
        assert partition_bytes(cl, 1, "t", 0) == held


def test_a_leader_readmitted_before_the_controller_heard_follows_before_it_leads(
        tmp_path: Path) -> None:
    """t-0's leader is broker 1. Its disk dies (EIO, the writes it had not synced
    dropped) and is mounted again and readmitted while the controller is paused, so the
    controller never moved the leadership: to it broker 1 still leads at the same epoch.
    The readmitted replica may lack records the ISR acknowledged: it must not go on
    leading (a producer's appends there would start below offsets already acknowledged,
    and followers would truncate to it; bench_chaos found both). It serves nothing as
    leader from the fault on; told to lead again it answers 56, the controller elects
    another ISR member, and broker 1 follows it, catches up and rejoins the ISR: every
    acknowledged record is kept and the replicas are byte-identical."""
    import os
    import signal

    from kafka.protocol.producer import ProduceRequest

    from logstore.records import Record, build_batch

    with disk_under_broker_1(tmp_path) as (cl, mnt, sick):
        b1 = cl.brokers[1]
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:  # a controller elsewhere, to pause it without pausing broker 1
            for _ in range(20):
                if cl.controller() != 1:
                    break
                zc.delete("/controller")
                wait_for(lambda: zc.exists("/controller") is not None, 30, "a controller")
                time.sleep(0.5)
        finally:
            zc.stop()
            zc.close()
        controller = cl.controller()
        assert controller != 1
        create_on(cl, sick, "t", [[1, 2, 3]], min_isr=2)
        acked = [b"r%d" % i for i in range(100)]
        c = RawClient(b1.port)
        try:
            assert produce_raw(c, "t", 0, acked) == (0, 0)
        finally:
            c.close()
        wait_for(lambda: replicas_identical(cl, "t", 1), 30, "t-0 replicated")

        paused = cl.brokers[controller].proc
        assert paused is not None
        os.kill(paused.pid, signal.SIGSTOP)
        try:
            faults.shutdown_fs(mnt)
            wait_for(lambda: b1.log_dir_states()[str(sick)] == "offline", 10, "dir OFFLINE")
            subprocess.run(["umount", "-l", str(mnt)], check=True)
            subprocess.run(["mount", "-o", "loop", str(mnt.parent / "disk.img"), str(mnt)],
                           check=True)
            code, body = b1.admin("log-dirs/readmit", str(sick))
            assert code == 200, body
            # Not the leader any more, whatever the paused controller believes.
            T = ProduceRequest.TopicProduceData
            c = RawClient(b1.port)
            try:
                resp = c.request(ProduceRequest(
                    transactional_id=None, acks=1, timeout_ms=5000, topic_data=[T(
                        name="t", partition_data=[T.PartitionProduceData(
                            index=0, records=build_batch([Record(None, b"late")]))])]), 8)
            finally:
                c.close()
            assert resp.responses[0].partition_responses[0].error_code == \
                NOT_LEADER_OR_FOLLOWER
        finally:
            os.kill(paused.pid, signal.SIGCONT)

        wait_for(lambda: cl.metadata(2, ["t"])["partitions"][("t", 0)][0] in (2, 3), 60,
                 "t-0 led by broker 2 or 3")
        wait_for(lambda: sorted(cl.metadata(2, ["t"])["partitions"][("t", 0)][3]) == [1, 2, 3],
                 60, "broker 1 back in t-0's ISR")
        wait_for(lambda: replicas_identical(cl, "t", 1), 30, "t-0's replicas identical")
        got = [r.value for b in iter_batches(partition_bytes(cl, 1, "t", 0) or b"")
               for r in b.records()]
        assert got == acked
