"""A real ZooKeeper server on loopback, from Debian's `zookeeper` package, for
`logkeeper dev-cluster` and the tests.

`ZooKeeperServer` writes its own config and data dir under a directory (a new temporary
one unless given), starts `QuorumPeerMain` on a free 127.0.0.1 port, waits until it
answers `ruok`, and can be stopped and started again on the same port and data (for
"ZooKeeper away, then back"). Errors: `ZooKeeperMissing` when Java or the package's jars
are not installed; RuntimeError naming the log when the server exits or does not answer.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

JARS = Path("/usr/share/java")
CLASSPATH = f"{JARS}/*:/etc/zookeeper/conf"


class ZooKeeperMissing(RuntimeError):
    """Java or Debian's zookeeper package is not installed."""


def installed() -> bool:
    return bool(shutil.which("java")) and any(JARS.glob("zookeeper*.jar"))


_PICKED: set[int] = set()  # ports handed out by this process: never twice


def _ephemeral_low(procfs: str = "/proc") -> int:
    """The lowest local port the kernel gives outgoing connections (Linux's default
    range starts at 32768)."""
    try:
        with open(f"{procfs}/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# The ports `free_port` picks from, "LOW-HIGH" (HIGH excluded), when set: processes that
# pick ports at the same time (the test suite's parallel workers) each take their own
# share, so none hands out a port another has picked but not bound yet.
PORTS_ENV = "LK_FREE_PORTS"


def free_port_range(environ: Mapping[str, str] = os.environ) -> range:
    """Where `free_port` picks: `LK_FREE_PORTS`, else the 12,000 ports below the kernel's
    ephemeral range. ValueError for an `LK_FREE_PORTS` that is not LOW-HIGH."""
    given = environ.get(PORTS_ENV)
    if given is None:
        low = _ephemeral_low()
        below = range(max(1024, low - 12000), low)
        return below if len(below) >= 1000 else range(0)  # no room: the kernel's pick
    try:
        lo, hi = (int(part) for part in given.split("-"))
    except ValueError:
        lo = hi = -1
    if not 1024 <= lo < hi <= 65536:
        raise ValueError(f"{PORTS_ENV}={given}: expected LOW-HIGH, 1024 <= LOW < HIGH <= 65536")
    return range(lo, hi)


def free_port() -> int:
    """A 127.0.0.1 port nothing is bound to, for a server about to start on it.

    Picked below the kernel's ephemeral range (or from `LK_FREE_PORTS`): a port the
    kernel picks (bind to port 0) comes from that range, where every outgoing connection
    takes its local port too, and one can take it before the server binds it ("address
    already in use", seen when a benchmark's brokers start while clients connect). Only
    when there is no room below the range is the kernel's pick used."""
    candidates = free_port_range()
    for _ in range(200 if candidates else 0):
        port = random.choice(candidates)
        if port in _PICKED:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PICKED.add(port)
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeperServer:
    """`tls`: also serve TLS on `secure_port` (`secure_hosts`), with (the server's PEM
    keystore, the PEM truststore its clients' certificates must chain to), the client
    certificate required and its subject made the client's `x509` identity (ZooKeeper's
    X509AuthenticationProvider); the plaintext port stays for `ruok`."""

    def __init__(self, port: int | None = None, base_dir: Path | None = None, *,
                 tls: tuple[Path, Path] | None = None):
        if not installed():
            raise ZooKeeperMissing("ZooKeeper is not installed: `apt-get install zookeeper` "
                                   "(Debian's package; it brings Java)")
        self.port = port or free_port()
        self._own_dir = base_dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="lk-zk-")) if base_dir is None else base_dir
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        self.cfg = self.dir / "zoo.cfg"
        self.cfg.write_text(
            f"tickTime=500\ndataDir={self.dir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nmaxSessionTimeout=60000\nminSessionTimeout=1000\n"
            "4lw.commands.whitelist=ruok,stat\nadmin.enableServer=false\n")
        self.secure_port: int | None = None
        if tls is not None:
            keystore, truststore = tls
            self.secure_port = free_port()
            with open(self.cfg, "a") as cfg:
                cfg.write(
                    f"secureClientPort={self.secure_port}\nsecureClientPortAddress=127.0.0.1\n"
                    "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                    f"ssl.keyStore.location={keystore}\nssl.keyStore.type=PEM\n"
                    f"ssl.trustStore.location={truststore}\nssl.trustStore.type=PEM\n"
                    "ssl.clientAuth=need\nauthProvider.x509="
                    "org.apache.zookeeper.server.auth.X509AuthenticationProvider\n")
        self.proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secure_hosts(self) -> str:
        if self.secure_port is None:
            raise RuntimeError("this ZooKeeper serves no TLS port")
        return f"127.0.0.1:{self.secure_port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "zk.log"

    def start(self, timeout: float = 30) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + str(self.dir),
                 "-cp", CLASSPATH, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                 str(self.cfg)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {self.log_path.read_text()[-2000:]}")
            if ruok(self.port):
                return
            time.sleep(0.2)
        raise RuntimeError(f"ZooKeeper did not answer on {self.hosts} within {timeout}s "
                           f"(log: {self.log_path})")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
