"""Kafka wire protocol: frames, request decoding and response encoding.

Messages are decoded and encoded by kafka-python's `kafka.protocol` classes, which are
generated from Apache Kafka's own JSON message schemas; this module adds only what the
broker side needs on top: the size-prefixed frame, the table of APIs and versions this
daemon serves (`SUPPORTED`, the only versions ApiVersions advertises), and the mapping
from a frame to the right request class.

Errors: `FrameAssembler` raises `FrameTooLarge` for a size prefix over the limit (before
any of the body is taken) and `ProtocolError` for a negative or tiny size;
`decode_request` raises `UnsupportedVersion` for a known API at a version not served
(the caller may answer ApiVersions with error 35, everything else closes the
connection, as Kafka does) and `ProtocolError` for anything that does not decode.
No exception from the decoder escapes as anything else: a fuzzed frame can only close
its own connection.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from ..wire.messages import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from . import codec, errors, metadata_messages, record_messages

# api_key(2) + api_version(2) + correlation_id(4) + client_id length(2)
MIN_REQUEST_SIZE = 10
_PEEK = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")

class ProtocolError(Exception):
    """A frame that is not a valid request; the connection it came on is closed."""


class FrameTooLarge(ProtocolError):
    def __init__(self, size: int, limit: int, kind: str = "request",
                 limit_name: str = "socket.request.max.bytes"):
        super().__init__(f"{kind} frame of {size} bytes is over {limit_name} {limit}; "
                         "refused before reading its body")
        self.size = size
        self.limit = limit


class UnsupportedApi(ProtocolError):
    """A request for an API this broker does not serve (a well-formed header)."""

    def __init__(self, api_key: int, version: int, correlation_id: int):
        super().__init__(f"{Api.name_of(api_key)} (key {api_key}) v{version} is not served "
                         f"(correlation id {correlation_id})")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


class UnsupportedVersion(ProtocolError):
    def __init__(self, api_key: int, version: int, correlation_id: int):
        api = Api.name_of(api_key)
        super().__init__(f"{api} v{version} is not served (supported: "
                         f"{SUPPORTED[api_key].min_version}-{SUPPORTED[api_key].max_version})")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    request: Any  # kafka.protocol request class
    response: Any
    min_version: int
    max_version: int

    @staticmethod
    def name_of(api_key: int) -> str:
        try:
            return ApiKey(api_key).name
        except ValueError:
            return f"api {api_key}"


def _api(request: Any, response: Any, lo: int, hi: int) -> Api:
    # Never advertise past what the installed kafka-python can decode.
    hi = min(hi, request.max_version, response.max_version)
    return Api(request.API_KEY, request.name.removesuffix("Request"), request, response, lo, hi)


# What this broker serves. Metadata answers topic ids from v10 and is asked by them
# from v12 (KIP-516; librdkafka trusts leader epochs, KIP-320, only from v9 on); the
# data path names topics, not ids (Fetch 13+ is not served). Fetch
# v12 is flexible and the one followers use (a last fetched epoch in, a diverging epoch
# out); ApiVersions v3, DescribeLogDirs v2-4, OffsetForLeaderEpoch v4 and DeleteTopics
# v4-5 are flexible too: v4 of DescribeLogDirs carries each dir's total and usable bytes,
# v5 of DeleteTopics a refusal's message (v6 names topics by id). kafka-python 3.x and
# librdkafka negotiate down to these. Produce v0-2 and Fetch v0-3 are the old clients'
# (sarama with a Config.Version before 0.11, kafka-go 0.2), served as Kafka 3.9 serves
# them: their magic 0/1 messages are written as a magic-2 batch, and read back as magic
# 0/1 messages (daemon/api/handlers.py, logstore.records).
SUPPORTED: dict[int, Api] = {a.key: a for a in (
    _api(ProduceRequest, ProduceResponse, 0, 8),
    _api(FetchRequest, FetchResponse, 0, 12),
    # v0 (several offsets, found by segment times) is Kafka 3.x's still, and what
    # Burrow's sarama sends; v7 asks for MAX_TIMESTAMP, v8 EARLIEST_LOCAL and v9
    # LATEST_TIERED (tiered storage: everything here is local); v10 adds a timeout for
    # remote lookups, none here.
    _api(ListOffsetsRequest, ListOffsetsResponse, 0, 9),
    _api(MetadataRequest, MetadataResponse, 0, 12),
    # The brokers and controller without the topics (KIP-700); v2 adds KRaft's fenced
    # brokers, none here.
    _api(DescribeClusterRequest, DescribeClusterResponse, 0, 1),
    _api(ApiVersionsRequest, ApiVersionsResponse, 0, 3),
    # From v0, as Kafka 3.9: sarama's admin sends CreateTopics v0-1 and DeleteTopics v0
    # with a Config.Version before 1.0 and 0.11, kafka-go 0.2's Conn.CreateTopics v0.
    _api(CreateTopicsRequest, CreateTopicsResponse, 0, 4),
    _api(DeleteTopicsRequest, DeleteTopicsResponse, 0, 5),
    _api(InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    # Transactions (daemon/api/transactions.py), Kafka 3.9's protocol (transaction
    # version 1): AddPartitionsToTxn v4 is a broker's verification (KIP-890's first
    # part, daemon.replica.txn_verification); EndTxn v5 and TxnOffsetCommit v4 belong
    # to its second part, not served.
    _api(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 4),
    _api(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
    _api(EndTxnRequest, EndTxnResponse, 0, 3),
    _api(WriteTxnMarkersRequest, WriteTxnMarkersResponse, 1, 1),
    _api(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
    _api(DescribeProducersRequest, DescribeProducersResponse, 0, 0),
    _api(DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0),
    _api(ListTransactionsRequest, ListTransactionsResponse, 0, 1),
    _api(DescribeLogDirsRequest, DescribeLogDirsResponse, 0, 4),
    # Replica moves between this broker's log dirs (KIP-113, daemon/replica/moves.py).
    _api(AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, 1, 2),
    _api(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4),
    # Consumer groups and committed offsets (daemon/api/groups.py), the classic
    # protocol: up to the versions before KIP-848's member epochs and topic ids.
    # OffsetCommit v1 is what older sarama consumer groups send (Debian's 1.22, unless
    # Consumer.Offsets.Retention is set); v0 is Kafka's ZooKeeper-kept offsets, not served.
    _api(OffsetCommitRequest, OffsetCommitResponse, 1, 8),
    _api(OffsetFetchRequest, OffsetFetchResponse, 1, 8),
    _api(FindCoordinatorRequest, FindCoordinatorResponse, 0, 4),
    _api(JoinGroupRequest, JoinGroupResponse, 0, 9),
    _api(HeartbeatRequest, HeartbeatResponse, 0, 4),
    _api(LeaveGroupRequest, LeaveGroupResponse, 0, 5),
    _api(SyncGroupRequest, SyncGroupResponse, 0, 5),
    _api(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
    _api(ListGroupsRequest, ListGroupsResponse, 0, 5),
    _api(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
    _api(OffsetDeleteRequest, OffsetDeleteResponse, 0, 0),
    # Topic and broker configs (daemon/api/configs.py).
    _api(DescribeConfigsRequest, DescribeConfigsResponse, 0, 4),
    _api(AlterConfigsRequest, AlterConfigsResponse, 0, 2),
    _api(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1),
    # DeleteRecords and CreatePartitions (daemon/api/partitions.py).
    _api(DeleteRecordsRequest, DeleteRecordsResponse, 0, 2),
    _api(CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
    # ACLs (daemon/api/acls.py): answered as a broker with no authorizer (54).
    _api(DescribeAclsRequest, DescribeAclsResponse, 0, 3),
    _api(CreateAclsRequest, CreateAclsResponse, 0, 3),
    _api(DeleteAclsRequest, DeleteAclsResponse, 0, 3),
    # ElectLeaders (daemon/api/partitions.py): preferred and unclean elections.
    _api(ElectLeadersRequest, ElectLeadersResponse, 0, 2),
    # Partition reassignment (daemon/api/partitions.py, daemon/controller/reassignment.py);
    # v1 may refuse a change of replication factor (KIP-860).
    _api(AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, 0, 1),
    _api(ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, 0, 0),
    # Client quotas (daemon/api/client_quotas.py): client-id byte rates.
    _api(DescribeClientQuotasRequest, DescribeClientQuotasResponse, 0, 1),
    _api(AlterClientQuotasRequest, AlterClientQuotasResponse, 0, 1),
    # SASL logins on SASL_PLAINTEXT and SASL_SSL listeners (daemon/api/sasl.py), and the
    # SCRAM credentials they check.
    _api(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1),
    _api(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2),
    _api(DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, 0, 0),
    _api(AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, 0, 0),
    # The controller's requests (docs/cluster.md): every version a ZooKeeper-mode
    # Kafka 3.x controller sends.
    _api(LeaderAndIsrRequest, LeaderAndIsrResponse, 0, 7),
    _api(StopReplicaRequest, StopReplicaResponse, 0, 4),
    _api(UpdateMetadataRequest, UpdateMetadataResponse, 0, 8),
    # A broker's request to the controller before it stops (daemon/controller); v0's
    # header, without a client id, is not taken.
    _api(ControlledShutdownRequest, ControlledShutdownResponse, 1, 3),
)}


@dataclass
class Request:
    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the decoded kafka.protocol request object
    size: int  # frame size, for metrics
    throttle_ms: int = 0  # a client quota's throttle time for this request (Produce)

    @property
    def name(self) -> str:
        return self.api.name


class FrameAssembler:
    """Kafka frames out of a connection's byte stream (sans I/O: the connection's
    protocol asks `buffer()` for where to receive and reports `received(n)`): requests
    on the listener's connections, answers on a follower's connection to its leader
    (daemon.wire.peer, with `min_bytes`, `kind` and `limit_name` of its own).

    Small frames are received into a reused scratch buffer and copied out once; a frame
    larger than SMALL (a Produce's records, a Fetch answer's) is received straight into
    its own bytearray, which becomes the frame: the kernel's copy is the only one, but
    for the bytes that came into scratch with its size prefix (copied over once). Each
    size prefix is checked as soon as it arrives, before any of its body is taken: over
    `max_bytes` it sets `error` to FrameTooLarge, under `min_bytes` (a request header) to
    ProtocolError, and nothing after it is taken; the frames before it in the stream are
    still handed out.
    """

    SCRATCH = 64 << 10
    SMALL = 16 << 10

    def __init__(self, max_bytes: int, *, min_bytes: int = MIN_REQUEST_SIZE,
                 kind: str = "request", limit_name: str = "socket.request.max.bytes"):
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self.kind = kind
        self.limit_name = limit_name
        self._scratch = bytearray(self.SCRATCH)
        self._start = 0  # the first byte of scratch not yet handed out
        self._end = 0  # the end of what scratch has received
        self._frame: bytearray | None = None  # a large frame being received in place
        self._got = 0  # bytes of it received
        self.error: ProtocolError | None = None  # a bad size prefix: the stream ends there

    def buffer(self) -> memoryview:
        """Where the next bytes from the socket go (never empty)."""
        if self._frame is not None:
            return memoryview(self._frame)[self._got:]
        if self._end == len(self._scratch):  # full: move the unparsed tail to the front
            tail = self._end - self._start
            self._scratch[:tail] = self._scratch[self._start:self._end]
            self._start, self._end = 0, tail
        return memoryview(self._scratch)[self._end:]

    def received(self, n: int) -> list[bytes | bytearray]:
        """`n` bytes arrived in the last `buffer()`; the frames they completed, in order."""
        if self._frame is not None:
            self._got += n
            if self._got < len(self._frame):
                return []
            frame, self._frame = self._frame, None
            return [frame]
        self._end += n
        frames: list[bytes | bytearray] = []
        scratch = self._scratch
        while self._end - self._start >= 4 and self.error is None:
            (size,) = _SIZE.unpack_from(scratch, self._start)
            if size > self.max_bytes:
                self.error = FrameTooLarge(size, self.max_bytes, self.kind, self.limit_name)
                break
            if size < self.min_bytes:
                self.error = ProtocolError(f"{self.kind} frame of {size} bytes is shorter "
                                           f"than a {self.kind} header")
                break
            body = self._start + 4
            have = self._end - body
            if have >= size:
                frames.append(bytes(memoryview(scratch)[body:body + size]))
                self._start = body + size
                continue
            if size > self.SMALL:  # the rest goes straight into the frame's own buffer
                frame = bytearray(size)
                frame[:have] = memoryview(scratch)[body:self._end]  # one copy, not two
                self._frame, self._got = frame, have
                self._start = self._end = 0
                return frames
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def ended(self) -> None:
        """The stream ended: the bad size prefix it had, or ProtocolError if it ended
        inside a frame."""
        if self.error is not None:
            raise self.error
        if self._frame is not None:
            raise ProtocolError(f"connection closed after {self._got} of {len(self._frame)} "
                                "frame bytes")
        left = self._end - self._start
        if 0 < left < 4:
            raise ProtocolError(f"connection closed inside a frame size ({left} of 4 bytes)")
        if left:
            (size,) = _SIZE.unpack_from(self._scratch, self._start)
            raise ProtocolError(f"connection closed after {left - 4} of {size} frame bytes")


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed start of every request."""
    if len(frame) < _PEEK.size:
        raise ProtocolError(f"frame of {len(frame)} bytes has no request header")
    return _PEEK.unpack_from(frame)


# Requests decoded by hand (daemon.api.record_messages), not by kafka-python: Produce,
# its records not copied, and Fetch, the request of every consumer and follower.
_DECODED_BY_HAND = {0: record_messages.decode_produce, 1: record_messages.decode_fetch_request}


def decode_request(frame: bytes | bytearray) -> Request:
    """Decode one request frame (without its size prefix)."""
    api_key, version, correlation_id = peek_header(frame)
    api = SUPPORTED.get(api_key)
    if api is None:
        raise UnsupportedApi(api_key, version, correlation_id)
    by_hand = _DECODED_BY_HAND.get(api_key)
    if by_hand is None and not isinstance(frame, bytes):
        frame = bytes(frame)  # kafka-python's decoders take bytes
    if not api.min_version <= version <= api.max_version:
        raise UnsupportedVersion(api_key, version, correlation_id)
    try:
        if by_hand is not None:
            client_id, body_at = _client_id(frame)
            body = by_hand(frame, body_at, version)
            return Request(api, version, correlation_id, client_id, body, len(frame))
        body = api.request.decode(frame, version=version, header=True)
    except Exception as err:  # noqa: BLE001 - the decoder raises many types on bad bytes
        # struct.error, ValueError, UnicodeDecodeError, IndexError...: all mean "not a
        # valid request"; the caller closes this connection only.
        raise ProtocolError(f"{api.name} v{version} request (correlation id "
                            f"{correlation_id}) does not decode: {type(err).__name__}: "
                            f"{err}") from err
    header = body.header
    return Request(api, version, correlation_id, header.client_id, body, len(frame))


def _client_id(frame: bytes) -> tuple[str | None, int]:
    """The client id of a request header (v1, or v2 of a flexible request: the same
    nullable STRING), and where it ends: where the body starts, or v2's tagged fields."""
    at = _PEEK.size + 2
    (n,) = struct.unpack_from(">h", frame, _PEEK.size)
    if n < 0:
        return None, at
    if at + n > len(frame):
        raise ValueError(f"client id of {n} bytes runs past the {len(frame)}-byte frame")
    return frame[at:at + n].decode(), at + n


def encode_response(request: Request, response: Any) -> list[Any]:
    """Frame `response` for `request` (size prefix, response header, body) as the parts
    to send in order: one bytearray, or for a Fetch (`record_messages.FetchAnswer`) the
    framing around each partition's records, which are not copied. A Produce's answer
    (`record_messages.ProduceAnswer`) and Metadata's (`metadata_messages.MetadataAnswer`)
    are encoded by hand too, and ApiVersions' (`ApiVersionsAnswer`) once per version."""
    if isinstance(response, record_messages.FetchAnswer):
        return record_messages.encode_fetch(response, request.version, request.correlation_id)
    if isinstance(response, record_messages.ProduceAnswer):
        return [record_messages.encode_produce(response, request.version,
                                               request.correlation_id)]
    if isinstance(response, metadata_messages.MetadataAnswer):
        return [metadata_messages.encode_metadata(response, request.version,
                                                  request.correlation_id)]
    if isinstance(response, ApiVersionsAnswer):
        # Header v0 at every version (KIP-511: the client reads it before it knows
        # which versions this broker speaks).
        buf = codec.response_head(request.correlation_id, False)
        buf += _api_versions_body(request.version)
        codec.seal_frame(buf)
        return [buf]
    # Version first: kafka-python's version setter assumes a request header once a
    # header is attached.
    response.API_VERSION = request.version
    response.with_header(correlation_id=request.correlation_id)
    return [response.encode(header=True, framed=True)]  # a fresh bytearray: no extra copy


class ApiVersionsAnswer(NamedTuple):
    """ApiVersions' answer at `version`, without error: the same body every time, so it
    is encoded once per version (`_api_versions_body`), where kafka-python's objects
    for the 60-odd APIs took 0.4-0.6 ms of the event loop at each connection's start."""

    version: int


@functools.cache
def _api_versions_body(version: int) -> bytes:
    return bytes(api_versions_response(version).encode(version=version))


def api_versions_response(version: int, error_code: int = 0) -> Any:
    keys = [ApiVersionsResponse.ApiVersion(api_key=a.key, min_version=a.min_version,
                                           max_version=a.max_version)
            for a in sorted(SUPPORTED.values(), key=lambda a: a.key)]
    return ApiVersionsResponse(error_code=error_code, api_keys=keys, throttle_time_ms=0,
                               version=version)


def unsupported_api_versions_frame(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions request at a version it does not know: a v0
    response with UNSUPPORTED_VERSION and the supported ranges, so the client can retry
    at a version both sides speak (KIP-511)."""
    resp = api_versions_response(0, errors.UNSUPPORTED_VERSION)
    resp.with_header(correlation_id=correlation_id)
    return bytes(resp.encode(header=True, framed=True))


def encode_request(body: Any, version: int, correlation_id: int,
                   client_id: str = "logkeeper") -> bytes:
    """A framed request (for the admin commands, a follower's fetches and the tests): a
    kafka-python request object, or a `record_messages.FetchBody`, encoded by hand."""
    if isinstance(body, record_messages.FetchBody):
        return record_messages.encode_fetch_request(body, version, correlation_id, client_id)
    body.API_VERSION = version
    body.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(body.encode(header=True, framed=True))


def decode_response(response_cls: Any, frame: bytes, version: int) -> Any:
    """Decode a response frame payload (without size prefix) for the admin commands."""
    try:
        return response_cls.decode(frame, version=version, header=True)
    except Exception as err:  # noqa: BLE001 - see decode_request
        raise ProtocolError(f"{response_cls.name} v{version} response does not decode: "
                            f"{type(err).__name__}: {err}") from err
