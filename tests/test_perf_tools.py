"""`logkeeper producer-perf-test` and `consumer-perf-test`: Kafka's
kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh, what a Kafka user runs
against a new broker right after the console tools. Against a real daemon: the records
they report are the records in the log (checked with confluent-kafka and the broker's
offsets), in Kafka's output formats, and bad input changes nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_helpers import wait_for
from tests.daemon_helpers import REPO, Daemon, running
from tests.zkserver import free_port

PRODUCER_TOTAL = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$",
    re.M)
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("perf"), {"num.partitions": 1}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        for fut in admin.create_topics([
                NewTopic("perf", 3, 1), NewTopic("cperf", 2, 1),
                NewTopic("small", 1, 1, config={"max.message.bytes": "1000"})]).values():
            fut.result(30)
        producer = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 5})
        for i in range(3000):
            producer.produce("cperf", key=b"k%d" % i, value=b"v" * 200, partition=i % 2)
        assert producer.flush(30) == 0
        yield d


def tool(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", name, *args], text=True,
                          capture_output=True, cwd=REPO, timeout=timeout)


def log_end_offsets(d: Daemon, topic: str) -> dict[int, int]:
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "offsets"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
    finally:
        c.close()


def read_values(d: Daemon, topic: str, count: int) -> list[ck.Message]:
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": f"check-{topic}",
                     "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[ck.Message] = []
    try:
        wait_for(lambda: got.extend(m for m in c.consume(500, 0.5) if not m.error())
                 or len(got) >= count, 30, f"{count} records of {topic}")
    finally:
        c.close()
    return got


def test_producer_perf_test_reports_the_records_the_log_holds(daemon: Daemon) -> None:
    # bootstrap.servers from --producer-props, as Kafka's; Java's serializer names and an
    # unknown config are taken as Kafka's tool takes them (the latter with its warning).
    r = tool("producer-perf-test", "--topic", "perf", "--num-records", "5000",
             "--record-size", "100", "--throughput", "-1", "--print-metrics",
             "--producer-props", f"bootstrap.servers={daemon.bootstrap}", "acks=1",
             "key.serializer=org.apache.kafka.common.serialization.ByteArraySerializer",
             "no.such.config=1")
    assert r.returncode == 0, r.stderr
    assert "WARN The configuration 'no.such.config' was supplied but isn't a known config." \
        in r.stderr
    (total,) = PRODUCER_TOTAL.findall(r.stdout)
    count, rate, mb, avg, mx, p50, p95, p99, p999 = total
    assert int(count) == 5000 and float(rate) > 0 and float(mb) > 0
    assert int(p50) <= int(p95) <= int(p99) <= int(p999) <= float(mx)
    assert float(avg) <= float(mx)
    assert sum(log_end_offsets(daemon, "perf").values()) == 5000
    got = read_values(daemon, "perf", 5000)
    assert len(got) == 5000
    assert all(m.key() is None and re.fullmatch(rb"[A-Z]{100}", m.value()) for m in got)
    assert len({m.value() for m in got}) == 5000  # drawn afresh for each record
    # --print-metrics: the client's own counters, of the whole run.
    assert "Metric Name" in r.stdout
    sent = [int(v) for v in re.findall(
        r"^producer-metrics:txmsgs:\{client-id=perf-producer-client, topic=perf, "
        r"partition=\d\} *: (\d+)$", r.stdout, re.M)]
    assert sent and sum(sent) == 5000, r.stdout


def test_payloads_from_a_file_or_monotonic(daemon: Daemon, tmp_path: Path) -> None:
    f = tmp_path / "payloads.txt"
    f.write_text("alpha\nbeta\ngamma\n")
    r = tool("producer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "words",
             "--num-records", "60", "--payload-file", str(f), "--throughput", "-1")
    assert r.returncode == 0, r.stderr
    assert f"Reading payloads from: {f}" in r.stdout
    assert "Number of messages read: 3" in r.stdout
    assert PRODUCER_TOTAL.search(r.stdout).group(1) == "60"
    assert {m.value() for m in read_values(daemon, "words", 60)} == {b"alpha", b"beta", b"gamma"}

    # The delimiter is a regular expression, trailing empty payloads dropped (Java's split).
    f.write_text("a1, b22,,c333, ,")
    r = tool("producer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "words2",
             "--num-records", "40", "--payload-file", str(f), "--payload-delimiter", r",\s*",
             "--throughput", "-1")
    assert r.returncode == 0, r.stderr
    assert "Number of messages read: 4" in r.stdout
    assert {m.value() for m in read_values(daemon, "words2", 40)} == {b"a1", b"b22", b"", b"c333"}

    r = tool("producer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "mono",
             "--num-records", "50", "--payload-monotonic", "--throughput", "-1")
    assert r.returncode == 0, r.stderr
    got = read_values(daemon, "mono", 50)
    assert [m.value() for m in sorted(got, key=lambda m: m.offset())] == \
        [b"%d" % i for i in range(50)]


def test_throughput_caps_the_rate(daemon: Daemon) -> None:
    r = tool("producer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "slow",
             "--num-records", "600", "--record-size", "10", "--throughput", "300",
             "--producer-props", "linger.ms=0")
    assert r.returncode == 0, r.stderr
    m = PRODUCER_TOTAL.search(r.stdout)
    assert m.group(1) == "600"
    assert float(m.group(2)) <= 300 * 1.15, r.stdout


def test_records_the_broker_refuses_are_named_and_fail_the_run(daemon: Daemon) -> None:
    r = tool("producer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "small",
             "--num-records", "5", "--record-size", "5000", "--throughput", "-1")
    assert r.returncode == 1
    assert r.stderr.count("ERROR Error when sending message to topic small with key: null, "
                          "value: 5000 bytes with error:") == 5, r.stderr
    assert "5 of 5 records were not acknowledged" in r.stderr
    assert PRODUCER_TOTAL.search(r.stdout).group(1) == "0"
    assert log_end_offsets(daemon, "small") == {0: 0}


@pytest.mark.parametrize(("args", "message"), [
    (["--num-records", "5", "--throughput", "-1"],
     "one of the arguments --record-size --payload-file --payload-monotonic is required"),
    (["--num-records", "5", "--record-size", "10", "--payload-monotonic", "--throughput", "-1"],
     "not allowed with argument"),
    (["--num-records", "0", "--record-size", "10", "--throughput", "-1"],
     "--num-records should be greater than zero"),
    (["--num-records", "5", "--record-size", "0", "--throughput", "-1"],
     "--record-size should be greater than zero"),
    (["--num-records", "5", "--record-size", "10", "--throughput", "0"],
     "--throughput 0 would send nothing"),
    (["--num-records", "5", "--record-size", "10", "--throughput", "-1",
      "--transaction-duration-ms", "0"], "--transaction-duration-ms should be greater than zero"),
    (["--num-records", "5", "--record-size", "10", "--throughput", "-1",
      "--producer-props", "acks"], "--producer-props 'acks': expected KEY=VALUE"),
    (["--num-records", "5", "--record-size", "10", "--throughput", "-1",
      "--producer-props", "linger.ms=soon"], "client config: Invalid value"),
    (["--num-records", "5", "--payload-file", "/nonexistent/payloads", "--throughput", "-1"],
     "File does not exist or empty file provided."),
])
def test_producer_bad_input_is_refused_and_writes_nothing(daemon: Daemon, args: list[str],
                                                          message: str) -> None:
    r = tool("producer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic",
             "never", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert "never" not in AdminClient({"bootstrap.servers": daemon.bootstrap}) \
        .list_topics(timeout=10).topics


def test_no_broker_is_a_clear_error() -> None:
    port = free_port()
    r = tool("producer-perf-test", "--bootstrap-server", f"127.0.0.1:{port}", "--topic", "t",
             "--num-records", "5", "--record-size", "10", "--throughput", "-1")
    assert r.returncode == 2
    assert f"no broker at 127.0.0.1:{port}" in r.stderr
    r = tool("consumer-perf-test", "--bootstrap-server", f"127.0.0.1:{port}", "--topic", "t",
             "--messages", "5")
    assert r.returncode == 2
    assert f"no broker at 127.0.0.1:{port}" in r.stderr


def test_consumer_perf_test_reads_the_topic_in_a_group_and_commits(daemon: Daemon) -> None:
    r = tool("consumer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "cperf",
             "--messages", "3000", "--group", "perf-group")
    assert r.returncode == 0, r.stderr
    header, line = r.stdout.splitlines()
    assert header == CONSUMER_HEADER
    fields = line.split(", ")
    assert len(fields) == 10 and re.fullmatch(DATE, fields[0]) and re.fullmatch(DATE, fields[1])
    data = sum(len(b"k%d" % i) + 200 for i in range(3000))
    assert fields[2] == f"{data / (1 << 20):.4f}"
    assert fields[4] == "3000"
    assert int(fields[6]) >= 0 and int(fields[7]) >= 0
    # Its offsets are committed, as Kafka's consumer commits on close.
    c = ck.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": "perf-group"})
    try:
        committed = c.committed([ck.TopicPartition("cperf", p) for p in (0, 1)], timeout=10)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == {0: 1500, 1: 1500}


def test_consumer_timeout_formats_and_detailed_stats(daemon: Daemon) -> None:
    r = tool("consumer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "cperf",
             "--messages", "4000", "--timeout", "8000", "--hide-header",
             "--date-format", "yyyy-MM-dd'T'HH:mm:ss")
    assert r.returncode == 0, r.stderr
    warning, line = r.stdout.splitlines()
    assert warning == ("WARNING: Exiting before consuming the expected number of messages: "
                       "timeout (8000 ms) exceeded. You can use the --timeout option to "
                       "increase the timeout.")
    fields = line.split(", ")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", fields[0]) and fields[4] == "3000"

    r = tool("consumer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "cperf",
             "--messages", "3000", "--show-detailed-stats", "--reporting-interval", "1")
    assert r.returncode == 0, r.stderr
    header, *lines = r.stdout.splitlines()
    assert header == "time, threadId" + CONSUMER_HEADER.removeprefix("start.time, end.time")
    assert lines, "no progress line"
    counts = []
    for line in lines:
        fields = line.split(", ")
        assert len(fields) == 10 and re.fullmatch(DATE, fields[0]) and fields[1] == "0", line
        counts.append(int(fields[4]))
    assert counts == sorted(counts) and counts[-1] <= 3000


@pytest.mark.parametrize(("args", "message"), [
    (["--messages", "0"], "--messages should be greater than zero"),
    (["--messages", "5", "--reporting-interval", "0"], "Reporting interval must be greater than 0."),
    (["--messages", "5", "--date-format", "yyyy-QQ"], "the pattern letter 'Q' is not supported"),
    (["--messages", "5", "--consumer.config", "/nonexistent/consumer.properties"],
     "--consumer.config /nonexistent/consumer.properties: No such file or directory"),
    ([], "the following arguments are required: --messages"),
])
def test_consumer_bad_input_is_refused(daemon: Daemon, args: list[str], message: str) -> None:
    r = tool("consumer-perf-test", "--bootstrap-server", daemon.bootstrap, "--topic", "cperf",
             "--group", "never-group", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})  # held until answered
    groups = admin.list_consumer_groups().result(10).valid
    assert "never-group" not in {g.group_id for g in groups}


def test_e2e_latency_reads_back_each_record_it_sends(daemon: Daemon) -> None:
    """kafka-e2e-latency.sh: a topic it does not find is created (1 partition); each
    record is read back before the next is sent; Kafka's report lines."""
    r = tool("e2e-latency", daemon.bootstrap, "latency", "1200", "all", "64")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == ('Topic "latency" does not exist. Will create topic with 1 partition(s) '
                        "and replication factor = 1")
    assert [line.split("\t")[0] for line in lines[1:3]] == ["0", "1000"]
    assert all(float(line.split("\t")[1]) > 0 for line in lines[1:3])
    assert re.fullmatch(r"Avg latency: \d+\.\d{4} ms", lines[3])
    p50, p99, p999 = map(int, re.fullmatch(
        r"Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)", lines[4]).groups())
    assert p50 <= p99 <= p999
    assert log_end_offsets(daemon, "latency") == {0: 1200}
    values = [m.value() for m in read_values(daemon, "latency", 1200)]
    assert all(len(v) == 64 and len(set(v)) == 1 and 65 <= v[0] <= 90 for v in values)
    # A second run on the existing topic reads only its own records, from the log end.
    r = tool("e2e-latency", daemon.bootstrap, "latency", "10", "1", "8")
    assert r.returncode == 0, r.stderr
    assert "does not exist" not in r.stdout
    assert log_end_offsets(daemon, "latency") == {0: 1210}


@pytest.mark.parametrize(("args", "message"), [
    (["t", "5", "0", "10"], "Latency testing requires synchronous acknowledgement. Please use 1 or all"),
    (["t", "0", "1", "10"], "num_messages should be greater than zero"),
    (["t", "5", "1"], "the following arguments are required: message_size_bytes"),
])
def test_e2e_latency_bad_input(daemon: Daemon, args: list[str], message: str) -> None:
    r = tool("e2e-latency", daemon.bootstrap, *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
