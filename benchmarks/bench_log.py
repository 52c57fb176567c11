"""The log layer against the raw file calls it stands on, timed in the same run.

- Log.append of 16 KiB batches (validation, offsets, indexes; page cache, no fsync) vs
  an os.write loop of the same bytes to a plain file: target >= 0.8 (issue #13).
- Sequential Log.read (1 MiB fetches, whole batches) vs os.pread of the same ranges:
  target >= 0.9 (issue #13).

Like with like: both sides of a pair move the same bytes (the appended batches are as
long as the written ones; the reads cover the same ranges of the same file), on the
same file system (the test's tmp_path), through the page cache with no fsync on either
side, and every timed batch of appends starts from an empty log and an empty file
alike (setup). What only ours pays is its own work: validation and CRC-32C, offsets,
index entries (a 4 KiB index write every 512 appends), and a read's batch-boundary
lookups (an index search and two header reads).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from logstore import Log, LogConfig
from logstore.records import Record, build_batch

BATCH = 16 << 10
COUNT = 256  # 4 MiB a round


def _batch() -> bytes:
    value = os.urandom(BATCH - 61 - 40)
    data = build_batch([Record(b"key", value, [], 1_700_000_000_000)])
    return data


def test_log_append_vs_os_write(ratio, tmp_path: Path) -> None:
    data = _batch()
    state: dict = {}

    def setup() -> None:
        if "log" in state:
            state["log"].close()
            os.close(state["fd"])
        shutil.rmtree(tmp_path / "t-0", ignore_errors=True)
        state["log"] = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1 << 30))
        raw = tmp_path / "raw.log"
        state["fd"] = os.open(raw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def ours() -> None:
        append = state["log"].append
        for _ in range(COUNT):
            append(data)

    def baseline() -> None:
        fd = state["fd"]
        for _ in range(COUNT):
            os.write(fd, data)

    setup()
    ratio("Log.append 16 KiB batches", ours, baseline, target=0.8, setup=setup,
          unit_bytes=COUNT * len(data), baseline_label="os.write loop", rounds=15)
    state["log"].close()
    os.close(state["fd"])


def test_log_read_vs_pread(ratio, tmp_path: Path) -> None:
    data = _batch()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1 << 30))
    for _ in range(COUNT * 4):  # 16 MiB
        log.append(data)
    log.flush()
    seg = log.active_segment
    fd = os.open(seg.log_path, os.O_RDONLY)
    size = seg.size
    chunk = 1 << 20

    def ours() -> None:
        offset, end = 0, log.log_end_offset
        while offset < end:
            got = log.read(offset, chunk)
            offset += len(got) // len(data)

    # The same ranges as `ours` reads: the whole batches that fit in a chunk.
    whole = chunk // len(data) * len(data)

    def baseline() -> None:
        # Held while the next read runs, as in `ours` (a consumer keeps what it got
        # until it is done with it): both pay the same for the allocator's reuse.
        pos = 0
        while pos < size:
            got = os.pread(fd, whole, pos)
            pos += len(got)

    ratio("Log.read 1 MiB sequential", ours, baseline, target=0.9, unit_bytes=size,
          baseline_label="os.pread", rounds=15)
    os.close(fd)
    log.close()
