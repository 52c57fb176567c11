"""Transaction verification (KIP-890's first part, transaction.partition.verification.enable):
a partition leader asks the transaction coordinator before it writes the first batch of
a transaction, so a batch the transaction does not hold never opens a transaction no
marker will close. Without it, that batch holds the partition's last stable offset
for ever (a hanging transaction): read_committed consumers see nothing written after
it, however many transactions commit there. The same partitions are written both ways
here, and the test says what a read_committed consumer gets.

The batches the coordinator must refuse are sent as requests (kafka-python's protocol
classes): a producer's batch for a partition it never added, and its batch delayed past
the abort of its transaction, both what KIP-890 names. Everything else is real clients:
confluent-kafka transactional producers and read_committed consumers. In a cluster the
coordinator of the transactional id is on another broker than the leader, and the
question goes over the wire (AddPartitionsToTxn v4)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DescribeTransactionsRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)

from daemon.api import errors
from logstore.records import Record, batch_producer, build_batch
from tests.cluster_helpers import Cluster
from tests.daemon_helpers import REPO, RawClient, running
from tests.install_helpers import copy_checkout
from tests.sick_helpers import metric, wait_for

SETTINGS = {"transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0}


class TxnClient:
    """A transactional producer's requests, one at a time, as a client sends them."""

    def __init__(self, port: int, tid: str):
        """Through the broker at `port`, to `tid`'s coordinator."""
        self.tid = tid
        ask = RawClient(port, timeout=30)
        try:
            found = wait_for(lambda: (r := ask.request(FindCoordinatorRequest[1](
                key=tid, key_type=1), 1)).error_code == 0 and r, 30, "the coordinator")
        finally:
            ask.close()
        self.coordinator = found.node_id
        self.c = RawClient(found.port, timeout=30)
        self.pid, self.epoch = wait_for(self._init, 30, "a producer id")
        self.seq: dict[tuple[str, int], int] = {}

    def _init(self) -> tuple[int, int] | None:
        r = self.c.request(InitProducerIdRequest(
            transactional_id=self.tid, transaction_timeout_ms=60000, producer_id=-1,
            producer_epoch=-1), 3)
        return (r.producer_id, r.producer_epoch) if r.error_code == 0 else None

    def add(self, topic: str, partition: int) -> int:
        AP = AddPartitionsToTxnRequest
        r = self.c.request(AP(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch, v3_and_below_topics=[
                AP.AddPartitionsToTxnTopic(name=topic, partitions=[partition])]), 3)
        return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    def batch(self, topic: str, partition: int, values: list[bytes]) -> bytes:
        seq = self.seq.get((topic, partition), 0)
        return build_batch([Record(None, v, [], int(time.time() * 1000)) for v in values],
                           producer_id=self.pid, producer_epoch=self.epoch,
                           base_sequence=seq, transactional=True)

    def produce(self, batches: dict[tuple[str, int], bytes], *, port: int | None = None
                ) -> dict[tuple[str, int], Any]:
        """Each batch to its partition in one Produce (to `port`, default the
        coordinator's broker): each partition's answer. A batch written moves that
        partition's sequence on."""
        T = ProduceRequest.TopicProduceData
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), records in batches.items():
            by_topic.setdefault(topic, []).append(
                T.PartitionProduceData(index=partition, records=records))
        c = self.c if port is None else RawClient(port, timeout=30)
        try:
            r = c.request(ProduceRequest(transactional_id=self.tid, acks=-1, timeout_ms=10000,
                                         topic_data=[T(name=t, partition_data=ps)
                                                     for t, ps in by_topic.items()]), 8)
        finally:
            if c is not self.c:
                c.close()
        out = {(t.name, p.index): p for t in r.responses for p in t.partition_responses}
        for key, p in out.items():
            if p.error_code == 0:
                self.seq[key] = self.seq.get(key, 0) + _count(batches[key])
        return out

    def end(self, commit: bool) -> int:
        return self.c.request(EndTxnRequest(transactional_id=self.tid, producer_id=self.pid,
                                            producer_epoch=self.epoch, committed=commit),
                              3).error_code

    def close(self) -> None:
        self.c.close()


def _count(batch: bytes) -> int:
    return batch_producer(batch)[3]  # the batch's record count


def last_stable_offset(port: int, topic: str, partition: int) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    c = RawClient(port)
    try:
        r = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[
            T(name=topic, partitions=[T.ListOffsetsPartition(
                partition_index=partition, current_leader_epoch=-1, timestamp=-1)])]), 5)
    finally:
        c.close()
    return r.topics[0].partitions[0].offset


def commit_with_a_client(bootstrap: str, tid: str, records: dict[int, list[bytes]],
                         topic: str) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    for partition, values in records.items():
        for v in values:
            p.produce(topic, v, partition=partition)
    p.commit_transaction(30)


def read_committed(bootstrap: str, topic: str, partitions: list[int], *,
                   settle_s: float = 3.0) -> dict[int, list[bytes]]:
    """What a read_committed consumer gets of each partition until nothing more comes."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.time_ns()}",
                     "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    got: dict[int, list[bytes]] = {p: [] for p in partitions}
    quiet = time.monotonic() + settle_s + 5
    try:
        while time.monotonic() < quiet:
            m = c.poll(0.3)
            if m is None or m.error() is not None:
                continue
            got[m.partition()].append(m.value())
            quiet = time.monotonic() + settle_s
    finally:
        c.close()
    return got


def transaction_state(port: int, transactional_id: str) -> str:
    """The transaction's state as its coordinator describes it (DescribeTransactions)."""
    c = RawClient(port)
    try:
        r = c.request(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0)
        return r.transaction_states[0].transaction_state
    finally:
        c.close()


@pytest.mark.parametrize("verification", [True, False], ids=["verified", "unverified"])
def test_a_batch_its_transaction_does_not_hold_never_hangs_the_partition(
        tmp_path: Path, verification: bool) -> None:
    """Partition 0: a transaction aborted, then its producer's delayed batch arrives.
    Partition 1: the producer writes to it without adding it. Verified, both are
    refused and later commits there are read; unverified, both are written and every
    read_committed consumer stops at them."""
    settings = {**SETTINGS, "transaction.partition.verification.enable": verification}
    with running(tmp_path, settings, dirs=1) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([NewTopic("v", 2, 1)])["v"].result(30)
        txn = TxnClient(d.port, "late")
        try:
            assert txn.add("v", 0) == 0
            first = txn.produce({("v", 0): txn.batch("v", 0, [b"aborted-0"])})
            assert first[("v", 0)].error_code == 0, first
            delayed = txn.batch("v", 0, [b"delayed"])  # sent now, arrives after the abort
            assert txn.end(commit=False) == 0
            wait_for(lambda: last_stable_offset(d.port, "v", 0) == 2, 30,
                     "the abort marker written")
            # The coordinator ends the abort after its markers are written: until then
            # (PrepareAbort) a verification is answered CONCURRENT_TRANSACTIONS, which
            # the leader gives the producer as NOT_ENOUGH_REPLICAS, to retry; as Kafka.
            wait_for(lambda: transaction_state(d.port, "late") == "CompleteAbort", 30,
                     "the abort completed at the coordinator")
            late = txn.produce({("v", 0): delayed, ("v", 1): txn.batch("v", 1, [b"never-added"])})
            codes = {k: p.error_code for k, p in late.items()}
            if verification:
                assert codes == {("v", 0): errors.INVALID_TXN_STATE,
                                 ("v", 1): errors.INVALID_TXN_STATE}, late
                assert late[("v", 1)].error_message == \
                    "Partition was not added to the transaction"
            else:
                assert codes == {("v", 0): 0, ("v", 1): 0}, late
            # Kafka's VerificationFailureRate and VerificationTimeMs: two partitions
            # refused; two questions (the first batch of the transaction, then both
            # late ones in one).
            assert (metric(d, "kafka_server_addpartitionstotxnmanager_verification_failures_"
                              "total", error=str(errors.INVALID_TXN_STATE)) or 0) == \
                (2 if verification else 0)
            assert metric(d, "kafka_server_addpartitionstotxnmanager_verification_time_"
                             "seconds_count") == (2 if verification else 0)
        finally:
            txn.close()

        commit_with_a_client(d.bootstrap, "app", {0: [b"c-0", b"c-1"], 1: [b"c-2"]}, "v")
        got = read_committed(d.bootstrap, "v", [0, 1])
        if verification:
            assert got == {0: [b"c-0", b"c-1"], 1: [b"c-2"]}
            assert last_stable_offset(d.port, "v", 0) == 5  # 1 aborted + its marker + 2 + marker
        else:
            # The hanging transactions: nothing after them reaches read_committed consumers.
            assert got == {0: [], 1: []}
            assert (last_stable_offset(d.port, "v", 0),
                    last_stable_offset(d.port, "v", 1)) == (2, 0)


def test_transactional_offsets_need_their_partition_added(tmp_path: Path) -> None:
    """A TxnOffsetCommit before its AddOffsetsToTxn is refused (INVALID_TXN_STATE) and
    writes nothing; after it, the offsets are pending until the commit, then the
    group's. A v3 commit with generation -1 is from outside any membership, whatever
    member id it carries (Kafka's validateOffsetCommit): the group has no members, so
    it is written; with a generation it must name a member (UNKNOWN_MEMBER_ID)."""
    with running(tmp_path, SETTINGS, dirs=1) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([NewTopic("in", 1, 1)])["in"].result(30)
        wait_for(lambda: RawClient(d.port).request(
            FindCoordinatorRequest[1](key="g", key_type=0), 1).error_code == 0, 30,
            "the group coordinator")
        txn = TxnClient(d.port, "offsets")
        TO = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic

        def commit_offset(offset: int) -> int:
            r = txn.c.request(TxnOffsetCommitRequest(
                transactional_id="offsets", group_id="g", producer_id=txn.pid,
                producer_epoch=txn.epoch, topics=[TO(name="in", partitions=[
                    TO.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset,
                        committed_metadata="")])]), 1)
            return r.topics[0].partitions[0].error_code

        def commit_as_member(offset: int, generation: int, member_id: str) -> int:
            V3 = TxnOffsetCommitRequest[3].TxnOffsetCommitRequestTopic
            r = txn.c.request(TxnOffsetCommitRequest[3](
                transactional_id="offsets", group_id="g", producer_id=txn.pid,
                producer_epoch=txn.epoch, generation_id=generation, member_id=member_id,
                group_instance_id=None, topics=[V3(name="in", partitions=[
                    V3.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset,
                        committed_leader_epoch=-1, committed_metadata="")])]), 3)
            return r.topics[0].partitions[0].error_code

        try:
            assert commit_offset(7) == errors.INVALID_TXN_STATE
            assert txn.c.request(AddOffsetsToTxnRequest(
                transactional_id="offsets", producer_id=txn.pid, producer_epoch=txn.epoch,
                group_id="g"), 1).error_code == 0
            assert commit_as_member(8, 2, "left-long-ago") == errors.UNKNOWN_MEMBER_ID
            assert commit_as_member(8, -1, "left-long-ago") == 0
            assert commit_offset(9) == 0
            assert txn.end(commit=True) == 0
        finally:
            txn.close()
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "g"})
        try:
            got = wait_for(lambda: c.committed([ck.TopicPartition("in", 0)], 10)[0].offset == 9
                           or None, 30, "the committed offset")
            assert got
        finally:
            c.close()


def test_verification_is_turned_off_and_on_without_a_restart(tmp_path: Path) -> None:
    """transaction.partition.verification.enable is a dynamic broker config, as in
    Kafka: set false for the cluster's brokers (kafka-configs.sh --entity-default), an
    unadded partition's batch is written; deleted again, the file's true applies."""
    def set_default(value: str | None) -> None:
        key = "transaction.partition.verification.enable"
        r = subprocess.run([sys.executable, "-m", "daemon.cli", "configs", "alter",
                            "--bootstrap-server", d.bootstrap, "--broker-defaults",
                            *(["--delete-config", key] if value is None
                              else ["--add-config", f"{key}={value}"])],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr

    with running(tmp_path, SETTINGS, dirs=1) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([NewTopic("d", 3, 1)])["d"].result(30)
        txn = TxnClient(d.port, "toggled")
        try:
            assert txn.produce({("d", 0): txn.batch("d", 0, [b"x"])})[("d", 0)].error_code \
                == errors.INVALID_TXN_STATE
            set_default("false")
            assert txn.produce({("d", 1): txn.batch("d", 1, [b"y"])})[("d", 1)].error_code == 0
            set_default(None)
            assert txn.produce({("d", 2): txn.batch("d", 2, [b"z"])})[("d", 2)].error_code \
                == errors.INVALID_TXN_STATE
        finally:
            txn.close()


def test_the_coordinator_on_another_broker_is_asked_over_the_wire(tmp_path: Path) -> None:
    """Three brokers: the leader of each partition asks the transactional id's
    coordinator, on another broker, with AddPartitionsToTxn v4. A partition added is
    written, one not added is refused; a client's transactions over every partition
    commit and are read once each."""
    extra = {"transaction.state.log.num.partitions": 1,
             "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
             "offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 1}
    with Cluster(tmp_path, dirs=1, extra=extra) as cl:
        bootstrap = ",".join(b.bootstrap for b in cl.brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("w", 6, 1)])["w"].result(30)
        agreed = wait_for(lambda: cl.agreed("w", 6), 30, "the topic's leaders")
        leaders = {p: agreed["partitions"][("w", p)][0] for p in range(6)}
        first = cl.brokers[cl.alive()[0]]
        txn = TxnClient(first.port, "remote")
        try:
            coordinator = txn.coordinator
            elsewhere = sorted(p for p, b in leaders.items() if b != coordinator)
            by_leader: dict[int, list[int]] = {}
            for p in elsewhere:
                by_leader.setdefault(leaders[p], []).append(p)
            leader, (added, not_added, *_) = next(
                (b, ps) for b, ps in by_leader.items() if len(ps) >= 2)
            assert txn.add("w", added) == 0
            got = txn.produce({("w", added): txn.batch("w", added, [b"remote-added"]),
                               ("w", not_added): txn.batch("w", not_added, [b"not-added"])},
                              port=cl.brokers[leader].port)
            assert {k: p.error_code for k, p in got.items()} == {
                ("w", added): 0, ("w", not_added): errors.INVALID_TXN_STATE}, got
            assert txn.end(commit=True) == 0
        finally:
            txn.close()
        values = {p: [b"p%d-%d" % (p, i) for i in range(5)] for p in range(6)}
        for _ in range(3):
            commit_with_a_client(bootstrap, "remote-app", values, "w")
        got = read_committed(bootstrap, "w", list(range(6)))
        want = {p: vs * 3 for p, vs in values.items()}
        want[added] = [b"remote-added", *want[added]]
        assert got == want


def test_questions_for_one_coordinator_share_a_request(tmp_path: Path) -> None:
    """Two brokers: every transaction's coordinator on one, the partitions' leader on
    the other. The coordinator's broker is paused (SIGSTOP) while six producers each
    send their transaction's first batch: the leader's first question waits on it, and
    the other five go in one request once it answers (Kafka's AddPartitionsToTxnManager
    batches them so), or all six in one when they reached the leader together. Each
    transaction gets its own answer out of the shared request: the five whose partition
    was added are written, the one whose was not is refused, and a read_committed
    consumer reads the five committed records once each."""
    extra = {"transaction.state.log.num.partitions": 1,
             "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
             "offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 1}
    with Cluster(tmp_path, brokers=2, dirs=1, extra=extra) as cl:
        bootstrap = ",".join(b.bootstrap for b in cl.brokers.values())
        first = cl.brokers[cl.alive()[0]]
        clients = [TxnClient(first.port, f"shared-{i}") for i in range(6)]
        try:
            coordinator = clients[0].coordinator
            assert {c.coordinator for c in clients} == {coordinator}
            leader = next(b for b in cl.brokers if b != coordinator)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            created = admin.create_topics([NewTopic("v", 6, replica_assignment=[[leader]] * 6)])
            created["v"].result(30)
            wait_for(lambda: cl.agreed("v", 6), 30, "the topic's leader")
            for i, c in enumerate(clients[:5]):
                assert c.add("v", i) == 0
            coord, lead = cl.brokers[coordinator], cl.brokers[leader]
            asked_before = metric(coord, "kafka_network_requestmetrics_requests_total",
                                  request="AddPartitionsToTxn", version="4") or 0.0
            answers: dict[int, int] = {}

            def send(i: int) -> None:
                got = clients[i].produce({("v", i): clients[i].batch("v", i, [b"t%d" % i])},
                                         port=lead.port)
                answers[i] = got[("v", i)].error_code

            coord.proc.send_signal(signal.SIGSTOP)
            try:
                senders = [threading.Thread(target=send, args=(i,)) for i in range(6)]
                for t in senders:
                    t.start()
                time.sleep(2.0)  # every Produce reaches the leader and waits
            finally:
                coord.proc.send_signal(signal.SIGCONT)
            for t in senders:
                t.join(60)
            assert answers == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: errors.INVALID_TXN_STATE}
            asked = (metric(coord, "kafka_network_requestmetrics_requests_total",
                            request="AddPartitionsToTxn", version="4") or 0.0) - asked_before
            verified = metric(lead, "kafka_server_addpartitionstotxnmanager_verification_time_"
                                    "seconds_count")
            assert verified == 6
            # The first question goes alone, or with the others when they all came
            # before it was sent (they reach the leader's loop together under load).
            assert 1 <= asked <= 2, f"{asked:.0f} requests carried the 6 questions"
            for c in clients[:5]:
                assert c.end(commit=True) == 0
        finally:
            for c in clients:
                c.close()
        got = read_committed(bootstrap, "v", list(range(6)))
        assert got == {**{i: [b"t%d" % i] for i in range(5)}, 5: []}


def older_release(where: Path) -> Path:
    """The tree of a broker that predates transaction verification, as a verifying
    leader meets it during a rolling upgrade: this checkout serving AddPartitionsToTxn
    0-3, which is what logkeeper served before it verified transactions (and Kafka
    before 3.6); its native build is this checkout's (the same sources)."""
    tree = copy_checkout(where)
    proto = tree / "daemon" / "api" / "protocol.py"
    served = "_api(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 4)"
    text = proto.read_text()
    assert served in text, "protocol.py no longer lists AddPartitionsToTxn as the test expects"
    proto.write_text(text.replace(served, served.replace("0, 4", "0, 3")))
    for built in (REPO / "native").glob("*.so"):
        shutil.copy2(built, tree / "native" / built.name)
    return tree


def test_a_coordinator_of_an_older_release_is_not_asked(tmp_path: Path) -> None:
    """Rolling upgrade: the transactional id's coordinator runs a release that cannot
    verify (no AddPartitionsToTxn v4), the partitions' leader one that does. The leader
    learns it from the coordinator's ApiVersions and writes the batches unverified with
    one warning, as Kafka does, instead of asking with a request the coordinator would
    close the connection on (and the producer retrying NOT_ENOUGH_REPLICAS until its
    commit timed out). Once the coordinator's broker is upgraded, batches are verified
    again: one for a partition the transaction does not hold is refused."""
    extra = {"transaction.state.log.num.partitions": 1,
             "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
             "offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 1}
    older = older_release(tmp_path / "older-release")
    cl = Cluster(tmp_path, brokers=2, dirs=1, extra=extra)
    coordinator, leader = cl.brokers[2], cl.brokers[1]
    coordinator.env = {"PYTHONPATH": str(older)}
    try:
        # Broker 2 alone first: the transaction state log's partition is created there.
        coordinator.start()
        TxnClient(coordinator.port, "upgrade").close()
        leader.start()
        wait_for(lambda: all(len(cl.metadata(b)["brokers"]) == 2 for b in cl.brokers), 30,
                 "both brokers registered")
        bootstrap = f"{leader.bootstrap},{coordinator.bootstrap}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("w", 2, replica_assignment=[[1], [1]])])["w"].result(30)
        wait_for(lambda: cl.agreed("w", 2), 30, "the topic's leader")

        values = {0: [b"a0", b"a1"], 1: [b"b0"]}
        commit_with_a_client(bootstrap, "upgrade", values, "w")
        assert read_committed(bootstrap, "w", [0, 1]) == values
        warnings = [line for line in leader.stderr().splitlines()
                    if "cannot verify transactions" in line]
        assert len(warnings) == 1 and "broker 2" in warnings[0], warnings

        # The upgrade: broker 2 restarts on this release, on the same port.
        coordinator.stop()
        coordinator.env = None
        coordinator.start()
        txn = TxnClient(leader.port, "upgrade")
        try:
            assert txn.coordinator == 2
            assert txn.add("w", 0) == 0
            got = txn.produce({("w", 0): txn.batch("w", 0, [b"c0"]),
                               ("w", 1): txn.batch("w", 1, [b"not-added"])}, port=leader.port)
            assert {k: p.error_code for k, p in got.items()} == {
                ("w", 0): 0, ("w", 1): errors.INVALID_TXN_STATE}, got
            assert txn.end(commit=True) == 0
        finally:
            txn.close()
        assert read_committed(bootstrap, "w", [0, 1]) == {0: [b"a0", b"a1", b"c0"],
                                                          1: [b"b0"]}
    finally:
        cl.close()
