"""The controller's ZooKeeper reads and its fenced writes (docs/controller.md,
"Election and fencing").

Every write the controller makes is one kazoo transaction opened with
`check(/controller_epoch, epoch_zk_version)`: if another controller has been elected
since (the epoch znode's version moved), the check fails with BADVERSION, nothing in the
transaction is applied, and `ControllerMovedError` is raised; the controller resigns.
Partition state writes are also conditional on the state's own zkVersion (the partition
epoch): `update_leader_and_isr` sorts the outcomes into done, to retry (BADVERSION on the
state: re-read and decide again) and failed.

Retries: only `RETRYABLE` (connection loss, an operation or wait timing out) is retried,
until `deadline` seconds have passed (one session timeout by default); everything else
propagates. Each call waits at most `request_timeout` for kazoo's answer, since a kazoo
call issued while it resets a session may never be answered.

Callers: the controller event thread only (one `ControllerZk` per controller epoch).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError

from daemon.cluster import znodes
from logstore import TopicPartition

from .leader_election import LeaderAndIsr

log = logging.getLogger("logkeeper.controller.zk")

RETRYABLE = (ConnectionLoss, OperationTimeoutError, KazooTimeoutError)


class ControllerMovedError(Exception):
    """Another controller was elected: our `/controller_epoch` check failed."""


class ZkWriteError(Exception):
    """A fenced write failed for a reason of its own (the node exists, is missing, ...);
    `cause` is kazoo's exception for the failing operation."""

    def __init__(self, what: str, cause: Exception):
        super().__init__(f"{what}: {type(cause).__name__}")
        self.cause = cause


def call(fn: Callable[..., Any], *args: Any, request_timeout: float = 10.0,
         deadline: float = 10.0, **kwargs: Any) -> Any:
    """Run a kazoo `*_async` call and wait for it, retrying RETRYABLE errors with a short
    back-off until `deadline` seconds have passed."""
    end = time.monotonic() + deadline
    delay = 0.05
    while True:
        try:
            return fn(*args, **kwargs).get(timeout=request_timeout)
        except RETRYABLE:
            if time.monotonic() + delay > end:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def watched_read(call_: Callable[..., Any], client: KazooClient,
                 read: Callable[..., Any], path: str, watch: Callable | None) -> Any | None:
    """`read(path, watch=watch)` (a kazoo `*_async` read) through `call_`; None when there
    is no node, with `watch` then armed for its creation (Kafka's
    registerZNodeChangeHandlerAndCheckExistence). A node created between the read and
    the arming is read again: the watch was set on the node as it is, so no creation
    event would come."""
    while True:
        try:
            return call_(read, path, watch=watch)
        except NoNodeError:
            if watch is None or call_(client.exists_async, path, watch=watch) is None:
                return None


class ControllerZk:
    def __init__(self, client: KazooClient, epoch_zk_version: int, *,
                 request_timeout: float = 10.0, deadline: float = 10.0):
        self.client = client
        self.epoch_zk_version = epoch_zk_version
        self.request_timeout = request_timeout
        self.deadline = deadline

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return call(fn, *args, request_timeout=self.request_timeout, deadline=self.deadline,
                    **kwargs)

    # -- reads --------------------------------------------------------------------------

    def get(self, path: str, watch: Callable | None = None) -> tuple[bytes, Any] | None:
        """The node's data and stat, None when there is none. With a watch: on the node,
        or, when there is none, on its creation."""
        return watched_read(self._call, self.client, self.client.get_async, path, watch)

    def children(self, path: str, watch: Callable | None = None) -> list[str]:
        got = watched_read(self._call, self.client, self.client.get_children_async, path, watch)
        return [] if got is None else sorted(got)

    def brokers(self, watch: Callable | None = None) -> dict[int, tuple[znodes.BrokerRegistration, int]]:
        """Live broker id -> (registration, epoch = czxid). A broker that goes between
        the listing and the read is left out; one whose JSON does not decode is logged
        and left out (it cannot be reached anyway)."""
        out = {}
        for name in self.children(znodes.BROKER_IDS, watch=watch):
            if not name.isdigit():
                continue
            got = self.get(znodes.broker_path(int(name)))
            if got is None:
                continue
            try:
                out[int(name)] = (znodes.decode_broker(int(name), got[0]), got[1].czxid)
            except znodes.ZnodeError as err:
                log.error("ignoring broker %s: %s", name, err)
        return out

    def topic_assignment(self, topic: str, watch: Callable | None = None
                         ) -> tuple[znodes.TopicAssignment, int] | None:
        got = self.get(znodes.topic_path(topic), watch=watch)
        if got is None:
            return None
        return znodes.decode_topic(topic, got[0]), got[1].version

    def topic_config(self, topic: str) -> dict[str, str]:
        got = self.get(znodes.topic_config_path(topic))
        return znodes.decode_topic_config(topic, got[0]) if got else {}

    def broker_config(self, entity: str) -> dict[str, str]:
        """The dynamic config of broker `entity` (an id, or `<default>` for every broker)."""
        path = znodes.broker_config_path(entity)
        got = self.get(path)
        return znodes.decode_entity_config(path, got[0]) if got else {}

    def partition_states(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, LeaderAndIsr]:
        """The state znodes that exist, with their zkVersions."""
        out = {}
        for tp in tps:
            got = self.get(znodes.partition_state_path(tp.topic, tp.partition))
            if got is not None:
                state = znodes.decode_partition_state(tp.topic, tp.partition, got[0])
                out[tp] = LeaderAndIsr.from_znode(state, got[1].version)
        return out

    # -- fenced writes ------------------------------------------------------------------

    def multi(self, ops: Callable[[Any], None], what: str) -> list[Any]:
        """One transaction: the epoch check, then whatever `ops(transaction)` adds.
        Returns the results of the added operations."""
        def commit_async():
            t = self.client.transaction()
            t.check(znodes.CONTROLLER_EPOCH, self.epoch_zk_version)
            ops(t)
            return t.commit_async()

        results = self._call(commit_async)
        check, rest = results[0], results[1:]
        if isinstance(check, (BadVersionError, NoNodeError)):
            raise ControllerMovedError(
                f"{what}: /controller_epoch is no longer at version {self.epoch_zk_version}")
        for r in rest:
            if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency)):
                raise ZkWriteError(what, r)
        return rest

    def create(self, path: str, data: bytes = b"", *, exist_ok: bool = False) -> None:
        try:
            self.multi(lambda t: t.create(path, data), f"create {path}")
        except ZkWriteError as err:
            if not (exist_ok and isinstance(err.cause, NodeExistsError)):
                raise

    def set_data(self, path: str, data: bytes, version: int = -1) -> int:
        """The new zkVersion."""
        (stat,) = self.multi(lambda t: t.set_data(path, data, version), f"set {path}")
        return stat.version

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        try:
            self.multi(lambda t: t.delete(path), f"delete {path}")
        except ZkWriteError as err:
            if not (missing_ok and isinstance(err.cause, NoNodeError)):
                raise

    def delete_recursive(self, path: str) -> None:
        """Children first, each delete fenced (Kafka's deleteRecursive)."""
        for child in self.children(path):
            self.delete_recursive(f"{path}/{child}")
        try:
            self.delete(path)
        except ZkWriteError as err:
            if not isinstance(err.cause, NotEmptyError):
                raise
            self.delete_recursive(path)  # a child appeared meanwhile

    def delete_notifications(self, parent: str, names: Iterable[str]) -> None:
        for name in names:
            self.delete(f"{parent}/{name}")

    def create_partition_state(self, tp: TopicPartition, lai: LeaderAndIsr) -> bool:
        """The `…/partitions`, `…/partitions/<p>` (no data) and `…/state` znodes of a new
        partition. False when the state already exists (Kafka fails that partition)."""
        self.create(znodes.partitions_path(tp.topic), exist_ok=True)
        self.create(znodes.partition_path(tp.topic, tp.partition), exist_ok=True)
        try:
            self.create(znodes.partition_state_path(tp.topic, tp.partition),
                        znodes.encode_partition_state(lai.to_znode()))
        except ZkWriteError as err:
            if isinstance(err.cause, NodeExistsError):
                return False
            raise
        return True

    def update_leader_and_isr(self, updates: dict[TopicPartition, LeaderAndIsr]
                              ) -> tuple[dict[TopicPartition, LeaderAndIsr], set[TopicPartition]]:
        """Conditional setData of each state at its `zk_version`. Returns (written, with
        their new zkVersion; to retry: BADVERSION or no state znode)."""
        done: dict[TopicPartition, LeaderAndIsr] = {}
        retry: set[TopicPartition] = set()
        for tp, lai in updates.items():
            path = znodes.partition_state_path(tp.topic, tp.partition)
            try:
                version = self.set_data(path, znodes.encode_partition_state(lai.to_znode()),
                                        lai.zk_version)
            except ZkWriteError as err:
                if not isinstance(err.cause, (BadVersionError, NoNodeError)):
                    raise
                retry.add(tp)
                continue
            done[tp] = LeaderAndIsr(lai.leader, lai.leader_epoch, lai.isr, lai.controller_epoch,
                                    version, lai.leader_recovery_state)
        return done, retry
