"""Network partitions for real: each broker in a network namespace of its own, joined
by a veth pair to a bridge in a hub namespace where ZooKeeper and the test's clients
live; `cut(a, b)` drops every packet between two of them (nftables on the bridge and
on the hub's own stack), silently, as a broken link does, and `heal` lets them through
again. Nothing touches the host's own network: the test's thread enters the hub for
the duration and comes back.

Needs root, iproute2 and nft (Debian's nftables); `NetLab.usable()` says why not.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from typing import Any

from .daemon_helpers import Daemon, write_config
from .zkserver import ZooKeeperServer

CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"
HUB = f"{SUBNET}.254"
ZK = "zk"  # the hub's ZooKeeper, as an end of a cut


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _run(*cmd: str, input: str | None = None) -> None:
    subprocess.run(cmd, check=True, input=input, text=True, capture_output=True, timeout=30)


class NetLab:
    """A hub namespace (entered by the calling thread until `close`) and one namespace
    per broker id, each reaching the hub's bridge at SUBNET.<id>."""

    @staticmethod
    def usable() -> str | None:
        """None when the lab can be built here, else why not."""
        if os.geteuid() != 0:
            return "needs root (network namespaces)"
        for tool in ("ip", "nft", "nsenter"):
            if shutil.which(tool) is None:
                return f"needs `{tool}` (Debian: iproute2, nftables)"
        return None

    def __init__(self, brokers: list[int]):
        self.tag = f"lkn{os.getpid()}"
        self.hub = f"{self.tag}-hub"
        self.spaces = {b: f"{self.tag}-b{b}" for b in brokers}
        self.zk_port = 0
        self._cuts: set[frozenset[Any]] = set()
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        self._made: list[str] = []
        try:
            _run("ip", "netns", "add", self.hub)
            self._made.append(self.hub)
            fd = os.open(f"/run/netns/{self.hub}", os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            _run("ip", "link", "set", "lo", "up")
            _run("ip", "link", "add", "lkbr", "type", "bridge")
            _run("ip", "addr", "add", f"{HUB}/24", "dev", "lkbr")
            _run("ip", "link", "set", "lkbr", "up")
            for b, ns in self.spaces.items():
                _run("ip", "netns", "add", ns)
                self._made.append(ns)
                _run("ip", "link", "add", f"v{b}", "type", "veth", "peer", "name", "eth0",
                     "netns", ns)
                _run("ip", "link", "set", f"v{b}", "master", "lkbr", "up")
                _run("ip", "-n", ns, "addr", "add", f"{SUBNET}.{b}/24", "dev", "eth0")
                _run("ip", "-n", ns, "link", "set", "eth0", "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
            self._apply()
        except BaseException:
            self.close()
            raise

    def address(self, b: int) -> str:
        return f"{SUBNET}.{b}"

    def prefix(self, b: int) -> list[str]:
        """What runs a command in broker `b`'s network namespace (its mounts stay the
        test's: a disk unmounted and mounted again is seen there too)."""
        return ["nsenter", f"--net=/run/netns/{self.spaces[b]}", "--"]

    def zookeeper(self) -> HubZooKeeper:
        """A ZooKeeper server (not started) the brokers reach in the hub; cuts to ZK
        name its port."""
        zk = HubZooKeeper()
        self.zk_port = zk.port
        self._apply()
        return zk

    def place(self, b: int, d: Daemon) -> None:
        """Broker `b`'s daemon (not started) listens on its own address."""
        d.host = self.address(b)
        d.values["listeners"] = f"PLAINTEXT://{d.host}:{d.port}"
        d.values["http.listen"] = f"{d.host}:{d.http_port}"
        d.config = write_config(d.config, d.values)

    # ---- cutting links ----

    def cut(self, a: Any, b: Any) -> None:
        """Drop every packet between `a` and `b` (broker ids or ZK), both ways."""
        self._cuts.add(frozenset((a, b)))
        self._apply()

    def isolate(self, b: int) -> None:
        """`b` cut from ZooKeeper and every other broker (the hub's clients still reach it)."""
        for other in [ZK, *self.spaces]:
            if other != b:
                self._cuts.add(frozenset((b, other)))
        self._apply()

    def heal(self, a: Any = None, b: Any = None) -> None:
        """Let `a` and `b` talk again; every link when neither is given."""
        if a is None:
            self._cuts.clear()
        else:
            self._cuts.discard(frozenset((a, b)))
        self._apply()

    def _apply(self) -> None:
        forward, into, out = [], [], []
        for pair in self._cuts:
            ends = sorted(pair, key=str)
            if ZK in pair:
                (b,) = [e for e in ends if e != ZK]
                into.append(f"ip saddr {self.address(b)} tcp dport {self.zk_port} drop")
                out.append(f"ip daddr {self.address(b)} tcp sport {self.zk_port} drop")
            else:
                x, y = (self.address(e) for e in ends)
                forward += [f"ip saddr {x} ip daddr {y} drop", f"ip saddr {y} ip daddr {x} drop"]

        def chain(name: str, hook: str, rules: list[str]) -> str:
            body = "".join(f"    {r}\n" for r in rules)
            return (f"  chain {name} {{\n    type filter hook {hook} priority 0; policy accept;\n"
                    f"{body}  }}\n")

        ruleset = (
            "table bridge lknet\ndelete table bridge lknet\n"
            "table inet lknet\ndelete table inet lknet\n"
            f"table bridge lknet {{\n{chain('forward', 'forward', forward)}}}\n"
            f"table inet lknet {{\n{chain('input', 'input', into)}"
            f"{chain('output', 'output', out)}}}\n")
        _run("nft", "-f", "-", input=ruleset)

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Back to the thread's own namespace; every namespace made is deleted (their
        veths and the bridge with them)."""
        try:
            _setns(self._home)
        finally:
            os.close(self._home)
            for ns in reversed(self._made):
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            self._made.clear()


class HubZooKeeper(ZooKeeperServer):
    """ZooKeeper in the hub, reachable by the brokers' namespaces at HUB."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg.write_text(self.cfg.read_text().replace(
            "clientPortAddress=127.0.0.1", "clientPortAddress=0.0.0.0"))

    @property
    def hosts(self) -> str:
        return f"{HUB}:{self.port}"
