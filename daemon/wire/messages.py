"""Inter-broker control messages: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6)
and ControlledShutdown (7), requests and responses.

kafka-python 3.x names these APIs but has no classes for them. Each class here loads
logkeeper's own schema (`daemon/wire/schemas/<ClassName>.json`) into kafka-python's
message generator, so encoding, decoding, flexible versions, compact strings and tagged
fields are kafka-python's, exactly as for the client APIs in `daemon.api.protocol`.

Versions are Kafka 3.9's: LeaderAndIsr 0-7, UpdateMetadata 0-8, StopReplica 0-4 and
ControlledShutdown 0-3, every version a ZooKeeper-mode Kafka controller may send.

Python names differ from the schema's in three places, all set by `_patch` below:
- `Type` (LeaderAndIsr v5+, UpdateMetadata v8 tagged) is `request_type`: a field named
  `type` would shadow the class's `type` property and break `with_header`;
- `isKRaftController` is `is_kraft_controller` (the generator would say
  `is_k_raft_controller`);
- a common struct gets one generated class per parent field. The v0-1 (LeaderAndIsr) and
  v0-4 (UpdateMetadata, LeaderAndIsr response) ungrouped lists get their own struct names
  (`LeaderAndIsrUngroupedPartitionState`, ...) so that `LeaderAndIsrRequest.X` never
  silently means the old-version class; the grouped ones are reached through their topic
  struct, e.g. `LeaderAndIsrRequest.LeaderAndIsrTopicState.LeaderAndIsrPartitionState`.

Errors: `decode` raises whatever kafka-python raises on bad bytes (struct.error,
ValueError, ...) and ValueError for a version outside the schema's range; callers that
read from the network wrap it as `daemon.api.protocol.decode_request` does.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_message import ApiMessage

from . import schemas

_SCHEMAS = schemas.__name__

# Schema name -> Python-facing name (the generator snake-cases the latter).
_FIELD_RENAMES = {"Type": "RequestType", "isKRaftController": "IsKraftController"}
# (parent field, struct type) -> struct type for the parent's copy of a common struct.
_STRUCT_RENAMES = {
    ("UngroupedPartitionStates", "[]LeaderAndIsrPartitionState"): "[]LeaderAndIsrUngroupedPartitionState",
    ("UngroupedPartitionStates", "[]UpdateMetadataPartitionState"):
        "[]UpdateMetadataUngroupedPartitionState",
    ("PartitionErrors", "[]LeaderAndIsrPartitionError"): "[]LeaderAndIsrUngroupedPartitionError",
}


def _patch(fields: list[dict[str, Any]], top: bool) -> list[dict[str, Any]]:
    out = []
    for field in fields:
        field = dict(field)
        field["name"] = _FIELD_RENAMES.get(field["name"], field["name"])
        # Only the top-level ungrouped lists are renamed: the grouped copies sit one
        # level down, inside their topic struct.
        if top:
            field["type"] = _STRUCT_RENAMES.get((field["name"], field["type"]), field["type"])
        if "fields" in field:
            field["fields"] = _patch(field["fields"], top=False)
        out.append(field)
    return out


def _patch_schema(cls: type, json: dict[str, Any]) -> dict[str, Any]:
    json = dict(json)
    json["fields"] = _patch(json["fields"], top=True)
    return json


# The generator's metaclass looks for `json_patch` in each class body (not inherited)
# and calls it with the loaded schema before generating the class.
_json_patch = classmethod(_patch_schema)


class LeaderAndIsrRequest(ApiMessage, load_json=_SCHEMAS):
    json_patch = _json_patch


class LeaderAndIsrResponse(ApiMessage, load_json=_SCHEMAS):
    json_patch = _json_patch


class UpdateMetadataRequest(ApiMessage, load_json=_SCHEMAS):
    json_patch = _json_patch


class UpdateMetadataResponse(ApiMessage, load_json=_SCHEMAS):
    json_patch = _json_patch


class StopReplicaRequest(ApiMessage, load_json=_SCHEMAS):
    json_patch = _json_patch


class StopReplicaResponse(ApiMessage, load_json=_SCHEMAS):
    json_patch = _json_patch


_HEADER_V0 = struct.Struct(">hhi")


class ControlledShutdownRequest(ApiMessage, load_json=_SCHEMAS):
    """v0 alone uses request header version 0: api key, version, correlation id, no
    client id. Every other version (and every response) has the standard header."""

    json_patch = _json_patch

    def encode_header(self, flexible: bool = False) -> bytes:
        if self.API_VERSION == 0:
            h = self._header
            return _HEADER_V0.pack(h.request_api_key, h.request_api_version, h.correlation_id)
        return super().encode_header(flexible=flexible)

    @classmethod
    def parse_header(cls, data: io.BytesIO, version: int | None = None) -> Any:
        version = cls._class_version if version is None else version
        if version == 0:
            raw = data.read(_HEADER_V0.size)
            if len(raw) != _HEADER_V0.size:
                raise ValueError(f"ControlledShutdown v0 header needs {_HEADER_V0.size} bytes, "
                                 f"got {len(raw)}")
            key, ver, correlation_id = _HEADER_V0.unpack(raw)
            return RequestHeader(request_api_key=key, request_api_version=ver,
                                 correlation_id=correlation_id, client_id=None)
        return super().parse_header(data, version=version)


class ControlledShutdownResponse(ApiMessage, load_json=_SCHEMAS):
    json_patch = _json_patch


# (request class, response class) per API key, for the broker's API table.
CONTROL_APIS: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = {
    req.API_KEY: (req, resp)
    for req, resp in (
        (LeaderAndIsrRequest, LeaderAndIsrResponse),
        (StopReplicaRequest, StopReplicaResponse),
        (UpdateMetadataRequest, UpdateMetadataResponse),
        (ControlledShutdownRequest, ControlledShutdownResponse),
    )
}
