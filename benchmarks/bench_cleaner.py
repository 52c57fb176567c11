"""The log cleaner against reading the same bytes, timed in the same run.

- One whole clean (key map, filter, rewrite, index, swap) of a compacted log of
  8 MiB in 1 MiB segments (2000 keys, 200-byte values, 10 records a batch,
  uncompressed) vs `Log.read` of the same segments in 1 MiB fetches. The ratio is the
  cleaner's throughput over the read's (bytes/s of log cleaned against bytes/s read):
  how much of the disk-read speed the cleaner keeps. Reported, no target.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from logstore import LogConfig, LogDir
from logstore.cleaner import LogDirCleaner
from logstore.records import Record, build_batch

NOW = 1_700_000_000_000
KEYS = 2000
VALUE = 200
TOTAL = 8 << 20
CONFIG = LogConfig(compacted=True, segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.1)


def _write(root: Path) -> int:
    ld = LogDir.open(root, CONFIG)
    log = ld.create_log("state", 0)
    i = 0
    while log.size_bytes < TOTAL:
        recs = [Record(f"key-{(i + j) % KEYS}".encode(), bytes([j]) * VALUE, [], NOW + i + j)
                for j in range(10)]
        log.append(build_batch(recs))
        i += 10
    log.roll()
    log.high_watermark = log.log_end_offset
    size = log.size_bytes
    ld.close()
    return size


def test_cleaner_vs_log_read(ratio, tmp_path: Path) -> None:
    template = tmp_path / "template"
    size = _write(template)
    work = tmp_path / "work"
    state: dict = {}

    def setup() -> None:
        if "ld" in state:
            state["ld"].close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(template, work)
        state["ld"] = LogDir.open(work, CONFIG)

    def ours() -> None:
        assert LogDirCleaner(state["ld"]).run(NOW) == 1

    reader = LogDir.open(tmp_path / "template", CONFIG)
    log = reader.get_log("state", 0)

    def baseline() -> None:
        offset = 0
        read = 0
        end = log.segments[-1].base_offset
        while offset < end:
            data = log.read(offset, 1 << 20, max_offset=end)
            read += len(data)
            offset = _next(data)
        assert read >= size * 0.99

    setup()
    ratio("log cleaner, 8 MiB compacted log", ours, baseline, setup=setup, unit_bytes=size,
          baseline_label="Log.read of the same segments", rounds=7)
    state["ld"].close()
    reader.close()


def _next(data: bytes) -> int:
    """The offset after the last batch in `data` (whole batches)."""
    pos = last = 0
    while pos < len(data):
        last = pos
        pos += int.from_bytes(data[pos + 8:pos + 12], "big") + 12
    base = int.from_bytes(data[last:last + 8], "big")
    return base + int.from_bytes(data[last + 23:last + 27], "big") + 1
