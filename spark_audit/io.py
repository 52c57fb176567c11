"""Reading for the Spark audit: roots, listing, the executor scan task, raw tables.

Where files are read:
- The driver lists each HOST=PATH root (partition dirs, `.log` files and their sizes,
  the offset checkpoint files, the clean-shutdown marker), a few roots at a time on
  threads because listing a remote mount is latency-bound.
- Executor tasks stream segments through `logstore.verify.verify_segment` (a fixed
  buffer and the native batch scan: never a whole file in memory, never Spark's
  `binaryFile` source) and yield small rows: one per segment, one per problem, and one
  fingerprint per batch for partitions that live on more than one host.
So every PATH must be readable at the same path on the driver and on every executor:
local paths in local mode; on a cluster, each broker's log dirs mounted read-only at
the same place on all workers (NFS, CephFS, sshfs). For host-local disks with no shared
mount, run `--scan-only` in local mode on each host (writes the raw tables) and one
`--from-scans` job over all of them (see spark_audit.main).

Errors: a root that exists but cannot be listed, a checkpoint or a segment that cannot
be read become problem rows naming the path (the audit reports them and goes on); a bad
HOST=PATH argument or manifest line, or a PATH that is not a directory on the driver,
raises `AuditInputError` naming it (check_roots; the audit exits 2).
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from . import schema, transforms
from .findings import ERROR, FINGERPRINT, FINGERPRINT_FIELDS, WARNING, Facts

# Checkpoint files of a log dir that name partitions (docs/formats.md "Per log directory files").
CHECKPOINT_FILES = (
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
)
DEFAULT_TASK_BYTES = 1 << 30
# A file costs an open, a stat of two indexes and Python bookkeeping: weigh it like this
# many bytes when balancing tasks, so thousands of tiny segments still spread out.
PER_FILE_WEIGHT = 1 << 20
LISTING_SLICE = 1 << 16


class AuditInputError(ValueError):
    """A HOST=PATH argument or manifest line that does not parse."""


@dataclass(frozen=True)
class Root:
    host: str
    path: str


def parse_root(text: str, where: str = "argument") -> Root:
    """`HOST=PATH` -> Root (PATH made absolute); AuditInputError names the bad text."""
    host, sep, path = text.partition("=")
    host, path = host.strip(), path.strip()
    if not sep or not host or not path:
        raise AuditInputError(f"{where}: expected HOST=PATH, got {text!r}")
    return Root(host, os.path.abspath(path))


def read_manifest(path: str | os.PathLike[str]) -> list[Root]:
    """Roots from a manifest: one `HOST=PATH` (or `HOST PATH`) per line, `#` comments."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise AuditInputError(f"cannot read manifest {path}: {err.strerror}") from err
    roots = []
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line and len(line.split()) == 2:
            line = "=".join(line.split())
        roots.append(parse_root(line, f"{path}:{n}"))
    return roots


def check_roots(roots: Sequence[Root]) -> list[Root]:
    """The roots without repeats; AuditInputError unless each PATH is a directory here.

    A PATH that does not exist (a typo, a host's mount missing on the driver) or is not
    a directory is a bad argument, not a finding: the audit stops (exit 2) naming every
    such root, before Spark starts. One PATH under two HOSTs is refused too (it would
    look like two replicas that agree). A root that exists but cannot be listed (EIO,
    EACCES) is a finding instead (`dir-unreadable`, see list_root).
    """
    unique = list(dict.fromkeys(roots))
    bad = [f"{r.host}={r.path}: " + ("not a directory" if os.path.exists(r.path)
                                     else "no such directory")
           for r in unique if not os.path.isdir(r.path)]
    if bad:
        raise AuditInputError("log dir(s) not found: " + "; ".join(bad))
    hosts: dict[str, str] = {}
    for r in unique:
        other = hosts.setdefault(r.path, r.host)
        if other != r.host:
            raise AuditInputError(f"{r.path} is given for two hosts, {other} and {r.host}")
    return unique


# ---- listing (driver) ----------------------------------------------------------------


@dataclass
class SegmentFile:
    host: str
    dir: str
    topic: str
    partition: int
    path: str
    size: int


@dataclass
class Listing:
    """What the driver found under the roots: rows for the raw tables, and the segments."""

    dirs: list[tuple] = field(default_factory=list)
    partitions: list[tuple] = field(default_factory=list)
    checkpoints: list[tuple] = field(default_factory=list)
    problems: list[tuple] = field(default_factory=list)
    segments: list[SegmentFile] = field(default_factory=list)

    def extend(self, other: Listing) -> None:
        self.dirs += other.dirs
        self.partitions += other.partitions
        self.checkpoints += other.checkpoints
        self.problems += other.problems
        self.segments += other.segments


def _problem(host: str, dir_: str, topic: str | None, partition: int | None, file: str | None,
             kind: str, detail: str, severity: str = ERROR, position: int | None = None,
             offset: int | None = None) -> tuple:
    return (host, dir_, topic, partition, file, kind, severity, position, offset, detail)


def list_root(root: Root) -> Listing:
    """List one log dir: its partition dirs, `.log` files, checkpoints and markers."""
    from logstore import checkpoint, names
    from logstore.errors import CheckpointError

    out = Listing()
    host, top = root.host, root.path
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError as err:
        out.dirs.append((host, top, False, None, None, f"cannot list: {err.strerror}", None))
        out.problems.append(_problem(host, top, None, None, None, "dir-unreadable",
                                     f"cannot list log dir {top} of {host}: {err}"))
        return out
    props: dict[str, str] = {}
    meta = Path(top, names.META_PROPERTIES)
    if meta.exists():
        try:
            props = checkpoint.read_meta_properties(meta)
        except (OSError, CheckpointError) as err:
            out.problems.append(_problem(host, top, None, None, names.META_PROPERTIES,
                                         "checkpoint-unreadable", f"{meta}: {err}"))
    clean = Path(top, names.CLEAN_SHUTDOWN_FILE).exists()
    out.dirs.append((host, top, True, clean, props.get("broker.id"), None,
                     props.get("cluster.id")))
    for name in CHECKPOINT_FILES:
        path = Path(top, name)
        if not path.exists():
            continue
        try:
            entries_ = checkpoint.read_offset_checkpoint(path)
        except (OSError, CheckpointError) as err:
            out.problems.append(_problem(host, top, None, None, name, "checkpoint-unreadable",
                                         f"cannot read {path} on {host}: {err}"))
            continue
        out.checkpoints += [(host, top, name, tp.topic, tp.partition, off)
                            for tp, off in entries_.items()]
    for entry in entries:
        tp = names.parse_partition_dir(entry.name)
        if tp is None or not entry.is_dir():
            continue
        try:
            files = sorted(os.scandir(entry.path), key=lambda e: e.name)
        except OSError as err:
            out.problems.append(_problem(host, top, tp.topic, tp.partition, None,
                                         "dir-unreadable",
                                         f"cannot list partition dir {entry.path}: {err}"))
            continue
        count = 0
        for f in files:
            parsed = names.parse_segment_file(f.name)
            if parsed is None or parsed[1] != names.LOG_SUFFIX:
                continue
            try:
                size = f.stat().st_size
            except FileNotFoundError:  # deleted by retention since the scandir
                continue
            except OSError as err:
                out.problems.append(_problem(host, top, tp.topic, tp.partition, f.name,
                                             "unreadable", f"cannot stat {f.path}: {err}"))
                continue
            out.segments.append(SegmentFile(host, top, tp.topic, tp.partition, f.path, size))
            count += 1
        out.partitions.append((host, top, tp.topic, tp.partition, count))
    return out


def list_roots(roots: Sequence[Root], *, threads: int = 16) -> Listing:
    """List every root (threads: listing remote mounts is latency-bound)."""
    total = Listing()
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(roots)))) as pool:
        for part in pool.map(list_root, roots):
            total.extend(part)
    return total


# ---- planning (driver) ---------------------------------------------------------------


def replicated_partitions(listing: Listing) -> set[tuple[str, int]]:
    """(topic, partition) present on more than one host of one cluster (the cluster.id
    of the dirs, transforms.replicas): they need batch fingerprints."""
    cluster = {(row[0], row[1]): row[6] for row in listing.dirs}
    hosts: dict[tuple[str | None, str, int], set[str]] = {}
    for host, dir_, topic, partition, _n in listing.partitions:
        hosts.setdefault((cluster.get((host, dir_)), topic, partition), set()).add(host)
    return {(topic, partition) for (_c, topic, partition), hs in hosts.items() if len(hs) > 1}


def plan_tasks(segments: Sequence[SegmentFile], fingerprint: set[tuple[str, int]], *,
               parallelism: int, task_bytes: int = DEFAULT_TASK_BYTES) -> list[list[tuple]]:
    """Group segments into tasks of similar weight (bytes plus a per-file cost).

    One task per core when there are enough segments, more (a multiple of the cores)
    when the data exceeds task_bytes per task; greedy largest-first (by bytes plus
    PER_FILE_WEIGHT a file) onto the lightest group keeps them even.
    (A Spark task with a Python worker costs tens of ms before it reads a byte: on a
    small fleet a second wave of tasks costs more than it balances.) Each item: (host,
    dir, topic, partition, path, fingerprint?).
    """
    if not segments:
        return []
    weight = [s.size + PER_FILE_WEIGHT for s in segments]
    n = max(parallelism, -(-sum(s.size for s in segments) // task_bytes))
    n = -(-n // parallelism) * parallelism  # whole waves: no core idles in the last one
    n = max(1, min(n, len(segments)))
    heap = [(0, i) for i in range(n)]
    groups: list[list[tuple]] = [[] for _ in range(n)]
    for k in sorted(range(len(segments)), key=lambda k: -weight[k]):
        load, i = heapq.heappop(heap)
        s = segments[k]
        groups[i].append((s.host, s.dir, s.topic, s.partition, s.path,
                          (s.topic, s.partition) in fingerprint))
        heapq.heappush(heap, (load + weight[k], i))
    for g in groups:  # read each partition's files in order: friendlier to the disk
        g.sort(key=lambda item: item[4])
    return [g for g in groups if g]


# ---- the executor task ---------------------------------------------------------------


def _row(column: int, value: tuple) -> tuple:
    """A SCAN_ROW tuple with `value` in the column-th field."""
    out: list[tuple | None] = [None] * 6
    out[column] = value
    return tuple(out)


SEGMENTS, PROBLEMS, FINGERPRINTS, DIRS, PARTITIONS, CHECKPOINTS = range(6)  # SCAN_ROW's


def scan_segments(items: Iterable[tuple], buffer_size: int = 1 << 20) -> Iterator[tuple]:
    """Executor side: verify each segment and yield SCAN_ROW tuples.

    Runs `logstore.verify.verify_segment` (fixed buffer, native scan, index checks).
    Fingerprints (FINGERPRINT_FIELDS as big-endian int64s, 32 bytes a batch) are packed
    a chunk of batches at a time while a segment is scanned (ScanResult.fingerprints)
    and yielded after it, in chunks (schema.FINGERPRINTS).
    A file that vanished (retention) is a warning row, one that cannot be read an error
    row; neither stops the task. Items that are already rows (the driver's listing,
    `("row", tuple)`) pass through.
    """
    from logstore import verify

    for item in items:
        if item[0] == "row":
            yield item[1]
            continue
        host, dir_, topic, partition, path, want_batches = item
        name = os.path.basename(path)
        packed = bytearray()
        on_batches = None
        if want_batches:
            def on_batches(res, extend=packed.extend) -> None:  # FINGERPRINT_FIELDS
                extend(res.fingerprints())

        started = time.perf_counter()
        try:
            rep = verify.verify_segment(path, buffer_size=buffer_size, on_batches=on_batches)
        except FileNotFoundError as err:
            yield _row(PROBLEMS, _problem(
                host, dir_, topic, partition, name, "vanished",
                f"{path} on {host} vanished before it was scanned (deleted by retention?): "
                f"{err.strerror}", WARNING))
            continue
        except OSError as err:
            yield _row(PROBLEMS, _problem(host, dir_, topic, partition, name, "unreadable",
                                          f"cannot read {path} on {host}: {err}"))
            continue
        seconds = time.perf_counter() - started
        yield _row(SEGMENTS, (host, dir_, topic, partition, name, rep.base_offset,
                              rep.file_size, rep.batch_count, rep.record_count,
                              rep.first_offset, rep.last_offset, rep.valid_bytes,
                              rep.status.name, rep.legacy, rep.max_timestamp, rep.offset_gaps,
                              rep.index_entries, rep.time_index_entries, seconds))
        for p in rep.problems:
            yield _row(PROBLEMS, _problem(host, dir_, topic, partition,
                                          os.path.basename(p.path), p.kind, p.detail,
                                          p.severity, p.position, p.offset))
        if packed:
            data = bytes(packed)
            step = schema.FINGERPRINT_CHUNK * FINGERPRINT.size
            for i in range(0, len(data), step):
                yield _row(FINGERPRINTS, (host, dir_, topic, partition, name, data[i:i + step]))


class RawTables:
    """The audit's inputs as DataFrames (see schema.RAW_TABLES), and `rows`: all of
    them in one table shaped like the scan's (schema.SCAN_ROW), which the audit reads.
    From a scan, `rows` is the cached scan itself (with packed fingerprints, which
    `batches` unpacks) and `facts` is already collected (transforms.collect_facts); the
    tables are then selected from it when first asked for (--scan-only writes them, the
    audit itself reads only `rows`: each selection costs the driver a round of the
    JVM's analysis, a quarter of a 2 GiB audit's time when all were built up front)."""

    def __init__(self, dirs: DataFrame | None = None, partitions: DataFrame | None = None,
                 checkpoints: DataFrame | None = None, segments: DataFrame | None = None,
                 problems: DataFrame | None = None, batches: DataFrame | None = None, *,
                 scanned: DataFrame | None = None, facts: Facts | None = None,
                 cached: list[DataFrame] | None = None) -> None:
        given = {"dirs": dirs, "partitions": partitions, "checkpoints": checkpoints,
                 "segments": segments, "problems": problems, "batches": batches}
        missing = [name for name, df in given.items() if df is None]
        if missing and scanned is None:
            raise ValueError(f"raw tables {missing} given neither as DataFrames nor by a scan")
        self._tables = {name: df for name, df in given.items() if df is not None}
        self.scanned = scanned
        self.facts = facts
        self.cached = list(cached or ())

    def table(self, name: str) -> DataFrame:
        """One raw table (a name of schema.RAW_TABLES)."""
        if name not in schema.RAW_TABLES:
            raise KeyError(f"no raw table {name!r}; there are {', '.join(schema.RAW_TABLES)}")
        df = self._tables.get(name)
        if df is None:
            assert self.scanned is not None
            column = "fingerprints" if name == "batches" else name
            df = self.scanned.where(f"{column} IS NOT NULL").select(f"{column}.*")
            if name == "batches":
                df = unpack_fingerprints(df)
            self._tables[name] = df
        return df

    dirs = property(lambda self: self.table("dirs"))
    partitions = property(lambda self: self.table("partitions"))
    checkpoints = property(lambda self: self.table("checkpoints"))
    segments = property(lambda self: self.table("segments"))
    problems = property(lambda self: self.table("problems"))
    batches = property(lambda self: self.table("batches"))

    def tables(self) -> dict[str, DataFrame]:
        return {name: self.table(name) for name in schema.RAW_TABLES}

    @property
    def rows(self) -> DataFrame:
        """Every row, a struct column per table (one set per row): the scan's cached
        table, or the raw tables' union (BATCHES rows in a `batches` column)."""
        if self.scanned is not None:
            return self.scanned
        rows = None
        for name, df in self.tables().items():
            one = df.selectExpr(f"struct(*) AS {name}")
            rows = one if rows is None else rows.unionByName(one, allowMissingColumns=True)
        return rows

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()


def scan(spark: SparkSession, roots: Sequence[Root], *, buffer_size: int = 1 << 20,
         task_bytes: int = DEFAULT_TASK_BYTES, fingerprint_all: bool = False,
         skip_fingerprints: Iterable[str] = ()) -> RawTables:
    """List the roots on the driver, scan their segments on the executors.

    Fingerprints are emitted for partitions on more than one host (all partitions with
    fingerprint_all, for --scan-only runs whose replicas are scanned elsewhere), except
    topics in skip_fingerprints (known compacted: replicas are not compared).
    """
    listing = list_roots(roots)
    skip = set(skip_fingerprints)
    if fingerprint_all:
        wanted = {(p[2], p[3]) for p in listing.partitions}
    else:
        wanted = replicated_partitions(listing)
    wanted = {tp for tp in wanted if tp[0] not in skip}
    sc = spark.sparkContext
    groups = plan_tasks(listing.segments, wanted, parallelism=sc.defaultParallelism,
                        task_bytes=task_bytes)
    # The listing rides along in the same job, so that a single cached table holds
    # every raw table and nothing is re-sent from the driver per query: in slices of
    # LISTING_SLICE rows (a big fleet's checkpoints alone run to millions), each slice
    # put at the head of a scan task (no task of its own: a task costs more than a
    # slice), or a task of its own when there is no segment at all.
    listed = ([("row", _row(DIRS, r)) for r in listing.dirs]
              + [("row", _row(PARTITIONS, r)) for r in listing.partitions]
              + [("row", _row(CHECKPOINTS, r)) for r in listing.checkpoints]
              + [("row", _row(PROBLEMS, r)) for r in listing.problems])
    slices = [listed[i:i + LISTING_SLICE] for i in range(0, len(listed), LISTING_SLICE)]
    if groups:
        for i, piece in enumerate(slices):
            groups[i % len(groups)][:0] = piece
    else:
        groups = slices
    rows = (sc.parallelize(groups, max(1, len(groups)))
            .flatMap(lambda group: group)  # each slice holds one group: one task
            .mapPartitions(lambda items: scan_segments(items, buffer_size)))
    scanned = spark.createDataFrame(rows, schema.SCAN_ROW, verifySchema=False).cache()
    # The scan's one action collects the facts the findings pass needs: it runs every
    # scan task and fills the cache (whole rows, whatever it selects), which every
    # raw table reads.
    facts = transforms.collect_facts(scanned)
    return RawTables(scanned=scanned, facts=facts, cached=[scanned])


def unpack_fingerprints(packed: DataFrame) -> DataFrame:
    """schema.FINGERPRINTS rows (packed big-endian int64s) -> schema.BATCHES rows.

    In the JVM: each 8-byte field is read as hex and converted (every value is below
    2**63: positions, offsets and unsigned 32-bit CRCs).
    """
    # SQL text: one call to the JVM per step (building Columns costs one per function).
    key = [*schema.LOG_KEY, "file"]
    n = f"length(packed) div {FINGERPRINT.size}"
    fields = [f"cast(conv(hex(substring(packed, i * {FINGERPRINT.size} + {8 * k + 1}, 8)), "
              f"16, 10) as bigint) as {name}"
              for k, name in enumerate(FINGERPRINT_FIELDS)]
    return (packed.selectExpr(*key, "packed", f"explode(sequence(0, {n} - 1)) as i")
            .selectExpr(*key, *fields))


# ---- raw tables on disk (--scan-only / --from-scans) ---------------------------------


def write_raw(raw: RawTables, out: str | os.PathLike[str]) -> None:
    """Write the raw tables as Parquet under out/raw/<table>/."""
    for name, df in raw.tables().items():
        df.write.mode("overwrite").parquet(str(Path(out, "raw", name)))


def read_raw(spark: SparkSession, scans: Sequence[str | os.PathLike[str]]) -> RawTables:
    """Union the raw tables of several --scan-only outputs."""
    tables: dict[str, DataFrame] = {}
    for name, sch in schema.RAW_TABLES.items():
        paths = [str(Path(s, "raw", name)) for s in scans]
        missing = [p for p in paths if not Path(p).exists()]
        if missing:
            raise AuditInputError(f"not a --scan-only output (no {missing[0]})")
        tables[name] = spark.read.schema(sch).parquet(*paths)
    return RawTables(**tables)
