"""A real ZooKeeper server for tests: daemon.tools.zookeeper's, skipped (or failed in
CI) when Debian's `zookeeper` package is not installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from daemon.tools import zookeeper
from daemon.tools.zookeeper import free_port

__all__ = ["ZooKeeperServer", "free_port"]


class ZooKeeperServer(zookeeper.ZooKeeperServer):
    def __init__(self, port: int | None = None, base_dir: Path | None = None, *,
                 tls: tuple[Path, Path] | None = None):
        if not zookeeper.installed():
            if os.environ.get("CI", "").lower() in ("1", "true"):
                pytest.fail("ZooKeeper (Debian package zookeeper) is missing; make test installs it")
            pytest.skip("ZooKeeper is not installed here; `make test` installs it")
        super().__init__(port, base_dir, tls=tls)
