"""The broker's link to ZooKeeper, in the znodes a ZooKeeper-mode Kafka controller reads.

`ClusterLink` wraps one KazooClient and:
- registers `/brokers/ids/<id>` (ephemeral, Kafka's JSON, docs/formats.md) and registers it
  again after a session expiry;
- announces log-dir transitions as persistent sequential
  `/log_dir_event_notification/log_dir_event_` nodes holding
  `{"version":1,"broker":<id>,"event":1}`, which a Kafka controller reads, acts on
  and deletes;
- publishes each log dir's state at `/logkeeper/brokers/<id>/log_dirs` (persistent
  JSON, see `log_dirs_payload`), for our controller and for operators; the latest
  state is written before a registration or a log-dir event, so the controller that
  hears of either reads what the broker holds now;
- as a partition leader, writes its ISR changes to the partition's state znode
  (`write_partition_state`, conditional on the partition epoch; the caller waits on it
  off the event loop) and announces them in batches as sequential
  `/isr_change_notification/isr_change_` nodes (`announce_isr_change`): one node for
  every change made within `ISR_NOTIFY_QUIET` of the last, at most `ISR_NOTIFY_MAX`
  after the first (Kafka: 5 s and 60 s; shorter here, so clients see an ISR sooner).

Nothing here blocks the caller: events and publications go into a queue drained by
one worker thread, which waits while ZooKeeper is away and retries after connection
loss or session expiry, so nothing is dropped. Every ZooKeeper call the worker makes
waits at most one session timeout for its answer (kazoo's own calls wait forever, and a
request issued while kazoo resets an expired session can be dropped unanswered, which
once left the worker stuck and the broker never registered again). Only the named
retryable errors (`RETRYABLE`) are retried. Anything else ends the link and is
reported through `on_fatal` (the daemon exits non-zero): a broker.id held by another
live broker (Kafka refuses to start too), an ACL refusal, a bug.
"""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KeeperState

from logstore import TopicPartition

from . import zk_client, znodes

log = logging.getLogger("logkeeper.zk")

ISR_NOTIFY_QUIET = 0.5  # seconds without a new ISR change before they are announced
ISR_NOTIFY_MAX = 5.0  # seconds after the first unannounced change, at most

class RegistrationPending(Exception):
    """Our broker znode still belongs to a session of ours that kazoo gave up on (it
    lives on the server until it times out): wait for it to go, then register."""


RETRYABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError,
             RegistrationPending)
LOG_DIR_EVENT_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = LOG_DIR_EVENT_PATH + "/log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1


class BrokerIdTakenError(RuntimeError):
    """Another live broker is registered under our broker.id."""


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def broker_payload(broker_id: int, listeners: Sequence[tuple[str, str, int]], *,
                   rack: str | None = None, now_ms: int | None = None) -> bytes:
    """This broker's `/brokers/ids/<id>` JSON: its endpoints, one per advertised listener
    ((name, host, port), each a PLAINTEXT one), and its rack."""
    ts = int(time.time() * 1000) if now_ms is None else now_ms
    endpoints = tuple(znodes.BrokerEndpoint(name, h, p) for name, h, p in listeners)
    return znodes.encode_broker(znodes.BrokerRegistration(broker_id, endpoints, ts, rack=rack))


def log_dir_event_payload(broker_id: int) -> bytes:
    return _json({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def log_dirs_payload(broker_id: int, dirs: list[dict]) -> bytes:
    """{"version":1,"broker":id,"timestamp":"ms","log_dirs":[{"path","state","free_bytes",
    "partitions":["topic-p",...], "error": str|null, "degraded": bool}]}"""
    return _json({"version": 1, "broker": broker_id, "timestamp": str(int(time.time() * 1000)),
                  "log_dirs": dirs})


@dataclass
class _Pending:
    events: deque = field(default_factory=deque)  # log dir paths whose event is not yet in ZK
    log_dirs: list[dict] | None = None  # the latest state to publish, if not yet published
    register: bool = True
    isr_changes: set[TopicPartition] = field(default_factory=set)
    isr_first: float = 0.0  # monotonic time of the first unannounced ISR change
    isr_last: float = 0.0  # ... and of the last


class ClusterLink:
    def __init__(self, hosts: str, broker_id: int, host: str, port: int, *,
                 listeners: Sequence[tuple[str, str, int]] | None = None,
                 rack: str | None = None, session_timeout: float = 10.0,
                 connect_timeout: float = 5.0,
                 on_fatal: Callable[[str], None] | None = None,
                 on_registered: Callable[[int], None] | None = None,
                 tls_context: ssl.SSLContext | None = None, secure_acls: bool = False):
        self.broker_id = broker_id
        self.on_registered = on_registered
        self.broker_epoch = -1  # czxid of our /brokers/ids node (docs/cluster.md "Znodes")
        # The advertised endpoints (name, host, port) it registers; by default one
        # PLAINTEXT endpoint at host:port.
        self.listeners = tuple(listeners) if listeners else (("PLAINTEXT", host, port),)
        self.rack = rack  # broker.rack, in the registration
        self.client = zk_client.new_client(hosts, timeout=session_timeout,
                                           tls_context=tls_context, secure_acls=secure_acls,
                                           connection_retry={"max_tries": -1, "max_delay": 2})
        self.connect_timeout = connect_timeout
        self.request_timeout = max(session_timeout, 1.0)
        self.on_fatal = on_fatal
        self.fatal: str | None = None  # why the link stopped for good
        self._pending = _Pending()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._connected = threading.Event()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, name="logkeeper-zk", daemon=True)
        self.events_sent = 0
        self.registrations = 0
        self._sessions: set[int] = set()  # every ZooKeeper session this link has had
        # Kafka's SessionExpireListener meters, for the metrics: connections made, lost,
        # and sessions expired.
        self.sync_connects = self.disconnects = self.expires = 0
        self._restart_client = False  # kazoo gave up connecting (CLOSED) without stop()

    @property
    def broker_path(self) -> str:
        return f"/brokers/ids/{self.broker_id}"

    @property
    def log_dirs_path(self) -> str:
        return znodes.logkeeper_log_dirs_path(self.broker_id)

    # ---- lifecycle ----

    def start(self) -> None:
        """Connect in the background; the daemon serves whether ZooKeeper is up or not."""
        self.client.add_listener(self._on_state)
        self.client.start_async()
        self._worker.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._worker.join(timeout=10)
        try:
            self.client.stop()
            self.client.close()
        except Exception:  # noqa: BLE001 - best effort on shutdown, whatever state kazoo is in
            log.debug("closing the ZooKeeper client failed", exc_info=True)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's thread: must not block.
        if state == KazooState.CONNECTED:
            self._sessions.add(self.client.client_id[0])
            self._connected.set()
            self.sync_connects += 1
        else:
            self._connected.clear()
            if not self._stop.is_set():
                if state == KazooState.SUSPENDED:
                    self.disconnects += 1
                else:
                    self.expires += 1
            if state == KazooState.LOST:  # session expired: the ephemeral node is gone
                with self._lock:
                    self._pending.register = True
                if self.client.client_state == KeeperState.CLOSED and not self._stop.is_set():
                    self._restart_client = True  # kazoo's connection thread has ended
        self._wake.set()

    # ---- what the daemon calls (thread-safe, non-blocking) ----

    @property
    def connected(self) -> bool:
        """Whether the ZooKeeper session is connected now."""
        return self._connected.is_set()

    def announce_log_dir_event(self, log_dir: str) -> None:
        """Queue one LogDirFailure notification (OFFLINE or SATURATED transition)."""
        with self._lock:
            self._pending.events.append(log_dir)
        self._wake.set()

    def publish_log_dirs(self, dirs: list[dict]) -> None:
        """Queue the latest per-dir state; only the newest unpublished one is kept."""
        with self._lock:
            self._pending.log_dirs = dirs
        self._wake.set()

    def announce_isr_change(self, tp: TopicPartition) -> None:
        """Queue `tp` for the next `isr_change_notification` (module docstring)."""
        now = time.monotonic()
        with self._lock:
            if not self._pending.isr_changes:
                self._pending.isr_first = now
            self._pending.isr_changes.add(tp)
            self._pending.isr_last = now
        self._wake.set()

    # ---- what the daemon calls off its event loop (blocking, one session timeout) ----

    def write_partition_state(self, tp: TopicPartition, state: znodes.PartitionState,
                              version: int) -> int | None:
        """setData of `tp`'s state znode at `version`: the new version, or None when the
        znode is at another version (BADVERSION) or gone. Raises on ZooKeeper trouble."""
        path = znodes.partition_state_path(tp.topic, tp.partition)
        try:
            stat = self._wait(self.client.set_async(path, znodes.encode_partition_state(state),
                                                    version))
        except (BadVersionError, NoNodeError):
            return None
        return stat.version

    def read_partition_state(self, tp: TopicPartition) -> tuple[znodes.PartitionState, int] | None:
        path = znodes.partition_state_path(tp.topic, tp.partition)
        try:
            data, stat = self._wait(self.client.get_async(path))
        except NoNodeError:
            return None
        return znodes.decode_partition_state(tp.topic, tp.partition, data), stat.version

    def topic_config(self, topic: str) -> dict[str, str]:
        """A topic's overrides from `/config/topics/<t>` ({} when it has none)."""
        try:
            data, _ = self._wait(self.client.get_async(znodes.topic_config_path(topic)))
        except NoNodeError:
            return {}
        return znodes.decode_topic_config(topic, data)

    def create_topic(self, topic: str, assignment: dict[int, tuple[int, ...]],
                     configs: dict[str, str]) -> bool:
        """Write a new topic's `/config/topics/<t>` then `/brokers/topics/<t>`, as a
        ZooKeeper-mode Kafka broker creates an internal topic (AdminZkClient): the
        controller's watch on /brokers/topics does the rest. False when the topic
        exists already or is queued for deletion (its configs are left as they are)."""
        for path in (znodes.topic_path(topic), znodes.delete_topic_path(topic)):
            if self._wait(self.client.exists_async(path)) is not None:
                return False
        config_path = znodes.topic_config_path(topic)
        data = znodes.encode_topic_config(configs)
        try:
            self._wait(self.client.create_async(config_path, data, makepath=True))
        except NodeExistsError:
            self._wait(self.client.set_async(config_path, data))
        payload = znodes.encode_topic(znodes.TopicAssignment(assignment, uuid.uuid4()))
        try:
            self._wait(self.client.create_async(znodes.topic_path(topic), payload, makepath=True))
        except NodeExistsError:
            return False
        return True

    def claim_producer_id_block(self) -> znodes.ProducerIdBlock:
        """The next block of producer ids, claimed for this broker in
        `/latest_producer_id_block` by a conditional write (Kafka's ZkProducerIdManager):
        two brokers racing for a block both re-read and one of them takes the next."""
        path = znodes.LATEST_PRODUCER_ID_BLOCK
        size = znodes.PRODUCER_ID_BLOCK_SIZE
        while True:
            try:
                data, stat = self._wait(self.client.get_async(path))
            except NoNodeError:
                data, stat = None, None
            start = znodes.decode_producer_id_block(data).end + 1 if data else 0
            if start + size - 1 > 2**63 - 1:
                raise RuntimeError("every producer id has been handed out")
            block = znodes.ProducerIdBlock(self.broker_id, start, start + size - 1)
            payload = znodes.encode_producer_id_block(block)
            try:
                if stat is None:
                    self._wait(self.client.create_async(path, payload))
                else:
                    self._wait(self.client.set_async(path, payload, stat.version))
            except (BadVersionError, NodeExistsError):
                continue  # another broker claimed a block first
            return block

    @property
    def pending_events(self) -> int:
        with self._lock:
            return len(self._pending.events)

    # ---- the worker ----

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self._isr_wait())
            self._wake.clear()
            if self._stop.is_set():
                continue
            if not self._connected.is_set():
                self._revive_if_closed()
                continue
            try:
                self._drain()
            except RETRYABLE as err:
                log.info("ZooKeeper unavailable (%s: %s); will retry", type(err).__name__, err)
                time.sleep(0.2)
                self._wake.set()
            except ConnectionClosedError:
                if self._stop.is_set():
                    return  # stop() closed the client under a call
                self._give_up("the ZooKeeper client was closed", exc_info=True)
                return
            except BrokerIdTakenError as err:
                self._give_up(str(err))
                return
            except Exception as err:  # noqa: BLE001 - not retryable: end the link, loudly
                self._give_up(f"ZooKeeper link failed: {type(err).__name__}: {err}",
                              exc_info=True)
                return

    def _isr_wait(self) -> float:
        """How long the worker may sleep before unannounced ISR changes are due."""
        with self._lock:
            if not self._pending.isr_changes:
                return 1.0
            due = min(self._pending.isr_last + ISR_NOTIFY_QUIET,
                      self._pending.isr_first + ISR_NOTIFY_MAX)
        return min(max(due - time.monotonic(), 0.01), 1.0)

    def _revive_if_closed(self) -> None:
        """kazoo stops reconnecting for good when its connection thread ends on an
        unhandled error (it logs "Unhandled exception in connection loop" and reports
        the session CLOSED): the broker would then never register again. Start it anew."""
        if self._restart_client and not self._stop.is_set():
            self._restart_client = False
            log.warning("the ZooKeeper client stopped connecting; starting it again")
            self.client.start_async()

    def _give_up(self, message: str, *, exc_info: bool = False) -> None:
        self.fatal = message
        log.error("%s", message, exc_info=exc_info)
        if self.on_fatal is not None:
            self.on_fatal(message)

    def _wait(self, call: Any) -> Any:
        """The result of a kazoo async call, waiting at most one session timeout.

        A call that gets no answer in that time is as good as lost: KazooTimeoutError
        (retryable) lets the worker try again on the session kazoo has by then."""
        return call.get(timeout=self.request_timeout)

    def _drain(self) -> None:
        # The dirs' state first: a controller that hears of this broker (registration)
        # or of a dir (log-dir event) reads what the broker holds from it.
        with self._lock:
            dirs = self._pending.log_dirs
        if dirs is not None:
            data = log_dirs_payload(self.broker_id, dirs)
            try:
                self._wait(self.client.set_async(self.log_dirs_path, data))
            except NoNodeError:
                self._wait(self.client.create_async(self.log_dirs_path, data, makepath=True))
            with self._lock:
                if self._pending.log_dirs is dirs:
                    self._pending.log_dirs = None
        with self._lock:
            register = self._pending.register
        if register:
            self._register()
            with self._lock:
                self._pending.register = False
        while True:
            with self._lock:
                if not self._pending.events:
                    break
                log_dir = self._pending.events[0]
            self._ensure_path(LOG_DIR_EVENT_PATH)
            path = self._wait(self.client.create_async(
                LOG_DIR_EVENT_PREFIX, log_dir_event_payload(self.broker_id), sequence=True))
            log.warning("log dir %s: notified the controller at %s", log_dir, path)
            with self._lock:
                self._pending.events.popleft()
            self.events_sent += 1
        self._announce_isr_changes()

    def _announce_isr_changes(self) -> None:
        now = time.monotonic()
        with self._lock:
            p = self._pending
            if not p.isr_changes or (now < p.isr_last + ISR_NOTIFY_QUIET
                                     and now < p.isr_first + ISR_NOTIFY_MAX):
                return
            tps = sorted(p.isr_changes)
        self._ensure_path(znodes.ISR_CHANGE_NOTIFICATION)
        self._wait(self.client.create_async(
            znodes.isr_change_path(), znodes.encode_isr_change(tps), sequence=True))
        with self._lock:
            p.isr_changes -= set(tps)
            if p.isr_changes:
                p.isr_first = p.isr_last = time.monotonic()
        log.info("announced ISR changes of %s", ", ".join(str(tp) for tp in tps))

    def _ensure_path(self, path: str) -> None:
        try:
            self._wait(self.client.create_async(path, b"", makepath=True))
        except NodeExistsError:
            pass

    def _register(self) -> None:
        self._ensure_path("/brokers/ids")
        data = broker_payload(self.broker_id, self.listeners, rack=self.rack)
        try:
            _, stat = self._wait(self.client.create_async(self.broker_path, data, ephemeral=True,
                                                         include_data=True))
        except NodeExistsError:
            # An expired session's ephemerals are gone before kazoo reports LOST, so a
            # node owned by another session is a live broker with our id: never take it
            # (Kafka refuses to start too).
            try:
                _, stat = self._wait(self.client.get_async(self.broker_path))
            except NoNodeError:  # its owner just went away: try again
                raise RegistrationPending(f"{self.broker_path} vanished") from None
            owner = stat.ephemeralOwner
            if owner != self.client.client_id[0] and owner in self._sessions:
                raise RegistrationPending(
                    f"{self.broker_path} still held by our old session 0x{owner:x}") from None
            if owner != self.client.client_id[0]:
                raise BrokerIdTakenError(
                    f"broker.id {self.broker_id} is already registered in ZooKeeper by "
                    f"another live broker ({self.broker_path}, session "
                    f"0x{stat.ephemeralOwner:x}); give this broker another broker.id or "
                    f"stop the other one") from None
        self.broker_epoch = stat.czxid
        self.registrations += 1
        log.info("registered %s (broker epoch %d)", self.broker_path, self.broker_epoch)
        if self.on_registered is not None:
            self.on_registered(self.broker_epoch)


@contextlib.contextmanager
def _short_lived(hosts: str, timeout: float, tls_context: ssl.SSLContext | None,
                 secure_acls: bool) -> Iterator[Any]:
    """A started KazooClient for one start-up question, stopped and closed after it."""
    client = zk_client.new_client(hosts, timeout=max(timeout, 1.0), tls_context=tls_context,
                                  secure_acls=secure_acls)
    try:
        zk_client.start(client, timeout)
        yield client
    finally:
        try:
            client.stop()
            client.close()
        except Exception:  # noqa: BLE001 - closing a client that never connected
            pass


def generate_broker_id(hosts: str, reserved_max: int, *, timeout: float,
                       tls_context: ssl.SSLContext | None = None,
                       secure_acls: bool = False) -> int:
    """An id for a broker configured without one (broker.id -1): reserved.broker.max.id
    plus the version `/brokers/seqid` has after this broker bumps it (Kafka's
    generateBrokerSequenceId), so brokers asking at once never get the same one. Raises
    KazooTimeoutError when ZooKeeper cannot be reached within `timeout`."""
    with _short_lived(hosts, timeout, tls_context, secure_acls) as client:
        try:
            client.create(znodes.BROKER_SEQUENCE_ID, b"", makepath=True)
        except NodeExistsError:
            pass
        return reserved_max + client.set(znodes.BROKER_SEQUENCE_ID, b"").version


def cluster_id_from_zookeeper(hosts: str, proposed: str, *, timeout: float,
                              tls_context: ssl.SSLContext | None = None,
                              secure_acls: bool = False) -> str:
    """The cluster's id from `/cluster/id`, created with `proposed` by the first broker
    (Kafka's KafkaServer.getOrGenerateClusterId), so every broker's meta.properties and
    Metadata answers name the same cluster. Raises KazooTimeoutError when ZooKeeper
    cannot be reached within `timeout`. A short-lived client: the broker's link starts
    later, once its listener is bound."""
    with _short_lived(hosts, timeout, tls_context, secure_acls) as client:
        try:
            client.create(znodes.CLUSTER_ID, znodes.encode_cluster_id(proposed), makepath=True)
            log.info("created %s = %s", znodes.CLUSTER_ID, proposed)
            return proposed
        except NodeExistsError:
            data, _ = client.get(znodes.CLUSTER_ID)
            return znodes.decode_cluster_id(data)
