"""Client quotas: produce and fetch byte rates per client-id, as a ZooKeeper-mode Kafka
broker keeps and enforces them (Kafka's ClientQuotaManager, KIP-13 and KIP-219;
docs/cluster.md "Client quotas"), and the two APIs that set and show them,
DescribeClientQuotas (48) and AlterClientQuotas (49).

Quotas are per broker, as Kafka's: `producer_byte_rate` bounds the bytes per second of a
client-id's Produce requests to this broker (their whole size, as Kafka counts them),
`consumer_byte_rate` the record bytes its consumer Fetches take. A client-id's own quota
applies, else the `<default>` client-id's, else none. A request that takes the client
over its quota is still answered (a Produce has been written; a Fetch is answered empty,
its bytes not counted, as Kafka's), with `throttle_time_ms` set to how long the rate
needs to come back within the quota, (observed - quota) / quota x the rate's window; the
connection then reads nothing more from the client for that long (Kafka mutes the
channel). The rate is the one of the replication throttles (daemon.replica.quota.Rate)
over `quota.window.num` samples of `quota.window.size.seconds`. A follower's fetches are
never client-throttled.

Stored where Kafka stores them: with ZooKeeper `/config/clients/<client-id>` (the id
sanitized as Kafka's Sanitizer does, `<default>` for the default) with a `/config/changes`
notification every broker applies; standalone in the log dirs' config file.

Quotas are by client-id only: `user` entities (a SASL login's principal), `ip`
entities, `request_percentage` and `controller_mutation_rate` are refused with
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


def _entity_name(entity: Any) -> str:
    """The client-id an AlterClientQuotas entity names (DEFAULT for the default)."""
    parts = [(e.entity_type, e.entity_name) for e in entity]
    if len(parts) != 1 or parts[0][0] != CLIENT_ID:
        types = ",".join(t for t, _ in parts) or "none"
        raise QuotaRequestError(
            f"Unsupported quota entity ({types}): logkeeper authenticates no user and keeps "
            "quotas per client-id only (an entity of one client-id, or its default)")
    name = parts[0][1]
    if name == "":
        raise QuotaRequestError("A client-id entity needs a name (null for the default)")
    return DEFAULT if name is None else name


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
    """The quotas this broker knows and each client-id's rates. Event loop only."""

    def __init__(self, *, samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.samples = samples
        self.window_s = window_s
        self.clock = clock
        self.quotas: dict[str, dict[str, str]] = {}  # client-id or DEFAULT -> key -> value
        self._bounds: dict[tuple[str, str], float] = {}  # (client-id or DEFAULT, key) -> B/s
        self._rates: dict[tuple[str, str], Rate] = {}  # (key, client-id) -> its rate
        self._used: dict[tuple[str, str], float] = {}  # when each rate was last recorded to
        self._next_purge = clock() + INACTIVE_S

    def load(self, quotas: Mapping[str, Mapping[str, str]]) -> None:
        self.quotas = {c: dict(q) for c, q in quotas.items() if q}
        self._parse_bounds()

    def set(self, client: str, quotas: Mapping[str, str]) -> None:
        """`client`'s quotas are now `quotas` (a notification, or our own change)."""
        if quotas:
            self.quotas[client] = dict(quotas)
        else:
            self.quotas.pop(client, None)
        self._parse_bounds()
        log.info("client quotas of %s: %s", "the default client-id" if client == DEFAULT
                 else f"client-id {client!r}", dict(quotas) or "none")

    def _parse_bounds(self) -> None:
        """The stored values as numbers, once per change, not once per request."""
        bounds = {}
        for entity, quotas in self.quotas.items():
            for key, text in quotas.items():
                try:
                    bounds[(entity, key)] = float(text)
                except ValueError:  # stored by hand: not ours to guess
                    log.warning("client quota %s of %s is not a number: %r; not applied",
                                key, entity, text)
        self._bounds = bounds

    def bound(self, key: str, client_id: str) -> float | None:
        found = self._bounds.get((client_id, key))
        return found if found is not None else self._bounds.get((DEFAULT, key))

    def window_allowance(self, key: str, client_id: str | None) -> int | None:
        """The most bytes one answer may carry without being throttled for them alone
        (Kafka's getMaxValueInQuotaWindow: the quota x all but one window); None: no
        quota applies."""
        bound = self.bound(key, client_id or "")
        return None if bound is None else int(bound * (self.samples - 1) * self.window_s)

    def throttle_ms(self, key: str, client_id: str | None, nbytes: int, *,
                    keep_if_throttled: bool = True) -> int:
        """Record `nbytes` for the client's `key` rate; the throttle time its quota asks
        for (0: within it, or none applies). `keep_if_throttled=False` takes the bytes
        back out when throttled (a Fetch answered empty)."""
        cid = client_id or ""
        bound = self.bound(key, cid)
        if bound is None:
            return 0
        now = self.clock()
        if now >= self._next_purge:
            self._purge(now)
        rate = self._rates.get((key, cid))
        if rate is None:
            rate = self._rates[(key, cid)] = Rate(self.samples, self.window_s)
        self._used[(key, cid)] = now
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

    def describe(self, components: Any, strict: bool) -> list[tuple[str, dict[str, str]]]:
        """(client-id or DEFAULT, quotas) matching DescribeClientQuotas' filter."""
        if strict and not components:
            return []  # only entities of no type would match
        wanted = None  # None: any client-id entity
        for c in components:
            if c.entity_type != CLIENT_ID:
                if c.entity_type in ("user", "ip"):
                    return []  # none kept here (see the module doc)
                raise QuotaRequestError(f"Unknown entity type {c.entity_type}")
            if c.match_type == MATCH_EXACT:
                if c.match is None:
                    raise QuotaRequestError("An exact match needs a name")
                wanted = lambda e, m=c.match: e == m  # noqa: E731
            elif c.match_type == MATCH_DEFAULT:
                wanted = lambda e: e == DEFAULT  # noqa: E731
            elif c.match_type == MATCH_SPECIFIED:
                wanted = lambda e: e != DEFAULT  # noqa: E731
            else:
                raise QuotaRequestError(f"Unknown match type {c.match_type}")
        return sorted((e, dict(q)) for e, q in self.quotas.items() if wanted is None or wanted(e))


class ClientQuotaApis:
    """DescribeClientQuotas and AlterClientQuotas. `store(client, quotas)` writes a
    client-id's quotas where this broker keeps them (ZooKeeper or the dirs' file) and
    `quotas.set` applies them here."""

    def __init__(self, quotas: ClientQuotas,
                 store: Callable[[str, dict[str, str]], Awaitable[None]]):
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
                E(entity=[E.EntityData(entity_type=CLIENT_ID,
                                       entity_name=None if e == DEFAULT else e)],
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
            client = _entity_name(entry.entity)
            new = apply_ops(self.quotas.quotas.get(client, {}), entry.ops)
            if not validate_only:
                await self.store(client, new)
                self.quotas.set(client, new)
        except QuotaRequestError as err:
            return errors.INVALID_REQUEST, str(err)
        except Exception as err:  # noqa: BLE001 - per entry, as Kafka answers it
            return errors.error_of(err, "alter client quotas")
        return errors.NONE, None
