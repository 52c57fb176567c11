"""A real ZooKeeper server (Debian's `zookeeper` package) for tests, on loopback.

`ZooKeeperServer` writes its own config and data dir under a temp dir, starts
`QuorumPeerMain` on a free 127.0.0.1 port, waits until it answers, and can be stopped
and started again on the same port and data (for "ZooKeeper away, then back" tests).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

CLASSPATH = "/usr/share/java/*:/etc/zookeeper/conf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeperServer:
    def __init__(self, port: int | None = None):
        if not shutil.which("java") or not list(Path("/usr/share/java").glob("zookeeper*.jar")):
            if os.environ.get("CI", "").lower() in ("1", "true"):
                pytest.fail("ZooKeeper (Debian package zookeeper) is missing; make test installs it")
            pytest.skip("ZooKeeper is not installed here; `make test` installs it")
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lk-zk-"))
        (self.dir / "data").mkdir()
        self.cfg = self.dir / "zoo.cfg"
        self.cfg.write_text(
            f"tickTime=500\ndataDir={self.dir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nmaxSessionTimeout=60000\nminSessionTimeout=1000\n"
            "4lw.commands.whitelist=ruok,stat\nadmin.enableServer=false\n")
        self.proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        log = open(self.dir / "zk.log", "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + str(self.dir),
             "-cp", CLASSPATH, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
             str(self.cfg)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {(self.dir / 'zk.log').read_text()[-2000:]}")
            if _ruok(self.port):
                return
            time.sleep(0.2)
        raise RuntimeError(f"ZooKeeper did not answer on {self.hosts} within {timeout}s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
