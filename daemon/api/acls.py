"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), as Kafka's brokers answer them.

With `authorizer.class.name` set (daemon.security.acls), they list, add and remove ACLs
where this broker keeps them (`update`: ZooKeeper's /kafka-acl in a cluster, the dirs'
config file standalone), as Kafka's AclAuthorizer does: DescribeAcls needs Describe on
the cluster, the other two Alter (else CLUSTER_AUTHORIZATION_FAILED). A binding Kafka
refuses (an UNKNOWN or ANY element, a CLUSTER resource not named kafka-cluster, an
operation the resource type does not have, a principal not of the form Type:name) is
answered INVALID_REQUEST with the reason, and the request's other bindings are created.

Without an authorizer each request is answered SECURITY_DISABLED (54), "No Authorizer
is configured on the broker", and nothing is stored (without an answer, clients were
told the broker is too old for ACLs, which is not why).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.admin import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse

from ..security.acls import (
    AclError,
    AclFilter,
    Authorizer,
    Entry,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    validate,
)
from . import errors, protocol

log = logging.getLogger("logkeeper.acls")

NO_AUTHORIZER = "No Authorizer is configured on the broker"
CLUSTER_DENIED = "Cluster authorization failed."

# `update(resource, change)`: apply `change` to the resource's entries where they are
# kept and to the authorizer; returns the entries now held.
Update = Callable[[Resource, Callable[[set[Entry]], set[Entry]]], Awaitable[set[Entry]]]


class AclApis:
    def __init__(self, authorizer: Authorizer | None = None, update: Update | None = None):
        self.authorizer = authorizer
        self.update = update

    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        return {29: self.describe_acls, 30: self.create_acls, 31: self.delete_acls}

    async def describe_acls(self, req: protocol.Request, conn: Any) -> Any:
        if self.authorizer is None:
            return DescribeAclsResponse(throttle_time_ms=0, error_code=errors.SECURITY_DISABLED,
                                        error_message=NO_AUTHORIZER, resources=[])
        if not conn.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
            return DescribeAclsResponse(throttle_time_ms=0,
                                        error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                                        error_message=CLUSTER_DENIED, resources=[])
        try:
            flt = _filter(req.body)
        except ValueError as err:
            return DescribeAclsResponse(throttle_time_ms=0, error_code=errors.INVALID_REQUEST,
                                        error_message=str(err), resources=[])
        R = DescribeAclsResponse.DescribeAclsResource
        by_resource: dict[Resource, list[Any]] = {}
        for resource, e in self.authorizer.bindings(flt):
            by_resource.setdefault(resource, []).append(R.AclDescription(
                principal=e.principal, host=e.host, operation=e.operation,
                permission_type=e.permission))
        return DescribeAclsResponse(throttle_time_ms=0, error_code=errors.NONE,
                                    error_message=None, resources=[
            R(resource_type=r.type, resource_name=r.name, pattern_type=r.pattern, acls=entries)
            for r, entries in by_resource.items()])

    async def create_acls(self, req: protocol.Request, conn: Any) -> Any:
        R = CreateAclsResponse.AclCreationResult
        creations = req.body.creations
        if self.authorizer is None or self.update is None:
            return CreateAclsResponse(throttle_time_ms=0, results=[
                R(error_code=errors.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
                for _ in creations])
        if not conn.allowed(Operation.ALTER, ResourceType.CLUSTER):
            return CreateAclsResponse(throttle_time_ms=0, results=[
                R(error_code=errors.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED)
                for _ in creations])
        results: list[tuple[int, str | None]] = [(errors.NONE, None)] * len(creations)
        wanted: dict[Resource, list[tuple[int, Entry]]] = {}
        for i, c in enumerate(creations):
            try:
                resource = Resource(_enum(ResourceType, c.resource_type),
                                    c.resource_name or "",
                                    _enum(PatternType, c.resource_pattern_type))
                entry = Entry(c.principal or "", c.host or "", _enum(Operation, c.operation),
                              _enum(Permission, c.permission_type))
                validate(resource, entry)
            except (AclError, ValueError) as err:
                results[i] = (errors.INVALID_REQUEST, str(err))
                continue
            wanted.setdefault(resource, []).append((i, entry))
        for resource, items in wanted.items():
            adding = {e for _, e in items}
            try:
                await self.update(resource, lambda held, adding=adding: held | adding)
                log.info("%s added ACLs to %s: %s", conn.principal, resource,
                         ", ".join(map(str, sorted(adding))))
            except Exception as err:  # noqa: BLE001 - per resource, as Kafka answers it
                code, message = errors.error_of(err, f"create ACLs of {resource}")
                for i, _ in items:
                    results[i] = (code, message)
        return CreateAclsResponse(throttle_time_ms=0, results=[
            R(error_code=code, error_message=message) for code, message in results])

    async def delete_acls(self, req: protocol.Request, conn: Any) -> Any:
        R = DeleteAclsResponse.DeleteAclsFilterResult
        M = R.DeleteAclsMatchingAcl
        filters = req.body.filters
        if self.authorizer is None or self.update is None:
            return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
                R(error_code=errors.SECURITY_DISABLED, error_message=NO_AUTHORIZER,
                  matching_acls=[]) for _ in filters])
        if not conn.allowed(Operation.ALTER, ResourceType.CLUSTER):
            return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
                R(error_code=errors.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED,
                  matching_acls=[]) for _ in filters])
        out = []
        for f in filters:
            try:
                flt = _filter(f)
            except ValueError as err:
                out.append(R(error_code=errors.INVALID_REQUEST, error_message=str(err),
                             matching_acls=[]))
                continue
            matched: list[Any] = []
            resources = sorted({r for r, _ in self.authorizer.bindings(flt)})
            for resource in resources:
                removed: list[Entry] = []

                def change(held: set[Entry], resource: Resource = resource,
                           removed: list[Entry] = removed, flt: AclFilter = flt) -> set[Entry]:
                    removed[:] = sorted(e for e in held if flt.matches(resource, e))
                    return {e for e in held if not flt.matches(resource, e)}

                code, message = errors.NONE, None
                try:
                    await self.update(resource, change)
                except Exception as err:  # noqa: BLE001 - per binding, as Kafka answers it
                    code, message = errors.error_of(err, f"delete ACLs of {resource}")
                matched += [M(error_code=code, error_message=message, resource_type=resource.type,
                              resource_name=resource.name, pattern_type=resource.pattern,
                              principal=e.principal, host=e.host, operation=e.operation,
                              permission_type=e.permission) for e in removed]
            if matched:
                log.info("%s removed %d ACLs matching %s", conn.principal, len(matched), flt)
            out.append(R(error_code=errors.NONE, error_message=None, matching_acls=matched))
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=out)


def _enum(kind: type[Any], code: int) -> Any:
    try:
        return kind(code)
    except ValueError:
        return kind(0)  # UNKNOWN: refused by validate


def _filter(f: Any) -> AclFilter:
    """A request's filter (DescribeAcls' body, one of DeleteAcls' filters); ValueError
    for one Kafka refuses."""
    flt = AclFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                    _enum(PatternType, f.pattern_type_filter), f.principal_filter,
                    f.host_filter, _enum(Operation, f.operation),
                    _enum(Permission, f.permission_type))
    reason = flt.unknown()
    if reason:
        raise ValueError(f"Invalid ACL filter: {reason}")
    return flt
