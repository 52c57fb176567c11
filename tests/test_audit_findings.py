"""The audit's per-partition findings (spark_audit.findings) without Spark: replica
comparison (majorities, ties, boundaries that stop lining up, islands, the shared
range, replicas missing their head, clusters), gaps and overlaps, checkpoints, the
severity policy, segment summaries and the reports' tally."""

from __future__ import annotations

import pickle
import random

import pytest

from logstore import names
from spark_audit import findings as F

T, P = "t", 0
LOG0 = names.log_file_name(0)


def seg(host, base, first, last, *, status="OK", batches=1, gaps=0, dir_="/d", topic=T):
    return ("segments", (host, dir_, topic, P, names.log_file_name(base), base, 1000, batches,
                         3 * batches, first, last, 900, status, False, 0, gaps, None, None, 0.0))


def prints(host, batches, *, file=LOG0, dir_="/d"):
    """A replica's fingerprints, packed as the scan packs them; position 100 * i."""
    packed = b"".join(F.FINGERPRINT.pack(100 * i, base, last, crc)
                      for i, (base, last, crc) in enumerate(batches))
    return ("fingerprints", (host, dir_, T, P, file, packed))


def cp(host, name, offset, *, dir_="/d", topic=T, partition=P):
    return ("checkpoints", (host, dir_, name, topic, partition, offset))


def pdir(host, *, dir_="/d", segments=1, topic=T):
    return ("partitions", (host, dir_, topic, P, segments))


def problem(host, kind, *, file=LOG0, position=900, offset=None, topic=T, dir_="/d"):
    return ("problems", (host, dir_, topic, None if topic is None else P, file, kind,
                         "error", position, offset, kind))


def facts(hosts="abc", *, clean=(), clusters=None, named=(), cleaned=(), gapped=()):
    """Dirs /d of these hosts (cluster X unless `clusters` says), and what is compacted."""
    clusters = clusters or {}
    dirs = tuple(F.Dir(h, "/d", True, h in clean, None, None, clusters.get(h, "X"))
                 for h in hosts)
    return F.Facts(dirs, frozenset(cleaned), frozenset(gapped), tuple(named))


def audit(*tagged, key=(T, P), facts_=None):
    """partition_findings of these tagged rows: (findings, segment summaries)."""
    rows = F.PartitionRows()
    for t in tagged:
        rows.add(t)
    found, summaries = F.partition_findings(key, rows, facts_ or facts())
    return found, summaries


def brief(found):
    return sorted((f.host, f.dir, f.file, f.position, f.offset_start, f.offset_end, f.kind,
                   f.severity) for f in found)


def replicated(spec, *, hw=None, log_start=None, facts_=None):
    """Logs of t-0 on each host of spec (host -> [(base, last, crc)]), one segment
    each, with their fingerprints; an optional high watermark for all of them and log
    start checkpoints (host -> offset)."""
    tagged = []
    for host, batches in spec.items():
        base = batches[0][0]
        tagged += [pdir(host), seg(host, base, base, batches[-1][1], batches=len(batches)),
                   prints(host, batches, file=names.log_file_name(base))]
        if hw is not None:
            tagged.append(cp(host, F.HIGH_WATERMARK, hw))
    for host, offset in (log_start or {}).items():
        tagged.append(cp(host, F.LOG_START, offset))
    return audit(*tagged, facts_=facts_)[0]


def batches(*bounds, crc=7):
    """Consecutive batches: bounds are (base, last) pairs."""
    return [(base, last, crc) for base, last in bounds]


# ---- rows and schema -----------------------------------------------------------------


def test_rows_are_the_schema_columns():
    pytest.importorskip("pyspark")
    from spark_audit import schema

    for row, table in ((F.Segment, schema.SEGMENTS), (F.Problem, schema.PROBLEMS),
                       (F.PartitionDir, schema.PARTITIONS), (F.Dir, schema.DIRS),
                       (F.CheckpointEntry, schema.CHECKPOINTS), (F.Finding, schema.FINDINGS)):
        assert list(row._fields) == table.fieldNames()
    assert list(F.FINGERPRINT_FIELDS) == schema.BATCHES.fieldNames()[5:]
    assert schema.SEGMENT_SUMMARIES.fieldNames() == [
        *F.Segment._fields, "compacted", "active", "errors", "warnings"]
    _found, summaries = audit(pdir("a"), seg("a", 0, 0, 9))
    assert len(summaries[0]) == len(schema.SEGMENT_SUMMARIES.fields)
    tally = F.Tally()
    tally.add([], summaries)
    assert len(tally.health(facts("a").dirs)[0]) == len(schema.HEALTH.fields)


def test_batch_rows_and_packed_fingerprints_are_the_same_rows():
    one = F.rows_of(prints("a", [(0, 9, 5), (10, 19, 6)]))
    two = F.rows_of(("batches", ("a", "/d", T, P, LOG0, 0, 0, 9, 5)))
    two.merge(F.rows_of(("batches", ("a", "/d", T, P, LOG0, 100, 10, 19, 6))))
    assert one.fingerprints == two.fingerprints
    fp = F.Fingerprints(two.fingerprints[("a", "/d")])
    assert (list(fp.bases), list(fp.lasts), list(fp.crcs)) == ([0, 10], [9, 19], [5, 6])
    assert fp.holder("a", "/d", 1) == ("a", "/d", LOG0, 100)


# ---- replica comparison --------------------------------------------------------------


def test_divergence_names_the_minority_with_its_file_and_position():
    common = batches((0, 9), (10, 19))
    found = replicated({"a": common + [(20, 29, 7)], "b": common + [(20, 29, 7)],
                        "c": common + [(20, 29, 5)]})
    (f,) = found
    assert (f.host, f.dir, f.file, f.position, f.offset_start, f.offset_end, f.severity) == (
        "c", "/d", LOG0, 200, 20, 29, "error")
    assert f.detail == ("replicas of t-0 disagree on offsets 20-29 (1 differing batches); "
                        "first at offset 20: c: last offset 29, crc 00000005; "
                        "a+b: last offset 29, crc 00000007")


def test_divergence_on_a_tie_names_every_host():
    (f,) = replicated({"a": batches((0, 9), (10, 19)), "b": batches((0, 9)) + [(10, 19, 8)]})
    assert (f.host, f.dir, f.file, f.position, f.offset_start, f.offset_end) == (
        "a,b", "/d", None, None, 10, 19)
    assert "first at offset 10: a: last offset 19, crc 00000007; b: last offset 19, " \
           "crc 00000008" in f.detail


def test_boundaries_that_stop_lining_up_are_one_divergence():
    """c's batches run 20-24, 25-39 where a and b have 20-29, 30-39: the offsets from
    20 on disagree until 40, where all three agree again."""
    head, tail = batches((0, 9), (10, 19)), batches((40, 49))
    ab = head + batches((20, 29), (30, 39)) + tail
    (f,) = replicated({"a": ab, "b": ab, "c": head + batches((20, 24), (25, 39), crc=5) + tail})
    assert (f.host, f.offset_start, f.offset_end, f.position) == ("c", 20, 39, 200)
    assert "(1 differing batches)" in f.detail


def test_islands_end_where_every_replica_agrees():
    """Two divergences with agreement between them are two findings; offsets one
    replica lacks join the island beside them, and alone make none."""
    a = batches(*[(10 * i, 10 * i + 9) for i in range(10)])
    b = list(a)
    b[2] = (20, 29, 1)  # diverges
    del b[3]  # lacks 30-39: joins the island of 20-29
    b[4] = (50, 59, 2)  # index 4 is offsets 50-59 now: a second island
    c = list(a)
    del c[8]  # lacks 80-89 alone: no finding
    found = replicated({"a": a, "b": b, "c": c})
    assert brief(found) == [("b", "/d", LOG0, 200, 20, 39, "replica-divergence", "error"),
                            ("b", "/d", LOG0, 400, 50, 59, "replica-divergence", "error")]


def test_only_offsets_below_the_common_high_watermark_and_held_by_all_are_compared():
    a = batches((0, 9), (10, 19), (20, 29), (30, 39))
    b = batches((10, 19)) + [(20, 29, 1)] + [(30, 39, 1)]  # starts at 10
    assert brief(replicated({"a": a, "b": b}, hw=20)) == []
    (f,) = replicated({"a": a, "b": b}, hw=30)
    assert (f.offset_start, f.offset_end) == (20, 29)
    (f,) = replicated({"a": a, "b": b})  # no high watermark: up to the shorter log end
    assert (f.offset_start, f.offset_end) == (20, 39)


def test_a_replica_with_a_batch_twice_is_compared_batch_by_batch():
    """Batches out of order (a segment overlapping the one before): the same base
    offset twice in one replica. Once alike, it is not a divergence (but does not
    agree either); differing, the copy that differs is named."""
    a = batches((0, 9), (10, 19), (10, 19), (20, 29))
    b = batches((0, 9), (10, 19), (20, 29))
    assert replicated({"a": a, "b": b}) == []
    a[2] = (10, 19, 3)
    (f,) = replicated({"a": a, "b": b})
    assert (f.host, f.position, f.offset_start, f.offset_end) == ("a", 200, 10, 19)


@pytest.mark.parametrize("seed", range(30))
def test_array_and_batch_by_batch_comparison_agree(seed, monkeypatch):
    """Random replicas (differing CRCs, split and missing batches): comparing their
    agreeing head and tail as arrays (in blocks of 3 here) and the rest batch by batch
    finds what comparing every batch finds."""
    rnd = random.Random(seed)
    truth, offset = [], 0
    for _ in range(rnd.randint(5, 60)):
        size = rnd.randint(1, 3)
        truth.append((offset, offset + size - 1, rnd.randrange(1 << 32)))
        offset += size
    spec = {}
    for host in "abcd"[:rnd.randint(2, 4)]:
        out = []
        for base, last, crc in truth[rnd.randint(0, 3):]:
            r = rnd.random()
            if r < 0.05:
                out.append((base, last, crc ^ 1))
            elif r < 0.08 and last > base:
                out += [(base, base, crc), (base + 1, last, crc)]
            elif r > 0.97:
                continue
            else:
                out.append((base, last, crc))
        spec[host] = out
    hw = offset - rnd.randint(0, 5)
    monkeypatch.setattr(F, "_BLOCK", 3)
    by_arrays = replicated(spec, hw=hw)
    monkeypatch.setattr(F.Fingerprints, "in_order", lambda self: False)
    assert by_arrays == replicated(spec, hw=hw)


def test_a_replica_missing_its_head_names_its_peers():
    a = batches((0, 9), (10, 19), (20, 29))
    found = replicated({"a": a, "b": batches((20, 29)), "c": a}, hw=30, log_start={"b": 0})
    (f,) = [f for f in found if f.kind == "replica-missing"]
    assert (f.host, f.offset_start, f.offset_end, f.severity) == ("b", 0, 19, "error")
    assert f.detail == ("this replica starts at offset 20 though its "
                        "log-start-offset-checkpoint says 0; offsets 0-19 are held by a,c")
    # Its log start says the head was deleted on purpose: nothing is missing.
    assert replicated({"a": a, "b": batches((20, 29))}, log_start={"b": 20}) == []


def test_replicas_are_compared_within_a_cluster_only():
    spec = {"a": batches((0, 9)), "b": batches((0, 9), crc=1), "c": batches((0, 9), crc=2)}
    one_each = facts(clusters={"a": "X", "b": "Y", "c": "Z"})
    assert replicated(spec, facts_=one_each) == []
    no_id = facts(clusters={"a": "X", "b": None, "c": None})  # b and c: the "" group
    (f,) = replicated(spec, facts_=no_id)
    assert f.host == "b,c"


def test_replicas_of_a_compacted_topic_are_not_compared():
    spec = {"a": batches((0, 9)), "b": batches((0, 9), crc=1)}
    assert replicated(spec, facts_=facts(named=[T])) == []
    assert replicated(spec, facts_=facts(cleaned=[T])) == []


# ---- one log -------------------------------------------------------------------------


def test_gaps_and_overlaps_between_segments_and_inside_them():
    found, _ = audit(pdir("a", segments=5),
                     seg("a", 0, 0, 9), seg("a", 5, 5, 19),  # overlap 5-9
                     seg("a", 30, 30, 39, status="TORN"),  # gap 20-29; stops early
                     seg("a", 50, 50, 59),  # no gap after a segment whose scan stopped
                     seg("a", 60, 62, 69, gaps=1, batches=3),  # 2 gaps inside
                     seg("a", 70, None, None, batches=0))  # empty: not compared
    assert brief(found) == [
        ("a", "/d", names.log_file_name(5), 0, 5, 9, "offset-overlap", "error"),
        ("a", "/d", names.log_file_name(30), None, 20, 29, "offset-gap", "error"),
        ("a", "/d", names.log_file_name(60), None, 60, 69, "offset-gap", "error"),
    ]
    details = sorted(f.detail for f in found)
    assert details == [
        "2 gap(s) in the offsets inside 00000000000000000060.log (base 60, batches from 62 "
        "to 69): compaction",
        "offsets 20-29 are in no segment: 00000000000000000005.log ends at 19, "
        "00000000000000000030.log starts at 30",
        "segment 00000000000000000005.log starts at offset 5, but the previous segment "
        "00000000000000000000.log already holds offsets up to 9",
    ]
    found, _ = audit(pdir("a", segments=2), seg("a", 0, 0, 9), seg("a", 20, 20, 29),
                     facts_=facts(gapped=[T]))
    assert [(f.kind, f.severity) for f in found] == [("offset-gap", "warning")]


def test_checkpoints_against_the_log():
    found, _ = audit(
        pdir("a"), seg("a", 0, 0, 99),
        cp("a", F.RECOVERY_POINT, 150), cp("a", F.HIGH_WATERMARK, 120),
        pdir("b", segments=0),  # a partition dir without segments
        pdir("c"), pdir("c", dir_="/e"), seg("c", 0, 0, 9, status="TORN"),
        cp("c", F.LOG_START, 50),  # its end is unknown (the scan stopped): not compared
        pdir("d"), seg("d", 0, 0, 9), cp("d", F.HIGH_WATERMARK, 20),  # a clean dir
        facts_=facts("abcd", clean="cd"))
    assert brief(found) == [
        ("a", "/d", LOG0, None, 100, 119, "hw-ahead", "warning"),
        ("a", "/d", LOG0, None, 100, 149, "checkpoint-ahead", "error"),
        ("b", "/d", None, None, None, None, "no-segments", "warning"),
        ("c", "/d,/e", None, None, None, None, "duplicate-log", "error"),
        ("d", "/d", LOG0, None, 10, 19, "hw-ahead", "error"),
    ]
    details = {(f.host, f.kind): f.detail for f in found}
    assert details[("a", "checkpoint-ahead")] == (
        "the log ends at offset 100 but its checkpoints say recovery point 150, log start -: "
        "offsets 100-149 that were flushed are gone")
    assert details[("a", "hw-ahead")] == (
        "the log ends at offset 100, below its high watermark 120 in "
        "replication-offset-checkpoint")
    assert details[("c", "duplicate-log")] == "t-0 has a directory in 2 log dirs of c: /d, /e"
    assert details[("b", "no-segments")] == "partition dir t-0 holds no .log segment"

    (orphan,), _ = audit(cp("a", F.RECOVERY_POINT, 40, topic="gone"),
                         cp("a", F.HIGH_WATERMARK, 40, topic="gone"), key=("gone", P))
    assert (orphan.host, orphan.topic, orphan.kind, orphan.severity) == (
        "a", "gone", "checkpoint-orphan", "warning")
    assert orphan.detail == ("gone-0 is listed in recovery-point-offset-checkpoint, "
                             "replication-offset-checkpoint but has no directory in this "
                             "log dir")


# ---- severity ------------------------------------------------------------------------


def test_a_torn_tail_is_a_warning_on_the_active_segment_only():
    """Its detail says what the severity cannot: not the active segment, a clean
    shutdown, or data below the recovery point."""
    def torn(host, *segs, rp=None):
        tagged = [pdir(host), *[seg(host, b, b, b + 9) for b in segs[:-1]],
                  seg(host, segs[-1], segs[-1], segs[-1] + 9, status="TORN"),
                  problem(host, "torn-tail")]
        if rp is not None:
            tagged.append(cp(host, F.RECOVERY_POINT, rp))
        (f,) = audit(*tagged, facts_=facts("ab", clean="b"))[0]
        return f.severity, f.detail

    assert torn("a", 0, 10) == ("error", "torn-tail (not the active segment)")
    assert torn("a", 0) == ("warning", "torn-tail")
    assert torn("a", 0, rp=5) == ("warning", "torn-tail")
    assert torn("a", 0, rp=50) == (
        "warning", "torn-tail (below the recovery point 50: flushed data is lost)")
    assert torn("b", 0, rp=50) == ("warning", "torn-tail (the log dir was shut down cleanly)")


def test_severity_of_other_kinds():
    found, _ = audit(pdir("a"), seg("a", 0, 0, 9), problem("a", "vanished"),
                     problem("a", "legacy-format"), problem("a", "bad-crc"))
    assert sorted((f.kind, f.severity) for f in found) == [
        ("bad-crc", "error"), ("legacy-format", "warning"), ("vanished", "warning")]
    # A dir-level problem (no topic) keeps its place and is an error.
    (f,), summaries = audit(problem("a", "dir-unreadable", file=None, position=None,
                                    topic=None), key=(None, None))
    assert (f.host, f.dir, f.topic, f.partition, f.kind, f.severity) == (
        "a", "/d", None, None, "dir-unreadable", "error")
    assert summaries == []


# ---- summaries and the tally ---------------------------------------------------------


def test_segment_summaries_count_their_findings():
    """An index finding counts on its segment; the last segment is the active one."""
    _found, summaries = audit(
        pdir("a", segments=2), seg("a", 0, 0, 9), seg("a", 10, 10, 19),
        problem("a", "index-mismatch", file=names.index_file_name(0)),
        problem("a", "legacy-format", file=names.log_file_name(10)),
        facts_=facts(named=[T]))
    assert [s[len(F.Segment._fields):] for s in summaries] == [
        (True, False, 1, 0), (True, True, 0, 1)]


def test_tally_counts_health_totals_and_the_first_findings():
    dirs = (F.Dir("a", "/d", True, False, None, None, None),
            F.Dir("b", "/d", False, None, None, "cannot list", None),
            F.Dir("c", "/d", True, False, None, None, None),
            F.Dir("c", "/e", True, False, None, None, None))
    one = F.Tally(max_listed=3)
    found, summaries = audit(pdir("a", segments=2), seg("a", 0, 0, 9, batches=2),
                             seg("a", 10, 10, 19), problem("a", "bad-crc"),
                             pdir("c"), seg("c", 0, 0, 9), problem("c", "vanished"))
    one.add(found, summaries)
    other = F.Tally(max_listed=3)
    other.add([F.Finding(None, None, None, None, None, None, None, None, "x", "error", "")
               for _ in range(2)], [])
    tally = one.merge(other)
    assert tally.summary_totals() == {"segments": 3, "bytes": 3000, "batches": 4,
                                      "records": 12, "logs": 2, "hosts": 2,
                                      "dirs_with_segments": 2}
    assert tally.kinds == {("a", "error", "bad-crc"): 1, ("c", "warning", "vanished"): 1,
                           (None, "error", "x"): 2}
    assert tally.health(dirs) == [("a", "/d", 2, 2000, 1, 0, "error"),
                                  ("b", "/d", 0, 0, 0, 0, "unreadable"),
                                  ("c", "/d", 1, 1000, 0, 1, "warning"),
                                  ("c", "/e", 0, 0, 0, 0, "ok")]
    # Errors first, nulls first (as Spark orders them), at most max_listed.
    assert [(f.host, f.kind) for f in tally.listed_findings()] == [
        (None, "x"), (None, "x"), ("a", "bad-crc")]


def test_what_crosses_processes_pickles():
    """A partition's rows cross the shuffle, the tallies the collect."""
    rows = F.rows_of(prints("a", [(0, 9, 5)]))
    rows.add(seg("a", 0, 0, 9))
    assert pickle.loads(pickle.dumps(rows)) == rows
    tally = F.Tally()
    tally.add(*audit(pdir("a"), seg("a", 0, 0, 9), problem("a", "bad-crc")))
    back = pickle.loads(pickle.dumps(tally))
    assert (back.summary_totals(), back.kinds, back.listed_findings()) == (
        tally.summary_totals(), tally.kinds, tally.listed_findings())


def test_compacted_topics_and_why():
    assert F.compacted_topics(["s", "__consumer_offsets"], ["s"], ["g"]) == {
        "__consumer_offsets": "Kafka internal compacted topic; named with --compacted",
        "__transaction_state": "Kafka internal compacted topic",
        "s": "in a cleaner-offset-checkpoint; named with --compacted",
        "g": "offsets missing inside a segment"}
