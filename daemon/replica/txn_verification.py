"""Transaction verification: a partition leader asks the transaction coordinator before
it writes the first batch of a producer's transaction (KIP-890's first part; Kafka's
AddPartitionsToTxnManager and ReplicaManager's transaction verification),
docs/transactions.md.

Why: a producer's batch can reach a leader after its transaction ended (a produce
request delayed on the network, retried after the transaction timed out and was
aborted). Written unasked, it opens a transaction there that no coordinator knows of
and no marker will ever close: the partition's last stable offset stays at it, and
read_committed consumers stop there for ever (a hanging transaction). Verified, it is
refused (INVALID_TXN_STATE, or INVALID_PRODUCER_EPOCH once the abort bumped the epoch).

How: `TxnVerifier.verify` starts a `Verification` for the producer on each partition's
dir worker (none when its transaction is open there already: its later batches need no
question), asks the coordinator of the transactional id whether the transaction holds
those partitions (this broker's own coordinator directly, another broker's with an
AddPartitionsToTxn v4 `verifyOnly` request over the inter-broker listener), and hands
back the verifications to append with (daemon.replica.producer checks the append holds
the one its partition still has: a marker written meanwhile ends it) and the partitions
refused. With `transaction.partition.verification.enable=false` nothing is asked and
transactional batches are written as they come, as before Kafka 3.6. Neither is a
coordinator's broker that does not serve AddPartitionsToTxn v4 (an older release during
a rolling upgrade, found by its ApiVersions): its transactions' batches are written
unverified, with one warning, as Kafka does, until it is upgraded.

Questions to another broker are batched as Kafka's AddPartitionsToTxnManager batches
them: one request per coordinator broker at a time, carrying every transaction whose
question came while the one before was out (`_NodeQueue`). Two questions for the same
transaction and producer epoch share its entry; a question for a newer epoch (or
another producer id) replaces an older one still waiting, which is answered
NETWORK_EXCEPTION (retried by its producer), and one for an older epoch is answered
INVALID_PRODUCER_EPOCH, as Kafka answers them.

The coordinator's answers become the producer's as Kafka's become them:
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH (what a producer aborts on and carries on
from), TRANSACTION_ABORTABLE is INVALID_TXN_STATE (the only one clients before KIP-890's
second part know), and for a Produce the retriable ones (the coordinator moving or
loading, a transaction being completed, a network failure) are NOT_ENOUGH_REPLICAS,
which every client retries without a metadata refresh (`produce_error`). A coordinator
broker that cannot be reached is NETWORK_EXCEPTION. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.producer import AddPartitionsToTxnRequest

from logstore import TopicPartition

from ..api import errors, protocol
from ..ops.metrics import Metrics
from ..wire.peer import Peers, VersionNotServed
from .partition import Partition
from .producer import Verification

log = logging.getLogger("logkeeper.transactions")

VERIFY_VERSION = 4  # AddPartitionsToTxn v4: a broker's, with verifyOnly
VERIFY_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for its inter-broker sender

# (error, broker id, host, port) of a transactional id's coordinator on the inter-broker
# listener; the coordinator here, asked directly; the verifications started on the dirs.
Locate = Callable[[str], tuple[int, int, str, int]]
VerifyHere = Callable[[str, int, int, list[TopicPartition]], dict[TopicPartition, int]]
Start = Callable[[list[tuple[Partition, int, int, int]]], "asyncio.Future[list[Verification | None]]"]

# Retriable for a producer, but not every client retries them on a Produce: Kafka
# answers NOT_ENOUGH_REPLICAS instead, which all do, without a metadata refresh.
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset({
    errors.CONCURRENT_TRANSACTIONS, errors.NETWORK_EXCEPTION,
    errors.COORDINATOR_LOAD_IN_PROGRESS, errors.COORDINATOR_NOT_AVAILABLE,
    errors.NOT_COORDINATOR})


def produce_error(code: int) -> tuple[int, str]:
    """A verification's refusal as a Produce answers it: (error code, message)."""
    name = errors.name_of(code)
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return errors.NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added "
                                            f"to the transaction. Underlying error: {name}")
    if code == errors.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    return code, f"transaction verification refused: {name}"


class _Waiting:
    """One transaction's questions queued for a coordinator broker: its producer and
    epoch, and each asker's future with the partitions it asked about."""

    __slots__ = ("producer_id", "producer_epoch", "askers")

    def __init__(self, producer_id: int, producer_epoch: int):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.askers: list[tuple[asyncio.Future[dict[TopicPartition, int]],
                                list[TopicPartition]]] = []

    def partitions(self) -> list[TopicPartition]:
        return list(dict.fromkeys(tp for _, tps in self.askers for tp in tps))

    def answer(self, codes: dict[TopicPartition, int]) -> None:
        for fut, tps in self.askers:
            if not fut.done():
                fut.set_result({tp: codes.get(tp, errors.UNKNOWN_SERVER_ERROR) for tp in tps})

    def answer_all(self, code: int) -> None:
        self.answer(dict.fromkeys(self.partitions(), code))

    def fail(self, err: BaseException) -> None:
        for fut, _ in self.askers:
            if not fut.done():
                if isinstance(err, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(err)


class _NodeQueue:
    """The questions for one coordinator broker not yet sent (by transactional id), and
    whether a request to it is out."""

    __slots__ = ("host", "port", "waiting", "sending")

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.waiting: dict[str, _Waiting] = {}
        self.sending = False


class TxnVerifier:
    def __init__(self, broker_id: int, start: Start, locate: Locate, verify_here: VerifyHere,
                 *, enabled: bool = True, tls_context: ssl.SSLContext | None = None,
                 login: tuple[str, str, str] | None = None, metrics: Metrics | None = None):
        self.broker_id = broker_id
        self.metrics = metrics
        self.enabled = enabled  # transaction.partition.verification.enable
        self._start = start
        self._locate = locate
        self._verify_here = verify_here
        self._peers = Peers(f"logkeeper-txn-verification-{broker_id}",
                            request_timeout=VERIFY_TIMEOUT_S, tls_context=tls_context,
                            login=login)
        # Coordinator brokers found too old to ask (warned about once; forgotten when one
        # answers a question again, i.e. after its upgrade).
        self._unverifiable: set[int] = set()
        self._queues: dict[int, _NodeQueue] = {}  # by coordinator broker id
        self._senders: set[asyncio.Task[None]] = set()

    async def verify(self, transactional_id: str | None, producer_id: int,
                     producer_epoch: int, batches: list[tuple[Partition, int]]
                     ) -> tuple[dict[TopicPartition, Verification], dict[TopicPartition, int]]:
        """For each (partition, first sequence) of a transactional batch of the producer:
        (the verifications to append with, the partitions refused with their errors).
        A partition in neither has the transaction open already. Without a
        transactional id there is nobody to ask: nothing is verified, and only batches
        of a transaction already open are written."""
        if transactional_id is None or not batches:
            return {}, {}
        started = await self._start([(p, producer_id, seq, producer_epoch)
                                     for p, seq in batches])
        waiting = {p.tp: v for (p, _), v in zip(batches, started, strict=True)
                   if v is not None}
        if not waiting:
            return {}, {}
        asked = time.perf_counter()
        codes = await self._ask(transactional_id, producer_id, producer_epoch, list(waiting))
        refused = {tp: code for tp, code in codes.items() if code != errors.NONE}
        if self.metrics is not None:
            self.metrics.verification_time.observe(time.perf_counter() - asked)
            for code in refused.values():
                self.metrics.verification_failures.labels(str(code)).inc()
        return {tp: v for tp, v in waiting.items() if tp not in refused}, refused

    async def _ask(self, tid: str, producer_id: int, producer_epoch: int,
                   tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The coordinator's answer per partition, as a producer may be told it."""
        code, node, host, port = self._locate(tid)
        if code:
            return dict.fromkeys(tps, code)
        if node == self.broker_id:
            answer = self._verify_here(tid, producer_id, producer_epoch, tps)
        else:
            try:
                answer = await self._queued(node, host, port, tid, producer_id,
                                            producer_epoch, tps)
            except VersionNotServed as err:
                # A broker of an older release (a rolling upgrade): it cannot be asked,
                # so the batch is written unverified, as before verification existed
                # (Kafka's AddPartitionsToTxnManager on a version mismatch).
                if node not in self._unverifiable:
                    self._unverifiable.add(node)
                    log.warning("transaction coordinator broker %d cannot verify "
                                "transactions (%s): transactional batches whose coordinator "
                                "it is are written unverified until it is upgraded",
                                node, err)
                return dict.fromkeys(tps, errors.NONE)
            except (OSError, protocol.ProtocolError) as err:
                log.warning("verifying transaction %r with its coordinator, broker %d: %s",
                            tid, node, err)
                return dict.fromkeys(tps, errors.NETWORK_EXCEPTION)
        out = {}
        for tp in tps:
            got = answer.get(tp, errors.UNKNOWN_SERVER_ERROR)
            if got == errors.PRODUCER_FENCED:
                got = errors.INVALID_PRODUCER_EPOCH  # what producers expect here
            elif got in (errors.TRANSACTION_ABORTABLE, errors.CLUSTER_AUTHORIZATION_FAILED):
                got = errors.INVALID_TXN_STATE  # the one clients know
            out[tp] = got
        return out

    def _queued(self, node: int, host: str, port: int, tid: str, producer_id: int,
                producer_epoch: int, tps: list[TopicPartition]
                ) -> asyncio.Future[dict[TopicPartition, int]]:
        """The coordinator broker's answer for `tps`, asked in the next request to it."""
        fut: asyncio.Future[dict[TopicPartition, int]] = \
            asyncio.get_running_loop().create_future()
        queue = self._queues.get(node)
        if queue is None:
            queue = self._queues[node] = _NodeQueue(host, port)
        queue.host, queue.port = host, port  # where it is now
        waiting = queue.waiting.get(tid)
        if waiting is not None and (waiting.producer_id, waiting.producer_epoch) != (
                producer_id, producer_epoch):
            if waiting.producer_id == producer_id and producer_epoch < waiting.producer_epoch:
                fut.set_result(dict.fromkeys(tps, errors.INVALID_PRODUCER_EPOCH))
                return fut
            waiting.answer_all(errors.NETWORK_EXCEPTION)  # replaced by the newer one
            waiting = None
        if waiting is None:
            waiting = queue.waiting[tid] = _Waiting(producer_id, producer_epoch)
        waiting.askers.append((fut, tps))
        if not queue.sending:
            queue.sending = True
            task = asyncio.ensure_future(self._send_queued(node, queue))
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)
        return fut

    async def _send_queued(self, node: int, queue: _NodeQueue) -> None:
        """Send what is queued for `node`, one request at a time, until nothing is."""
        try:
            while queue.waiting:
                batch, queue.waiting = queue.waiting, {}
                try:
                    answers = await self._send(node, queue.host, queue.port, batch)
                except asyncio.CancelledError as err:  # closing
                    for waiting in batch.values():
                        waiting.fail(err)
                    raise
                except Exception as err:  # noqa: BLE001 - each asker's _ask says what it means
                    for waiting in batch.values():
                        waiting.fail(err)
                    continue
                for tid, waiting in batch.items():
                    waiting.answer(answers.get(tid, {}))
        finally:
            queue.sending = False
            for waiting in queue.waiting.values():  # only when cancelled (closing)
                waiting.fail(asyncio.CancelledError())
            queue.waiting.clear()

    async def _send(self, node: int, host: str, port: int, batch: dict[str, _Waiting]
                    ) -> dict[str, dict[TopicPartition, int]]:
        """One AddPartitionsToTxn v4 (verifyOnly) for every transaction in `batch`: each
        one's answer per partition."""
        peer = await self._peers.to(node, host, port)
        T = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        transactions = []
        for tid, waiting in batch.items():
            topics: dict[str, list[int]] = {}
            for tp in waiting.partitions():
                topics.setdefault(tp.topic, []).append(tp.partition)
            transactions.append(T(
                transactional_id=tid, producer_id=waiting.producer_id,
                producer_epoch=waiting.producer_epoch, verify_only=True,
                topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                    name=t, partitions=ps) for t, ps in topics.items()]))
        resp: Any = await peer.request(AddPartitionsToTxnRequest(transactions=transactions),
                                       VERIFY_VERSION, negotiate=True)
        self._unverifiable.discard(node)
        if resp.error_code:
            return {tid: dict.fromkeys(waiting.partitions(), resp.error_code)
                    for tid, waiting in batch.items()}
        return {res.transactional_id: {
            TopicPartition(t.name, r.partition_index): r.partition_error_code
            for t in res.topic_results for r in t.results_by_partition}
            for res in resp.results_by_transaction}

    async def close(self) -> None:
        for task in list(self._senders):
            task.cancel()
        await self._peers.close()
