"""Integrity checks of one segment: its batches, and its indexes against its log.

Shared by `logkeeper dump-log` and the Spark audit. A `.log` is streamed through a
fixed buffer (logstore.scan), never read whole; the `.index`/`.timeindex` beside it
are checked by docs/formats.md's rules: entries in order, offsets at or above the segment
base, positions inside the file, and each entry naming a real batch (an offset entry's
batch ends at that offset and starts at that position; a time entry's batch ends at
that offset and has that max timestamp). Problems are returned, not raised; an OSError
reading the files propagates to the caller.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from native import BatchInfo, ScanResult, ScanStatus

from . import names
from .index import read_index_entries
from .scan import DEFAULT_BUFFER, scan_file

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    kind: str
    path: str
    position: int | None
    offset: int | None
    detail: str
    severity: str = ERROR


@dataclass
class SegmentReport:
    path: str
    base_offset: int
    file_size: int = 0
    batch_count: int = 0
    record_count: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    valid_bytes: int = 0
    status: ScanStatus = ScanStatus.OK
    problems: list[Problem] = field(default_factory=list)
    legacy: bool = False
    max_timestamp: int = -1
    offset_gaps: int = 0
    index_entries: int | None = None
    time_index_entries: int | None = None

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def ok(self) -> bool:
        return not self.errors


_STATUS_KIND = {
    ScanStatus.TORN: "torn-tail",
    ScanStatus.BAD_CRC: "bad-crc",
    ScanStatus.BAD_LENGTH: "corrupt-batch",
    ScanStatus.BAD_MAGIC: "corrupt-batch",
    ScanStatus.BAD_COUNT: "corrupt-batch",
    ScanStatus.LEGACY: "legacy-format",
}


def verify_segment(
    log_path: str | os.PathLike[str],
    *,
    check_indexes: bool = True,
    buffer_size: int = DEFAULT_BUFFER,
    on_batch: Callable[[BatchInfo], None] | None = None,
    max_batch_size: int = 1 << 30,
) -> SegmentReport:
    """Scan one `.log`, call `on_batch` for each valid batch, check its indexes."""
    path = Path(log_path)
    parsed = names.parse_segment_file(path.name)
    base = parsed[0] if parsed else 0
    report = SegmentReport(str(path), base)
    offset_entries: dict[int, int] = {}  # absolute offset -> expected batch position
    time_entries: dict[int, int] = {}  # absolute offset -> expected max timestamp
    index_path = path.with_suffix(names.INDEX_SUFFIX)
    time_index_path = path.with_suffix(names.TIME_INDEX_SUFFIX)
    file_size = path.stat().st_size
    if check_indexes and index_path.exists():
        offset_entries = _check_offset_index(index_path, base, file_size, report)
    if check_indexes and time_index_path.exists():
        time_entries = _check_time_index(time_index_path, base, report)
    seen_at: dict[int, int] = {}  # positions named by the index -> last offset found there
    wanted_positions = set(offset_entries.values())
    state = {"prev_last": None}

    def visit(res: ScanResult) -> None:
        for b in res:
            if report.first_offset is None:
                report.first_offset = b.base_offset
                if b.base_offset < base:
                    report.problems.append(Problem(
                        "offset-below-base", str(path), b.position, b.base_offset,
                        f"first batch starts at offset {b.base_offset}, below the segment "
                        f"base {base}"))
            prev = state["prev_last"]
            if prev is not None:
                if b.base_offset <= prev:
                    report.problems.append(Problem(
                        "offset-overlap", str(path), b.position, b.base_offset,
                        f"batch at {b.position} starts at offset {b.base_offset}, not after "
                        f"the previous batch's last offset {prev}"))
                elif b.base_offset > prev + 1:
                    report.offset_gaps += 1
            state["prev_last"] = b.last_offset
            report.batch_count += 1
            report.record_count += b.records_count
            report.last_offset = b.last_offset
            report.max_timestamp = max(report.max_timestamp, b.max_timestamp)
            if b.position in wanted_positions:
                seen_at[b.position] = b.last_offset
            expected_pos = offset_entries.pop(b.last_offset, None)
            if expected_pos is not None and expected_pos != b.position:
                report.problems.append(Problem(
                    "index-mismatch", str(index_path), expected_pos, b.last_offset,
                    f"index maps offset {b.last_offset} to position {expected_pos}, but the "
                    f"batch ending there starts at {b.position}"))
            expected_ts = time_entries.pop(b.last_offset, None)
            if expected_ts is not None and expected_ts != b.max_timestamp:
                report.problems.append(Problem(
                    "timeindex-mismatch", str(time_index_path), b.position, b.last_offset,
                    f"time index says offset {b.last_offset} has timestamp {expected_ts}, the "
                    f"batch's max timestamp is {b.max_timestamp}"))
            if on_batch is not None:
                on_batch(b)

    fd = os.open(path, os.O_RDONLY)
    try:
        scan = scan_file(fd, buffer_size=buffer_size, on_batches=visit, path=str(path),
                         max_batch_size=max_batch_size)
    finally:
        os.close(fd)
    report.file_size = scan.file_size
    report.valid_bytes = scan.valid_end
    report.status = scan.status
    if scan.status is not ScanStatus.OK:
        report.legacy = scan.status is ScanStatus.LEGACY
        report.problems.append(Problem(
            _STATUS_KIND.get(scan.status, "corrupt-batch"), str(path), scan.valid_end, None,
            scan.detail, WARNING if report.legacy else ERROR))
    for offset, position in sorted(offset_entries.items()):
        found = seen_at.get(position)
        where = (f"the batch there ends at offset {found}" if found is not None
                 else "no valid batch starts there")
        report.problems.append(Problem(
            "index-mismatch", str(index_path), position, offset,
            f"index maps offset {offset} to position {position}: {where}"))
    for offset, ts in sorted(time_entries.items()):
        report.problems.append(Problem(
            "timeindex-mismatch", str(time_index_path), None, offset,
            f"time index entry ({ts}, {offset}): no valid batch ends at offset {offset}"))
    return report


def _check_offset_index(index_path: Path, base: int, file_size: int,
                        report: SegmentReport) -> dict[int, int]:
    entries = read_index_entries(index_path, "offset")
    report.index_entries = len(entries)
    out: dict[int, int] = {}
    prev = None
    for i, (rel, pos) in enumerate(entries):
        offset = base + rel
        if rel < 0 or (prev is not None and offset <= prev):
            report.problems.append(Problem(
                "index-offset-order", str(index_path), pos, offset,
                f"entry {i}: offset {offset} is not above the previous entry "
                f"({prev}) and the base ({base})"))
            continue
        if pos < 0 or pos >= file_size:
            report.problems.append(Problem(
                "index-position", str(index_path), pos, offset,
                f"entry {i}: position {pos} is outside the {file_size}-byte log"))
            continue
        prev = offset
        out[offset] = pos
    return out


def _check_time_index(index_path: Path, base: int, report: SegmentReport) -> dict[int, int]:
    entries = read_index_entries(index_path, "time")
    report.time_index_entries = len(entries)
    out: dict[int, int] = {}
    prev_ts = prev_off = None
    for i, (ts, rel) in enumerate(entries):
        offset = base + rel
        if rel < 0 or (prev_ts is not None and (ts <= prev_ts or offset < prev_off)):
            report.problems.append(Problem(
                "timeindex-order", str(index_path), None, offset,
                f"entry {i}: ({ts}, {offset}) does not follow ({prev_ts}, {prev_off})"))
            continue
        prev_ts, prev_off = ts, offset
        out[offset] = ts
    return out
