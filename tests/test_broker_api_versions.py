"""`logkeeper broker-api-versions` (kafka-broker-api-versions.sh) against a real
daemon: each broker with what it serves, in Kafka's format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from daemon.api.protocol import SUPPORTED
from tests.daemon_helpers import REPO, running
from tests.zkserver import free_port


def tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", "broker-api-versions", *args],
                          text=True, capture_output=True, cwd=REPO, timeout=60)


def test_prints_each_api_the_broker_serves_and_what_it_does_not(tmp_path: Path) -> None:
    with running(tmp_path, {"broker.rack": "r1"}) as d:
        r = tool("--bootstrap-server", d.bootstrap)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"127.0.0.1:{d.port} (id: 1 rack: r1) -> ("
    assert lines[-1] == ")"
    body = [line.removeprefix("\t").rstrip(",") for line in lines[1:-1]]
    assert all(line.startswith("\t") for line in lines[1:-1])
    produce, fetch = SUPPORTED[0], SUPPORTED[1]
    assert f"Produce(0): {produce.min_version} to {produce.max_version} " \
           f"[usable: {produce.max_version}]" in body
    assert f"Fetch(1): {fetch.min_version} to {fetch.max_version} " \
           f"[usable: {fetch.max_version}]" in body
    assert "ListPartitionReassignments(46): 0 [usable: 0]" in body
    # SASL, transactions and DescribeCluster are served; KRaft's DescribeQuorum is not,
    # and is said not to be.
    assert "SaslHandshake(17): 0 to 1 [usable: 1]" in body
    assert "EndTxn(26): 0 to 3 [usable: 3]" in body
    assert "DescribeProducers(61): 0 [usable: 0]" in body
    assert "DescribeCluster(60): 0 to 1 [usable: 1]" in body
    assert "DescribeQuorum(55): UNSUPPORTED" in body
    keys = [int(line.split("(")[1].split(")")[0]) for line in body]
    assert keys == sorted(keys) and set(SUPPORTED) <= set(keys)


def test_no_broker_is_a_clear_error() -> None:
    port = free_port()
    r = tool("--bootstrap-server", f"127.0.0.1:{port}")
    assert r.returncode == 2
    assert f"127.0.0.1:{port}" in r.stderr and "cannot connect" in r.stderr
