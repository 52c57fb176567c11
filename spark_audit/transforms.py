"""The audit's Spark side: the small facts the driver collects, and the findings pass.

The findings pass is one Python pass over the raw tables (as cached by io.scan, or read
by io.read_raw): rows are keyed by (topic, partition), combined per partition
(combineByKey, so a map task sends one bundle per partition it holds), and each
partition's findings, severities and segment summaries are computed in plain Python
by spark_audit.findings (the policy lives there). Its output is persisted, so the
findings table, the segment summaries and the reports' numbers (findings.Tally) each
read it without running the pass again. The facts every task needs (the log dirs,
which topics are compacted) are collected first, by one small action.

Spark jobs: collect_facts is one (io.scan makes it the scan's own action); the pass
runs in the first action over AuditResult (writing the findings, or collecting the
tally), and each further action reads its persisted rows. Nothing here raises on data;
a Spark failure propagates (the audit exits 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial, reduce
from operator import itemgetter

from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame, Row

from . import findings, schema


def collect_facts(dirs: DataFrame, segments: DataFrame,
                  checkpoints: DataFrame) -> findings.Facts:
    """One Spark action: every dir row, the topics in cleaner-offset-checkpoints, and
    the topics of segments missing offsets inside (as findings.inside_gaps counts them:
    between batches, or before the first one). No shuffle: repeats are dropped here."""
    none = "CAST(NULL AS STRING)"
    rows = (dirs.selectExpr("struct(*) AS dir", f"{none} AS cleaned", f"{none} AS gapped")
            .unionByName(checkpoints.where(f"checkpoint = '{findings.CLEANER}'")
                         .selectExpr("topic AS cleaned"), allowMissingColumns=True)
            .unionByName(segments.where("offset_gaps > 0 OR first_offset > base_offset")
                         .selectExpr("topic AS gapped"), allowMissingColumns=True)
            .collect())
    return findings.Facts(
        dirs=tuple(findings.Dir._make(r.dir) for r in rows if r.dir is not None),
        cleaned=frozenset(r.cleaned for r in rows if r.cleaned is not None),
        gapped=frozenset(r.gapped for r in rows if r.gapped is not None))


@dataclass(frozen=True)
class AuditResult:
    """The findings pass, not yet run: its tables are plans over its persisted output."""

    findings: DataFrame  # schema.FINDINGS
    segments: DataFrame  # schema.SEGMENT_SUMMARIES
    facts: findings.Facts
    output: RDD  # (findings.FINDING | SEGMENT | TALLY, row), persisted

    def tally(self) -> findings.Tally:
        """The reports' numbers, merged from each task's (one Spark action)."""
        parts = self.output.filter(lambda t: t[0] == findings.TALLY).map(itemgetter(1)).collect()
        return reduce(findings.Tally.merge, parts[1:], parts[0])

    def release(self) -> None:
        self.output.unpersist()


def _keyed(tags: list[str], row: Row) -> tuple[tuple[str | None, int | None], tuple[str, tuple]]:
    """A row of the pass's input (one column set, named for its table) keyed by its
    (topic, partition), tagged for findings.PartitionRows.add."""
    for tag, value in zip(tags, row, strict=True):
        if value is not None:
            return (value.topic, value.partition), (tag, tuple(value))
    raise ValueError(f"an input row with no table: {row}")


def audit(dirs: DataFrame, partitions: DataFrame, checkpoints: DataFrame,
          segments: DataFrame, problems: DataFrame, batches: DataFrame, *,
          fingerprints: DataFrame | None = None, facts: findings.Facts | None = None,
          compacted_names: Iterable[str] = (),
          max_listed: int = findings.MAX_LISTED) -> AuditResult:
    """The findings pass over the raw tables (schema.RAW_TABLES), not yet run.

    Batch fingerprints are read packed from `fingerprints` (schema.FINGERPRINTS, as
    io.scan caches them) when given, else from `batches` (schema.BATCHES, a row per
    batch, as raw tables hold them; packed per partition as they are read). `facts`
    (collect_facts over the same tables) is collected here when not given.
    """
    if facts is None:
        facts = collect_facts(dirs, segments, checkpoints)
    facts = dataclasses.replace(facts, named=tuple(compacted_names))
    spark = segments.sparkSession
    tables = {"segments": segments, "problems": problems, "partitions": partitions,
              "checkpoints": checkpoints}
    if fingerprints is not None:
        tables["fingerprints"] = fingerprints
    else:
        tables["batches"] = batches
    # One table of every row, a column per input table (one of them set per row), so
    # that one Python stage reads them all; it and the pass run a task per core
    # (spark.default.parallelism): on small data a second wave of tasks costs more than
    # it balances, and on big data the tasks are many partitions each.
    rows = None
    for tag, df in tables.items():
        one = df.selectExpr(f"struct(*) AS {tag}")
        rows = one if rows is None else rows.unionByName(one, allowMissingColumns=True)
    tasks = spark.sparkContext.defaultParallelism
    output = (rows.coalesce(tasks).rdd
              .map(partial(_keyed, rows.columns))
              .combineByKey(findings.rows_of, findings.PartitionRows.add,
                            findings.PartitionRows.merge, tasks)
              .mapPartitions(partial(findings.audit_partitions, facts=facts,
                                     max_listed=max_listed))
              .persist(StorageLevel.MEMORY_AND_DISK))

    def table(tag: str, sch) -> DataFrame:
        return spark.createDataFrame(output.filter(lambda t: t[0] == tag).map(itemgetter(1)),
                                     sch, verifySchema=False)

    return AuditResult(findings=table(findings.FINDING, schema.FINDINGS),
                       segments=table(findings.SEGMENT, schema.SEGMENT_SUMMARIES),
                       facts=facts, output=output)
