"""Kafka's transaction index (`.txnindex`), read only: the aborted transactions of old
Kafka logs, so a read_committed consumer can skip their records (Kafka's
TransactionIndex). logkeeper serves no transactions and writes no `.txnindex`; a log dir
taken over from Kafka may hold them, beside segments with transactional batches and
their commit and abort markers.

An entry is 34 bytes, big-endian: version int16 (0), producerId int64, firstOffset
int64, lastOffset int64 (the abort marker's offset), lastStableOffset int64. A segment's
file lists the transactions whose abort marker lies in that segment, in marker order.

Errors: an OSError reading the file propagates (the caller runs it in its IoGuard). A
torn last entry, or an entry of a version other than 0, is left out: the index only
helps a consumer skip aborted records, and must never stop a fetch.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

ENTRY = struct.Struct(">hqqqq")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int


def parse(data: bytes) -> list[AbortedTxn]:
    """The entries of a `.txnindex` file's bytes."""
    whole = len(data) - len(data) % ENTRY.size
    return [AbortedTxn(pid, first, last, lso)
            for version, pid, first, last, lso in ENTRY.iter_unpack(data[:whole])
            if version == 0]


def encode(entries: list[AbortedTxn]) -> bytes:
    """Entries as Kafka writes them (tests and tools build old Kafka logs with it)."""
    return b"".join(ENTRY.pack(0, *e) for e in entries)
