"""The audit's findings, one topic-partition at a time, in plain Python (no Spark).

The findings pass (transforms.audit) groups the scan's rows by (topic, partition) and
calls `audit_partitions` in each Spark task; everything that decides a finding, its
severity and its detail is here, so it runs (and is tested) without Spark. Rows come
and go as tuples in the column order of spark_audit.schema's tables (the NamedTuples
below name those columns; tests/test_audit_findings.py checks they agree).

What counts as an error or a warning is decided in one place, `severity`:

- errors: corruption (CRC, framing), index disagreement, offset overlaps, replica
  divergence, a replica missing offsets the others have, a gap in a partition that is
  not compacted, a torn tail on a segment that is not the active (last) one;
  checkpoints (recovery point, log start) ahead of the log's end;
- warnings: a gap in a compacted partition, a checkpoint entry with no partition dir,
  a torn tail on the active (last) segment (a write cut short, which Kafka's recovery
  truncates; its detail says when the dir was shut down cleanly or the tail lies below
  the recovery point, where the lost bytes had been flushed), a high watermark ahead of
  the log end in such a dir, legacy (magic 0/1) batches, a partition dir with no
  segment, a segment deleted between listing and scan.

Replicas are the logs of one topic-partition in log dirs of one cluster: dirs whose
meta.properties name the same cluster.id. Dirs that name none (a logkeeper dir made
without a cluster id, a copy without meta.properties) form one group of their own:
compared with each other, never with a named cluster's. Two clusters that both have a
topic "orders" hold unrelated data, so replicas are never compared across clusters.

A topic is compacted when it is a Kafka-internal compacted topic, named with
--compacted, listed in a cleaner-offset-checkpoint, or any of its logs shows offsets
missing inside a segment (compaction removes records, never whole offsets ranges in a
plain log). Replicas of compacted topics are not compared: each broker compacts on its
own schedule, so their batches legitimately differ.

One fault, one finding: where a segment's scan stops early (corruption, torn tail)
its end is unknown, so no gap is reported after it and no checkpoint is compared with
it (index entries beyond the stop are not reported by logstore.verify either: they
could not be checked).

Memory: a partition's batch fingerprints stay packed (32 bytes per batch per replica;
about three times that for the one replica being unpacked into arrays), never a Python
object per batch, except where replicas disagree: the batches between the first and
the last disagreement (all of them when a replica's batches are out of order, as with
overlapping segments) are compared one by one, a tuple each. Nothing here raises on
data.
"""

from __future__ import annotations

import bisect
import heapq
import operator
import re
import struct
import sys
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import groupby, islice
from typing import NamedTuple

ERROR = "error"
WARNING = "warning"
OK = "OK"
INTERNAL_COMPACTED_TOPICS = ("__consumer_offsets", "__transaction_state")
RECOVERY_POINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
CLEANER = "cleaner-offset-checkpoint"
# Kinds that are warnings whatever the context.
WARNING_KINDS = ("legacy-format", "checkpoint-orphan", "no-segments", "vanished")

# A batch's fingerprint as the scan packs it (io.scan_segments): big-endian int64s.
FINGERPRINT_FIELDS = ("position", "base_offset", "last_offset", "crc")
FINGERPRINT = struct.Struct(">" + "q" * len(FINGERPRINT_FIELDS))

# The reports list this many findings, the first in LISTED_ORDER (nulls first).
MAX_LISTED = 2000
LISTED_ORDER = ("severity", "host", "dir", "topic", "partition", "file", "offset_start", "kind")


# ---- rows (the columns of spark_audit.schema's tables) -------------------------------


class Segment(NamedTuple):  # schema.SEGMENTS
    host: str
    dir: str
    topic: str
    partition: int
    file: str
    base_offset: int
    file_size: int
    batch_count: int
    record_count: int
    first_offset: int | None
    last_offset: int | None
    valid_bytes: int
    status: str
    legacy: bool
    max_timestamp: int
    offset_gaps: int | None
    index_entries: int | None
    time_index_entries: int | None
    scan_seconds: float


class Problem(NamedTuple):  # schema.PROBLEMS
    host: str
    dir: str
    topic: str | None
    partition: int | None
    file: str | None
    kind: str
    severity: str
    position: int | None
    offset: int | None
    detail: str


class PartitionDir(NamedTuple):  # schema.PARTITIONS
    host: str
    dir: str
    topic: str
    partition: int
    segment_files: int


class CheckpointEntry(NamedTuple):  # schema.CHECKPOINTS
    host: str
    dir: str
    checkpoint: str
    topic: str
    partition: int
    offset: int


class Dir(NamedTuple):  # schema.DIRS
    host: str
    dir: str
    readable: bool | None
    clean_shutdown: bool | None
    broker_id: str | None
    detail: str | None
    cluster_id: str | None


class Finding(NamedTuple):  # schema.FINDINGS
    host: str | None
    dir: str | None
    topic: str | None
    partition: int | None
    file: str | None
    position: int | None
    offset_start: int | None
    offset_end: int | None
    kind: str
    severity: str | None
    detail: str | None



# ---- what the driver knows before the pass -------------------------------------------


def compacted_topics(named: Iterable[str], cleaned: Iterable[str],
                     gapped: Iterable[str]) -> dict[str, str]:
    """topic -> why its offsets may legitimately have gaps (reasons sorted, "; ")."""
    reasons: dict[str, set[str]] = defaultdict(set)
    for topics, reason in ((INTERNAL_COMPACTED_TOPICS, "Kafka internal compacted topic"),
                           (named, "named with --compacted"),
                           (cleaned, "in a cleaner-offset-checkpoint"),
                           (gapped, "offsets missing inside a segment")):
        for topic in topics:
            reasons[topic].add(reason)
    return {topic: "; ".join(sorted(r)) for topic, r in reasons.items()}


@dataclass(frozen=True)
class Facts:
    """What every task of the pass needs to know beyond its partition's rows: the log
    dirs, and what makes a topic compacted."""

    dirs: tuple[Dir, ...]  # schema.DIRS rows
    cleaned: frozenset[str]  # topics in a cleaner-offset-checkpoint
    gapped: frozenset[str]  # topics with a segment missing offsets inside (inside_gaps)
    named: tuple[str, ...] = ()  # --compacted

    @cached_property
    def compacted(self) -> dict[str, str]:
        """topic -> reason (compacted_topics)."""
        return compacted_topics(self.named, self.cleaned, self.gapped)

    @cached_property
    def by_place(self) -> dict[tuple[str, str], Dir]:
        """(host, dir) -> its Dir row."""
        return {(d.host, d.dir): d for d in self.dirs}


# ---- one partition's rows ------------------------------------------------------------


@dataclass
class PartitionRows:
    """The scan's rows of one topic-partition (every host and dir), as the pass groups
    them. Fingerprints stay packed: (host, dir) -> file -> FINGERPRINT entries."""

    segments: list[Segment] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    dirs: list[PartitionDir] = field(default_factory=list)
    checkpoints: list[CheckpointEntry] = field(default_factory=list)
    fingerprints: dict[tuple[str, str], dict[str, bytearray]] = field(default_factory=dict)

    def add(self, tagged: tuple[str, tuple]) -> PartitionRows:
        """Add one tagged row: ("segments" | "problems" | "partitions" | "checkpoints",
        its table's row), ("fingerprints", schema.FINGERPRINTS row) or ("batches",
        schema.BATCHES row, packed here)."""
        tag, row = tagged
        if tag == "segments":
            self.segments.append(Segment._make(row))
        elif tag == "problems":
            self.problems.append(Problem._make(row))
        elif tag == "partitions":
            self.dirs.append(PartitionDir._make(row))
        elif tag == "checkpoints":
            self.checkpoints.append(CheckpointEntry._make(row))
        elif tag == "fingerprints":
            host, dir_, _topic, _partition, file, packed = row
            self._packed(host, dir_, file).extend(packed)
        elif tag == "batches":
            host, dir_, _topic, _partition, file, *fingerprint = row
            self._packed(host, dir_, file).extend(FINGERPRINT.pack(*fingerprint))
        else:
            raise ValueError(f"unknown row tag {tag!r}")
        return self

    def merge(self, other: PartitionRows) -> PartitionRows:
        self.segments += other.segments
        self.problems += other.problems
        self.dirs += other.dirs
        self.checkpoints += other.checkpoints
        for log, files in other.fingerprints.items():
            for file, packed in files.items():
                self._packed(*log, file).extend(packed)
        return self

    def _packed(self, host: str, dir_: str, file: str) -> bytearray:
        return self.fingerprints.setdefault((host, dir_), {}).setdefault(file, bytearray())


def rows_of(tagged: tuple[str, tuple]) -> PartitionRows:
    """A PartitionRows holding one tagged row (PartitionRows.add)."""
    return PartitionRows().add(tagged)


# ---- one log -------------------------------------------------------------------------


@dataclass
class Log:
    """One log (host, dir, topic, partition) with segments: its extent and context.

    valid_end: the offset after the last valid batch of the active (last) segment;
    log_end: the same when that segment scanned to its end, else None (unknown).
    """

    host: str
    dir: str
    segments: list[Segment]  # by base offset
    checkpoints: dict[str, int]  # checkpoint file -> offset
    clean_shutdown: bool
    cluster: str
    compacted: bool

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def first_offset(self) -> int | None:
        return min((s.first_offset for s in self.segments
                    if s.batch_count > 0 and s.first_offset is not None), default=None)

    @property
    def valid_end(self) -> int:
        a = self.active
        return a.last_offset + 1 if a.batch_count > 0 else a.base_offset

    @property
    def log_end(self) -> int | None:
        return self.valid_end if self.active.status == OK else None

    @property
    def recovery_point(self) -> int | None:
        return self.checkpoints.get(RECOVERY_POINT)

    @property
    def high_watermark(self) -> int | None:
        return self.checkpoints.get(HIGH_WATERMARK)

    @property
    def log_start(self) -> int | None:
        return self.checkpoints.get(LOG_START)


def _logs(rows: PartitionRows, dirs: dict[tuple[str, str], Dir],
          compacted: bool) -> dict[tuple[str, str], Log]:
    segments: dict[tuple[str, str], list[Segment]] = defaultdict(list)
    for s in rows.segments:
        segments[(s.host, s.dir)].append(s)
    offsets: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for c in rows.checkpoints:
        if c.offset is not None:
            seen = offsets[(c.host, c.dir)]
            seen[c.checkpoint] = max(seen.get(c.checkpoint, c.offset), c.offset)
    logs = {}
    for (host, dir_), segs in segments.items():
        d = dirs.get((host, dir_))
        logs[(host, dir_)] = Log(host, dir_, sorted(segs, key=operator.attrgetter("base_offset")),
                                 offsets.get((host, dir_), {}),
                                 bool(d and d.clean_shutdown), (d and d.cluster_id) or "",
                                 compacted)
    return logs


def _gaps(topic: str, partition: int, log: Log) -> Iterator[Finding]:
    """Gaps and overlaps between consecutive segments of a log, and offsets missing
    inside a segment (one finding per segment, as a compacted log has many)."""
    prev = None
    for s in (s for s in log.segments if s.batch_count > 0):
        here = (log.host, log.dir, topic, partition, s.file)
        if prev is not None and s.base_offset <= prev.last_offset:
            yield Finding(*here, 0, s.base_offset, min(prev.last_offset, s.last_offset),
                          "offset-overlap", None,
                          f"segment {s.file} starts at offset {s.base_offset}, but the previous "
                          f"segment {prev.file} already holds offsets up to {prev.last_offset}")
        if prev is not None and s.base_offset > prev.last_offset + 1 and prev.status == OK:
            yield Finding(*here, None, prev.last_offset + 1, s.base_offset - 1, "offset-gap", None,
                          f"offsets {prev.last_offset + 1}-{s.base_offset - 1} are in no segment: "
                          f"{prev.file} ends at {prev.last_offset}, {s.file} starts at "
                          f"{s.base_offset}")
        missing = inside_gaps(s)
        if missing:
            yield Finding(*here, None, s.base_offset, s.last_offset, "offset-gap", None,
                          f"{missing} gap(s) in the offsets inside {s.file} (base {s.base_offset}, "
                          f"batches from {s.first_offset} to {s.last_offset}): compaction")
        prev = s


def inside_gaps(s: Segment) -> int:
    """Offset gaps inside a segment: between its batches, and before its first batch.
    (transforms.collect_facts looks for either in every segment, in SQL.)"""
    if s.offset_gaps is None:
        return 0
    head = s.first_offset is not None and s.first_offset > s.base_offset
    return s.offset_gaps + head


def _checkpoint_findings(topic: str, partition: int, rows: PartitionRows,
                         logs: dict[tuple[str, str], Log]) -> Iterator[Finding]:
    """Checkpoint entries without a partition dir; checkpoints ahead of a log's end;
    partition dirs without segments; a partition in two dirs of one host."""
    present = {(d.host, d.dir) for d in rows.dirs}
    orphans: dict[tuple[str, str], set[str]] = defaultdict(set)
    for c in rows.checkpoints:
        if (c.host, c.dir) not in present:
            orphans[(c.host, c.dir)].add(c.checkpoint)
    for (host, dir_), files in orphans.items():
        yield Finding(host, dir_, topic, partition, None, None, None, None, "checkpoint-orphan",
                      None, f"{topic}-{partition} is listed in {', '.join(sorted(files))} but "
                            f"has no directory in this log dir")
    for log in logs.values():
        end = log.log_end
        if end is None:
            continue
        flushed = [x for x in (log.recovery_point, log.log_start) if x is not None]
        if flushed and max(flushed) > end:
            claimed = max(flushed)
            yield Finding(log.host, log.dir, topic, partition, log.active.file, None, end,
                          claimed - 1, "checkpoint-ahead", None,
                          f"the log ends at offset {end} but its checkpoints say recovery point "
                          f"{_or_dash(log.recovery_point)}, log start {_or_dash(log.log_start)}: "
                          f"offsets {end}-{claimed - 1} that were flushed are gone")
        hw = log.high_watermark
        if hw is not None and hw > end:
            yield Finding(log.host, log.dir, topic, partition, log.active.file, None, end, hw - 1,
                          "hw-ahead", None,
                          f"the log ends at offset {end}, below its high watermark {hw} in "
                          f"replication-offset-checkpoint")
    for d in rows.dirs:
        if d.segment_files == 0:
            yield Finding(d.host, d.dir, topic, partition, None, None, None, None, "no-segments",
                          None, f"partition dir {topic}-{partition} holds no .log segment")
    dirs_of: dict[str, set[str]] = defaultdict(set)
    for d in rows.dirs:
        dirs_of[d.host].add(d.dir)
    for host, dirs in dirs_of.items():
        if len(dirs) > 1:
            ordered = sorted(dirs)
            yield Finding(host, ",".join(ordered), topic, partition, None, None, None, None,
                          "duplicate-log", None,
                          f"{topic}-{partition} has a directory in {len(ordered)} log dirs of "
                          f"{host}: {', '.join(ordered)}")


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


# ---- replicas ------------------------------------------------------------------------


class Fingerprints:
    """One replica's batch fingerprints, column by column (array('q') each), in the
    order of its files (by name: by base offset) and of each file's batches."""

    def __init__(self, by_file: dict[str, bytearray]) -> None:
        packed = array("q")
        self.files: list[str] = []
        self.starts: list[int] = []  # index of each file's first batch
        for file in sorted(by_file):
            self.files.append(file)
            self.starts.append(len(packed) // len(FINGERPRINT_FIELDS))
            packed.frombytes(by_file.pop(file))  # each chunk freed once copied
        if sys.byteorder == "little":
            packed.byteswap()
        n = len(FINGERPRINT_FIELDS)
        self.positions, self.bases, self.lasts, self.crcs = (packed[k::n] for k in range(n))

    def __len__(self) -> int:
        return len(self.bases)

    def in_order(self) -> bool:
        """Each batch ends at or after its base offset and before the next one starts
        (so base and last offsets both increase)."""
        return (all(map(operator.le, self.bases, self.lasts))
                and all(map(operator.lt, self.lasts, islice(self.bases, 1, None))))

    def holder(self, host: str, dir_: str, i: int) -> tuple[str, str, str, int]:
        """(host, dir, file, position) of batch i."""
        return host, dir_, self.files[bisect.bisect_right(self.starts, i) - 1], self.positions[i]


NO_FINGERPRINTS = Fingerprints({})
_BLOCK = 1 << 16  # batches compared at once (as arrays) while looking for a disagreement


def _same(prints: list[Fingerprints], starts: list[int], n: int) -> bool:
    """Whether every replica holds the same n batches (offsets and CRCs) from starts."""
    first, s0 = prints[0], starts[0]
    for fp, s in zip(prints[1:], starts[1:], strict=True):
        for mine, theirs in ((first.bases, fp.bases), (first.lasts, fp.lasts),
                             (first.crcs, fp.crcs)):
            if mine[s0:s0 + n] != theirs[s:s + n]:
                return False
    return True


def _agreeing(prints: list[Fingerprints], ranges: list[tuple[int, int]], limit: int, *,
              from_end: bool) -> int:
    """How many batches every replica holds alike at the head (or the tail) of its
    range, at most limit: blocks compared as arrays, then a binary search in the block
    where they first differ."""
    def same(done: int, n: int) -> bool:
        starts = [e - done - n for _s, e in ranges] if from_end else [s + done for s, _e in ranges]
        return _same(prints, starts, n)

    done = 0
    while done < limit:
        n = min(_BLOCK, limit - done)
        if not same(done, n):
            lo, hi = 0, n - 1  # the longest agreeing run inside this block
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if same(done, mid):
                    lo = mid
                else:
                    hi = mid - 1
            return done + lo
        done += n
    return done


@dataclass
class _Island:
    """Consecutive base offsets where replicas do not all agree."""

    start: int
    end: int
    divergent: int = 0
    what: str = ""
    first: list[tuple[str, str, str, int]] = field(default_factory=list)
    who: set[tuple[str, str]] = field(default_factory=set)


def _divergence(topic: str, partition: int, reps: list[Log], prints: list[Fingerprints],
                lo: int, hi: int) -> Iterator[Finding]:
    """Replicas that disagree on the batches at the same offsets.

    Per base offset in the shared range (batches with base >= lo and last <= hi),
    batches are grouped by (last offset, CRC); more than one group is a divergence. The
    hosts named are those outside the largest group (all of them on a tie). Consecutive
    base offsets where replicas do not all agree (including those where batch boundaries
    no longer line up, or a batch is missing) make one finding when any of them
    diverges; an offset that every replica holds alike ends it.
    """
    if all(fp.in_order() for fp in prints):
        # Batches are in order: each replica's shared range is one run of its batches.
        # Leading and trailing batches all replicas hold alike are agreed offsets, so
        # only the batches between them are compared one by one.
        ranges = [(bisect.bisect_left(fp.bases, lo), bisect.bisect_right(fp.lasts, hi))
                  for fp in prints]
        ranges = [(s, max(s, e)) for s, e in ranges]
        shortest = min(e - s for s, e in ranges)
        head = _agreeing(prints, ranges, shortest, from_end=False)
        tail = _agreeing(prints, [(s + head, e) for s, e in ranges], shortest - head,
                         from_end=True)
        picked = [range(s + head, e - tail) for s, e in ranges]
    else:
        picked = [[i for i in range(len(fp)) if fp.bases[i] >= lo and fp.lasts[i] <= hi]
                  for fp in prints]
    batches = sorted(((fp.bases[i], fp.lasts[i], fp.crcs[i], fp.holder(r.host, r.dir, i))
                      for r, fp, indexes in zip(reps, prints, picked, strict=True) for i in indexes),
                     key=operator.itemgetter(0))
    island = None
    for base, same_base in groupby(batches, key=operator.itemgetter(0)):
        groups: dict[tuple[int, int], list[tuple[str, str, str, int]]] = defaultdict(list)
        present = 0
        for _base, last, crc, holder in same_base:
            groups[(last, crc)].append(holder)
            present += 1
        if len(groups) == 1 and present == len(reps):  # every replica agrees here
            if island is not None and island.divergent:
                yield _divergence_finding(topic, partition, island)
            island = None
            continue
        fps = sorted((last, crc, len(h), sorted(h)) for (last, crc), h in groups.items())
        end = max(last for last, *_ in fps)
        if island is None:
            island = _Island(base, end)
        island.end = max(island.end, end)
        if len(groups) > 1:
            most = max(cnt for _l, _c, cnt, _h in fps)
            dissent = [h for _l, _c, cnt, hs in fps if cnt < most for h in hs] or \
                [h for *_x, hs in fps for h in hs]
            if not island.divergent:
                island.first = dissent
                island.what = f"at offset {base}: " + "; ".join(
                    f"{'+'.join(h[0] for h in hs)}: last offset {last}, crc {crc:08x}"
                    for last, crc, _cnt, hs in fps)
            island.divergent += 1
            island.who.update((h[0], h[1]) for h in dissent)
    if island is not None and island.divergent:
        yield _divergence_finding(topic, partition, island)


def _divergence_finding(topic: str, partition: int, island: _Island) -> Finding:
    who = sorted(island.who)
    single = len(who) == 1
    return Finding(",".join(h for h, _d in who), ",".join(dict.fromkeys(d for _h, d in who)),
                   topic, partition, island.first[0][2] if single else None,
                   island.first[0][3] if single else None, island.start, island.end,
                   "replica-divergence", None,
                   f"replicas of {topic}-{partition} disagree on offsets {island.start}-"
                   f"{island.end} ({island.divergent} differing batches); first {island.what}")


def _missing(topic: str, partition: int, reps: list[Log],
             common_hw: int | None) -> Iterator[Finding]:
    """A replica that lacks offsets other replicas hold below the common high watermark,
    at or above its own log start (log-start-offset-checkpoint): segments lost at its
    head. Holes inside a log are its offset-gap findings; a short tail is hw-ahead."""
    for a in reps:
        if a.log_start is None:
            continue
        spans = []
        for b in reps:
            if (a.host, a.dir) == (b.host, b.dir):
                continue
            lo = max(a.log_start, b.first_offset)
            hi = min(x for x in (a.first_offset - 1, b.valid_end - 1,
                                 None if common_hw is None else common_hw - 1) if x is not None)
            if lo <= hi:
                spans.append((lo, hi, b.host))
        if spans:
            lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
            peers = ",".join(sorted({s[2] for s in spans}))
            yield Finding(a.host, a.dir, topic, partition, None, None, lo, hi, "replica-missing",
                          None, f"this replica starts at offset {a.first_offset} though its "
                                f"log-start-offset-checkpoint says {a.log_start}; offsets "
                                f"{lo}-{hi} are held by {peers}")


def _replica_findings(topic: str, partition: int, logs: dict[tuple[str, str], Log],
                      rows: PartitionRows) -> Iterator[Finding]:
    """Replicas (logs of this partition on more than one host of one cluster, not
    compacted, with a batch) compared over the offsets all of them hold below their
    common high watermark; and replicas missing their head."""
    clusters: dict[str, list[Log]] = defaultdict(list)
    for log in logs.values():
        if not log.compacted and log.first_offset is not None:
            clusters[log.cluster].append(log)
    for reps in clusters.values():
        if len({r.host for r in reps}) < 2:
            continue
        hws = [r.high_watermark for r in reps if r.high_watermark is not None]
        common_hw = min(hws, default=None)
        lo = max(r.first_offset for r in reps)
        hi = min(r.valid_end - 1 for r in reps)
        if common_hw is not None:
            hi = min(hi, common_hw - 1)
        prints = [Fingerprints(rows.fingerprints[(r.host, r.dir)])
                  if (r.host, r.dir) in rows.fingerprints else NO_FINGERPRINTS for r in reps]
        yield from _divergence(topic, partition, reps, prints, lo, hi)
        yield from _missing(topic, partition, reps, common_hw)


# ---- severity ------------------------------------------------------------------------


def severity(f: Finding, log: Log | None) -> Finding:
    """The finding with its severity set from its kind and its log's context (the
    policy in the module docstring); a torn tail's detail says what the severity
    could not: why it matters."""
    clean = log is not None and log.clean_shutdown
    active = log is not None and f.file is not None and f.file == log.active.file
    kind = f.kind
    detail = f.detail
    if kind in WARNING_KINDS:
        level = WARNING
    elif kind == "torn-tail":
        # Only the position decides (issue 5: a torn tail on the active segment is a
        # warning); the context a reader needs to judge it goes into the detail.
        level = WARNING if active else ERROR
        if detail is not None:
            if not active:
                detail += " (not the active segment)"
            elif clean:
                detail += " (the log dir was shut down cleanly)"
            elif log.recovery_point is not None and log.recovery_point > log.valid_end:
                detail += f" (below the recovery point {log.recovery_point}: flushed data is lost)"
    elif kind == "offset-gap":
        level = WARNING if log is not None and log.compacted else ERROR
    elif kind == "hw-ahead":
        level = ERROR if clean else WARNING
    else:
        level = ERROR
    return f._replace(severity=level, detail=detail)


# ---- the pass ------------------------------------------------------------------------

_INDEX_FILE = re.compile(r"\.(index|timeindex)$")


def partition_findings(key: tuple[str | None, int | None], rows: PartitionRows,
                       facts: Facts) -> tuple[list[Finding], list[tuple]]:
    """Every finding of one topic-partition, with its severity, and its segments'
    summaries (schema.SEGMENT_SUMMARIES rows). Problems without a topic (a dir that
    cannot be listed, an unreadable checkpoint file) come as the partition (None, None).
    The packed fingerprints are taken out of `rows` as they are unpacked."""
    topic, partition = key
    compacted = topic in facts.compacted
    logs = _logs(rows, facts.by_place, compacted)
    raw: list[Finding] = [Finding(p.host, p.dir, p.topic, p.partition, p.file, p.position,
                                  p.offset, p.offset, p.kind, p.severity, p.detail)
                          for p in rows.problems]
    for log in logs.values():
        raw += _gaps(topic, partition, log)
    raw += _checkpoint_findings(topic, partition, rows, logs)
    raw += _replica_findings(topic, partition, logs, rows)
    found = [severity(f, logs.get((f.host, f.dir))) for f in raw]
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for f in found:
        if f.file is not None:
            counts[(f.host, f.dir, _INDEX_FILE.sub(".log", f.file), f.severity)] += 1
    summaries = []
    for log in logs.values():
        for s in log.segments:
            summaries.append((*s, compacted, s.file == log.active.file,
                              counts[(s.host, s.dir, s.file, ERROR)],
                              counts[(s.host, s.dir, s.file, WARNING)]))
    return found, summaries


FINDING, SEGMENT, TALLY = "finding", "segment", "tally"


def audit_partitions(groups: Iterable[tuple[tuple[str | None, int | None], PartitionRows]],
                     facts: Facts, max_listed: int = MAX_LISTED) -> Iterator[tuple[str, object]]:
    """One task of the pass: (FINDING, schema.FINDINGS row) and (SEGMENT,
    schema.SEGMENT_SUMMARIES row) for each partition's findings and segments, then
    (TALLY, Tally) of them all."""
    tally = Tally(max_listed)
    for key, rows in groups:
        found, summaries = partition_findings(key, rows, facts)
        tally.add(found, summaries)
        for f in found:
            yield FINDING, tuple(f)
        for s in summaries:
            yield SEGMENT, s
    yield TALLY, tally


# ---- what the reports count ----------------------------------------------------------


def _listed_key(f: Finding) -> tuple:
    """LISTED_ORDER with nulls first (as Spark sorts), then the other columns."""
    rest = [c for c in Finding._fields if c not in LISTED_ORDER]
    return tuple((v is not None, v) for v in (*(getattr(f, c) for c in LISTED_ORDER),
                                               *(getattr(f, c) for c in rest)))


class Tally:
    """Every number the reports need, counted over findings and segment summaries in
    each task and merged on the driver: findings per (host, severity, kind), segments,
    bytes and findings per (host, dir), the summary's totals, the first findings."""

    def __init__(self, max_listed: int = MAX_LISTED) -> None:
        self.max_listed = max_listed
        self.kinds: Counter[tuple[str | None, str, str]] = Counter()
        # (host, dir) -> [segments, bytes, errors, warnings]
        self.per_dir: dict[tuple[str | None, str | None], list[int]] = {}
        self.totals = dict.fromkeys(("segments", "bytes", "batches", "records", "logs"), 0)
        self.hosts: set[str] = set()
        self.dirs: set[tuple[str, str]] = set()
        self.listed: list[tuple[tuple, Finding]] = []

    def add(self, found: list[Finding], summaries: list[tuple]) -> None:
        logs = set()
        for s in map(Segment._make, (row[:len(Segment._fields)] for row in summaries)):
            d = self.per_dir.setdefault((s.host, s.dir), [0, 0, 0, 0])
            d[0] += 1
            d[1] += s.file_size or 0
            self.totals["segments"] += 1
            self.totals["bytes"] += s.file_size or 0
            self.totals["batches"] += s.batch_count or 0
            self.totals["records"] += s.record_count or 0
            self.hosts.add(s.host)
            self.dirs.add((s.host, s.dir))
            logs.add((s.host, s.dir))
        self.totals["logs"] += len(logs)  # each log is in one partition's rows
        for f in found:
            self.kinds[(f.host, f.severity, f.kind)] += 1
            d = self.per_dir.setdefault((f.host, f.dir), [0, 0, 0, 0])
            d[2] += f.severity == ERROR
            d[3] += f.severity == WARNING
        self._list((_listed_key(f), f) for f in found)

    def merge(self, other: Tally) -> Tally:
        self.kinds.update(other.kinds)
        for where, counts in other.per_dir.items():
            mine = self.per_dir.setdefault(where, [0, 0, 0, 0])
            for i, n in enumerate(counts):
                mine[i] += n
        for name, n in other.totals.items():
            self.totals[name] += n
        self.hosts |= other.hosts
        self.dirs |= other.dirs
        self._list(other.listed)
        return self

    def _list(self, keyed: Iterable[tuple[tuple, Finding]]) -> None:
        self.listed += keyed
        if len(self.listed) > 2 * self.max_listed:
            self._trim()

    def _trim(self) -> None:
        self.listed = heapq.nsmallest(self.max_listed, self.listed, key=operator.itemgetter(0))

    def summary_totals(self) -> dict[str, int]:
        """The TOTALS of summary.json."""
        return {**self.totals, "hosts": len(self.hosts), "dirs_with_segments": len(self.dirs)}

    def listed_findings(self) -> list[Finding]:
        """The first max_listed findings in LISTED_ORDER."""
        self._trim()
        return [f for _key, f in self.listed]

    def health(self, dirs: Iterable[Dir]) -> list[tuple]:
        """(host, dir, segments, bytes, errors, warnings, status) per log dir, by host
        and dir: unreadable, error, warning or ok."""
        out = []
        for d in dirs:
            segments, size, errors, warnings = self.per_dir.get((d.host, d.dir), (0, 0, 0, 0))
            status = ("unreadable" if d.readable is False else ERROR if errors
                      else WARNING if warnings else "ok")
            out.append((d.host, d.dir, segments, size, errors, warnings, status))
        return sorted(out, key=operator.itemgetter(0, 1))

