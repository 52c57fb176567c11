"""The daemon's lifecycle and operations: SIGTERM and SIGKILL, systemd notify, placement,
long-poll Fetch, ListOffsets by timestamp, metrics, health and the admin commands."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import confluent_kafka as ck
import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from daemon.api import protocol
from daemon.api.connections import STOP_GRACE_S
from logstore import names
from logstore.checkpoint import read_partition_metadata
from tests import faults
from tests.daemon_helpers import (
    EMBEDDED_DEFAULTS,
    REPO,
    Daemon,
    RawClient,
    aiokafka_read,
    free_port,
    running,
    skip_if_in_use,
)


def produce_confluent(d: Daemon, topic: str, n: int, *, partitions: int = 1,
                      acks: str = "all", **extra: object) -> list[tuple[int, int, bytes]]:
    p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": acks, "linger.ms": 5})
    acked: list[tuple[int, int, bytes]] = []

    def cb(err: object, msg: ck.Message) -> None:
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.value()))

    for i in range(n):
        p.produce(topic, value=b"r%d" % i, partition=i % partitions, on_delivery=cb, **extra)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return acked


def consume_all(d: Daemon, topic: str, partitions: int, expected: int, *,
                wanted: set[tuple[int, int]] | None = None) -> dict[tuple[int, int], bytes]:
    """Consume from offset 0 until `expected` records came, or, with `wanted`, until every
    (partition, offset) in it did: records written but never acknowledged (a kill in
    the middle of a produce) make a count alone stop too early."""
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "x",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + 60

    def done() -> bool:
        return wanted <= out.keys() if wanted is not None else len(out) >= expected

    while not done() and time.monotonic() < deadline:
        for m in c.consume(10000, 0.5):
            assert m.error() is None, m.error()
            out[(m.partition(), m.offset())] = m.value()
    c.close()
    return out


# ---- shutdown and recovery ----


def test_sigterm_writes_checkpoints_and_marker_and_next_start_skips_recovery(
        tmp_path: Path) -> None:
    d = Daemon(tmp_path, {"num.partitions": 3}).start()
    try:
        # Brand-new dirs are new, not crashed (the first start said "no clean-shutdown
        # marker: recovered 0 partitions").
        assert d.stderr().count("new log dir") == 3
        assert "no clean-shutdown marker" not in d.stderr()
        acked = produce_confluent(d, "t", 3000, partitions=3)
        assert d.stop() == 0
        assert "stopped cleanly" in d.stderr()
        for ld in d.log_dirs:
            assert (ld / names.CLEAN_SHUTDOWN_FILE).exists()
            text = (ld / names.RECOVERY_POINT_CHECKPOINT).read_text().splitlines()
            assert text[0] == "0" and int(text[1]) == 1  # one partition of "t" per dir
            assert text[2].split()[0] == "t" and int(text[2].split()[2]) == 1000
        d.start()
        assert d.stderr().count("clean shutdown, no recovery") == 3
        for ld in d.log_dirs:
            assert not (ld / names.CLEAN_SHUTDOWN_FILE).exists()  # consumed at start
        got = consume_all(d, "t", 3, len(acked))
        assert got == {(p, o): v for p, o, v in acked}
    finally:
        d.kill()


def test_error_metrics_are_labelled_with_kafkas_error_names(tmp_path: Path) -> None:
    """Kafka's RequestMetrics ErrorsPerSec is tagged error=<the Errors enum name>, so the
    JMX exporter gives kafka_network_requestmetrics_errors_total{error="MESSAGE_TOO_LARGE",
    request="Produce"}; these carried the numeric code ("10") instead, which no Kafka
    alert matches. Kafka's names where kafka-python's table has older ones
    (MESSAGE_SIZE_TOO_LARGE, NOT_LEADER_FOR_PARTITION)."""
    from kafka.protocol.consumer import ListOffsetsRequest

    from tests.sick_helpers import produce_raw

    with running(tmp_path, {"message.max.bytes": 2000}) as d:
        produce_confluent(d, "e", 1)
        c = RawClient(d.port)
        try:
            assert produce_raw(c, "e", 0, [b"x" * 5000])[0] == 10
            T = ListOffsetsRequest.ListOffsetsTopic
            got = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[T(
                name="e", partitions=[T.ListOffsetsPartition(
                    partition_index=9, current_leader_epoch=-1, timestamp=-1)])]), 5)
            assert got.topics[0].partitions[0].error_code == 3
        finally:
            c.close()
        text = d.http("/metrics")[1]
        for needle in (
                'kafka_network_requestmetrics_errors_total{error="MESSAGE_TOO_LARGE",'
                'request="Produce"} 1.0',
                'kafka_network_requestmetrics_errors_total{error="UNKNOWN_TOPIC_OR_PARTITION",'
                'request="ListOffsets"} 1.0',
                'kafka_server_brokertopicmetrics_failedproducerequests_total'
                '{error="MESSAGE_TOO_LARGE"} 1.0'):
            assert needle in text, needle
    from daemon.api import errors

    assert [errors.enum_name(c) for c in (-1, 0, 6, 56, 17)] == [
        "UNKNOWN_SERVER_ERROR", "NONE", "NOT_LEADER_OR_FOLLOWER", "KAFKA_STORAGE_ERROR",
        "INVALID_TOPIC_EXCEPTION"]


def test_log_flushes_are_counted_and_timed_as_kafkas_log_flush_stats(
        tmp_path: Path) -> None:
    """Kafka's kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs times every
    segment flush; dashboards watch it for a disk going slow. There was no such
    metric: with flush.messages=1 each acknowledged record is a flush, and the
    histogram counts them."""
    from confluent_kafka.admin import AdminClient, NewTopic

    def flushes(d: Daemon) -> float:
        text = d.http("/metrics")[1]
        line = next(ln for ln in text.splitlines()
                    if ln.startswith("kafka_log_logflushstats_logflushrateandtime_seconds_count"))
        return float(line.split()[-1])

    with running(tmp_path, {"auto.create.topics.enable": False}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([NewTopic("f", 1, 1, config={"flush.messages": "1"})])["f"].result(30)
        before = flushes(d)
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 0})
        for i in range(10):
            p.produce("f", value=b"v%d" % i, partition=0)
            p.flush(10)  # a batch, an append, a flush each
        assert flushes(d) - before >= 10


def test_sighup_stops_cleanly_as_kafkas_broker_does(tmp_path: Path) -> None:
    """Kafka's broker takes SIGHUP as it takes SIGTERM: it logs the signal and shuts
    down cleanly. This daemon died on the spot instead (Python's default for SIGHUP):
    no log line, no clean-shutdown marker, and a recovery at the next start."""
    import signal

    d = Daemon(tmp_path).start()
    try:
        acked = produce_confluent(d, "h", 200)
        assert d.proc is not None
        d.proc.send_signal(signal.SIGHUP)
        assert d.proc.wait(30) == 0
        assert "SIGHUP: stopping" in d.stderr() and "stopped cleanly" in d.stderr()
        for ld in d.log_dirs:
            assert (ld / names.CLEAN_SHUTDOWN_FILE).exists()
        d.start()
        assert "no clean-shutdown marker" not in d.stderr()
        assert consume_all(d, "h", 1, len(acked)) == {(p, o): v for p, o, v in acked}
    finally:
        d.kill()


def test_an_idle_client_connection_does_not_hold_up_the_shutdown(tmp_path: Path) -> None:
    """A client (or another broker's controller channel) whose last request was answered
    and that keeps its connection open is idle: SIGTERM closes it at once. Before, such
    a connection counted as busy and held every stop for the whole grace period meant for
    requests still in flight (10 s per broker restart)."""
    d = Daemon(tmp_path).start()
    try:
        clients = [RawClient(d.port) for _ in range(3)]
        for c in clients:
            c.request(MetadataRequest[1](topics=[]), 1)  # answered; the socket stays open
        started = time.monotonic()
        assert d.stop(timeout=STOP_GRACE_S + 20) == 0
        took = time.monotonic() - started
        assert took < STOP_GRACE_S / 2, f"stopping took {took:.1f} s with idle connections open"
        for c in clients:
            assert c.closed_by_server()
            c.close()
    finally:
        d.kill()


def test_sigkill_under_load_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    d = Daemon(tmp_path, {"num.partitions": 4, "log.segment.bytes": 256 * 1024}).start()
    acked: dict[str, list[tuple[int, int, bytes]]] = {"all": [], "1": []}
    stop = threading.Event()

    def load(acks: str) -> None:
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": acks, "linger.ms": 2,
                         "message.timeout.ms": 3000, "retries": 0})

        def cb(err: object, msg: ck.Message) -> None:
            if err is None:
                acked[acks].append((msg.partition(), msg.offset(), msg.value()))

        i = 0
        while not stop.is_set():
            try:
                p.produce(f"load-{acks}", value=b"%s-%d-" % (acks.encode(), i) + b"z" * 300,
                          partition=i % 4, on_delivery=cb)
                i += 1
            except BufferError:
                pass
            p.poll(0.0005 if i % 200 else 0.002)
        p.flush(5)

    threads = [threading.Thread(target=load, args=(a,)) for a in ("all", "1")]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while min(len(v) for v in acked.values()) < 5000 and time.monotonic() < deadline:
            time.sleep(0.05)
        d.kill()  # SIGKILL in the middle of the load
        killed_at = {k: len(v) for k, v in acked.items()}
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert min(killed_at.values()) >= 5000, killed_at
    d.start()
    assert "no clean-shutdown marker" in d.stderr()
    for acks, records in acked.items():
        got = consume_all(d, f"load-{acks}", 4, len(records),
                          wanted={(p, o) for p, o, _ in records})
        missing = [(p, o) for p, o, v in records if got.get((p, o)) != v]
        assert not missing, f"acks={acks}: {len(missing)} acknowledged records lost"
    d.kill()


def test_recovery_names_the_partition_and_segment_it_cut(tmp_path: Path) -> None:
    """After a kill, a torn tail is cut at start-up and the log says where: the partition,
    the segment file and how many bytes, as Kafka warns per segment; the records before
    the tear are all still there."""
    d = Daemon(tmp_path, {"num.partitions": 1}).start()
    acked = produce_confluent(d, "torn", 20)
    d.kill()
    [seg] = [p for p in tmp_path.glob("*/torn-0/*.log")]
    with open(seg, "ab") as f:
        f.write(b"\x07" * 100)  # a tail no batch header makes sense of
    d.start()
    err = d.stderr()
    assert "torn-0: recovery cut 100 bytes: " in err, err
    assert str(seg) in err.split("torn-0: recovery cut 100 bytes: ", 1)[1].splitlines()[0]
    got = consume_all(d, "torn", 1, len(acked))
    assert [got[(p, o)] for p, o, _ in acked] == [v for _, _, v in acked]
    d.kill()


# ---- systemd notify ----


def test_systemd_notify_ready_watchdog_and_stopping(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(30)
    d = Daemon(tmp_path / "d", env={"NOTIFY_SOCKET": str(sock_path),
                                    "WATCHDOG_USEC": "300000"})
    try:
        d.start()
        messages: list[str] = []
        while not any("READY=1" in m for m in messages):
            messages.append(sock.recv(4096).decode())
        watchdogs = 0
        while watchdogs < 3:
            if sock.recv(4096).decode() == "WATCHDOG=1":
                watchdogs += 1
        assert d.healthy()
        d.proc.send_signal(15)  # type: ignore[union-attr]
        while not any("STOPPING=1" in m for m in messages):
            messages.append(sock.recv(4096).decode())
        assert d.stop() == 0
    finally:
        d.kill()
        sock.close()
    ready = next(m for m in messages if "READY=1" in m)
    assert f"STATUS=serving on 127.0.0.1:{d.port}" in ready


# ---- placement ----


def test_new_partitions_go_to_the_dir_with_most_free_space(tmp_path: Path) -> None:
    with faults.tmpfs("8m") as small, faults.tmpfs("64m") as big, faults.tmpfs("16m") as mid:
        d = Daemon(tmp_path, {"log.dirs": [str(small / "d"), str(big / "d"), str(mid / "d")],
                              "num.partitions": 4})
        d.log_dirs = [small / "d", big / "d", mid / "d"]
        with d:
            produce_confluent(d, "first", 4, partitions=4)
            parts = {ld: sorted(p.name for p in ld.iterdir() if p.is_dir()) for ld in d.log_dirs}
            assert parts[big / "d"] == ["first-0", "first-1", "first-2", "first-3"], parts
            # fill the big one below the middle one: the next topic goes to "mid"
            (big / "d" / "ballast").write_bytes(b"\0" * (56 << 20))
            produce_confluent(d, "second", 2, partitions=2)
            assert sorted(p.name for p in (mid / "d").iterdir() if p.is_dir()) == [
                "second-0", "second-1", "second-2", "second-3"]


def test_ties_in_free_space_go_to_the_fewest_partitions(tmp_path: Path) -> None:
    with running(tmp_path, {"num.partitions": 1}) as d:
        for i in range(6):
            produce_confluent(d, f"t{i}", 1)
        counts = sorted(len([p for p in ld.iterdir() if p.is_dir()]) for ld in d.log_dirs)
        assert counts == [2, 2, 2]


def test_an_empty_dir_where_the_placement_record_puts_partitions_stays_offline(
        tmp_path: Path) -> None:
    """A disk not mounted at start-up leaves its mount point, empty, in log.dirs. Opened,
    it was taken for a new dir: its partitions were made again, empty (in a cluster a
    leader's then truncated its followers to nothing). It stays OFFLINE, nothing is
    written into it, its partitions answer KAFKA_STORAGE_ERROR and are made nowhere
    else; with the disk back, a restart serves every record."""
    from tests.sick_helpers import produce_raw

    d = Daemon(tmp_path, {"num.partitions": 3})
    with running_again(d):
        produce_confluent(d, "keep", 30, partitions=3)
    disk = d.log_dirs[0]
    held = sorted(p.name for p in disk.iterdir() if p.is_dir() and p.name.startswith("keep-"))
    assert held, "the topic was spread over the three dirs"
    unmounted = tmp_path / "unmounted"
    disk.rename(unmounted)
    disk.mkdir()  # the mount point, without its disk
    with running_again(d):
        assert d.http("/healthz")[1]["log_dirs"][str(disk)] == "offline"
        assert os.listdir(disk) == []
        c = RawClient(d.port)
        try:
            for name in held:
                partition = int(name.rpartition("-")[2])
                assert produce_raw(c, "keep", partition, [b"lost?"])[0] == 56
        finally:
            c.close()
        assert not [ld for ld in d.log_dirs[1:] for name in held if (ld / name).exists()]
        assert "the placement record puts" in d.stderr() and "not mounted" in d.stderr()
    disk.rmdir()
    unmounted.rename(disk)
    with running_again(d):
        assert len(consume_all(d, "keep", 3, 30)) == 30


@contextmanager
def running_again(d: Daemon) -> Iterator[Daemon]:
    """Start `d` (again), stop it cleanly at the end."""
    d.start()
    try:
        yield d
    finally:
        d.stop()


# ---- fetch and list offsets ----


def fetch(c: RawClient, topic: str, offset: int, *, max_wait: int, min_bytes: int = 1,
          max_bytes: int = 1 << 20, version: int = 11) -> object:
    F = FetchRequest.FetchTopic
    return c.request(FetchRequest(
        replica_id=-1, max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=[
            F.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                             log_start_offset=-1, partition_max_bytes=max_bytes)])],
        forgotten_topics_data=[], rack_id=""), version)


def test_fetch_long_poll_returns_records_appended_while_it_waits(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        produce_confluent(d, "lp", 10)
        c = RawClient(d.port, timeout=60)
        result: dict[str, object] = {}

        def poll() -> None:
            started = time.monotonic()
            result["resp"] = fetch(c, "lp", 10, max_wait=30000)
            result["took"] = time.monotonic() - started

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.5)
        assert t.is_alive(), "the fetch returned without data before its max wait"
        produce_confluent(d, "lp", 1)
        t.join(30)
        part = result["resp"].responses[0].partitions[0]  # type: ignore[attr-defined]
        assert part.error_code == 0 and part.high_watermark == 11
        from logstore.records import iter_batches

        batches = list(iter_batches(bytes(part.records)))
        assert batches[0].base_offset == 10
        assert result["took"] < 29  # woken by the append, not by the timeout
        # nothing arrives: an empty answer after max_wait
        empty = fetch(c, "lp", 11, max_wait=300)
        assert empty.responses[0].partitions[0].records in (b"", None)  # type: ignore[attr-defined]
        # out of range
        bad = fetch(c, "lp", 500, max_wait=0)
        assert bad.responses[0].partitions[0].error_code == 1  # type: ignore[attr-defined]
        c.close()


def test_fetch_max_bytes_gives_at_least_one_batch_but_not_more(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1})
        for _ in range(20):
            p.produce("mb", value=b"x" * 1000, partition=0)
            p.flush(10)  # one batch per record
        c = RawClient(d.port)
        small = fetch(c, "mb", 0, max_wait=0, max_bytes=10)
        from logstore.records import iter_batches

        got = list(iter_batches(bytes(small.responses[0].partitions[0].records)))  # type: ignore[attr-defined]
        assert len(got) == 1  # minOneMessage
        mid = fetch(c, "mb", 0, max_wait=0, max_bytes=5000)
        got = list(iter_batches(bytes(mid.responses[0].partitions[0].records)))  # type: ignore[attr-defined]
        assert 1 <= len(got) <= 5
        c.close()


def test_list_offsets_earliest_latest_and_by_timestamp(tmp_path: Path) -> None:
    with running(tmp_path, {"log.index.interval.bytes": 100}) as d:
        base = 1_700_000_000_000
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 0})
        for i in range(50):
            p.produce("ts", value=b"v%d" % i, partition=0, timestamp=base + i * 1000)
            p.flush(10)
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "x"})
        tp = ck.TopicPartition("ts", 0)
        assert c.get_watermark_offsets(tp, timeout=10) == (0, 50)
        for ts, want in ((base, 0), (base + 17_000, 17), (base + 17_500, 18),
                         (base - 5, 0), (base + 49_000, 49), (base + 60_000, -1)):
            got = c.offsets_for_times([ck.TopicPartition("ts", 0, ts)], timeout=10)[0]
            assert got.offset == want, (ts, got)
        c.close()


def test_list_offsets_max_timestamp_and_the_tiered_storage_specs(tmp_path: Path) -> None:
    """ListOffsets v7-v9 (Kafka 3.x's): MAX_TIMESTAMP answers the first record holding
    the largest timestamp, wherever it is (here inside a batch of an older segment);
    EARLIEST_LOCAL is the log start offset and LATEST_TIERED -1 (nothing is tiered)."""
    from confluent_kafka.admin import AdminClient, OffsetSpec
    from kafka.protocol.consumer import ListOffsetsRequest

    with running(tmp_path, {"log.segment.bytes": 4096}) as d:
        base = int(time.time() * 1000)
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 50})
        stamps = [base + i for i in range(40)]
        stamps[13] = base + 90_000  # the maximum, in the middle of a batch
        stamps[27] = base + 90_000  # the same again later: the first one is the answer
        for i, ts in enumerate(stamps):
            p.produce("mx", value=b"v%d" % i * 40, partition=0, timestamp=ts)
            if i % 5 == 4:
                p.flush(10)  # batches of 5 records; 4 KiB segments roll every few
        p.flush(10)
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        tp = ck.TopicPartition("mx", 0)

        def listed(spec: OffsetSpec) -> tuple[int, int]:
            got = admin.list_offsets({tp: spec})[tp].result(10)
            return got.offset, got.timestamp

        assert listed(OffsetSpec.max_timestamp()) == (13, base + 90_000)
        assert listed(OffsetSpec.earliest())[0] == 0 and listed(OffsetSpec.latest())[0] == 40
        c = RawClient(d.port)
        try:
            for version in (7, 8, 9):
                R = ListOffsetsRequest[version]
                T = R.ListOffsetsTopic
                answers = {}
                for ts in (-3, -4, -5):
                    resp = c.request(R(replica_id=-1, isolation_level=0, topics=[T(
                        name="mx", partitions=[T.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=ts)])]),
                        version)
                    part = resp.topics[0].partitions[0]
                    answers[ts] = (part.error_code, part.offset)
                assert answers == {-3: (0, 13), -4: (0, 0), -5: (0, -1)}, version
        finally:
            c.close()
        # The maximum is in a rolled segment, not the active one.
        assert len([f for ld in d.log_dirs for f in ld.glob("mx-0/*.log")]) >= 2


def test_list_offsets_v0_answers_kafkas_offset_lists(tmp_path: Path) -> None:
    """ListOffsets v0, which Kafka 3.9 still serves and Burrow's sarama sends for every
    partition's end: up to MaxNumOffsets offsets, newest first (the end, then each
    segment's base offset), the first one alone for EARLIEST, and for a time the
    segments last written at or before it. It used to close the connection."""
    from kafka.protocol.consumer import ListOffsetsRequest

    with running(tmp_path, {"log.segment.bytes": 4096}) as d:
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 0})
        for i in range(80):
            p.produce("old", value=b"v%d" % i * 40, partition=0)
            if i % 5 == 4:
                p.flush(10)
        p.flush(10)
        bases = sorted(int(f.stem) for ld in d.log_dirs for f in ld.glob("old-0/*.log"))
        assert len(bases) >= 3
        resp = protocol.api_versions_response(3)
        assert {k.api_key: k.min_version for k in resp.api_keys}[2] == 0
        c = RawClient(d.port)
        try:
            def offsets(ts: int, max_num: int, partition: int = 0) -> tuple[int, list[int]]:
                T = ListOffsetsRequest.ListOffsetsTopic
                got = c.request(ListOffsetsRequest(replica_id=-1, topics=[T(
                    name="old", partitions=[T.ListOffsetsPartition(
                        partition_index=partition, timestamp=ts,
                        max_num_offsets=max_num)])]), 0)
                part = got.topics[0].partitions[0]
                return part.error_code, list(part.old_style_offsets)

            assert offsets(-1, 1) == (0, [80])
            assert offsets(-2, 1) == (0, [0])
            assert offsets(-1, 100) == (0, [80, *reversed(bases)])
            assert offsets(-1, 2) == (0, [80, bases[-1]])
            assert offsets(int(time.time() * 1000) + 60_000, 1) == (0, [80])
            assert offsets(1_000_000, 5) == (0, [])  # before every segment was written
            assert offsets(-1, 1, partition=7)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        finally:
            c.close()


# ---- operating it ----


def test_metrics_and_healthz(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        produce_confluent(d, "m", 100)
        code, health = d.http("/healthz")
        assert code == 200 and health["status"] == "serving"
        assert health["log_dirs"] == {str(p): "online" for p in d.log_dirs}
        consume_all(d, "m", 1, 100)
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline:
            code, text = d.http("/metrics")
            if 'kafka_log_logdir_size_bytes{log_dir="' in text and "_bytesout_total" in text:
                break
            time.sleep(0.5)
        assert code == 200
        for needle in ('kafka_server_brokertopicmetrics_bytesin_total{topic="m"}',
                       'kafka_server_brokertopicmetrics_bytesout_total{topic="m"}',
                       'kafka_server_brokertopicmetrics_messagesin_total{topic="m"} 100.0',
                       'kafka_network_requestmetrics_total_time_seconds_bucket{le="0.001",'
                       'request="Produce"}',
                       "kafka_log_logdir_free_bytes", "kafka_log_logdir_partition_count",
                       # m-0, and __consumer_offsets once the group.id consumer looked
                       # its coordinator up, as with Kafka
                       "kafka_server_replicamanager_partitioncount "
                       f"{1 + sum(len(list(ld.glob('__consumer_offsets-*'))) for ld in d.log_dirs)}.0"):
            assert needle in text, needle
        for p in d.log_dirs:
            assert f'kafka_log_logdir_size_bytes{{log_dir="{p}"}}' in text
        # Kafka's per-partition log gauges (kafka.log:type=Log), read when scraped.
        [seg] = [f for ld in d.log_dirs for f in ld.glob("m-0/*.log")]
        for needle in ('kafka_log_log_logstartoffset{partition="0",topic="m"} 0.0',
                       'kafka_log_log_logendoffset{partition="0",topic="m"} 100.0',
                       f'kafka_log_log_size{{partition="0",topic="m"}} {seg.stat().st_size}.0',
                       'kafka_log_log_numlogsegments{partition="0",topic="m"} 1.0'):
            assert needle in text, needle
        assert d.http("/nope")[0] == 404
        # A deleted topic's series go with it (Kafka's removeMetrics): a scrape shows
        # only what the broker holds.
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        admin.delete_topics(["m"])["m"].result(30)
        text = d.http("/metrics")[1]
        assert 'topic="m"' not in text, [x for x in text.splitlines() if 'topic="m"' in x]


def test_startup_logs_the_crc32c_implementation_and_its_metric(tmp_path: Path) -> None:
    # Forced, so the line and the metric are known in advance (the calibration's own
    # choice depends on the CPU and on how busy it is).
    with running(tmp_path, env={"LOGKEEPER_CRC32C": "portable"}) as d:
        line = next(line for line in d.stderr().splitlines() if "CRC-32C: " in line)
        assert "CRC-32C: portable (forced by LOGKEEPER_CRC32C); calibration GB/s at " \
            "16 KiB / 64 KiB, fastest first: " in line, line
        code, text = d.http("/metrics")
        assert code == 200
        assert 'logkeeper_crc32c_implementation{impl="portable"} 1.0' in text


@pytest.mark.parametrize("choice,expected", [
    (None, "event loop: uvloop "), ("asyncio", "event loop: asyncio"),
    ("libev", "event loop: uvloop ")])
def test_the_event_loop_is_uvloop_unless_asked_for_asyncio(tmp_path: Path, choice: str | None,
                                                           expected: str) -> None:
    """uvloop's loop by default; LOGKEEPER_EVENT_LOOP=asyncio runs the standard library's
    (an unknown name is warned about and uvloop runs). The start-up log says which, and
    either serves a produce and a fetch."""
    env = {} if choice is None else {"LOGKEEPER_EVENT_LOOP": choice}
    with running(tmp_path, env=env) as d:
        assert expected in d.stderr(), d.stderr()
        if choice == "libev":
            assert "LOGKEEPER_EVENT_LOOP=libev is not one of uvloop, asyncio" in d.stderr()
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": "all"})
        for i in range(50):
            p.produce("loop", b"v%d" % i, partition=0)
        assert p.flush(30) == 0
        assert aiokafka_read("loop", 50, bootstrap_servers=d.bootstrap) == [
            b"v%d" % i for i in range(50)]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_log_dirs_describe_prints_kafka_log_dirs_json(tmp_path: Path) -> None:
    with running(tmp_path, {"num.partitions": 3}) as d:
        produce_confluent(d, "ld", 30, partitions=3)
        proc = run_cli("log-dirs", "describe", "--bootstrap-server", d.bootstrap)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["version"] == 1 and [b["broker"] for b in out["brokers"]] == [1]
        dirs = out["brokers"][0]["logDirs"]
        assert {x["logDir"] for x in dirs} == {str(p) for p in d.log_dirs}
        parts = sorted(p["partition"] for x in dirs for p in x["partitions"])
        assert parts == ["ld-0", "ld-1", "ld-2"]
        for x in dirs:
            assert x["error"] is None and x["usableBytes"] > 0
            for p in x["partitions"]:
                assert p["size"] > 0 and p["offsetLag"] == 0 and p["isFuture"] is False
        filtered = json.loads(run_cli("log-dirs", "describe", "--bootstrap-server",
                                      d.bootstrap, "--topic-list", "nope").stdout)
        assert all(not x["partitions"] for x in filtered["brokers"][0]["logDirs"])
    bad = run_cli("log-dirs", "describe", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert bad.returncode == 2 and "cannot connect" in bad.stderr


def test_topics_describe_through_metadata(tmp_path: Path) -> None:
    with running(tmp_path, {"num.partitions": 2}) as d:
        produce_confluent(d, "td", 4, partitions=2)
        proc = run_cli("topics", "describe", "--bootstrap-server", d.bootstrap)
        assert proc.returncode == 0, proc.stderr
        # The topic's id (KIP-516) from its partitions' partition.metadata, kept across
        # a restart, shown as kafka-topics.sh shows it.
        topic_id = next(read_partition_metadata(p / "partition.metadata")["topic_id"]
                        for x in d.log_dirs for p in x.glob("td-1"))
        line = f"Topic: td\tTopicId: {topic_id}\tPartitionCount: 2\tReplicationFactor: 1"
        assert line in proc.stdout
        assert d.stop() == 0
        d.start()
        assert line in run_cli("topics", "describe", "--bootstrap-server", d.bootstrap).stdout
        assert "\tTopic: td\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1\tOffline: " in \
            proc.stdout
        js = json.loads(run_cli("topics", "describe", "--bootstrap-server", d.bootstrap,
                                "--json", "--topic", "td").stdout)
        assert js["topics"][0]["partitions"][0] == {
            "partition": 0, "leader": 1, "replicas": [1], "isr": [1], "offline": [],
            "error_code": 0, "adding": [], "removing": []}
        missing = run_cli("topics", "describe", "--bootstrap-server", d.bootstrap,
                          "--topic", "absent")
        assert missing.returncode == 1


@EMBEDDED_DEFAULTS
def test_embedded_defaults_start_with_no_config(tmp_path: Path) -> None:
    skip_if_in_use(9092, 9308)
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "serve"], cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                c = RawClient(9092, timeout=5)
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the embedded defaults did not listen on 127.0.0.1:9092")
        from kafka.protocol.metadata import MetadataRequest

        meta = c.request(MetadataRequest(topics=None), 1)
        assert [(b.host, b.port) for b in meta.brokers] == [("127.0.0.1", 9092)]
        c.close()
        assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
            "disk0", "disk1", "disk2"]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out


def test_protocol_advertises_what_handlers_serve() -> None:
    from daemon.api.handlers import Handlers

    assert {18, 0, 1, 2, 3, 19, 20, 35} <= set(protocol.SUPPORTED)
    assert Handlers.__init__  # the constructor asserts dispatch == SUPPORTED
