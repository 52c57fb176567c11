"""ACLs in ZooKeeper, where ZooKeeper-mode Kafka's AclAuthorizer keeps them, so a
logkeeper cluster and Kafka's tools (`kafka-acls.sh --authorizer-properties
zookeeper.connect=...`) see the same ACLs.

- A LITERAL resource's ACLs: `/kafka-acl/<Type>/<name>` (`/kafka-acl/Topic/orders`); a
  PREFIXED one's: `/kafka-acl-extended/prefixed/<Type>/<prefix>`. Each holds
  `{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}` (daemon.security.acls.encode_entries); a resource
  left with none is deleted.
- A change is written conditionally on the znode's version (two brokers changing one
  resource at once both land), then announced: `/kafka-acl-changes/acl_changes_<seq>`
  holding `TOPIC:orders` for a LITERAL resource, `/kafka-acl-extended-changes/...`
  holding `{"version":1,"resourceType":"TOPIC","name":"orders","patternType":"PREFIXED"}`
  for the others. Every broker watches both and reads the resource again.

Threads: everything but `watch`'s callback blocks (ZooKeeper calls) and runs off the
event loop. Errors: ZooKeeper errors propagate; a znode that is not Kafka's ACL JSON is
logged and skipped when read in bulk, raised (ValueError) when read alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ..security import acls
from ..security.acls import Binding, Entry, PatternType, Resource
from . import znodes
from .notifications import ChangeNotifications

log = logging.getLogger("logkeeper.acls")

_ROOTS = {PatternType.LITERAL: znodes.ACL,
          PatternType.PREFIXED: f"{znodes.ACL_EXTENDED}/prefixed"}


def resource_path(resource: Resource) -> str:
    return f"{_ROOTS[resource.pattern]}/{acls.RESOURCE_NAMES[resource.type]}/{resource.name}"


def encode_change(resource: Resource) -> bytes:
    if resource.pattern is PatternType.LITERAL:
        return f"{resource.type.name}:{resource.name}".encode()
    return json.dumps({"version": 1, "resourceType": resource.type.name, "name": resource.name,
                       "patternType": resource.pattern.name}).encode()


def decode_change(path: str, data: bytes) -> Resource:
    """The resource a notification names (ValueError if it names none)."""
    text = data.decode("utf-8", "replace")
    if path.startswith(znodes.ACL_EXTENDED_CHANGES + "/"):
        obj = json.loads(text)
        if obj.get("version") != 1:
            raise ValueError(f"{path}: unsupported version {obj.get('version')!r}")
        return Resource(acls.resource_type(obj["resourceType"]), obj["name"],
                        acls.pattern_type(obj["patternType"]))
    rtype, sep, name = text.partition(":")
    if not sep:
        raise ValueError(f"{path}: expected ResourceType:name, got {text!r}")
    return Resource(acls.resource_type(rtype), name, PatternType.LITERAL)


class ZkAclStore:
    def __init__(self, client: KazooClient, *, request_timeout: float = 10.0):
        self.client = client
        self.request_timeout = request_timeout
        self.changes = {
            PatternType.LITERAL: ChangeNotifications(
                client, znodes.ACL_CHANGES, znodes.ACL_CHANGE_PREFIX,
                request_timeout=request_timeout),
            PatternType.PREFIXED: ChangeNotifications(
                client, znodes.ACL_EXTENDED_CHANGES, znodes.ACL_CHANGE_PREFIX,
                request_timeout=request_timeout)}

    def _wait(self, call: Any) -> Any:
        return call.get(timeout=self.request_timeout)

    def _children(self, path: str) -> list[str]:
        try:
            return list(self._wait(self.client.get_children_async(path)))
        except NoNodeError:
            return []

    def read(self, resource: Resource) -> tuple[set[Entry], int]:
        """The resource's entries and its znode's version (-1: no znode)."""
        try:
            data, stat = self._wait(self.client.get_async(resource_path(resource)))
        except NoNodeError:
            return set(), -1
        return acls.decode_entries(data), stat.version

    def read_all(self) -> list[Binding]:
        out: list[Binding] = []
        for pattern, root in _ROOTS.items():
            for type_name in self._children(root):
                try:
                    rtype = acls.resource_type(type_name)
                except ValueError:
                    log.warning("ignoring %s/%s: not a resource type", root, type_name)
                    continue
                for name in self._children(f"{root}/{type_name}"):
                    resource = Resource(rtype, name, pattern)
                    try:
                        entries, _ = self.read(resource)
                    except ValueError as err:
                        log.error("ignoring %s: %s", resource_path(resource), err)
                        continue
                    out += [(resource, e) for e in entries]
        return out

    def update(self, resource: Resource,
               change: Callable[[set[Entry]], set[Entry]]) -> set[Entry]:
        """Apply `change` to the resource's entries as stored (again if another writer
        got in between), write the result, announce it; returns the new entries."""
        path = resource_path(resource)
        while True:
            entries, version = self.read(resource)
            new = change(set(entries))
            if new == entries:
                return new
            data = acls.encode_entries(new)
            try:
                if not new:
                    self._wait(self.client.delete_async(path, version=version))
                elif version < 0:
                    self._wait(self.client.create_async(path, data, makepath=True))
                else:
                    self._wait(self.client.set_async(path, data, version=version))
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # changed under us: read it again
            break
        self.changes[resource.pattern].announce(encode_change(resource))
        log.info("ACLs of %s are now: %s", resource, ", ".join(map(str, sorted(new))) or "none")
        return new

    def watch(self, loop: asyncio.AbstractEventLoop,
              on_change: Callable[[Resource], Awaitable[None]]) -> None:
        """Watch both notification paths: each change schedules `on_change(resource)`."""
        async def changed(path: str, data: bytes) -> None:
            await on_change(decode_change(path, data))

        for notifications in self.changes.values():
            notifications.watch(loop, changed)
