"""Fixtures shared by every test file: the real Kafka log dirs kept in tests/fixtures/, and a
real ZooKeeper server per test module (`zk`; fails in CI, skips elsewhere, when missing).

`make test` runs the suite on parallel workers (pytest-xdist, `--dist loadfile`: the
tests of one file run on one worker, in their order, as some build on what an earlier
one left in a module's daemon): most tests wait on brokers, ZooKeeper and disks rather
than compute. Each worker picks the ports of its servers from its own share of the free
range (`LK_FREE_PORTS`, inherited by the processes it starts), so two never pick the
same port before either binds it. The tests that use the embedded defaults' fixed ports
(9092, 9308; `tests.daemon_helpers.EMBEDDED_DEFAULTS`) hold a lock while they run
(`embedded_defaults_ports`), so they run one at a time."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KAFKA_FIXTURES = REPO / "tests" / "fixtures" / "kafka"


def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker, this worker's share of the ports `free_port` picks from."""
    from daemon.tools.zookeeper import PORTS_ENV, free_port_range

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or PORTS_ENV in os.environ:
        return
    whole = free_port_range()
    share = len(whole) // count
    if share < 100:  # no room below the ephemeral range: the kernel picks
        return
    start = whole.start + int(worker[2:]) * share
    os.environ[PORTS_ENV] = f"{start}-{start + share}"


@pytest.fixture
def embedded_defaults_ports() -> Iterator[None]:
    """Held while a test uses 127.0.0.1:9092 and :9308: one such test at a time, across
    the parallel workers (an flock, let go when its holder ends however it ends)."""
    import fcntl

    with open("/tmp/logkeeper-tests-embedded-defaults.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def kafka_fixtures() -> Path:
    if not KAFKA_FIXTURES.is_dir():
        pytest.fail(f"the real Kafka fixtures are missing: expected {KAFKA_FIXTURES}")
    return KAFKA_FIXTURES


@pytest.fixture(scope="module")
def zk() -> Iterator[object]:
    from tests.zkserver import ZooKeeperServer

    server = ZooKeeperServer()
    server.start()
    yield server
    server.close()
