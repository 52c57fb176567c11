"""Topic and broker configs in ZooKeeper, where ZooKeeper-mode Kafka keeps them
(docs/cluster.md "Topic and broker configs").

A change is written as Kafka's AdminZkClient.changeEntityConfig writes it: the entity's
node (`/config/topics/<t>`, `/config/brokers/<id>` or `/config/brokers/<default>`,
`/config/clients/<sanitized client-id>` or `/config/clients/<default>` for quotas,
`/config/users/<sanitized user>` for SCRAM credentials,
`{"version":1,"config":{...}}`) set or created, then a persistent sequential
`/config/changes/config_change_<seq>` holding `{"version":2,"entity_path":"topics/<t>"}`.
Every broker watches `/config/changes` (Kafka's ZkConfigManager): each notification past
the last one it processed makes it read that entity again and apply it. Notifications
older than 15 minutes are deleted by whoever processes a newer one, as Kafka does.

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
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from . import znodes

log = logging.getLogger("logkeeper.configs")

CHANGE_EXPIRATION_S = 15 * 60  # Kafka's ZkConfigManager changeExpirationMs
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
        self._last_seen = -1  # the sequence number of the last notification processed
        self._watch: ChildrenWatch | None = None
        self._lock = threading.Lock()

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
        self._wait(self.client.create_async(
            znodes.config_change_path(), znodes.encode_config_change(entity_type, name),
            sequence=True, makepath=True))
        log.info("wrote %s = %s and a config change notification", path, config)

    # ---- the watch ----

    def watch(self, loop: asyncio.AbstractEventLoop,
              on_change: Callable[[str, str], Awaitable[None]]) -> None:
        """Watch `/config/changes` (once): each new notification schedules
        `on_change(entity_type, name)` on `loop`. Notifications already there when the
        watch starts are taken as seen (the caller loads everything after this)."""
        if self._watch is not None:
            return
        try:
            self._wait(self.client.create_async(znodes.CONFIG_CHANGES, b"", makepath=True))
        except NodeExistsError:
            pass
        existing = self._wait(self.client.get_children_async(znodes.CONFIG_CHANGES))
        self._last_seen = max((_seq(n) for n in existing), default=-1)

        def changed(children: list[str]) -> None:
            # On kazoo's watch thread: hand over, never block here.
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(
                self._process(sorted(children), on_change)))

        self._watch = ChildrenWatch(self.client, znodes.CONFIG_CHANGES, changed)

    async def _process(self, children: list[str],
                       on_change: Callable[[str, str], Awaitable[None]]) -> None:
        with self._lock:
            new = [n for n in children if _seq(n) > self._last_seen]
            if not new:
                return
            self._last_seen = max(_seq(n) for n in new)
        for n in new:
            path = f"{znodes.CONFIG_CHANGES}/{n}"
            try:
                data, _ = await asyncio.to_thread(lambda p=path: self._wait(self.client.get_async(p)))
                entity_type, name = znodes.decode_config_change(path, data)
            except NoNodeError:
                continue
            except Exception as err:  # noqa: BLE001 - one bad notification, not the watch
                log.warning("config change %s skipped: %s: %s", path, type(err).__name__, err)
                continue
            try:
                await on_change(entity_type, name)
            except Exception:  # noqa: BLE001 - logged; the next change or restart retries
                log.exception("applying config change %s (%s/%s) failed", path, entity_type, name)
        await asyncio.to_thread(self._purge, children)

    def _purge(self, children: list[str]) -> None:
        """Delete notifications older than CHANGE_EXPIRATION_S (Kafka's
        purgeObsoleteNotifications)."""
        now_ms = time.time() * 1000
        for n in children:
            path = f"{znodes.CONFIG_CHANGES}/{n}"
            try:
                _, stat = self._wait(self.client.get_async(path))
                if now_ms - stat.ctime > CHANGE_EXPIRATION_S * 1000:
                    self._wait(self.client.delete_async(path))
            except NoNodeError:
                continue
            except Exception as err:  # noqa: BLE001 - best effort, next time again
                log.debug("purging %s failed: %s", path, err)
                return


def _seq(name: str) -> int:
    try:
        return int(znodes.sequence_number(name))
    except ValueError:
        return -1
