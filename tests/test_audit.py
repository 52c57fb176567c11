"""The Spark audit (issue 5) end to end on a local SparkSession: the real Kafka fixtures,
multi-host layouts written by logstore with real injected faults, the host-local
(--scan-only / --from-scans) workflow, and the severity policy on a synthetic fleet.
Findings are compared as whole DataFrames (every column but the wording of `detail`)."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from logstore import LogConfig, LogDir, checkpoint, names
from tests.audit_helpers import (  # noqa: F401  (spark_session is the `spark` fixture)
    BATCHES_PER_LOG,
    DISKS,
    PLACEMENT,
    RECORDS_PER_BATCH,
    REPO,
    ROLL_EVERY,
    delete_segment,
    flip_byte,
    index_entries,
    make_batch,
    set_index_entry,
    spark_session,
    truncate_tail,
    write_layout,
)

pytest.importorskip("pyspark")
from pyspark.sql import Row  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402

from spark_audit import findings, io, schema, transforms  # noqa: E402
from spark_audit import main as audit_main  # noqa: E402

pytestmark = pytest.mark.spark

COMPARED = [c for c in schema.FINDING_COLUMNS if c != "detail"]
COMPARED_SCHEMA = schema.StructType([schema.FINDINGS[c] for c in COMPARED])


def finding(host, dir_, topic, partition, file, kind, severity, *, position=None,
            start=None, end=None) -> tuple:
    row = dict(host=host, dir=str(dir_), topic=topic, partition=partition, file=file,
               position=position, offset_start=start, offset_end=end, kind=kind,
               severity=severity)
    return tuple(row[c] for c in COMPARED)


def assert_findings(spark, actual, expected: list[tuple]) -> None:
    assertDataFrameEqual(actual.select(*COMPARED),
                         spark.createDataFrame(expected, COMPARED_SCHEMA), checkRowOrder=False)


def run_audit(args: list[str]) -> int:
    return audit_main.main(["--quiet", *args])


def read_out(spark, out: Path):
    return (spark.read.parquet(str(out / "findings.parquet")),
            spark.read.parquet(str(out / "segments.parquet")),
            json.loads((out / "summary.json").read_text()))


# ---- the real Kafka fixtures ---------------------------------------------------------


def _checkpoint_partitions(log_dir: Path) -> set[tuple[str, int]]:
    """Every partition named in a dir's offset checkpoints (plain text parse)."""
    out = set()
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                 "log-start-offset-checkpoint", "cleaner-offset-checkpoint"):
        path = log_dir / name
        if path.exists():
            for line in path.read_text().splitlines()[2:]:
                topic, partition, _ = line.split(" ")
                out.add((topic, int(partition)))
    return out


def test_real_kafka_log_dirs_have_no_errors(spark, kafka_fixtures: Path, tmp_path: Path):
    k271, k300 = kafka_fixtures / "kafka-2.7.1", kafka_fixtures / "kafka-3.0.0"
    out = tmp_path / "out"
    assert run_audit(["--out", str(out), f"k271={k271}", f"k300={k300}"]) == 0
    findings, segments, summary = read_out(spark, out)
    assert summary["errors"] == 0 and summary["exit_code"] == 0

    # The legitimate oddities of real brokers, and nothing else: compaction gaps in
    # __consumer_offsets (warnings), a partition dir whose empty segment was left out
    # of the fixture, and checkpoint entries for partitions not kept in the fixture.
    expected = [
        finding("k271", k271, "__consumer_offsets", 28, "00000000000000000000.log",
                "offset-gap", "warning", start=0, end=1),
        finding("k271", k271, "__consumer_offsets", 39, "00000000000000000000.log",
                "offset-gap", "warning", start=0, end=17),
        finding("k271", k271, "myTopic", 0, None, "no-segments", "warning"),
    ]
    for host, root in (("k271", k271), ("k300", k300)):
        present = {names.parse_partition_dir(p.name) for p in root.iterdir() if p.is_dir()}
        for topic, partition in sorted(_checkpoint_partitions(root) - present):
            expected.append(finding(host, root, topic, partition, None, "checkpoint-orphan",
                                    "warning"))
    assert len(expected) == 3 + 49 + 57
    assert_findings(spark, findings, expected)

    # Per-segment summaries agree with the fixture README's table.
    readme = [
        ("k271", "__consumer_offsets", 17, "00000000000000000000.log", 1, 1),
        ("k271", "__consumer_offsets", 17, "00000000000000000001.log", 2, 2),
        ("k271", "__consumer_offsets", 28, "00000000000000000000.log", 1, 1),
        ("k271", "__consumer_offsets", 28, "00000000000000000002.log", 1, 1),
        ("k271", "__consumer_offsets", 39, "00000000000000000000.log", 3, 3),
        ("k271", "__consumer_offsets", 39, "00000000000000000018.log", 1, 2),
        ("k300", "my-first-topic", 0, "00000000000000000000.log", 10, 11),
        ("k300", "__consumer_offsets", 13, "00000000000000000000.log", 1339, 3093),
    ]
    assertDataFrameEqual(
        segments.select("host", "topic", "partition", "file", "batch_count", "record_count"),
        spark.createDataFrame(readme, "host string, topic string, partition int, file string, "
                                      "batch_count long, record_count long"),
        checkRowOrder=False)
    assert segments.where("status != 'OK'").count() == 0
    assert (out / "report.txt").read_text().startswith("logkeeper Spark audit")
    assert "host \\ log dir" in (out / "report.html").read_text()


# ---- layouts written by logstore -----------------------------------------------------


def test_clean_multi_host_layout_has_no_findings(spark, tmp_path: Path):
    layout = write_layout(tmp_path / "fleet")
    manifest = tmp_path / "fleet.manifest"
    manifest.write_text("# host log-dir\n" + "\n".join(
        r.replace("=", " ") if i % 2 else r for i, r in enumerate(layout.roots())) + "\n")
    out = tmp_path / "out"
    assert run_audit(["--out", str(out), "--manifest", str(manifest)]) == 0
    findings, segments, summary = read_out(spark, out)
    assert findings.count() == 0
    assert (summary["errors"], summary["warnings"]) == (0, 0)
    assert summary["hosts"] == 3 and len(summary["health"]) == len(DISKS)
    assert {h["status"] for h in summary["health"]} == {"ok"}

    expected = []
    for log in layout.logs.values():
        for name, batches in log.segments.items():
            expected.append(Row(host=log.host, dir=log.dir, topic=log.topic,
                                partition=log.partition, file=name,
                                batch_count=len(batches),
                                record_count=len(batches) * RECORDS_PER_BATCH,
                                first_offset=batches[0].base_offset,
                                last_offset=batches[-1].last_offset, status="OK",
                                active=name == max(log.segments)))
    assert len(expected) == sum(len(p) for p in PLACEMENT.values()) * (
        BATCHES_PER_LOG // ROLL_EVERY)
    assertDataFrameEqual(segments.select(*expected[0].asDict()), expected, checkRowOrder=False)


def faulted_fleet(root: Path):
    """The faults of issue 5 section 5 (a torn tail twice: on a middle segment, an error,
    and on a last one, a warning): the layout and the findings expected, each exactly once."""
    # host3's replica of orders-0 holds different records in batches 10-12 (same offsets).
    layout = write_layout(root, diverge={("host3", "orders", 0): range(10, 13)})
    log = layout.log("host3", "orders", 0)
    name, batches = log.segment(10 // ROLL_EVERY)  # 12 is in the next segment
    first = batches[10 % ROLL_EVERY]
    last = log.segment(12 // ROLL_EVERY)[1][12 % ROLL_EVERY]
    expected = [finding("host3", log.dir, "orders", 0, name, "replica-divergence", "error",
                        position=first.position, start=first.base_offset, end=last.last_offset)]
    # A flipped byte inside a record of the third batch of a middle segment.
    log = layout.log("host1", "payments", 0)
    name, batches = log.segment(1)
    flip_byte(log.path / name, batches[2].position + 100)
    # Its base offset (outside the CRC) is named too.
    bad = batches[2]
    expected.append(finding("host1", log.dir, "payments", 0, name, "bad-crc", "error",
                            position=bad.position, start=bad.base_offset, end=bad.base_offset))
    # A truncated tail on a segment that is not the last: its last batch loses 7 bytes.
    log = layout.log("host2", "clicks", 0)
    name, batches = log.segment(1)
    truncate_tail(log.path / name, 7)
    torn = batches[-1]
    expected.append(finding("host2", log.dir, "clicks", 0, name, "torn-tail", "error",
                            position=torn.position, start=torn.base_offset, end=torn.base_offset))
    # The same on the last (active) segment of another partition: a warning.
    log = layout.log("host1", "clicks", 1)
    name, batches = log.segment(3)
    truncate_tail(log.path / name, 7)
    torn = batches[-1]
    expected.append(finding("host1", log.dir, "clicks", 1, name, "torn-tail", "warning",
                            position=torn.position, start=torn.base_offset, end=torn.base_offset))
    # A corrupt index entry: the second entry of a segment's .index points one byte off.
    log = layout.log("host1", "clicks", 1)
    name, batches = log.segment(2)
    index = log.path / name.replace(".log", ".index")
    rel, pos = index_entries(index)[1]
    set_index_entry(index, 1, rel, pos + 1)
    base = batches[0].base_offset
    expected.append(finding("host1", log.dir, "clicks", 1, index.name, "index-mismatch",
                            "error", position=pos + 1, start=base + rel, end=base + rel))
    # A deleted middle segment (.log and its indexes) of a replica.
    log = layout.log("host3", "payments", 1)
    name, batches = log.segment(1)
    after, _ = log.segment(2)
    delete_segment(log.path, name)
    expected.append(finding("host3", log.dir, "payments", 1, after, "offset-gap", "error",
                            start=batches[0].base_offset, end=batches[-1].last_offset))
    return layout, expected


def test_each_injected_fault_is_found_once_in_its_place(spark, tmp_path: Path):
    layout, expected = faulted_fleet(tmp_path / "fleet")
    out = tmp_path / "out"
    assert run_audit(["--out", str(out), *layout.roots()]) == 1
    findings, _segments, summary = read_out(spark, out)
    assert_findings(spark, findings, expected)
    assert (summary["errors"], summary["warnings"]) == (5, 1)
    health = {(h["host"], h["dir"]): h["status"] for h in summary["health"]}
    assert health[("host2", layout.roots()[2].split("=")[1])] == "error"
    assert health[("host1", layout.roots()[0].split("=")[1])] == "error"
    divergence = findings.where("kind = 'replica-divergence'").first()
    assert "host1+host2" in divergence.detail and "host3" in divergence.detail
    report = (out / "report.txt").read_text()
    assert "5 errors, 1 warnings -> exit 1" in report
    assert "bad-crc" in (out / "report.html").read_text()


def test_host_local_scans_then_one_comparison(spark, tmp_path: Path):
    """--scan-only per host (as on each broker), then --from-scans over all of them:
    the same findings as one job, replica comparison included."""
    layout, expected = faulted_fleet(tmp_path / "fleet")
    scans = []
    for host in ("host1", "host2", "host3"):
        scans.append(str(tmp_path / "scans" / host))
        roots = [r for r in layout.roots() if r.startswith(host + "=")]
        assert run_audit(["--scan-only", "--out", scans[-1], *roots]) == 0
    out = tmp_path / "out"
    assert run_audit(["--out", str(out), "--from-scans", *scans]) == 1
    findings, _, _ = read_out(spark, out)
    assert_findings(spark, findings, expected)


def test_crash_artifacts_and_compacted_gaps_are_warnings(spark, tmp_path: Path):
    """A dir stopped uncleanly with a torn tail beyond its recovery point, a topic named
    --compacted with offsets missing, a checkpoint entry without its dir, a dir in use
    (preallocated indexes): warnings only, exit 0."""
    root = tmp_path / "broker" / "disk0"
    ld = LogDir.open(root, LogConfig(), broker_id=1)
    crashed = ld.create_log("events", 0)
    for i in range(4):
        crashed.append(make_batch("events", 0, i))
    crashed.flush()
    ld.write_checkpoints()  # recovery point 12: the next batch was never flushed
    last = crashed.append(make_batch("events", 0, 4))
    kept = ld.create_log("state", 0)
    for i in range(6):
        if i in (2, 4):
            kept.roll()
        kept.append(make_batch("state", 0, i))
    ld.write_checkpoints()
    ld.close(clean=False)
    truncate_tail(crashed.dir / names.log_file_name(0), 5)
    delete_segment(kept.dir, names.log_file_name(6))  # offsets 6-11 of the compacted topic
    cp = root / "recovery-point-offset-checkpoint"
    entries = checkpoint.read_offset_checkpoint(cp)
    entries[names.TopicPartition("gone", 3)] = 40
    checkpoint.write_offset_checkpoint(cp, entries)

    # A live dir: its active segment's index files are preallocated (zero tails).
    live_root = tmp_path / "broker" / "disk1"
    live = LogDir.open(live_root, LogConfig(index_interval_bytes=1024), broker_id=1)
    busy = live.create_log("busy", 0)
    for i in range(8):
        busy.append(make_batch("busy", 0, i))
    busy.flush()
    assert (busy.dir / names.index_file_name(0)).stat().st_size > 1 << 20

    out = tmp_path / "out"
    try:
        assert run_audit(["--out", str(out), "--compacted", "state", f"b1={root}",
                          f"b1={live_root}"]) == 0
    finally:
        live.close()
    findings, _, summary = read_out(spark, out)
    assert_findings(spark, findings, [
        finding("b1", root, "events", 0, names.log_file_name(0), "torn-tail", "warning",
                position=last.position, start=last.base_offset, end=last.base_offset),
        finding("b1", root, "state", 0, names.log_file_name(12), "offset-gap", "warning",
                start=6, end=11),
        finding("b1", root, "gone", 3, None, "checkpoint-orphan", "warning"),
    ])
    assert (summary["errors"], summary["warnings"]) == (0, 3)


# ---- the severity policy on a synthetic fleet (pure transforms) ----------------------


def test_policy_on_synthetic_tables(spark):
    """Cases that are awkward to make with files: three replicas with a majority, two
    replicas on a tie, boundaries that stop lining up, a replica missing its head,
    checkpoints ahead of the log, torn tails on either side of the recovery point
    (warnings on the active segment whatever the recovery point says)."""
    S = schema

    def seg(host, topic, p, base, first, last, status="OK", batches=1, gaps=0, dir_="/d"):
        return (host, dir_, topic, p, names.log_file_name(base), base, 1000, batches,
                batches, first, last, 1000, status, False, 0, gaps, None, None, 0.0)

    def bat(host, topic, p, base, last, crc, dir_="/d"):
        return (host, dir_, topic, p, names.log_file_name(0), base * 10, base, last, crc)

    hosts = ["a", "b", "c"]
    dirs = [(h, "/d", True, h == "c", None, None, None) for h in hosts]
    segments, batches, checkpoints, problems = [], [], [], []
    # t3-0 on a, b, c: c differs at base 20 and its boundaries then run 20-24, 25-39
    # while a and b have 20-29, 30-39: one divergence 20-39 on c.
    for h in hosts:
        segments.append(seg(h, "t3", 0, 0, 0, 49))
        for b, last in ((0, 9), (10, 19), (40, 49)):
            batches.append(bat(h, "t3", 0, b, last, 7))
        if h == "c":
            batches += [bat(h, "t3", 0, 20, 24, 5), bat(h, "t3", 0, 25, 39, 5)]
        else:
            batches += [bat(h, "t3", 0, 20, 29, 7), bat(h, "t3", 0, 30, 39, 7)]
    # t2-0 on a and b: a tie at base 5 names both; b starts at 20 although its
    # log-start checkpoint says 0: it lacks 0-19 that a holds.
    segments += [seg("a", "t2", 0, 0, 0, 29), seg("b", "t2", 0, 20, 20, 29)]
    batches += [bat("a", "t2", 0, 0, 9, 1), bat("a", "t2", 0, 10, 19, 1),
                bat("a", "t2", 0, 20, 24, 1), bat("a", "t2", 0, 25, 29, 2),
                bat("b", "t2", 0, 20, 24, 1), bat("b", "t2", 0, 25, 29, 3)]
    checkpoints += [("b", "/d", findings.LOG_START, "t2", 0, 0),
                    ("a", "/d", findings.HIGH_WATERMARK, "t2", 0, 30),
                    ("b", "/d", findings.HIGH_WATERMARK, "t2", 0, 30)]
    # Single-replica logs on a (unclean dir), c (clean dir).
    segments += [
        seg("a", "ahead", 0, 0, 0, 99),  # recovery point 150, high watermark 120
        seg("a", "torn", 0, 0, 0, 99, status="TORN"),  # beyond recovery point 50: warning
        seg("a", "lost", 0, 0, 0, 99, status="TORN"),  # recovery point 200: still a warning
        seg("a", "old", 0, 0, 0, 99, status="TORN"), seg("a", "old", 0, 100, 100, 199),
        seg("c", "hw", 0, 0, 0, 99),  # clean dir, high watermark 150: error
    ]
    checkpoints += [("a", "/d", findings.RECOVERY_POINT, "ahead", 0, 150),
                    ("a", "/d", findings.HIGH_WATERMARK, "ahead", 0, 120),
                    ("a", "/d", findings.RECOVERY_POINT, "torn", 0, 50),
                    ("a", "/d", findings.RECOVERY_POINT, "lost", 0, 200),
                    ("c", "/d", findings.HIGH_WATERMARK, "hw", 0, 150)]
    for topic in ("torn", "lost", "old"):
        problems.append(("a", "/d", topic, 0, names.log_file_name(0), "torn-tail", "error",
                         900, None, "torn tail"))
    partitions = sorted({(s[0], s[1], s[2], s[3], 1) for s in segments})

    result = transforms.audit(io.RawTables(
        spark.createDataFrame(dirs, S.DIRS), spark.createDataFrame(partitions, S.PARTITIONS),
        spark.createDataFrame(checkpoints, S.CHECKPOINTS),
        spark.createDataFrame(segments, S.SEGMENTS), spark.createDataFrame(problems, S.PROBLEMS),
        spark.createDataFrame(batches, S.BATCHES)).rows)
    log0 = names.log_file_name(0)
    assert_findings(spark, result.findings, [
        finding("c", "/d", "t3", 0, log0, "replica-divergence", "error", position=200,
                start=20, end=39),
        finding("a,b", "/d", "t2", 0, None, "replica-divergence", "error", start=25, end=29),
        finding("b", "/d", "t2", 0, None, "replica-missing", "error", start=0, end=19),
        finding("a", "/d", "ahead", 0, log0, "checkpoint-ahead", "error", start=100, end=149),
        finding("a", "/d", "ahead", 0, log0, "hw-ahead", "warning", start=100, end=119),
        finding("c", "/d", "hw", 0, log0, "hw-ahead", "error", start=100, end=149),
        finding("a", "/d", "torn", 0, log0, "torn-tail", "warning", position=900),
        finding("a", "/d", "lost", 0, log0, "torn-tail", "warning", position=900),
        finding("a", "/d", "old", 0, log0, "torn-tail", "error", position=900),
    ])


def test_task_planning():
    """Whole waves of even tasks, several segments per task, each partition's files in
    order within a task, every segment exactly once."""
    def segs(sizes):
        return [io.SegmentFile("h", "/d", "t", i % 3, f"/d/t-{i % 3}/{i:020d}.log", size)
                for i, size in enumerate(sizes)]

    def shape(sizes, parallelism, task_bytes=1 << 30):
        groups = io.plan_tasks(segs(sizes), {("t", 0)}, parallelism=parallelism,
                            task_bytes=task_bytes)
        paths = [item[4] for g in groups for item in g]
        assert sorted(paths) == sorted(s.path for s in segs(sizes))  # each once
        assert all([item[4] for item in g] == sorted(item[4] for item in g) for g in groups)
        assert all(item[5] == (item[3] == 0) for g in groups for item in g)
        return sorted(len(g) for g in groups)

    assert shape([256 << 20] * 8, 2) == [4, 4]  # 2 GiB on 2 cores: one wave of 1 GiB
    assert shape([256 << 20] * 9, 2) == [2, 2, 2, 3]  # over 1 GiB a task: two waves
    assert shape([100] * 3000, 2) == [1500, 1500]  # tiny files: still one task a core
    assert shape([100] * 3, 8) == [1, 1, 1]  # fewer segments than cores
    assert shape([], 2) == []


def test_scan_of_nothing_and_of_an_empty_dir(spark, tmp_path: Path):
    """No root at all, and a root without partitions: empty tables, one dir row."""
    raw = io.scan(spark, [])
    try:
        assert {name: df.count() for name, df in raw.tables().items()} == dict.fromkeys(
            schema.RAW_TABLES, 0)
    finally:
        raw.release()
    raw = io.scan(spark, [io.Root("h", str(tmp_path))])
    try:
        assert [tuple(r) for r in raw.dirs.collect()] == [
            ("h", str(tmp_path), True, False, None, None, None)]
        assert raw.segments.count() == raw.problems.count() == 0
    finally:
        raw.release()


def test_batch_fingerprints_are_each_batch_of_each_log(spark, tmp_path: Path):
    """The scan's packed fingerprints, unpacked in Spark, are every batch's position,
    offsets and CRC (read back from the files: bytes 17-20 of a v2 batch header)."""
    layout = write_layout(tmp_path / "fleet")
    expected = []
    for log in layout.logs.values():
        for name, batches in log.segments.items():
            data = (log.path / name).read_bytes()
            expected += [(log.host, log.dir, log.topic, log.partition, name, b.position,
                          b.base_offset, b.last_offset,
                          int.from_bytes(data[b.position + 17:b.position + 21], "big"))
                         for b in batches]
    raw = io.scan(spark, [io.parse_root(r) for r in layout.roots()], fingerprint_all=True)
    try:
        assertDataFrameEqual(raw.batches, spark.createDataFrame(expected, schema.BATCHES),
                             checkRowOrder=False)
    finally:
        raw.release()


def test_bad_arguments_exit_2(tmp_path: Path, capsys):
    assert audit_main.main([]) == 2
    assert audit_main.main(["no-equals-sign"]) == 2
    assert "HOST=PATH" in capsys.readouterr().err
    assert audit_main.main(["--manifest", str(tmp_path / "missing")]) == 2
    assert audit_main.main(["--scan-only", "h=/x"]) == 2  # --scan-only needs --out


def test_an_interpreter_without_the_audit_extra_is_told_what_to_install(
        tmp_path: Path, capsys, monkeypatch):
    """pyarrow (or PySpark) missing, as in a venv `make run` made: exit 2 with what to
    install, nothing written; --help still answers."""
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # its import now fails
    out = tmp_path / "out"
    assert audit_main.main(["--out", str(out), f"h={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "pyarrow not installed" in err and "'.[audit]'" in err, err
    assert not out.exists()
    assert audit_main.main(["--help"]) == 0


def test_job_failure_exits_2(spark, tmp_path: Path, capsys):
    assert audit_main.main(["--from-scans", str(tmp_path)]) == 2
    assert "not a --scan-only output" in capsys.readouterr().err


# ---- through the real command line (subprocesses) ------------------------------------


@functools.cache
def _failing_python3() -> str:
    """A dir holding a `python3` that fails at once, removed at exit."""
    where = tempfile.mkdtemp(prefix="lk-no-python3-")
    atexit.register(shutil.rmtree, where, True)
    script = Path(where, "python3")
    script.write_text("#!/bin/sh\necho 'not the audit interpreter' >&2\nexit 97\n")
    script.chmod(0o755)
    return where


def cli(*args: str, command: tuple[str, ...] = (sys.executable, "-m", "daemon.cli", "audit")
        ) -> subprocess.CompletedProcess:
    """Run `logkeeper audit ARGS` (the same dispatcher as the console script) or another
    command on this tree; its exit code and output. The first `python3` on PATH fails,
    as a machine's own may lack the audit's dependencies: a local audit's workers run
    the audit's interpreter. spark-submit is told which one to run (PYSPARK_PYTHON), as
    a user of a venv tells it."""
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env.update(PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        PATH=os.pathsep.join((_failing_python3(), os.environ.get("PATH", os.defpath))))
    if command[0] != sys.executable:
        env["PYSPARK_PYTHON"] = sys.executable
    return subprocess.run([*command, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_cli_bad_arguments_and_missing_dirs_exit_2(tmp_path: Path):
    """Refused before Spark starts (nothing is written under --out), with the reason."""
    out = tmp_path / "out"
    a_file = tmp_path / "file"
    a_file.write_text("")
    bad_manifest = tmp_path / "bad.manifest"
    bad_manifest.write_text(f"h1={tmp_path}\njust-a-word\n")
    cases = [
        ([], "give HOST=PATH"),
        (["--bogus", f"h={tmp_path}"], "unrecognized arguments: --bogus"),
        (["no-equals-sign"], "expected HOST=PATH"),
        ([f"h1={tmp_path}", f"h2={tmp_path / 'nope'}"],
         f"h2={tmp_path / 'nope'}: no such directory"),
        ([f"h={a_file}"], f"h={a_file}: not a directory"),
        ([f"h1={tmp_path}", f"h2={tmp_path}"], "given for two hosts, h1 and h2"),
        (["--manifest", str(tmp_path / "missing")], "cannot read manifest"),
        (["--manifest", str(bad_manifest)], f"{bad_manifest}:2: expected HOST=PATH"),
        (["--scan-only", f"h={tmp_path}"], "--scan-only needs --out"),
    ]
    for args, message in cases:
        done = cli(*args) if "--scan-only" in args else cli("--out", str(out), *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert not out.exists()
    done = cli("--help")
    assert done.returncode == 0 and "HOST=PATH" in done.stdout


def test_cli_exit_codes_of_a_run(tmp_path: Path):
    """0 for a clean layout, 1 once a byte is flipped, 2 when the job fails (the output
    dir cannot be created)."""
    layout = write_layout(tmp_path / "fleet")
    out = tmp_path / "out"
    done = cli("--quiet", "--out", str(out), *layout.roots())
    assert done.returncode == 0, done.stderr
    segments = sum(len(p) for p in PLACEMENT.values()) * (BATCHES_PER_LOG // ROLL_EVERY)
    assert f"0 errors, 0 warnings in {segments} segments" in done.stdout
    assert json.loads((out / "summary.json").read_text())["exit_code"] == 0
    # The tables the pass's tasks wrote are in place, and nothing of their staging is.
    assert sorted(p.name for p in out.iterdir()) == [
        "findings.parquet", "health.parquet", "report.html", "report.txt",
        "segments.parquet", "summary.json"]
    for table in ("findings", "segments", "health"):
        parts = list((out / f"{table}.parquet").iterdir())
        assert parts and all(p.name.startswith("part-") and p.suffix == ".parquet"
                             for p in parts), parts

    log = layout.log("host2", "orders", 0)
    name, batches = log.segment(0)
    flip_byte(log.path / name, batches[1].position + 80)
    done = cli("--quiet", "--out", str(out), *layout.roots())
    assert done.returncode == 1, done.stderr
    assert "1 errors, 0 warnings" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["exit_code"], summary["findings_by_kind"]["error"]) == (1, {"bad-crc": 1})

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    done = cli("--quiet", "--out", str(blocker / "out"), *layout.roots())
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "logkeeper audit: failed:" in done.stderr


def test_cli_with_a_local_master_runs_its_workers_on_the_audit_interpreter(
        kafka_fixtures: Path, tmp_path: Path):
    """`--master local[2]` is still one machine: its workers run the audit's own
    interpreter, not the first `python3` on PATH (which fails here, as a machine's own
    python3 without pyspark or logkeeper would)."""
    out = tmp_path / "out"
    done = cli("--master", "local[2]", "--quiet", "--out", str(out),
               f"k300={kafka_fixtures / 'kafka-3.0.0'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["errors"] == 0


def spark_submit() -> str:
    """pyspark's spark-submit beside this interpreter (a venv's), else the one on PATH.
    pyspark ships it, so in CI a missing one is a failure, not a skip."""
    beside = Path(sys.executable).parent / "spark-submit"
    found = str(beside) if beside.exists() else shutil.which("spark-submit")
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("spark-submit is missing: pyspark (the audit extra) installs it")
        pytest.skip("spark-submit not found (pyspark installs it; `make test` does)")
    return found


def test_spark_submit_runs_main_as_a_script(kafka_fixtures: Path, tmp_path: Path):
    submit = spark_submit()
    out = tmp_path / "out"
    done = cli("--master", "local[1]", "spark_audit/main.py", "--quiet", "--out", str(out),
               f"k271={kafka_fixtures / 'kafka-2.7.1'}",
               f"k300={kafka_fixtures / 'kafka-3.0.0'}", command=(submit,))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["errors"], summary["segments"]) == (0, 8)
    done = cli("--master", "local[1]", "spark_audit/main.py", f"k={tmp_path / 'nope'}",
               command=(submit,))
    # spark-submit passes the Python driver's stderr on through its stdout.
    assert done.returncode == 2 and "no such directory" in done.stdout + done.stderr


# ---- logs compacted by logstore's cleaner --------------------------------------------


def test_logs_compacted_by_our_cleaner_audit_clean(spark, tmp_path: Path):
    """A compacted topic cleaned twice (gaps inside and between segments, tombstones
    with their delete horizon, a run's emptied last batch) beside a plain topic: no
    error, and the compacted topic is known as such from the cleaner-offset-checkpoint,
    without --compacted."""
    from logstore.cleaner import LogDirCleaner
    from logstore.records import Record, build_batch

    now = 1_700_000_000_000
    root = tmp_path / "broker" / "disk0"
    config = LogConfig(compacted=True, segment_bytes=4096, index_interval_bytes=256,
                       min_cleanable_dirty_ratio=0.1)
    ld = LogDir.open(root, config, broker_id=1)
    log = ld.create_log("state", 0)
    plain = ld.create_log("events", 0, LogConfig())
    for round_ in range(3):
        for i in range(0, 200, 4):
            log.append(build_batch([Record(f"k{(i + j) % 30}".encode(),
                                           None if round_ == 2 and (i + j) % 30 < 5
                                           else b"v" * 80, [], now + i + j)
                                    for j in range(4)]))
            plain.append(make_batch("events", 0, i))
        log.roll()
        log.high_watermark = log.log_end_offset
        plain.high_watermark = plain.log_end_offset
        assert LogDirCleaner(ld).run(now) == 1
    ld.close()
    out = tmp_path / "out"
    assert run_audit(["--out", str(out), f"b1={root}"]) == 0
    findings, _, summary = read_out(spark, out)
    assert summary["errors"] == 0
    assert {r["kind"] for r in findings.collect()} <= {"offset-gap"}
    assert "in a cleaner-offset-checkpoint" in summary["compacted_topics"].get("state", "")
    assert "events" not in summary["compacted_topics"]
