"""The `logkeeper` command line as a user runs it: a real subprocess, real pipes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.protocol.metadata import MetadataRequest

from logstore import Log, LogConfig
from tests.daemon_helpers import (
    EMBEDDED_DEFAULTS,
    REPO,
    Daemon,
    RawClient,
    free_port,
    running,
    skip_if_in_use,
)

from .logutil import batch


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=120)


def test_output_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    for _ in range(3000):  # ~600 KB of dump-log lines: far more than a pipe holds
        log.append(batch(1, size=10))
    log.close()
    (segment,) = (tmp_path / "t-0").glob("*.log")
    script = (f'"{sys.executable}" -m daemon.cli dump-log "{segment}" | head -n 2; '
              'echo "status ${PIPESTATUS[0]}" >&2')
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert len(proc.stdout.splitlines()) == 2
    assert proc.stderr == "status 141\n"  # no traceback, no "Exception ignored"


def test_version_is_the_installed_packages_and_the_daemon_logs_it(tmp_path: Path) -> None:
    import importlib.metadata

    installed = importlib.metadata.version("logkeeper")  # make test installs the checkout
    for flag in ("--version", "-V"):
        proc = cli(flag)
        assert proc.returncode == 0 and proc.stdout == f"logkeeper {installed}\n", proc.stderr
    with running(tmp_path) as d:
        pass
    assert f"logkeeper {installed} serving Kafka protocol on" in d.stderr_path.read_text()


@EMBEDDED_DEFAULTS
def test_topics_describe_finds_the_local_daemon_through_its_config(tmp_path: Path) -> None:
    with running(tmp_path, {"num.partitions": 2}) as d:
        c = RawClient(d.port)  # Metadata v1 naming a topic creates it
        c.request(MetadataRequest[1](topics=["auto"]), 1)
        c.close()
        proc = cli("topics", "describe", "--config", str(d.config))
        assert proc.returncode == 0, proc.stderr
        assert re.search(r"Topic: auto\tTopicId: [\w-]{22}\tPartitionCount: 2", proc.stdout)
        # no flag at all: the embedded defaults' listener, 127.0.0.1:9092, run from a dir
        # without a config; the daemon under test is not there, so it names that address
    skip_if_in_use(9092)
    proc = cli("topics", "describe", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--bootstrap-server" not in proc.stderr and "127.0.0.1:9092" in proc.stderr


def test_topics_describe_with_a_bad_config_names_it(tmp_path: Path) -> None:
    bad = tmp_path / "server.properties"
    bad.write_text("listeners=PLAINTEXT://127.0.0.1:nope\n")
    proc = cli("topics", "describe", "--config", str(bad))
    assert proc.returncode == 2 and str(bad) in proc.stderr and "listeners" in proc.stderr
    both = cli("topics", "describe", "--config", str(bad), "--bootstrap-server",
               f"127.0.0.1:{free_port()}")
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_topics_describe_config_with_an_any_address_listener_asks_loopback(
        tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    d.config.write_text(d.config.read_text().replace(
        "PLAINTEXT://127.0.0.1:", "PLAINTEXT://:"))  # bound on every interface
    with d.start():
        proc = cli("topics", "describe", "--config", str(d.config), "--json")
        assert proc.returncode == 0, proc.stderr
        assert f'"port": {d.port}' in proc.stdout


def test_topics_create_list_alter_and_delete_as_kafka_topics_sh(tmp_path: Path) -> None:
    """kafka-topics.sh's --create, --list, --alter --partitions and --delete, against a
    daemon that confluent-kafka then reads the result from: the topic's configs applied,
    its partitions there, refusals that say why and change nothing."""
    import confluent_kafka.admin as ca

    with running(tmp_path, {"num.partitions": 2}) as d:
        at = ("--bootstrap-server", d.bootstrap)
        made = cli("topics", "create", *at, "--topic", "orders", "--partitions", "3",
                   "--topic-config", "retention.ms=60000", "--topic-config",
                   "cleanup.policy=compact")
        assert (made.returncode, made.stdout) == (0, "Created topic orders.\n"), made.stderr
        assert cli("topics", "create", *at, "--topic", "plain").returncode == 0
        admin = ca.AdminClient({"bootstrap.servers": d.bootstrap})
        topics = admin.list_topics(timeout=10).topics
        assert len(topics["orders"].partitions) == 3
        assert len(topics["plain"].partitions) == 2  # the broker's num.partitions
        [f] = admin.describe_configs([ca.ConfigResource("topic", "orders")]).values()
        configs = f.result(30)
        assert configs["retention.ms"].value == "60000"
        assert configs["cleanup.policy"].value == "compact"

        listed = cli("topics", "list", "--config", str(d.config))
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == sorted(["orders", "plain"] + (
            ["__consumer_offsets"] if "__consumer_offsets" in topics else []))
        shown = cli("topics", "describe", *at, "--topic", "orders")
        assert ("Topic: orders\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: "
                "cleanup.policy=compact,retention.ms=60000\n") in re.sub(
                    r"\tTopicId: [\w-]{22}", "", shown.stdout)

        again = cli("topics", "create", *at, "--topic", "orders", "--partitions", "9")
        assert again.returncode == 1
        assert "error 36" in again.stderr and "already exists" in again.stderr
        assert "nothing changed" in again.stderr
        assert cli("topics", "create", *at, "--topic", "orders", "--if-not-exists",
                   "--partitions", "9").returncode == 0
        # kafka-topics.sh's --config K=V: told what to write instead, nothing created
        misplaced = cli("topics", "create", *at, "--topic", "x", "--config", "retention.ms=5")
        assert misplaced.returncode == 2 and "--topic-config retention.ms=5" in misplaced.stderr
        bad = cli("topics", "create", *at, "--topic", "x", "--replica-assignment", "1:1")
        assert bad.returncode == 2 and "names a broker twice" in bad.stderr
        assert "x" not in admin.list_topics(timeout=10).topics

        grown = cli("topics", "alter", *at, "--topic", "orders", "--partitions", "5")
        assert grown.returncode == 0, grown.stderr
        fewer = cli("topics", "alter", *at, "--topic", "orders", "--partitions", "4")
        assert fewer.returncode == 1 and "error 37" in fewer.stderr
        assert len(admin.list_topics(timeout=10).topics["orders"].partitions) == 5

        gone = cli("topics", "delete", *at, "--topic", "plain")
        assert (gone.returncode, gone.stdout) == (0, "Deleted topic plain.\n"), gone.stderr
        assert "plain" not in admin.list_topics(timeout=10).topics
        missing = cli("topics", "delete", *at, "--topic", "plain")
        assert missing.returncode == 1 and "error 3 " in missing.stderr
        assert cli("topics", "delete", *at, "--topic", "plain", "--if-exists").returncode == 0
        assert cli("topics", "list", *at, "--exclude-internal").stdout == "orders\n"


def test_free_ports_come_from_below_the_ephemeral_range_and_never_twice() -> None:
    """The test and dev-cluster servers' ports: outside the range outgoing connections
    take their local ports from (one took a broker's port before it was bound, in a
    benchmark), each one bindable, none handed out twice by this process."""
    import socket

    from daemon.tools.zookeeper import _ephemeral_low, free_port

    low = _ephemeral_low()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(p < low for p in ports)
    for p in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_free_ports_come_from_lk_free_ports_when_it_is_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The share of the range a parallel test worker (or anything else that starts
    servers beside another picker) takes: LK_FREE_PORTS=LOW-HIGH, HIGH excluded; a value
    that is not a range of ports is named."""
    from daemon.tools import zookeeper

    monkeypatch.setenv(zookeeper.PORTS_ENV, "20000-20040")
    assert zookeeper.free_port_range() == range(20000, 20040)
    ports = {zookeeper.free_port() for _ in range(20)}
    assert len(ports) == 20 and all(20000 <= p < 20040 for p in ports)
    for bad in ("20000", "20040-20000", "80-90", "a-b", "20000-70000"):
        monkeypatch.setenv(zookeeper.PORTS_ENV, bad)
        with pytest.raises(ValueError, match=f"LK_FREE_PORTS={bad}: expected LOW-HIGH"):
            zookeeper.free_port_range()


def test_kafkas_action_flags_stand_for_the_subcommand() -> None:
    """`kafka-topics.sh --list`, `kafka-consumer-groups.sh --describe --group G`: an
    operator's habit is taken as the subcommand instead of failing on 'invalid choice'."""
    from daemon.cli import kafka_action_flag

    b = ["--bootstrap-server", "h:9092"]
    assert kafka_action_flag("topics", ["--list", *b]) == ["list", *b]
    assert kafka_action_flag("topics", [*b, "--describe", "--topic", "t"]) == \
        ["describe", *b, "--topic", "t"]
    assert kafka_action_flag("groups", ["--delete-offsets", "--group", "g"]) == \
        ["delete-offsets", "--group", "g"]
    assert kafka_action_flag("configs", ["--alter", "--topic", "t", "--delete-config", "k"]) \
        == ["alter", "--topic", "t", "--delete-config", "k"]
    # Already a subcommand, two actions at once, or a tool without: left to argparse.
    assert kafka_action_flag("topics", ["describe", "--list"]) == ["describe", "--list"]
    assert kafka_action_flag("topics", ["--list", "--describe"]) == ["--list", "--describe"]
    assert kafka_action_flag("acls", ["--list", *b]) == ["--list", *b]
    r = subprocess.run([sys.executable, "-m", "daemon.cli", "topics", "--create", "--topic",
                        "t", "--bootstrap-server", "127.0.0.1:1"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert "invalid choice" not in r.stderr and "cannot connect" in r.stderr, r.stderr
