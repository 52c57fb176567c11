"""Transactions across a three-broker cluster: the coordinator (the leader of the id's
`__transaction_state` partition) writes its markers to partitions led by other brokers
(WriteTxnMarkers), and is killed with SIGKILL while transactions run. Its successor
reads the id's state back and finishes what was prepared. Every transaction is all or
nothing: a committed one's records are read back by read_committed consumers exactly
once, an aborted one's never, whichever broker was killed; the replicas' logs and
transaction indexes are byte-identical.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.cluster_helpers import Cluster, wait_for
from tests.daemon_helpers import RawClient

TOPIC = "payments"
PARTITIONS = 3
PER_TXN = 12
SETTINGS = {"transaction.state.log.num.partitions": 3,
            "transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2,
            "offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 3,
            "group.initial.rebalance.delay.ms": 0, "min.insync.replicas": 2,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


def coordinator_of(cl: Cluster, tid: str) -> int:
    def ask() -> int:
        c = RawClient(cl.brokers[cl.alive()[0]].port)
        try:
            r = c.request(FindCoordinatorRequest[1](key=tid, key_type=1), 1)
        finally:
            c.close()
        return r.node_id if r.error_code == 0 else 0

    return wait_for(ask, 60, f"a coordinator for {tid}")


def files(cl: Cluster, broker: int, partition: int, suffix: str) -> bytes | None:
    for ld in cl.brokers[broker].log_dirs:
        pdir = ld / f"{TOPIC}-{partition}"
        if pdir.is_dir():
            return b"".join(f.read_bytes() for f in sorted(pdir.glob(f"*{suffix}")))
    return None


class App(threading.Thread):
    """A transactional producer sending transactions of PER_TXN records spread over the
    partitions, until stopped. A fatal error (fenced, or the coordinator lost the
    transaction) starts a new producer instance, as an application does."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stopping = threading.Event()
        self.committed: list[int] = []  # commit_transaction returned
        self.aborted: list[int] = []  # abort_transaction returned
        self.errors: list[str] = []

    def _producer(self) -> ck.Producer:
        p = ck.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "payments-app",
                         "transaction.timeout.ms": 20000})
        p.init_transactions(60)
        return p

    def run(self) -> None:
        p = self._producer()
        txn = 0
        while not self.stopping.is_set():
            txn += 1
            try:
                p.begin_transaction()
                for j in range(PER_TXN):
                    p.produce(TOPIC, b"%d-%d" % (txn, j), partition=j % PARTITIONS)
                if txn % 5 == 0:
                    p.flush(60)  # in the logs, then aborted
                    p.abort_transaction(60)
                    self.aborted.append(txn)
                else:
                    p.commit_transaction(60)
                    self.committed.append(txn)
            except ck.KafkaException as err:
                e = err.args[0]
                self.errors.append(e.str())
                if e.txn_requires_abort():
                    try:
                        p.abort_transaction(60)
                        continue
                    except ck.KafkaException as again:
                        self.errors.append(again.args[0].str())
                while not self.stopping.is_set():
                    try:
                        p = self._producer()
                        break
                    except ck.KafkaException as again:
                        self.errors.append(again.args[0].str())
                        time.sleep(0.5)


def read_committed(bootstrap: str, want: int) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"audit-{time.time_ns()}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": "read_committed"})
    c.subscribe([TOPIC])
    got: list[bytes] = []
    quiet = time.monotonic() + 20
    try:
        while time.monotonic() < quiet:
            m = c.poll(0.5)
            if m is None:
                if len(got) >= want:
                    quiet = min(quiet, time.monotonic() + 2)
                continue
            assert m.error() is None, m.error()
            got.append(m.value())
            quiet = time.monotonic() + 5
    finally:
        c.close()
    return got


def test_transactions_survive_their_coordinator_killed(tmp_path: Path) -> None:
    with Cluster(tmp_path, dirs=1, extra=SETTINGS) as cl:
        bootstrap = ",".join(d.bootstrap for d in cl.brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        wait_for(lambda: cl.agreed(TOPIC, PARTITIONS), 30, "the topic's leaders")
        leaders = {p: cl.agreed(TOPIC, PARTITIONS)["partitions"][(TOPIC, p)][0]
                   for p in range(PARTITIONS)}
        assert len(set(leaders.values())) > 1  # markers go to other brokers too

        app = App(bootstrap)
        app.start()
        wait_for(lambda: len(app.committed) >= 5, 60, lambda: f"commits ({app.errors})")
        victim = coordinator_of(cl, "payments-app")
        cl.brokers[victim].kill()
        time.sleep(3)
        wait_for(lambda: coordinator_of(cl, "payments-app") != victim, 60,
                 "a new coordinator")
        before = len(app.committed)
        wait_for(lambda: len(app.committed) >= before + 5, 90,
                 lambda: f"commits under the new coordinator ({app.errors[-5:]})")
        cl.brokers[victim].start()
        wait_for(lambda: all(len(v[3]) == 3 for k, v in cl.metadata(victim)["partitions"].items()
                             if k[0] == TOPIC), 60, "the restarted broker back in the ISRs")
        before = len(app.committed)
        wait_for(lambda: len(app.committed) >= before + 3, 60, "commits after the restart")
        app.stopping.set()
        app.join(120)
        assert not app.is_alive()

        got = read_committed(bootstrap, len(app.committed) * PER_TXN)
        assert len(got) == len(set(got)), "a record read twice"
        by_txn: dict[int, set[int]] = {}
        for v in got:
            txn, j = map(int, v.split(b"-"))
            by_txn.setdefault(txn, set()).add(j)
        # All or nothing, and every acknowledged commit is there; no abort is.
        assert all(js == set(range(PER_TXN)) for js in by_txn.values()), by_txn
        assert set(app.committed) <= set(by_txn)
        assert not set(app.aborted) & set(by_txn)

        def identical() -> bool:
            for p in range(PARTITIONS):
                for suffix in (".log", ".txnindex"):
                    copies = {files(cl, b, p, suffix) for b in cl.brokers}
                    if len(copies) != 1:
                        return False
            return True

        wait_for(identical, 60, "replicas byte-identical, transaction indexes too")
        assert any(files(cl, b, p, ".txnindex") for b in cl.brokers for p in range(PARTITIONS))
