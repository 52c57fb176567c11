"""Fixtures shared by every test file: the real Kafka log dirs kept in tests/fixtures/."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KAFKA_FIXTURES = REPO / "tests" / "fixtures" / "kafka"


@pytest.fixture(scope="session")
def kafka_fixtures() -> Path:
    if not KAFKA_FIXTURES.is_dir():
        pytest.fail(f"the real Kafka fixtures are missing: expected {KAFKA_FIXTURES}")
    return KAFKA_FIXTURES
