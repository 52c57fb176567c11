"""Topic and broker configs of a standalone broker (no ZooKeeper), kept in its log dirs
(docs/cluster.md "Topic and broker configs").

`logkeeper-configs.json` sits beside the placement record at the root of every ONLINE
dir, written atomically through the dir's `LogDir.write_root_file` (inside its IoGuard):

    {"version": 1, "broker": 0, "generation": 7,
     "topics": {"orders": {"retention.ms": "60000"}},
     "brokers": {"<default>": {}, "0": {"log.retention.bytes": "1000000"}},
     "clients": {"<default>": {"producer_byte_rate": "1048576"}},
     "users": {"alice": {"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=8192",
                         "producer_byte_rate": "1048576"}},
     "user_clients": {"alice": {"<default>": {"consumer_byte_rate": "2097152"}}},
     "acls": [{"resourceType": "Topic", "name": "orders", "patternType": "LITERAL",
               "principal": "User:alice", "host": "*", "operation": "Read",
               "permissionType": "Allow"}]}

Values are strings, as in `/config/topics/<t>`; `clients` holds client quotas by client-id,
`users` each user's SCRAM credentials and quotas, `user_clients` the quotas of a user and
client-id (daemon.api.client_quotas), `acls` the authorizer's ACLs (daemon.security.acls). At
start-up the record with the highest generation among the dirs wins, so a dir that
missed a write (full, or offline then) does not bring old configs back.

Errors: `write` raises `LogDirOfflineError` when no dir could take the record (every
dir full or offline): the caller then changes nothing. A dir whose write fails is
logged; the others hold the record.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from logstore import LogDirOfflineError

from .dirstate import DirState
from .log_manager import LogManager
from .workers import ManagedDir

log = logging.getLogger("logkeeper.configs")

CONFIG_FILE = "logkeeper-configs.json"


class FileConfigStore:
    """Event loop only; the file work runs on each dir's worker."""

    def __init__(self, storage: LogManager):
        self.storage = storage
        self.generation = 0
        self.clients: dict[str, dict[str, str]] = {}  # client quotas, kept with the rest
        self.users: dict[str, dict[str, str]] = {}  # SCRAM credentials, by user
        self.acls: list[dict[str, str]] = []  # the ACLs, a binding each
        self.user_clients: dict[str, dict[str, dict[str, str]]] = {}  # user -> client -> quotas

    async def load(self) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        """(topics, brokers) from the newest record among the dirs ({} and {} if none)."""
        dirs = [d for d in self.storage.dirs if d.logdir is not None
                and d.state is not DirState.OFFLINE]
        records = [r for _, r in await self.storage.run_each(dirs, _read) if isinstance(r, dict)]
        if not records:
            return {}, {}
        newest = max(records, key=lambda r: r.get("generation", 0))
        self.generation = int(newest.get("generation", 0))
        self.clients = _configs(newest.get("clients"))
        self.users = _configs(newest.get("users"))
        user_clients = newest.get("user_clients")
        self.user_clients = {str(u): _configs(c) for u, c in user_clients.items()} \
            if isinstance(user_clients, dict) else {}
        acls = newest.get("acls")
        self.acls = [{str(k): str(v) for k, v in b.items()} for b in acls
                     if isinstance(b, dict)] if isinstance(acls, list) else []
        return _configs(newest.get("topics")), _configs(newest.get("brokers"))

    async def write(self, topics: Mapping[str, Mapping[str, str]],
                    brokers: Mapping[str, Mapping[str, str]],
                    clients: Mapping[str, Mapping[str, str]] | None = None,
                    users: Mapping[str, Mapping[str, str]] | None = None,
                    acls: list[dict[str, str]] | None = None,
                    user_clients: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None
                    ) -> None:
        """Store the whole state in every ONLINE dir (`clients`: the client quotas,
        `users`: the SCRAM credentials, `acls`: the ACLs, when they change; else those
        held). On failure nothing is taken."""
        clients = self.clients if clients is None else clients
        users = self.users if users is None else users
        acls = self.acls if acls is None else acls
        user_clients = self.user_clients if user_clients is None else user_clients
        self.generation += 1
        record = {"version": 1, "broker": self.storage.broker_id, "generation": self.generation,
                  "topics": {t: dict(c) for t, c in sorted(topics.items()) if c},
                  "brokers": {b: dict(c) for b, c in sorted(brokers.items()) if c},
                  "clients": {c: dict(q) for c, q in sorted(clients.items()) if q},
                  "users": {u: dict(c) for u, c in sorted(users.items()) if c},
                  "user_clients": {u: {c: dict(q) for c, q in sorted(cs.items()) if q}
                                   for u, cs in sorted(user_clients.items())
                                   if any(cs.values())},
                  "acls": acls}
        data = json.dumps(record, indent=1, sort_keys=True).encode() + b"\n"
        dirs = [d for d in self.storage.dirs if d.logdir is not None
                and d.state is DirState.ONLINE]
        written = 0
        for d, r in await self.storage.run_each(dirs, _write, data):
            if isinstance(r, BaseException):
                log.warning("writing %s in %s failed: %s", CONFIG_FILE, d.path, r)
            else:
                written += 1
        if not written:
            states = ", ".join(f"{d.path}: {d.state.value}" for d in self.storage.dirs)
            raise LogDirOfflineError(
                f"no ONLINE log dir could store {CONFIG_FILE} ({states}); nothing changed",
                log_dir="", op=f"write {CONFIG_FILE}", path="", errno=None)
        self.clients = {c: dict(q) for c, q in clients.items() if q}
        self.users = {u: dict(c) for u, c in users.items() if c}
        self.acls = list(acls)
        self.user_clients = {u: {c: dict(q) for c, q in cs.items() if q}
                             for u, cs in user_clients.items() if any(cs.values())}


def _configs(obj: Any) -> dict[str, dict[str, str]]:
    if not isinstance(obj, dict):
        return {}
    return {str(k): {str(n): str(v) for n, v in c.items()}
            for k, c in obj.items() if isinstance(c, dict)}


def _read(d: ManagedDir) -> dict[str, Any] | None:
    assert d.logdir is not None
    data = d.logdir.read_root_file(CONFIG_FILE)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError as err:
        log.warning("%s: unreadable, ignored: %s", d.path / CONFIG_FILE, err)
        return None
    return record if isinstance(record, dict) else None


def _write(d: ManagedDir, data: bytes) -> None:
    assert d.logdir is not None
    d.logdir.write_root_file(CONFIG_FILE, data)
