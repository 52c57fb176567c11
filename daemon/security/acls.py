"""ACLs and the authorizer that checks them: Kafka's AclAuthorizer
(`authorizer.class.name = kafka.security.authorizer.AclAuthorizer`), its rules and its
names.

An ACL binds a resource pattern (a type, a name, LITERAL or PREFIXED) to an entry (a
principal, a host, an operation, ALLOW or DENY). A request's action (principal, host,
operation, resource) is allowed, as Kafka's authorizer decides it, when:
- the principal is one of `super.users`; else
- no ACL of any principal names the resource (LITERAL same name or `*`, or PREFIXED with a
  prefix of its name) and `allow.everyone.if.no.acl.found` is true; else
- no DENY entry matches it and an ALLOW entry does. An entry matches the principal when
  it names it or `User:*`, the host when it names the client's address or `*`, the
  operation when it is that one or ALL; an ALLOW of READ, WRITE, DELETE or ALTER also
  allows DESCRIBE, and an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS (a DENY
  implies nothing).

Where the bindings are kept is the caller's (daemon.cluster.acl_store in ZooKeeper,
the dirs' config file standalone); this module holds them, decides, filters and
validates, and reads and writes Kafka's JSON form of a resource's ACLs (`encode_entries`,
`decode_entries`: what `/kafka-acl/Topic/orders` holds).

Errors: `AclError` (a message for the client, INVALID_REQUEST) for a binding Kafka
refuses; `decode_entries` raises ValueError for JSON that is not Kafka's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
# Kafka 4's (KRaft) authorizer: the same ACLs and rules, so a Kafka 4 config file that
# names it gets the same authorizer here (its ACLs kept where logkeeper keeps them).
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZERS = (ACL_AUTHORIZER, STANDARD_AUTHORIZER)
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
DENIAL_LOG_INTERVAL_S = 60.0


class ResourceType(IntEnum):  # org.apache.kafka.common.resource.ResourceType codes
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class Operation(IntEnum):  # org.apache.kafka.common.acl.AclOperation codes
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):  # AclPermissionType
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(IntEnum):  # org.apache.kafka.common.resource.PatternType
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


def _camel(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_"))


# The names Kafka writes in ZooKeeper and prints (SecurityUtils: "Topic", "ClusterAction").
RESOURCE_NAMES = {t: _camel(t.name) for t in ResourceType if t > ResourceType.ANY}
OPERATION_NAMES = {o: _camel(o.name) for o in Operation if o > Operation.ANY}
PERMISSION_NAMES = {Permission.DENY: "Deny", Permission.ALLOW: "Allow"}

# What each resource type can be granted (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: {Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS},
    ResourceType.GROUP: {Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                         Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS},
    ResourceType.CLUSTER: {Operation.CREATE, Operation.CLUSTER_ACTION,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                           Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE},
    ResourceType.TRANSACTIONAL_ID: {Operation.DESCRIBE, Operation.WRITE},
    ResourceType.DELEGATION_TOKEN: {Operation.DESCRIBE},
    ResourceType.USER: {Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS},
}
_IMPLIES_DESCRIBE = {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                     Operation.ALTER}
_IMPLIES_DESCRIBE_CONFIGS = {Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}


class AclError(ValueError):
    """A binding Kafka refuses to create (answered INVALID_REQUEST with this message)."""


def _by_name(enum: type[IntEnum], text: str, what: str) -> int:
    """Kafka's fromString: the constant's name in any case, with or without underscores
    ("ClusterAction", "CLUSTER_ACTION", "clusteraction")."""
    key = text.replace("_", "").replace("-", "").lower()
    for member in enum:
        if member.name.replace("_", "").lower() == key:
            return member
    raise ValueError(f"unknown {what} {text!r}")


def resource_type(text: str) -> ResourceType:
    return ResourceType(_by_name(ResourceType, text, "resource type"))


def operation(text: str) -> Operation:
    return Operation(_by_name(Operation, text, "operation"))


def permission(text: str) -> Permission:
    return Permission(_by_name(Permission, text, "permission type"))


def pattern_type(text: str) -> PatternType:
    return PatternType(_by_name(PatternType, text, "pattern type"))


@dataclass(frozen=True, order=True)
class Resource:
    """A resource pattern: what ACLs are attached to."""

    type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.type.name}, name={self.name}, " \
               f"patternType={self.pattern.name})"

    def covers(self, rtype: ResourceType, name: str) -> bool:
        """Whether ACLs of this pattern apply to the resource `rtype`/`name`."""
        if rtype != self.type:
            return False
        if self.pattern is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD


@dataclass(frozen=True, order=True)
class Entry:
    """An access control entry."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")

    def decides(self, principals: tuple[str, str], host: str, op: Operation) -> Permission | None:
        """ALLOW or DENY when this entry applies to the action, else None (Kafka's
        StandardAuthorizerData.findResult)."""
        if self.principal not in principals:
            return None
        if self.host != WILDCARD and self.host != host:
            return None
        if self.operation is not Operation.ALL:
            if self.permission is Permission.ALLOW:
                if op is Operation.DESCRIBE:
                    if self.operation not in _IMPLIES_DESCRIBE:
                        return None
                elif op is Operation.DESCRIBE_CONFIGS:
                    if self.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                        return None
                elif op is not self.operation:
                    return None
            elif op is not self.operation:
                return None
        return self.permission


Binding = tuple[Resource, Entry]


@dataclass(frozen=True)
class AclFilter:
    """Kafka's AclBindingFilter: None (a null name, principal or host) and the ANY
    constants match everything; MATCH matches every pattern that applies to `name`."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def unknown(self) -> str | None:
        """Why Kafka would refuse this filter (an UNKNOWN element), else None."""
        for what, value in (("resource type", self.resource_type), ("pattern type", self.pattern),
                            ("operation", self.operation), ("permission type", self.permission)):
            if value == 0:
                return f"the filter's {what} is UNKNOWN"
        return None

    def matches(self, resource: Resource, entry: Entry) -> bool:
        if self.resource_type is not ResourceType.ANY and resource.type is not self.resource_type:
            return False
        if self.pattern is PatternType.MATCH:
            if self.name is not None and not resource.covers(resource.type, self.name):
                return False
        else:
            if self.pattern is not PatternType.ANY and resource.pattern is not self.pattern:
                return False
            if self.name is not None and resource.name != self.name:
                return False
        return ((self.principal is None or entry.principal == self.principal)
                and (self.host is None or entry.host == self.host)
                and (self.operation is Operation.ANY or entry.operation is self.operation)
                and (self.permission is Permission.ANY or entry.permission is self.permission))


def parse_principal(text: str) -> str:
    """`Type:name` (Kafka's SecurityUtils.parseKafkaPrincipal), as given."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"Invalid principal {text!r}: expected the form Type:name, e.g. User:alice")
    return text


def validate(resource: Resource, entry: Entry) -> None:
    """Kafka's checks of a binding to create (AclApis.handleCreateAcls and the
    authorizer's validateAclBinding); AclError says what is wrong."""
    if resource.type in (ResourceType.UNKNOWN, ResourceType.ANY) or \
            resource.pattern not in (PatternType.LITERAL, PatternType.PREFIXED) or \
            entry.operation in (Operation.UNKNOWN, Operation.ANY) or \
            entry.permission in (Permission.UNKNOWN, Permission.ANY):
        raise AclError("Invalid ACL creation: a resource type, pattern type (LITERAL or "
                       "PREFIXED), operation and permission type must all be given")
    if resource.type is ResourceType.CLUSTER and resource.name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not resource.name:
        raise AclError("Invalid empty resource name")
    if "/" in resource.name:
        raise AclError(f"ACL binding contains invalid resource name: {resource.name}")
    parse_principal(entry.principal)
    if not entry.host:
        raise AclError("Invalid empty host (use * for every host)")
    if entry.operation is not Operation.ALL and \
            entry.operation not in SUPPORTED_OPERATIONS[resource.type]:
        ops = ", ".join(sorted(OPERATION_NAMES[o] for o in SUPPORTED_OPERATIONS[resource.type]))
        raise AclError(f"Operation {OPERATION_NAMES[entry.operation]} does not apply to a "
                       f"{RESOURCE_NAMES[resource.type]} (it takes {ops} or All)")


# ---- Kafka's JSON form of one resource's ACLs ----

def encode_entries(entries: Iterable[Entry]) -> bytes:
    """`{"version":1,"acls":[{"principal":..,"permissionType":"Allow","operation":"Read",
    "host":"*"}]}` (Kafka's AclEntry.toJsonCompatibleMap)."""
    return json.dumps({"version": 1, "acls": [
        {"principal": e.principal, "permissionType": PERMISSION_NAMES[e.permission],
         "operation": OPERATION_NAMES[e.operation], "host": e.host}
        for e in sorted(entries)]}, separators=(",", ":")).encode()


def decode_entries(data: bytes | None) -> set[Entry]:
    if not data:
        return set()
    try:
        obj = json.loads(data)
        if obj.get("version") != 1:
            raise ValueError(f"version {obj.get('version')!r}, not 1")
        return {Entry(parse_principal(str(a["principal"])), str(a["host"]),
                      operation(str(a["operation"])), permission(str(a["permissionType"])))
                for a in obj["acls"]}
    except (ValueError, KeyError, TypeError, AttributeError, AclError) as err:
        raise ValueError(f"not Kafka's ACL JSON: {err}") from None


def binding_to_json(resource: Resource, entry: Entry) -> dict[str, str]:
    """One binding as the dirs' config file keeps it (standalone)."""
    return {"resourceType": RESOURCE_NAMES[resource.type], "name": resource.name,
            "patternType": resource.pattern.name, "principal": entry.principal,
            "host": entry.host, "operation": OPERATION_NAMES[entry.operation],
            "permissionType": PERMISSION_NAMES[entry.permission]}


def binding_from_json(obj: Mapping[str, str]) -> Binding:
    return (Resource(resource_type(obj["resourceType"]), obj["name"], pattern_type(obj["patternType"])),
            Entry(obj["principal"], obj["host"], operation(obj["operation"]),
                  permission(obj["permissionType"])))


# ---- the authorizer ----

class Authorizer:
    """The ACLs this broker holds and the decisions made from them. Event loop only.
    `super_users`: principals allowed everything (`super.users`); `allow_if_no_acl`:
    Kafka's `allow.everyone.if.no.acl.found`."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: dict[Resource, frozenset[Entry]] = {}
        self._by: dict[tuple[ResourceType, PatternType], dict[str, frozenset[Entry]]] = {}
        self._prefix_lengths: dict[ResourceType, list[int]] = {}
        self._prefix_counts: dict[ResourceType, Counter[int]] = {}
        self.loaded = False  # a broker in a cluster reads them once it is registered
        self.ready = asyncio.Event()  # set once they are read
        self._denials_logged: dict[tuple[Any, ...], float] = {}
        self.decisions = [0, 0]  # denied, allowed (indexed by the decision)

    def load(self, bindings: Iterable[Binding]) -> None:
        acls: dict[Resource, set[Entry]] = {}
        for resource, entry in bindings:
            acls.setdefault(resource, set()).add(entry)
        self.acls = {r: frozenset(e) for r, e in acls.items()}
        self._index()
        self.loaded = True
        self.ready.set()

    def replace(self, resource: Resource, entries: Iterable[Entry]) -> None:
        """A resource's ACLs as its store now holds them (none: the resource has none)."""
        entries = frozenset(entries)
        existed = resource in self.acls
        names = self._by.setdefault((resource.type, resource.pattern), {})
        if entries:
            self.acls[resource] = names[resource.name] = entries
        else:
            self.acls.pop(resource, None)
            names.pop(resource.name, None)
        if resource.pattern is PatternType.PREFIXED and existed != bool(entries):
            counts = self._prefix_counts.setdefault(resource.type, Counter())
            counts[len(resource.name)] += 1 if entries else -1
            self._prefix_lengths[resource.type] = sorted(n for n, c in counts.items() if c > 0)

    def _index(self) -> None:
        """What `_covering` looks up: by type and pattern, the names' entries, and the
        lengths the prefixes of each type have (a name's prefixes of other lengths have
        no ACL, so they are not looked up)."""
        self._by = {}
        self._prefix_counts = {}
        for r, entries in self.acls.items():
            self._by.setdefault((r.type, r.pattern), {})[r.name] = entries
            if r.pattern is PatternType.PREFIXED:
                self._prefix_counts.setdefault(r.type, Counter())[len(r.name)] += 1
        self._prefix_lengths = {t: sorted(c) for t, c in self._prefix_counts.items()}

    def bindings(self, flt: AclFilter = AclFilter()) -> list[Binding]:
        return sorted((r, e) for r, entries in self.acls.items() for e in entries
                      if flt.matches(r, e))

    def authorize(self, principal: str, host: str, op: Operation, rtype: ResourceType,
                  name: str) -> bool:
        ok = self._decide(principal, host, op, rtype, name)
        self.decisions[ok] += 1
        return ok

    def stats(self) -> tuple[int, int, int]:
        """(ACLs held, decisions that allowed, decisions that denied), for the metrics."""
        return sum(map(len, self.acls.values())), self.decisions[True], self.decisions[False]

    def _decide(self, principal: str, host: str, op: Operation, rtype: ResourceType,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        if not self.loaded:  # a DENY not read yet must not be missed
            return False
        principals = (principal, WILDCARD_PRINCIPAL)
        found = allowed = False
        for entries in self._covering(rtype, name):
            found = True
            for e in entries:
                decision = e.decides(principals, host, op)
                if decision is Permission.DENY:
                    return False
                if decision is Permission.ALLOW:
                    allowed = True
        return allowed or (not found and self.allow_if_no_acl)

    def _covering(self, rtype: ResourceType, name: str) -> list[frozenset[Entry]]:
        """The entries of every pattern that applies to the resource: its own name, `*`,
        and each prefix of its name (a dict lookup each, however many ACLs there are)."""
        literal = self._by.get((rtype, PatternType.LITERAL), {})
        out = [e for e in (literal.get(name), None if name == WILDCARD
                           else literal.get(WILDCARD)) if e]
        prefixed = self._by.get((rtype, PatternType.PREFIXED))
        if prefixed:
            for n in self._prefix_lengths.get(rtype, ()):
                if n > len(name):
                    break
                e = prefixed.get(name[:n])
                if e:
                    out.append(e)
        return out

    def authorize_any(self, principal: str, host: str, op: Operation,
                      rtype: ResourceType) -> bool:
        """Whether the principal may do `op` on some resource of the type (Kafka's
        authorizeByResourceType: an ALLOW on a pattern of that type that no DENY of the
        same or a wider pattern takes back)."""
        if principal in self.super_users:
            return True
        if not self.loaded:
            return False
        principals = (principal, WILDCARD_PRINCIPAL)
        denied = [r for r, entries in self.acls.items() if r.type is rtype and any(
            e.permission is Permission.DENY and e.decides(principals, host, op) for e in entries)]
        for resource, entries in self.acls.items():
            if resource.type is not rtype:
                continue
            if any(e.permission is Permission.ALLOW and e.decides(principals, host, op)
                   for e in entries) and not any(
                    d.name == WILDCARD and d.pattern is PatternType.LITERAL
                    or (d.pattern is PatternType.PREFIXED and resource.name.startswith(d.name))
                    or d == resource for d in denied):
                return True
        return self.allow_if_no_acl and not any(r.type is rtype for r in self.acls)

    def first_denial(self, *action: Any) -> bool:
        """Whether a denial of this action is the first in DENIAL_LOG_INTERVAL_S, to be
        logged: a client retrying a refused Metadata every few hundred ms is logged once
        a minute, not each time."""
        now = time.monotonic()
        if now - self._denials_logged.get(action, -DENIAL_LOG_INTERVAL_S) < DENIAL_LOG_INTERVAL_S:
            return False
        if len(self._denials_logged) > 10000:
            self._denials_logged.clear()
        self._denials_logged[action] = now
        return True

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType,
                              name: str) -> set[int]:
        """Metadata's and DescribeGroups' `authorized_operations` (KIP-430): the codes of
        the operations allowed on the resource (a bit field on the wire)."""
        return {int(op) for op in SUPPORTED_OPERATIONS[rtype]
                if self.authorize(principal, host, op, rtype, name)}
