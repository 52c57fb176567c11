"""Replication end to end: a real ZooKeeper, three logkeeper broker processes, real
Kafka clients. The leader tracks its followers, moves the high watermark with the
ISR, shrinks and expands the ISR through ZooKeeper, and answers acks=all only once the
ISR holds the write (docs/cluster.md, "Replication"; after Kafka's own
replication_test.py and its min.insync.replicas rules).
"""

from __future__ import annotations

import collections
import json
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
import pytest

from daemon.api import errors
from logstore.records import iter_batches

from .audit_helpers import spark_session  # noqa: F401  (the `spark` fixture)
from .cluster_helpers import SESSION_MS, Cluster, wait_for
from .daemon_helpers import RawClient
from .sick_helpers import metric, produce_raw

NOT_ENOUGH_REPLICAS = 19


def create(cl: Cluster, topic: str, partitions: int, *, min_isr: int = 2,
           assignment: list[list[int]] | None = None,
           config: dict[str, str] | None = None) -> dict[str, Any]:
    """Create `topic` with RF 3 (or `assignment`) and `config` through the controller;
    wait until every broker agrees on it and every ISR is full."""
    a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[1].bootstrap})
    config = {"min.insync.replicas": str(min_isr), **(config or {})}
    spec = (ck_admin.NewTopic(topic, len(assignment), replica_assignment=assignment,
                              config=config)
            if assignment else ck_admin.NewTopic(topic, partitions, 3, config=config))
    for fut in a.create_topics([spec], request_timeout=30).values():
        fut.result(30)
    return wait_for(lambda: full_isr(cl, topic, partitions), 30, f"{topic} agreed, ISRs full")


def full_isr(cl: Cluster, topic: str, partitions: int) -> dict[str, Any] | None:
    m = cl.agreed(topic, partitions)
    if m and all(len(v[3]) == len(v[2]) for k, v in m["partitions"].items() if k[0] == topic):
        return m
    return None


def isr_of(cl: Cluster, broker: int, topic: str, partition: int) -> list[int]:
    return sorted(cl.metadata(broker, [topic])["partitions"][(topic, partition)][3])


def partition_bytes(cl: Cluster, broker: int, topic: str, partition: int) -> bytes | None:
    """The .log bytes of one replica (whichever dir of `broker` holds it)."""
    for ld in cl.brokers[broker].log_dirs:
        pdir = ld / f"{topic}-{partition}"
        if pdir.is_dir():
            return b"".join(f.read_bytes() for f in sorted(pdir.glob("*.log")))
    return None


def replicas_identical(cl: Cluster, topic: str, partitions: int) -> bool:
    for part in range(partitions):
        got = {partition_bytes(cl, b, topic, part) for b in cl.brokers}
        if len(got) != 1 or None in got:
            return False
    return True


def consume_all(cl: Cluster, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of `topic` up to the high watermark: (offset, value) per partition."""
    bootstrap = ",".join(cl.brokers[b].bootstrap for b in cl.alive())
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "verify",
                     "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), 30)[1]
                for p in range(partitions)}
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        # Keyed by offset: a client that fetches an offset twice (a reconnect) is not a
        # duplicate in the log; the same value at two offsets is.
        got: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
        deadline = time.monotonic() + 120
        while any(len(got[p]) < ends[p] for p in got):
            assert time.monotonic() < deadline, "consuming timed out"
            for m in c.consume(10000, 0.5):
                if m.error() is None:
                    got[m.partition()][m.offset()] = m.value()
        return {p: sorted(got[p].items()) for p in got}
    finally:
        c.close()


def test_acks_all_answers_19_below_min_insync_and_resumes_when_brokers_return(
        tmp_path: Path) -> None:
    """RF 3, min.insync.replicas 2: acks=all works with the ISR full; with two of three
    brokers killed the ISR shrinks to the leader and acks=all is refused with 19 before
    anything is appended; the brokers come back, catch up, re-enter the ISR, and writes
    resume. Nothing refused is ever read."""
    with Cluster(tmp_path, dirs=1) as cl:
        meta = create(cl, "a", 1)
        leader = meta["partitions"][("a", 0)][0]
        c = RawClient(cl.brokers[leader].port)
        try:
            assert produce_raw(c, "a", 0, [b"one", b"two"]) == (0, 0)
            others = [b for b in cl.brokers if b != leader]
            for b in others:
                cl.brokers[b].kill()
            wait_for(lambda: isr_of(cl, leader, "a", 0) == [leader], SESSION_MS / 1000 + 20,
                     "the ISR to shrink to the leader")
            for _ in range(3):
                assert produce_raw(c, "a", 0, [b"refused"])[0] == NOT_ENOUGH_REPLICAS
            d = cl.brokers[leader]
            assert metric(d, "kafka_server_replicamanager_underminisrpartitioncount") == 1
            assert metric(d, "kafka_server_replicamanager_underreplicatedpartitions") == 1
            assert metric(d, "kafka_server_replicamanager_leadercount") == 1
            # The last broker standing is the controller, whoever was before.
            assert metric(d, "kafka_controller_kafkacontroller_activecontrollercount") == 1
            for b in others:
                cl.brokers[b].start()
            wait_for(lambda: full_isr(cl, "a", 1), 40, "the ISR to be full again")
            assert produce_raw(c, "a", 0, [b"three"]) == (0, 2)
            assert metric(d, "kafka_server_replicamanager_underminisrpartitioncount") == 0
            assert metric(d, "kafka_server_replicamanager_underreplicatedpartitions") == 0
            assert metric(d, "kafka_server_replicamanager_isrexpands_total") == 2
            assert sum(metric(cl.brokers[b], "kafka_controller_kafkacontroller_activecontrollercount")
                       for b in cl.brokers) == 1
        finally:
            c.close()
        got = consume_all(cl, "a", 1)[0]
        assert got == [(0, b"one"), (1, b"two"), (2, b"three")]
        wait_for(lambda: replicas_identical(cl, "a", 1), 30, "replicas byte-identical")
        # Every replica checkpoints its high watermark while running (every 5 s), so a
        # crash loses no more than that of it.
        wait_for(lambda: all(checkpointed_high_watermark(cl, b, "a", 0) == 3 for b in cl.brokers),
                 20, "high watermark 3 in every replica's replication-offset-checkpoint")


def controller_gauges(cl: Cluster) -> dict[str, float]:
    """The active controller's KafkaController gauges; every other live broker reports 0
    for each, as Kafka's."""
    names = ("activecontrollercount", "offlinepartitionscount", "globaltopiccount",
             "globalpartitioncount", "preferredreplicaimbalancecount", "topicstodeletecount")
    seen = {b: {n: metric(cl.brokers[b], f"kafka_controller_kafkacontroller_{n}") for n in names}
            for b in cl.alive()}
    active = [b for b, g in seen.items() if g["activecontrollercount"] == 1]
    assert len(active) == 1, seen
    assert all(v == 0 for b, g in seen.items() if b != active[0] for v in g.values()), seen
    return seen[active[0]]


def unclean_elections(cl: Cluster) -> float:
    return sum(metric(cl.brokers[b], "kafka_controller_controllerstats_uncleanleaderelections_total")
               or 0 for b in cl.alive())


def test_an_unclean_election_brings_a_partition_back_and_the_old_leader_truncates(
        tmp_path: Path) -> None:
    """unclean.leader.election.enable on the topic: its only in-sync replica (the leader)
    dies after taking writes its stopped follower never saw; the partition is offline
    until that follower comes back and is elected from outside the ISR. What only the
    old leader had is lost, as Kafka's unclean election loses it: the old leader, back,
    truncates to the new leader's log and follows it. The controller counts the
    election and the offline partition under Kafka's metric names."""
    with Cluster(tmp_path, dirs=1) as cl:
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[3].bootstrap})
        spec = ck_admin.NewTopic("u", 1, replica_assignment=[[1, 2]], config={
            "min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
        for fut in a.create_topics([spec], request_timeout=30).values():
            fut.result(30)
        wait_for(lambda: full_isr(cl, "u", 1), 30, "u agreed, ISR full")
        assert controller_gauges(cl)["globalpartitioncount"] >= 1
        c = RawClient(cl.brokers[1].port)
        try:
            assert produce_raw(c, "u", 0, [b"a0", b"a1"]) == (0, 0)  # on both replicas
            cl.brokers[2].kill()
            wait_for(lambda: isr_of(cl, 1, "u", 0) == [1], SESSION_MS / 1000 + 20,
                     "the ISR to shrink to the leader")
            assert produce_raw(c, "u", 0, [b"only-on-1"]) == (0, 2)
        finally:
            c.close()
        cl.brokers[1].kill()
        wait_for(lambda: cl.metadata(3, ["u"])["partitions"][("u", 0)][0] == -1,
                 SESSION_MS / 1000 + 20, "u-0 without a leader")
        wait_for(lambda: controller_gauges(cl)["offlinepartitionscount"] == 1, 20,
                 "the controller to count u-0 offline")
        assert unclean_elections(cl) == 0

        cl.brokers[2].start()
        wait_for(lambda: cl.metadata(3, ["u"])["partitions"][("u", 0)][0] == 2, 40,
                 "broker 2 elected leader of u-0")
        assert unclean_elections(cl) == 1
        assert controller_gauges(cl)["offlinepartitionscount"] == 0
        c = RawClient(cl.brokers[2].port)
        try:
            assert produce_raw(c, "u", 0, [b"b2"]) == (0, 2)  # offset 2 again: the loss
        finally:
            c.close()

        cl.brokers[1].start()
        wait_for(lambda: full_isr(cl, "u", 1), 40, "broker 1 back in the ISR as a follower")
        assert cl.metadata(3, ["u"])["partitions"][("u", 0)][0] == 2
        assert [v for _, v in consume_all(cl, "u", 1)[0]] == [b"a0", b"a1", b"b2"]
        wait_for(lambda: partition_bytes(cl, 1, "u", 0) == partition_bytes(cl, 2, "u", 0)
                 is not None, 30, "the two replicas byte-identical")
        # The preferred replica (1) no longer leads.
        assert controller_gauges(cl)["preferredreplicaimbalancecount"] >= 1


def checkpointed_high_watermark(cl: Cluster, broker: int, topic: str, partition: int) -> int | None:
    for ld in cl.brokers[broker].log_dirs:
        try:
            lines = (ld / "replication-offset-checkpoint").read_text().splitlines()
        except FileNotFoundError:
            continue
        for line in lines[2:]:
            t, p, off = line.split()
            if (t, int(p)) == (topic, partition):
                return int(off)
    return None


def test_a_paused_follower_leaves_the_isr_and_rejoins_when_it_catches_up(tmp_path: Path) -> None:
    """replica.lag.time.max.ms: a follower stopped (SIGSTOP) while the leader takes
    writes is dropped from the ISR by the leader (a conditional write of the partition
    state plus an isr_change notification, so every broker's Metadata shows it) well
    before its ZooKeeper session ends, and acks=all with min.insync.replicas 2 goes on
    meanwhile; resumed, it catches up and the leader adds it back."""
    extra = {"replica.lag.time.max.ms": 1500, "zookeeper.session.timeout.ms": 30000}
    with Cluster(tmp_path, dirs=1, extra=extra) as cl:
        ctl = cl.controller()
        leader, paused = [b for b in cl.brokers if b != ctl]
        create(cl, "s", 1, assignment=[[leader, ctl, paused]])
        p = ck.Producer({"bootstrap.servers": cl.brokers[leader].bootstrap, "acks": "all",
                         "linger.ms": 5})
        delivered: list[Any] = []

        def cb(err: Any, msg: Any) -> None:
            delivered.append(err)

        cl.brokers[paused].proc.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            for i in range(200):
                p.produce("s", b"v%d" % i, partition=0, on_delivery=cb)
                p.poll(0.02)
            wait_for(lambda: all(isr_of(cl, b, "s", 0) == sorted([leader, ctl])
                                 for b in (leader, ctl)), 20, "the paused follower out of the ISR")
            assert time.monotonic() - started < 25  # the lag, not the 30 s session, did it
            assert p.flush(30) == 0
            assert delivered == [None] * 200  # acks=all went on with two in the ISR
            d = cl.brokers[leader]
            assert metric(d, "kafka_server_replicamanager_isrshrinks_total") == 1
            assert metric(d, "kafka_server_replicamanager_underreplicatedpartitions") == 1
            assert metric(d, "kafka_server_replicamanager_underminisrpartitioncount") == 0
            # Two in the ISR, min.insync.replicas 2: one more out and acks=all stops.
            assert metric(d, "kafka_server_replicamanager_atminisrpartitioncount") == 1
        finally:
            cl.brokers[paused].proc.send_signal(signal.SIGCONT)
        wait_for(lambda: full_isr(cl, "s", 1), 30, "the follower back in the ISR")
        assert metric(cl.brokers[leader], "kafka_server_replicamanager_isrexpands_total") == 1
        assert metric(cl.brokers[leader], "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert metric(cl.brokers[leader], "kafka_server_replicamanager_atminisrpartitioncount") == 0
        wait_for(lambda: replicas_identical(cl, "s", 1), 30, "replicas byte-identical")
        # The resumed follower's fetcher reports no lag once it caught up.
        wait_for(lambda: metric(cl.brokers[paused], "kafka_server_replicafetchermanager_maxlag",
                                clientId="Replica") == 0, 10, "no follower lag")


class _KeptLog(logging.Logger):
    """A logger for librdkafka's `logger` setting that keeps its lines in `into`."""

    def __init__(self, into: collections.deque[str]):
        super().__init__("rdkafka-eos", logging.DEBUG)
        self.into = into

    def handle(self, record: logging.LogRecord) -> None:
        self.into.append(f"{time.strftime('%H:%M:%S')} {record.getMessage()}")


class Load:
    """An idempotent acks=all producer writing numbered records, tagged with `tag`, to
    every partition of a topic in a thread; `acked` gets each record the cluster
    acknowledged. `client` is "confluent" (librdkafka) or "kafka-python"."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *,
                 client: str = "confluent", tag: bytes = b"c",
                 config: dict[str, Any] | None = None):
        self.client = client
        # librdkafka's idempotence events (PID, drains, epoch bumps and why), kept to
        # explain a duplicate or a loss when the read-back finds one.
        self.eos_log: collections.deque[str] = collections.deque(maxlen=400)
        if client == "confluent":
            self.producer: Any = ck.Producer({
                "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                "linger.ms": 5, "message.timeout.ms": 180000, "retry.backoff.ms": 100,
                "socket.timeout.ms": 10000, "metadata.max.age.ms": 5000, "debug": "eos",
                "logger": _KeptLog(self.eos_log), **(config or {})})
        else:
            from kafka import KafkaProducer

            self.producer = KafkaProducer(
                bootstrap_servers=bootstrap.split(","), enable_idempotence=True, acks="all",
                linger_ms=5, retries=2**31 - 1, delivery_timeout_ms=180000,
                request_timeout_ms=10000, retry_backoff_ms=100, metadata_max_age_ms=5000,
                max_in_flight_requests_per_connection=5)
        self.topic, self.partitions, self.tag = topic, partitions, tag
        self.acked: list[tuple[int, bytes]] = []
        self.failed: list[Any] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.value()))
        else:
            self.failed.append(err)

    def _send(self, value: bytes, partition: int) -> None:
        if self.client == "confluent":
            self.producer.produce(self.topic, value, partition=partition, on_delivery=self._cb)
            self.producer.poll(0.003)
            return
        fut = self.producer.send(self.topic, value, partition=partition)
        fut.add_callback(lambda md, v=value: self.acked.append((md.partition, v)))
        fut.add_errback(self.failed.append)
        time.sleep(0.003)

    def _run(self) -> None:
        while not self._stop.is_set():
            value = self.tag + b"%09d" % self.sent
            try:
                self._send(value, self.sent % self.partitions)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.1)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def finish(self) -> int:
        """Stop sending, wait for every answer; the records left unanswered."""
        self._stop.set()
        self._thread.join()
        if self.client == "confluent":
            return self.producer.flush(120)
        self.producer.flush(120)
        self.producer.close(10)
        return self.sent - len(self.acked) - len(self.failed)


# The idempotent producers the failure tests run, each tagging its records.
PRODUCERS = (("confluent", b"c"), ("kafka-python", b"k"))


def start_producers(cl: Cluster, topic: str, partitions: int) -> list[Load]:
    """The idempotent acks=all producers of `PRODUCERS`, running."""
    bootstrap = ",".join(d.bootstrap for d in cl.brokers.values())
    loads = [Load(bootstrap, topic, partitions, client=client, tag=tag)
             for client, tag in PRODUCERS]
    for load in loads:
        load.__enter__()
    return loads


def test_the_replica_fetch_settings_reach_the_followers(tmp_path: Path) -> None:
    """replica.fetch.wait.max.ms (and its siblings) are the followers' own: with 100 ms a
    caught-up follower's fetch comes back from its leader's long poll ten times a
    second, where Kafka's default 500 ms makes it two. Counted on the leader (Fetch v12,
    the followers' version): two followers idle for 3 s send well over 20 fetches, which
    the default would not reach (about 12)."""
    extra = {"replica.fetch.wait.max.ms": 100, "replica.fetch.max.bytes": 65536}
    with Cluster(tmp_path, dirs=1, extra=extra) as cl:
        meta = create(cl, "w", 1, min_isr=1)
        leader = meta["partitions"][("w", 0)][0]
        c = RawClient(cl.brokers[leader].port)
        try:
            for _ in range(5):  # 5 batches of 200 KB: several fetches of 64 KiB each
                assert produce_raw(c, "w", 0, [b"x" * 1000] * 200)[0] == 0
        finally:
            c.close()
        wait_for(lambda: replicas_identical(cl, "w", 1), 30, "followers caught up")

        def fetches() -> float:
            return metric(cl.brokers[leader], "kafka_network_requestmetrics_requests_total",
                          request="Fetch", version="12") or 0.0

        before = fetches()
        time.sleep(3)
        got = fetches() - before
        assert got > 20, f"{got:g} follower fetches in 3 s"


def test_leader_killed_repeatedly_under_idempotent_acks_all_load_loses_and_duplicates_nothing(
        tmp_path: Path) -> None:
    """Kafka's replication_test.py, hard-kill flavour: RF 3, min.insync.replicas 2, an
    idempotent acks=all producer (`PRODUCERS`) running throughout;
    the leader of partition 0 is killed with SIGKILL three times, each time restarted
    once leadership has moved, and rejoins the ISR. Afterwards every acknowledged record
    is read back exactly once, each producer's records in the order it sent them per
    partition, nothing at all is duplicated, and the three replicas of each partition
    are byte-identical."""
    topic, parts = "e", 2
    with Cluster(tmp_path, dirs=1) as cl:
        create(cl, topic, parts)
        loads = start_producers(cl, topic, parts)
        try:
            for _ in range(3):
                time.sleep(1.5)
                meta = wait_for(lambda: full_isr(cl, topic, parts), 60, "full ISRs")
                victim = meta["partitions"][(topic, 0)][0]
                before = [len(load.acked) for load in loads]
                cl.brokers[victim].kill()

                def moved(victim: int = victim) -> Any:
                    m = cl.agreed(topic, parts)
                    return m and m["partitions"][(topic, 0)][0] not in (victim, -1)

                wait_for(moved, SESSION_MS / 1000 + 20, "a new leader for partition 0")
                wait_for(lambda before=before: all(len(load.acked) > n + 50
                                                   for load, n in zip(loads, before, strict=True)),
                         60, lambda before=before: "acks=all writes of every producer "
                         f"acknowledged by the new leader: before {before}, now "
                         f"{[len(load.acked) for load in loads]}")
                cl.brokers[victim].start()
            wait_for(lambda: full_isr(cl, topic, parts), 60, "the last victim back in the ISR")
            time.sleep(1)
        finally:
            unanswered = [load.finish() for load in loads]
        assert all(len(load.acked) > 300 for load in loads)
        assert_every_ack_read_once(cl, topic, parts, loads, unanswered)
        wait_for(lambda: replicas_identical(cl, topic, parts), 60, "replicas byte-identical")


def assert_every_ack_read_once(cl: Cluster, topic: str, partitions: int, loads: list[Load],
                               unanswered: list[int]) -> None:
    """After the producers finished (`unanswered`: what each left without an answer):
    nothing failed, and reading the topic back gives every acknowledged record once, no
    value twice, each producer's records in the order it sent them per partition."""
    assert unanswered == [0] * len(loads)
    for load in loads:
        assert load.failed == [], f"{load.client}: {load.failed[:3]}"
    got = consume_all(cl, topic, partitions)
    for part in range(partitions):
        try:
            resent = assert_no_duplicates(
                got[part], part, excuse=lambda offs, part=part: resent_under_a_new_epoch(
                    cl, topic, part, offs))
        except AssertionError as err:
            said = [f"{load.client}: {line}" for load in loads for line in load.eos_log]
            raise AssertionError(f"topic {topic}: {err}\nlibrdkafka's idempotence log:\n"
                                 + "\n".join(said[-150:])) from None
        for value, offsets in resent:
            print(f"topic {topic} partition {part}: {value!r} at offsets {offsets}, each copy "
                  "under a newer producer epoch: the client re-sent it after bumping its epoch "
                  "(librdkafka#4953), which no broker can tell from a new record")
        # The order is the client's first send: a copy it re-sent is not a record out
        # of order but the duplicate excused above.
        resent_copies = {off for _, offsets in resent for off in sorted(offsets)[1:]}
        values = [v for off, v in got[part] if off not in resent_copies]
        for load in loads:
            mine = [v for v in values if v.startswith(load.tag)]
            assert mine == sorted(mine), f"{load.client}: partition {part} out of order"
            lost = {v for p, v in load.acked if p == part} - set(mine)
            assert not lost, f"{load.client}: partition {part} lost {len(lost)} acked records"


def assert_no_duplicates(records: list[tuple[int, bytes]], partition: int, *,
                         excuse: Any = None) -> list[tuple[bytes, list[int]]]:
    """No value twice. `excuse(offsets)` may clear a duplicate the broker could not have
    prevented; those are returned (value, offsets)."""
    at: dict[bytes, list[int]] = {}
    for offset, value in records:
        at.setdefault(value, []).append(offset)
    dups = {v: offs for v, offs in at.items() if len(offs) > 1}
    excused = [(v, offs) for v, offs in dups.items() if excuse is not None and excuse(offs)]
    for v, _ in excused:
        del dups[v]
    assert not dups, f"partition {partition} holds duplicates (value: offsets): {list(dups.items())[:5]}"
    return excused


def resent_under_a_new_epoch(cl: Cluster, topic: str, partition: int, offsets: list[int]) -> bool:
    """Whether each copy of a duplicated record was written by the same idempotent
    producer under a newer producer epoch than the one before. A broker deduplicates a
    producer's retries within one epoch only (as Kafka's); librdkafka bumps its epoch
    when a request on another partition fails with sequence numbers skipped and then
    re-sends, under the new epoch, a message whose first send lost its connection and
    may have been written (librdkafka#4953, open; it duplicates against Kafka too).
    Read from the batch headers in the segment files of a live broker's replica that
    holds those offsets (a replica on a failed disk cannot be read: EIO)."""
    for br in cl.alive():
        try:
            data = partition_bytes(cl, br, topic, partition)
        except OSError:  # its dir's disk failed
            continue
        if data and _resent_in(data, offsets):
            return True
    return False


def _resent_in(data: bytes, offsets: list[int]) -> bool:
    found: dict[int, tuple[int, int]] = {}
    for batch in iter_batches(data, verify_crc=False):
        last = batch.base_offset + getattr(batch, "last_offset_delta", 0)
        for o in offsets:
            if batch.base_offset <= o <= last:
                found[o] = (getattr(batch, "producer_id", -1), getattr(batch, "producer_epoch", -1))
    if len(found) != len(offsets):
        return False
    ids = {found[o][0] for o in offsets}
    epochs = [found[o][1] for o in sorted(offsets)]
    return len(ids) == 1 and -1 not in ids and all(a < b for a, b in zip(epochs, epochs[1:], strict=False))


def test_only_a_resend_under_a_newer_producer_epoch_is_excused(tmp_path: Path) -> None:
    """The read-back's one excuse for a duplicate, checked on segment files: the same
    record written by one producer under epochs 5 then 6 is the client's re-send; under
    one epoch twice, or by two producers, it is a broker duplicate and fails."""
    from types import SimpleNamespace

    from logstore.records import Record, build_batch

    def replica(batches: list[tuple[int, int, int]]) -> Any:  # (producer, epoch, seq)
        pdir = tmp_path / f"r{len(list(tmp_path.iterdir()))}" / "t-0"
        pdir.mkdir(parents=True)
        pdir.joinpath("00000000000000000000.log").write_bytes(b"".join(
            build_batch([Record(None, b"v")], base_offset=i, producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq)
            for i, (pid, epoch, seq) in enumerate(batches)))
        return SimpleNamespace(brokers={1: SimpleNamespace(log_dirs=[pdir.parent])},
                               alive=lambda: [1])

    resent = replica([(7, 5, 493), (7, 6, 0)])
    assert resent_under_a_new_epoch(resent, "t", 0, [0, 1])
    # A replica that cannot be read (its disk failed: here a directory where the segment
    # is, which raises as EIO does) is passed over for the next live broker's.
    broken = tmp_path / "broken" / "t-0"
    (broken / "00000000000000000000.log").mkdir(parents=True)
    resent.brokers = {2: SimpleNamespace(log_dirs=[broken.parent]), **resent.brokers}
    resent.alive = lambda: [2, 1]
    assert resent_under_a_new_epoch(resent, "t", 0, [0, 1])
    assert assert_no_duplicates([(0, b"v"), (1, b"v")], 0, excuse=lambda offs: resent_under_a_new_epoch(
        resent, "t", 0, offs)) == [(b"v", [0, 1])]
    for batches in ([(7, 5, 493), (7, 5, 494)], [(7, 5, 0), (8, 6, 0)], [(7, 6, 0), (7, 5, 0)]):
        cl = replica(batches)
        assert not resent_under_a_new_epoch(cl, "t", 0, [0, 1]), batches
        with pytest.raises(AssertionError, match="holds duplicates"):
            assert_no_duplicates([(0, b"v"), (1, b"v")], 0,
                                 excuse=lambda offs, cl=cl: resent_under_a_new_epoch(cl, "t", 0, offs))


def test_an_old_leader_with_an_uncommitted_tail_truncates_when_it_returns(
        tmp_path: Path, spark: Any) -> None:
    """The diverged-follower case (Fetch v12): the leader takes writes its followers
    never fetch (both stopped; acks=1, so the high watermark stays), then dies. A new
    leader is elected from the ISR and takes new writes at the next epoch. The old
    leader restarts as a follower, is told where its log left the new leader's, cuts its
    uncommitted tail and copies the new records: every replica is byte-identical, the
    lost tail is read nowhere, and the Spark audit's replica comparison of the three
    brokers' dirs finds nothing."""
    from spark_audit import main as audit_main

    with Cluster(tmp_path, dirs=1, extra={"replica.lag.time.max.ms": 60000}) as cl:
        meta = create(cl, "d", 1, min_isr=1)
        old = meta["partitions"][("d", 0)][0]
        followers = [b for b in cl.brokers if b != old]
        c = RawClient(cl.brokers[old].port)
        try:
            assert produce_raw(c, "d", 0, [b"c0", b"c1", b"c2"]) == (0, 0)  # acks=all
            for b in followers:
                cl.brokers[b].proc.send_signal(signal.SIGSTOP)
            # The followers' fetches already waiting at the leader (long polls of up to
            # replica.fetch.wait.max.ms) end first, or they would carry the tail away.
            time.sleep(1.5)
            try:
                for i in range(3):
                    assert produce_acks1(c, "d", [b"tail%d" % i])[0] == 0
            finally:
                cl.brokers[old].kill()
                for b in followers:
                    cl.brokers[b].proc.send_signal(signal.SIGCONT)
        finally:
            c.close()

        def new_leader() -> Any:
            m = cl.agreed("d", 1)
            return m and m["partitions"][("d", 0)][0] not in (old, -1) and m

        m = wait_for(new_leader, SESSION_MS / 1000 + 20, "a new leader")
        leader = m["partitions"][("d", 0)][0]
        c = RawClient(cl.brokers[leader].port)
        try:
            assert produce_raw(c, "d", 0, [b"n0", b"n1"]) == (0, 3)
        finally:
            c.close()
        cl.brokers[old].start()
        wait_for(lambda: full_isr(cl, "d", 1), 40, "the old leader back in the ISR")
        wait_for(lambda: replicas_identical(cl, "d", 1), 30, "replicas byte-identical")
        assert [v for _, v in consume_all(cl, "d", 1)[0]] == [b"c0", b"c1", b"c2", b"n0", b"n1"]
        assert "diverged from leader" in cl.brokers[old].stderr()
        out = tmp_path / "audit"
        roots = [f"broker{b}={d.log_dirs[0]}" for b, d in cl.brokers.items()]
        assert audit_main.main(["--quiet", "--out", str(out), *roots]) == 0


def produce_acks1(c: RawClient, topic: str, values: list[bytes]) -> tuple[int, int]:
    """(error, base offset) of an acks=1 produce of `values` as one batch to partition 0."""
    from kafka.protocol.producer import ProduceRequest

    from logstore.records import Record, build_batch

    T = ProduceRequest[8].TopicProduceData
    resp = c.request(ProduceRequest[8](transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=build_batch(
            [Record(None, v, [], int(time.time() * 1000)) for v in values]))])]), 8)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def _deleted_records_setup(cl: Cluster, topic: str) -> tuple[int, list[int]]:
    """RF 3 `topic`, led by a broker that is not the controller (its kill -9 then moves
    only the leadership), holding 300 records in batches of 50, on every replica:
    (leader, followers)."""
    ctl = cl.controller()
    leader = next(b for b in cl.brokers if b != ctl)
    followers = [b for b in cl.brokers if b != leader]
    create(cl, topic, 1, assignment=[[leader, *followers]])
    c = RawClient(cl.brokers[leader].port)
    try:
        for i in range(6):
            assert produce_raw(c, topic, 0, [b"r%d" % j for j in range(50 * i, 50 * i + 50)]
                               ) == (0, 50 * i)
    finally:
        c.close()
    wait_for(lambda: replicas_identical(cl, topic, 1), 30, f"{topic}-0 on every replica")
    return leader, followers


def _after_killing_the_leader(cl: Cluster, topic: str, leader: int, offset: int) -> None:
    """kill -9 `leader`: a follower leads, and its log starts at `offset`, as ListOffsets
    EARLIEST (a real client) and a consumer from the beginning see it."""
    cl.brokers[leader].kill()
    other = next(b for b in cl.alive())
    wait_for(lambda: cl.metadata(other, [topic])["partitions"][(topic, 0)][0] not in (-1, leader),
             SESSION_MS / 1000 + 20, "a follower elected leader")
    bootstrap = ",".join(cl.brokers[b].bootstrap for b in cl.alive())
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "after-kill",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        # The new leader's high watermark reaches 300 once the other follower fetches
        # from it (it may have led from a high watermark a fetch behind).
        wait_for(lambda: c.get_watermark_offsets(ck.TopicPartition(topic, 0), 30)
                 == (offset, 300), 30, f"{topic}-0 from {offset} to 300 at the new leader")
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while len(got) < 300 - offset:
            assert time.monotonic() < deadline, f"consumed only {sorted(got)[:5]}..."
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    got[m.offset()] = m.value()
        assert min(got) == offset and got[offset] == b"r%d" % offset
    finally:
        c.close()


def test_delete_records_waits_for_the_live_followers_and_times_out_while_they_are_stopped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's DelayedDeleteRecords: the answer waits until every replica on a live
    broker has moved its log start to the offset asked (each follower's, as its Fetch
    requests tell it). Both followers stopped (SIGSTOP: still alive in the metadata and
    in the ISR), `logkeeper delete-records` with a 1 s timeout answers
    RequestTimedOutError, not a low watermark that only the leader holds (a kill -9 of
    the leader then brought the records back). The leader's own delete stays done.
    Resumed, the followers follow; DeleteRecords answers the offset, and after a kill
    -9 of the leader the new leader starts there."""
    from daemon.tools import delete_records as tool

    with Cluster(tmp_path, dirs=1) as cl:
        leader, followers = _deleted_records_setup(cl, "dr")
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"partitions": [{"topic": "dr", "partition": 0,
                                                    "offset": 150}], "version": 1}))
        capsys.readouterr()
        for b in followers:
            cl.brokers[b].proc.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            code = tool.main(["--bootstrap-server", cl.brokers[leader].bootstrap,
                              "--offset-json-file", str(plan), "--timeout-ms", "1000"])
            took = time.monotonic() - started
        finally:
            for b in followers:
                cl.brokers[b].proc.send_signal(signal.SIGCONT)
        out = capsys.readouterr().out
        assert code == 1, out
        assert "partition: dr-0\terror: RequestTimedOutError (7)" in out, out
        assert "low_watermark" not in out and "150 within 1000 ms" in out, out
        assert 1.0 <= took < 4, took
        assert metric(cl.brokers[leader], "kafka_log_log_logstartoffset", topic="dr",
                      partition="0") == 150  # deleted on the leader all the same

        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[leader].bootstrap})
        for fut in a.delete_records([ck.TopicPartition("dr", 0, 150)],
                                    operation_timeout=30, request_timeout=40).values():
            assert fut.result(40).low_watermark == 150
        _after_killing_the_leader(cl, "dr", leader, 150)


def test_delete_records_answers_promptly_once_the_live_followers_moved(tmp_path: Path) -> None:
    """With every follower fetching, DeleteRecords answers within a fetch round, and
    only once every replica's log start is at the offset asked: a kill -9 of the leader
    right after the answer leaves the new leader starting there (the followers had
    moved before the answer, not at a fetch that came after it, or never)."""
    with Cluster(tmp_path, dirs=1) as cl:
        leader, followers = _deleted_records_setup(cl, "dq")
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[leader].bootstrap})
        # Answered with success: the followers moved within the operation timeout (a
        # partition still waiting at it is answered REQUEST_TIMED_OUT, which raises here).
        for fut in a.delete_records([ck.TopicPartition("dq", 0, 150)],
                                    operation_timeout=30, request_timeout=40).values():
            assert fut.result(40).low_watermark == 150
        _after_killing_the_leader(cl, "dq", leader, 150)
        for b in followers:
            assert metric(cl.brokers[b], "kafka_log_log_logstartoffset", topic="dq",
                          partition="0") == 150


def test_a_new_leader_whose_high_watermark_lags_its_epoch_answers_offset_not_available(
        tmp_path: Path) -> None:
    """A leader elected with records past the high watermark it heard of as a follower
    (the old leader's followers had not all fetched them) does not know its high
    watermark until they fetch from it: Kafka's ListOffsets answers a client's latest,
    or an offset by timestamp past the high watermark, OFFSET_NOT_AVAILABLE (78,
    retriable; KIP-207) meanwhile, not the stale high watermark, and the real end once
    the followers caught up. The replica that stays behind is stopped (SIGSTOP, its
    ZooKeeper session long enough to keep it in the metadata) while the leader takes
    acks=1 writes, and the leader is killed."""
    from kafka.protocol.consumer import ListOffsetsRequest
    from kazoo.client import KazooClient

    behind = 3
    with Cluster(tmp_path, dirs=1, extra={"replica.lag.time.max.ms": 60000},
                 per_broker={behind: {"zookeeper.session.timeout.ms": 60000}}) as cl:
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:  # the controller must stay up and running: not the broker stopped
            while cl.controller() == behind:
                zc.delete("/controller")
                wait_for(lambda: cl.controller() > 0, 30, "a controller elected again")
        finally:
            zc.stop()
            zc.close()
        ctl = cl.controller()
        [leader] = [b for b in cl.brokers if b not in (ctl, behind)]
        create(cl, "w", 1, min_isr=1, assignment=[[leader, ctl, behind]])
        c = RawClient(cl.brokers[leader].port)
        try:
            assert produce_raw(c, "w", 0, [b"v%d" % i for i in range(100)]) == (0, 0)
        finally:
            c.close()
        wait_for(lambda: replicas_identical(cl, "w", 1), 30, "every replica holding 100")
        R = ListOffsetsRequest[7]

        def list_offset(broker: int, timestamp: int, replica_id: int = -1) -> tuple[int, int]:
            q = RawClient(cl.brokers[broker].port)
            try:
                resp = q.request(R(replica_id=replica_id, isolation_level=0, topics=[
                    R.ListOffsetsTopic(name="w", partitions=[
                        R.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1,
                            timestamp=timestamp)])]), 7)
            finally:
                q.close()
            got = resp.topics[0].partitions[0]
            return got.error_code, got.offset

        wait_for(lambda: list_offset(leader, -1) == (0, 100), 30, "the high watermark at 100")
        cl.brokers[behind].proc.send_signal(signal.SIGSTOP)
        try:
            p = ck.Producer({"bootstrap.servers": cl.brokers[leader].bootstrap, "acks": 1})
            for i in range(50):
                p.produce("w", b"late%d" % i, partition=0)
            assert p.flush(30) == 0
            wait_for(lambda: partition_bytes(cl, ctl, "w", 0)
                     == partition_bytes(cl, leader, "w", 0), 30, "the controller's replica at 150")
            assert list_offset(leader, -1) == (0, 100)  # the stopped replica holds it there
            cl.brokers[leader].kill()
            wait_for(lambda: cl.metadata(ctl, ["w"])["partitions"][("w", 0)][0] == ctl, 30,
                     "the controller's replica leading")
            assert list_offset(ctl, -1) == (errors.OFFSET_NOT_AVAILABLE, -1)
            assert list_offset(ctl, -3) == (errors.OFFSET_NOT_AVAILABLE, -1)  # max timestamp
            assert list_offset(ctl, -2) == (0, 0)  # the earliest is known
            assert list_offset(ctl, -1, replica_id=-2) == (0, 100)  # a debugging ask
        finally:
            cl.brokers[behind].proc.send_signal(signal.SIGCONT)
        wait_for(lambda: list_offset(ctl, -1) == (0, 150), 30,
                 "the latest offset once the resumed replica fetched")
        assert list_offset(ctl, -3)[0] == 0


def test_list_offsets_answers_the_leader_epoch_of_the_offset_it_found_as_kafka_does(
        tmp_path: Path) -> None:
    """AdminClient.list_offsets' leader epoch (the one a consumer validates its position
    with after a seek by time): Kafka's is the epoch the found record was written at
    (the log start's for earliest), the current one for latest, and none (-1) when no
    record matched or the partition errs, not the current epoch every time."""
    from kafka.protocol.consumer import ListOffsetsRequest

    with Cluster(tmp_path, brokers=2, dirs=1) as cl:
        create(cl, "e", 1, min_isr=1, assignment=[[1, 2]])
        t0 = int(time.time() * 1000) - 600_000
        p = ck.Producer({"bootstrap.servers": cl.brokers[1].bootstrap, "acks": "all"})
        for i in range(10):
            p.produce("e", b"first%d" % i, partition=0, timestamp=t0 + i * 1000)
        assert p.flush(30) == 0
        wait_for(lambda: replicas_identical(cl, "e", 1), 30, "both replicas holding 10")
        cl.brokers[1].kill()
        before = cl.metadata(2, ["e"])["partitions"][("e", 0)][1]
        wait_for(lambda: cl.metadata(2, ["e"])["partitions"][("e", 0)][0] == 2, 30,
                 "broker 2 leading")
        epoch = cl.metadata(2, ["e"])["partitions"][("e", 0)][1]
        assert epoch > before
        p = ck.Producer({"bootstrap.servers": cl.brokers[2].bootstrap, "acks": "all"})
        for i in range(10):
            p.produce("e", b"second%d" % i, partition=0, timestamp=t0 + 100_000 + i * 1000)
        assert p.flush(30) == 0
        a = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
        tp = ck.TopicPartition("e", 0)
        S = ck_admin.OffsetSpec

        def listed(spec: Any) -> tuple[int, int | None]:
            got = a.list_offsets({tp: spec}, request_timeout=30)[tp].result(30)
            return got.offset, got.leader_epoch

        assert listed(S.earliest()) == (0, before)
        assert listed(S.latest()) == (20, epoch)
        assert listed(S.for_timestamp(t0)) == (0, before)
        assert listed(S.for_timestamp(t0 + 100_000 + 5000)) == (15, epoch)
        assert listed(S.max_timestamp()) == (19, epoch)
        assert listed(S.for_timestamp(t0 + 999_000)) == (-1, None)  # no record that late

        R = ListOffsetsRequest[7]
        c = RawClient(cl.brokers[2].port)
        try:
            resp = c.request(R(replica_id=-1, isolation_level=0, topics=[
                R.ListOffsetsTopic(name="e", partitions=[
                    R.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=3, current_leader_epoch=-1, timestamp=-1)])]), 7)
        finally:
            c.close()
        err = resp.topics[0].partitions[0]
        assert (err.error_code, err.offset, err.leader_epoch) == (
            errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
