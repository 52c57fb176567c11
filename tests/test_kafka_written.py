"""The readers accept what Kafka itself writes (issue 9, 4d): `dump-log`, `Log.open` and
`verify` on log dirs as Kafka brokers leave them, and every real fault still found."""

from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path

import pytest

from logstore import CheckpointError, Log, LogConfig, LogDir, checkpoint, dump, names, verify

from .kafka_dirs import (
    OFFSET_INDEX_BYTES,
    TIME_INDEX_BYTES,
    kafka_log_dir,
    live_partition,
    older_broker_time_index,
)
from .logutil import batch


def dump_log(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    rc = dump.main(list(args), out=out)
    return rc, out.getvalue()


def dump_json(*args: str) -> tuple[int, dict]:
    rc, text = dump_log("--json", *args)
    return rc, json.loads(text)


# ---- preallocated, zero-filled index tails ----------------------------------------------


def test_preallocated_index_tails_are_not_entries(tmp_path: Path):
    """A live dir: an empty log (entry 0 unused too) and a log with entries, both with
    10 MiB zero-filled .index/.timeindex tails: no problem, only the written entries."""
    (empty,) = live_partition(tmp_path, "idle", 0, 0)
    segs = live_partition(tmp_path, "busy", 0, 12, roll_every=5)
    active = segs[-1]
    assert empty.stat().st_size == 0
    assert empty.with_suffix(".index").stat().st_size == OFFSET_INDEX_BYTES == 10485760
    assert active.with_suffix(".timeindex").stat().st_size == TIME_INDEX_BYTES == 10485756

    rc, doc = dump_json("--verify-index", str(tmp_path))
    assert rc == 0 and doc["valid"]
    by_name = {Path(f["file"]).parent.name + "/" + Path(f["file"]).name: f for f in doc["files"]}
    assert all(f["problems"] == [] for f in doc["files"]), [f["problems"] for f in doc["files"]]
    idle = by_name["idle-0/" + empty.name]
    assert (idle["indexEntries"], idle["timeIndexEntries"]) == (0, 0)
    busy = by_name["busy-0/" + active.name]
    assert busy["batchCount"] == 2 and busy["indexEntries"] == 1
    assert busy["timeIndexEntries"] == 1

    # Dumping an index file lists its written entries only, as Kafka's tool does.
    rc, doc = dump_json(str(active.with_suffix(".index")), str(empty.with_suffix(".timeindex")))
    assert rc == 0
    assert [len(f["entries"]) for f in doc["files"]] == [1, 0]

    # Still found: an entry after the zero entry that ends the index (a zeroed entry in
    # the middle, not preallocated space).
    index = active.with_suffix(".index")
    with open(index, "r+b") as f:
        f.seek(8 * 40)
        f.write(struct.pack(">ii", 7, 300))
    rc, doc = dump_json("--verify-index", str(active))
    assert rc == 1
    assert [(p["kind"], p["position"]) for p in doc["files"][0]["problems"]] == [
        ("index-past-end", 300)]


# ---- empty checkpoint files ---------------------------------------------------------------


@pytest.mark.parametrize("name", [names.CLEANER_OFFSET_CHECKPOINT,
                                  names.REPLICATION_OFFSET_CHECKPOINT,
                                  names.RECOVERY_POINT_CHECKPOINT])
def test_empty_offset_checkpoint_has_no_entries(tmp_path: Path, name: str):
    path = tmp_path / name
    path.write_bytes(b"")
    assert checkpoint.read_offset_checkpoint(path) == {}
    path.write_bytes(b"0\n")  # a version and nothing more: Kafka reads no entries too
    assert checkpoint.read_offset_checkpoint(path) == {}
    for bad in (b"1\n0\n", b"0\n2\nt 0 5\n", b"0\nx\n", b"0\n1\nt 0\n"):
        path.write_bytes(bad)
        with pytest.raises(CheckpointError):
            checkpoint.read_offset_checkpoint(path)


def test_log_dir_with_empty_checkpoints_opens(tmp_path: Path):
    root = kafka_log_dir(tmp_path / "kafka-logs")
    live_partition(root, "t", 0, 4)
    ld = LogDir.open(root, broker_id=0)
    try:
        assert ld.get_log("t", 0).log_end_offset == 12
    finally:
        ld.close()


@pytest.mark.parametrize("clean", [False, True])
def test_log_opens_with_an_empty_leader_epoch_checkpoint(tmp_path: Path, clean: bool):
    segs = live_partition(tmp_path, "t", 0, 4)
    pdir = segs[0].parent
    (pdir / names.LEADER_EPOCH_CHECKPOINT).write_bytes(b"")
    if clean:
        (tmp_path / names.CLEAN_SHUTDOWN_FILE).touch()
    log = Log.open(pdir)
    try:
        assert log.epochs.entries == [] and log.log_end_offset == 12
    finally:
        log.close()


# ---- time-index entries of older brokers ---------------------------------------------------


def test_time_index_entries_inside_a_batch_are_accepted(tmp_path: Path):
    """Kafka 2.x: a time-index entry names the record holding the max timestamp."""
    seg = live_partition(tmp_path, "old", 0, 10, roll_every=6)[0]  # rolled: trimmed
    assert older_broker_time_index(seg) >= 3
    report = verify.verify_segment(seg)
    assert report.problems == []
    rc, _ = dump_log("--verify-index", str(seg))
    assert rc == 0

    # Still found: an entry inside a batch whose max timestamp is not the entry's.
    tindex = seg.with_suffix(".timeindex")
    ts, rel = struct.unpack_from(">qi", tindex.read_bytes(), 12)
    with open(tindex, "r+b") as f:
        f.seek(12)
        f.write(struct.pack(">qi", ts - 1, rel))
    kinds = [(p.kind, p.offset) for p in verify.verify_segment(seg).problems]
    assert kinds == [("timeindex-mismatch", rel)]


# ---- Log.open with the clean-shutdown marker ------------------------------------------------


def test_clean_marker_open_reports_the_torn_tail_it_cuts(tmp_path: Path):
    pdir = tmp_path / "t-0"
    log = Log.open(pdir, LogConfig(index_interval_bytes=100))
    for _ in range(5):
        log.append(batch(2, size=300))
    log.close()
    seg = pdir / names.log_file_name(0)
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(batch(1)[:40])  # a half-written batch
    seg.with_suffix(".index").unlink()  # not sane: the segment is recovered
    (tmp_path / names.CLEAN_SHUTDOWN_FILE).touch()
    log = Log.open(pdir)
    try:
        assert log.recovery.indexes_rebuilt == [0]
        assert log.recovery.bytes_truncated == 40 and "torn tail" in log.recovery.problem
        assert seg.stat().st_size == size and log.log_end_offset == 10
    finally:
        log.close()


def test_open_close_of_an_empty_preallocated_segment_writes_no_time_entry(tmp_path: Path):
    (empty,) = live_partition(tmp_path, "idle", 0, 0)
    (tmp_path / names.CLEAN_SHUTDOWN_FILE).touch()
    log = Log.open(empty.parent)
    assert log.active_segment.time_index.entries == 0
    log.close()
    assert empty.with_suffix(".timeindex").stat().st_size == 0
    rc, doc = dump_json("--verify-index", str(empty))
    assert rc == 0 and doc["files"][0]["problems"] == []


# ---- dump-log past a bad CRC -------------------------------------------------------------


def _one_segment(tmp_path: Path, n: int = 6) -> tuple[Path, list]:
    pdir = tmp_path / "t-0"
    log = Log.open(pdir, LogConfig(index_interval_bytes=200))
    infos = [log.append(batch(2, size=300)) for _ in range(n)]
    log.close()
    return pdir / names.log_file_name(0), infos


def test_dump_log_goes_on_past_a_bad_crc(tmp_path: Path):
    seg, infos = _one_segment(tmp_path)
    bad = infos[2]
    with open(seg, "r+b") as f:
        f.seek(bad.position + 100)
        byte = f.read(1)
        f.seek(bad.position + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    rc, doc = dump_json("--verify-index", str(seg))
    assert rc == 1
    (file_doc,) = doc["files"]
    assert [b["baseOffset"] for b in file_doc["batches"]] == [i.base_offset for i in infos]
    assert [b["isvalid"] for b in file_doc["batches"]] == [True, True, False, True, True, True]
    assert [(p["kind"], p["position"], p["offset"]) for p in file_doc["problems"]] == [
        ("bad-crc", bad.position, bad.base_offset)]
    rc, text = dump_log(str(seg))
    assert rc == 1 and text.count("baseOffset:") == 6 and "isvalid: false" in text


def test_dump_log_problems_name_the_offset_and_add_no_follow_on_index_errors(tmp_path: Path):
    seg, infos = _one_segment(tmp_path)
    # The last batch torn: its header, with its base offset, is still there.
    os.truncate(seg, seg.stat().st_size - 7)
    rc, doc = dump_json("--verify-index", str(seg))
    assert rc == 1
    assert [(p["kind"], p["position"], p["offset"]) for p in doc["files"][0]["problems"]] == [
        ("torn-tail", infos[-1].position, infos[-1].base_offset)]
    # Broken framing in the middle (a batch length of 5): the scan cannot go on, and the
    # index entries past that point are unverifiable, not wrong.
    (tmp_path / "again").mkdir()
    seg, infos = _one_segment(tmp_path / "again")
    with open(seg, "r+b") as f:
        f.seek(infos[2].position + 8)
        f.write(struct.pack(">i", 5))
    rc, doc = dump_json("--verify-index", str(seg))
    assert rc == 1
    assert [(p["kind"], p["position"], p["offset"]) for p in doc["files"][0]["problems"]] == [
        ("corrupt-batch", infos[2].position, infos[2].base_offset)]

