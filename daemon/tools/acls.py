"""`logkeeper acls`: what Kafka's `kafka-acls.sh` does, through the Kafka protocol.

    logkeeper acls --add --allow-principal User:alice --operation Read --topic orders
    logkeeper acls --add --allow-principal User:alice --producer --topic orders
    logkeeper acls --add --allow-principal User:bob --consumer --topic orders --group g1
    logkeeper acls --add --deny-principal User:mallory --deny-host 10.0.0.9 --operation All \\
        --topic orders --resource-pattern-type prefixed
    logkeeper acls --list [--topic orders] [--principal User:alice]
    logkeeper acls --remove --allow-principal User:alice --operation Read --topic orders

Resources: `--topic`, `--group`, `--transactional-id` (each may repeat), `--cluster`.
`--resource-pattern-type`: literal (the default to add and remove; `*` names every
resource of the type) or prefixed; to list and remove also any and match (every
pattern that applies to the name). `--operation` (repeatable, default All): Kafka's
names, in any case (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
DescribeConfigs, AlterConfigs, IdempotentWrite, All). `--producer` grants Write, Describe
and Create on the topics, Write and Describe on the transactional ids (with
`--idempotent`, IdempotentWrite on the cluster too);
`--consumer` Read and Describe on the topics and Read on the groups. A principal given
without a host is granted or denied from every host (`*`).

The broker asked is `--bootstrap-server`, else the listener of the daemon on this host
(`--config FILE`, or the embedded defaults); `--command-config FILE` gives the client's
security settings. The broker needs `authorizer.class.name` set, and the principal
Alter on the cluster to add or remove, Describe to list (a super user has both). With
`--zookeeper HOSTS` (or kafka-acls.sh's `--authorizer-properties
zookeeper.connect=HOSTS`) the ACLs are changed in ZooKeeper directly, no broker asked,
and every broker applies the change.

Prints Kafka's lines ("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC,
name=orders, patternType=LITERAL)`:", then each entry, then "Current ACLs for resource
..."). Exit codes: 0 done; 1 the broker refused (no authorizer, not authorized, an ACL
it does not take: each named); 2 a usage error, or no broker reachable.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from ..api import errors
from ..cluster.acl_store import ZkAclStore
from ..security.acls import (
    CLUSTER_NAME,
    AclError,
    AclFilter,
    Entry,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    operation,
    parse_principal,
    pattern_type,
    validate,
)
from .client import (
    Connection,
    Refused,
    add_broker_options,
    add_zookeeper_tls_option,
    bootstrap_of,
    connect_any,
    run_tool,
    zookeeper_session,
    zookeeper_tls_option,
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper acls",
        description="Add, list or remove ACLs, as Kafka's kafka-acls.sh.")
    add_broker_options(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs")
    action.add_argument("--remove", action="store_true", help="remove the ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    p.add_argument("--transactional-id", action="append", default=[],
                   help="a transactional id (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    p.add_argument("--resource-pattern-type", type=str.lower,
                   choices=("literal", "prefixed", "any", "match"),
                   help="literal (default for --add and --remove) or prefixed; any or match "
                        "to list or remove (default for --list: any)")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append", default=[],
                   help="default * (every host) when an --allow-principal is given")
    p.add_argument("--deny-host", action="append", default=[],
                   help="default * (every host) when a --deny-principal is given")
    p.add_argument("--operation", action="append", default=[],
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "DescribeConfigs, AlterConfigs, IdempotentWrite or All (default)")
    p.add_argument("--producer", action="store_true",
                   help="Write, Describe and Create on the topics")
    p.add_argument("--idempotent", action="store_true",
                   help="with --producer: IdempotentWrite on the cluster too")
    p.add_argument("--consumer", action="store_true",
                   help="Read and Describe on the topics, Read on the groups")
    p.add_argument("--principal", action="append", default=[],
                   help="with --list: only this principal's ACLs")
    p.add_argument("--zookeeper", metavar="HOSTS[/CHROOT]",
                   help="change and list the ACLs in ZooKeeper directly (no broker needed), "
                        "as kafka-acls.sh --authorizer-properties zookeeper.connect=HOSTS")
    p.add_argument("--authorizer-properties", action="append", default=[], metavar="K=V",
                   help="kafka-acls.sh's form of --zookeeper: zookeeper.connect=HOSTS")
    add_zookeeper_tls_option(p)
    p.add_argument("--force", action="store_true",
                   help="accepted for kafka-acls.sh's scripts: nothing is asked anyway")
    return p


def _resources(args: argparse.Namespace, pattern: PatternType) -> list[Resource]:
    out = [Resource(ResourceType.TOPIC, t, pattern) for t in args.topic]
    out += [Resource(ResourceType.GROUP, g, pattern) for g in args.group]
    out += [Resource(ResourceType.TRANSACTIONAL_ID, x, pattern) for x in args.transactional_id]
    if args.cluster:
        out.append(Resource(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return out


def _entries(args: argparse.Namespace) -> list[tuple[str, str, Permission]]:
    """(principal, host, permission) of each principal and host given."""
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, Permission.ALLOW),
                                          (args.deny_principal, args.deny_host, Permission.DENY)):
        if hosts and not principals:
            raise ValueError(f"--{permission.name.lower()}-host needs "
                             f"--{permission.name.lower()}-principal")
        for principal in principals:
            parse_principal(principal)
            out += [(principal, host, permission) for host in hosts or ["*"]]
    return out


def _bindings(args: argparse.Namespace, pattern: PatternType) -> list[tuple[Resource, Entry]]:
    """The ACLs `--add` or `--remove` name; ValueError for a bad combination."""
    who = _entries(args)
    if not who:
        raise ValueError("--add and --remove need --allow-principal or --deny-principal")
    ops = [operation(o) for o in args.operation] or [Operation.ALL]
    if any(o in (Operation.ANY, Operation.UNKNOWN) for o in ops):
        raise ValueError("--operation: name an operation (or All)")
    wanted: list[tuple[Resource, Operation]] = []
    if args.producer or args.consumer:
        if not args.topic:
            raise ValueError("--producer and --consumer need --topic")
        for r in _resources(args, pattern):
            if r.type is ResourceType.TOPIC:
                if args.producer:
                    wanted += [(r, Operation.WRITE), (r, Operation.DESCRIBE),
                               (r, Operation.CREATE)]
                if args.consumer:
                    wanted += [(r, Operation.READ), (r, Operation.DESCRIBE)]
            elif r.type is ResourceType.GROUP and args.consumer:
                wanted.append((r, Operation.READ))
            elif r.type is ResourceType.TRANSACTIONAL_ID and args.producer:
                wanted += [(r, Operation.WRITE), (r, Operation.DESCRIBE)]
        if args.consumer and not args.group:
            raise ValueError("--consumer needs --group")
        if args.producer and args.idempotent:
            wanted.append((Resource(ResourceType.CLUSTER, CLUSTER_NAME), Operation.IDEMPOTENT_WRITE))
    else:
        resources = _resources(args, pattern)
        if not resources:
            raise ValueError("name a resource: --topic, --group, --transactional-id or --cluster")
        wanted = [(r, o) for r in resources for o in ops]
    return [(r, Entry(principal, host, o, permission))
            for r, o in wanted for principal, host, permission in who]


def _wire_filter(flt: AclFilter) -> dict[str, Any]:
    """An AclFilter as DescribeAcls' body and DeleteAcls' filters carry it."""
    return dict(resource_type_filter=flt.resource_type, resource_name_filter=flt.name,
                pattern_type_filter=flt.pattern, principal_filter=flt.principal,
                host_filter=flt.host, operation=flt.operation, permission_type=flt.permission)


def _exact(resource: Resource, entry: Entry) -> AclFilter:
    """The filter matching this one binding."""
    return AclFilter(resource.type, resource.name, resource.pattern, entry.principal,
                     entry.host, entry.operation, entry.permission)


class _Broker:
    """ACLs through a broker: DescribeAcls, CreateAcls, DeleteAcls."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def current(self, flt: AclFilter) -> dict[Resource, list[Entry]]:
        resp = self.conn.call(DescribeAclsRequest(**_wire_filter(flt)), DescribeAclsResponse,
                              lo=1, hi=3)
        if resp.error_code:
            raise Refused(resp.error_code, resp.error_message)
        return {Resource(ResourceType(r.resource_type), r.resource_name,
                         PatternType(r.pattern_type)):
                [Entry(a.principal, a.host, Operation(a.operation), Permission(a.permission_type))
                 for a in r.acls] for r in resp.resources}

    def add(self, bindings: list[tuple[Resource, Entry]]) -> list[str]:
        """Each binding's error ('' when created)."""
        C = CreateAclsRequest.AclCreation
        resp = self.conn.call(CreateAclsRequest(creations=[
            C(resource_type=r.type, resource_name=r.name, resource_pattern_type=r.pattern,
              principal=e.principal, host=e.host, operation=e.operation,
              permission_type=e.permission) for r, e in bindings]),
            CreateAclsResponse, lo=1, hi=3)
        return [f"{errors.name_of(x.error_code)}: {x.error_message or ''}" if x.error_code else ""
                for x in resp.results]

    def remove(self, bindings: list[tuple[Resource, Entry]]) -> list[str]:
        F = DeleteAclsRequest.DeleteAclsFilter
        resp = self.conn.call(DeleteAclsRequest(filters=[
            F(**_wire_filter(_exact(r, e))) for r, e in bindings]),
            DeleteAclsResponse, lo=1, hi=3)
        return [f"{errors.name_of(x.error_code)}: {x.error_message or ''}" if x.error_code else ""
                for x in resp.filter_results]


class _ZooKeeper:
    """ACLs straight in ZooKeeper, as kafka-acls.sh --authorizer-properties
    zookeeper.connect=... changes them (every broker applies the change notification)."""

    def __init__(self, store: ZkAclStore):
        self.store = store

    def current(self, flt: AclFilter) -> dict[Resource, list[Entry]]:
        out: dict[Resource, list[Entry]] = {}
        for r, e in sorted(self.store.read_all()):
            if flt.matches(r, e):
                out.setdefault(r, []).append(e)
        return out

    def add(self, bindings: list[tuple[Resource, Entry]]) -> list[str]:
        out = []
        for r, e in bindings:
            try:
                validate(r, e)
            except AclError as err:
                out.append(f"InvalidRequestError: {err}")
                continue
            self.store.update(r, lambda held, e=e: held | {e})
            out.append("")
        return out

    def remove(self, bindings: list[tuple[Resource, Entry]]) -> list[str]:
        for r, e in bindings:
            self.store.update(r, lambda held, e=e: held - {e})
        return [""] * len(bindings)


@contextmanager
def _backend(args: argparse.Namespace) -> Iterator[_Broker | _ZooKeeper]:
    hosts = args.zookeeper
    for prop in args.authorizer_properties:
        key, _, value = prop.partition("=")
        if key.strip() != "zookeeper.connect":
            raise ValueError(f"--authorizer-properties {prop}: only zookeeper.connect is read")
        hosts = value.strip()
    tls_config = zookeeper_tls_option(args, hosts)
    if not hosts:
        with connect_any(bootstrap_of(args)) as conn:
            yield _Broker(conn)
        return
    with zookeeper_session(hosts, tls_config) as zk:
        yield _ZooKeeper(ZkAclStore(zk))


def _print_acls(title: str, acls: dict[Resource, list[Entry]]) -> None:
    for resource, entries in sorted(acls.items()):
        print(f"{title} for resource `{resource}`: ")
        for e in sorted(entries):
            print(f" \t{e} ")
        print()


def _run(args: argparse.Namespace) -> int:
    if args.list:
        pattern = pattern_type(args.resource_pattern_type or "any")
        resources = _resources(args, pattern) or [None]
        with _backend(args) as acls:
            found: dict[Resource, list[Entry]] = {}
            for r in resources:
                for principal in args.principal or [None]:
                    flt = AclFilter(r.type if r else ResourceType.ANY, r.name if r else None,
                                    pattern, principal)
                    for key, entries in acls.current(flt).items():
                        found.setdefault(key, [])
                        found[key] += [e for e in entries if e not in found[key]]
            _print_acls("Current ACLs", found)
        return 0
    pattern = pattern_type(args.resource_pattern_type or "literal")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError("--add and --remove take --resource-pattern-type literal or prefixed")
    try:
        bindings = _bindings(args, pattern)
    except AclError as err:
        raise ValueError(str(err)) from None
    by_resource: dict[Resource, list[Entry]] = {}
    for r, e in bindings:
        if e not in by_resource.setdefault(r, []):
            by_resource[r].append(e)
    bindings = [(r, e) for r, es in by_resource.items() for e in es]
    with _backend(args) as acls:
        _print_acls("Adding ACLs" if args.add else "Removing ACLs", by_resource)
        failures = acls.add(bindings) if args.add else acls.remove(bindings)
        for (r, e), failure in zip(bindings, failures, strict=True):
            if failure:
                print(f"Error while {'adding' if args.add else 'removing'} ACL {e} for "
                      f"resource `{r}`: {failure}")
        current: dict[Resource, list[Entry]] = {}
        for r in by_resource:
            current.update(acls.current(AclFilter(r.type, r.name, r.pattern)))
        _print_acls("Current ACLs", current)
    return 1 if any(failures) else 0


def main(argv: list[str]) -> int:
    return run_tool("acls", _parser(), argv, _run)
