"""Kafka's transaction index (`.txnindex`): the aborted transactions whose abort marker
lies in a segment, so a read_committed consumer can skip their records (Kafka's
TransactionIndex). The partition's leader and followers each add an entry when they
append an abort marker (daemon.replica.producer); a log dir taken over from Kafka brings
its own.

An entry is 34 bytes, big-endian: version int16 (0), producerId int64, firstOffset
int64, lastOffset int64 (the abort marker's offset), lastStableOffset int64. A segment's
file lists the transactions whose abort marker lies in that segment, in marker order.

Errors: an OSError reading or writing the file propagates (the caller runs it in its IoGuard). A
torn last entry, or an entry of a version other than 0, is left out: the index only
helps a consumer skip aborted records, and must never stop a fetch.
"""

from __future__ import annotations

import contextlib
import os
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
    """Entries as Kafka writes them (the cleaner's cleaned index; tests build Kafka logs)."""
    return b"".join(ENTRY.pack(0, *e) for e in entries)


def append(path: str | os.PathLike[str], entry: AbortedTxn) -> None:
    """Add `entry` at the end of the index file at `path` (created if missing)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ENTRY.pack(0, *entry))
    finally:
        os.close(fd)


def rewrite(path: str | os.PathLike[str], entries: list[AbortedTxn]) -> None:
    """Replace the file at `path` with `entries` (a truncation cut some); no entries
    leave no file."""
    if not entries:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        f.write(encode(entries))
    os.replace(tmp, path)
