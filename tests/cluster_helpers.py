"""A real cluster for tests: a ZooKeeper server and N logkeeper broker processes on
loopback, each with its own log dirs, plus raw Metadata and Produce helpers."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from kafka.protocol.metadata import MetadataRequest
from kazoo.client import KazooClient

from .daemon_helpers import Daemon, RawClient
from .netsplit import NetLab
from .zkserver import ZooKeeperServer

SESSION_MS = 4000  # how long a killed or paused broker keeps its ZooKeeper session


def wait_for(pred: Any, timeout: float = 30.0, what: Any = "") -> Any:
    """`pred()` once truthy; `what` (a string, or a callable giving one at the timeout)
    names what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = pred()
        except (OSError, ConnectionError):
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            about = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {about or pred}")
        time.sleep(0.1)


class Cluster:
    def __init__(self, root: Path, brokers: int = 3, dirs: int = 2,
                 extra: dict[str, Any] | None = None,
                 log_dirs: dict[int, list[Path]] | None = None,
                 per_broker: dict[int, dict[str, Any]] | None = None,
                 zk_tls: tuple[Path, Path] | None = None, net: NetLab | None = None):
        """`log_dirs` gives some brokers their own dirs (mounts made by the test);
        `per_broker` some brokers settings of their own (broker.rack...); `zk_tls`: the
        brokers reach ZooKeeper on its TLS port, which serves with (keystore, truststore)
        (the brokers' zookeeper.ssl.* keys come in `extra`); `net`: each broker runs in
        its own network namespace of that lab, ZooKeeper in its hub (tests.netsplit),
        so links between them can be cut."""
        self.net = net
        self.zk = ZooKeeperServer(tls=zk_tls) if net is None else net.zookeeper()
        self.zk.start()
        hosts = self.zk.hosts if zk_tls is None else self.zk.secure_hosts
        self.brokers: dict[int, Daemon] = {}
        for b in range(1, brokers + 1):
            own = (log_dirs or {}).get(b)
            values = {"broker.id": b, "zookeeper.connect": hosts,
                      "zookeeper.session.timeout.ms": SESSION_MS,
                      # A broker stopping while another replica has not caught up asks
                      # the controller again this soon (Kafka's default waits 5 s).
                      "controlled.shutdown.retry.backoff.ms": 500, **(extra or {}),
                      **(per_broker or {}).get(b, {})}
            if own:
                values["log.dirs"] = [str(p) for p in own]
            self.brokers[b] = Daemon(root / f"broker{b}", values, dirs=dirs,
                                     prefix=None if net is None else net.prefix(b))
            if net is not None:
                net.place(b, self.brokers[b])
            if own:
                self.brokers[b].log_dirs = list(own)

    def start(self) -> Cluster:
        for d in self.brokers.values():
            d.start()
        wait_for(lambda: all(len(self.metadata(b)["brokers"]) == len(self.brokers)
                             and self.metadata(b)["controller"] > 0 for b in self.brokers),
                 30, lambda: "every broker to see every broker and a controller; "
                             f"they see:\n{self.views()}")
        return self

    def views(self) -> str:
        """Each broker's controller and brokers as it answers them, and the end of its
        log: what a failed wait reports."""
        out = []
        for b, d in self.brokers.items():
            try:
                m = self.metadata(b)
                seen = f"controller {m['controller']}, brokers {m['brokers']}"
            except OSError as err:
                seen = f"no answer ({err})"
            out.append(f"broker {b}: {seen}\n{d.stderr()[-3000:]}")
        return "\n".join(out)

    def close(self) -> None:
        """Stop every broker, then the ZooKeeper server, even when a stop raises."""
        try:
            for d in self.brokers.values():
                try:
                    if d.proc is not None and d.proc.poll() is None:
                        d.proc.send_signal(signal.SIGCONT)
                        d.stop()
                except (RuntimeError, OSError):
                    pass
                finally:
                    d.kill()
        finally:
            self.zk.close()

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            # A broker that failed to start: `__exit__` is not called then, and the
            # brokers already up and the ZooKeeper server would be left running.
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def alive(self) -> list[int]:
        return [b for b, d in self.brokers.items() if d.proc is not None and d.proc.poll() is None]

    def metadata(self, broker: int, topics: list[str] | None = None) -> dict[str, Any]:
        """What `broker` answers to Metadata v7: controller id, broker ids, and per
        (topic, partition) (leader, leader epoch, replicas, isr, offline replicas)."""
        d = self.brokers[broker]
        c = RawClient(d.port, host=d.host)
        try:
            req = MetadataRequest[7](
                topics=None if topics is None else
                [MetadataRequest[7].MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=False)
            resp = c.request(req, 7)
        finally:
            c.close()
        parts = {}
        for t in resp.topics:
            for p in t.partitions:
                parts[(t.name, p.partition_index)] = (
                    p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes),
                    list(p.offline_replicas))
        return {"controller": resp.controller_id, "cluster_id": resp.cluster_id,
                "brokers": sorted(b.node_id for b in resp.brokers), "partitions": parts,
                "errors": {t.name: t.error_code for t in resp.topics}}

    def controller(self) -> int:
        return self.metadata(self.alive()[0])["controller"]

    def agreed(self, topic: str, partitions: int) -> dict[str, Any] | None:
        """The metadata every live broker gives, if they all agree and every partition
        of `topic` has a leader; else None."""
        views = [self.metadata(b, [topic]) for b in self.alive()]
        first = views[0]
        parts = {k: v for k, v in first["partitions"].items() if k[0] == topic}
        if len(parts) != partitions or any(v[0] < 0 for v in parts.values()):
            return None
        if any(v != first for v in views[1:]):
            return None
        return first


class IsrWatch:
    """Samples every live broker's Metadata for `partitions` of `topic` until stopped,
    keeping each sample whose ISR was not `want`."""

    def __init__(self, cl: Cluster, topic: str, partitions: list[int], want: list[int]):
        self.cl, self.topic, self.partitions, self.want = cl, topic, partitions, want
        self.bad: list[tuple[int, int, list[int]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for b in self.cl.alive():
                try:
                    parts = self.cl.metadata(b, [self.topic])["partitions"]
                except OSError:
                    continue
                for p in self.partitions:
                    isr = sorted(parts[(self.topic, p)][3])
                    if isr != self.want:
                        self.bad.append((b, p, isr))
            self.samples += 1
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def no_log_dir_event_left(cl: Cluster, timeout: float = 20) -> None:
    """Wait until the controller has consumed every log_dir_event notification."""
    zc = KazooClient(hosts=cl.zk.hosts)
    zc.start(15)
    try:
        wait_for(lambda: not zc.get_children("/log_dir_event_notification"), timeout,
                 "every log_dir_event consumed by the controller")
    finally:
        zc.stop()
        zc.close()


def peers_reached(cl: Cluster) -> dict[int, list[int]]:
    """The remote ports of each broker's established TCP connections (its own
    connections to the other brokers among them)."""
    import psutil

    out = {}
    for b, d in cl.brokers.items():
        assert d.proc is not None
        out[b] = [c.raddr.port for c in psutil.Process(d.proc.pid).net_connections("tcp")
                  if c.raddr and c.status == psutil.CONN_ESTABLISHED]
    return out


INTER_BROKER_USER = ("broker", "broker-secret")  # the SCRAM login of secure_inter_broker


def secure_inter_broker(cl: Cluster, protocol: str, root: Path, *,
                        create_user: bool = True) -> tuple[dict[int, int], Any]:
    """Give every broker of `cl` (not started yet) a BROKER listener of `protocol` (SSL,
    SASL_PLAINTEXT or SASL_SSL) as its inter-broker listener, beside CLIENT, the
    PLAINTEXT one on its usual port that the helpers and loads use: TLS with a
    certificate per broker from one test CA (advertised as localhost, so host names are
    checked) and client certificates required; SASL with SCRAM-SHA-512 as
    INTER_BROKER_USER, written to ZooKeeper first (unless `create_user` is False: the
    caller does). Returns (broker -> BROKER port, the CA or None)."""
    from daemon.tools.configs import alter_user_in_zookeeper

    from .daemon_helpers import write_config
    from .tls_helpers import CertificateAuthority
    from .zkserver import free_port

    tls = protocol in ("SSL", "SASL_SSL")
    ca = CertificateAuthority(root / "ca") if tls else None
    ports = {b: free_port() for b in cl.brokers}
    user, password = INTER_BROKER_USER
    for b, d in cl.brokers.items():
        values: dict[str, Any] = {
            "listeners": f"CLIENT://127.0.0.1:{d.port},BROKER://127.0.0.1:{ports[b]}",
            "advertised.listeners": f"CLIENT://127.0.0.1:{d.port},BROKER://localhost:{ports[b]}",
            "listener.security.protocol.map": f"CLIENT:PLAINTEXT,BROKER:{protocol}",
            "inter.broker.listener.name": "BROKER"}
        if ca is not None:
            values.update({"ssl.keystore.location": str(ca.issue(f"broker{b}").keystore_pem),
                           "ssl.truststore.location": str(ca.cert_pem),
                           "ssl.truststore.type": "PEM", "ssl.client.auth": "required"})
        if protocol.startswith("SASL"):
            values.update({
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.broker.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{password}";'})
        d.values.update(values)
        d.config = write_config(d.root / "logkeeper.toml", d.values)
    if protocol.startswith("SASL") and create_user:
        alter_user_in_zookeeper(cl.zk.hosts, user, {"SCRAM-SHA-512": f"password={password}"}, [])
    return ports, ca
