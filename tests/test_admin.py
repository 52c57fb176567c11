"""The admin commands: `logkeeper log-dirs describe` and `logkeeper topics describe`.

Usage and connection errors need no server. The end-to-end tests run the real daemon
(`python -m daemon.cli serve`, tests/daemon_helpers.py), write records with a real
Kafka client, and read the answers back through DescribeLogDirs and Metadata. Without
daemon.app they skip outside CI and fail with CI=true.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.tools import log_dirs as log_dirs_tool
from daemon.tools import topics as topics_tool
from logstore.checkpoint import read_partition_metadata
from tests.cluster_helpers import wait_for
from tests.daemon_helpers import EMBEDDED_DEFAULTS, REPO, Daemon, free_port, running, skip_if_in_use

ADMIN = [(log_dirs_tool.main, "log-dirs"), (topics_tool.main, "topics")]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


# ---- usage and connection errors: exit 2, the message names the server ----


@EMBEDDED_DEFAULTS
@pytest.mark.parametrize("main, name", ADMIN)
def test_usage_errors_exit_2(main, name, capsys: pytest.CaptureFixture[str]) -> None:
    skip_if_in_use(9092)  # without --bootstrap-server: the embedded defaults' listener
    assert main([]) == 2
    assert main(["describe"]) == 2  # no broker there
    assert main(["frobnicate", "--bootstrap-server", "127.0.0.1:9092"]) == 2
    assert main(["describe", "--bootstrap-server", "no-port-here"]) == 2
    assert "no-port-here" in capsys.readouterr().err


def test_bad_broker_list_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert log_dirs_tool.main(["describe", "--bootstrap-server", "127.0.0.1:9", "--broker-list",
                       "zero"]) == 2
    assert "--broker-list" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["log-dirs", "topics"])
def test_unreachable_server_exits_2_naming_it(command: str) -> None:
    server = f"127.0.0.1:{free_port()}"
    proc = cli(command, "describe", "--bootstrap-server", server)
    assert proc.returncode == 2
    assert f"cannot connect to {server}" in proc.stderr
    assert proc.stdout == ""


# ---- against the real daemon ----


TOPIC_ID = r"\tTopicId: [\w-]{22}"  # kafka-topics.sh's, between a topic's name and count


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    from kafka import KafkaProducer

    root = tmp_path_factory.mktemp("admin")
    with running(root, {"broker.id": 3, "num.partitions": 3}) as d:
        producer = KafkaProducer(bootstrap_servers=d.bootstrap, acks="all", linger_ms=5)
        for i in range(30):
            producer.send("orders", value=b"v%d" % i, partition=i % 3)
        producer.send("audit", value=b"x" * 1000, partition=0)
        producer.flush(30)
        producer.close()
        yield d


def test_log_dirs_describe_matches_kafka_log_dirs_json(daemon: Daemon) -> None:
    proc = cli("log-dirs", "describe", "--bootstrap-server", daemon.bootstrap)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["version"] == 1 and [b["broker"] for b in out["brokers"]] == [3]
    dirs = out["brokers"][0]["logDirs"]
    assert sorted(x["logDir"] for x in dirs) == sorted(str(p) for p in daemon.log_dirs)
    sizes = {}
    for x in dirs:
        assert x["error"] is None
        for p in x["partitions"]:
            assert set(p) == {"partition", "size", "offsetLag", "isFuture"}
            assert p["offsetLag"] == 0 and p["isFuture"] is False
            sizes[p["partition"]] = p["size"]
            # The size is what the partition's files hold on that dir.
            files = (Path(x["logDir"]) / p["partition"]).glob("*.log")
            assert p["size"] == sum(f.stat().st_size for f in files)
    assert set(sizes) == {"orders-0", "orders-1", "orders-2", "audit-0", "audit-1", "audit-2"}
    assert all(sizes[f"orders-{i}"] > 0 for i in range(3)) and sizes["audit-0"] > 1000
    assert sizes["audit-1"] == sizes["audit-2"] == 0


def test_log_dirs_describe_filters_topics_and_brokers(daemon: Daemon,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert log_dirs_tool.main(["describe", "--bootstrap-server", daemon.bootstrap,
                       "--topic-list", "audit", "--broker-list", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    parts = [p["partition"] for x in out["brokers"][0]["logDirs"] for p in x["partitions"]]
    assert sorted(parts) == ["audit-0", "audit-1", "audit-2"]
    # A broker that is not in the cluster is an error reported for the run: exit 1.
    assert log_dirs_tool.main(["describe", "--bootstrap-server", daemon.bootstrap,
                       "--broker-list", "3,7"]) == 1
    captured = capsys.readouterr()
    assert [b["broker"] for b in json.loads(captured.out)["brokers"]] == [3]
    assert "broker 7" in captured.err


def test_topics_describe_shows_leader_replicas_isr_offline(daemon: Daemon) -> None:
    proc = cli("topics", "describe", "--bootstrap-server", daemon.bootstrap, "--topic", "orders")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # Its id, as kafka-topics.sh shows it: the one each partition's partition.metadata
    # holds (KIP-516), written when the topic was created.
    ids = {read_partition_metadata(p / "partition.metadata")["topic_id"]
           for d in daemon.log_dirs for p in d.glob("orders-*")}
    assert len(ids) == 1
    assert lines[0].startswith(f"Topic: orders\tTopicId: {ids.pop()}\tPartitionCount: 3\t"
                               "ReplicationFactor: 1")
    for i in range(3):
        assert (f"\tTopic: orders\tPartition: {i}\tLeader: 3\tReplicas: 3\tIsr: 3\tOffline: "
                in lines)


def test_topics_describe_json_and_all_topics(daemon: Daemon,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert topics_tool.main(["describe", "--bootstrap-server", daemon.bootstrap,
                              "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert [t["topic"] for t in js["topics"]] == ["audit", "orders"]
    assert js["brokers"] == [{"id": 3, "host": "127.0.0.1", "port": daemon.port}]
    for t in js["topics"]:
        assert t["error_code"] == 0
        assert [p["partition"] for p in t["partitions"]] == [0, 1, 2]
        for p in t["partitions"]:
            assert (p["leader"], p["replicas"], p["isr"], p["offline"]) == (3, [3], [3], [])


def test_unknown_topic_is_a_broker_error_exit_1(daemon: Daemon) -> None:
    proc = cli("topics", "describe", "--bootstrap-server", daemon.bootstrap, "--topic", "nope")
    assert proc.returncode == 1
    assert "'nope'" in proc.stderr and "UnknownTopicOrPartitionError" in proc.stderr


def test_topics_describe_by_pattern_with_overrides_and_without_internal(tmp_path: Path) -> None:
    """kafka-topics.sh --describe's --topic as a regular expression, --topics-with-overrides
    (only topics with configs of their own, their summary lines) and --exclude-internal."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    with running(tmp_path, {"num.partitions": 2}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        for fut in admin.create_topics([
                NewTopic("orders.eu", 2, 1, config={"retention.ms": "60000"}),
                NewTopic("orders.us", 2, 1), NewTopic("payments", 1, 1)]).values():
            fut.result(30)
        # A group's first offset commit makes __consumer_offsets (its coordinator's
        # lookup does); a consumer that only looked at metadata may close before asking.
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "g"})
        c.commit(offsets=[ck.TopicPartition("payments", 0, 0)], asynchronous=False)
        c.close()
        bs = ["--bootstrap-server", d.bootstrap]

        def topics(*args: str) -> list[str]:
            proc = cli("topics", "describe", *bs, *args)
            assert proc.returncode == 0, proc.stderr
            return [line.split("\t")[0] for line in proc.stdout.splitlines()
                    if line.startswith("Topic: ")]

        assert topics("--topic", "orders.*") == ["Topic: orders.eu", "Topic: orders.us"]
        assert topics("--topic", "orders.us") == ["Topic: orders.us"]  # a name, not a pattern
        overrides = cli("topics", "describe", *bs, "--topics-with-overrides",
                        "--exclude-internal")
        assert re.sub(TOPIC_ID, "", overrides.stdout).splitlines() == [
            "Topic: orders.eu\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: "
            "retention.ms=60000"], overrides.stdout
        wait_for(lambda: "Topic: __consumer_offsets" in topics(), 30, "__consumer_offsets")
        assert "Topic: __consumer_offsets" in topics("--topics-with-overrides")
        assert topics("--exclude-internal") == ["Topic: orders.eu", "Topic: orders.us",
                                                "Topic: payments"]
        none = cli("topics", "describe", *bs, "--topic", "shipping.*")
        assert none.returncode == 1 and "no topic matches shipping.*" in none.stderr
        bad = cli("topics", "describe", *bs, "--topic", "orders[")
        assert bad.returncode == 2 and "not a regular expression" in bad.stderr
