"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), as a Kafka broker with no
`authorizer.class.name` answers them: logkeeper authorizes nothing (every client may do
everything its listener lets it, as on a Kafka broker without an authorizer), so each
request is answered SECURITY_DISABLED (54), "No Authorizer is configured on the
broker", and nothing is stored. Without these, clients were told the broker is too old
for ACLs (librdkafka: "requires broker version >= 0.11.0.0"), which is not why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.admin import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse

from . import errors, protocol

NO_AUTHORIZER = "No Authorizer is configured on the broker"


class AclApis:
    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        return {29: self.describe_acls, 30: self.create_acls, 31: self.delete_acls}

    async def describe_acls(self, req: protocol.Request, _conn: Any) -> Any:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=errors.SECURITY_DISABLED,
                                    error_message=NO_AUTHORIZER, resources=[])

    async def create_acls(self, req: protocol.Request, _conn: Any) -> Any:
        R = CreateAclsResponse.AclCreationResult
        return CreateAclsResponse(throttle_time_ms=0, results=[
            R(error_code=errors.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
            for _ in req.body.creations])

    async def delete_acls(self, req: protocol.Request, _conn: Any) -> Any:
        R = DeleteAclsResponse.DeleteAclsFilterResult
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            R(error_code=errors.SECURITY_DISABLED, error_message=NO_AUTHORIZER,
              matching_acls=[]) for _ in req.body.filters])
