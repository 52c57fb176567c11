"""The daemon's speed through the Kafka protocol against the log store it wraps, same run.

- Produce: confluent-kafka (acks=1, ~64 KiB batches) into a running `logkeeper serve`
  vs `Log.append` of the same bytes in 64 KiB batches, in-process. Target >= 0.5.
- Fetch: a confluent-kafka consumer reading a partition from offset 0 vs `Log.read`
  over a log holding the same batches. Target >= 0.5. A raw-socket Fetch loop (no
  client decoding) is reported beside it to show the protocol's own cost. The daemon
  splices the records from the segment into pipes on the dir worker and from the pipes
  into the socket on the event loop (docs/architecture.md "The fetch path"); the
  baseline copies them into Python bytes, which the fetch never does.
- The daemon's own work beside the produce figure: the broker process's CPU time per
  round (all its threads, and its event loop's thread alone), against the same
  `Log.append` time: what the broker burns for the bytes, whatever the client and the
  scheduler add to the wall time.
- The shares nothing in the daemon can shorten, beside each of those two: the client's
  own work (confluent-kafka's produce() calls with no broker to send to; its consumer
  handing over records it has already fetched) and, for the fetch, the kernel's (the
  same segment bytes sendfile()d over loopback to a reader). Each is timed in the same
  run against the same baseline: when the client's share and the kernel's add up to
  more than the target allows, no daemon could meet it on this machine.
- Follower replication against the leader's `Log.append` is in bench_cluster.py (it
  needs ZooKeeper and three brokers).
- The broker's CPU per Fetch request, at 64 KiB and 1 MiB answers, against `Log.read` of
  the same bytes: the fixed cost of a request beside the cost of its bytes.
- The broker's CPU per Fetch of 100 partitions a record behind each (a consumer of many
  partitions, each with a trickle), against `Log.read` of the same 100 ranges.
- Metadata: an answer of 500 partitions built and encoded by hand against kafka-python's
  classes, and the broker's CPU per Metadata request for one topic when it holds 400
  other partitions against when that topic is all it holds (at most 1.25x).
- Transactions with transaction verification on (the default) vs off: the cost of the
  leader's question to the coordinator, paid once per partition per transaction.
- Resident memory (RSS, not virtual size) of a daemon holding 1,000 partitions over 3
  log dirs, printed and attached to the pytest-benchmark record (not a timing pair).

Each daemon is a real subprocess with its log dirs under a temp dir; the daemon's dirs
and the baselines' logs are on a tmpfs when the machine has one (conftest's
PAGE_CACHE_ROOT): the targets are page-cache figures, and on a disk-backed temp dir the
disk's writeback swung the baselines several-fold between runs.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka as ck
import psutil
import pytest
from cpu_clock import process_cpu_s, thread_cpu_s  # this directory, as conftest's report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.tools.zookeeper import free_port  # noqa: E402
from logstore import Log, LogConfig, records  # noqa: E402
from tests.daemon_helpers import Daemon, RawClient, fetch_request  # noqa: E402

VALUE = 4096
PER_BATCH = 16  # 16 x 4 KiB values: ~64 KiB batches
BATCHES = 128  # 8 MiB per call
PARTITIONS = 4


@pytest.fixture(scope="module")
def daemon(page_cache_module_path: Path) -> Iterator[Daemon]:
    d = Daemon(page_cache_module_path, {"num.partitions": PARTITIONS,
                                        "log.segment.bytes": 256 << 20,
                                        "log.retention.bytes": 512 << 20})
    d.start()
    try:
        yield d
    finally:
        d.stop()


def make_batches() -> list[bytes]:
    value = bytes(range(256)) * (VALUE // 256)
    return [records.build_batch([records.Record(key=b"k%d" % j, value=value)
                                 for j in range(PER_BATCH)]) for _ in range(BATCHES)]


def _median_s(fn: Callable[[], object], rounds: int = 9,
              setup: Callable[[], object] | None = None) -> float:
    """Median seconds of one call of fn over `rounds` calls, setup untimed before each."""
    times = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _fetch_all(raw: RawClient, topic: str, end: int, max_bytes: int) -> int:
    """Partition 0 of `topic` read from offset 0 to `end` with raw Fetch v11 requests of
    up to max_bytes, one at a time; the requests it took."""
    from kafka.protocol.consumer import FetchRequest

    F = FetchRequest.FetchTopic
    offset, asked = 0, 0
    while offset < end:
        req = FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
            isolation_level=0, session_id=0, session_epoch=-1, topics=[F(
                topic=topic, partitions=[F.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset,
                    log_start_offset=-1, partition_max_bytes=max_bytes)])],
            forgotten_topics_data=[], rack_id="")
        part = raw.request(req, 11).responses[0].partitions[0]
        last = list(records.iter_batches(bytes(part.records)))[-1]
        offset = last.base_offset + last.last_offset_delta + 1
        asked += 1
    return asked


def _read_all(log: Log, max_bytes: int) -> None:
    """`log` read from offset 0 to its end with `Log.read` of up to max_bytes at a time,
    each read's batches parsed as a client's would be: the fetch figures' baseline."""
    offset = 0
    end = log.log_end_offset
    while offset < end:
        last = list(records.iter_batches(log.read(offset, max_bytes)))[-1]
        offset = last.base_offset + last.last_offset_delta + 1


def _loopback_sendfile_s(path: Path, rounds: int = 9) -> float:
    """Median seconds to move a file's bytes over loopback into a reader's buffer with
    sendfile (one request, one answer of the whole file): the kernel's part of a fetch."""
    size = path.stat().st_size
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn, open(path, "rb") as f:
            while conn.recv(1):
                sent = 0
                while sent < size:
                    sent += os.sendfile(conn.fileno(), f.fileno(), sent, size - sent)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    view = memoryview(bytearray(size))
    with socket.create_connection(srv.getsockname()) as c:
        def one() -> None:
            c.sendall(b"x")
            got = 0
            while got < size:
                got += c.recv_into(view[got:], size - got)

        one()
        median = _median_s(one, rounds)
    server.join(10)
    srv.close()
    return median


def test_produce_through_protocol_vs_log_append(ratio, measured, daemon: Daemon,
                                                page_cache_path: Path) -> None:
    batches = make_batches()
    total = sum(len(b) for b in batches)
    producer = ck.Producer({"bootstrap.servers": daemon.bootstrap, "acks": 1,
                            "linger.ms": 5, "batch.size": 64 * 1024,
                            "queue.buffering.max.kbytes": 256 * 1024,
                            "compression.type": "none"})
    value = bytes(range(256)) * (VALUE // 256)
    n_records = BATCHES * PER_BATCH

    def ours() -> None:
        for i in range(n_records):
            producer.produce("bench-produce", value=value, key=b"k%d" % (i % PER_BATCH),
                             partition=(i // PER_BATCH) % PARTITIONS)
        assert producer.flush(60) == 0

    log = Log.open(page_cache_path / "bench-0", LogConfig(segment_bytes=256 << 20,
                                                   retention_bytes=512 << 20))

    def baseline() -> None:
        for b in batches:
            log.append(b)
        if log.size_bytes > 512 << 20:
            log.apply_retention()

    pair = ratio("daemon produce 8 MiB, confluent-kafka acks=1", ours, baseline, target=0.5,
                 unit_bytes=total, rounds=7, min_sample=0.05, baseline_label="Log.append")

    if pair is not None:
        # The client's share: the same produce() calls into a producer with no broker
        # (a closed port), its queue purged between rounds.
        idle = ck.Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "acks": 1,
                            "linger.ms": 5, "batch.size": 64 * 1024, "log_level": 0,
                            "queue.buffering.max.kbytes": 256 * 1024,
                            "compression.type": "none"})

        def calls() -> None:
            for i in range(n_records):
                idle.produce("bench-produce", value=value, key=b"k%d" % (i % PER_BATCH),
                             partition=(i // PER_BATCH) % PARTITIONS)

        measured("  its client's share: the produce() calls alone, no broker",
                 _median_s(calls, setup=idle.purge), pair.baseline_s, unit_bytes=total,
                 ours_label="produce() calls", baseline_label="Log.append")
        idle.purge()
        # The daemon's own work, as CPU time rather than wall time: the broker process's
        # CPU seconds (every thread, user and system) per round of the same produce,
        # against Log.append's wall time (one thread, all CPU). Wall-time pairs on a
        # loaded two-core machine swing by a tenth between runs; the CPU a round costs
        # the broker says whether a change made its work smaller.
        pid = daemon.proc.pid

        def cpu() -> tuple[float, float]:  # (the whole broker, its event loop's thread)
            return process_cpu_s(pid), thread_cpu_s(pid, pid)

        before = cpu()
        rounds = 15
        for _ in range(rounds):
            ours()
        after = cpu()
        measured("  its daemon's CPU: the broker's CPU time per round",
                 (after[0] - before[0]) / rounds, pair.baseline_s, unit_bytes=total,
                 ours_label="broker CPU", baseline_label="Log.append")
        measured("  of which its event loop's thread", (after[1] - before[1]) / rounds,
                 pair.baseline_s, unit_bytes=total, ours_label="loop thread CPU",
                 baseline_label="Log.append")

    # The daemon's own share: the same batches, already built, one Produce v8 request
    # each (acks=1) over one connection, answered before the next is sent. The
    # confluent figure above also pays for the client building 2,048 records.
    from kafka.protocol.producer import ProduceRequest

    raw = RawClient(daemon.port)
    T = ProduceRequest.TopicProduceData

    def raw_produce() -> None:
        for i, b in enumerate(batches):
            resp = raw.request(ProduceRequest(
                transactional_id=None, acks=1, timeout_ms=10000, topic_data=[T(
                    name="bench-produce", partition_data=[T.PartitionProduceData(
                        index=i % PARTITIONS, records=b)])]), 8)
            assert resp.responses[0].partition_responses[0].error_code == 0

    ratio("daemon produce 8 MiB, raw Produce v8 loop", raw_produce, baseline, target=None,
          unit_bytes=total, rounds=7, min_sample=0.05, baseline_label="Log.append")
    raw.close()
    log.close()


def test_fetch_through_protocol_vs_log_read(ratio, measured, daemon: Daemon,
                                            page_cache_path: Path) -> None:
    batches = make_batches()
    total = sum(len(b) for b in batches)
    producer = ck.Producer({"bootstrap.servers": daemon.bootstrap, "acks": 1,
                            "linger.ms": 5, "batch.size": 64 * 1024})
    value = bytes(range(256)) * (VALUE // 256)
    n_records = BATCHES * PER_BATCH
    for i in range(n_records):
        producer.produce("bench-fetch", value=value, key=b"k%d" % (i % PER_BATCH), partition=0)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0

    consumer = ck.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": "bench",
                            "enable.auto.commit": False, "fetch.max.bytes": 16 << 20,
                            "max.partition.fetch.bytes": 16 << 20,
                            # Each call re-reads from offset 0; without this the fetch
                            # long-polling at the log end holds the reset for 500 ms.
                            "fetch.wait.max.ms": 1})

    def ours() -> None:
        consumer.assign([ck.TopicPartition("bench-fetch", 0, 0)])
        got = 0
        while got < n_records:
            msgs = consumer.consume(n_records - got, 5.0)
            assert msgs, "the consumer stalled"
            got += len(msgs)

    log = Log.open(page_cache_path / "bench-1", LogConfig(segment_bytes=256 << 20))
    for b in batches:
        log.append(b)
    log.high_watermark = log.log_end_offset

    def baseline() -> None:
        _read_all(log, 1 << 20)

    pair = ratio("daemon fetch 8 MiB, confluent-kafka consumer", ours, baseline, target=0.5,
                 unit_bytes=total, rounds=7, min_sample=0.05, baseline_label="Log.read")

    if pair is not None:
        # The client's share: the consumer handing over the same records once its fetch
        # has brought them in (given 0.3 s, untimed, after the assign).
        def fetched() -> None:
            consumer.assign([ck.TopicPartition("bench-fetch", 0, 0)])
            time.sleep(0.3)

        def handed_over() -> None:
            got = 0
            while got < n_records:
                got += len(consumer.consume(n_records - got, 5.0))

        measured("  its client's share: records already fetched, handed over",
                 _median_s(handed_over, setup=fetched), pair.baseline_s, unit_bytes=total,
                 ours_label="consume()", baseline_label="Log.read")
        segment = min(daemon.root.glob("disk*/bench-fetch-0/*.log"))
        measured("  its kernel's share: the segment sendfile()d over loopback",
                 _loopback_sendfile_s(segment), pair.baseline_s, unit_bytes=total,
                 ours_label="sendfile+recv", baseline_label="Log.read")

    raw = RawClient(daemon.port)

    def raw_fetch() -> None:
        _fetch_all(raw, "bench-fetch", n_records, 1 << 20)

    ratio("daemon fetch 8 MiB, raw Fetch v11 loop", raw_fetch, baseline, target=None,
          unit_bytes=total, rounds=7, min_sample=0.05, baseline_label="Log.read")
    raw.close()
    consumer.close()
    log.close()


def test_broker_cpu_per_fetch_request(measured, note, daemon: Daemon,
                                      page_cache_path: Path) -> None:
    """What one Fetch costs the broker in CPU (every thread, user and system), at two
    answer sizes, against `Log.read` of the same bytes in-process: the fixed cost of a
    request (decoding, the hop to the dir worker and back, the answer's framing, the
    event loop's scheduling) is what keeps the wire figures above from their targets,
    more than the bytes. Raw Fetch v11 requests over one connection, one at a time."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.protocol.producer import ProduceRequest

    batches = make_batches()
    n_records = len(batches) * PER_BATCH
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    admin.create_topics([NewTopic("bench-cost", 1)])["bench-cost"].result(30)
    raw = RawClient(daemon.port)
    T = ProduceRequest.TopicProduceData
    for b in batches:
        for _ in range(100):  # until its leader takes it
            resp = raw.request(ProduceRequest(
                transactional_id=None, acks=1, timeout_ms=10000, topic_data=[T(
                    name="bench-cost", partition_data=[T.PartitionProduceData(
                        index=0, records=b)])]), 8)
            if resp.responses[0].partition_responses[0].error_code == 0:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("bench-cost was not created")
    log = Log.open(page_cache_path / "bench-cost", LogConfig(segment_bytes=256 << 20))
    for b in batches:
        log.append(b)
    log.high_watermark = log.log_end_offset
    pid = daemon.proc.pid

    try:
        per_request = {}
        for size in (64 << 10, 1 << 20):
            _fetch_all(raw, "bench-cost", n_records, size)  # warm
            cpu = []
            for _ in range(5):
                before = process_cpu_s(pid)
                asked = _fetch_all(raw, "bench-cost", n_records, size)
                cpu.append((process_cpu_s(pid) - before) / asked)
            per_request[size] = statistics.median(cpu)
            read_s = _median_s(lambda size=size: _read_all(log, size)) / asked
            measured(f"broker CPU per Fetch of {size >> 10} KiB (raw v11)", per_request[size],
                     read_s, unit_bytes=size, ours_label="broker CPU",
                     baseline_label="Log.read")
        small, big = (64 << 10), (1 << 20)
        per_byte = (per_request[big] - per_request[small]) / (big - small)
        note(f"broker CPU per Fetch request: {per_request[small] * 1e6:.0f} us at 64 KiB, "
             f"{per_request[big] * 1e6:.0f} us at 1 MiB; so about "
             f"{(per_request[small] - per_byte * small) * 1e6:.0f} us a request whatever "
             f"its size, plus {per_byte * (1 << 20) * 1e6:.0f} us per MiB")
    finally:
        raw.close()
        log.close()


def test_broker_cpu_per_fetch_of_many_small_partitions(measured, page_cache_path: Path
                                                       ) -> None:
    """What one Fetch of 100 partitions, each a record behind (a consumer of many
    partitions with a trickle in each), costs the broker in CPU, against `Log.read` of
    the same 100 ranges in-process: per partition, the answer's part of each range is
    a copy written inline (under SPLICE_MIN), not a pipe's two splices."""
    from confluent_kafka.admin import AdminClient, NewTopic

    n = 100
    d = Daemon(page_cache_path / "many", {"num.partitions": n}, dirs=1)
    d.start()
    raw = RawClient(d.port)
    logs = []
    try:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([NewTopic("many", n)])["many"].result(60)
        del admin  # its threads would try the broker after it stopped
        batch = records.build_batch([records.Record(key=b"k", value=bytes(200))])
        producer = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 5})
        for i in range(n):
            producer.produce("many", key=b"k", value=bytes(200), partition=i)
        assert producer.flush(30) == 0
        del producer
        for i in range(n):
            lg = Log.open(page_cache_path / f"many-base-{i}", LogConfig())
            lg.append(batch)
            lg.high_watermark = lg.log_end_offset
            logs.append(lg)
        request = fetch_request("many", range(n))
        got = raw.request(request, 11).responses[0].partitions
        assert all(len(p.records) > 0 for p in got)
        pid = d.proc.pid
        cpu = []
        for _ in range(7):
            before = process_cpu_s(pid)
            for _ in range(20):
                raw.request(request, 11)
            cpu.append((process_cpu_s(pid) - before) / 20)

        def read_all() -> None:
            for lg in logs:
                lg.read(0, 1 << 20)

        measured(f"broker CPU per Fetch of {n} partitions, 1 small record each",
                 statistics.median(cpu), _median_s(read_all),
                 ours_label="broker CPU", baseline_label="Log.read")
    finally:
        raw.close()
        for lg in logs:
            lg.close()
        d.stop()


def _metadata_answer_pair(topics: int, partitions: int) -> tuple[Callable[[], object],
                                                                  Callable[[], object]]:
    """Building and encoding one Metadata v12 answer of `topics` x `partitions` (three
    replicas each), as the broker does (metadata_messages) and with kafka-python's
    classes, which it used before."""
    import uuid

    from kafka.protocol.metadata import MetadataResponse

    from daemon.api import protocol
    from daemon.api.metadata_messages import (
        BrokerMetadata,
        MetadataAnswer,
        PartitionMetadata,
        TopicMetadata,
    )

    request = protocol.Request(protocol.SUPPORTED[3], 12, 1, None, None, 0)
    ids = [uuid.uuid4() for _ in range(topics)]
    R = MetadataResponse.MetadataResponseTopic
    P = R.MetadataResponsePartition
    B = MetadataResponse.MetadataResponseBroker

    def ours() -> object:
        return protocol.encode_response(request, MetadataAnswer(
            [BrokerMetadata(b, f"10.0.0.{b}", 9092, None) for b in range(3)],
            [TopicMetadata(0, f"topic-{t}", [PartitionMetadata(
                0, i, i % 3, 5, [i % 3, (i + 1) % 3, (i + 2) % 3],
                [i % 3, (i + 1) % 3, (i + 2) % 3], []) for i in range(partitions)],
                topic_id=ids[t]) for t in range(topics)], "cluster", 0))

    def kafka_pythons() -> object:
        return protocol.encode_response(request, MetadataResponse(
            throttle_time_ms=0,
            brokers=[B(node_id=b, host=f"10.0.0.{b}", port=9092, rack=None)
                     for b in range(3)],
            cluster_id="cluster", controller_id=0, topics=[R(
                error_code=0, name=f"topic-{t}", topic_id=ids[t], is_internal=False,
                partitions=[P(error_code=0, partition_index=i, leader_id=i % 3,
                              leader_epoch=5, replica_nodes=[i % 3, (i + 1) % 3, (i + 2) % 3],
                              isr_nodes=[i % 3, (i + 1) % 3, (i + 2) % 3],
                              offline_replicas=[]) for i in range(partitions)])
                for t in range(topics)]))

    assert bytes(ours()[0]) == bytes(kafka_pythons()[0])  # type: ignore[index]
    return ours, kafka_pythons


def test_metadata_answer_vs_kafka_pythons(ratio) -> None:
    """A Metadata answer of 500 partitions (what a client listing every topic of a
    broker gets), built and encoded by hand against kafka-python's classes: the event
    loop's time for each such request, which a failover asks of every client at once."""
    ours, kafka_pythons = _metadata_answer_pair(100, 5)
    ratio("Metadata answer of 100 topics x 5 partitions, encoded", ours, kafka_pythons,
          target=1.0, ours_label="metadata_messages", baseline_label="kafka-python")


def test_broker_cpu_per_metadata_with_many_topics_held(measured, tmp_path: Path) -> None:
    """What a Metadata request for one topic costs a broker that holds 400 more
    partitions, against the same request to a broker that holds that topic alone (two
    daemons, asked in turn, medians of 9 rounds): the answer's cost is its own topic's,
    not the broker's whole (a target of at most 1.25x)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(
        topic_id=None, name="asked")], allow_auto_topic_creation=True,
        include_topic_authorized_operations=False)
    brokers = [Daemon(tmp_path / name, {"num.partitions": 4}, dirs=1)
               for name in ("alone", "crowded")]
    clients: list[RawClient] = []
    try:
        for d in brokers:
            d.start()
            clients.append(RawClient(d.port))
            deadline = time.monotonic() + 30
            while clients[-1].request(request, 12).topics[0].error_code != 0:  # auto-created
                assert time.monotonic() < deadline, "the asked topic was not created"
                time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        for f in admin.create_topics([NewTopic(f"other-{i}", 4) for i in range(100)]).values():
            f.result(60)
        del admin  # its threads would try the broker after it stopped
        per_request: list[list[float]] = [[], []]
        for _ in range(9):
            for i, (d, raw) in enumerate(zip(brokers, clients, strict=True)):
                before = process_cpu_s(d.proc.pid)
                for _ in range(60):
                    raw.request(request, 12)
                per_request[i].append((process_cpu_s(d.proc.pid) - before) / 60)
        alone, crowded = (statistics.median(x) for x in per_request)
        measured("broker CPU per Metadata of 1 topic, 400 other partitions held", crowded,
                 alone, target=1.25, higher_is_better=False, ours_label="400 held",
                 baseline_label="1 topic held")
    finally:
        for raw in clients:
            raw.close()
        for d in brokers:
            d.stop()


def test_transactions_with_verification_vs_without(ratio, page_cache_path: Path) -> None:
    """What transaction verification costs a transactional producer: transactions of 64
    1 KiB records over 4 partitions, each committed before the next begins (a
    stream-processing commit loop), against a daemon that verifies their first batches
    (the default) and one that does not. Each transaction asks once per partition."""
    settings = {"num.partitions": PARTITIONS, "transaction.state.log.num.partitions": 1,
                "offsets.topic.num.partitions": 1}
    on = Daemon(page_cache_path / "on", settings).start()
    off = Daemon(page_cache_path / "off", {
        **settings, "transaction.partition.verification.enable": False}).start()
    producers = []
    try:
        def transactions(d: Daemon, tid: str) -> Callable[[], None]:
            p = ck.Producer({"bootstrap.servers": d.bootstrap, "transactional.id": tid,
                             "linger.ms": 1})
            producers.append(p)
            p.init_transactions(30)
            value = b"v" * 1024

            def one() -> None:
                p.begin_transaction()
                for i in range(64):
                    p.produce("bench-txn", value, partition=i % PARTITIONS)
                p.commit_transaction(30)

            one()  # the topic made, the coordinator found
            return one

        ours, baseline = transactions(on, "verified"), transactions(off, "unverified")
        ratio("transactions of 64 records on 4 partitions, verification on vs off", ours,
              baseline, target=None, unit_bytes=64 * 1024, rounds=11, min_sample=0.05,
              baseline_label="verification off")
    finally:
        producers.clear()
        on.stop()
        off.stop()


def test_resident_memory_with_1000_partitions(benchmark, note, tmp_path: Path) -> None:
    d = Daemon(tmp_path, {"num.partitions": 1})
    d.start()
    try:
        proc = psutil.Process(d.proc.pid)  # type: ignore[union-attr]
        idle = proc.memory_info().rss
        from kafka.protocol.admin import CreateTopicsRequest

        C = CreateTopicsRequest.CreatableTopic
        c = RawClient(d.port, timeout=300)
        resp = c.request(CreateTopicsRequest(topics=[
            C(name=f"p{i}", num_partitions=10, replication_factor=1, assignments=[],
              configs=[]) for i in range(100)], timeout_ms=300000, validate_only=False), 4)
        assert all(t.error_code == 0 for t in resp.topics)
        c.close()
        producer = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 50})
        for i in range(100):
            for p in range(10):
                producer.produce(f"p{i}", value=b"x" * 100, partition=p)
        assert producer.flush(120) == 0
        dirs = [sum(1 for x in ld.iterdir() if x.is_dir()) for ld in d.log_dirs]
        assert sum(dirs) == 1000 and min(dirs) > 300
        rss = proc.memory_info().rss
        fds = proc.num_fds()
    finally:
        d.stop()
    line = (f"daemon RSS: {rss / 2**20:.1f} MiB with 1,000 partitions over 3 log dirs "
            f"(idle, no partitions: {idle / 2**20:.1f} MiB; "
            f"{(rss - idle) / 1000 / 1024:.1f} KiB per partition; {fds} open fds)")
    benchmark.extra_info.update(rss_bytes=rss, idle_rss_bytes=idle, partitions=1000, fds=fds)
    if not benchmark.disabled:
        benchmark.pedantic(lambda: None, rounds=1)
    note(line)  # above the table: written from here, -q's progress dots swallowed it
