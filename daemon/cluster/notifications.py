"""Kafka's change notifications in ZooKeeper (ZkNodeChangeNotificationListener): a writer
changes an entity's znode, then creates a persistent sequential child of a notification
path (`/config/changes/config_change_<seq>`, `/kafka-acl-changes/acl_changes_<seq>`)
naming what changed; every broker watches that path and, for each notification past
the last one it processed, reads the entity again. Notifications older than 15 minutes
are deleted by whoever processes a newer one, as Kafka does.

Threads: `watch` and `announce` block (at most one session timeout per ZooKeeper call)
and are called off the event loop; the watch callback only hands over to the event
loop (`on_change` runs there). A notification that cannot be read or applied is logged
and skipped: the next change, or a restart, reads the entity again.
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

log = logging.getLogger("logkeeper.notifications")

CHANGE_EXPIRATION_S = 15 * 60  # Kafka's changeExpirationMs


class ChangeNotifications:
    """The notifications under `path` (children named `prefix<seq>`)."""

    def __init__(self, client: KazooClient, path: str, prefix: str, *,
                 request_timeout: float = 10.0):
        self.client = client
        self.path = path
        self.prefix = prefix
        self.request_timeout = request_timeout
        self._last_seen = -1  # the sequence number of the last notification processed
        self._watch: ChildrenWatch | None = None
        self._lock = threading.Lock()

    def _wait(self, call: Any) -> Any:
        return call.get(timeout=self.request_timeout)

    def announce(self, data: bytes) -> None:
        """Create the next notification, holding `data`."""
        self._wait(self.client.create_async(f"{self.path}/{self.prefix}", data,
                                            sequence=True, makepath=True))

    def watch(self, loop: asyncio.AbstractEventLoop,
              on_change: Callable[[str, bytes], Awaitable[None]]) -> None:
        """Watch the path (once): each new notification schedules `on_change(znode path,
        data)` on `loop`. Notifications already there when the watch starts are taken as
        seen (the caller loads everything after this)."""
        if self._watch is not None:
            return
        try:
            self._wait(self.client.create_async(self.path, b"", makepath=True))
        except NodeExistsError:
            pass
        existing = self._wait(self.client.get_children_async(self.path))
        self._last_seen = max((_seq(n) for n in existing), default=-1)

        def changed(children: list[str]) -> None:
            # On kazoo's watch thread: hand over, never block here.
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(
                self._process(sorted(children), on_change)))

        self._watch = ChildrenWatch(self.client, self.path, changed)

    async def _process(self, children: list[str],
                       on_change: Callable[[str, bytes], Awaitable[None]]) -> None:
        with self._lock:
            new = [n for n in children if _seq(n) > self._last_seen]
            if not new:
                return
            self._last_seen = max(_seq(n) for n in new)
        for n in new:
            path = f"{self.path}/{n}"
            try:
                data, _ = await asyncio.to_thread(lambda p=path: self._wait(self.client.get_async(p)))
            except NoNodeError:
                continue
            except Exception as err:  # noqa: BLE001 - one bad notification, not the watch
                log.warning("change notification %s skipped: %s: %s", path,
                            type(err).__name__, err)
                continue
            try:
                await on_change(path, data)
            except Exception:  # noqa: BLE001 - logged; the next change or restart retries
                log.exception("applying change notification %s failed", path)
        await asyncio.to_thread(self._purge, children)

    def _purge(self, children: list[str]) -> None:
        """Delete notifications older than CHANGE_EXPIRATION_S (Kafka's
        purgeObsoleteNotifications)."""
        now_ms = time.time() * 1000
        for n in children:
            path = f"{self.path}/{n}"
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
