"""Topic and broker configs in ZooKeeper, where ZooKeeper-mode Kafka keeps them
(docs/cluster.md "Topic and broker configs").

A change is written as Kafka's AdminZkClient.changeEntityConfig writes it: the entity's
node (`/config/topics/<t>`, `/config/brokers/<id>` or `/config/brokers/<default>`,
`/config/clients/<sanitized client-id>` or `/config/clients/<default>` for quotas,
`/config/users/<sanitized user>` for SCRAM credentials,
`{"version":1,"config":{...}}`) set or created, then a persistent sequential
`/config/changes/config_change_<seq>` holding `{"version":2,"entity_path":"topics/<t>"}`.
Every broker watches `/config/changes` (Kafka's ZkConfigManager, daemon.cluster.notifications):
each notification past the last one it processed makes it read that entity again and
apply it.

Threads: `read`, `read_all` and `write` block (at most one session timeout per ZooKeeper
call) and are called off the event loop; the watch callback only hands over to the
event loop (`on_change` is scheduled there with `loop.call_soon_threadsafe`).

Errors: ZooKeeper errors propagate (kazoo's exceptions, KazooTimeoutError); a znode
that is not Kafka's JSON raises `znodes.ZnodeError`. A bad notification is logged and
skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from . import znodes
from .notifications import ChangeNotifications

log = logging.getLogger("logkeeper.configs")

TOPICS, BROKERS, CLIENTS, USERS = "topics", "brokers", "clients", "users"
_PARENTS = {TOPICS: znodes.CONFIG_TOPICS, BROKERS: znodes.CONFIG_BROKERS,
            CLIENTS: znodes.CONFIG_CLIENTS, USERS: znodes.CONFIG_USERS}


def entity_path(entity_type: str, name: str) -> str:
    parent = _PARENTS.get(entity_type)
    if parent is None:
        raise ValueError(f"unknown config entity type {entity_type!r}")
    return f"{parent}/{name}"


class ZkConfigStore:
    def __init__(self, client: KazooClient, *, request_timeout: float = 10.0):
        self.client = client
        self.request_timeout = request_timeout
        self.changes = ChangeNotifications(client, znodes.CONFIG_CHANGES,
                                           znodes.CONFIG_CHANGE_PREFIX,
                                           request_timeout=request_timeout)

    def _wait(self, call: Any) -> Any:
        return call.get(timeout=self.request_timeout)

    # ---- blocking calls (off the event loop) ----

    def read(self, entity_type: str, name: str) -> dict[str, str]:
        path = entity_path(entity_type, name)
        try:
            data, _ = self._wait(self.client.get_async(path))
        except NoNodeError:
            return {}
        return znodes.decode_entity_config(path, data)

    def read_all(self, entity_type: str) -> dict[str, dict[str, str]]:
        parent = _PARENTS[entity_type]
        try:
            names = self._wait(self.client.get_children_async(parent))
        except NoNodeError:
            return {}
        out = {}
        for n in names:
            try:
                out[n] = self.read(entity_type, n)
            except znodes.ZnodeError as err:
                log.error("ignoring %s", err)
        return out

    def read_all_user_clients(self) -> dict[str, dict[str, str]]:
        """Every `/config/users/<user>/clients/<client-id>` config, by its name under
        /config/users (`<user>/clients/<client-id>`)."""
        out = {}
        for user in self._children(znodes.CONFIG_USERS):
            for client in self._children(f"{znodes.CONFIG_USERS}/{user}/clients"):
                name = f"{user}/clients/{client}"
                try:
                    out[name] = self.read(USERS, name)
                except znodes.ZnodeError as err:
                    log.error("ignoring %s", err)
        return out

    def _children(self, path: str) -> list[str]:
        try:
            return list(self._wait(self.client.get_children_async(path)))
        except NoNodeError:
            return []

    def write(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        """Set (or create) the entity's config, then announce the change."""
        path = entity_path(entity_type, name)
        data = znodes.encode_entity_config(config)
        try:
            self._wait(self.client.set_async(path, data))
        except NoNodeError:
            try:
                self._wait(self.client.create_async(path, data, makepath=True))
            except NodeExistsError:
                self._wait(self.client.set_async(path, data))
        self.changes.announce(znodes.encode_config_change(entity_type, name))
        log.info("wrote %s = %s and a config change notification", path, config)

    # ---- the watch ----

    def watch(self, loop: asyncio.AbstractEventLoop,
              on_change: Callable[[str, str], Awaitable[None]]) -> None:
        """Watch `/config/changes` (once): each new notification schedules
        `on_change(entity_type, name)` on `loop`. Notifications already there when the
        watch starts are taken as seen (the caller loads everything after this)."""
        async def changed(path: str, data: bytes) -> None:
            entity_type, name = znodes.decode_config_change(path, data)
            await on_change(entity_type, name)

        self.changes.watch(loop, changed)
