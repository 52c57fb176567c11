"""Sick disks through the running daemon: real kernel faults, real clients, real ZooKeeper.

Each test runs `logkeeper serve` as a subprocess on real filesystems (loop-mounted ext4,
small tmpfs), breaks one of them the way disks break (FS_IOC_SHUTDOWN gives EIO on
every later call; a full tmpfs gives ENOSPC; rm -rf and lazy unmounts; a low open-file
limit), and checks what clients, /metrics, /log-dirs and ZooKeeper see. Mounts are
undone even when a test fails (tests.faults). They run in CI as root, never skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kazoo.client import KazooClient

from logstore import names
from logstore.records import Record, build_batch
from tests import faults
from tests.daemon_helpers import Daemon, RawClient
from tests.zkserver import ZooKeeperServer

KAFKA_STORAGE_ERROR = 56
FAST = {"log.dir.probe.interval.ms": 100, "log.dir.probe.timeout.ms": 1000}


def wait_for(pred: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")


def create_topic(d: Daemon, topic: str, partitions: int) -> None:
    a = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
    for fut in a.create_topics([ck.admin.NewTopic(topic, partitions, 1)]).values():
        fut.result(30)


def placement(d: Daemon, topic: str) -> dict[int, Path]:
    """Partition -> the log dir holding it, read from the dirs themselves."""
    out = {}
    for ld in d.log_dirs:
        for p in ld.iterdir():
            tp = names.parse_partition_dir(p.name) if p.is_dir() else None
            if tp is not None and tp.topic == topic:
                out[tp.partition] = ld
    return out


def produce_raw(c: RawClient, topic: str, partition: int, records: list[bytes]) -> tuple[int, int]:
    """(error code, base offset) of one acks=-1 produce of `records` as one batch."""
    T = ProduceRequest.TopicProduceData
    resp = c.request(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(
            index=partition, records=build_batch(
                [Record(None, r, [], int(time.time() * 1000)) for r in records]))])]), 8)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def metadata(c: RawClient, topic: str) -> dict[int, Any]:
    resp = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                     allow_auto_topic_creation=False), 8)
    return {p.partition_index: p for p in resp.topics[0].partitions}


def metric(d: Daemon, name: str, **labels: str) -> float | None:
    _, text = d.http("/metrics")
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] != name:
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return None


def open_files_under(pid: int, root: Path) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root) + "/") or target == str(root):
            out.append(target)
    return out


@contextlib.contextmanager
def zookeeper() -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def consume(d: Daemon, topic: str, partitions: list[int], expected: int) -> dict[tuple[int, int], bytes]:
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "t", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
    out: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        for m in c.consume(10000, 0.5):
            if m.error() is None:
                out[(m.partition(), m.offset())] = m.value()
    c.close()
    return out


# ---- a. EIO at runtime ----


def test_eio_takes_one_dir_offline_and_the_others_keep_serving(tmp_path: Path) -> None:
    with faults.loop_ext4(64) as m0, faults.loop_ext4(64) as m1, faults.loop_ext4(64) as m2, \
            zookeeper() as zk:
        dirs = [m0 / "d", m1 / "d", m2 / "d"]
        d = Daemon(tmp_path, {"log.dirs": [str(x) for x in dirs], **FAST,
                              "zookeeper.connect": zk.hosts})
        d.log_dirs = dirs
        with d.start():
            create_topic(d, "t", 6)
            where = placement(d, "t")
            assert sorted(set(where.values())) == sorted(dirs)  # spread on all three
            c = RawClient(d.port)
            acked: dict[int, list[bytes]] = {p: [] for p in range(6)}
            for i in range(50):
                for p in range(6):
                    recs = [b"%d-%d" % (p, i)]
                    assert produce_raw(c, "t", p, recs)[0] == 0
                    acked[p] += recs
            sick = dirs[1]
            faults.shutdown_fs(sick.parent)
            wait_for(lambda: d.log_dir_states()[str(sick)] == "offline", 10, "OFFLINE")
            states = d.log_dir_states()
            assert [states[str(x)] for x in dirs] == ["online", "offline", "online"]
            on_sick = [p for p, ld in where.items() if ld == sick]
            healthy = [p for p in range(6) if p not in on_sick]
            # Its partitions answer KAFKA_STORAGE_ERROR; the others keep accepting.
            for p in on_sick:
                assert produce_raw(c, "t", p, [b"late"])[0] == KAFKA_STORAGE_ERROR
            for i in range(20):
                for p in healthy:
                    recs = [b"after-%d-%d" % (p, i)]
                    assert produce_raw(c, "t", p, recs)[0] == 0
                    acked[p] += recs
            meta = metadata(c, "t")
            for p in on_sick:
                assert meta[p].offline_replicas == [1] and meta[p].leader_id == -1
            for p in healthy:
                assert meta[p].offline_replicas == [] and meta[p].leader_id == 1
            # Nothing acknowledged on a healthy dir is lost, in order.
            got = consume(d, "t", healthy, sum(len(acked[p]) for p in healthy))
            for p in healthy:
                assert [v for (q, _), v in sorted(got.items()) if q == p] == acked[p]
            assert metric(d, "kafka_log_logmanager_offlinelogdirectorycount") == 1
            assert metric(d, "kafka_server_replicamanager_offlinereplicacount") == len(on_sick)
            assert metric(d, "logkeeper_log_dir_state", log_dir=str(sick), state="offline") == 1
            # The controller is told, in Kafka's znode.
            zc = KazooClient(hosts=zk.hosts)
            zc.start(15)
            try:
                kids = wait_for(lambda: zc.exists("/log_dir_event_notification") and
                                zc.get_children("/log_dir_event_notification"), 20, "event")
                assert len(kids) == 1 and kids[0].startswith("log_dir_event_")
                data, _ = zc.get(f"/log_dir_event_notification/{kids[0]}")
                assert json.loads(data) == {"version": 1, "broker": 1, "event": 1}
                published = wait_for(lambda: json.loads(
                    zc.get("/logkeeper/brokers/1/log_dirs")[0]), 20, "published states")
                by_path = {e["path"]: e for e in published["log_dirs"]}
                wait_for(lambda: json.loads(zc.get("/logkeeper/brokers/1/log_dirs")[0])
                         ["log_dirs"][1]["state"] == "offline", 20, "published offline")
                assert set(by_path) == {str(x) for x in dirs}
                assert zc.exists("/brokers/ids/1")
            finally:
                zc.stop()
                zc.close()
            # Nothing touches the dir any more: every file, the .lock too, is closed.
            assert d.proc is not None
            wait_for(lambda: not open_files_under(d.proc.pid, sick), 10, "files released")
            c.close()
            assert d.stop() == 0
        assert "log dir " + str(sick) in d.stderr() and "offline" in d.stderr()
