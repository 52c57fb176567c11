"""Integrity checks of one segment: its batches, and its indexes against its log.

Shared by `logkeeper dump-log` and the Spark audit. A `.log` is streamed through a
fixed buffer (logstore.scan), never read whole; the `.index`/`.timeindex` beside it
are checked by docs/formats.md's rules: the written entries (up to a preallocated,
zero-filled tail: logstore.index.read_written_entries) in order, offsets at or above the
segment base, positions inside the file, and each entry one Kafka's lookups are right
with. An offset entry (o, p): a batch starts at p and the batch before it ends below o,
so a lookup of o from p skips nothing, and o is not past the segment's last offset. It
need not be the last offset of the batch at p: a Kafka follower's append of a whole
fetched chunk maps the chunk's last offset to the position of its first batch. A time
entry's offset is inside a batch, at its end or, as older brokers wrote, at the record
holding its max timestamp, and the entry's timestamp is that batch's max. Problems are
returned, not raised; an OSError reading the files propagates to the caller.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import native
from native import BatchInfo, ScanResult, ScanStatus

from . import names
from .index import IndexFile, read_index_file
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
}


def verify_segment(
    log_path: str | os.PathLike[str],
    *,
    check_indexes: bool = True,
    buffer_size: int = DEFAULT_BUFFER,
    on_batch: Callable[[BatchInfo], None] | None = None,
    max_batch_size: int = 1 << 30,
    on_bad_batch: Callable[[BatchInfo], None] | None = None,
    on_batches: Callable[[ScanResult], None] | None = None,
    native_walk: bool = True,
) -> SegmentReport:
    """Scan one `.log`, call `on_batch` for each valid batch, check its indexes.

    A batch whose CRC fails but whose framing is intact is reported (`bad-crc`, with
    its base offset), passed to `on_bad_batch`, and the scan goes on after it, as
    Kafka's DumpLogSegments does; the report's status and valid_bytes still say where
    recovery would cut (the first such batch). Its offsets and timestamps are not
    trusted (the CRC covers them): the index entries naming it are not checked, and
    the offset order is checked again from the next valid batch. Where the scan stops
    early (torn tail, broken framing) the index entries past that point cannot be
    checked and are not reported: the stop is the finding.

    `on_batches` gets each chunk's valid batches at once (the ScanResult; the same
    batches `on_batch` gets one by one). Without `on_batch`, runs of batches with nothing
    to report are walked natively (native.VerifyWalk) and only the others one by one
    here; `native_walk=False` looks at every batch here (the reference the tests hold
    the native walk to).
    """
    path = Path(log_path)
    parsed = names.parse_segment_file(path.name)
    base = parsed[0] if parsed else 0
    report = SegmentReport(str(path), base)
    index_offsets, index_positions = array("q"), array("q")  # the offset index, ascending
    time_entries: list[tuple[int, int]] = []  # (absolute offset, timestamp), in order
    index_path = path.with_suffix(names.INDEX_SUFFIX)
    time_index_path = path.with_suffix(names.TIME_INDEX_SUFFIX)
    file_size = path.stat().st_size
    if check_indexes and index_path.exists():
        index_offsets, index_positions = _check_offset_index(index_path, base, file_size,
                                                             report)
    if check_indexes and time_index_path.exists():
        time_entries = _check_time_index(time_index_path, base, report)
    # The offset index is checked in position order, as the log is walked: entry
    # order[k] (file order) is the k-th by position, at_position[k]. Positions rise with
    # the offsets as Kafka writes them, and then both orders are the file's.
    in_position_order = native.ascending(index_positions)
    order: list[int] | None = None
    at_position = index_positions
    if not in_position_order:
        order = sorted(range(len(index_positions)), key=index_positions.__getitem__)
        at_position = array("q", [index_positions[i] for i in order])
    index_reported: set[int] = set()  # entries (file order) found wrong
    walk = (_native_walk(index_offsets, index_positions, time_entries)
            if native_walk and on_batch is None and in_position_order else None)
    # index_next: the first entry (position order) not yet checked against the log.
    walked = {"index_next": 0}
    # prev_last: the previous valid batch's last offset (None after a bad one);
    # next_time: the first time-index entry not yet matched; after_bad: the batch
    # before is a bad one, so entries below the next batch may be inside it.
    state: dict = {"prev_last": None, "next_time": 0, "after_bad": False, "bad": []}
    legacy: list[BatchInfo] = []  # old Kafka's magic 0/1 messages: the first, and a count
    legacy_count = 0

    def time_entries_below(offset: int) -> None:
        """Time-index entries below `offset` that no batch holds (unless a bad one may)."""
        j = state["next_time"]
        while j < len(time_entries) and time_entries[j][0] < offset:
            if not state["after_bad"]:
                entry_offset, ts = time_entries[j]
                report.problems.append(Problem(
                    "timeindex-mismatch", str(time_index_path), None, entry_offset,
                    f"time index entry ({ts}, {entry_offset}): no valid batch holds offset "
                    f"{entry_offset}"))
            j += 1
        state["next_time"] = j

    def visit(res: ScanResult) -> None:
        i, n = 0, len(res)
        while i < n:
            if walk is not None and state["prev_last"] is not None and not state["after_bad"]:
                i = walk_from(res, i)
                if i == n:
                    break
            visit_one(res[i])
            i += 1
        if on_batches is not None:
            on_batches(res)

    def walk_from(res: ScanResult, i: int) -> int:
        """The batches from i that the native walk finds nothing to say about, added to
        the report; returns the index of the first batch it stopped before."""
        assert walk is not None
        w = walk.state
        w.prev_last, w.max_timestamp = state["prev_last"], report.max_timestamp
        w.index_next, w.time_next = walked["index_next"], state["next_time"]
        w.batch_count = w.record_count = w.offset_gaps = 0
        end = walk.walk(res, i)
        if end > i:
            report.batch_count += w.batch_count
            report.record_count += w.record_count
            report.offset_gaps += w.offset_gaps
            report.max_timestamp = w.max_timestamp
            report.last_offset = state["prev_last"] = w.prev_last
            state["next_time"] = w.time_next
            walked["index_next"] = w.index_next  # each sound, at its batch's position
        return end

    def index_mismatch(i: int, why: str) -> None:
        offset, position = index_offsets[i], index_positions[i]
        index_reported.add(i)
        report.problems.append(Problem(
            "index-mismatch", str(index_path), position, offset,
            f"index maps offset {offset} to position {position}{why}"))

    def index_entries_to(position: int, prev: int | None) -> None:
        """Check the offset index entries up to `position`, where a batch starts (after
        one ending at `prev`; None: none, or one whose offsets are not trusted). An
        entry before it names no batch start; one at it is sound unless the batch
        before already reaches its offset (a lookup from there would skip that)."""
        k, n = walked["index_next"], len(at_position)
        while k < n and at_position[k] <= position:
            i = k if order is None else order[k]
            if at_position[k] < position:
                index_mismatch(i, ": no valid batch starts there")
            elif prev is not None and prev >= index_offsets[i]:
                index_mismatch(i, f", but the batch before that position ends at offset "
                                  f"{prev}: a lookup of {index_offsets[i]} from there "
                                  "skips the offsets up to it")
            k += 1
        walked["index_next"] = k

    def visit_one(b: BatchInfo) -> None:
        nonlocal legacy_count
        if report.first_offset is None:
            first_batch(b)
        if b.magic < 2:
            legacy_count += 1
            if not legacy:
                legacy.append(b)
        prev = state["prev_last"]
        # A compressed legacy wrapper's first offset is inside its value: only its
        # last is known, so the offsets before it are no gap.
        wrapper = b.magic < 2 and b.attributes & 7
        if prev is not None:
            if b.base_offset <= prev:
                report.problems.append(Problem(
                    "offset-overlap", str(path), b.position, b.base_offset,
                    f"batch at {b.position} starts at offset {b.base_offset}, not after "
                    f"the previous batch's last offset {prev}"))
            elif b.base_offset > prev + 1 and not wrapper:
                report.offset_gaps += 1
        state["prev_last"] = b.last_offset
        report.batch_count += 1
        report.record_count += b.records_count
        report.last_offset = b.last_offset
        report.max_timestamp = max(report.max_timestamp, b.max_timestamp)
        index_entries_to(b.position, prev)
        time_entries_below(b.base_offset)
        state["after_bad"] = False
        # An entry may name the batch's last offset or (older brokers) the record
        # holding its max timestamp, inside it: either way, that batch's max.
        j = state["next_time"]
        while j < len(time_entries) and time_entries[j][0] <= b.last_offset:
            entry_offset, ts = time_entries[j]
            if ts != b.max_timestamp:
                report.problems.append(Problem(
                    "timeindex-mismatch", str(time_index_path), b.position, entry_offset,
                    f"time index says offset {entry_offset} has timestamp {ts}, the max "
                    f"timestamp of the batch holding it (offsets {b.base_offset}-"
                    f"{b.last_offset}) is {b.max_timestamp}"))
            j += 1
        state["next_time"] = j
        if on_batch is not None:
            on_batch(b)

    def first_batch(b: BatchInfo) -> None:
        report.first_offset = b.base_offset
        if b.base_offset < base:
            report.problems.append(Problem(
                "offset-below-base", str(path), b.position, b.base_offset,
                f"first batch starts at offset {b.base_offset}, below the segment "
                f"base {base}"))

    def bad_crc(b: BatchInfo, res: ScanResult) -> None:
        if report.first_offset is None:
            first_batch(b)  # the base offset is outside the CRC, like the length
        state["bad"].append(b.position)
        report.problems.append(Problem(
            "bad-crc", str(path), b.position, b.base_offset, res.detail))
        # An entry at it has the right position; its offset cannot be checked.
        index_entries_to(b.position, None)
        time_entries_below(b.base_offset)
        state["prev_last"], state["after_bad"] = None, True
        if on_bad_batch is not None:
            on_bad_batch(b)

    fd = os.open(path, os.O_RDONLY)
    try:
        scan = scan_file(fd, buffer_size=buffer_size, on_batches=visit, path=str(path),
                         max_batch_size=max_batch_size, on_bad_crc=bad_crc, legacy=True)
        stop_offset = None
        if not scan.clean and scan.file_size - scan.valid_end >= 8:
            stop_offset = int.from_bytes(native.pread(fd, 8, scan.valid_end, path=str(path)),
                                         "big", signed=True)
    finally:
        os.close(fd)
    report.file_size = scan.file_size
    first_bad = state["bad"][0] if state["bad"] else None
    report.valid_bytes = scan.valid_end if first_bad is None else first_bad
    report.status = scan.status if first_bad is None else ScanStatus.BAD_CRC
    if legacy:
        first = legacy[0]
        report.legacy = True
        report.problems.append(Problem(
            "legacy-format", str(path), first.position, first.last_offset,
            f"{legacy_count} legacy (magic 0/1) message(s) from position {first.position}: "
            "old Kafka's format, checked (CRC-32) and served as they are", WARNING))
    if not scan.clean:
        report.problems.append(Problem(
            _STATUS_KIND.get(scan.status, "corrupt-batch"), str(path), scan.valid_end,
            stop_offset, scan.detail, ERROR))
    # The entries past the last batch start (inside it); past an early stop, nothing
    # could be checked: those entries are not findings.
    for k in range(walked["index_next"], len(at_position)):
        if not scan.clean and at_position[k] >= scan.valid_end:
            break
        index_mismatch(k if order is None else order[k], ": no valid batch starts there")
    if order is not None:
        # Each entry sound on its own, positions must still rise with the offsets (as
        # Kafka writes them, and as an index is read on open).
        prev_at = None
        for i, position in enumerate(index_positions):
            if i in index_reported:
                continue
            if prev_at is not None and position <= prev_at:
                index_mismatch(i, f": not past the position of the entry before it "
                                  f"({prev_at})")
            else:
                prev_at = position
    if scan.clean and not state["after_bad"] and report.last_offset is not None:
        # Offsets rise: the entries naming offsets the segment does not hold are last.
        i = len(index_offsets) - 1
        while i >= 0 and (i in index_reported or index_offsets[i] > report.last_offset):
            if i not in index_reported:
                index_mismatch(i, f", past the segment's last offset {report.last_offset}")
            i -= 1
    if scan.clean:
        time_entries_below(2**63 - 1)
    return report


def _native_walk(index_offsets: array, index_positions: array,
                 time_entries: list[tuple[int, int]]) -> native.VerifyWalk:
    """The native walk of a segment with these offset index entries (offsets and
    positions ascending)."""
    return native.VerifyWalk(index_offsets, index_positions,
                             array("q", [o for o, _ in time_entries]),
                             array("q", [ts for _, ts in time_entries]))


def _check_offset_index(index_path: Path, base: int, file_size: int,
                        report: SegmentReport) -> tuple[array, array]:
    """The offset index's entries worth checking against the log, as (absolute offsets,
    positions), ascending offsets; those out of order or outside the log are reported."""
    index = read_index_file(index_path, "offset")
    report.index_entries = index.count
    _stray_entry(index, index_path, "index-past-end", report,
                 lambda rel, pos: (pos, base + rel, f"({base + rel}, {pos})"))
    offsets, positions, in_order = native.decode_offset_index(index.data, base, file_size)
    if in_order:  # as Kafka writes them: nothing to report, no entry to leave out
        return offsets, positions
    kept_offsets, kept_positions = array("q"), array("q")
    prev = None
    for i, (offset, pos) in enumerate(zip(offsets, positions, strict=True)):
        if offset < base or (prev is not None and offset <= prev):
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
        kept_offsets.append(offset)
        kept_positions.append(pos)
    return kept_offsets, kept_positions


def _check_time_index(index_path: Path, base: int, report: SegmentReport
                      ) -> list[tuple[int, int]]:
    index = read_index_file(index_path, "time")
    report.time_index_entries = index.count
    _stray_entry(index, index_path, "timeindex-past-end", report,
                 lambda ts, rel: (None, base + rel, f"({ts}, {base + rel})"))
    out: list[tuple[int, int]] = []
    prev_ts = prev_off = None
    for i, (ts, rel) in enumerate(index.entries):
        offset = base + rel
        if rel < 0 or (prev_ts is not None and (ts <= prev_ts or offset < prev_off)):
            report.problems.append(Problem(
                "timeindex-order", str(index_path), None, offset,
                f"entry {i}: ({ts}, {offset}) does not follow ({prev_ts}, {prev_off})"))
            continue
        prev_ts, prev_off = ts, offset
        out.append((offset, ts))
    return out


def _stray_entry(index: IndexFile, index_path: Path, kind: str, report: SegmentReport,
                 describe: Callable[[int, int], tuple[int | None, int, str]]) -> None:
    """Report an entry after the all-zero one that ends the index: not preallocated
    space, but entries lost to a zeroed hole."""
    if index.stray is None:
        return
    number, fields = index.stray
    position, offset, shown = describe(*fields)
    report.problems.append(Problem(
        kind, str(index_path), position, offset,
        f"entry {number} {shown} follows the all-zero entry {index.count} that ends "
        f"the index: a hole among its entries, not preallocated space"))
