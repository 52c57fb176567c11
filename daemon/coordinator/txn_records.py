"""The records of `__transaction_state`: one transactional id's state per record, in
Kafka's own key and value schemas (TransactionLogKey v0, TransactionLogValue v0/v1,
docs/formats.md "Transaction records"), so Kafka's tools read ours and we read theirs.

The key is (version 0, transactional id); the value the id's producer id and epoch, its
transaction timeout, its state and partitions, and two timestamps. A null value is a
tombstone: the id expired. The last record of an id is its state.

Errors: `decode` raises `TxnRecordError` naming what does not parse.
"""

from __future__ import annotations

import enum
import io
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.api_data import ApiData

from logstore import TopicPartition

from . import schemas

_SCHEMAS = schemas.__name__


class TransactionLogKey(ApiData, load_json=_SCHEMAS):
    pass


class TransactionLogValue(ApiData, load_json=_SCHEMAS):
    pass


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, by the byte it is stored as."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def java_name(self) -> str:
        """The name Kafka's tools print (DescribeTransactions, ListTransactions)."""
        return "".join(w.capitalize() for w in self.name.split("_"))


class TxnRecordError(ValueError):
    """A `__transaction_state` record that does not parse."""


@dataclass
class TxnMetadata:
    """One transactional id's state (Kafka's TransactionMetadata, what is stored)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1


def key(transactional_id: str) -> bytes:
    return bytes(TransactionLogKey(transactional_id=transactional_id).encode(version=0))


def value(m: TxnMetadata) -> bytes:
    P = TransactionLogValue.PartitionsSchema
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(m.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = None if m.state is TxnState.EMPTY else [
        P(topic=t, partition_ids=ids) for t, ids in by_topic.items()]
    return bytes(TransactionLogValue(
        producer_id=m.producer_id, producer_epoch=m.producer_epoch,
        transaction_timeout_ms=m.timeout_ms, transaction_status=int(m.state),
        transaction_partitions=parts, transaction_last_update_timestamp_ms=m.last_update_ms,
        transaction_start_timestamp_ms=m.start_ms).encode(version=0))


def _decode(cls: Any, data: bytes, what: str) -> Any:
    if len(data) < 2:
        raise TxnRecordError(f"{what} of {len(data)} bytes has no version")
    version = int.from_bytes(data[:2], "big", signed=True)
    if not 0 <= version <= cls.max_version:
        raise TxnRecordError(f"{what} at version {version}: only 0-{cls.max_version} are known")
    try:
        return cls.decode(io.BytesIO(data), header=True)
    except Exception as err:  # noqa: BLE001 - the decoder raises many types on bad bytes
        raise TxnRecordError(f"{what} v{version} does not parse: {type(err).__name__}: "
                             f"{err}") from err


def decode(k: bytes | None, v: bytes | None) -> tuple[str, TxnMetadata | None]:
    """(transactional id, its state or None for a tombstone) of one record."""
    if k is None:
        raise TxnRecordError("a __transaction_state record without a key")
    tid = _decode(TransactionLogKey, k, "transaction log key").transactional_id
    if v is None:
        return tid, None
    d = _decode(TransactionLogValue, v, f"transaction log value of {tid!r}")
    try:
        state = TxnState(d.transaction_status)
    except ValueError:
        raise TxnRecordError(f"transaction log value of {tid!r}: unknown state "
                             f"{d.transaction_status}") from None
    parts = {TopicPartition(p.topic, i) for p in d.transaction_partitions or () for i in
             p.partition_ids}
    return tid, TxnMetadata(tid, d.producer_id, d.producer_epoch, d.transaction_timeout_ms,
                            state, parts, d.transaction_last_update_timestamp_ms,
                            d.transaction_start_timestamp_ms)
