"""Stand-in brokers for the controller's tests.

Until the broker side of issue 10 lands (the ReplicaManager answering LeaderAndIsr,
UpdateMetadata and StopReplica), `StandInBroker` stands in for a logkeeper broker: it
registers `/brokers/ids/<id>` (Kafka's v5 JSON, its own ZooKeeper session, so closing
the session is the broker going away), listens on loopback, decodes each control request
with `daemon.wire`'s classes and answers as a ZooKeeper-mode Kafka broker does:
- LeaderAndIsr: 56 for partitions in `offline`; else 0 when the request's leader epoch
  is above the one it last applied (which it then keeps), 11 when it is not;
- StopReplica: 56 for partitions in `offline`, else 0 (and with delete=true the
  partition is forgotten);
- UpdateMetadata: 0.
Partitions in `saturated` are on a full dir: 56 to LeaderAndIsr, StopReplica as any
other. While `answer_leader_and_isr` is clear, LeaderAndIsr answers are held (the
request is recorded at once).
It records every request it decoded, in arrival order. The real end-to-end tests, with
logkeeper daemons as the brokers, come with the wiring of the controller.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

from kazoo.client import KazooClient

from daemon.cluster import znodes
from daemon.wire import CONTROL_APIS, views

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6


def wait_for(pred, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


class StandInBroker:
    def __init__(self, hosts: str, broker_id: int, port: int = 0):
        self.hosts = hosts
        self.broker_id = broker_id
        self.offline: set[tuple[str, int]] = set()
        self.saturated: set[tuple[str, int]] = set()
        self.answer_leader_and_isr = threading.Event()
        self.answer_leader_and_isr.set()
        self.epochs: dict[tuple[str, int], int] = {}
        self.requests: list[tuple[int, Any]] = []
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", port))
        self.port = self.server.getsockname()[1]
        self.server.settimeout(0.1)  # so that close() ends the accept loop at once
        self.client: KazooClient | None = None
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        t = threading.Thread(target=self._accept, name=f"stand-in-broker-{broker_id}", daemon=True)
        t.start()
        self._threads.append(t)

    # -- ZooKeeper ----------------------------------------------------------------------

    def register(self) -> int:
        """Register with a new session; returns the broker epoch (czxid)."""
        self.deregister()
        self.client = KazooClient(hosts=self.hosts, timeout=4)
        self.client.start(timeout=15)
        reg = znodes.BrokerRegistration(
            self.broker_id, (znodes.BrokerEndpoint("PLAINTEXT", "127.0.0.1", self.port),),
            int(time.time() * 1000))
        _, stat = self.client.create(znodes.broker_path(self.broker_id), znodes.encode_broker(reg),
                                     ephemeral=True, makepath=True, include_data=True)
        return stat.czxid

    def deregister(self) -> None:
        """Close the session: the registration goes at once, as when a broker stops."""
        if self.client is not None:
            self.client.stop()
            self.client.close()
            self.client = None

    def announce_log_dir_event(self) -> None:
        assert self.client is not None
        self.client.create(znodes.log_dir_event_path(), znodes.encode_log_dir_event(self.broker_id),
                           sequence=True, makepath=True)

    # -- what it received ---------------------------------------------------------------

    def received(self, api_key: int | None = None) -> list[Any]:
        with self.lock:
            return [r for k, r in self.requests if api_key is None or k == api_key]

    def api_keys(self) -> list[int]:
        with self.lock:
            return [k for k, _ in self.requests]

    def leader_and_isr_states(self) -> list[views.LeaderAndIsrPartition]:
        return [p for r in self.received(LEADER_AND_ISR) for p in views.leader_and_isr_partitions(r)]

    def metadata_states(self) -> list[views.MetadataPartition]:
        return [p for r in self.received(UPDATE_METADATA) for p in views.update_metadata_partitions(r)]

    def stop_replicas(self) -> list[views.StopReplicaPartition]:
        return [p for r in self.received(STOP_REPLICA) for p in views.stop_replica_partitions(r)]

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()

    # -- the server ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                 name=f"stand-in-broker-{self.broker_id}-conn")
            t.start()
            self._threads.append(t)

    def _recv(self, conn: socket.socket, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = conn.recv(n - len(buf))
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while not self._stopped.is_set():
                head = self._recv(conn, 4)
                if head is None:
                    return
                frame = self._recv(conn, struct.unpack(">i", head)[0])
                if frame is None:
                    return
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
                request_cls, response_cls = CONTROL_APIS[api_key]
                request = request_cls.decode(frame, version=version, header=True)
                with self.lock:
                    self.requests.append((api_key, request))
                if api_key == LEADER_AND_ISR:
                    while not (self.answer_leader_and_isr.wait(0.1) or self._stopped.is_set()):
                        pass
                with self.lock:
                    response = self._answer(api_key, version, request, response_cls)
                response.API_VERSION = version
                response.with_header(correlation_id=correlation_id)
                try:
                    conn.sendall(bytes(response.encode(header=True, framed=True)))
                except OSError:
                    return

    def _answer(self, api_key: int, version: int, request: Any, response_cls: Any) -> Any:
        if api_key == LEADER_AND_ISR:
            errors = {}
            for p in views.leader_and_isr_partitions(request):
                key = (p.topic, p.partition)
                if key in self.offline or key in self.saturated:
                    errors[key] = 56
                elif p.leader_epoch > self.epochs.get(key, -1):
                    self.epochs[key] = p.leader_epoch
                    errors[key] = 0
                else:
                    errors[key] = 11
            return views.leader_and_isr_response(version, errors)
        if api_key == STOP_REPLICA:
            errors = {}
            for p in views.stop_replica_partitions(request):
                key = (p.topic, p.partition)
                errors[key] = 56 if key in self.offline else 0
                if p.delete and key not in self.offline:
                    self.epochs.pop(key, None)
            return views.stop_replica_response(version, errors)
        return response_cls(version=version, error_code=0)

    def close(self) -> None:
        self._stopped.set()
        self.deregister()
        for t in self._threads[:1]:
            t.join(timeout=5)
        self.server.close()
        for c in self._conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=5)
