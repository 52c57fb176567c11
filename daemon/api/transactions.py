"""The Kafka APIs of producers and transactions: InitProducerId (22), AddPartitionsToTxn
(24), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27), TxnOffsetCommit (28),
DescribeProducers (61), DescribeTransactions (65) and ListTransactions (66), and
FindCoordinator's transaction key type (docs/transactions.md).

Requests are decoded into calls on the transaction coordinator
(daemon.coordinator.transactions), the group coordinator (TxnOffsetCommit) or the
replica manager (WriteTxnMarkers, a coordinator's markers to a partition's leader), and
their answers encoded back; nothing here decides transaction state. An idempotent
producer's InitProducerId (no transactional id) gets a new producer id at epoch 0, as
Kafka answers it.

With an authorizer each request is checked as Kafka 3.9's KafkaApis checks it: Write on
the transactional id for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
TxnOffsetCommit (and Write on each topic added, Read on the group and its topics);
Describe on it to find its coordinator and describe it; ClusterAction for a broker's
WriteTxnMarkers (or an operator's abort of a hanging transaction); Read on a topic to
describe its partitions' producers; an idempotent producer needs IdempotentWrite on the cluster or Write on
some topic (KIP-679).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.admin import (
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)

from logstore import TopicPartition, names

from ..coordinator.coordinator import GroupCoordinator, OffsetCommit
from ..coordinator.transactions import TransactionCoordinator
from ..coordinator.txn_records import TxnState
from ..replica.manager import Marker, ReplicaManager
from ..replica.producer import UNVERIFIED
from ..replica.producer_ids import ProducerIds
from ..replica.txn_verification import TxnVerifier
from ..security.acls import Operation, ResourceType
from . import errors, protocol
from .groups import coordinator_endpoint, refused_offsets

log = logging.getLogger("logkeeper.transactions")

# (error, broker id, host, port) of the leader of __transaction_state-`partition` on a
# listener; and the call that creates the topic (an error code, NONE once it exists).
CoordinatorNode = Callable[[int, str], tuple[int, int, str, int]]
EnsureTopic = Callable[[], Awaitable[int]]
# The markers of a WriteTxnMarkers for partitions led here, written with acks=all: an
# error code per partition (daemon.api.handlers).
WriteMarkers = Callable[[dict[TopicPartition, Any]], Awaitable[dict[TopicPartition, int]]]


def _per_topic(tps: list[TopicPartition], codes: dict[TopicPartition, int],
               answer: Callable[[int, int], Any]) -> dict[str, list[Any]]:
    """Each topic's partition answers (`answer(partition, code)`), in the order asked."""
    out: dict[str, list[Any]] = {}
    for tp in tps:
        out.setdefault(tp.topic, []).append(answer(tp.partition, codes[tp]))
    return out


def _fenced(code: int, version: int, new_from: int) -> int:
    """PRODUCER_FENCED is INVALID_PRODUCER_EPOCH to clients older than `new_from`
    (Kafka's mapping: they do not know the newer code)."""
    return errors.INVALID_PRODUCER_EPOCH if code == errors.PRODUCER_FENCED and \
        version < new_from else code


class TxnApis:
    def __init__(self, coordinator: TransactionCoordinator, groups: GroupCoordinator,
                 producer_ids: ProducerIds, coordinator_node: CoordinatorNode,
                 ensure_topic: EnsureTopic, write_markers: WriteMarkers,
                 partition_exists: Callable[[TopicPartition], bool], replicas: ReplicaManager):
        self.coordinator = coordinator
        self.groups = groups
        self.producer_ids = producer_ids
        self.coordinator_node = coordinator_node
        self.ensure_topic = ensure_topic
        self.write_markers = write_markers
        self.partition_exists = partition_exists
        self.replicas = replicas
        # Transaction verification of TxnOffsetCommit (set by the app).
        self.verifier: TxnVerifier | None = None

    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        return {22: self.init_producer_id, 24: self.add_partitions_to_txn,
                25: self.add_offsets_to_txn, 26: self.end_txn, 27: self.write_txn_markers,
                28: self.txn_offset_commit, 61: self.describe_producers,
                65: self.describe_transactions, 66: self.list_transactions}

    # ---- FindCoordinator (key type 1), from daemon.api.groups ----

    async def coordinator_for(self, tid: str, listener: str, conn: Any
                              ) -> tuple[int, str | None, int, str, int]:
        """(error, message, node, host, port) of `tid`'s transaction coordinator."""
        if not conn.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            return errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
        if not tid:
            return errors.INVALID_REQUEST, "an empty transactional id", -1, "", -1
        return await coordinator_endpoint(tid, self.coordinator.partition_of, self.ensure_topic,
                                          self.coordinator_node, listener, "transactional id",
                                          names.TRANSACTION_STATE_TOPIC)

    # ---- InitProducerId ----

    async def init_producer_id(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body

        def answer(code: int, pid: int = -1, epoch: int = -1) -> Any:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=code,
                                          producer_id=pid, producer_epoch=epoch)

        tid = b.transactional_id
        if tid is None:
            # An idempotent producer: IdempotentWrite on the cluster, or Write on some
            # topic (Kafka 3's rule, KIP-679). A new id at epoch 0, also when it asks
            # for its epoch to be bumped (v3+, KIP-360), as Kafka answers it.
            if not (conn.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                                 log_denied=False)
                    or conn.allowed_any(Operation.WRITE, ResourceType.TOPIC)):
                return answer(errors.CLUSTER_AUTHORIZATION_FAILED)
            try:
                return answer(errors.NONE, await self.producer_ids.next_id(), 0)
            except Exception as err:  # noqa: BLE001 - ZooKeeper away: the client retries
                log.warning("no producer id to hand out (%s: %s)", type(err).__name__, err)
                return answer(errors.COORDINATOR_NOT_AVAILABLE)
        if not conn.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            return answer(errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not tid:
            return answer(errors.INVALID_REQUEST)
        pid = b.producer_id if req.version >= 3 else -1
        epoch = b.producer_epoch if req.version >= 3 else -1
        try:
            code, pid, epoch = await self.coordinator.init_producer_id(
                tid, b.transaction_timeout_ms, pid, epoch)
        except Exception as err:  # noqa: BLE001 - no producer id block: the client retries
            log.warning("InitProducerId for %r failed (%s: %s)", tid, type(err).__name__, err)
            code, pid, epoch = errors.COORDINATOR_NOT_AVAILABLE, -1, -1
        return answer(_fenced(code, req.version, 4), pid, epoch)

    # ---- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn ----

    async def add_partitions_to_txn(self, req: protocol.Request, conn: Any) -> Any:
        if req.version >= 4:
            return self._verify_partitions(req, conn)
        b = req.body
        R = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
        P = R.AddPartitionsToTxnPartitionResult
        tid = b.v3_and_below_transactional_id
        asked = [TopicPartition(t.name, i) for t in b.v3_and_below_topics for i in t.partitions]
        codes: dict[TopicPartition, int] = {}
        if not conn.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            codes = dict.fromkeys(asked, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            denied = {tp.topic for tp in asked
                      if not conn.allowed(Operation.WRITE, ResourceType.TOPIC, tp.topic)}
            for tp in asked:
                if tp.topic in denied:
                    codes[tp] = errors.TOPIC_AUTHORIZATION_FAILED
                elif names.is_internal(tp.topic) or not self.partition_exists(tp):
                    # Kafka refuses internal topics here (AddOffsetsToTxn adds the group's)
                    codes[tp] = errors.UNKNOWN_TOPIC_OR_PARTITION
            if codes:  # one refused: none added, the others "not attempted"
                codes = {tp: codes.get(tp, errors.OPERATION_NOT_ATTEMPTED) for tp in asked}
            else:
                code = await self.coordinator.add_partitions(
                    tid, b.v3_and_below_producer_id, b.v3_and_below_producer_epoch, asked)
                codes = dict.fromkeys(asked, _fenced(code, req.version, 2))
        by_topic = _per_topic(asked, codes, lambda i, code: P(partition_index=i,
                                                              partition_error_code=code))
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
            R(name=t, results_by_partition=ps) for t, ps in by_topic.items()])

    def _verify_partitions(self, req: protocol.Request, conn: Any) -> Any:
        """AddPartitionsToTxn v4: another broker's questions (ClusterAction), whether
        each transaction holds the partitions it is about to write a first batch to
        (verifyOnly, daemon.replica.txn_verification). Adding partitions this way
        belongs to KIP-890's second part, which no client of Kafka 3.9 uses: refused."""
        R = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
        T = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
        P = T.AddPartitionsToTxnPartitionResult
        if not conn.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return AddPartitionsToTxnResponse(
                throttle_time_ms=0, error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                results_by_transaction=[])
        results = []
        for txn in req.body.transactions:
            asked = [TopicPartition(t.name, i) for t in txn.topics for i in t.partitions]
            if not txn.verify_only:
                codes = dict.fromkeys(asked, errors.INVALID_REQUEST)
            else:
                codes = {tp: errors.UNKNOWN_TOPIC_OR_PARTITION for tp in asked
                         if not self.partition_exists(tp)}
                if codes:  # one unknown: none verified, the others "not attempted"
                    codes = {tp: codes.get(tp, errors.OPERATION_NOT_ATTEMPTED) for tp in asked}
                else:
                    codes = self.coordinator.verify_partitions(
                        txn.transactional_id, txn.producer_id, txn.producer_epoch, asked)
            by_topic = _per_topic(asked, codes, lambda i, code: P(partition_index=i,
                                                                  partition_error_code=code))
            results.append(R(transactional_id=txn.transactional_id, topic_results=[
                T(name=t, results_by_partition=ps) for t, ps in by_topic.items()]))
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=errors.NONE,
                                          results_by_transaction=results)

    async def add_offsets_to_txn(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body

        def answer(code: int) -> Any:
            return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)

        if not conn.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, b.transactional_id):
            return answer(errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not conn.allowed(Operation.READ, ResourceType.GROUP, b.group_id):
            return answer(errors.GROUP_AUTHORIZATION_FAILED)
        p = self.groups.partition_of(b.group_id)
        if p is None:
            return answer(errors.COORDINATOR_NOT_AVAILABLE)  # no __consumer_offsets yet
        code = await self.coordinator.add_partitions(
            b.transactional_id, b.producer_id, b.producer_epoch,
            [TopicPartition(names.OFFSETS_TOPIC, p)])
        return answer(_fenced(code, req.version, 2))

    async def end_txn(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        if not conn.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, b.transactional_id):
            code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            code = await self.coordinator.end_txn(b.transactional_id, b.producer_id,
                                                  b.producer_epoch, bool(b.committed))
        return EndTxnResponse(throttle_time_ms=0, error_code=_fenced(code, req.version, 2))

    # ---- WriteTxnMarkers (a coordinator to this partition leader) ----

    async def write_txn_markers(self, req: protocol.Request, conn: Any) -> Any:
        R = WriteTxnMarkersResponse.WritableTxnMarkerResult
        T = R.WritableTxnMarkerTopicResult
        P = T.WritableTxnMarkerPartitionResult
        allowed = conn.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
        out = []
        for m in req.body.markers:
            marker = Marker(m.producer_id, m.producer_epoch, m.coordinator_epoch,
                            bool(m.transaction_result))
            tps = [TopicPartition(t.name, i) for t in m.topics for i in t.partition_indexes]
            codes = await self.write_markers(dict.fromkeys(tps, marker)) if allowed else \
                dict.fromkeys(tps, errors.CLUSTER_AUTHORIZATION_FAILED)
            by_topic = _per_topic(tps, codes, lambda i, code: P(partition_index=i,
                                                                error_code=code))
            out.append(R(producer_id=m.producer_id, topics=[
                T(name=t, partitions=ps) for t, ps in by_topic.items()]))
        return WriteTxnMarkersResponse(markers=out)

    # ---- TxnOffsetCommit ----

    async def txn_offset_commit(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        v = req.version
        T = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
        P = T.TxnOffsetCommitResponsePartition
        asked = [OffsetCommit(TopicPartition(t.name, p.partition_index), p.committed_offset,
                              p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata)
                 for t in b.topics for p in t.partitions]
        refused: dict[TopicPartition, int] = {}
        if not conn.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, b.transactional_id):
            code, per = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, {}
        elif not conn.allowed(Operation.READ, ResourceType.GROUP, b.group_id):
            code, per = errors.GROUP_AUTHORIZATION_FAILED, {}
        else:
            refused = refused_offsets((c.tp for c in asked), conn, self.partition_exists)
            commits = [c for c in asked if c.tp not in refused]
            code, per = errors.NONE, {}
            if commits:
                verifier = self.verifier
                verify = None
                if verifier is not None and verifier.enabled:
                    async def verify(p: int) -> tuple[int, object]:
                        return await self._verify_offsets(
                            verifier, b.transactional_id, b.producer_id, b.producer_epoch, p)
                code, written = await self.groups.txn_commit(
                    b.group_id, b.producer_id, b.producer_epoch,
                    b.generation_id if v >= 3 else -1, b.member_id if v >= 3 else "",
                    b.group_instance_id if v >= 3 else None, commits, verify=verify)
                per.update(written)
        out: dict[str, list[Any]] = {}
        for c in asked:
            e = refused.get(c.tp) or code or per.get(c.tp, errors.NONE)
            out.setdefault(c.tp.topic, []).append(P(partition_index=c.tp.partition,
                                                    error_code=_fenced(e, v, 3)))
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
            T(name=t, partitions=ps) for t, ps in out.items()])

    async def _verify_offsets(self, verifier: TxnVerifier, tid: str, producer_id: int,
                              producer_epoch: int, partition: int) -> tuple[int, object]:
        """Whether `tid`'s transaction holds `__consumer_offsets`-`partition` (its
        AddOffsetsToTxn added it), asked before its offsets are written there: (error,
        the guard to append with)."""
        p = self.replicas.get(names.OFFSETS_TOPIC, partition)
        if p is None:
            return errors.NOT_COORDINATOR, UNVERIFIED
        guards, refused = await verifier.verify(tid, producer_id, producer_epoch, [(p, -1)])
        return refused.get(p.tp, errors.NONE), guards.get(p.tp, UNVERIFIED)

    # ---- DescribeProducers ----

    async def describe_producers(self, req: protocol.Request, conn: Any) -> Any:
        """Each partition's active producers, from any replica held here (Kafka's
        activeProducerState): what kafka-transactions.sh describe-producers shows and
        an abort of a hanging transaction starts from."""
        T = DescribeProducersResponse.TopicResponse
        P = T.PartitionResponse
        S = P.ProducerState
        slots: list[tuple[str, int, int]] = []  # topic, partition, error (0: look it up)
        held = []
        for t in req.body.topics:
            readable = conn.allowed(Operation.READ, ResourceType.TOPIC, t.name)
            for i in t.partition_indexes:
                tp = TopicPartition(t.name, i)
                p = self.replicas.get(t.name, i)
                if not readable:
                    code = errors.TOPIC_AUTHORIZATION_FAILED
                elif p is None:
                    code = errors.NOT_LEADER_OR_FOLLOWER if self.partition_exists(tp) \
                        else errors.UNKNOWN_TOPIC_OR_PARTITION
                elif p.offline:
                    code = errors.KAFKA_STORAGE_ERROR
                else:
                    code = errors.NONE
                    held.append(p)
                slots.append((t.name, i, code))
        found = iter(await self.replicas.active_producers(held) if held else [])
        out: dict[str, list[Any]] = {}
        for topic, index, code in slots:
            producers: list[Any] = []
            if not code:
                code, producers = next(found)
            out.setdefault(topic, []).append(P(
                partition_index=index, error_code=code, error_message=None,
                active_producers=[S(producer_id=v.producer_id, producer_epoch=v.producer_epoch,
                                    last_sequence=v.last_sequence,
                                    last_timestamp=v.last_timestamp,
                                    coordinator_epoch=v.coordinator_epoch,
                                    current_txn_start_offset=v.current_txn_start_offset)
                                  for v in producers]))
        return DescribeProducersResponse(throttle_time_ms=0, topics=[
            T(name=t, partitions=ps) for t, ps in out.items()])

    # ---- DescribeTransactions, ListTransactions ----

    async def describe_transactions(self, req: protocol.Request, conn: Any) -> Any:
        S = DescribeTransactionsResponse.TransactionState
        D = S.TopicData
        out = []
        for tid in req.body.transactional_ids:
            if not conn.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
                code, m = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
            else:
                code, m = self.coordinator.describe(tid)
            if m is None:
                out.append(S(error_code=code, transactional_id=tid, transaction_state="",
                             transaction_timeout_ms=0, transaction_start_time_ms=-1,
                             producer_id=-1, producer_epoch=-1, topics=[]))
                continue
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(m.partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            out.append(S(error_code=errors.NONE, transactional_id=tid,
                         transaction_state=m.state.java_name,
                         transaction_timeout_ms=m.timeout_ms,
                         transaction_start_time_ms=m.start_ms, producer_id=m.producer_id,
                         producer_epoch=m.producer_epoch,
                         topics=[D(topic=t, partitions=ps) for t, ps in by_topic.items()]))
        return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=out)

    async def list_transactions(self, req: protocol.Request, conn: Any) -> Any:
        b = req.body
        S = ListTransactionsResponse.TransactionState
        known = {s.java_name: s for s in TxnState}
        states = set(b.state_filters or ())
        unknown = sorted(states - set(known))
        pids = set(b.producer_id_filters or ())
        min_age = b.duration_filter if req.version >= 1 else -1
        now = _now_ms()
        out = []
        for m in self.coordinator.list():
            if states and m.state.java_name not in states:
                continue
            if pids and m.producer_id not in pids:
                continue
            if min_age is not None and min_age >= 0 and (
                    m.state is not TxnState.ONGOING or now - m.start_ms < min_age):
                continue
            if not conn.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                m.transactional_id, log_denied=False):
                continue
            out.append(S(transactional_id=m.transactional_id, producer_id=m.producer_id,
                         transaction_state=m.state.java_name))
        code = errors.COORDINATOR_LOAD_IN_PROGRESS if self.coordinator.loading() else errors.NONE
        return ListTransactionsResponse(throttle_time_ms=0, error_code=code,
                                        unknown_state_filters=unknown, transaction_states=out)


def _now_ms() -> int:
    return int(time.time() * 1000)
