"""Idempotent-producer state: the last batches of each producer, per partition.

Kafka's check for one batch (ProducerStateManager): a lower epoch is fenced
(INVALID_PRODUCER_EPOCH), a batch already appended is answered with its first offset
and not written again, and a sequence that does not follow the last one, or a higher
epoch that does not start at sequence 0, is OUT_OF_ORDER_SEQUENCE_NUMBER. A producer
this partition knows nothing of may start at any sequence (its state may have gone
with retention or a restart). A follower records the batches it replicates the same way
(`record_replicated`), so a new leader after a failover still answers a producer's
retry of a batch the old leader had written as a duplicate; a truncation forgets the
batches cut (`truncate`). The window lives in memory; when a partition is taken on
(start-up, a dir re-admitted) it is rebuilt from the batches of the log's last
`TAIL_BYTES` (`from_log`), so a broker restarted after a kill -9 still knows the recent
batches it holds: without that, a producer retrying a batch that broker had written
before the kill had it written twice once the broker led again. A producer whose last
batch lies further back is unknown and may start at any sequence, as in Kafka after
its state expired.

Runs on the partition's dir worker only (the state is the partition's, see
daemon.replica.partition): not thread-safe.
"""

from __future__ import annotations

import collections
import struct
from dataclasses import dataclass, field

from logstore import Log
from logstore.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_AT,
    PRODUCER,
    PRODUCER_AT,
    batch_log_append_time,
    batch_producer,
)

from ..api.errors import INVALID_PRODUCER_EPOCH, NONE, OUT_OF_ORDER_SEQUENCE_NUMBER

WINDOW = 5  # Kafka keeps the metadata of the last 5 batches per producer
TAIL_BYTES = 1 << 20  # how much of a log's end `from_log` reads
_FRAME = struct.Struct(">qi")  # base offset, batch length: every batch's and legacy message's


@dataclass
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    append_time: int = -1  # the LogAppendTime it was written with, else -1


@dataclass
class ProducerState:
    epoch: int
    batches: collections.deque[BatchMeta] = field(
        default_factory=lambda: collections.deque(maxlen=WINDOW))


@dataclass(frozen=True)
class Check:
    """The outcome of `check`: an error, a duplicate's first offset, or what to record."""

    error: int = NONE
    duplicate_of: int | None = None  # first offset of the batch already appended
    append_time: int = -1  # that batch's LogAppendTime, answered again (else -1)
    token: tuple[int, int, int, int] | None = None  # (pid, epoch, first_seq, last_seq)


def check(producers: dict[int, ProducerState], records: bytes) -> Check:
    """Kafka's idempotent-producer check for the first batch of `records`."""
    fields = batch_producer(records)
    if fields is None:
        return Check()
    pid, epoch, base_seq, count = fields
    if pid < 0 or base_seq < 0 or count <= 0:
        return Check()
    last_seq = (base_seq + count - 1) % 2**31
    state = producers.get(pid)
    if state is not None:
        if epoch < state.epoch:
            return Check(INVALID_PRODUCER_EPOCH)
        if epoch > state.epoch and base_seq != 0:
            return Check(OUT_OF_ORDER_SEQUENCE_NUMBER)  # a new epoch starts at sequence 0
        if epoch == state.epoch and state.batches:
            for meta in state.batches:
                if meta.first_seq == base_seq and meta.last_seq == last_seq:
                    return Check(duplicate_of=meta.first_offset, append_time=meta.append_time)
            expected = (state.batches[-1].last_seq + 1) % 2**31
            if base_seq != expected:
                return Check(OUT_OF_ORDER_SEQUENCE_NUMBER)
    return Check(token=(pid, epoch, base_seq, last_seq))


def record(producers: dict[int, ProducerState], token: tuple[int, int, int, int] | None,
           first_offset: int, append_time: int = -1) -> None:
    """Remember an appended batch that `check` passed with `token` (and the
    LogAppendTime it was stamped with: a retry of it is answered that time, as Kafka's
    duplicate answer carries the batch's timestamp)."""
    if token is None:
        return
    pid, epoch, first_seq, last_seq = token
    state = producers.get(pid)
    if state is None or state.epoch != epoch:
        state = producers[pid] = ProducerState(epoch)
    state.batches.append(BatchMeta(first_seq, last_seq, first_offset, append_time))


def record_replicated(producers: dict[int, ProducerState], records: bytes | memoryview) -> None:
    """Remember every idempotent batch of `records`, a leader's batches as a follower
    appended them (their offsets are the leader's). Framing was checked by the append.
    Old Kafka's legacy messages (magic 0/1) have no producer: they are stepped over."""
    view = memoryview(records)
    pos = 0
    while len(view) - pos >= MAGIC_AT + 1:
        base_offset, batch_length = _FRAME.unpack_from(view, pos)
        if view[pos + MAGIC_AT] == 2 and len(view) - pos >= HEADER_SIZE:
            pid, epoch, base_seq, count = PRODUCER.unpack_from(view, pos + PRODUCER_AT)
            if pid >= 0 and base_seq >= 0 and count > 0:
                record(producers, (pid, epoch, base_seq, (base_seq + count - 1) % 2**31),
                       base_offset, batch_log_append_time(view[pos:]))
        pos += LOG_OVERHEAD + batch_length


def from_log(log: Log, tail_bytes: int = TAIL_BYTES) -> dict[int, ProducerState]:
    """The producer state of the last `tail_bytes` of `log`, rebuilt from its batch
    headers when the partition is taken on (start-up, a dir re-admitted), as Kafka
    replays the log's tail when it has no producer snapshot."""
    producers: dict[int, ProducerState] = {}
    for chunk in log.read_tail(tail_bytes):
        record_replicated(producers, chunk)
    return producers


def truncate(producers: dict[int, ProducerState], offset: int) -> None:
    """Forget the batches at or past `offset` (the log was cut there)."""
    for pid in list(producers):
        state = producers[pid]
        kept = [m for m in state.batches if m.first_offset < offset]
        if len(kept) != len(state.batches):
            state.batches.clear()
            state.batches.extend(kept)
        if not state.batches:
            del producers[pid]
