"""The controller's requests to brokers (Kafka's ControllerChannelManager and
ControllerBrokerRequestBatch), docs/controller.md "Requests to brokers".

`RequestBatch` gathers what one step of the state machines wants each broker told and
builds the requests: LeaderAndIsr v4, UpdateMetadata v7 (with topic ids) and StopReplica v3,
sent to each broker in that order. Adding a LeaderAndIsr for a partition also adds an
UpdateMetadata for it to every live broker, as Kafka does; a topic being deleted is
announced with leader -2; `offline_replicas` lists the replicas not online.

`ChannelManager` keeps one sender thread per live broker: a FIFO queue, one request in
flight, a blocking socket. A connection or protocol failure closes the socket and the
same request is tried again after 100 ms until it is answered or the broker is removed
(then its queue is dropped). Each answer goes to `on_response(broker_id, request,
response)` on the sender thread; the controller only enqueues it as an event.

Threads: `RequestBatch` belongs to the controller event thread; `ChannelManager`'s
methods may be called from any thread.
"""

from __future__ import annotations

import logging
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from daemon.api import protocol
from daemon.security import sasl, tls
from daemon.wire import CONTROL_APIS, frames, views
from logstore import TopicPartition

from .context import BrokerInfo, ControllerContext
from .leader_election import LEADER_DURING_DELETE, LeaderAndIsr

log = logging.getLogger("logkeeper.controller.channel")

LEADER_AND_ISR_VERSION = 4
UPDATE_METADATA_VERSION = 7  # v7: topic ids (KIP-516), which Metadata v10+ answers
STOP_REPLICA_VERSION = 3
RETRY_BACKOFF_S = 0.1  # Kafka's controller: reconnect.backoff / retry every 100 ms
_PROTOCOL_IDS = {name: i for i, name in views.SECURITY_PROTOCOLS.items()}


class RequestBatch:
    def __init__(self) -> None:
        self.leader_and_isr: dict[int, dict[TopicPartition, tuple[LeaderAndIsr, bool]]] = {}
        self.update_metadata_brokers: set[int] = set()
        self.update_metadata_partitions: set[TopicPartition] = set()
        self.stop_replica: dict[int, dict[TopicPartition, views.StopReplicaPartition]] = {}

    def is_empty(self) -> bool:
        return not (self.leader_and_isr or self.update_metadata_brokers or self.stop_replica)

    def add_leader_and_isr(self, ctx: ControllerContext, brokers: Iterable[int], tp: TopicPartition,
                           lai: LeaderAndIsr, is_new: bool) -> None:
        for b in brokers:
            if b < 0:
                continue
            per = self.leader_and_isr.setdefault(b, {})
            was_new = per.get(tp, (lai, False))[1]
            per[tp] = (lai, is_new or was_new)
        self.add_update_metadata(ctx.live_broker_ids, [tp])

    def add_update_metadata(self, brokers: Iterable[int], tps: Iterable[TopicPartition]) -> None:
        """`tps` empty: an UpdateMetadata with live brokers only still goes to `brokers`."""
        self.update_metadata_brokers.update(b for b in brokers if b >= 0)
        self.update_metadata_partitions.update(tps)

    def add_stop_replica(self, brokers: Iterable[int], tp: TopicPartition, delete: bool,
                         leader_epoch: int) -> None:
        for b in brokers:
            if b < 0:
                continue
            per = self.stop_replica.setdefault(b, {})
            prev = per.get(tp)
            if prev is not None and prev.delete and not delete:
                continue  # a deletion asked for already includes the stop
            per[tp] = views.StopReplicaPartition(tp.topic, tp.partition, delete, leader_epoch)

    # -- building -----------------------------------------------------------------------

    def requests(self, ctx: ControllerContext, controller_id: int) -> dict[int, list[Any]]:
        """broker -> its requests in order (LeaderAndIsr, UpdateMetadata, StopReplica).
        Brokers that are not live are left out (Kafka drops them too)."""
        out: dict[int, list[Any]] = {}
        live = ctx.live_brokers
        for b, parts in sorted(self.leader_and_isr.items()):
            if b not in live:
                continue
            states = [_leader_and_isr_partition(ctx, tp, lai, is_new)
                      for tp, (lai, is_new) in sorted(parts.items())]
            leaders = sorted({s.leader for s in states if s.leader in live})
            out.setdefault(b, []).append(views.leader_and_isr_request(
                LEADER_AND_ISR_VERSION, controller_id=controller_id, controller_epoch=ctx.epoch,
                broker_epoch=live[b].epoch, partitions=states,
                live_leaders=[_live_leader(live[x]) for x in leaders]))
        if self.update_metadata_brokers:
            partitions = [p for tp in sorted(self.update_metadata_partitions)
                          if (p := _metadata_partition(ctx, tp)) is not None]
            brokers = [_live_broker(live[x]) for x in sorted(live)]
            for b in sorted(self.update_metadata_brokers):
                if b in live:
                    out.setdefault(b, []).append(views.update_metadata_request(
                        UPDATE_METADATA_VERSION, controller_id=controller_id,
                        controller_epoch=ctx.epoch, broker_epoch=live[b].epoch,
                        partitions=partitions, live_brokers=brokers))
        for b, parts in sorted(self.stop_replica.items()):
            if b in live:
                out.setdefault(b, []).append(views.stop_replica_request(
                    STOP_REPLICA_VERSION, controller_id=controller_id, controller_epoch=ctx.epoch,
                    broker_epoch=live[b].epoch, partitions=[parts[tp] for tp in sorted(parts)]))
        return out


def _leader_and_isr_partition(ctx: ControllerContext, tp: TopicPartition, lai: LeaderAndIsr,
                              is_new: bool) -> views.LeaderAndIsrPartition:
    return views.LeaderAndIsrPartition(
        topic=tp.topic, partition=tp.partition, controller_epoch=lai.controller_epoch,
        leader=lai.leader, leader_epoch=lai.leader_epoch, isr=lai.isr,
        partition_epoch=lai.zk_version, replicas=ctx.replicas(tp), is_new=is_new,
        adding_replicas=ctx.full_assignment(tp).adding, removing_replicas=ctx.full_assignment(tp).removing,
        leader_recovery_state=lai.leader_recovery_state, topic_id=ctx.topic_ids.get(tp.topic))


def _metadata_partition(ctx: ControllerContext, tp: TopicPartition) -> views.MetadataPartition | None:
    lai = ctx.leadership.get(tp)
    if lai is None:
        return None
    replicas = ctx.replicas(tp)
    leader = LEADER_DURING_DELETE if ctx.is_topic_queued_for_deletion(tp.topic) else lai.leader
    return views.MetadataPartition(
        topic=tp.topic, partition=tp.partition, controller_epoch=lai.controller_epoch,
        leader=leader, leader_epoch=lai.leader_epoch, isr=lai.isr, zk_version=lai.zk_version,
        replicas=replicas, offline_replicas=tuple(r for r in replicas if not ctx.is_replica_online(r, tp)),
        topic_id=ctx.topic_ids.get(tp.topic))


def _live_broker(info: BrokerInfo) -> views.LiveBroker:
    reg = info.registration
    return views.LiveBroker(info.broker_id, tuple(
        views.Endpoint(e.listener, e.host, e.port, _PROTOCOL_IDS.get(e.security_protocol, 0))
        for e in reg.endpoints), reg.rack)


def _live_leader(info: BrokerInfo, listener: str = "PLAINTEXT") -> views.LiveLeader:
    ep = info.endpoint(listener)
    return views.LiveLeader(info.broker_id, ep.host if ep else "", ep.port if ep else -1)


# -- the senders ------------------------------------------------------------------------

OnResponse = Callable[[int, Any, Any], None]


class _Sender(threading.Thread):
    def __init__(self, controller_id: int, broker: BrokerInfo, listener: str,
                 on_response: OnResponse, socket_timeout: float,
                 tls_context: ssl.SSLContext | None = None,
                 login: tuple[str, str, str] | None = None):
        super().__init__(name=f"controller-{controller_id}-to-broker-{broker.broker_id}-send-thread",
                         daemon=True)
        self.controller_id = controller_id
        self.broker = broker
        self.listener = listener
        self.on_response = on_response
        self.socket_timeout = socket_timeout
        self.tls_context = tls_context  # the inter-broker listener is SSL (or SASL_SSL)
        self.login = login  # ... or SASL: the controller's broker's login
        self.queue: queue.Queue[Any] = queue.Queue()
        self.stopped = threading.Event()
        self.sock: socket.socket | None = None
        self.correlation_id = 0
        self.relogin_at: float | None = None  # time.monotonic() of the next SASL login

    def stop(self) -> None:
        self.stopped.set()
        self.queue.put(None)
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv
            except OSError:
                pass

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                request = self.queue.get()
                if request is None or self.stopped.is_set():
                    break
                response = self._send_until_answered(request)
                if response is not None and not self.stopped.is_set():
                    try:
                        self.on_response(self.broker.broker_id, request, response)
                    except Exception:  # noqa: BLE001 - a callback bug must not end the sender
                        log.exception("controller: response callback failed for broker %d",
                                      self.broker.broker_id)
        finally:
            self._close()

    def _send_until_answered(self, request: Any) -> Any:
        api = CONTROL_APIS[request.API_KEY][1]
        version = request.version
        while not self.stopped.is_set():
            try:
                if self.sock is None:
                    self.sock = self._connect()
                elif self.relogin_at is not None and time.monotonic() >= self.relogin_at:
                    self._log_in(self.sock)  # before the session's end closes it (KIP-368)
                self.correlation_id += 1
                frame = protocol.encode_request(request, version, self.correlation_id,
                                                client_id=str(self.controller_id))
                self.sock.sendall(frame)
                payload = frames.recv_frame(self.sock, f"broker {self.broker.broker_id}")
                response = protocol.decode_response(api, payload, version)
                if response.header.correlation_id != self.correlation_id:
                    raise protocol.ProtocolError(
                        f"correlation id {response.header.correlation_id}, expected {self.correlation_id}")
                return response
            except (OSError, ValueError, protocol.ProtocolError) as err:
                if not self.stopped.is_set():
                    log.warning("controller: %s v%d to broker %d failed (%s); retrying in %d ms",
                                type(request).__name__, version, self.broker.broker_id, err,
                                RETRY_BACKOFF_S * 1000)
                self._close()
                self.stopped.wait(RETRY_BACKOFF_S)
        return None

    def _connect(self) -> socket.socket:
        ep = self.broker.endpoint(self.listener)
        if ep is None:
            raise OSError(f"broker {self.broker.broker_id} has no endpoint")
        sock = tls.connect(ep.host, ep.port, timeout=self.socket_timeout,
                           context=self.tls_context)
        if self.login is not None:
            try:
                self._log_in(sock)
            except OSError:
                sock.close()
                raise
        if self.stopped.is_set():
            sock.close()
            raise OSError("sender stopped")
        return sock

    def _log_in(self, sock: socket.socket) -> None:
        """The SASL login on `sock`, its first or a renewal; OSError when refused."""
        assert self.login is not None
        try:
            lifetime = sasl.login_blocking(sock, self.login, client_id=str(self.controller_id),
                                           peer=f"broker {self.broker.broker_id}")
        except (sasl.AuthenticationFailed, OSError, ValueError, protocol.ProtocolError) as err:
            raise OSError(f"SASL login as {self.login[1]} with {self.login[0]} "
                          f"failed: {err}") from err
        self.relogin_at = sasl.relogin_at(time.monotonic(), lifetime)

    def _close(self) -> None:
        self.relogin_at = None
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None


class ChannelManager:
    def __init__(self, controller_id: int, on_response: OnResponse, *, listener: str = "PLAINTEXT",
                 socket_timeout: float = 30.0, tls_context: ssl.SSLContext | None = None,
                 login: tuple[str, str, str] | None = None):
        self.controller_id = controller_id
        self.on_response = on_response
        self.listener = listener
        self.socket_timeout = socket_timeout
        self.tls_context = tls_context
        self.login = login
        self._senders: dict[int, _Sender] = {}
        self._lock = threading.Lock()

    def add_broker(self, broker: BrokerInfo) -> None:
        with self._lock:
            if broker.broker_id in self._senders:
                return
            sender = _Sender(self.controller_id, broker, self.listener, self.on_response,
                             self.socket_timeout, self.tls_context, self.login)
            self._senders[broker.broker_id] = sender
            sender.start()

    def remove_broker(self, broker_id: int) -> None:
        """Stops its sender and drops what was queued (Kafka does the same)."""
        with self._lock:
            sender = self._senders.pop(broker_id, None)
        if sender is not None:
            sender.stop()
            sender.join(timeout=5)

    def brokers(self) -> list[int]:
        with self._lock:
            return sorted(self._senders)

    def send(self, broker_id: int, request: Any) -> bool:
        """Queue `request`; False if the broker has no sender (not live)."""
        with self._lock:
            sender = self._senders.get(broker_id)
        if sender is None:
            return False
        sender.queue.put(request)
        return True

    def send_batch(self, batch: RequestBatch, ctx: ControllerContext) -> None:
        for broker_id, requests in batch.requests(ctx, self.controller_id).items():
            for r in requests:
                self.send(broker_id, r)

    def shutdown(self) -> None:
        for broker_id in self.brokers():
            self.remove_broker(broker_id)
