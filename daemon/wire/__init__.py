"""The inter-broker wire: control message classes generated from logkeeper's own schemas.

See `daemon.wire.messages` for the classes and `daemon.wire.views` for version-independent
readers of the requests and builders of the responses.
"""

from .messages import (
    CONTROL_APIS,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

__all__ = [
    "CONTROL_APIS",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "LeaderAndIsrRequest",
    "LeaderAndIsrResponse",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "UpdateMetadataRequest",
    "UpdateMetadataResponse",
]
