"""Fixtures shared by every test file: the real Kafka log dirs kept in tests/fixtures/, and a
real ZooKeeper server per test module (`zk`; fails in CI, skips elsewhere, when missing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KAFKA_FIXTURES = REPO / "tests" / "fixtures" / "kafka"


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
