"""`logkeeper get-offsets` and `logkeeper delete-records` (Kafka's kafka-get-offsets.sh
and kafka-delete-records.sh) against the real daemon, each answer checked with a real
Kafka client (confluent-kafka's watermarks and offsets_for_times); and
`logkeeper leader-election` standalone (every partition already led by its only
replica). The election in a cluster is in test_cluster_preferred_leaders.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.daemon_helpers import REPO, Daemon, free_port, running

T0 = 1_700_000_000_000  # the first record's timestamp (ms); record i has T0 + i


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("partition-tools"), {
            "log.segment.bytes": 4096, "auto.create.topics.enable": False}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        for fut in admin.create_topics([NewTopic("orders", 3, 1), NewTopic("pay", 2, 1),
                                        NewTopic("audit", 1, 1), NewTopic("trim", 3, 1)]).values():
            fut.result(30)
        # Batches under segment.bytes: Kafka refuses a larger one (RECORD_LIST_TOO_LARGE).
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 0, "batch.size": 3000})
        for i in range(300):  # 100 per partition, partition p's k-th record at T0 + 3k + p
            p.produce("orders", value=b"o" * 100, partition=i % 3, timestamp=T0 + i)
        for i in range(10):
            p.produce("pay", value=b"p", partition=0, timestamp=T0 + i)
        for i in range(60):  # delete-records' topic: 20 records per partition
            p.produce("trim", value=b"t" * 100, partition=i % 3)
        assert p.flush(30) == 0
        yield d


def _watermarks(d: Daemon, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "watermarks"})
    try:
        return {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)
                for p in range(partitions)}
    finally:
        c.close()


def _printed(proc: subprocess.CompletedProcess[str]) -> dict[tuple[str, int], int]:
    out = {}
    for line in proc.stdout.splitlines():
        topic, partition, offset = line.rsplit(":", 2)
        out[(topic, int(partition))] = int(offset)
    return out


def test_get_offsets_prints_each_partitions_offset_as_a_kafka_client_sees_it(
        daemon: Daemon) -> None:
    bs = daemon.bootstrap
    orders, pay = _watermarks(daemon, "orders", 3), _watermarks(daemon, "pay", 2)
    latest = cli("get-offsets", "--bootstrap-server", bs, "--exclude-internal-topics")
    assert latest.returncode == 0, latest.stderr
    trim = _watermarks(daemon, "trim", 3)
    assert _printed(latest) == {("audit", 0): 0, **{("orders", p): orders[p][1] for p in range(3)},
                                **{("pay", p): pay[p][1] for p in range(2)},
                                **{("trim", p): trim[p][1] for p in range(3)}}
    assert orders[0] == (0, 100) and pay[0] == (0, 10)
    # Kafka's order: by "topic-partition" as a string.
    assert [line.split(":")[0] for line in latest.stdout.splitlines()] == \
        ["audit", "orders", "orders", "orders", "pay", "pay", "trim", "trim", "trim"]
    # Internal topics too unless left out, as in Kafka's tool (the consumers above made
    # __consumer_offsets).
    every = _printed(cli("get-offsets", "--bootstrap-server", bs))
    assert {t for t, _ in every} == {"__consumer_offsets", "audit", "orders", "pay", "trim"}

    earliest = cli("get-offsets", "--bootstrap-server", bs, "--topic", "ord.*", "--time", "-2")
    assert _printed(earliest) == {("orders", p): orders[p][0] for p in range(3)}

    # A time: the first record at or after it, as offsets_for_times answers; a time after
    # every record's has no offset and is left out, as in Kafka's tool.
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": "times"})
    try:
        want = c.offsets_for_times([ck.TopicPartition("orders", p, T0 + 150) for p in range(3)],
                                   timeout=10)
    finally:
        c.close()
    at = cli("get-offsets", "--bootstrap-server", bs, "--topic", "orders", "--partitions", "0,2",
             "--time", str(T0 + 150))
    assert _printed(at) == {("orders", tp.partition): tp.offset for tp in want
                            if tp.partition in (0, 2)}
    assert all(tp.offset == 50 for tp in want)
    after = cli("get-offsets", "--bootstrap-server", bs, "--topic", "orders",
                "--time", str(T0 + 10_000))
    assert after.returncode == 0 and after.stdout == ""

    # Rules: orders from partition 1 on, pay's partition 0 only; max-timestamp is the
    # offset of each partition's newest record.
    rules = cli("get-offsets", "--bootstrap-server", bs, "--topic-partitions", "orders:1-,pay:0",
                "--time", "max-timestamp")
    assert _printed(rules) == {("orders", 1): 99, ("orders", 2): 99, ("pay", 0): 9}, rules.stderr


def test_get_offsets_refuses_a_bad_question(daemon: Daemon) -> None:
    bs = daemon.bootstrap
    for args, exit_code, said in (
            (["--topic", "nope"], 1, "Could not match any topic-partitions"),
            (["--time", "yesterday"], 2, "Malformed time argument yesterday"),
            (["--topic", "orders", "--topic-partitions", "pay"], 2, "cannot be used with"),
            (["--partitions", "0,x"], 2, "comma separated list of numeric partition ids"),
            (["--topic", "ord[ers"], 2, "not a regular expression"),
            (["--topic-partitions", "orders:1:2"], 2, "Invalid rule specification: orders:1:2")):
        proc = cli("get-offsets", "--bootstrap-server", bs, *args)
        assert proc.returncode == exit_code and said in proc.stderr, (args, proc.stderr)
        assert proc.stdout == ""
    unreachable = f"127.0.0.1:{free_port()}"
    proc = cli("get-offsets", "--bootstrap-server", unreachable)
    assert proc.returncode == 2 and f"cannot connect to {unreachable}" in proc.stderr


def test_delete_records_moves_each_partitions_log_start_and_names_the_refusals(
        daemon: Daemon, tmp_path: Path) -> None:
    bs = daemon.bootstrap
    before = _watermarks(daemon, "trim", 3)
    assert before == {p: (0, 20) for p in range(3)}
    plan = tmp_path / "delete.json"

    # Files refused before any broker is asked: nothing deleted.
    for text, said in (
            ("{not json", "not JSON"),
            ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
            ('{"partitions": [{"topic": "trim", "partition": 0}]}', "partitions[0] is"),
            ('{"partitions": [{"topic": "trim", "partition": 0, "offset": -2}]}', "-1 (the high"),
            ('{"partitions": [{"topic": "trim", "partition": 0, "offset": 1},'
             ' {"topic": "trim", "partition": 0, "offset": 2}]}',
             "Offset json file contains duplicate topic partitions: trim-0")):
        plan.write_text(text)
        proc = cli("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(plan))
        assert proc.returncode == 2 and said in proc.stderr, (text, proc.stderr)
    assert _watermarks(daemon, "trim", 3) == before
    proc = cli("delete-records", "--bootstrap-server", bs, "--offset-json-file",
               str(tmp_path / "missing.json"))
    assert proc.returncode == 2 and "missing.json" in proc.stderr

    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "trim", "partition": 0, "offset": 4},
        {"topic": "trim", "partition": 1, "offset": -1},  # the high watermark
        {"topic": "trim", "partition": 2, "offset": 5000},  # past it: refused
        {"topic": "nope", "partition": 0, "offset": 1}]}))
    proc = cli("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(plan))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["Executing records delete operation",
                         "Records delete operation completed:"]
    assert lines[2].startswith("partition: nope-0\terror: UnknownTopicOrPartitionError")
    assert lines[3:] == ["partition: trim-0\tlow_watermark: 4",
                         "partition: trim-1\tlow_watermark: 20",
                         "partition: trim-2\terror: OffsetOutOfRangeError (1): "
                         "The requested offset is outside the range of offsets maintained "
                         "by the server for the given topic/partition."]
    assert _watermarks(daemon, "trim", 3) == {0: (4, 20), 1: (20, 20), 2: (0, 20)}
    # A consumer from the beginning starts at the new log start.
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": "after-delete"})
    try:
        c.assign([ck.TopicPartition("trim", 0, ck.OFFSET_BEGINNING)])
        got: list[int] = []
        for _ in range(20):
            got += [m.offset() for m in c.consume(20, 0.5) if not m.error()]
            if len(got) >= 16:
                break
    finally:
        c.close()
    assert got == list(range(4, 20))
    earliest = cli("get-offsets", "--bootstrap-server", bs, "--topic", "trim", "--time", "earliest")
    assert _printed(earliest) == {("trim", 0): 4, ("trim", 1): 20, ("trim", 2): 0}


def test_leader_election_standalone_has_nothing_to_elect(daemon: Daemon, tmp_path: Path) -> None:
    bs = daemon.bootstrap
    proc = cli("leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
               "--topic", "audit", "--partition", "0")
    assert (proc.returncode, proc.stdout) == (0, "Valid replica already elected for partitions "
                                                 "audit-0\n"), proc.stderr
    proc = cli("leader-election", "--bootstrap-server", bs, "--election-type", "unclean",
               "--all-topic-partitions")
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    plan = tmp_path / "elect.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "orders", "partition": 0},
                                               {"topic": "nope", "partition": 3}]}))
    proc = cli("leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
               "--path-to-json-file", str(plan))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "Valid replica already elected for partitions orders-0",
        "Error completing leader election (PREFERRED) for partition: nope-3: "
        "UnknownTopicOrPartitionError (3): The partition does not exist."]
    for args, said in (
            (["--topic", "orders"], "--topic needs --partition"),
            (["--partition", "0", "--all-topic-partitions"], "--partition needs --topic"),
            (["--topic", "orders", "--partition", "0", "--all-topic-partitions"],
             "not --topic and --all-topic-partitions"),
            ([], "one of --topic"),
            (["--path-to-json-file", str(tmp_path / "missing.json")], "missing.json")):
        proc = cli("leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
                   *args)
        assert proc.returncode == 2 and said in proc.stderr, (args, proc.stderr)
    plan.write_text('{"partitions": [{"topic": "orders", "partition": 0},'
                    ' {"topic": "orders", "partition": 0}]}')
    proc = cli("leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
               "--path-to-json-file", str(plan))
    assert proc.returncode == 2
    assert "Replica election data contains duplicate partitions: orders-0" in proc.stderr
    proc = cli("leader-election", "--bootstrap-server", bs, "--election-type", "sideways",
               "--all-topic-partitions")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
