"""Spark schemas of the audit's tables, in one place.

Raw tables (what the driver's listing and the executors' scans produce) and the
output tables (findings, per-segment summaries, per-dir health). Every table names a
log by (host, dir, topic, partition): `host` is the HOST of a HOST=PATH root, `dir` its
PATH. spark_audit.findings handles the same rows as tuples, its NamedTuples naming
these columns. Nothing here does IO or raises.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

LOG_KEY = ["host", "dir", "topic", "partition"]


def _struct(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])


_S, _I, _L, _B, _D = StringType(), IntegerType(), LongType(), BooleanType(), DoubleType()

# One row per HOST=PATH root; broker_id and cluster_id from its meta.properties.
DIRS = _struct(("host", _S), ("dir", _S), ("readable", _B), ("clean_shutdown", _B),
               ("broker_id", _S), ("detail", _S), ("cluster_id", _S))

# One row per partition directory found under a root.
PARTITIONS = _struct(("host", _S), ("dir", _S), ("topic", _S), ("partition", _I),
                     ("segment_files", _I))

# One row per entry of a root's offset checkpoint files.
CHECKPOINTS = _struct(("host", _S), ("dir", _S), ("checkpoint", _S), ("topic", _S),
                      ("partition", _I), ("offset", _L))

# One row per scanned `.log` (logstore.verify.SegmentReport, flattened).
SEGMENTS = _struct(
    ("host", _S), ("dir", _S), ("topic", _S), ("partition", _I), ("file", _S),
    ("base_offset", _L), ("file_size", _L), ("batch_count", _L), ("record_count", _L),
    ("first_offset", _L), ("last_offset", _L), ("valid_bytes", _L), ("status", _S),
    ("legacy", _B), ("max_timestamp", _L), ("offset_gaps", _L), ("index_entries", _L),
    ("time_index_entries", _L), ("scan_seconds", _D),
)

# One row per problem logstore.verify reported, or per file/dir that could not be read.
PROBLEMS = _struct(("host", _S), ("dir", _S), ("topic", _S), ("partition", _I), ("file", _S),
                   ("kind", _S), ("severity", _S), ("position", _L), ("offset", _L),
                   ("detail", _S))

# One row per valid batch of a replicated partition: its fingerprint.
BATCHES = _struct(("host", _S), ("dir", _S), ("topic", _S), ("partition", _I), ("file", _S),
                  ("position", _L), ("base_offset", _L), ("last_offset", _L), ("crc", _L))

# Fingerprints as the scan job carries them: up to FINGERPRINT_CHUNK batches of one
# segment per row, packed as big-endian int64s, findings.FINGERPRINT_FIELDS per batch
# (a row per batch costs ~10x more to hand to the JVM, a list of Python ints ~3x more
# than bytes). The findings pass reads them so; io.scan's BATCHES view unpacks them.
FINGERPRINTS = _struct(("host", _S), ("dir", _S), ("topic", _S), ("partition", _I),
                       ("file", _S), ("packed", BinaryType()))
FINGERPRINT_CHUNK = 1 << 16

# What the scan job yields: exactly one field is set per row, named for its table. The
# driver's listing rows travel through the same job, so one cached table holds every
# raw table. Raw tables read back (io.read_raw) take the same shape, with `batches`
# (BATCHES rows) for `fingerprints` (io.RawTables.rows).
SCAN_ROW = StructType([
    StructField("segments", SEGMENTS, True),
    StructField("problems", PROBLEMS, True),
    StructField("fingerprints", FINGERPRINTS, True),
    StructField("dirs", DIRS, True),
    StructField("partitions", PARTITIONS, True),
    StructField("checkpoints", CHECKPOINTS, True),
])

# The audit's answer: one row per finding.
FINDINGS = _struct(("host", _S), ("dir", _S), ("topic", _S), ("partition", _I), ("file", _S),
                   ("position", _L), ("offset_start", _L), ("offset_end", _L), ("kind", _S),
                   ("severity", _S), ("detail", _S))
FINDING_COLUMNS = FINDINGS.fieldNames()

# One row per scanned segment (segments.parquet): SEGMENTS, whether its topic is
# compacted, whether it is its log's active (last) segment, its findings by severity.
SEGMENT_SUMMARIES = StructType(SEGMENTS.fields + _struct(
    ("compacted", _B), ("active", _B), ("errors", _L), ("warnings", _L)).fields)

# One row per (host, log dir): the report's health grid (health.parquet).
HEALTH = _struct(("host", _S), ("dir", _S), ("segments", _L), ("bytes", _L), ("errors", _L),
                 ("warnings", _L), ("status", _S))

RAW_TABLES = {"dirs": DIRS, "partitions": PARTITIONS, "checkpoints": CHECKPOINTS,
              "segments": SEGMENTS, "problems": PROBLEMS, "batches": BATCHES}
