"""Controller election through `/controller` and `/controller_epoch` (docs/controller.md
"Election and fencing", Kafka's KafkaZkClient.registerControllerAndIncrementControllerEpoch).

Every daemon runs it. To take the controller: read `/controller_epoch` (create it as
"0" if absent), then one transaction {create `/controller` ephemeral (v2 JSON);
setData `/controller_epoch` = epoch + 1 at the version read}. The version that setData
returns is the epochZkVersion every later controller write is checked against. On
NODEEXISTS or BADVERSION someone else won (unless a retry of our own transaction had
succeeded: then `/controller` names us and the epoch is ours) and `try_elect` returns
None.

Errors: kazoo's errors other than the retryable ones propagate; a `/controller` held by
a KRaft controller (kraftControllerEpoch != -1, a migration) is reported as a foreign
controller, never taken.

Callers: the controller event thread (watch callbacks passed in only enqueue).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from daemon.cluster import znodes

from .zkops import call, watched_read

log = logging.getLogger("logkeeper.controller.election")


@dataclass(frozen=True)
class Elected:
    epoch: int
    epoch_zk_version: int


class ControllerElection:
    def __init__(self, client: KazooClient, broker_id: int, *, request_timeout: float = 10.0):
        self.client = client
        self.broker_id = broker_id
        self.request_timeout = request_timeout

    def _call(self, fn, *args, **kwargs):
        return call(fn, *args, request_timeout=self.request_timeout, deadline=self.request_timeout,
                    **kwargs)

    def active_controller_id(self, watch: Callable | None = None) -> int:
        """The id `/controller` names, -1 if none; `watch` is armed either way."""
        got = watched_read(self._call, self.client, self.client.get_async, znodes.CONTROLLER,
                           watch)
        if got is None:
            return -1
        try:
            return znodes.decode_controller(got[0]).broker_id
        except znodes.ZnodeError as err:
            log.error("cannot read %s: %s", znodes.CONTROLLER, err)
            return -1

    def read_epoch(self) -> tuple[int, int]:
        """(controller epoch, its zkVersion), creating `/controller_epoch` = 0 if absent."""
        try:
            data, stat = self._call(self.client.get_async, znodes.CONTROLLER_EPOCH)
            return znodes.decode_controller_epoch(data), stat.version
        except NoNodeError:
            pass
        try:
            self._call(self.client.create_async, znodes.CONTROLLER_EPOCH,
                       znodes.encode_controller_epoch(0))
            return 0, 0
        except NodeExistsError:
            return self.read_epoch()

    def try_elect(self) -> Elected | None:
        """Take `/controller` if it is free; None if another broker holds it or won."""
        epoch, version = self.read_epoch()
        new_epoch = epoch + 1
        data = znodes.encode_controller(self.broker_id, int(time.time() * 1000))

        def commit():
            t = self.client.transaction()
            t.create(znodes.CONTROLLER, data, ephemeral=True)
            t.set_data(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(new_epoch), version)
            return t.commit_async()

        created, stat = self._call(commit)
        if not isinstance(created, Exception) and not isinstance(stat, Exception):
            log.info("broker %d is the controller, epoch %d", self.broker_id, new_epoch)
            return Elected(new_epoch, stat.version)
        if isinstance(created, NodeExistsError) or isinstance(stat, BadVersionError):
            return self._check_ours(new_epoch)
        raise next(r for r in (created, stat) if isinstance(r, Exception) and
                   not isinstance(r, (BadVersionError, NodeExistsError)))

    def _check_ours(self, new_epoch: int) -> Elected | None:
        # A retried transaction may have failed only because its first try succeeded.
        if self.active_controller_id() != self.broker_id:
            return None
        data, stat = self._call(self.client.get_async, znodes.CONTROLLER_EPOCH)
        if znodes.decode_controller_epoch(data) == new_epoch and self._owns_controller_znode():
            return Elected(new_epoch, stat.version)
        return None

    def _owns_controller_znode(self) -> bool:
        stat = self._call(self.client.exists_async, znodes.CONTROLLER)
        return stat is not None and stat.ephemeralOwner == self.client.client_id[0]

    def release(self) -> None:
        """Delete `/controller` if this session holds it, so an election follows (after a
        fenced write failed while the node still names us, or at shutdown)."""
        try:
            stat = self._call(self.client.exists_async, znodes.CONTROLLER)
            if stat is not None and stat.ephemeralOwner == self.client.client_id[0]:
                self._call(self.client.delete_async, znodes.CONTROLLER, stat.version)
        except (NoNodeError, BadVersionError):
            pass
