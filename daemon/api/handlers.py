"""Kafka API handlers: decoded request in, response object out (daemon.api.protocol frames it).

One method per API in `protocol.SUPPORTED`. Handlers never touch a disk themselves:
storage work goes through the ReplicaManager, which runs it on the log dirs' workers. Errors are
answered per partition or per topic with Kafka error codes, as a Kafka broker does;
a handler returns `CLOSE` when Kafka would close the connection instead (an acks=0
produce that failed: the client has no other way to learn of it).

Ordering: `produce` queues its appends before its first `await`, and a connection's
requests are handled one at a time (as Kafka does), so appends to one partition happen
in the order the client sent them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterReplicaLogDirsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeClusterResponse,
    DescribeLogDirsResponse,
)
from kafka.protocol.consumer import ListOffsetsResponse, OffsetForLeaderEpochResponse

from logstore import TopicPartition, names
from logstore.errors import CorruptRecordError, InvalidTopicError, UnsupportedCodecError
from logstore.records import (
    ATTR_TRANSACTIONAL,
    MAGIC,
    MAGIC_AT,
    Codec,
    batch_attributes,
    batch_producer,
    batches_to_legacy,
    legacy_to_batch,
)

from ..controller.controller import Controller, TopicSpec
from ..ops.metrics import Metrics
from ..replica.control import ControlRequests
from ..replica.leadership import LeaderAndIsr
from ..replica.manager import Marker, ReadSpec, ReplicaManager
from ..replica.moves import ReplicaMoves
from ..replica.partition import AppendResult, Partition, delayed, wait_for_change
from ..replica.topic_config import TopicConfigs
from ..replica.topics import TopicAdmin, TopicError, refuse_internal
from ..replica.txn_verification import TxnVerifier, produce_error
from ..security.acls import (
    CLUSTER_NAME,
    RESOURCE_NAMES,
    SUPPORTED_OPERATIONS,
    Authorizer,
    Operation,
    ResourceType,
)
from ..storage.log_manager import LogManager
from ..storage.spliced import SplicedRecords
from ..wire import (
    ControlledShutdownResponse,
    LeaderAndIsrResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
)
from . import errors, protocol
from .client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, ClientQuotas
from .metadata_messages import BrokerMetadata, MetadataAnswer, PartitionMetadata, TopicMetadata
from .record_messages import FetchAnswer, FetchPartition, ProduceAnswer, ProducedPartition

log = logging.getLogger("logkeeper.handlers")
authorizer_log = logging.getLogger("logkeeper.authorizer")

CLOSE = object()  # sentinel: close the connection without a response
# ListOffsets' replica id that may ask any replica, not only the leader (Kafka's
# ListOffsetsRequest.DEBUGGING_REPLICA_ID); consumers send -1, followers their broker id.
DEBUGGING_REPLICA_ID = -2
CONSUMER_REPLICA_ID = -1  # a client's: Kafka's isolation level is defined for it only
# DescribeCluster's endpoint type of brokers (2: KRaft controllers, none here).
BROKER_ENDPOINT = 1


@dataclass(eq=False)
class ConnInfo:
    """What a handler may know about the connection a request came on. `muted_until`
    (loop time): a client quota throttled it; no request of it is read before then."""

    local_host: str
    local_port: int
    peer: str
    listener: str = "PLAINTEXT"  # the listener name it came on
    muted_until: float = 0.0
    # SASL (daemon.api.sasl): logged in yet (always, on a listener without SASL), as whom,
    # the login under way, and whether the connection closes after the answers due.
    authenticated: bool = True
    principal: str = "User:ANONYMOUS"
    login: Any = None
    close_after: bool = False
    mechanism: str | None = None  # the SASL mechanism it logged in with
    session_expires: float | None = None  # KIP-368: log in again before (monotonic time)
    # Set while a Produce of this connection waits for its transaction's verification:
    # the Produce requests after it queue their appends once it has queued its own.
    produce_gate: asyncio.Future[None] | None = None
    # The ACLs every request is checked against (daemon.security.acls), when the broker
    # has an authorizer; None: everything is allowed.
    authorizer: Authorizer | None = None

    @property
    def user(self) -> str:
        """The principal's name, as quotas name users (User:alice -> alice)."""
        return self.principal.partition(":")[2]

    @property
    def host(self) -> str:
        """The client's address, as ACLs name hosts."""
        return self.peer.rpartition(":")[0] or self.peer

    def allowed(self, op: Operation, rtype: ResourceType, name: str = CLUSTER_NAME, *,
                log_denied: bool = True) -> bool:
        """Whether this connection's principal may do `op` on the resource (always,
        without an authorizer). A denial is logged as Kafka's authorizer logs it, unless
        the caller is only filtering (`log_denied` False: a Metadata of every topic)."""
        if self.authorizer is None:
            return True
        if self.authorizer.authorize(self.principal, self.host, op, rtype, name):
            return True
        if log_denied and self.authorizer.first_denial(self.principal, self.host, op, rtype,
                                                       name):
            authorizer_log.info("Principal = %s is Denied operation = %s from host = %s on "
                                "resource = %s:%s", self.principal, op.name, self.host,
                                RESOURCE_NAMES[rtype], name)
        return False

    def authorized_operations(self, rtype: ResourceType, name: str) -> set[int]:
        """KIP-430's `authorized_operations` of the resource for this principal: without
        an authorizer every operation the resource type supports, as Kafka answers."""
        if self.authorizer is None:
            return {int(op) for op in SUPPORTED_OPERATIONS[rtype]}
        return self.authorizer.authorized_operations(self.principal, self.host, rtype, name)

    def allowed_any(self, op: Operation, rtype: ResourceType) -> bool:
        """Whether the principal may do `op` on some resource of the type."""
        return self.authorizer is None or \
            self.authorizer.authorize_any(self.principal, self.host, op, rtype)

    def mute(self, throttle_ms: int) -> None:
        """Kafka's channel muting after a throttled answer (KIP-219)."""
        until = asyncio.get_running_loop().time() + throttle_ms / 1000
        self.muted_until = max(self.muted_until, until)


_topic_error = errors.unknown_topic_code


def _transactional_batches(items: list[tuple[Partition, bytes]]
                           ) -> list[tuple[Partition, int, int, int]]:
    """(partition, producer id, epoch, first sequence) of each transactional batch."""
    out = []
    for p, records in items:
        if (batch_attributes(records) or 0) & ATTR_TRANSACTIONAL:
            fields = batch_producer(records)
            if fields is not None and fields[0] >= 0:
                out.append((p, fields[0], fields[1], fields[2]))
    return out


_ZERO_UUID = uuid.UUID(int=0)


def _partition_metadata(index: int, s: LeaderAndIsr) -> PartitionMetadata:
    """A Metadata partition from a leadership state (daemon.replica.leadership)."""
    return PartitionMetadata(errors.LEADER_NOT_AVAILABLE if s.leader < 0 else 0, index,
                             s.leader, s.leader_epoch, s.replicas, s.isr, s.offline_replicas)


def _unreachable_leaders(topics: list[TopicMetadata], listed: set[int], live: set[int]
                         ) -> None:
    """Kafka's rule for a partition whose leader the client cannot reach on its listener
    (it has no endpoint there): no leader, and LISTENER_NOT_FOUND while that broker is
    alive, LEADER_NOT_AVAILABLE otherwise."""
    for t in topics:
        for p in t.partitions:
            if p.leader_id >= 0 and p.leader_id not in listed:
                p.error_code = (errors.LISTENER_NOT_FOUND if p.leader_id in live
                                else errors.LEADER_NOT_AVAILABLE)
                p.leader_id = -1


class Handlers:
    def __init__(self, replicas: ReplicaManager, topic_admin: TopicAdmin, storage: LogManager,
                 metrics: Metrics):
        self.replicas = replicas
        self.leadership = replicas.leadership
        self.topic_admin = topic_admin
        self.storage = storage
        self.metrics = metrics
        self.config = topic_admin.config
        # The (host, port) Metadata gives clients, by listener name: set by the server
        # once its listeners are bound.
        self.advertised: dict[str, tuple[str, int]] = {}
        self.stopping = asyncio.Event()
        # Cluster mode (set by the app): the controller's requests, the controller that
        # CreateTopics and DeleteTopics go to, and the metadata cache Metadata answers from.
        self.control: ControlRequests | None = None
        self.controller: Controller | None = None
        # A client's auto-created topic on a broker that is not the controller: written
        # to its znodes here (the app's; an error code, NONE once on its way).
        self.create_in_zookeeper: Callable[[str], Awaitable[int]] | None = None
        # Told of each transaction marker written to __consumer_offsets-<partition>
        # (partition, producer id, commit): the group coordinator's pending offsets.
        self.on_offsets_marker: Any = None
        # Replica moves between this broker's log dirs (set by the app).
        self.moves: ReplicaMoves | None = None
        # The topic configs (set by the app): a standalone acks=all checks the topic's
        # min.insync.replicas (daemon.replica.topic_config).
        self.topic_configs: TopicConfigs | None = None
        # Client quotas (set by the app; daemon.api.client_quotas).
        self.client_quotas: ClientQuotas | None = None
        # Transaction verification (set by the app; daemon.replica.txn_verification).
        self.txn_verifier: TxnVerifier | None = None
        self._dispatch = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata,
            4: self.leader_and_isr, 5: self.stop_replica, 6: self.update_metadata,
            7: self.controlled_shutdown,
            18: self.api_versions, 19: self.create_topics, 20: self.delete_topics,
            23: self.offset_for_leader_epoch,
            34: self.alter_replica_log_dirs, 35: self.describe_log_dirs,
            60: self.describe_cluster,
        }

    def register(self, apis: dict[int, Any]) -> None:
        """Add the handlers of another API family (daemon/api/groups.py)."""
        self._dispatch.update(apis)

    def check_served(self) -> None:
        """Every API advertised has a handler (called once the families are in)."""
        missing = set(protocol.SUPPORTED) - set(self._dispatch)
        assert not missing, f"APIs advertised without a handler: {sorted(missing)}"

    async def handle(self, req: protocol.Request, conn: ConnInfo) -> Any:
        return await self._dispatch[req.api.key](req, conn)

    # ---- ApiVersions ----

    async def api_versions(self, req: protocol.Request, conn: ConnInfo) -> Any:
        return protocol.ApiVersionsAnswer(req.version)

    # ---- Produce ----

    async def produce(self, req: protocol.Request, conn: ConnInfo) -> Any:
        body = req.body
        acks = body.acks
        slots: list[tuple[str, int, AppendResult | None]] = []
        items: list[tuple[Partition, bytes]] = []
        # A transactional producer's records need Write on its transactional id too.
        txn_denied = body.transactional_id is not None and not conn.allowed(
            Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
        for t in body.topic_data:
            writable = conn.allowed(Operation.WRITE, ResourceType.TOPIC, t.name)
            for pd in t.partition_data:
                if acks not in (0, 1, -1):
                    slots.append((t.name, pd.index, AppendResult(errors.INVALID_REQUIRED_ACKS)))
                    continue
                p = self.replicas.get(t.name, pd.index)
                if txn_denied:
                    slots.append((t.name, pd.index, AppendResult(
                        errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
                elif not writable:
                    slots.append((t.name, pd.index, AppendResult(
                        errors.TOPIC_AUTHORIZATION_FAILED)))
                elif names.is_internal(t.name):
                    slots.append((t.name, pd.index, AppendResult(
                        errors.INVALID_TOPIC_EXCEPTION,
                        message=f"cannot append to internal topic {t.name}")))
                elif p is None:
                    slots.append((t.name, pd.index, AppendResult(_topic_error(t.name))))
                elif not self.leadership.is_leader(p):
                    slots.append((t.name, pd.index, AppendResult(errors.NOT_LEADER_OR_FOLLOWER)))
                elif acks == -1 and (refusal := self._under_min_isr(p)) is not None:
                    slots.append((t.name, pd.index, refusal))
                elif not pd.records:
                    slots.append((t.name, pd.index, AppendResult(
                        errors.CORRUPT_MESSAGE, message="no record batch")))
                elif req.version < 7 and _zstd(pd.records):
                    slots.append((t.name, pd.index, AppendResult(
                        errors.UNSUPPORTED_COMPRESSION_TYPE, message=f"Produce requests with "
                        f"version {req.version} are not allowed to use ZStandard compression")))
                elif req.version < 3:
                    # An old client's magic 0/1 messages, up-converted as Kafka 3.x does.
                    try:
                        batch = legacy_to_batch(pd.records)
                    except (CorruptRecordError, UnsupportedCodecError) as err:
                        slots.append((t.name, pd.index, AppendResult(
                            errors.CORRUPT_MESSAGE, message=str(err))))
                    else:
                        slots.append((t.name, pd.index, None))
                        items.append((p, batch))
                else:
                    slots.append((t.name, pd.index, None))
                    items.append((p, pd.records))
        # Transaction verification (daemon.replica.txn_verification): with it on, a
        # transactional batch opens a transaction only with its partition's guard.
        verifier = self.txn_verifier
        verifying = verifier is not None and verifier.enabled
        txn = _transactional_batches(items) if verifying else []
        gate = conn.produce_gate
        # A look at the workers' producer state from the loop: if it is stale, a batch
        # goes without a verification it needed (refused there: its transaction ended)
        # or through one it did not (answered None on the worker).
        if (gate is None or gate.done()) and (
                not verifying or all(p.producers.txn_open(pid, epoch) for p, pid, epoch, _ in txn)):
            # Queued now, before any await: keeps per-partition order (module docstring).
            queued = self.replicas.append(items, {} if verifying else None)
        else:
            assert verifier is not None  # a gate is only set while verifying
            items, queued = await self._queue_verified(verifier, body.transactional_id,
                                                       items, txn, slots, conn)
        appended = await queued if items else []
        if acks == -1 and self.replicas.isr is not None:
            await self._await_replication(items, appended, body.timeout_ms)
        results = iter(appended)
        by_topic: dict[str, list[ProducedPartition]] = {}
        failed = False
        for topic, index, res in slots:
            if res is None:
                res = next(results)
            if res.error == errors.NONE:
                self.metrics.bytes_in.labels(topic).inc(res.size)
                self.metrics.messages_in.labels(topic).inc(res.records)
                produced = ProducedPartition(index, errors.NONE, res.base_offset,
                                             res.log_start_offset,
                                             log_append_time_ms=res.log_append_time)
            else:
                failed = True
                self.metrics.failed_produce.labels(errors.enum_name(res.error)).inc()
                self.metrics.errors.labels("Produce", errors.enum_name(res.error)).inc()
                log.debug("produce to %s-%d from %s refused: error %d %s", topic, index,
                         conn.peer, res.error, res.message or "")
                produced = ProducedPartition(index, res.error, res.base_offset,
                                             res.log_start_offset, res.message,
                                             record_errors=res.record_errors)
            by_topic.setdefault(topic, []).append(produced)
        if acks == 0:
            return CLOSE if failed else None
        return ProduceAnswer(list(by_topic.items()), req.throttle_ms)

    async def _queue_verified(self, verifier: TxnVerifier, transactional_id: str | None,
                              items: list[tuple[Partition, bytes]],
                              txn: list[tuple[Partition, int, int, int]],
                              slots: list[tuple[str, int, AppendResult | None]], conn: ConnInfo
                              ) -> tuple[list[tuple[Partition, bytes]],
                                         asyncio.Future[list[AppendResult]]]:
        """Queue a Produce's appends once the first batch of a transaction (`txn`, from
        `_transactional_batches`) on each of its partitions is verified
        (daemon.replica.txn_verification): (the items queued, their appends). A
        partition refused gets its answer in `slots`. While one Produce waits, the
        connection's next ones wait behind it (`produce_gate`), so appends stay in the
        order sent."""
        gate = conn.produce_gate
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.produce_gate = mine
        try:
            if gate is not None:
                await gate
            # (turned off meanwhile: written as they come, after the ones ahead)
            guards: dict[TopicPartition, Any] | None = {} if verifier.enabled else None
            refused: dict[TopicPartition, int] = {}
            producers = {(pid, epoch) for _, pid, epoch, _ in txn}
            if guards is not None and len(producers) > 1:  # Kafka refuses it too
                refused = {p.tp: errors.INVALID_PRODUCER_ID_MAPPING for p, *_ in txn}
            elif guards is not None and txn:
                pid, epoch = producers.pop()
                guards, refused = await verifier.verify(
                    transactional_id, pid, epoch, [(p, seq) for p, _, _, seq in txn])
            if refused:
                kept = []
                queued = iter(items)
                for i, (topic, index, res) in enumerate(slots):
                    if res is not None:
                        continue
                    p, records = next(queued)
                    code = refused.get(p.tp)
                    if code is None:
                        kept.append((p, records))
                    else:
                        code, message = produce_error(code)
                        slots[i] = (topic, index, AppendResult(code, message=message))
                items = kept
            return items, self.replicas.append(items, guards)
        finally:
            mine.set_result(None)
            if conn.produce_gate is mine:
                conn.produce_gate = None

    def admit_produce(self, req: protocol.Request, conn: ConnInfo) -> None:
        """A Produce just read: its bytes count against the client's producer_byte_rate
        now, in the order read (a pipelined request behind it waits out the throttle
        before it is taken); the answer carries the throttle time (Kafka records the
        whole request's size)."""
        req.throttle_ms = self._client_throttle(PRODUCER_BYTE_RATE, req, conn, req.size)

    def _client_throttle(self, key: str, req: protocol.Request, conn: ConnInfo, nbytes: int, *,
                         keep_if_throttled: bool = True) -> int:
        """The client quota's throttle time for these bytes (0: none); mutes `conn`."""
        quotas = self.client_quotas
        if quotas is None or not quotas.quotas:
            return 0
        throttle = quotas.throttle_ms(key, conn.user, req.client_id, nbytes,
                                      keep_if_throttled=keep_if_throttled)
        if throttle:
            conn.mute(throttle)
            self.metrics.client_throttled.labels(key).inc()
        return throttle

    async def append_replicated(self, p: Partition, records: bytes, timeout_ms: int, *,
                                guards: dict[TopicPartition, Any] | None = None
                                ) -> AppendResult:
        """Append `records` to `p` as its leader with acks=all, as a Produce would (the
        group coordinator's writes to __consumer_offsets; `guards`, a transactional
        one's verification)."""
        if not self.leadership.is_leader(p):
            return AppendResult(errors.NOT_LEADER_OR_FOLLOWER)
        refusal = self._under_min_isr(p)
        if refusal is not None:
            return refusal
        items = [(p, records)]
        results = await self.replicas.append(items, guards)
        if self.replicas.isr is not None:
            await self._await_replication(items, results, timeout_ms)
        return results[0]

    async def write_markers(self, markers: dict[TopicPartition, Marker], timeout_ms: int
                            ) -> dict[TopicPartition, int]:
        """A transaction coordinator's markers for partitions this broker leads, each
        appended with acks=all (Kafka's WriteTxnMarkers): an error code per partition.
        Markers on `__consumer_offsets` settle the transaction's pending offsets."""
        codes: dict[TopicPartition, int] = {}
        items: list[tuple[Partition, Marker]] = []
        for tp, m in markers.items():
            p = self.replicas.get(tp.topic, tp.partition)
            if p is None:
                codes[tp] = _topic_error(tp.topic)
            elif not self.leadership.is_leader(p):
                codes[tp] = errors.NOT_LEADER_OR_FOLLOWER
            elif (refusal := self._under_min_isr(p)) is not None:
                codes[tp] = refusal.error
            else:
                items.append((p, m))
        if items:
            results = await self.replicas.append_markers(items)
            if self.replicas.isr is not None:
                await self._await_replication([(p, b"") for p, _ in items], results,
                                              timeout_ms)
            for (p, m), r in zip(items, results, strict=True):
                codes[p.tp] = r.error
                if r.error == errors.NONE and p.tp.topic == names.OFFSETS_TOPIC and \
                        self.on_offsets_marker is not None:
                    self.on_offsets_marker(p.tp.partition, m.producer_id, m.commit)
        return codes

    def _old_fetch_refusal(self, topic: str, version: int) -> int:
        """The error a consumer's Fetch `version` below v10 gets for each partition of
        `topic` it holds, unread, as Kafka's maybeConvertFetchedData answers it: one below
        v10 cannot take zstd, so a topic the leader writes in zstd answers
        UNSUPPORTED_COMPRESSION_TYPE; one below v4 takes magic 0/1 messages only, which
        message.downconversion.enable=false refuses to make: UNSUPPORTED_VERSION. 0 to
        read."""
        if self._compression_type(topic) == "zstd":
            return errors.UNSUPPORTED_COMPRESSION_TYPE
        if version < 4 and self.topic_configs is not None and \
                not self.topic_configs.values(topic)["message.downconversion.enable"]:
            return errors.UNSUPPORTED_VERSION
        return errors.NONE

    def _compression_type(self, topic: str) -> str:
        """The compression.type that applies to `topic`."""
        if self.topic_configs is not None:
            return str(self.topic_configs.values(topic)["compression.type"])
        return str(self.config["compression.type"])

    def _under_min_isr(self, p: Partition) -> AppendResult | None:
        """acks=all before the append: NOT_ENOUGH_REPLICAS (19) while the ISR is smaller
        than the topic's min.insync.replicas; None to go on."""
        if p.offline:
            return None  # the append answers 56
        if self.replicas.isr is None:  # standalone: the ISR is this broker alone
            isr = 1
            min_isr = (self.topic_configs.min_isr(p.tp.topic) if self.topic_configs
                       else self.config["min.insync.replicas"])
        else:
            st = self.replicas.isr.state(p.tp)
            if st is None:
                return None
            isr, min_isr = len(st.isr), st.min_isr
        if isr >= min_isr:
            return None
        return AppendResult(errors.NOT_ENOUGH_REPLICAS,
                            message=f"{p.tp}: the ISR has {isr} replicas, below "
                                    f"min.insync.replicas={min_isr}")

    async def _await_replication(self, items: list[tuple[Partition, bytes]],
                                 results: list[AppendResult], timeout_ms: int) -> None:
        """acks=all after the append (Kafka's produce purgatory): each partition's result
        stands once the high watermark passes its batch; until then it is re-checked at
        each move of the high watermark, the ISR or leadership. Leadership lost ->
        NOT_LEADER_OR_FOLLOWER (6) (a new epoch of the same leader keeps waiting); the
        ISR below min.insync.replicas -> NOT_ENOUGH_REPLICAS_AFTER_APPEND (20) at once;
        `timeout_ms` passed -> REQUEST_TIMED_OUT (7). Results are replaced in place."""
        isr = self.replicas.isr
        assert isr is not None
        waiting: dict[int, Partition] = {}
        ends: dict[int, int] = {}
        for i, ((p, _), r) in enumerate(zip(items, results, strict=True)):
            if r.error == errors.NONE and r.end_offset >= 0:
                waiting[i], ends[i] = p, r.end_offset

        def settled(i: int) -> bool:
            p = waiting[i]
            st = isr.state(p.tp)
            lg = p.log
            if st is None or lg is None or p.deleted:
                results[i] = AppendResult(errors.NOT_LEADER_OR_FOLLOWER,
                                          message=f"{p.tp}: leadership moved before the "
                                                  "write was replicated")
            elif lg.high_watermark >= ends[i]:
                pass  # replicated: the append's result stands
            elif st.under_min_isr:
                results[i] = AppendResult(
                    errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                    message=f"{p.tp}: written to the leader, but the ISR {list(st.isr)} fell "
                            f"below min.insync.replicas={st.min_isr}")
            else:
                return False
            return True

        for i in await delayed(waiting, settled, timeout_ms, self.stopping):
            results[i] = AppendResult(errors.REQUEST_TIMED_OUT,
                                      message=f"{waiting[i].tp}: not replicated to the ISR "
                                              f"within {timeout_ms} ms")

    # ---- Fetch ----

    async def fetch(self, req: protocol.Request, conn: ConnInfo) -> Any:
        body = req.body
        if req.version >= 7 and body.session_id != 0:
            # Fetch sessions are not kept: every answer carries session_id 0, so a client
            # only sends a nonzero id by mistake; Kafka answers this code then.
            return FetchAnswer(error_code=errors.FETCH_SESSION_ID_NOT_FOUND)
        # The broker's fetch.max.bytes bounds every answer, a follower's too (Kafka's
        # handleFetchRequest); a first batch over it still comes whole (KIP-74).
        max_bytes = min(body.max_bytes if req.version >= 3 else 2**31 - 1,
                        self.config["fetch.max.bytes"])
        if body.replica_id < 0 and self.client_quotas is not None and self.client_quotas.quotas:
            # An answer the consumer's quota could never let through is cut to what it can.
            allowed = self.client_quotas.window_allowance(CONSUMER_BYTE_RATE, conn.user,
                                                          req.client_id)
            if allowed is not None:
                max_bytes = max(1, min(max_bytes, allowed))
        # More than an answer may carry is never waited for (Kafka's fetchMinBytes).
        min_bytes = max(1, min(body.min_bytes, max_bytes))
        # A follower (replica_id >= 0) reads to the log end; a consumer to the HW.
        replica_id = body.replica_id if body.replica_id >= 0 else -1
        read_committed = req.version >= 4 and body.isolation_level == 1 and replica_id < 0
        # A consumer's Fetch v11+ may be served by a follower, and may be sent to one in
        # its rack (KIP-392, daemon.replica.selector).
        any_replica = req.version >= 11 and replica_id < 0
        client_rack = body.rack_id if any_replica and self.replicas.rack_aware_reads else ""
        entries: list[tuple[str, int, int, int, Partition | None]] = []
        fenced: dict[tuple[str, int], int] = {}  # partitions answered an error unread
        redirected: dict[tuple[str, int], FetchPartition] = {}  # sent to another replica
        items: list[ReadSpec] = []
        # What an old consumer's Fetch is refused per topic (_old_fetch_refusal).
        refused = {t.topic: self._old_fetch_refusal(t.topic, req.version) for t in body.topics
                   } if req.version < 10 and replica_id < 0 else {}
        # Kafka's ACL checks: a follower's fetch needs ClusterAction, a consumer's Read on
        # each topic.
        replica_allowed = replica_id < 0 or conn.allowed(Operation.CLUSTER_ACTION,
                                                         ResourceType.CLUSTER)
        for t in body.topics:
            readable = replica_allowed and (
                replica_id >= 0 or conn.allowed(Operation.READ, ResourceType.TOPIC, t.topic))
            for fp in t.partitions:
                p = self.replicas.get(t.topic, fp.partition)
                entries.append((t.topic, fp.partition, fp.fetch_offset, fp.partition_max_bytes,
                                p))
                if not readable:
                    fenced[(t.topic, fp.partition)] = errors.TOPIC_AUTHORIZATION_FAILED
                    continue
                if p is None:
                    continue
                if refused.get(t.topic):
                    fenced[(t.topic, fp.partition)] = refused[t.topic]
                    continue
                epoch = fp.current_leader_epoch if req.version >= 9 else -1
                code = self._epoch_fence(p, epoch)
                if code:
                    fenced[(t.topic, fp.partition)] = code
                    continue
                if client_rack and p.log is not None and self.leadership.is_leader(p):
                    preferred = self.replicas.preferred_read_replica(p, client_rack,
                                                                     fp.fetch_offset)
                    if preferred is not None:  # no records: where to read them instead
                        redirected[(t.topic, fp.partition)] = FetchPartition(
                            fp.partition, errors.NONE, p.high_watermark, p.high_watermark,
                            p.log.log_start_offset, preferred_read_replica=preferred)
                        continue
                # The epoch is checked again at each read of a long poll (ReplicaManager).
                items.append(ReadSpec(p, fp.fetch_offset, fp.partition_max_bytes,
                                      fp.last_fetched_epoch if req.version >= 12 else -1,
                                      replica_id, epoch, read_committed,
                                      any_replica=any_replica,
                                      log_start_offset=fp.log_start_offset))
        # A partition in error answers at once, as one whose read fails (Kafka's
        # errorReadingData): a follower asking a leader that has not applied its
        # LeaderAndIsr yet learns it now and asks again, not after max_wait_ms.
        # So does one sent to another replica (Kafka's hasPreferredReadReplica).
        errored = bool(fenced) or bool(redirected) or any(e[4] is None for e in entries)
        deadline = time.monotonic() + max(body.max_wait_ms, 0) / 1000
        while True:
            results = await self.replicas.read(items, max_bytes) if items else []
            total = sum(len(r.records) for r in results)
            if (total >= min_bytes or errored or any(r.error for r in results)
                    or self.stopping.is_set()):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for r in results:  # read again after the wait: these are not sent
                r.release()
            await self._wait_for_data([spec.partition for spec in items], remaining)
        out: dict[str, list[FetchPartition]] = {}
        it = iter(results)
        sent = 0
        # A follower's bytes of partitions the leader throttles count against its quota,
        # held back or not (Kafka's sizeOfThrottledPartitions).
        quota = self.replicas.leader_quota if replica_id >= 0 else None
        throttled_bytes = 0
        for topic, index, fetch_offset, _pmax, p in entries:
            code = fenced.get((topic, index)) or (_topic_error(topic) if p is None else 0)
            if code:
                out.setdefault(topic, []).append(FetchPartition(index, code))
                continue
            elsewhere = redirected.get((topic, index))
            if elsewhere is not None:
                out.setdefault(topic, []).append(elsewhere)
                continue
            r = next(it)
            records = r.records
            if sent and sent + len(records) > max_bytes:
                r.release()  # past the response budget: the client asks again
                records = b""
            sent += len(records)
            if records and req.version < 4 and replica_id < 0:
                # An old consumer reads magic 0/1 messages (Kafka's down-conversion); the
                # first batch in zstd, which they cannot hold, answers an error instead.
                # Converted off the event loop: a megabyte of compressed batches takes a
                # tenth of a second or more, which every other connection would wait out.
                raw = records.to_bytes() if isinstance(records, SplicedRecords) else records
                r.release()
                try:
                    records = await asyncio.to_thread(
                        batches_to_legacy, raw, 1 if req.version >= 2 else 0, fetch_offset)
                except UnsupportedCodecError:
                    out.setdefault(topic, []).append(
                        FetchPartition(index, errors.UNSUPPORTED_COMPRESSION_TYPE))
                    continue
            if records and replica_id >= 0:
                self.metrics.replication_bytes_out.inc(len(records))
                if quota is not None and p is not None and quota.is_throttled(p.tp):
                    throttled_bytes += len(records)
            elif records:
                self.metrics.bytes_out.labels(topic).inc(len(records))
            if r.error:
                self.metrics.failed_fetch.labels(errors.enum_name(r.error)).inc()
                self.metrics.errors.labels("Fetch", errors.enum_name(r.error)).inc()
            out.setdefault(topic, []).append(FetchPartition(
                index, r.error, r.high_watermark,
                r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark,
                r.log_start_offset, records, r.diverging_epoch,
                r.aborted_transactions if read_committed and records else None))
        if throttled_bytes:
            assert quota is not None
            quota.record(throttled_bytes)
        answer = FetchAnswer(topics=list(out.items()))
        if replica_id < 0 and sent:
            throttle = self._client_throttle(CONSUMER_BYTE_RATE, req, conn, sent,
                                             keep_if_throttled=False)
            if throttle:
                # Over its quota: answered empty, the bytes not counted (Kafka's
                # getThrottledResponse); the client asks again after the throttle.
                answer.release()
                return FetchAnswer(throttle_time_ms=throttle)
        return answer

    def _epoch_fence(self, p: Partition, current_leader_epoch: int) -> int:
        """Kafka's leader-epoch fencing of Fetch and OffsetForLeaderEpoch: a client or
        follower at an older epoch than ours gets 74, one ahead of us 75; -1 skips it."""
        if current_leader_epoch < 0:
            return errors.NONE
        ours = self.leadership.fencing_epoch(p)
        if current_leader_epoch < ours:
            return errors.FENCED_LEADER_EPOCH
        if current_leader_epoch > ours:
            return errors.UNKNOWN_LEADER_EPOCH
        return errors.NONE

    # ---- OffsetForLeaderEpoch ----

    async def offset_for_leader_epoch(self, req: protocol.Request, conn: ConnInfo) -> Any:
        """Where each asked leader epoch ends here (the start of the next epoch, or the log
        end for the latest), for followers and clients checking for truncation."""
        R = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
        E = R.EpochEndOffset
        slots: list[tuple[str, int, int]] = []  # topic, partition, code (0: look it up)
        items: list[tuple[Partition, int]] = []
        # A follower's ask needs ClusterAction, else Describe on each topic (Kafka's).
        replica = conn.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, log_denied=False)
        for t in req.body.topics:
            described = replica or conn.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.topic)
            for q in t.partitions:
                p = self.replicas.get(t.topic, q.partition)
                if not described:
                    code = errors.TOPIC_AUTHORIZATION_FAILED
                elif p is None:
                    code = _topic_error(t.topic)
                elif p.offline:
                    code = errors.KAFKA_STORAGE_ERROR
                elif not self.leadership.is_leader(p):
                    code = errors.NOT_LEADER_OR_FOLLOWER
                else:
                    code = self._epoch_fence(p, q.current_leader_epoch)
                slots.append((t.topic, q.partition, code))
                if not code:
                    assert p is not None
                    items.append((p, q.leader_epoch))
        found = iter(await self.replicas.end_offsets_for(items) if items else [])
        out: dict[str, list[Any]] = {}
        for topic, index, code in slots:
            epoch, end = -1, -1
            if not code:
                code, epoch, end = next(found)
            out.setdefault(topic, []).append(E(error_code=code, partition=index,
                                               leader_epoch=epoch, end_offset=end))
        return OffsetForLeaderEpochResponse(
            throttle_time_ms=0, topics=[R(topic=t, partitions=ps) for t, ps in out.items()])

    async def _wait_for_data(self, parts: list[Partition], timeout: float) -> None:
        """Sleep until an append to one of `parts`, the timeout, or shutdown."""
        await wait_for_change(parts, timeout, self.stopping)

    # ---- ListOffsets ----

    async def list_offsets(self, req: protocol.Request, conn: ConnInfo) -> Any:
        body = req.body
        R = ListOffsetsResponse.ListOffsetsTopicResponse
        P = R.ListOffsetsPartitionResponse
        # Answered by the leader only, at the leader epoch the asker names (Kafka's
        # fetchOnlyFromLeader): a follower's high watermark and log start lag the leader's,
        # so a consumer with stale metadata is sent to the leader (6) rather than told a
        # stale end. Only Kafka's debugging replica id (-2) may ask any replica. A replica's
        # ask (a follower whose log dir is full asks its leader's log start:
        # daemon.replica.fetcher.LogStartFollower) needs ClusterAction, else Describe on
        # each topic.
        only_leader = body.replica_id != DEBUGGING_REPLICA_ID
        replica_allowed = body.replica_id >= 0 and conn.allowed(
            Operation.CLUSTER_ACTION, ResourceType.CLUSTER, log_denied=False)
        entries = []
        denied: set[str] = set()
        fenced: dict[tuple[str, int], int] = {}
        for t in body.topics:
            if not replica_allowed and not conn.allowed(Operation.DESCRIBE, ResourceType.TOPIC,
                                                        t.name):
                denied.add(t.name)
            for lp in t.partitions:
                p = None if t.name in denied else self.replicas.get(t.name, lp.partition_index)
                if only_leader and p is not None:
                    code = (self._epoch_fence(p, lp.current_leader_epoch if req.version >= 4
                                              else -1)
                            if self.leadership.is_leader(p) else errors.NOT_LEADER_OR_FOLLOWER)
                    if code:
                        fenced[(t.name, lp.partition_index)] = code
                        p = None
                entries.append((t.name, lp.partition_index, lp.timestamp, p))
        if req.version == 0:  # a list of offsets per partition, found by segment times
            return await self._list_offsets_v0(body, entries, denied, fenced)
        items = [(p, ts) for _, _, ts, p in entries if p is not None]
        read_committed = req.version >= 2 and body.isolation_level == 1
        results = iter(await self.replicas.list_offsets(
            items, read_committed=read_committed,
            from_client=body.replica_id == CONSUMER_REPLICA_ID) if items else [])
        out: dict[str, list[Any]] = {}
        for topic, index, _ts, p in entries:
            if topic in denied:
                err, ts, off, epoch = errors.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1
            elif (topic, index) in fenced:
                err, ts, off, epoch = fenced[(topic, index)], -1, -1, -1
            elif p is None:
                err, ts, off, epoch = _topic_error(topic), -1, -1, -1
            else:
                err, ts, off, epoch = next(results)
            if err:
                self.metrics.errors.labels("ListOffsets", errors.enum_name(err)).inc()
            out.setdefault(topic, []).append(P(partition_index=index, error_code=err,
                                               timestamp=ts, offset=off, leader_epoch=epoch))
        return ListOffsetsResponse(throttle_time_ms=0, topics=[
            R(name=t, partitions=ps) for t, ps in out.items()])

    async def _list_offsets_v0(self, body: Any, entries: list[tuple[str, int, int, Any]],
                               denied: set[str], fenced: dict[tuple[str, int], int]) -> Any:
        """ListOffsets v0 (Kafka's handleListOffsetRequestV0, still served by Kafka 3.x):
        up to MaxNumOffsets offsets per partition (daemon.replica.manager's
        _legacy_list_offsets); a consumer's stop at the high watermark."""
        R = ListOffsetsResponse.ListOffsetsTopicResponse
        P = R.ListOffsetsPartitionResponse
        wanted = {(t.name, lp.partition_index): lp.max_num_offsets
                  for t in body.topics for lp in t.partitions}
        items = [(p, (ts, wanted[(topic, index)])) for topic, index, ts, p in entries
                 if p is not None]
        results = iter(await self.replicas.legacy_list_offsets(
            items, from_consumer=body.replica_id == -1) if items else [])
        out: dict[str, list[Any]] = {}
        for topic, index, _ts, p in entries:
            if topic in denied:
                err, offsets = errors.TOPIC_AUTHORIZATION_FAILED, []
            elif (topic, index) in fenced:
                err, offsets = fenced[(topic, index)], []
            elif p is None:
                err, offsets = _topic_error(topic), []
            else:
                err, offsets = next(results)
            if err:
                self.metrics.errors.labels("ListOffsets", errors.enum_name(err)).inc()
            out.setdefault(topic, []).append(P(partition_index=index, error_code=err,
                                               old_style_offsets=offsets))
        return ListOffsetsResponse(throttle_time_ms=0, topics=[
            R(name=t, partitions=ps) for t, ps in out.items()])

    # ---- Metadata ----

    async def metadata(self, req: protocol.Request, conn: ConnInfo) -> Any:
        body = req.body
        requested = body.topics
        # What a topic asked for costs is its own partitions', whatever else is held:
        # clients ask again and again while leaders move.
        replicas = self.replicas
        R = TopicMetadata
        out: list[TopicMetadata] = []
        asked_ids = [t.topic_id for t in requested or ()
                     if req.version >= 10 and t.topic_id not in (None, _ZERO_UUID)]
        if 10 <= req.version < 12 and (asked_ids or any(t.name is None
                                                        for t in requested or ())):
            return self._metadata_refused(requested)
        if requested is None or (req.version == 0 and not requested):
            # Null (v1+) or empty (v0): all topics, those it may not describe left out.
            wanted = [t for t in replicas.metadata_topic_names() if conn.allowed(
                Operation.DESCRIBE, ResourceType.TOPIC, t, log_denied=False)]
        else:
            wanted = []
            if asked_ids:
                # Topic ids (KIP-516), asked by from v12 (Kafka's handleTopicMetadataRequest:
                # ids asked for, the names are not looked at).
                names_of = {i: t for t, i in replicas.topic_ids().items()}
                asked = []
                for i in dict.fromkeys(asked_ids):
                    if i in names_of:
                        asked.append(names_of[i])
                    else:
                        out.append(R(errors.UNKNOWN_TOPIC_ID, None, topic_id=i))
            else:
                asked = [t.name for t in requested if t.name is not None]
            for name in asked:
                if conn.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
                    wanted.append(name)
                else:  # its existence is not disclosed (an id is not secret, as Kafka)
                    out.append(R(errors.TOPIC_AUTHORIZATION_FAILED,
                                 None if asked_ids else name,
                                 topic_id=replicas.topic_id(name) if asked_ids else None))
        if asked_ids:
            allow_auto = False  # a topic named by its id exists or is unknown
        else:
            allow_auto = body.allow_auto_topic_creation if req.version >= 4 else True
        for name in wanted:
            parts = replicas.metadata_topic(name)
            if parts is None and allow_auto and self.config["auto.create.topics.enable"] \
                    and _topic_error(name) == errors.UNKNOWN_TOPIC_OR_PARTITION:
                if not (conn.allowed(Operation.CREATE, ResourceType.CLUSTER, log_denied=False)
                        or conn.allowed(Operation.CREATE, ResourceType.TOPIC, name)):
                    out.append(R(errors.TOPIC_AUTHORIZATION_FAILED, name))
                    continue
                refused = await self._auto_create(name, conn)
                if refused:
                    # Kafka passes the creation's error on (17 for a name that collides,
                    # 38 for too few brokers...): not retriable, so the client stops.
                    out.append(R(refused, name, is_internal=names.is_internal(name)))
                    continue
                if refused is not None:
                    parts = replicas.metadata_topic(name)
                    if parts is None:  # cluster: the controller is electing leaders
                        out.append(R(errors.LEADER_NOT_AVAILABLE, name,
                                     is_internal=names.is_internal(name)))
                        continue
            if parts is None:
                out.append(R(_topic_error(name), name, is_internal=names.is_internal(name)))
                continue
            # Topic ids (KIP-516) are in answers from v10.
            out.append(R(errors.NONE, name, [_partition_metadata(i, s) for i, s in parts],
                         is_internal=names.is_internal(name),
                         topic_id=replicas.topic_id(name) if req.version >= 10 else None))
        me = self.advertised.get(conn.listener) if self.advertised else \
            (conn.local_host, conn.local_port)
        rows = self.leadership.broker_rows(me, conn.listener)
        _unreachable_leaders(out, {b for b, *_ in rows}, set(self.leadership.live_brokers()))
        cluster_ops = None
        if req.version >= 8:
            # What the client may do (KIP-430), when it asks: a bit per operation.
            if body.include_topic_authorized_operations:
                for t in out:
                    if t.error_code != errors.TOPIC_AUTHORIZATION_FAILED:
                        t.authorized_operations = conn.authorized_operations(
                            ResourceType.TOPIC, t.name)
            if req.version <= 10 and body.include_cluster_authorized_operations:
                cluster_ops = conn.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME) \
                    if conn.allowed(Operation.DESCRIBE, ResourceType.CLUSTER) else set()
        return MetadataAnswer([BrokerMetadata(*row) for row in rows], out,
                              self.storage.cluster_id, self.leadership.controller_id,
                              cluster_authorized_operations=cluster_ops)

    @staticmethod
    def _metadata_refused(requested: list[Any]) -> Any:
        """Metadata v10-11 naming a topic by id, or without a name: Kafka's broker
        throws InvalidRequestException ("Topic IDs are not supported in requests for
        version 10"), answered as MetadataRequest.getErrorResponse: each topic asked
        for INVALID_REQUEST (a null name as ""), and no brokers or controller."""
        return MetadataAnswer([], [TopicMetadata(errors.INVALID_REQUEST, t.name or "",
                                                 topic_id=t.topic_id) for t in requested])

    # ---- DescribeCluster ----

    async def describe_cluster(self, req: protocol.Request, conn: ConnInfo) -> Any:
        """The live brokers (on the listener asked), the controller and the cluster id,
        as Metadata gives them without topics (KIP-700, what admin clients' describe
        cluster sends first). A broker describes brokers only: asked for controllers
        (v1 endpoint type 2, KRaft's), MISMATCHED_ENDPOINT_TYPE, as Kafka's broker."""
        body = req.body
        endpoint_type = body.endpoint_type if req.version >= 1 else BROKER_ENDPOINT
        extra = {"endpoint_type": endpoint_type} if req.version >= 1 else {}
        B = DescribeClusterResponse.DescribeClusterBroker
        if endpoint_type != BROKER_ENDPOINT:
            return DescribeClusterResponse(
                throttle_time_ms=0, error_code=errors.MISMATCHED_ENDPOINT_TYPE,
                error_message="The request was sent to an endpoint of type BROKER, but we "
                              "wanted an endpoint of type CONTROLLER",
                cluster_id=self.storage.cluster_id or "", controller_id=-1, brokers=[],
                **extra)
        if body.include_cluster_authorized_operations:  # else its default: not asked
            extra["authorized_operations"] = conn.authorized_operations(
                ResourceType.CLUSTER, CLUSTER_NAME) \
                if conn.allowed(Operation.DESCRIBE, ResourceType.CLUSTER) else set()
        me = self.advertised.get(conn.listener) if self.advertised else \
            (conn.local_host, conn.local_port)
        rows = self.leadership.broker_rows(me, conn.listener)
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=errors.NONE, error_message=None,
            cluster_id=self.storage.cluster_id or "",
            controller_id=self.leadership.controller_id,
            brokers=[B(broker_id=b, host=h, port=pt, rack=rack) for b, h, pt, rack in rows],
            **extra)

    async def _auto_create(self, name: str, conn: ConnInfo) -> int | None:
        """Create `name` for a Metadata request (auto.create.topics.enable): NONE once it
        exists or is on its way, the error code the creation was refused with (its name
        collides, say), or None when this broker cannot create it (the controller's own
        broker did not answer in time). In a cluster a broker that is not the controller
        writes the topic's znodes itself, as a ZooKeeper-mode Kafka broker does."""
        if self.controller is not None:
            if not self.controller.is_active:
                if self.create_in_zookeeper is None:
                    return None
                return await self.create_in_zookeeper(name)
            fut = self.controller.create_topics([TopicSpec(name)])
            try:
                res = (await asyncio.wait_for(asyncio.wrap_future(fut), 10.0))[name]
            except (TimeoutError, asyncio.CancelledError):
                return None
            if res.error_code not in (errors.NONE, errors.TOPIC_ALREADY_EXISTS):
                log.info("auto-creating %s for %s refused: %s", name, conn.peer,
                         res.error_message)
                return res.error_code
            await self._wait_for_leaders([name], time.monotonic() + 5.0)
            log.info("auto-created topic %s for %s", name, conn.peer)
            return errors.NONE
        try:
            await self.topic_admin.create_topic(name, -1, -1)
            log.info("auto-created topic %s for %s", name, conn.peer)
        except TopicError as err:
            if err.code != errors.TOPIC_ALREADY_EXISTS:
                log.info("auto-creating %s for %s refused: %s", name, conn.peer, err)
                return err.code
        return errors.NONE

    async def _wait_for_leaders(self, topics: list[str], deadline: float) -> set[str]:
        """Wait until this broker's metadata cache shows a leader for every partition of
        each topic (Kafka parks CreateTopics until then); returns those still waiting."""
        assert self.control is not None
        waiting = set(topics)
        while waiting and not self.stopping.is_set():
            waiting = {t for t in waiting if not self.control.cache.has_leaders(t)}
            if not waiting or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        return waiting

    async def _wait_for_removal(self, topics: list[str], deadline: float) -> set[str]:
        """Wait until this broker's metadata cache no longer shows each topic (Kafka's
        DelayedDeleteTopics); returns those it still shows."""
        assert self.control is not None
        waiting = set(topics)
        while waiting and not self.stopping.is_set():
            waiting = {t for t in waiting if t in self.control.cache.partitions}
            if not waiting or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        return waiting

    # ---- CreateTopics / DeleteTopics ----

    async def create_topics(self, req: protocol.Request, conn: ConnInfo) -> Any:
        """Create on the Create ACL of the cluster or of each topic (Kafka's check); a
        topic without it is answered TOPIC_AUTHORIZATION_FAILED, the others created."""
        if conn.allowed(Operation.CREATE, ResourceType.CLUSTER, log_denied=False):
            return await self._create_topics(req)
        body = req.body
        denied = [t.name for t in body.topics
                  if not conn.allowed(Operation.CREATE, ResourceType.TOPIC, t.name)]
        body.topics = [t for t in body.topics if t.name not in denied]
        answer = await self._create_topics(req)
        R = CreateTopicsResponse.CreatableTopicResult
        answer.topics += [R(name=n, error_code=errors.TOPIC_AUTHORIZATION_FAILED,
                            error_message="Authorization failed.", num_partitions=-1,
                            replication_factor=-1, configs=[]) for n in denied]
        return answer

    async def _create_topics(self, req: protocol.Request) -> Any:
        body = req.body
        if self.controller is not None:
            return await self._create_topics_cluster(req)
        R = CreateTopicsResponse.CreatableTopicResult
        out = []
        seen: set[str] = set()
        for t in body.topics:
            code, message = errors.NONE, None
            try:
                if t.name in seen:
                    raise TopicError(errors.INVALID_REQUEST, f"{t.name} appears twice in the request")
                seen.add(t.name)
                partitions, rf = t.num_partitions, t.replication_factor
                if t.assignments:
                    if partitions != -1 or rf != -1:
                        raise TopicError(errors.INVALID_REQUEST, f"{t.name}: both assignments and "
                                         "partition count/replication factor given")
                    indexes = sorted(a.partition_index for a in t.assignments)
                    if indexes != list(range(len(indexes))) or any(
                            list(a.broker_ids) != [self.leadership.broker_id]
                            for a in t.assignments):
                        raise TopicError(errors.INVALID_REPLICA_ASSIGNMENT,
                                         f"{t.name}: assignments must name partitions 0..n-1 "
                                         f"each on broker {self.leadership.broker_id} only")
                    partitions, rf = len(indexes), 1
                await self.topic_admin.create_topic(
                    t.name, partitions, rf, validate_only=body.validate_only,
                    configs={c.name: c.value for c in t.configs or []})
            except TopicError as err:
                code, message = err.code, str(err)
                self.metrics.errors.labels("CreateTopics", errors.enum_name(code)).inc()
            created = self.replicas.topic(t.name)
            out.append(R(name=t.name, error_code=code, error_message=message,
                         num_partitions=len(created) if created else -1,
                         replication_factor=1 if created else -1, configs=[]))
        return CreateTopicsResponse(throttle_time_ms=0, topics=out)

    async def delete_topics(self, req: protocol.Request, conn: ConnInfo) -> Any:
        """Delete on each topic's Delete ACL; one without it is answered
        TOPIC_AUTHORIZATION_FAILED, the others deleted."""
        body = req.body
        denied = [n for n in body.topic_names
                  if not conn.allowed(Operation.DELETE, ResourceType.TOPIC, n)]
        if not denied:
            return await self._delete_topics(req)
        body.topic_names = [n for n in body.topic_names if n not in denied]
        R = DeleteTopicsResponse.DeletableTopicResult
        answer = await self._delete_topics(req) if body.topic_names else \
            DeleteTopicsResponse(throttle_time_ms=0, responses=[])
        answer.responses += [R(name=n, error_code=errors.TOPIC_AUTHORIZATION_FAILED,
                               error_message="Authorization failed.") for n in denied]
        return answer

    async def _delete_topics(self, req: protocol.Request) -> Any:
        R = DeleteTopicsResponse.DeletableTopicResult
        if not self.config["delete.topic.enable"]:
            # Kafka's broker refuses the whole request, whichever broker is asked.
            code = (errors.TOPIC_DELETION_DISABLED if req.version >= 3
                    else errors.INVALID_REQUEST)
            self.metrics.errors.labels("DeleteTopics", errors.enum_name(code)).inc()
            return DeleteTopicsResponse(throttle_time_ms=0, responses=[
                R(name=name, error_code=code, error_message="Topic deletion is disabled.")
                for name in req.body.topic_names])
        if self.controller is not None:
            return await self._delete_topics_cluster(req)
        out = []
        for name in req.body.topic_names:
            code, message = errors.NONE, None
            try:
                names.validate_topic(name)
                refuse_internal(name, "delete")
                await self.topic_admin.delete_topic(name)
            except InvalidTopicError:
                code = errors.INVALID_TOPIC_EXCEPTION
            except TopicError as err:
                code, message = err.code, str(err)
            if code:
                self.metrics.errors.labels("DeleteTopics", errors.enum_name(code)).inc()
            out.append(R(name=name, error_code=code, error_message=message))
        return DeleteTopicsResponse(throttle_time_ms=0, responses=out)

    async def _create_topics_cluster(self, req: protocol.Request) -> Any:
        """Cluster mode: only the active controller creates (others answer 41); the
        answer is parked until the topic's leaders are in this broker's metadata cache,
        or `timeout_ms` (7)."""
        assert self.controller is not None
        body = req.body
        R = CreateTopicsResponse.CreatableTopicResult
        names_ = [t.name for t in body.topics]
        if not self.controller.is_active:
            return CreateTopicsResponse(throttle_time_ms=0, topics=[
                R(name=n, error_code=errors.NOT_CONTROLLER,
                  error_message="this broker is not the controller", num_partitions=-1,
                  replication_factor=-1, configs=[]) for n in names_])
        specs = [TopicSpec(
            t.name, t.num_partitions, t.replication_factor,
            assignments={a.partition_index: list(a.broker_ids) for a in t.assignments} or None,
            configs={c.name: c.value for c in t.configs or []}) for t in body.topics]
        deadline = time.monotonic() + max(body.timeout_ms, 0) / 1000
        fut = self.controller.create_topics(specs, validate_only=body.validate_only)
        try:
            results = await asyncio.wait_for(asyncio.wrap_future(fut),
                                             max(deadline - time.monotonic(), 1.0))
        except TimeoutError:
            results = {}
        created = [n for n, r in results.items() if r.error_code == errors.NONE]
        late = set() if body.validate_only else await self._wait_for_leaders(created, deadline)
        out = []
        for n in names_:
            r = results.get(n)
            if r is None or n in late:
                code, msg = errors.REQUEST_TIMED_OUT, f"{n}: not created within {body.timeout_ms} ms"
            else:
                code, msg = r.error_code, r.error_message
            if code:
                self.metrics.errors.labels("CreateTopics", errors.enum_name(code)).inc()
            out.append(R(name=n, error_code=code, error_message=msg if code else None,
                         num_partitions=r.num_partitions if r else -1,
                         replication_factor=r.replication_factor if r else -1, configs=[]))
        return CreateTopicsResponse(throttle_time_ms=0, topics=out)

    async def _delete_topics_cluster(self, req: protocol.Request) -> Any:
        """Cluster mode: only the active controller deletes (others answer 41). As Kafka's
        KafkaApis and DelayedDeleteTopics: a topic this broker's metadata cache does not
        show answers 3; the others are marked for deletion and the answer is parked until
        the cache no longer shows them, or `timeout_ms` (7; 0 or less: not parked). The
        controller may keep the deletion queued after that (a replica on a broker that
        is down), and completes it when that broker or dir returns."""
        assert self.controller is not None
        R = DeleteTopicsResponse.DeletableTopicResult
        names_ = list(req.body.topic_names)
        if not self.controller.is_active:
            return DeleteTopicsResponse(throttle_time_ms=0, responses=[
                R(name=n, error_code=errors.NOT_CONTROLLER) for n in names_])
        refused: dict[str, TopicError] = {}
        for n in names_:
            try:
                refuse_internal(n, "delete")
            except TopicError as err:
                refused[n] = err
        deadline = time.monotonic() + max(req.body.timeout_ms, 0) / 1000
        assert self.control is not None
        results = {n: errors.UNKNOWN_TOPIC_OR_PARTITION for n in names_
                   if n not in refused and n not in self.control.cache.partitions}
        wanted = [n for n in names_ if n not in refused and n not in results]
        if wanted:
            fut = self.controller.delete_topics(wanted)
            try:
                # Kafka marks synchronously, whatever the timeout: at least 1 s here.
                results.update(await asyncio.wait_for(asyncio.wrap_future(fut),
                                                      max(deadline - time.monotonic(), 1.0)))
            except TimeoutError:
                pass
        late = set() if req.body.timeout_ms <= 0 else await self._wait_for_removal(
            [n for n, c in results.items() if c == errors.NONE], deadline)
        out = []
        for n in names_:
            code = results.get(n, errors.REQUEST_TIMED_OUT)
            if n in late:
                code = errors.REQUEST_TIMED_OUT
            if n in refused:
                code = refused[n].code
            if code:
                self.metrics.errors.labels("DeleteTopics", errors.enum_name(code)).inc()
            out.append(R(name=n, error_code=code,
                         error_message=str(refused[n]) if n in refused else None))
        return DeleteTopicsResponse(throttle_time_ms=0, responses=out)

    # ---- LeaderAndIsr / StopReplica / UpdateMetadata (from the controller) ----

    async def leader_and_isr(self, req: protocol.Request, conn: ConnInfo) -> Any:
        if not conn.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return LeaderAndIsrResponse(version=req.version, error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                                        **({"topics": []} if req.version >= 5
                                           else {"partition_errors": []}))
        if self.control is None:
            return LeaderAndIsrResponse(version=req.version, error_code=errors.INVALID_REQUEST,
                                        **({"topics": []} if req.version >= 5
                                           else {"partition_errors": []}))
        return await self.control.leader_and_isr(req.body, req.version)

    async def stop_replica(self, req: protocol.Request, conn: ConnInfo) -> Any:
        if not conn.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return StopReplicaResponse(version=req.version,
                                       error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                                       partition_errors=[])
        if self.control is None:
            return StopReplicaResponse(version=req.version, error_code=errors.INVALID_REQUEST,
                                       partition_errors=[])
        return await self.control.stop_replica(req.body, req.version)

    async def update_metadata(self, req: protocol.Request, conn: ConnInfo) -> Any:
        if not conn.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return UpdateMetadataResponse(version=req.version,
                                          error_code=errors.CLUSTER_AUTHORIZATION_FAILED)
        if self.control is None:
            return UpdateMetadataResponse(version=req.version, error_code=errors.INVALID_REQUEST)
        return await self.control.update_metadata(req.body, req.version)

    async def controlled_shutdown(self, req: protocol.Request, conn: ConnInfo) -> Any:
        """A broker about to stop asks the controller to move its leadership away first
        (daemon.controller.Controller.controlled_shutdown); NOT_CONTROLLER (41) from a
        broker that is not the controller, and from a standalone one."""
        body = req.body
        if not conn.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return ControlledShutdownResponse(
                version=req.version, error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                remaining_partitions=[])
        if self.controller is None:
            return ControlledShutdownResponse(version=req.version, error_code=errors.NOT_CONTROLLER,
                                              remaining_partitions=[])
        epoch = body.broker_epoch if req.version >= 2 else -1
        code, remaining = await asyncio.wrap_future(
            self.controller.controlled_shutdown(body.broker_id, epoch))
        R = ControlledShutdownResponse.RemainingPartition
        return ControlledShutdownResponse(
            version=req.version, error_code=code,
            remaining_partitions=[R(topic_name=tp.topic, partition_index=tp.partition)
                                  for tp in remaining])

    # ---- AlterReplicaLogDirs ----

    async def alter_replica_log_dirs(self, req: protocol.Request, conn: ConnInfo) -> Any:
        """Move replicas between this broker's log dirs (daemon.replica.moves): the answer
        says each move started (or why not); DescribeLogDirs shows its progress."""
        codes: dict[tuple[str, int], int] = {}
        allowed = conn.allowed(Operation.ALTER, ResourceType.CLUSTER)
        for d in req.body.dirs:
            for t in d.topics:
                if not allowed:
                    codes.update({(t.name, i): errors.CLUSTER_AUTHORIZATION_FAILED
                                  for i in t.partitions})
                    continue
                tps = []
                for i in t.partitions:
                    try:
                        tps.append(TopicPartition(names.validate_topic(t.name), i))
                    except InvalidTopicError:
                        codes[(t.name, i)] = errors.INVALID_TOPIC_EXCEPTION
                if self.moves is None:
                    codes.update({(tp.topic, tp.partition): errors.UNKNOWN_SERVER_ERROR
                                  for tp in tps})
                    continue
                for tp, (code, _) in self.moves.alter(d.path, tps).items():
                    codes[(tp.topic, tp.partition)] = code
        R = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
        P = R.AlterReplicaLogDirPartitionResult
        by_topic: dict[str, list[Any]] = {}
        for (topic, i), code in codes.items():
            by_topic.setdefault(topic, []).append(P(partition_index=i, error_code=code))
        return AlterReplicaLogDirsResponse(
            throttle_time_ms=0,
            results=[R(topic_name=t, partitions=ps) for t, ps in by_topic.items()])

    # ---- DescribeLogDirs ----

    async def describe_log_dirs(self, req: protocol.Request, conn: ConnInfo) -> Any:
        if not conn.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
            # Kafka answers no dirs (v3+ also the error).
            return DescribeLogDirsResponse(throttle_time_ms=0,
                                           error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                                           results=[])
        wanted: dict[str, set[int]] | None = None
        if req.body.topics is not None:
            wanted = {}
            for t in req.body.topics:
                wanted.setdefault(t.topic, set()).update(t.partitions)
        R = DescribeLogDirsResponse.DescribeLogDirsResult
        T = R.DescribeLogDirsTopic
        P = T.DescribeLogDirsPartition
        results = []
        for entry in await self.storage.describe_dirs():
            topics: dict[str, list[Any]] = {}
            replicas = [(tp, size, lag, False) for tp, (size, lag) in entry["partitions"].items()]
            # A replica being moved here: its copy, with how far it is behind (KIP-113).
            replicas += [(m.partition.tp, m.future.size_bytes, m.lag, True)
                         for m in (self.moves.futures_in(entry["dir"]) if self.moves else ())
                         if m.future is not None]
            for tp, size, lag, future in sorted(replicas):
                if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
                    continue
                topics.setdefault(tp.topic, []).append(P(
                    partition_index=tp.partition, partition_size=size, offset_lag=lag,
                    is_future_key=future))
            results.append(R(error_code=entry["error"], log_dir=str(entry["dir"].path),
                             topics=[T(name=n, partitions=ps) for n, ps in topics.items()],
                             total_bytes=entry["total_bytes"],
                             usable_bytes=entry["usable_bytes"]))
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)


def _zstd(records: bytes | memoryview) -> bool:
    """Whether a Produce's records start with a zstd-compressed (magic 2) batch."""
    return (len(records) > MAGIC_AT and records[MAGIC_AT] == MAGIC
            and ((batch_attributes(records) or 0) & 7) == Codec.ZSTD)
