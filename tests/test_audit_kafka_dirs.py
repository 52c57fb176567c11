"""The Spark audit on log dirs as Kafka brokers leave them (issue 9, 4d): preallocated
index tails, empty checkpoints, Kafka 2.x time-index entries, and replicas of other
clusters; real faults among them are still found."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.audit_helpers import (  # noqa: F401  (spark_session is the `spark` fixture)
    index_entries,
    set_index_entry,
    spark_session,
)

from .kafka_dirs import (
    OFFSET_INDEX_BYTES,
    follower_indexes,
    kafka_log_dir,
    live_partition,
    older_broker_time_index,
)

pytest.importorskip("pyspark")
from spark_audit import main as audit_main  # noqa: E402

pytestmark = pytest.mark.spark


def audit(spark, out: Path, *roots: str) -> tuple[int, list[dict], dict]:
    """Run the audit as the CLI does; (exit code, findings as dicts, summary.json)."""
    code = audit_main.main(["--quiet", "--out", str(out), *roots])
    findings = [r.asDict() for r in spark.read.parquet(str(out / "findings.parquet")).collect()]
    return code, findings, json.loads((out / "summary.json").read_text())


def brief(findings: list[dict]) -> list[tuple]:
    return sorted((f["host"], f["topic"], f["kind"], f["severity"], f["offset_start"],
                   f["offset_end"]) for f in findings)


def test_preallocated_index_tails_have_no_findings(spark, tmp_path: Path):
    """A running broker's dir: an empty log and logs with entries, each active segment
    with 10 MiB zero-filled .index/.timeindex tails."""
    root = kafka_log_dir(tmp_path / "kafka-logs", empty_checkpoints=False)
    live_partition(root, "idle", 0, 0)
    live_partition(root, "busy", 0, 12, roll_every=5)
    code, findings, summary = audit(spark, tmp_path / "out", f"b0={root}")
    assert findings == [] and code == 0
    assert summary["segments"] == 4


def test_many_preallocated_segments_have_no_findings(spark, tmp_path: Path):
    """A few hundred active segments with preallocated indexes: no errors, in seconds
    (the time is printed, not asserted; it was minutes, with millions of problems)."""
    root = kafka_log_dir(tmp_path / "kafka-logs", empty_checkpoints=False)
    for p in range(300):
        live_partition(root, "wide", p, p % 3)  # a third empty, the rest 1-2 batches
    started = time.monotonic()
    code, findings, summary = audit(spark, tmp_path / "out", f"b0={root}")
    print(f"audit of 300 preallocated active segments: {time.monotonic() - started:.1f} s")
    assert findings == [] and code == 0
    assert summary["segments"] == 300


def test_empty_checkpoints_are_no_entries(spark, tmp_path: Path):
    """Kafka creates cleaner-offset-checkpoint (and, before its first write,
    replication-offset-checkpoint) empty: no entries, not checkpoint-unreadable."""
    root = kafka_log_dir(tmp_path / "kafka-logs")
    live_partition(root, "t", 0, 4, preallocated=False)
    code, findings, _ = audit(spark, tmp_path / "out", f"b0={root}")
    assert findings == [] and code == 0


def test_older_brokers_time_index_entries_are_accepted(spark, tmp_path: Path):
    """Kafka 2.x time-index entries name the record with the max timestamp, inside its
    batch; one whose timestamp is not that batch's max is still an error."""
    root = kafka_log_dir(tmp_path / "kafka-logs", empty_checkpoints=False)
    segs = live_partition(root, "old", 0, 10, roll_every=6, preallocated=False)
    assert older_broker_time_index(segs[0]) == 5 and older_broker_time_index(segs[1]) == 3
    code, findings, _ = audit(spark, tmp_path / "out", f"b0={root}")
    assert findings == [] and code == 0

    tindex = segs[1].with_suffix(".timeindex")
    data = bytearray(tindex.read_bytes())
    data[7] ^= 1  # the first entry's timestamp, one off
    tindex.write_bytes(bytes(data))
    code, findings, _ = audit(spark, tmp_path / "out2", f"b0={root}")
    assert code == 1
    assert brief(findings) == [("b0", "old", "timeindex-mismatch", "error", 22, 22)]


def test_a_kafka_followers_indexes_are_accepted(spark, tmp_path: Path):
    """A Kafka 2.x/3.0 follower indexes each fetched chunk as a whole: its last offset at
    its first batch's position (and the time index as the leader does, at the batch
    with the max timestamp). Replicas written so audit clean; an entry a lookup would
    skip its offset from (at the batch after the one holding it) is still an error."""
    root = kafka_log_dir(tmp_path / "kafka-logs", empty_checkpoints=False)
    segs = live_partition(root, "replicated", 0, 30, roll_every=12, preallocated=False)
    indexes = [follower_indexes(seg, 4, rolled=seg != segs[-1]) for seg in segs]
    assert [len(offsets) for offsets, _ in indexes] == [2, 2, 1]
    code, findings, _ = audit(spark, tmp_path / "out", f"b0={root}")
    assert findings == [] and code == 0

    (first_entry, first_at), (chunk_last, chunk_at) = indexes[1][0][:2]
    base = int(segs[1].stem)
    batch_bytes = first_at // 4  # every chunk is four batches of one size
    set_index_entry(segs[1].with_suffix(".index"), 1, chunk_last - 3 * 3 - base,
                    chunk_at + batch_bytes)
    code, findings, _ = audit(spark, tmp_path / "out2", f"b0={root}")
    assert code == 1
    assert brief(findings) == [("b0", "replicated", "index-mismatch", "error",
                                chunk_last - 9, chunk_last - 9)]


def test_replicas_are_compared_within_a_cluster_only(spark, tmp_path: Path):
    """t-0 on three brokers: a and c of cluster A (c differs in batch 3), b of another
    cluster B with other records throughout. Only a and c are compared."""
    a = kafka_log_dir(tmp_path / "a", "cluster-A", 1, empty_checkpoints=False)
    b = kafka_log_dir(tmp_path / "b", "cluster-B", 1, empty_checkpoints=False)
    c = kafka_log_dir(tmp_path / "c", "cluster-A", 2, empty_checkpoints=False)
    live_partition(a, "t", 0, 6, preallocated=False)
    live_partition(b, "t", 0, 6, variants=range(6), preallocated=False)
    live_partition(c, "t", 0, 6, variants=range(3, 4), preallocated=False)
    code, findings, _ = audit(spark, tmp_path / "out", f"a={a}", f"b={b}", f"c={c}")
    assert code == 1
    assert brief(findings) == [("a,c", "t", "replica-divergence", "error", 9, 11)]
    # Dirs without a cluster.id (meta.properties without one, or none at all) are one
    # group of their own: compared with each other, not with a named cluster's.
    d = kafka_log_dir(tmp_path / "d", None, 3, empty_checkpoints=False)
    e = tmp_path / "e"
    e.mkdir()
    live_partition(d, "t", 0, 6, variants=range(5, 6), preallocated=False)
    live_partition(e, "t", 0, 6, preallocated=False)
    code, findings, _ = audit(spark, tmp_path / "out2", f"a={a}", f"d={d}", f"e={e}")
    assert code == 1
    assert brief(findings) == [("d,e", "t", "replica-divergence", "error", 15, 17)]


def test_partitions_with_preallocated_indexes_in_few_spark_jobs(spark, tmp_path: Path):
    """A broker's dir of 8 partitions, each active segment with 10 MiB preallocated
    indexes (sparse as Kafka leaves them; one copied without holes, dense zeros). The
    zero tails are not entries (no finding), while real faults at the end of the written
    entries and inside the tails are still found, and the whole audit is one scan job
    and one findings job that writes the tables (it was 19 jobs, then 5)."""
    root = kafka_log_dir(tmp_path / "kafka-logs", empty_checkpoints=False)
    segs = {p: live_partition(root, "wide", p, 20, roll_every=8) for p in range(8)}
    active = {p: s[-1] for p, s in segs.items()}  # batches 16-19: 3 index entries
    base = int(active[1].stem)
    dense = active[3].with_suffix(".index")
    dense.write_bytes(dense.read_bytes())  # rewritten whole: zeros, no holes
    assert os.stat(dense).st_blocks * 512 >= OFFSET_INDEX_BYTES
    code, findings, summary = audit(spark, tmp_path / "clean", f"b0={root}")
    assert (findings, code, summary["segments"]) == ([], 0, 24)

    entries = index_entries(active[1].with_suffix(".index"))[:4]
    assert entries[3] == (0, 0) and len({pos for _rel, pos in entries[:3]}) == 3
    # The last written entry names the batch before it: a bad entry next to the tail.
    set_index_entry(active[1].with_suffix(".index"), 2, entries[2][0], entries[1][1])
    # Entries after the zero entry that ends the index, in a sparse and a dense tail.
    set_index_entry(active[2].with_suffix(".index"), 5000, 3, entries[1][1])
    set_index_entry(dense, 100_000, 3, entries[1][1])
    jobs = spark.sparkContext.statusTracker()
    before = set(jobs.getJobIdsForGroup(None))
    assert audit_main.main(["--quiet", "--out", str(tmp_path / "faults"), f"b0={root}"]) == 1
    ran = set(jobs.getJobIdsForGroup(None)) - before
    findings = [r.asDict() for r in
                spark.read.parquet(str(tmp_path / "faults" / "findings.parquet")).collect()]
    got = sorted((f["partition"], f["file"], f["kind"], f["severity"], f["position"],
                  f["offset_start"]) for f in findings)
    index = active[1].with_suffix(".index").name
    assert got == [
        (1, index, "index-mismatch", "error", entries[1][1], base + entries[2][0]),
        (2, index, "index-past-end", "error", entries[1][1], base + 3),
        (3, index, "index-past-end", "error", entries[1][1], base + 3),
    ]
    # The scan, and the findings pass whose tasks write findings.parquet and
    # segments.parquet (health.parquet and the reports are the driver's).
    assert len(ran) == 2, sorted(ran)
