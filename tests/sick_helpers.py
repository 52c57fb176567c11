"""Helpers for the tests and benchmarks of sick disks through the running daemon: raw
produce and metadata calls, placement as the dirs show it, metrics, a ZooKeeper server,
and steering a topic onto chosen dirs with cordons."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kazoo.exceptions import NoNodeError

from logstore import names
from logstore.records import Record, build_batch
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


def remove_dir(path: Path, timeout: float = 5.0) -> None:
    """`rm -rf` a log dir under a running daemon, which may be writing a file in it
    (a probe's canary, a placement record) while it goes: one rmtree can then fail
    with ENOTEMPTY, so repeat until the dir is gone."""
    deadline = time.monotonic() + timeout
    while path.exists():
        shutil.rmtree(path, ignore_errors=True)
        if time.monotonic() > deadline:
            shutil.rmtree(path)  # raises, naming what is left
    assert not path.exists()


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


def fill(port: int, topic: str, partition: int, batches: int, tag: bytes) -> None:
    """`batches` acks=-1 batches of 200 distinct records of 1 KiB (`tag` and a number)
    into the partition through the broker at `port`: 200 KiB each."""
    c = RawClient(port)
    try:
        for i in range(batches):
            assert produce_raw(c, topic, partition, [
                (tag + b"-%06d" % (i * 200 + j)).ljust(1024, b".") for j in range(200)])[0] == 0
    finally:
        c.close()


def produce_raw(c: RawClient, topic: str, partition: int, records: list[bytes], *,
                key: bytes | None = None) -> tuple[int, int]:
    """(error code, base offset) of one acks=-1 produce of `records` as one batch, each
    record with `key`."""
    T = ProduceRequest.TopicProduceData
    resp = c.request(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(
            index=partition, records=build_batch(
                [Record(key, r, [], int(time.time() * 1000)) for r in records]))])]), 8)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def metadata(c: RawClient, topic: str) -> dict[int, Any]:
    resp = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                     allow_auto_topic_creation=False), 8)
    return {p.partition_index: p for p in resp.topics[0].partitions}


def log_dir_events(zc: Any, d: Daemon) -> list[dict[str, Any]]:
    """The log-dir events `d` wrote: the znodes still there, else (our controller, which
    runs in `d`, reads and deletes them at once) the notifications its link logged."""
    if zc.exists("/log_dir_event_notification"):
        kids = sorted(zc.get_children("/log_dir_event_notification"))
        got = []
        for k in kids:
            try:
                got.append(json.loads(zc.get(f"/log_dir_event_notification/{k}")[0]))
            except NoNodeError:
                pass
        if got:
            return got
    marker = "notified the controller at "
    return [{"path": line.split(marker, 1)[1].strip()}
            for line in d.stderr().splitlines() if marker in line]


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


def steer(d: Daemon, topic: str, partitions: int, only: list[Path]) -> None:
    """Create `topic` with its partitions on the `only` dirs (the others cordoned)."""
    others = [x for x in d.log_dirs if x not in only]
    for x in others:
        assert d.admin("log-dirs/cordon", x)[0] == 200
    try:
        create_topic(d, topic, partitions)
    finally:
        for x in others:
            assert d.admin("log-dirs/uncordon", x)[0] == 200
    assert set(placement(d, topic).values()) <= set(only)
