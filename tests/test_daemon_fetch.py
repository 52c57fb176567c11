"""Fetch through the running daemon, as a user sees it, now that record bytes go from the
segment files to the socket by splice (daemon.storage.spliced), never through Python.

- The records every client reads are byte for byte the ones produced, and a raw Fetch
  returns exactly the bytes of the segment files, across many segment boundaries.
- One large fetch (8 MiB from one partition: more than one pipe holds) comes back whole.
- A segment deleted (DeleteRecords) while a fetch of it is still being sent to a slow
  client does not change what the client receives.
- A log dir whose disk hangs stalls only its own partitions' fetches: fetches from the
  other dirs keep being answered at once, and the stalled one answers
  KAFKA_STORAGE_ERROR once the dir is OFFLINE.

Real daemons, real clients (kafka-python, confluent-kafka, aiokafka, kcat), and for the
hung disk the FUSE filesystem of tests.fusefs (root needed, as for tests/test_sick_disks_fuse.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import shutil
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import kafka
from kafka.protocol.admin import DeleteRecordsRequest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from daemon.api import protocol
from logstore import names, records
from tests import daemon_helpers
from tests.daemon_helpers import Daemon, RawClient
from tests.sick_helpers import KAFKA_STORAGE_ERROR, open_files_under, produce_raw, wait_for
from tests.test_groups import needs

SEGMENT = 1 << 20


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int) -> Any:
    return daemon_helpers.fetch_request(topic, [partition], offset=offset, max_bytes=max_bytes,
                                        partition_max_bytes=max_bytes)


def fetch(c: RawClient, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
          version: int = 11) -> Any:
    return c.request(fetch_request(topic, partition, offset, max_bytes), version) \
        .responses[0].partitions[0]


def next_offset(data: bytes) -> int:
    last = list(records.iter_batches(data))[-1]
    return last.base_offset + last.last_offset_delta + 1


def produce(d: Daemon, topic: str, values: list[bytes], partition: int = 0) -> None:
    p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": -1, "linger.ms": 5,
                     "compression.type": "none"})
    for i, v in enumerate(values):
        p.produce(topic, key=b"k%d" % i, value=v, partition=partition)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def partition_dir(d: Daemon, topic: str, partition: int) -> Path:
    name = names.partition_dir_name(topic, partition)
    return next(ld / name for ld in d.log_dirs if (ld / name).is_dir())


def segment_bytes(pdir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(pdir.glob("*.log")))


def values_of(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(rnd.choice((1, 100, 3000, 20000))) for _ in range(n)]


def test_records_are_byte_identical_through_every_client_across_segments(tmp_path: Path) -> None:
    values = values_of(1500, seed=1)
    with Daemon(tmp_path, {"num.partitions": 1, "log.segment.bytes": SEGMENT}, dirs=2) as d:
        produce(d, "ident", values)
        pdir = partition_dir(d, "ident", 0)
        assert len(list(pdir.glob("*.log"))) >= 5  # many segment boundaries to cross
        on_disk = segment_bytes(pdir)

        # Raw Fetch, v4 and v11 and v12 (flexible): exactly the files' bytes, in order.
        c = RawClient(d.port)
        for version in (4, 11, 12):
            got, offset = bytearray(), 0
            while offset < len(values):
                part = fetch(c, "ident", 0, offset, 1 << 20, version)
                assert part.error_code == 0
                got += part.records
                offset = next_offset(bytes(part.records))
            assert bytes(got) == on_disk, f"Fetch v{version} differs from the segment files"
        c.close()

        want = [(i, b"k%d" % i, v) for i, v in enumerate(values)]

        kc = kafka.KafkaConsumer(bootstrap_servers=d.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=10000,
                                 fetch_max_bytes=4 << 20, max_partition_fetch_bytes=4 << 20)
        kc.assign([kafka.TopicPartition("ident", 0)])
        assert [(m.offset, m.key, m.value) for m in kc][:len(values)] == want
        kc.close()

        cc = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "ident",
                          "enable.auto.commit": False, "check.crcs": True})
        cc.assign([ck.TopicPartition("ident", 0, 0)])
        got_ck: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got_ck) < len(values) and time.monotonic() < deadline:
            for m in cc.consume(1000, 1.0):
                assert m.error() is None, m.error()
                got_ck.append((m.offset(), m.key(), m.value()))
        cc.close()
        assert got_ck == want

        needs(importlib.util.find_spec("aiokafka") is not None, "aiokafka (a test extra)")
        import aiokafka

        async def aio() -> list[tuple[int, bytes, bytes]]:
            a = aiokafka.AIOKafkaConsumer(bootstrap_servers=d.bootstrap,
                                          enable_auto_commit=False, check_crcs=True)
            await a.start()
            try:
                tp = aiokafka.TopicPartition("ident", 0)
                a.assign([tp])
                a.seek(tp, 0)
                out: list[tuple[int, bytes, bytes]] = []
                while len(out) < len(values):
                    batch = await a.getmany(tp, timeout_ms=10000)
                    assert batch, "aiokafka stalled"
                    out += [(m.offset, m.key, m.value) for m in batch[tp]]
                return out
            finally:
                await a.stop()

        assert asyncio.run(aio()) == want

        kcat = shutil.which("kcat")
        needs(kcat is not None, "kcat (Debian package kcat)")
        run = subprocess.run([kcat, "-b", d.bootstrap, "-C", "-t", "ident", "-p", "0", "-o",
                              "beginning", "-e", "-q", "-f", "%o %S\n"],
                             capture_output=True, timeout=60, check=True)
        lines = run.stdout.decode().splitlines()
        assert [tuple(map(int, line.split())) for line in lines] == [
            (i, len(v)) for i, v in enumerate(values)]


def test_an_answer_of_many_partitions_small_and_large_is_the_segment_files(tmp_path: Path
                                                                          ) -> None:
    """One Fetch of 40 partitions, most of them a record or two behind (read into bytes
    and written inline with the framing, under SPLICE_MIN) and some with hundreds of KiB
    (spliced from pipes between them): each partition's records are exactly its segment
    file's bytes, in the order asked, at v4, v11 and v12, and a consumer reads them all."""
    from daemon.storage.spliced import SPLICE_MIN

    n = 40
    big = {3, 17, 18, 39}  # over SPLICE_MIN, between and after small ones
    with Daemon(tmp_path, {"num.partitions": n}, dirs=2) as d:
        rnd = random.Random(7)
        want: dict[int, list[bytes]] = {}
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": -1, "linger.ms": 5,
                         "compression.type": "none"})
        for i in range(n):
            sizes = [20000] * 24 if i in big else [rnd.choice((1, 100, 3000))] * rnd.randint(1, 3)
            want[i] = [rnd.randbytes(size) for size in sizes]
            for v in want[i]:
                p.produce("many", value=v, partition=i)
        assert p.flush(60) == 0
        del p  # its threads would try the broker after it stopped
        on_disk = {i: segment_bytes(partition_dir(d, "many", i)) for i in range(n)}
        assert all((len(on_disk[i]) >= SPLICE_MIN) == (i in big) for i in range(n))
        order = rnd.sample(range(n), n)
        c = RawClient(d.port)
        try:
            for version in (4, 11, 12):
                resp = c.request(daemon_helpers.fetch_request(
                    "many", order, partition_max_bytes=4 << 20), version)
                parts = resp.responses[0].partitions
                assert [pt.partition_index for pt in parts] == order
                for pt in parts:
                    assert pt.error_code == 0
                    assert bytes(pt.records) == on_disk[pt.partition_index], \
                        f"v{version}: partition {pt.partition_index} differs from its segment"
        finally:
            c.close()
        cc = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "many",
                          "enable.auto.commit": False, "check.crcs": True})
        cc.assign([ck.TopicPartition("many", i, 0) for i in range(n)])
        got: dict[int, list[bytes]] = {i: [] for i in range(n)}
        total = sum(len(v) for v in want.values())
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < total and time.monotonic() < deadline:
            for m in cc.consume(1000, 1.0):
                assert m.error() is None, m.error()
                got[m.partition()].append(m.value())
        cc.close()
        assert got == want


def test_one_large_fetch_spans_several_pipes_and_comes_back_whole(tmp_path: Path) -> None:
    """8 MiB from one partition in one Fetch: more than one pipe holds (fs.pipe-max-size
    is 1 MiB by default), all of it in the answer, equal to the segment file."""
    values = values_of(700, seed=2)
    values = [v * (1 + 12000 // max(len(v), 1)) for v in values]  # ~12 KiB+ each
    extra = {"num.partitions": 1, "log.segment.bytes": 64 << 20,
             "socket.request.max.bytes": 100 << 20}
    with Daemon(tmp_path, extra, dirs=1) as d:
        produce(d, "big", values)
        on_disk = segment_bytes(partition_dir(d, "big", 0))
        assert len(on_disk) > 8 << 20
        c = RawClient(d.port)
        part = fetch(c, "big", 0, 0, 64 << 20)
        assert part.error_code == 0 and bytes(part.records) == on_disk
        # Split at a budget inside the log: whole batches up to it, from the right place.
        part = fetch(c, "big", 0, 100, 3 << 20)
        got = bytes(part.records)
        first = next(records.iter_batches(got))
        assert first.base_offset <= 100 < next_offset(got) and len(got) <= 3 << 20
        assert on_disk.find(got) >= 0
        c.close()


def _slow_reader(port: int, request: bytes, rcvbuf: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: the window
    s.connect(("127.0.0.1", port))
    s.sendall(request)
    return s


def _read_frame(s: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(min(n - len(buf), 1 << 16))
            assert chunk, "the daemon closed the connection"
            buf += chunk
        return bytes(buf)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def test_a_segment_deleted_while_its_fetch_is_being_sent_changes_nothing(
        tmp_path: Path) -> None:
    """A client reads a 6 MiB answer slowly; meanwhile DeleteRecords deletes the segment
    it came from (the files are gone, the daemon holds no fd of them). The client still
    gets every byte the segment held, because the pipes hold the pages."""
    values = values_of(500, seed=3)
    values = [v * (1 + 12000 // max(len(v), 1)) for v in values]
    extra = {"num.partitions": 1, "log.segment.bytes": 6 << 20}
    with Daemon(tmp_path, extra, dirs=1) as d:
        produce(d, "gone", values)
        pdir = partition_dir(d, "gone", 0)
        logs = sorted(pdir.glob("*.log"))
        assert len(logs) >= 2
        first = logs[0].read_bytes()
        second_base = int(logs[1].name.split(".")[0])
        frame = protocol.encode_request(fetch_request("gone", 0, 0, 16 << 20), 11, 7)
        s = _slow_reader(d.port, frame, 16 << 10)
        try:
            time.sleep(0.5)  # the daemon has spliced the range and is stuck on the socket
            c = RawClient(d.port)
            T = DeleteRecordsRequest.DeleteRecordsTopic
            resp = c.request(DeleteRecordsRequest(topics=[T(name="gone", partitions=[
                T.DeleteRecordsPartition(partition_index=0, offset=second_base)])],
                timeout_ms=10000), 2)
            assert resp.topics[0].partitions[0].error_code == 0
            c.close()
            wait_for(lambda: not logs[0].exists(), 10, "the first segment deleted")
            assert d.proc is not None
            open_logs = open_files_under(d.proc.pid, pdir)
            assert not any(logs[0].name in target for target in open_logs), open_logs
            answer = FetchResponse.decode(_read_frame(s), version=11, header=True)
        finally:
            s.close()
        part = answer.responses[0].partitions[0]
        assert part.error_code == 0
        assert bytes(part.records) == first


# ---- a hung disk: fetches from the other dirs go on ----


def test_fetches_from_other_dirs_are_served_while_one_dir_hangs(tmp_path: Path) -> None:
    from tests.test_sick_disks_fuse import TIMEOUT_MS, fuse_setup

    with fuse_setup(tmp_path, {}) as (d, fs, sick):
        c = RawClient(d.port)
        for p in range(4):
            assert produce_raw(c, "fast", p, [b"fast %d" % i for i in range(50)])[0] == 0
        assert produce_raw(c, "slow", 0, [b"slow %d" % i for i in range(50)])[0] == 0
        # The slow partition's pages leave the page cache, so its next fetch must read
        # the (hung) disk; the test process itself never touches the mount again.
        for seg in (sick / "slow-0").glob("*.log"):
            fd = os.open(seg, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        fs.hang()
        slow_answer: dict[str, Any] = {}

        def fetch_slow() -> None:
            sc = RawClient(d.port, timeout=30)
            started = time.monotonic()
            try:
                slow_answer["code"] = fetch(sc, "slow", 0, 0).error_code
            finally:
                slow_answer["took"] = time.monotonic() - started
                sc.close()

        t = threading.Thread(target=fetch_slow, daemon=True)
        t.start()
        latencies = []
        deadline = time.monotonic() + 2.5 * TIMEOUT_MS / 1000
        while time.monotonic() < deadline:
            for p in range(4):
                started = time.monotonic()
                part = fetch(c, "fast", p, 0)
                latencies.append(time.monotonic() - started)
                assert part.error_code == 0
                assert [r.value for b in records.iter_batches(bytes(part.records))
                        for r in b.records()] == [b"fast %d" % i for i in range(50)]
        t.join(20)
        assert not t.is_alive()
        assert d.log_dir_states()[str(sick)] == "offline"
        # The slow fetch waited on the hung disk until its dir was taken offline.
        assert slow_answer["code"] == KAFKA_STORAGE_ERROR
        assert slow_answer["took"] >= 0.5 * TIMEOUT_MS / 1000, slow_answer
        assert len(latencies) > 20 and max(latencies) < 0.5, max(latencies)
        c.close()


def test_the_brokers_fetch_max_bytes_bounds_every_answer(tmp_path: Path) -> None:
    """Kafka's broker fetch.max.bytes: a consumer's Fetch asking 1 MiB from each of three
    partitions gets at most 4096 record bytes in all (a first batch over it still comes
    whole, KIP-74), and its min_bytes of 1 MiB is met by what one answer may carry, so
    it is answered at once rather than after max_wait_ms. kafka-python, asking its
    default 50 MiB, reads every record in such answers."""
    limit = 4096
    with Daemon(tmp_path, {"fetch.max.bytes": limit, "num.partitions": 3}) as d:
        values = [b"%04d" % i + b"v" * 1000 for i in range(30)]
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": -1})
        for i, v in enumerate(values + [b"B" * 3 * limit]):
            p.produce("capped", v, partition=i // 10 if i < 30 else 0)
            assert p.flush(30) == 0  # a batch each
        F = FetchRequest.FetchTopic
        c = RawClient(d.port, timeout=40)
        try:
            def ask(offset: int, min_bytes: int) -> tuple[list[bytes], float]:
                t0 = time.monotonic()
                resp = c.request(FetchRequest(
                    replica_id=-1, max_wait_ms=20000, min_bytes=min_bytes, max_bytes=1 << 20,
                    isolation_level=0, session_id=0, session_epoch=-1, topics=[F(
                        topic="capped", partitions=[F.FetchPartition(
                            partition=p, current_leader_epoch=-1,
                            fetch_offset=offset if p == 0 else 0, log_start_offset=-1,
                            partition_max_bytes=1 << 20) for p in range(3)])],
                    forgotten_topics_data=[], rack_id=""), 11)
                return ([p.records or b"" for p in resp.responses[0].partitions],
                        time.monotonic() - t0)

            got, _ = ask(0, 1)
            assert 0 < sum(len(r) for r in got) <= limit, [len(r) for r in got]
            got, took = ask(0, 1 << 20)
            assert 0 < sum(len(r) for r in got) <= limit and took < 10, took
            got, _ = ask(10, 1)  # partition 0's 12 KB record first: whole, alone
            assert len(got[0]) > 3 * limit and got[1] == got[2] == b""
        finally:
            c.close()
        kc = kafka.KafkaConsumer("capped", bootstrap_servers=d.bootstrap,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000)
        try:
            read = sorted(m.value for m in kc)
        finally:
            kc.close()
        assert read == sorted(values + [b"B" * 3 * limit])
