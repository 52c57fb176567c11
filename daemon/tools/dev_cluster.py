"""`logkeeper dev-cluster`: a local cluster for trying logkeeper out and for tests.

Starts a real ZooKeeper (Debian's `zookeeper` package, daemon.tools.zookeeper) and N
`logkeeper serve` processes on loopback, each with its own config, log dirs and log file
under the base dir (`broker<N>/`), prints the bootstrap servers once every broker is
serving, and on Ctrl-C, SIGTERM or a hang-up stops the brokers (SIGTERM, their clean
shutdown) and then ZooKeeper. Without `--base-dir` everything lives in a temporary dir
removed at the end; a given base dir is kept (restarting on it keeps the topics' data but
starts a new ZooKeeper, so the cluster's znodes are not kept).

A broker that exits on its own once the cluster serves (a crash, or a `kill -9` to watch
leadership fail over) is reported, and the others keep serving. SIGUSR1 restarts every
broker that is down: each one starts once ZooKeeper has let go of its old registration
(a killed broker's session lives on for `zookeeper.session.timeout.ms`, and a broker
never takes an id another session holds), with the same config, ports and log dirs.

Exit codes: 0 after a clean stop of every broker; 1 when ZooKeeper or a broker does not
start, or a broker was down at the end or did not stop cleanly (the message names its log
file); 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from .zookeeper import ZooKeeperMissing, ZooKeeperServer, free_port

STOP_TIMEOUT_S = 30.0


class Broker:
    def __init__(self, base: Path, broker_id: int, dirs: int, zk_hosts: str, brokers: int = 3):
        self.id = broker_id
        self.root = base / f"broker{broker_id}"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.http_port = free_port()
        self.log_path = self.root / "logkeeper.log"
        self.config = self.root / "server.properties"
        log_dirs = ",".join(str(self.root / f"disk{i}") for i in range(dirs))
        self.config.write_text(
            f"broker.id={broker_id}\nlog.dirs={log_dirs}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}\n"
            f"http.listen=127.0.0.1:{self.http_port}\n"
            f"zookeeper.connect={zk_hosts}\n"
            # Small reserve files: a dev cluster shares one disk among all its dirs.
            "log.dir.reserve.bytes=1048576\n"
            # Consumer groups on a cluster smaller than Kafka's 3 offsets replicas, and
            # no wait for more members before a group's first rebalance, as Kafka's
            # example server.properties has it for development.
            f"offsets.topic.replication.factor={min(3, brokers)}\n"
            # Topics created without a replication factor (a client's auto-creation, a
            # CreateTopics with -1) get replicas on other brokers too, so killing one
            # shows leadership move rather than a partition going offline.
            f"default.replication.factor={min(3, brokers)}\n"
            "group.initial.rebalance.delay.ms=0\n")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        src = str(Path(__file__).resolve().parents[2])  # the checkout, when not installed
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "daemon.cli", "serve", "--config", str(self.config)],
                cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)  # Ctrl-C reaches us only; we stop them in order

    def serving(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz",
                                        timeout=2) as resp:
                return json.loads(resp.read()).get("status") == "serving"
        except (OSError, ValueError):
            return False

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                print(f"broker {self.id} ignored SIGTERM for {STOP_TIMEOUT_S:.0f} s; killing it",
                      file=sys.stderr)
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def run(brokers: int, dirs: int, base: Path, *, ready_timeout: float = 60.0,
        stop: threading.Event | None = None, restart: threading.Event | None = None) -> int:
    """`stop`: stop everything and return; `restart`: bring back the brokers that are down."""
    stop = stop or threading.Event()
    restart = restart or threading.Event()
    zk = ZooKeeperServer(base_dir=base / "zookeeper")
    started: list[Broker] = []
    code = 0
    try:
        zk.start()
        print(f"ZooKeeper: {zk.hosts} (log {zk.log_path})", flush=True)
        for b in range(1, brokers + 1):
            broker = Broker(base, b, dirs, zk.hosts, brokers)
            broker.start()
            started.append(broker)
        deadline = time.monotonic() + ready_timeout
        waiting = list(started)
        while waiting and not stop.is_set():
            for broker in list(waiting):
                assert broker.proc is not None
                if broker.proc.poll() is not None:
                    raise RuntimeError(f"broker {broker.id} exited {broker.proc.returncode} "
                                       f"during start-up; see {broker.log_path}")
                if broker.serving():
                    waiting.remove(broker)
            if time.monotonic() > deadline:
                raise RuntimeError("brokers " + ", ".join(str(b.id) for b in waiting) +
                                   f" not serving after {ready_timeout:.0f} s; see their "
                                   "logkeeper.log")
            time.sleep(0.1)
        for broker in started:
            print(f"broker {broker.id}: {broker.address} (log {broker.log_path})", flush=True)
        print("bootstrap servers: " + ",".join(b.address for b in started), flush=True)
        _supervise(started, zk.hosts, stop, restart)
    except RuntimeError as err:
        print(f"logkeeper dev-cluster: {err}", file=sys.stderr)
        code = 1
    finally:
        print("stopping the brokers and ZooKeeper", file=sys.stderr, flush=True)
        for broker in reversed(started):
            down = broker.proc is not None and broker.proc.poll() is not None
            rc = broker.stop()
            if down and rc not in (0, None):
                print(f"broker {broker.id} was down ({_how_it_ended(rc)}); see {broker.log_path}",
                      file=sys.stderr)
                code = code or 1
            elif rc not in (0, None):
                print(f"broker {broker.id} exited {rc}; see {broker.log_path}", file=sys.stderr)
                code = code or 1
        zk.stop()
    return code


def _supervise(started: list[Broker], zk_hosts: str, stop: threading.Event,
               restart: threading.Event) -> None:
    """Until `stop`: report each broker that exits on its own (the others keep serving),
    and on `restart` start every broker that is down again, once ZooKeeper no longer holds
    its old registration (a killed broker's session outlives it by the session timeout)."""
    pid = os.getpid()
    down: set[Broker] = set()  # exited on its own, reported
    held: list[Broker] = []  # to restart once its old registration is gone
    starting: list[Broker] = []  # restarted, not serving yet
    zk = KazooClient(hosts=zk_hosts, timeout=10)
    zk.start(timeout=30)
    try:
        while not stop.wait(0.5):
            for broker in started:
                assert broker.proc is not None
                rc = broker.proc.poll()
                if rc is None or broker in down:
                    continue
                down.add(broker)
                if broker in starting:
                    starting.remove(broker)
                alive = [str(b.id) for b in started if b.proc and b.proc.poll() is None]
                print(f"broker {broker.id} {_how_it_ended(rc)}; see {broker.log_path}. "
                      + (f"Still serving: broker {', '.join(alive)}. " if alive else
                         "No broker is serving. ")
                      + f"`kill -USR1 {pid}` restarts what is down.", flush=True)
            if restart.is_set():
                restart.clear()
                for broker in started:
                    if broker in down and broker not in held:
                        held.append(broker)
                        # A clean stop ended its session; a kill left it to time out.
                        print(f"broker {broker.id}: restarting" + (
                            " once ZooKeeper lets go of its old registration (up to "
                            "zookeeper.session.timeout.ms)" if _registered(zk, broker) is not False
                            else ""), flush=True)
            for broker in list(held):
                registered = _registered(zk, broker)
                if registered is None:
                    continue  # ZooKeeper busy or reconnecting: ask again next round
                if not registered:
                    held.remove(broker)
                    down.discard(broker)
                    broker.start()
                    starting.append(broker)
            for broker in list(starting):
                if broker.serving():
                    starting.remove(broker)
                    print(f"broker {broker.id}: serving again at {broker.address}", flush=True)
    finally:
        zk.stop()
        zk.close()


def _registered(zk: KazooClient, broker: Broker) -> bool | None:
    """Whether ZooKeeper still holds the broker's registration (None: it did not say)."""
    try:
        return zk.exists(f"/brokers/ids/{broker.id}") is not None
    except KazooException:
        return None


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited {returncode}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper dev-cluster", description=(
        "Run a local cluster: a ZooKeeper and N brokers on loopback, until Ctrl-C. A broker "
        "that dies is reported and the others keep serving; SIGUSR1 restarts what is down."))
    p.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--dirs-per-broker", type=int, default=2,
                   help="log dirs per broker (default 2)")
    p.add_argument("--base-dir", metavar="DIR",
                   help="where configs, log dirs and logs go (default: a temporary dir, "
                        "removed at the end)")
    return p


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.brokers < 1 or args.dirs_per_broker < 1:
        print("logkeeper dev-cluster: --brokers and --dirs-per-broker must be at least 1",
              file=sys.stderr)
        return 2
    base = Path(args.base_dir) if args.base_dir else Path(tempfile.mkdtemp(prefix="logkeeper-dev-"))
    base.mkdir(parents=True, exist_ok=True)
    stop, restart = threading.Event(), threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: restart.set())
    try:
        return run(args.brokers, args.dirs_per_broker, base, stop=stop, restart=restart)
    except ZooKeeperMissing as err:
        print(f"logkeeper dev-cluster: {err}", file=sys.stderr)
        return 1
    finally:
        if not args.base_dir:
            shutil.rmtree(base, ignore_errors=True)
