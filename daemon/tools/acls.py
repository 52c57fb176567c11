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
and Create on the topics (with `--idempotent`, IdempotentWrite on the cluster too);
`--consumer` Read and Describe on the topics and Read on the groups. A principal given
without a host is granted or denied from every host (`*`).

The broker asked is `--bootstrap-server`, else the listener of the daemon on this host
(`--config FILE`, or the embedded defaults); `--command-config FILE` gives the client's
security settings. The broker needs `authorizer.class.name` set, and the principal
Alter on the cluster to add or remove, Describe to list (a super user has both).

Prints Kafka's lines ("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC,
name=orders, patternType=LITERAL)`:", then each entry, then "Current ACLs for resource
..."). Exit codes: 0 done; 1 the broker refused (no authorizer, not authorized, an ACL
it does not take: each named); 2 a usage error, or no broker reachable.
"""

from __future__ import annotations

import argparse
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
from ..security.acls import (
    CLUSTER_NAME,
    AclError,
    Entry,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    operation,
    parse_principal,
    pattern_type,
)
from .client import Connection, Refused, add_broker_options, bootstrap_of, connect_any, run_tool


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


def _filter_fields(resource: Resource | None, pattern: PatternType,
                   entry: Entry | None = None, principal: str | None = None) -> dict[str, Any]:
    return dict(resource_type_filter=resource.type if resource else ResourceType.ANY,
                resource_name_filter=resource.name if resource else None,
                pattern_type_filter=pattern,
                principal_filter=entry.principal if entry else principal,
                host_filter=entry.host if entry else None,
                operation=entry.operation if entry else Operation.ANY,
                permission_type=entry.permission if entry else Permission.ANY)


def _current(conn: Connection, resources: list[Resource] | None, pattern: PatternType,
             principals: list[str]) -> dict[Resource, list[Entry]]:
    """The ACLs the broker holds of these resources (None: all), by resource."""
    out: dict[Resource, list[Entry]] = {}
    for resource in resources or [None]:  # type: ignore[list-item]
        for principal in principals or [None]:  # type: ignore[list-item]
            resp = conn.call(DescribeAclsRequest(**_filter_fields(resource, pattern,
                                                                  principal=principal)),
                             DescribeAclsResponse, lo=1, hi=3)
            if resp.error_code:
                raise Refused(resp.error_code, resp.error_message)
            for r in resp.resources:
                key = Resource(ResourceType(r.resource_type), r.resource_name,
                               PatternType(r.pattern_type))
                for a in r.acls:
                    e = Entry(a.principal, a.host, Operation(a.operation),
                              Permission(a.permission_type))
                    if e not in out.setdefault(key, []):
                        out[key].append(e)
    return out


def _print_acls(title: str, acls: dict[Resource, list[Entry]]) -> None:
    for resource, entries in sorted(acls.items()):
        print(f"{title} for resource `{resource}`: ")
        for e in sorted(entries):
            print(f" \t{e} ")
        print()


def _run(args: argparse.Namespace) -> int:
    if args.list:
        pattern = pattern_type(args.resource_pattern_type or "any")
        resources = _resources(args, pattern) or None
        with connect_any(bootstrap_of(args)) as conn:
            _print_acls("Current ACLs", _current(conn, resources, pattern, args.principal))
        return 0
    pattern = pattern_type(args.resource_pattern_type or "literal")
    if args.add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError("--add takes --resource-pattern-type literal or prefixed")
    try:
        bindings = _bindings(args, pattern)
    except AclError as err:
        raise ValueError(str(err)) from None
    by_resource: dict[Resource, list[Entry]] = {}
    for r, e in bindings:
        if e not in by_resource.setdefault(r, []):
            by_resource[r].append(e)
    failed = 0
    with connect_any(bootstrap_of(args)) as conn:
        if args.add:
            _print_acls("Adding ACLs", by_resource)
            C = CreateAclsRequest.AclCreation
            resp = conn.call(CreateAclsRequest(creations=[
                C(resource_type=r.type, resource_name=r.name, resource_pattern_type=r.pattern,
                  principal=e.principal, host=e.host, operation=e.operation,
                  permission_type=e.permission) for r, es in by_resource.items() for e in es]),
                CreateAclsResponse, lo=1, hi=3)
            done = [(r, e) for r, es in by_resource.items() for e in es]
            for (r, e), result in zip(done, resp.results, strict=True):
                if result.error_code:
                    failed += 1
                    print(f"Error while adding ACL {e} for resource `{r}`: "
                          f"{errors.name_of(result.error_code)}: {result.error_message or ''}")
        else:
            _print_acls("Removing ACLs", by_resource)
            F = DeleteAclsRequest.DeleteAclsFilter
            resp = conn.call(DeleteAclsRequest(filters=[
                F(**_filter_fields(r, r.pattern, e)) for r, es in by_resource.items()
                for e in es]), DeleteAclsResponse, lo=1, hi=3)
            for result in resp.filter_results:
                if result.error_code:
                    failed += 1
                    print(f"Error while removing ACLs: {errors.name_of(result.error_code)}: "
                          f"{result.error_message or ''}")
        _print_acls("Current ACLs", _current(conn, list(by_resource), pattern, []))
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    return run_tool("acls", _parser(), argv, _run)
