"""`logkeeper dump-log` as a user runs it: output, problems found, exit codes 0/1/2."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

from logstore import Log, LogConfig

from .kafka_dirs import follower_indexes
from .logutil import batch


def dump(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "daemon.cli", "dump-log", *args],
                          capture_output=True, text=True)


def _segments(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=3000, index_interval_bytes=200))
    for _ in range(8):
        log.append(batch(2, size=300))
    log.close()
    return sorted((tmp_path / "t-0").glob("*.log"))


def test_valid_segments_exit_0_with_one_line_per_batch(tmp_path):
    segs = _segments(tmp_path)
    run = dump("--verify-index", str(segs[0]))
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("baseOffset:") == 4 and "isvalid: true" in run.stdout


def test_kafka_dump_log_sh_spellings_work(tmp_path):
    """An operator's kafka-dump-log.sh line: --files A,B --deep-iteration --print-data-log."""
    segs = _segments(tmp_path)
    ours = dump("--deep", str(segs[0]), str(segs[1]))
    kafkas = dump("--files", f"{segs[0]},{segs[1]}", "--deep-iteration", "--print-data-log")
    assert kafkas.returncode == ours.returncode == 0, kafkas.stderr
    assert kafkas.stdout == ours.stdout and "payload:" in ours.stdout
    assert ours.stdout.count("baseOffset:") == 8


def test_flipped_byte_exits_1_naming_the_position(tmp_path):
    seg = _segments(tmp_path)[0]
    data = bytearray(seg.read_bytes())
    data[800] ^= 0x01
    seg.write_bytes(data)
    run = dump("--json", str(seg))
    assert run.returncode == 1
    (doc,) = json.loads(run.stdout)["files"]
    (problem,) = doc["problems"]
    assert problem["kind"] == "bad-crc" and problem["position"] < 800


def test_corrupt_index_entry_is_found_only_with_verify_index(tmp_path):
    seg = _segments(tmp_path)[0]
    index = seg.with_suffix(".index")
    entries = index.read_bytes()
    assert len(entries) >= 16
    rel, pos = struct.unpack_from(">ii", entries, 8)
    # Same offset, a position 7 bytes off: ordered, but no batch starts there.
    index.write_bytes(entries[:8] + struct.pack(">ii", rel, pos + 7) + entries[16:])
    assert dump(str(seg)).returncode == 0
    run = dump("--verify-index", "--json", str(seg))
    assert run.returncode == 1
    problems = json.loads(run.stdout)["files"][0]["problems"]
    assert [(p["kind"], p["position"]) for p in problems] == [("index-mismatch", pos + 7)]


def test_a_kafka_followers_index_passes_verify_index(tmp_path):
    """A Kafka 2.x/3.0 follower's entries map a fetched chunk's last offset to its first
    batch: sound (a lookup scans forward from there). One a lookup would skip its offset
    from, at the batch after the one holding it, is still found."""
    log = Log.open(tmp_path / "t-0", LogConfig())
    for _ in range(24):
        log.append(batch(2, size=300))
    log.close()
    (seg,) = sorted((tmp_path / "t-0").glob("*.log"))
    offsets, _ = follower_indexes(seg, 3, interval=1000)
    assert len(offsets) >= 4 and offsets[1][0] % 6 == 5  # 3 batches of 2 offsets a chunk
    run = dump("--verify-index", "--json", str(seg))
    assert run.returncode == 0, run.stdout
    assert json.loads(run.stdout)["files"][0]["problems"] == []
    # Entry 1 at the chunk's second batch, naming its first batch's last offset.
    first_last, second_at = offsets[1][0] - 4, offsets[1][1] + (len(batch(2, size=300)))
    index = seg.with_suffix(".index")
    data = bytearray(index.read_bytes())
    struct.pack_into(">ii", data, 8, first_last, second_at)
    index.write_bytes(bytes(data))
    run = dump("--verify-index", "--json", str(seg))
    assert run.returncode == 1
    problems = json.loads(run.stdout)["files"][0]["problems"]
    assert [(p["kind"], p["offset"], p["position"]) for p in problems] == [
        ("index-mismatch", first_last, second_at)]


def test_usage_and_io_errors_exit_2(tmp_path):
    assert dump().returncode == 2
    missing = dump(str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and "nope.log" in missing.stderr
    (tmp_path / "x.txt").write_text("hi")
    assert dump(str(tmp_path / "x.txt")).returncode == 2


def test_index_files_dump_their_entries(tmp_path):
    seg = _segments(tmp_path)[0]
    run = dump("--json", str(seg.with_suffix(".index")))
    assert run.returncode == 0
    entries = json.loads(run.stdout)["files"][0]["entries"]
    assert entries and all(e["offset"] >= 0 and e["position"] > 0 for e in entries)
