"""The audit's output tables, written as Parquet by the findings pass's own tasks.

A Spark write is a job of its own (~0.2 s here even for two rows), and the audit had
three of them after the pass. Instead, each task of the pass writes the findings and
segment summaries it computed straight to Parquet (pyarrow) and hands back only its
tally, so an audit with `--out` is the scan and one findings job (spark_audit/README.md).

Commit: a task writes its files under `<out>/_staging-<id>/<table>/`, one per table
named for the task's partition and attempt, and returns their names; once the job
succeeded the driver moves the files of the attempts Spark counted (one per partition)
into `<out>/<table>.parquet/`, replacing what was there (as Spark's overwrite does),
and removes the staging dir with whatever failed attempts left. Readers (Spark,
pyarrow, pandas) read `<table>.parquet` as a dataset of part files, as they read
Spark's.

`--out` must be a path the driver and the executors share (a local path on a local
session, a shared mount on a cluster): the reports beside the tables are written by
the driver. OSErrors propagate (the audit then exits 2).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import RDD
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructType,
)

from . import findings, schema

# Rows a writer holds before it writes them as one row group: bounds a task's memory
# whatever the number of findings.
ROWS_PER_GROUP = 1 << 16

_ARROW = {StringType: pa.string(), IntegerType: pa.int32(), LongType: pa.int64(),
          BooleanType: pa.bool_(), DoubleType: pa.float64(), BinaryType: pa.binary()}

# What the pass's tasks write: (table name, row tag of findings.audit_partitions, schema).
TABLES = (("findings", findings.FINDING, schema.FINDINGS),
          ("segments", findings.SEGMENT, schema.SEGMENT_SUMMARIES))


def arrow_schema(struct: StructType) -> pa.Schema:
    """The Arrow schema Spark reads back as `struct` (flat, nullable columns)."""
    return pa.schema([pa.field(f.name, _arrow_type(f.dataType), nullable=True)
                      for f in struct.fields])


def _arrow_type(kind: DataType) -> pa.DataType:
    try:
        return _ARROW[type(kind)]
    except KeyError:
        raise TypeError(f"no Arrow type for the Spark type {kind}") from None


class TableWriter:
    """Rows (tuples in the schema's column order) into one Parquet file, a row group
    per ROWS_PER_GROUP rows. The file is written even with no rows (the schema alone),
    so a table always reads back with its columns."""

    def __init__(self, path: Path, struct: StructType):
        self.path = path
        self.schema = arrow_schema(struct)
        self._rows: list[tuple] = []
        self._writer = pq.ParquetWriter(str(path), self.schema)

    def add(self, row: tuple) -> None:
        self._rows.append(row)
        if len(self._rows) >= ROWS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        """Write the held rows (at least one) as one row group."""
        columns = list(zip(*self._rows, strict=True))
        self._writer.write_batch(pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, self.schema, strict=True)],
            schema=self.schema))
        self._rows.clear()

    def close(self) -> None:
        try:
            if self._rows:
                self._flush()
        finally:
            self._writer.close()


def write_table(rows: Iterable[tuple], struct: StructType, path: Path) -> None:
    """One whole table from the driver (health.parquet): `path` replaced by a dir
    holding one part file."""
    _fresh_dir(path)
    writer = TableWriter(path / "part-00000.parquet", struct)
    try:
        for row in rows:
            writer.add(row)
    finally:
        writer.close()


def write_tables(tagged: RDD, out: Path) -> list[findings.Tally]:
    """Run the findings pass (`tagged`, as findings.audit_partitions yields per task) as
    one Spark job whose tasks write `<out>/findings.parquet` and `<out>/segments.parquet`;
    each task's tally. Staged and committed as the module says; the staging dir is gone
    afterwards whether the job succeeded or not."""
    staging = new_staging(out)
    try:
        done = tagged.mapPartitionsWithIndex(partial(write_task, staging=str(staging))).collect()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    commit(staging, out, [files for _tally, files in done])
    return [tally for tally, _files in done]


def new_staging(out: Path) -> Path:
    """A fresh staging dir under `out` for one findings job (names starting with `_`
    are skipped by Parquet readers)."""
    staging = out / f"_staging-{uuid.uuid4().hex}"
    for name, _tag, _struct in TABLES:
        (staging / name).mkdir(parents=True)
    return staging


def write_task(index: int, tagged: Iterator[tuple[str, object]], staging: str
               ) -> Iterator[tuple[findings.Tally, dict[str, str]]]:
    """One task of the pass (after findings.audit_partitions): its FINDING and SEGMENT
    rows written under `staging`, one file per table; yields (its tally, the file
    name of each table)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = ctx.taskAttemptId() if ctx is not None else 0
    name = f"part-{index:05d}-{attempt}.parquet"
    writers = {tag: TableWriter(Path(staging, table, name), struct)
               for table, tag, struct in TABLES}
    tally: findings.Tally | None = None
    try:
        for tag, value in tagged:
            if tag == findings.TALLY:
                tally = value
            else:
                writers[tag].add(value)
    finally:
        for w in writers.values():
            w.close()
    assert tally is not None, "findings.audit_partitions ends each task with its tally"
    yield tally, {table: name for table, _tag, _struct in TABLES}


def commit(staging: Path, out: Path, written: Sequence[dict[str, str]]) -> None:
    """Move the files the counted attempts wrote into `<out>/<table>.parquet` (each
    replaced), then drop the staging dir."""
    try:
        for table, _tag, _struct in TABLES:
            final = _fresh_dir(out / f"{table}.parquet")
            for files in written:
                os.rename(staging / table / files[table], final / files[table])
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fresh_dir(path: Path) -> Path:
    """`path` as an empty dir, whatever was there (a table replaced, as Spark's
    overwrite replaces it)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.mkdir(parents=True)
    return path
