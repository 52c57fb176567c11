"""Fixtures and layouts for the Spark audit tests: one local SparkSession for the whole
run, and multi-host log-dir layouts written by logstore itself, with the faults of
issue 5 injected by hand (flipped byte, truncated tail, corrupt index entry, deleted
middle segment, a replica that differs)."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from logstore import LogConfig, LogDir, names
from logstore.records import Record, build_batch

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", name="spark")
def spark_session() -> Iterator[object]:
    """One local[2] session for every audit test (starting the JVM costs ~10 s)."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    from spark_audit.main import use_this_python

    use_this_python()  # the tests' interpreter (a venv's), as the audit's own session
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("logkeeper-audit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        # Tiny tables: adaptive re-planning per stage costs more than it saves here.
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")  # as spark_audit.main
        .config("spark.driver.memory", "1g")
        # Python workers must import this tree's spark_audit/logstore/native, as the
        # driver does, whatever checkout the installed package points at.
        .config("spark.executorEnv.PYTHONPATH", str(REPO))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# ---- a multi-host layout written by logstore -----------------------------------------

BATCHES_PER_LOG = 24
ROLL_EVERY = 6  # batches per segment: 4 segments per log
RECORDS_PER_BATCH = 3
CONFIG = LogConfig(index_interval_bytes=2048)

# Which (host, disk) holds each partition: orders-0 on three hosts, payments on two,
# clicks on one. host1 has two disks.
PLACEMENT: dict[tuple[str, int], list[tuple[str, str]]] = {
    ("orders", 0): [("host1", "disk0"), ("host2", "disk0"), ("host3", "disk0")],
    ("payments", 0): [("host1", "disk1"), ("host2", "disk0")],
    ("payments", 1): [("host1", "disk1"), ("host3", "disk0")],
    ("clicks", 0): [("host2", "disk0")],
    ("clicks", 1): [("host1", "disk0")],
}
DISKS = sorted({place for places in PLACEMENT.values() for place in places})


@dataclass(frozen=True)
class BatchAt:
    position: int
    base_offset: int
    last_offset: int


@dataclass
class WrittenLog:
    host: str
    dir: str  # the log dir (root) path
    topic: str
    partition: int
    segments: dict[str, list[BatchAt]] = field(default_factory=dict)  # .log name -> batches

    @property
    def path(self) -> Path:
        return Path(self.dir, names.partition_dir_name(self.topic, self.partition))

    def segment(self, i: int) -> tuple[str, list[BatchAt]]:
        name = sorted(self.segments)[i]
        return name, self.segments[name]


@dataclass
class Layout:
    root: Path
    logs: dict[tuple[str, str, int], WrittenLog]  # (host, topic, partition)

    def roots(self) -> list[str]:
        return [f"{host}={self.root / host / disk}" for host, disk in DISKS]

    def log(self, host: str, topic: str, partition: int) -> WrittenLog:
        return self.logs[(host, topic, partition)]


def make_batch(topic: str, partition: int, i: int, variant: int = 0) -> bytes:
    """Batch i of a partition: deterministic bytes, so replicas get identical CRCs."""
    ts = 1_700_000_000_000 + i * 1000
    records = [Record(f"{topic}-{i}-{r}".encode(),
                      (f"{topic}/{partition}/{i}/{r}/v{variant};".encode() * 40)[:400], [], ts + r)
               for r in range(RECORDS_PER_BATCH)]
    return build_batch(records)


def write_layout(root: Path, *, diverge: dict[tuple[str, str, int], range] | None = None
                 ) -> Layout:
    """Write every partition of PLACEMENT with logstore (rolling every ROLL_EVERY
    batches), set each high watermark to the log end and close the dirs cleanly.

    `diverge` maps (host, topic, partition) to the batch numbers that host writes with
    different record values (same offsets and record counts: a divergent replica).
    """
    diverge = diverge or {}
    dirs = {place: LogDir.open(root / place[0] / place[1], CONFIG, broker_id=int(place[0][4:]))
            for place in DISKS}
    logs: dict[tuple[str, str, int], WrittenLog] = {}
    try:
        for (topic, partition), places in PLACEMENT.items():
            for host, disk in places:
                ld = dirs[(host, disk)]
                log = ld.create_log(topic, partition)
                written = WrittenLog(host, str(ld.path), topic, partition)
                odd = diverge.get((host, topic, partition), range(0))
                segment = names.log_file_name(0)
                for i in range(BATCHES_PER_LOG):
                    if i and i % ROLL_EVERY == 0:
                        log.roll()
                        segment = names.log_file_name(log.log_end_offset)
                    info = log.append(make_batch(topic, partition, i, 1 if i in odd else 0))
                    written.segments.setdefault(segment, []).append(
                        BatchAt(info.position, info.base_offset, info.last_offset))
                log.high_watermark = log.log_end_offset
                logs[(host, topic, partition)] = written
    finally:
        for ld in dirs.values():
            ld.close()
    return Layout(root, logs)


# ---- faults --------------------------------------------------------------------------


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def truncate_tail(path: Path, nbytes: int) -> None:
    os.truncate(path, path.stat().st_size - nbytes)


def index_entries(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]


def set_index_entry(path: Path, i: int, relative_offset: int, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(8 * i)
        f.write(struct.pack(">ii", relative_offset, position))


def delete_segment(partition_dir: Path, log_name: str) -> None:
    base = names.parse_segment_file(log_name)[0]
    for name in (names.log_file_name(base), names.index_file_name(base),
                 names.time_index_file_name(base)):
        (partition_dir / name).unlink(missing_ok=True)
