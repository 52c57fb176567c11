"""Log dirs as Kafka brokers leave them (issue 9, 4d): what real 2.x/3.x brokers write
that logkeeper's readers must accept.

- A running (or crashed) broker's active segment keeps its preallocated index files:
  10 MiB rounded down to the entry size, zero past the written entries (sparse).
- Kafka creates checkpoint files empty (0 bytes) and reads them as "no entries".
- Kafka 2.x time-index entries name the record holding the max timestamp, which can be
  inside its batch, not the batch's last offset.
- A Kafka 2.x/3.0 follower indexes each append of a fetched chunk of batches as a whole:
  the chunk's last offset at the position of its first batch.

The segments are written by logstore (byte-for-byte Kafka's layout) and then given
what Kafka leaves: the preallocated index tails, the empty checkpoints, the older
brokers' time-index offsets, the followers' indexes.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from logstore import Log, LogConfig, names, verify
from logstore.records import Record, build_batch

# Kafka's segment.index.bytes default, as its active segments preallocate it.
PREALLOCATED_BYTES = 10 * 1024 * 1024
OFFSET_INDEX_BYTES = PREALLOCATED_BYTES // 8 * 8
TIME_INDEX_BYTES = PREALLOCATED_BYTES // 12 * 12
WRITE_CONFIG = LogConfig(index_interval_bytes=512)
TS = 1_700_000_000_000


def kafka_batch(i: int, records: int = 3, *, variant: bool = False) -> bytes:
    """Batch i: its second record holds the max timestamp (timestamps t, t+50, t+10).
    A variant has other values (same offsets, sizes and timestamps; another CRC)."""
    ts = TS + i * 1000
    stamps = [ts, ts + 50, ts + 10][:records]
    value = (b"w" if variant else b"v") * 200
    return build_batch([Record(f"k{i}-{r}".encode(), value, [], t)
                        for r, t in enumerate(stamps)])


def preallocate(log_path: Path) -> None:
    """Give a segment's indexes the zero-filled tails of a live Kafka active segment."""
    os.truncate(log_path.with_suffix(names.INDEX_SUFFIX), OFFSET_INDEX_BYTES)
    os.truncate(log_path.with_suffix(names.TIME_INDEX_SUFFIX), TIME_INDEX_BYTES)


def live_partition(root: Path, topic: str, partition: int, batches: int, *,
                   roll_every: int = 0, variants: range = range(0),
                   preallocated: bool = True) -> list[Path]:
    """A partition of a running broker: `batches` batches (none: an empty log), those
    in `variants` with other values, its active segment's indexes preallocated (or
    trimmed, as after a clean shutdown). Returns the segment `.log` paths."""
    path = root / names.partition_dir_name(topic, partition)
    log = Log.open(path, WRITE_CONFIG, recover=False)
    for i in range(batches):
        if roll_every and i and i % roll_every == 0:
            log.roll()
        log.append(kafka_batch(i, variant=i in variants))
    segments = [s.log_path for s in log.segments]
    log.close()
    if preallocated:
        preallocate(segments[-1])
    return segments


def older_broker_time_index(log_path: Path) -> int:
    """Rewrite a segment's time index as Kafka 2.x wrote it: each entry names the record
    holding the max timestamp (the second of kafka_batch's three), not the batch's last
    offset. Returns the number of entries rewritten."""
    index = log_path.with_suffix(names.TIME_INDEX_SUFFIX)
    data = bytearray(index.read_bytes())
    n = 0
    for pos in range(0, len(data) - 11, 12):
        ts, rel = struct.unpack_from(">qi", data, pos)
        if ts == 0 and rel == 0:
            break
        struct.pack_into(">qi", data, pos, ts, rel - 1)
        n += 1
    index.write_bytes(bytes(data))
    return n


def follower_indexes(log_path: Path, chunk: int, *, interval: int = 512,
                     rolled: bool = False) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Rewrite a segment's .index and .timeindex as a Kafka 2.x/3.0 follower writes them:
    one LogSegment.append per fetched chunk of `chunk` batches, which (once more than
    `interval` bytes were appended since the last entry) maps the chunk's last offset
    to its first batch's position, and offers the time index the segment's max
    timestamp so far with the last offset of the first batch that reached it; `rolled`:
    the entry a roll adds. Returns the (offset, position) and (timestamp, offset)
    entries, offsets absolute."""
    batches: list = []
    verify.verify_segment(log_path, check_indexes=False, on_batch=batches.append)
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    since, max_ts, max_at = 0, -1, -1

    def time_entry() -> None:
        if not times or max_ts > times[-1][0]:
            times.append((max_ts, max_at))

    for first in range(0, len(batches), chunk):
        part = batches[first:first + chunk]
        largest = max(b.max_timestamp for b in part)
        if largest > max_ts:
            max_ts = largest
            max_at = next(b.last_offset for b in part if b.max_timestamp == largest)
        if since > interval:
            offsets.append((part[-1].last_offset, part[0].position))
            time_entry()
            since = 0
        since += sum(b.size for b in part)
    if rolled:
        time_entry()
    base = int(log_path.stem)
    log_path.with_suffix(names.INDEX_SUFFIX).write_bytes(
        b"".join(struct.pack(">ii", o - base, p) for o, p in offsets))
    log_path.with_suffix(names.TIME_INDEX_SUFFIX).write_bytes(
        b"".join(struct.pack(">qi", t, o - base) for t, o in times))
    return offsets, times


def kafka_log_dir(root: Path, cluster_id: str | None = "kafka-cluster-A", broker_id: int = 0,
                  *, empty_checkpoints: bool = True) -> Path:
    """A log dir's own files as Kafka writes them: meta.properties, and (unless told not
    to) empty (0-byte) cleaner-offset-checkpoint and replication-offset-checkpoint."""
    root.mkdir(parents=True, exist_ok=True)
    lines = ["#", "#Tue Jan 02 10:00:00 UTC 2024"]
    if cluster_id is not None:
        lines.append(f"cluster.id={cluster_id}")
    lines += ["version=0", f"broker.id={broker_id}"]
    (root / names.META_PROPERTIES).write_text("\n".join(lines) + "\n")
    if not empty_checkpoints:
        return root
    (root / names.CLEANER_OFFSET_CHECKPOINT).write_bytes(b"")
    (root / names.REPLICATION_OFFSET_CHECKPOINT).write_bytes(b"")
    return root
