"""The audit's logic as pure DataFrame -> DataFrame steps (no IO, no actions).

Inputs are the raw tables of spark_audit.schema (listing, per-segment scan results,
verify's problems, batch fingerprints); `audit()` composes the steps into the findings
table (schema.FINDINGS) and per-segment and per-log-dir summaries. What counts as an
error or a warning is decided in one place, `assign_severity`:

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

Nothing here raises on data; a missing column is a programming error (AnalysisException).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from .schema import ERROR, FINDING_COLUMNS, FINDINGS, LOG_KEY, REPLICA_KEY, WARNING

INTERNAL_COMPACTED_TOPICS = ("__consumer_offsets", "__transaction_state")
RECOVERY_POINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
CLEANER = "cleaner-offset-checkpoint"

# Kinds that are warnings whatever the context.
WARNING_KINDS = ("legacy-format", "checkpoint-orphan", "no-segments", "vanished")
OK = "OK"


def _findings(df: DataFrame, *, kind: str | Column, detail: Column,
              file: Column | None = None, position: Column | None = None,
              offset_start: Column | None = None, offset_end: Column | None = None,
              severity: Column | None = None, host: Column | None = None,
              dir: Column | None = None) -> DataFrame:
    """df's rows as FINDINGS rows (columns not given are null)."""
    given = {
        "host": host if host is not None else F.col("host"),
        "dir": dir if dir is not None else F.col("dir"),
        "topic": F.col("topic"), "partition": F.col("partition"),
        "file": file, "position": position, "offset_start": offset_start,
        "offset_end": offset_end, "kind": F.lit(kind) if isinstance(kind, str) else kind,
        "severity": severity, "detail": detail,
    }
    return df.select(*[
        (given[f.name] if given[f.name] is not None else F.lit(None)).cast(f.dataType)
        .alias(f.name) for f in FINDINGS.fields
    ])


# ---- per log ------------------------------------------------------------------------


def compacted_topics(segments: DataFrame, checkpoints: DataFrame,
                     named: Iterable[str] = ()) -> DataFrame:
    """(topic, reason): topics whose offsets may legitimately have gaps."""
    spark = segments.sparkSession
    configured = spark.createDataFrame(
        [(t, "Kafka internal compacted topic") for t in INTERNAL_COMPACTED_TOPICS]
        + [(t, "named with --compacted") for t in named],
        StructType([StructField("topic", StringType()), StructField("reason", StringType())]))
    shown = (segments.where((F.col("offset_gaps") > 0) | (F.col("first_offset") > F.col("base_offset")))
             .select("topic", F.lit("offsets missing inside a segment").alias("reason")))
    cleaned = (checkpoints.where(F.col("checkpoint") == CLEANER)
               .select("topic", F.lit("in a cleaner-offset-checkpoint").alias("reason")))
    return (configured.unionByName(shown).unionByName(cleaned)
            .groupBy("topic")
            .agg(F.array_join(F.array_sort(F.collect_set("reason")), "; ").alias("reason")))


def log_summary(segments: DataFrame, checkpoints: DataFrame, dirs: DataFrame,
                compacted: DataFrame) -> DataFrame:
    """One row per log (host, dir, topic, partition): its extent and context.

    valid_end: the offset after the last valid batch of the active (last) segment;
    log_end: the same when that segment scanned to its end, else null (unknown).
    """
    by_base = "base_offset"
    logs = segments.groupBy(*LOG_KEY).agg(
        F.count("*").alias("segment_count"),
        F.sum("file_size").alias("bytes"),
        F.min("base_offset").alias("first_base"),
        F.min(F.when(F.col("batch_count") > 0, F.col("first_offset"))).alias("first_offset"),
        F.max("base_offset").alias("active_base"),
        F.max_by("file", by_base).alias("active_file"),
        F.max_by("status", by_base).alias("active_status"),
        F.max_by("batch_count", by_base).alias("active_batches"),
        F.max_by("last_offset", by_base).alias("active_last_offset"),
    )
    valid_end = F.when(F.col("active_batches") > 0, F.col("active_last_offset") + 1) \
        .otherwise(F.col("active_base"))
    logs = (logs.withColumn("valid_end", valid_end)
            .withColumn("log_end", F.when(F.col("active_status") == OK, F.col("valid_end"))))
    offsets = checkpoints.groupBy(*LOG_KEY).agg(*[
        F.max(F.when(F.col("checkpoint") == name, F.col("offset"))).alias(alias)
        for name, alias in ((RECOVERY_POINT, "recovery_point"), (HIGH_WATERMARK, "high_watermark"),
                            (LOG_START, "log_start"), (CLEANER, "cleaner_offset"))
    ])
    return (logs.join(offsets, LOG_KEY, "left")
            .join(dirs.select("host", "dir", "clean_shutdown",
                              F.coalesce("cluster_id", F.lit("")).alias("cluster")),
                  ["host", "dir"], "left")
            .join(compacted.select("topic", F.lit(True).alias("compacted")), "topic", "left")
            .withColumn("compacted", F.coalesce("compacted", F.lit(False)))
            .withColumn("clean_shutdown", F.coalesce("clean_shutdown", F.lit(False)))
            .withColumn("cluster", F.coalesce("cluster", F.lit("")))
            .select(*LOG_KEY, *[c for c in logs.columns if c not in LOG_KEY],
                    "recovery_point", "high_watermark", "log_start", "cleaner_offset",
                    "clean_shutdown", "compacted", "cluster"))


# ---- findings -----------------------------------------------------------------------


def verify_findings(problems: DataFrame) -> DataFrame:
    """logstore.verify's problems (and the listing's) as findings."""
    return _findings(problems, kind=F.col("kind"), detail=F.col("detail"), file=F.col("file"),
                     position=F.col("position"), offset_start=F.col("offset"),
                     offset_end=F.col("offset"), severity=F.col("severity"))


def segment_gap_findings(segments: DataFrame) -> DataFrame:
    """Gaps and overlaps between consecutive segments of a log, and offsets missing
    inside a segment (one finding per segment, as a compacted log has many)."""
    order = Window.partitionBy(*LOG_KEY).orderBy("base_offset")
    s = (segments.where(F.col("batch_count") > 0)
         .withColumn("prev_last", F.lag("last_offset").over(order))
         .withColumn("prev_status", F.lag("status").over(order))
         .withColumn("prev_file", F.lag("file").over(order)))
    overlap = s.where(F.col("base_offset") <= F.col("prev_last"))
    overlaps = _findings(
        overlap, kind="offset-overlap", file=F.col("file"), position=F.lit(0),
        offset_start=F.col("base_offset"),
        offset_end=F.least("prev_last", "last_offset"),
        detail=F.format_string(
            "segment %s starts at offset %d, but the previous segment %s already holds "
            "offsets up to %d", "file", "base_offset", "prev_file", "prev_last"))
    gap = s.where((F.col("base_offset") > F.col("prev_last") + 1) & (F.col("prev_status") == OK))
    gaps = _findings(
        gap, kind="offset-gap", file=F.col("file"),
        offset_start=F.col("prev_last") + 1, offset_end=F.col("base_offset") - 1,
        detail=F.format_string(
            "offsets %d-%d are in no segment: %s ends at %d, %s starts at %d",
            F.col("prev_last") + 1, F.col("base_offset") - 1, "prev_file", "prev_last",
            "file", "base_offset"))
    head = F.when(F.col("first_offset") > F.col("base_offset"), 1).otherwise(0)
    inside = s.withColumn("n_gaps", F.col("offset_gaps") + head).where(F.col("n_gaps") > 0)
    insides = _findings(
        inside, kind="offset-gap", file=F.col("file"),
        offset_start=F.col("base_offset"), offset_end=F.col("last_offset"),
        detail=F.format_string(
            "%d gap(s) in the offsets inside %s (base %d, batches from %d to %d): compaction",
            "n_gaps", "file", "base_offset", "first_offset", "last_offset"))
    return overlaps.unionByName(gaps).unionByName(insides)


def checkpoint_findings(checkpoints: DataFrame, partitions: DataFrame,
                        logs: DataFrame) -> DataFrame:
    """Checkpoint entries without a partition dir; checkpoints ahead of a log's end;
    partition dirs without segments; a partition in two dirs of one host."""
    orphan = (checkpoints.join(partitions.select(*LOG_KEY), LOG_KEY, "left_anti")
              .groupBy(*LOG_KEY)
              .agg(F.array_sort(F.collect_set("checkpoint")).alias("files")))
    orphans = _findings(
        orphan, kind="checkpoint-orphan",
        detail=F.format_string("%s-%d is listed in %s but has no directory in this log dir",
                               "topic", "partition", F.array_join("files", ", ")))
    known = logs.where(F.col("log_end").isNotNull())
    flushed = known.withColumn("claimed", F.greatest("recovery_point", "log_start")) \
        .where(F.col("claimed") > F.col("log_end"))
    ahead = _findings(
        flushed, kind="checkpoint-ahead", file=F.col("active_file"),
        offset_start=F.col("log_end"), offset_end=F.col("claimed") - 1,
        detail=F.format_string(
            "the log ends at offset %d but its checkpoints say recovery point %s, "
            "log start %s: offsets %d-%d that were flushed are gone",
            "log_end", F.coalesce(F.col("recovery_point").cast("string"), F.lit("-")),
            F.coalesce(F.col("log_start").cast("string"), F.lit("-")),
            "log_end", F.col("claimed") - 1))
    hw = known.where(F.col("high_watermark") > F.col("log_end"))
    hw_ahead = _findings(
        hw, kind="hw-ahead", file=F.col("active_file"),
        offset_start=F.col("log_end"), offset_end=F.col("high_watermark") - 1,
        detail=F.format_string(
            "the log ends at offset %d, below its high watermark %d in "
            "replication-offset-checkpoint", "log_end", "high_watermark"))
    empty = _findings(
        partitions.where(F.col("segment_files") == 0), kind="no-segments",
        detail=F.format_string("partition dir %s-%d holds no .log segment",
                               "topic", "partition"))
    dup = (partitions.groupBy("host", "topic", "partition")
           .agg(F.array_sort(F.collect_set("dir")).alias("dirs"))
           .where(F.size("dirs") > 1))
    dups = _findings(
        dup, kind="duplicate-log", dir=F.array_join("dirs", ","),
        detail=F.format_string("%s-%d has a directory in %d log dirs of %s: %s",
                               "topic", "partition", F.size("dirs"), "host",
                               F.array_join("dirs", ", ")))
    return orphans.unionByName(ahead).unionByName(hw_ahead).unionByName(empty).unionByName(dups)


def replicas(logs: DataFrame) -> DataFrame:
    """Logs of non-compacted partitions held by more than one host of one cluster, with
    the offset range all of them share below their common high watermark (lo..hi)."""
    reps = (logs.where(~F.col("compacted") & F.col("first_offset").isNotNull())
            .select(*LOG_KEY, "cluster", F.col("first_offset").alias("start"),
                    (F.coalesce("log_end", "valid_end") - 1).alias("end"),
                    "high_watermark", "log_start"))
    per_partition = Window.partitionBy(*REPLICA_KEY)
    return (reps
            .withColumn("n_replicas", F.count("*").over(per_partition))
            .withColumn("n_hosts", F.size(F.collect_set("host").over(per_partition)))
            .withColumn("common_hw", F.min("high_watermark").over(per_partition))
            .withColumn("lo", F.max("start").over(per_partition))
            .withColumn("hi", F.least(F.min("end").over(per_partition), F.col("common_hw") - 1))
            .where(F.col("n_hosts") > 1))


def replica_divergence(batches: DataFrame, reps: DataFrame) -> DataFrame:
    """Replicas that disagree on the batches at the same offsets.

    Per base offset in the shared range, batches are grouped by (last offset, CRC);
    more than one group is a divergence. The hosts named are those outside the
    largest group (all of them on a tie). Consecutive disagreeing base offsets,
    including those where batch boundaries no longer line up, make one finding.
    """
    parts = reps.select(*REPLICA_KEY, "n_replicas", "lo", "hi").distinct()
    keyed = (batches.join(reps.select(*LOG_KEY, "cluster"), LOG_KEY)
             .join(parts, REPLICA_KEY)
             .where((F.col("base_offset") >= F.col("lo")) & (F.col("last_offset") <= F.col("hi"))))
    holder = F.struct("host", "dir", "file", "position")
    groups = (keyed.groupBy(*REPLICA_KEY, "base_offset", "last_offset", "crc", "n_replicas")
              .agg(F.count("*").alias("cnt"), F.array_sort(F.collect_list(holder)).alias("holders")))
    keys = (groups.groupBy(*REPLICA_KEY, "base_offset", "n_replicas")
            .agg(F.count("*").alias("n_groups"), F.sum("cnt").alias("n_present"),
                 F.max("cnt").alias("max_cnt"), F.max("last_offset").alias("max_last"),
                 F.array_sort(F.collect_list(F.struct("last_offset", "crc", "cnt", "holders")))
                 .alias("fps")))
    divergent = F.col("n_groups") > 1
    agree = ~divergent & (F.col("n_present") == F.col("n_replicas"))
    minority = F.filter("fps", lambda g: g["cnt"] < F.col("max_cnt"))
    dissent = F.when(F.size(minority) > 0, minority).otherwise(F.col("fps"))
    described = F.array_join(F.transform("fps", lambda g: F.format_string(
        "%s: last offset %d, crc %08x",
        F.array_join(F.transform(g["holders"], lambda h: h["host"]), "+"),
        g["last_offset"], g["crc"])), "; ")
    order = Window.partitionBy(*REPLICA_KEY).orderBy("base_offset")
    keys = (keys
            .withColumn("run", F.sum(agree.cast("int")).over(
                order.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
            .where(~agree)
            .withColumn("dissent", F.when(divergent, F.flatten(F.transform(
                dissent, lambda g: g["holders"]))))
            .withColumn("what", F.when(divergent, F.format_string(
                "at offset %d: %s", "base_offset", described))))
    islands = (keys.groupBy(*REPLICA_KEY, "run")
               .agg(F.sum(divergent.cast("int")).alias("n_divergent"),
                    F.min("base_offset").alias("start"), F.max("max_last").alias("end"),
                    F.min_by("what", F.when(divergent, F.col("base_offset"))).alias("what"),
                    F.min_by("dissent", F.when(divergent, F.col("base_offset"))).alias("first"),
                    F.array_sort(F.array_distinct(F.flatten(F.collect_list(F.transform(
                        "dissent", lambda h: F.struct(h["host"].alias("host"),
                                                      h["dir"].alias("dir"))))))).alias("who"))
               .where(F.col("n_divergent") > 0))
    single = F.size("who") == 1
    return _findings(
        islands, kind="replica-divergence",
        host=F.array_join(F.transform("who", lambda w: w["host"]), ","),
        dir=F.array_join(F.array_distinct(F.transform("who", lambda w: w["dir"])), ","),
        file=F.when(single, F.col("first")[0]["file"]),
        position=F.when(single, F.col("first")[0]["position"]),
        offset_start=F.col("start"), offset_end=F.col("end"),
        detail=F.format_string(
            "replicas of %s-%d disagree on offsets %d-%d (%d differing batches); first %s",
            "topic", "partition", "start", "end", "n_divergent", "what"))


def replica_missing(reps: DataFrame) -> DataFrame:
    """A replica that lacks offsets other replicas hold below the common high watermark,
    at or above its own log start (log-start-offset-checkpoint): segments lost at its
    head. Holes inside a log are its offset-gap findings; a short tail is hw-ahead."""
    a = reps.alias("a")
    b = reps.alias("b")
    same_partition = [F.col(f"a.{c}") == F.col(f"b.{c}") for c in REPLICA_KEY]
    other = (F.col("a.host") != F.col("b.host")) | (F.col("a.dir") != F.col("b.dir"))
    lo = F.greatest(F.col("a.log_start"), F.col("b.start"))
    hi = F.least(F.col("a.start") - 1, F.col("b.end"), F.col("a.common_hw") - 1)
    pairs = (a.join(b, [*same_partition, other])
             .where(F.col("a.log_start").isNotNull())
             .select(*[F.col(f"a.{c}").alias(c) for c in LOG_KEY],
                     F.col("a.start").alias("start"), F.col("a.log_start").alias("log_start"),
                     F.col("b.host").alias("peer"), lo.alias("lo"), hi.alias("hi"))
             .where(F.col("lo") <= F.col("hi")))
    missing = pairs.groupBy(*LOG_KEY, "start", "log_start").agg(
        F.min("lo").alias("lo"), F.max("hi").alias("hi"),
        F.array_join(F.array_sort(F.collect_set("peer")), ",").alias("peers"))
    return _findings(
        missing, kind="replica-missing", offset_start=F.col("lo"), offset_end=F.col("hi"),
        detail=F.format_string(
            "this replica starts at offset %d though its log-start-offset-checkpoint says %d; "
            "offsets %d-%d are held by %s", "start", "log_start", "lo", "hi", "peers"))


def assign_severity(findings: DataFrame, logs: DataFrame) -> DataFrame:
    """Set every finding's severity from its kind and its log's context (the policy in
    the module docstring); explain a torn tail that is an error."""
    ctx = logs.select(*LOG_KEY, "compacted", "clean_shutdown", "recovery_point",
                      "active_file", "valid_end")
    f = findings.join(ctx, LOG_KEY, "left")
    kind = F.col("kind")
    clean = F.coalesce("clean_shutdown", F.lit(False))
    active = F.col("file") == F.col("active_file")
    lost_flushed = F.col("recovery_point") > F.col("valid_end")
    # Only the position decides the severity (issue 5: a torn tail on the active segment
    # is a warning); the context a reader needs to judge it goes into the detail.
    not_active = ~F.coalesce(active, F.lit(False))
    torn_why = (F.when(not_active, F.lit(" (not the active segment)"))
                .when(clean, F.lit(" (the log dir was shut down cleanly)"))
                .when(lost_flushed, F.format_string(
                    " (below the recovery point %d: flushed data is lost)", "recovery_point")))
    severity = (F.when(kind.isin(*WARNING_KINDS), F.lit(WARNING))
                .when(kind == "torn-tail", F.when(not_active, F.lit(ERROR))
                      .otherwise(F.lit(WARNING)))
                .when(kind == "offset-gap", F.when(F.coalesce("compacted", F.lit(False)),
                                                   F.lit(WARNING)).otherwise(F.lit(ERROR)))
                .when(kind == "hw-ahead", F.when(clean, F.lit(ERROR)).otherwise(F.lit(WARNING)))
                .otherwise(F.lit(ERROR)))
    detail = F.when(kind == "torn-tail", F.concat("detail", F.coalesce(torn_why, F.lit("")))) \
        .otherwise(F.col("detail"))
    return f.withColumn("severity", severity).withColumn("detail", detail).select(*FINDING_COLUMNS)


# ---- the whole audit ----------------------------------------------------------------


@dataclass(frozen=True)
class AuditResult:
    """The findings and what the summaries are derived from; `segments` and `health`
    are plans over `findings`, so a result whose findings were replaced by the written
    table (dataclasses.replace) derives them from that table."""

    findings: DataFrame  # schema.FINDINGS
    logs: DataFrame  # per-log context (log_summary)
    compacted: DataFrame  # (topic, reason)
    scanned: DataFrame  # schema.SEGMENTS, as scanned
    dirs: DataFrame  # schema.DIRS

    @property
    def segments(self) -> DataFrame:
        """Per-segment summaries (segment_summaries)."""
        return segment_summaries(self.scanned, self.logs, self.findings)

    @property
    def health(self) -> DataFrame:
        """Per (host, dir) counts and status (dir_health, schema.HEALTH)."""
        return dir_health(self.dirs, self.scanned, self.findings)


def segment_summaries(segments: DataFrame, logs: DataFrame, findings: DataFrame) -> DataFrame:
    """Each scanned segment with `active`, `compacted`, and its error/warning counts."""
    counts = (findings.where(F.col("file").isNotNull())
              .withColumn("file", F.regexp_replace("file", r"\.(index|timeindex)$", ".log"))
              .groupBy(*LOG_KEY, "file")
              .agg(F.sum((F.col("severity") == ERROR).cast("int")).alias("errors"),
                   F.sum((F.col("severity") == WARNING).cast("int")).alias("warnings")))
    return (segments
            .join(logs.select(*LOG_KEY, "active_file", "compacted"), LOG_KEY, "left")
            .withColumn("active", F.col("file") == F.col("active_file"))
            .drop("active_file")
            .join(counts, [*LOG_KEY, "file"], "left")
            .fillna(0, ["errors", "warnings"]))


def dir_health(dirs: DataFrame, segments: DataFrame, findings: DataFrame) -> DataFrame:
    """(host, dir, segments, bytes, errors, warnings, status) for the health grid."""
    sizes = segments.groupBy("host", "dir").agg(F.count("*").alias("segments"),
                                                F.sum("file_size").alias("bytes"))
    counts = findings.groupBy("host", "dir").agg(
        F.sum((F.col("severity") == ERROR).cast("int")).alias("errors"),
        F.sum((F.col("severity") == WARNING).cast("int")).alias("warnings"))
    h = (dirs.select("host", "dir", "readable")
         .join(sizes, ["host", "dir"], "left").join(counts, ["host", "dir"], "left")
         .fillna(0, ["segments", "bytes", "errors", "warnings"]))
    status = (F.when(~F.col("readable"), F.lit("unreadable"))
              .when(F.col("errors") > 0, F.lit(ERROR))
              .when(F.col("warnings") > 0, F.lit(WARNING)).otherwise(F.lit("ok")))
    return h.withColumn("status", status).drop("readable")


def _same(df: DataFrame) -> DataFrame:
    return df


def audit(dirs: DataFrame, partitions: DataFrame, checkpoints: DataFrame, segments: DataFrame,
          problems: DataFrame, batches: DataFrame, *,
          compacted_names: Iterable[str] = (),
          reuse: Callable[[DataFrame], DataFrame] = _same) -> AuditResult:
    """Every finding of the audit, with severities, and the summaries.

    All findings come out of one plan (the findings pass: per-log context, gaps,
    checkpoints, replica comparison, severity), computed by one Spark action when the
    caller materialises it. `reuse` is applied to the findings, which the per-segment
    and per-dir summaries and the report read again: the caller writes them once and
    reads the table back (report.write_findings) or cuts the lineage
    (`DataFrame.localCheckpoint`), so the findings pass runs once; the default leaves
    the plan as it is. The tables the findings pass reads several times (per-log
    context, replicas) are not materialised on their own: they come from the cached
    scan, and one more Spark job each costs more than reading them again in the one job.
    """
    compacted = compacted_topics(segments, checkpoints, compacted_names)
    logs = log_summary(segments, checkpoints, dirs, compacted)
    reps = replicas(logs)
    raw = (verify_findings(problems)
           .unionByName(segment_gap_findings(segments))
           .unionByName(checkpoint_findings(checkpoints, partitions, logs))
           .unionByName(replica_divergence(batches, reps))
           .unionByName(replica_missing(reps)))
    return AuditResult(findings=reuse(assign_severity(raw, logs)), logs=logs,
                       compacted=compacted, scanned=segments, dirs=dirs)


# ---- the report's numbers, in one Spark action ---------------------------------------

LISTED_ORDER = ["severity", "host", "dir", "topic", "partition", "file", "offset_start", "kind"]


def summary_rows(result: AuditResult, *, max_listed: int) -> DataFrame:
    """Everything the report needs besides the Parquet tables, as (section, n, json)
    rows, so that one action collects it all (a Spark job per number costs ~0.1-1 s):

    - "counts": findings per (host, severity, kind);
    - "totals": one row of segment, byte, batch, record, host, dir and log counts;
    - "health": dir_health's rows;
    - "listed": the first max_listed findings in LISTED_ORDER (n: their rank);
    - "compacted": compacted_topics' rows.
    Every payload is `to_json` of a struct; null fields are left out of it.
    """
    def rows(section: str, df: DataFrame, n: Column | None = None) -> DataFrame:
        return df.select(F.lit(section).alias("section"),
                         (n if n is not None else F.lit(0)).cast("int").alias("n"),
                         F.to_json(F.struct(*df.columns)).alias("json"))

    f = result.findings
    counts = f.groupBy("host", "severity", "kind").count()
    totals = result.scanned.agg(
        F.count("*").alias("segments"), F.coalesce(F.sum("file_size"), F.lit(0)).alias("bytes"),
        F.coalesce(F.sum("batch_count"), F.lit(0)).alias("batches"),
        F.coalesce(F.sum("record_count"), F.lit(0)).alias("records"),
        F.countDistinct("host").alias("hosts"),
        F.countDistinct("host", "dir").alias("dirs_with_segments"),
        F.countDistinct("host", "dir", "topic", "partition").alias("logs"))
    listed = f.orderBy(*LISTED_ORDER).limit(max_listed)
    rank = F.row_number().over(Window.orderBy(*LISTED_ORDER))
    return (rows("counts", counts)
            .unionByName(rows("totals", totals))
            .unionByName(rows("health", result.health))
            .unionByName(rows("listed", listed, rank))
            .unionByName(rows("compacted", result.compacted)))
