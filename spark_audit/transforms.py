"""The audit's Spark side: the small facts the driver collects, and the findings pass.

The findings pass is one Python pass over the raw tables (as cached by io.scan, or read
by io.read_raw): rows are keyed by (topic, partition), combined per partition
(combineByKey, so a map task sends one bundle per partition it holds), and each
partition's findings, severities and segment summaries are computed in plain Python
by spark_audit.findings (the policy lives there), with each task's tally of the
reports' numbers (findings.Tally). The facts every task needs (the log dirs, which
topics are compacted) are collected first, by one small action.

Spark jobs: collect_facts is one (io.scan makes it the scan's own action); the pass is
one more, either writing the output tables from its tasks (AuditResult.write,
spark_audit.output) or collecting only the tally (AuditResult.tally). Its rows are not
kept: `findings` and `segments`, DataFrames over them for callers in a session, run the
pass again. Nothing here raises on data; a Spark failure propagates (the audit exits 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, partial, reduce
from operator import itemgetter
from pathlib import Path

from pyspark import RDD
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import StructType

from . import findings, output, schema


def collect_facts(rows: DataFrame) -> findings.Facts:
    """One Spark action over the raw tables as io.RawTables.rows holds them: every dir
    row, the topics in cleaner-offset-checkpoints, and the topics of segments missing
    offsets inside (as findings.inside_gaps counts them: between batches, or before the
    first one). One scan, no shuffle: repeats are dropped here."""
    gapped = "segments.offset_gaps > 0 OR segments.first_offset > segments.base_offset"
    cleaned = f"checkpoints.checkpoint = '{findings.CLEANER}'"
    picked = (rows.where(f"dirs IS NOT NULL OR {cleaned} OR {gapped}")
              .selectExpr("dirs", f"IF({cleaned}, checkpoints.topic, NULL) AS cleaned",
                          f"IF({gapped}, segments.topic, NULL) AS gapped")
              .collect())
    return findings.Facts(
        dirs=tuple(findings.Dir._make(r.dirs) for r in picked if r.dirs is not None),
        cleaned=frozenset(r.cleaned for r in picked if r.cleaned is not None),
        gapped=frozenset(r.gapped for r in picked if r.gapped is not None))


@dataclass(frozen=True)
class AuditResult:
    """The findings pass, not yet run: each action over it runs it once. `findings`
    (schema.FINDINGS) and `segments` (schema.SEGMENT_SUMMARIES) are DataFrames over it,
    made when first asked for: the audit itself writes them from the pass's tasks
    (`write`), and making both cost it 50-100 ms of the driver's time."""

    facts: findings.Facts
    tagged: RDD  # (findings.FINDING | SEGMENT | TALLY, row), as audit_partitions yields
    spark: SparkSession

    @cached_property
    def findings(self) -> DataFrame:
        return self._table(findings.FINDING, schema.FINDINGS)

    @cached_property
    def segments(self) -> DataFrame:
        return self._table(findings.SEGMENT, schema.SEGMENT_SUMMARIES)

    def _table(self, tag: str, sch: StructType) -> DataFrame:
        return self.spark.createDataFrame(
            self.tagged.filter(lambda t: t[0] == tag).map(itemgetter(1)), sch,
            verifySchema=False)

    def tally(self) -> findings.Tally:
        """The reports' numbers, merged from each task's (one Spark action)."""
        parts = self.tagged.filter(lambda t: t[0] == findings.TALLY).map(itemgetter(1)).collect()
        return _merged(parts)

    def write(self, out: Path) -> findings.Tally:
        """Run the pass once, its tasks writing `<out>/findings.parquet` and
        `<out>/segments.parquet` (spark_audit.output); returns the merged tally."""
        return _merged(output.write_tables(self.tagged, out))


def _merged(parts: list[findings.Tally]) -> findings.Tally:
    return reduce(findings.Tally.merge, parts[1:], parts[0])


def _keyed(tags: list[str], row: Row) -> tuple[tuple[str | None, int | None], tuple[str, tuple]]:
    """A row of io.RawTables.rows (one column set, named for its table) keyed by its
    (topic, partition), tagged for findings.PartitionRows.add."""
    for tag, value in zip(tags, row, strict=True):
        if value is not None:
            return (value.topic, value.partition), (tag, tuple(value))
    raise ValueError(f"an input row with no table: {row}")


def audit(rows: DataFrame, *, facts: findings.Facts | None = None,
          compacted_names: Iterable[str] = (),
          max_listed: int = findings.MAX_LISTED) -> AuditResult:
    """The findings pass over the raw tables (io.RawTables.rows), not yet run.

    Batch fingerprints are read packed (schema.FINGERPRINTS, as io.scan caches them) or
    a row per batch (schema.BATCHES, as raw tables hold them; packed per partition as
    they are read). `facts` (collect_facts over the same rows) is collected here when
    not given.
    """
    if facts is None:
        facts = collect_facts(rows)
    facts = dataclasses.replace(facts, named=tuple(compacted_names))
    spark = rows.sparkSession
    # The pass runs a task per core (spark.default.parallelism) in each of its two
    # stages: on small data a second wave of tasks costs more than it balances, and on
    # big data each task has many partitions.
    tasks = spark.sparkContext.defaultParallelism
    keyed = rows.where("dirs IS NULL").drop("dirs")
    tagged = (keyed.coalesce(tasks).rdd
              .map(partial(_keyed, keyed.columns))
              .combineByKey(findings.rows_of, findings.PartitionRows.add,
                            findings.PartitionRows.merge, tasks)
              .mapPartitions(partial(findings.audit_partitions, facts=facts,
                                     max_listed=max_listed)))
    return AuditResult(facts=facts, tagged=tagged, spark=spark)
