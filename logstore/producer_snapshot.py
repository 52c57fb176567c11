"""Kafka's producer-state snapshots (`<offset>.snapshot`, ProducerStateManager's format,
version 1): each producer's last batch and epoch, its last coordinator epoch and the
first offset of its open transaction, as of `offset` (the log end when it was taken).

A partition taken on (start-up, a dir back) starts from the latest snapshot at or below
its log end and replays its batches from there (daemon.replica.producer), so a
transaction opened long before the log's last MiB is still known open after a restart.
Kafka's own snapshots, in a log dir taken over from Kafka, are read the same way.

Layout, big-endian: version int16 (1), crc uint32 (CRC-32C of everything after it),
then an int32 count of 46-byte entries: producerId int64, epoch int16, lastSequence
int32, lastOffset int64, offsetDelta int32, timestamp int64, coordinatorEpoch int32,
currentTxnFirstOffset int64 (-1: none open).

Files are written whole (a temporary name, then a rename); the two latest are kept, and
a truncation removes those past its cut (`delete_after`). Errors: `decode` raises
CorruptRecordError for a file that does not check out (`latest` then tries the one
before); OSErrors propagate.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

import native

from . import names
from .errors import CorruptRecordError

VERSION = 1
KEEP = 2
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
ENTRY = struct.Struct(">qhiqiqiq")


class Entry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    txn_first_offset: int  # -1: no transaction open


def encode(entries: list[Entry]) -> bytes:
    body = _COUNT.pack(len(entries)) + b"".join(ENTRY.pack(*e) for e in entries)
    return _HEAD.pack(VERSION, native.crc32c(body)) + body


def decode(data: bytes, where: str = "snapshot") -> list[Entry]:
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptRecordError(f"{where}: {len(data)} bytes, shorter than a header")
    version, crc = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptRecordError(f"{where}: version {version}, only {VERSION} is known")
    body = memoryview(data)[_HEAD.size:]
    if native.crc32c(body) != crc:
        raise CorruptRecordError(f"{where}: CRC mismatch")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or len(body) != _COUNT.size + count * ENTRY.size:
        raise CorruptRecordError(f"{where}: {count} entries do not fit {len(body)} bytes")
    return [Entry(*ENTRY.unpack_from(body, _COUNT.size + i * ENTRY.size)) for i in range(count)]


def path(partition_dir: Path, offset: int) -> Path:
    return partition_dir / (names.offset_file_stem(offset) + names.SNAPSHOT_SUFFIX)


def offsets(partition_dir: Path) -> list[int]:
    """The offsets of the snapshots in `partition_dir`, oldest first."""
    out = []
    for name in os.listdir(partition_dir):
        parsed = names.parse_segment_file(name)
        if parsed and parsed[1] == names.SNAPSHOT_SUFFIX:
            out.append(parsed[0])
    return sorted(out)


def write(partition_dir: Path, offset: int, entries: list[Entry]) -> None:
    """Write the snapshot at `offset` whole, then drop all but the `KEEP` latest."""
    target = path(partition_dir, offset)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(encode(entries))
    os.replace(tmp, target)
    for old in offsets(partition_dir)[:-KEEP]:
        path(partition_dir, old).unlink(missing_ok=True)


def latest(partition_dir: Path, at_most: int, at_least: int = 0,
           known: tuple[int, ...] | list[int] | None = None) -> tuple[int, list[Entry]] | None:
    """The newest snapshot in [at_least, at_most] that checks out: (offset, entries).
    `known`: the snapshots' offsets, when the caller listed the directory already."""
    for offset in reversed(offsets(partition_dir) if known is None else sorted(known)):
        if not at_least <= offset <= at_most:
            continue
        p = path(partition_dir, offset)
        try:
            return offset, decode(p.read_bytes(), str(p))
        except (CorruptRecordError, FileNotFoundError):
            continue
    return None


def delete_after(partition_dir: Path, offset: int) -> None:
    """Remove the snapshots past `offset` (the log was cut there)."""
    for o in offsets(partition_dir):
        if o > offset:
            path(partition_dir, o).unlink(missing_ok=True)
