"""Client quotas: produce and fetch byte rates per user, per client-id, or per user and
client-id, as a ZooKeeper-mode Kafka broker keeps and enforces them (Kafka's
ClientQuotaManager, KIP-13, KIP-55 and KIP-219; docs/cluster.md "Client quotas"), and the
two APIs that set and show them, DescribeClientQuotas (48) and AlterClientQuotas (49).

Quotas are per broker, as Kafka's: `producer_byte_rate` bounds the bytes per second of a
client's Produce requests to this broker (their whole size, as Kafka counts them),
`consumer_byte_rate` the record bytes its consumer Fetches take. A quota entity is a
user (the principal's name: a SASL user, a certificate's mapped subject, ANONYMOUS), a
client-id, or both, each a name or `<default>`; the first that has the key applies, in
Kafka's order: user and client-id, user and default client-id, user, default user and
client-id, default user and default client-id, default user, client-id, default
client-id. Clients matched by one entity share its rate (every client-id of a user with
a user quota, say), as Kafka's quota metric tags have it. A request that takes the client
over its quota is still answered (a Produce has been written; a Fetch is answered empty,
its bytes not counted, as Kafka's), with `throttle_time_ms` set to how long the rate
needs to come back within the quota, (observed - quota) / quota x the rate's window; the
connection then reads nothing more from the client for that long (Kafka mutes the
channel). The rate is the one of the replication throttles (daemon.replica.quota.Rate)
over `quota.window.num` samples of `quota.window.size.seconds`. A follower's fetches are
never client-throttled.

Stored where Kafka stores them: with ZooKeeper `/config/clients/<client-id>`,
`/config/users/<user>` (beside the user's SCRAM credentials) and
`/config/users/<user>/clients/<client-id>` (names sanitized as Kafka's Sanitizer does,
`<default>` for a default), with a `/config/changes` notification every broker applies;
standalone in the log dirs' config file.

`ip` entities, `request_percentage` and `controller_mutation_rate` are refused with
INVALID_REQUEST (42) and a message, never stored and silently ignored. Bad input changes
nothing.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote

from kafka.protocol.admin import AlterClientQuotasResponse, DescribeClientQuotasResponse

from ..cluster.config_store import CLIENTS, USERS
from ..replica.quota import Rate
from ..security.acls import Operation, ResourceType
from . import errors, protocol

log = logging.getLogger("logkeeper.quotas")

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
UNSUPPORTED_KEYS = ("request_percentage", "controller_mutation_rate")
CLIENT_ID = "client-id"
DEFAULT = "<default>"  # Kafka's ZooKeeperInternals.DEFAULT_STRING: the default entity
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_UNSAFE = re.compile(rb"[^A-Za-z0-9._\-]")
# A client-id's rate not recorded to for this long is dropped (Kafka's
# InactiveSensorExpirationTimeSeconds): a default quota meets every client-id there is.
INACTIVE_S = 3600.0


def sanitize(client_id: str) -> str:
    """Kafka's Sanitizer.sanitize: the client-id as a znode name (URL-encoded; `*` too)."""
    return _UNSAFE.sub(lambda m: b"%%%02X" % m.group()[0], client_id.encode()).decode()


def desanitize(name: str) -> str:
    return unquote(name)


class QuotaRequestError(ValueError):
    """An entry of AlterClientQuotas or a DescribeClientQuotas filter that cannot be
    taken (INVALID_REQUEST); nothing changes."""


# A quota entity: (user, client-id), each a name, DEFAULT, or None when it has no part of
# that type.
Entity = tuple[str | None, str | None]
USER = "user"
ENTITY_TYPES = (USER, CLIENT_ID)
USER_CLIENTS = "/clients/"  # /config/users/<user>/clients/<client-id>


def entity_of(parts: list[tuple[str, str | None]]) -> Entity:
    """The entity AlterClientQuotas names, from its (entity type, name) parts (a null name:
    the default); QuotaRequestError for one Kafka refuses."""
    found: dict[str, str] = {}
    for kind, name in parts:
        if kind == "ip":
            raise QuotaRequestError("Unsupported quota entity (ip): logkeeper keeps quotas "
                                    "per user and per client-id, not per IP address")
        if kind not in ENTITY_TYPES:
            raise QuotaRequestError(f"Unknown entity type {kind}")
        if kind in found:
            raise QuotaRequestError(f"Duplicate {kind} entity in a quota entity")
        if name == "":
            raise QuotaRequestError(f"A {kind} entity needs a name (null for the default)")
        found[kind] = DEFAULT if name is None else name
    if not found:
        raise QuotaRequestError("Invalid empty client quota entity")
    return found.get(USER), found.get(CLIENT_ID)


def znode_of(entity: Entity) -> tuple[str, str]:
    """(config entity type, znode name) of where Kafka keeps the entity's quotas:
    `clients/<client-id>`, `users/<user>`, `users/<user>/clients/<client-id>`."""
    user, client = entity

    def name(x: str) -> str:
        return x if x == DEFAULT else sanitize(x)

    if user is None:
        assert client is not None
        return CLIENTS, name(client)
    if client is None:
        return USERS, name(user)
    return USERS, f"{name(user)}{USER_CLIENTS}{name(client)}"


def entity_of_znode(entity_type: str, name: str) -> Entity | None:
    """The quota entity a `/config/changes` notification names (None: no quota entity)."""
    if entity_type == CLIENTS:
        return None, desanitize(name)
    if entity_type == USERS:
        user, sep, client = name.partition(USER_CLIENTS)
        return desanitize(user), desanitize(client) if sep else None
    return None


def only_quotas(config: Mapping[str, str]) -> dict[str, str]:
    """The quota keys of an entity's config (a user's also holds its SCRAM credentials)."""
    return {k: v for k, v in config.items() if k in QUOTA_KEYS}


def entity_text(entity: Entity) -> str:
    user, client = entity

    def one(kind: str, name: str) -> str:
        return f"the default {kind}" if name == DEFAULT else f"{kind} {name!r}"

    return " and ".join(one(k, n) for k, n in ((USER, user), (CLIENT_ID, client)) if n is not None)


def apply_ops(current: Mapping[str, str], ops: Any) -> dict[str, str]:
    """Kafka's quota ops (set a value, or remove) on a client-id's stored quotas."""
    out = dict(current)
    seen = set()
    for op in ops:
        if op.key in seen:
            raise QuotaRequestError(f"Duplicate quota key {op.key}")
        seen.add(op.key)
        if op.key in UNSUPPORTED_KEYS:
            raise QuotaRequestError(f"Quota {op.key} is not supported by logkeeper (supported: "
                                    f"{', '.join(QUOTA_KEYS)})")
        if op.key not in QUOTA_KEYS:
            raise QuotaRequestError(f"Invalid configuration key {op.key}")
        if op.remove:
            out.pop(op.key, None)
            continue
        value = op.value
        if value != int(value):
            raise QuotaRequestError(f"Configuration {op.key} must be a Long value")
        if value <= 0:
            raise QuotaRequestError(f"Configuration {op.key} must be positive (got {value:g})")
        out[op.key] = str(int(value))
    return out


class ClientQuotas:
    """The quotas this broker knows and each client's rates. Event loop only."""

    def __init__(self, *, samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.samples = samples
        self.window_s = window_s
        self.clock = clock
        self.quotas: dict[Entity, dict[str, str]] = {}  # entity -> key -> value
        self._bounds: dict[tuple[Entity, str], float] = {}  # (entity, key) -> B/s
        self._rates: dict[tuple[str, Entity], Rate] = {}  # (key, the rate's entity) -> rate
        self._used: dict[tuple[str, Entity], float] = {}  # when each rate was last recorded to
        self._next_purge = clock() + INACTIVE_S

    def load(self, quotas: Mapping[Entity, Mapping[str, str]]) -> None:
        self.quotas = {e: only_quotas(q) for e, q in quotas.items() if only_quotas(q)}
        self._parse_bounds()

    def set(self, entity: Entity, quotas: Mapping[str, str]) -> None:
        """The entity's quotas are now `quotas` (a notification, or our own change)."""
        quotas = only_quotas(quotas)
        if quotas == self.quotas.get(entity, {}):
            return
        if quotas:
            self.quotas[entity] = dict(quotas)
        else:
            self.quotas.pop(entity, None)
        self._parse_bounds()
        log.info("client quotas of %s: %s", entity_text(entity), dict(quotas) or "none")

    def _parse_bounds(self) -> None:
        """The stored values as numbers, once per change, not once per request."""
        bounds = {}
        for entity, quotas in self.quotas.items():
            for key, text in quotas.items():
                if key not in QUOTA_KEYS:
                    continue
                try:
                    bounds[(entity, key)] = float(text)
                except ValueError:  # stored by hand: not ours to guess
                    log.warning("client quota %s of %s is not a number: %r; not applied",
                                key, entity_text(entity), text)
        self._bounds = bounds

    def bound(self, key: str, user: str, client_id: str) -> tuple[float, Entity] | None:
        """The quota that applies to this user and client-id (Kafka's order, the module
        doc) and the entity whose rate it bounds; None: none applies."""
        if not self._bounds:
            return None
        for entity, rate_of in (
                ((user, client_id), (user, client_id)), ((user, DEFAULT), (user, client_id)),
                ((user, None), (user, None)), ((DEFAULT, client_id), (user, client_id)),
                ((DEFAULT, DEFAULT), (user, client_id)), ((DEFAULT, None), (user, None)),
                ((None, client_id), (None, client_id)), ((None, DEFAULT), (None, client_id))):
            found = self._bounds.get((entity, key))
            if found is not None:
                return found, rate_of
        return None

    def window_allowance(self, key: str, user: str, client_id: str | None) -> int | None:
        """The most bytes one answer may carry without being throttled for them alone
        (Kafka's getMaxValueInQuotaWindow: the quota x all but one window); None: no
        quota applies."""
        found = self.bound(key, user, client_id or "")
        return None if found is None else int(found[0] * (self.samples - 1) * self.window_s)

    def throttle_ms(self, key: str, user: str, client_id: str | None, nbytes: int, *,
                    keep_if_throttled: bool = True) -> int:
        """Record `nbytes` for the client's `key` rate; the throttle time its quota asks
        for (0: within it, or none applies). `keep_if_throttled=False` takes the bytes
        back out when throttled (a Fetch answered empty)."""
        found = self.bound(key, user, client_id or "")
        if found is None:
            return 0
        bound, rate_of = found
        now = self.clock()
        if now >= self._next_purge:
            self._purge(now)
        rate = self._rates.get((key, rate_of))
        if rate is None:
            rate = self._rates[(key, rate_of)] = Rate(self.samples, self.window_s)
        self._used[(key, rate_of)] = now
        rate.record(nbytes, now)
        observed = rate.measure(now)
        if observed <= bound:
            return 0
        if not keep_if_throttled:
            rate.record(-nbytes, now)
        return round((observed - bound) / bound * rate.window(now) * 1000)

    def _purge(self, now: float) -> None:
        for k in [k for k, used in self._used.items() if now - used > INACTIVE_S]:
            del self._used[k], self._rates[k]
        self._next_purge = now + INACTIVE_S

    def describe(self, components: Any, strict: bool) -> list[tuple[Entity, dict[str, str]]]:
        """(entity, quotas) matching DescribeClientQuotas' filter (Kafka's: each
        component names a type the entity must have, with that name, the default, or
        any name; `strict`: the entity has no other type)."""
        checks: dict[str, Callable[[str], bool]] = {}
        for c in components:
            if c.entity_type == "ip":
                return []  # none kept here (see the module doc)
            if c.entity_type not in ENTITY_TYPES:
                raise QuotaRequestError(f"Unknown entity type {c.entity_type}")
            if c.entity_type in checks:
                raise QuotaRequestError(f"Duplicate {c.entity_type} component in the filter")
            if c.match_type == MATCH_EXACT:
                if c.match is None:
                    raise QuotaRequestError("An exact match needs a name")
                checks[c.entity_type] = lambda e, m=c.match: e == m
            elif c.match_type == MATCH_DEFAULT:
                checks[c.entity_type] = lambda e: e == DEFAULT
            elif c.match_type == MATCH_SPECIFIED:  # any name but the default
                checks[c.entity_type] = lambda e: e != DEFAULT
            else:
                raise QuotaRequestError(f"Unknown match type {c.match_type}")
        out = []
        for entity, quotas in self.quotas.items():
            parts = {k: n for k, n in zip(ENTITY_TYPES, entity, strict=True) if n is not None}
            if strict and set(parts) != set(checks):
                continue
            if all(kind in parts and check(parts[kind]) for kind, check in checks.items()):
                out.append((entity, dict(quotas)))
        return sorted(out, key=lambda x: (x[0][0] or "", x[0][1] or ""))


class ClientQuotaApis:
    """DescribeClientQuotas and AlterClientQuotas. `store(entity, quotas)` writes an
    entity's quotas where this broker keeps them (ZooKeeper or the dirs' file) and
    `quotas.set` applies them here."""

    def __init__(self, quotas: ClientQuotas,
                 store: Callable[[Entity, dict[str, str]], Awaitable[None]]):
        self.quotas = quotas
        self.store = store

    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        return {48: self.describe, 49: self.alter}

    async def describe(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        E = DescribeClientQuotasResponse.EntryData
        if not conn.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
            return DescribeClientQuotasResponse(
                throttle_time_ms=0, error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                error_message="Cluster authorization failed.", entries=None)
        try:
            found = self.quotas.describe(body.components, bool(body.strict))
        except QuotaRequestError as err:
            return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=errors.INVALID_REQUEST,
                                                error_message=str(err), entries=None)
        return DescribeClientQuotasResponse(
            throttle_time_ms=0, error_code=errors.NONE, error_message=None, entries=[
                E(entity=[E.EntityData(entity_type=kind, entity_name=None if n == DEFAULT else n)
                          for kind, n in zip(ENTITY_TYPES, e, strict=True) if n is not None],
                  values=[E.ValueData(key=k, value=float(v)) for k, v in sorted(q.items())])
                for e, q in found])

    async def alter(self, req: protocol.Request, conn: Any) -> Any:
        body = req.body
        R = AlterClientQuotasResponse.EntryData
        out = []
        allowed = conn.allowed(Operation.ALTER_CONFIGS, ResourceType.CLUSTER)
        for entry in body.entries:
            if allowed:
                code, message = await self._alter_entry(entry, body.validate_only)
            else:
                code, message = errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
            out.append(R(error_code=code, error_message=message, entity=[
                R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity]))
        return AlterClientQuotasResponse(throttle_time_ms=0, entries=out)

    async def _alter_entry(self, entry: Any, validate_only: bool) -> tuple[int, str | None]:
        try:
            entity = entity_of([(e.entity_type, e.entity_name) for e in entry.entity])
            new = apply_ops(self.quotas.quotas.get(entity, {}), entry.ops)
            if not validate_only:
                await self.store(entity, new)
                self.quotas.set(entity, new)
        except QuotaRequestError as err:
            return errors.INVALID_REQUEST, str(err)
        except Exception as err:  # noqa: BLE001 - per entry, as Kafka answers it
            return errors.error_of(err, "alter client quotas")
        return errors.NONE, None
