"""Every file in the real Kafka fixtures loads and validates as its README says."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from logstore import Log, LogDir, checkpoint, verify

# From tests/fixtures/kafka/README.md: segment -> (batches, records).
EXPECTED = {
    "kafka-2.7.1/__consumer_offsets-17/00000000000000000000.log": (1, 1),
    "kafka-2.7.1/__consumer_offsets-17/00000000000000000001.log": (2, 2),
    "kafka-2.7.1/__consumer_offsets-28/00000000000000000000.log": (1, 1),
    "kafka-2.7.1/__consumer_offsets-28/00000000000000000002.log": (1, 1),
    "kafka-2.7.1/__consumer_offsets-39/00000000000000000000.log": (3, 3),
    "kafka-2.7.1/__consumer_offsets-39/00000000000000000018.log": (1, 2),
    "kafka-3.0.0/my-first-topic-0/00000000000000000000.log": (10, 11),
    "kafka-3.0.0/__consumer_offsets-13/00000000000000000000.log": (1339, 3093),
}


def test_every_fixture_segment_is_listed(kafka_fixtures):
    found = {str(p.relative_to(kafka_fixtures)) for p in kafka_fixtures.rglob("*.log")}
    assert found == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_fixture_segments_validate_with_readme_counts(kafka_fixtures, rel):
    report = verify.verify_segment(kafka_fixtures / rel)
    assert report.problems == []
    assert (report.batch_count, report.record_count) == EXPECTED[rel]
    assert report.valid_bytes == report.file_size


def test_compacted_fixture_shows_offset_gaps(kafka_fixtures):
    report = verify.verify_segment(
        kafka_fixtures / "kafka-2.7.1/__consumer_offsets-39/00000000000000000000.log")
    assert report.offset_gaps > 0


def test_fixture_records_decode(kafka_fixtures):
    from logstore.records import iter_batches

    data = (kafka_fixtures / "kafka-3.0.0/my-first-topic-0/00000000000000000000.log").read_bytes()
    recs = [r for b in iter_batches(data) for r in b.records()]
    assert len(recs) == 11
    assert [r.offset for r in recs] == list(range(11))


@pytest.mark.parametrize("name", [
    "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
    "cleaner-offset-checkpoint", "log-start-offset-checkpoint",
])
def test_checkpoints_parse_and_write_back_byte_for_byte(kafka_fixtures, tmp_path, name):
    files = sorted(kafka_fixtures.glob(f"*/{name}"))
    if name in ("cleaner-offset-checkpoint", "log-start-offset-checkpoint"):
        assert files, f"no {name} in the fixtures"
    for src in files:
        entries = checkpoint.read_offset_checkpoint(src)
        assert len(entries) == int(src.read_text().split("\n")[1]), src
        out = tmp_path / name
        checkpoint.write_offset_checkpoint(out, entries)
        assert out.read_bytes() == src.read_bytes()


def test_leader_epoch_and_partition_metadata_round_trip(kafka_fixtures, tmp_path):
    for src in kafka_fixtures.rglob("leader-epoch-checkpoint"):
        entries = checkpoint.read_leader_epoch_checkpoint(src)
        out = tmp_path / "lec"
        checkpoint.write_leader_epoch_checkpoint(out, entries)
        assert out.read_bytes() == src.read_bytes()
    for src in kafka_fixtures.rglob("partition.metadata"):
        meta = checkpoint.read_partition_metadata(src)
        out = tmp_path / "pm"
        checkpoint.write_partition_metadata(out, meta["topic_id"])
        assert out.read_bytes() == src.read_bytes()


def test_meta_properties_parse(kafka_fixtures):
    for src in kafka_fixtures.glob("*/meta.properties"):
        props = checkpoint.read_meta_properties(src)
        assert props["version"] == "0" and props["broker.id"] == "0"


@pytest.mark.parametrize("version", ["kafka-2.7.1", "kafka-3.0.0"])
def test_kafka_log_dir_opens_as_a_log_dir(kafka_fixtures, tmp_path, version):
    copy = tmp_path / version
    shutil.copytree(kafka_fixtures / version, copy)
    ld = LogDir.open(copy, broker_id=0)
    try:
        counts = {str(tp): log.log_end_offset for tp, log in ld.logs.items()}
        if version == "kafka-3.0.0":
            assert counts == {"__consumer_offsets-13": 3093, "my-first-topic-0": 11}
        else:
            assert counts["__consumer_offsets-39"] == 20
            assert counts["__consumer_offsets-17"] == 3
        for log in ld.logs.values():
            if log.log_end_offset > log.log_start_offset:  # myTopic-0 holds only a snapshot
                assert log.read(log.log_start_offset, 1 << 20)
        assert all(r.bytes_truncated == 0 for r in ld.recovery)
    finally:
        ld.close()
    reopened = LogDir.open(copy, broker_id=0)
    assert reopened.clean_shutdown
    reopened.close()


def test_single_fixture_partition_opens_as_a_log(kafka_fixtures, tmp_path):
    copy = tmp_path / "my-first-topic-0"
    shutil.copytree(kafka_fixtures / "kafka-3.0.0/my-first-topic-0", copy)
    log = Log.open(copy)
    assert (log.log_start_offset, log.log_end_offset) == (0, 11)
    log.close()


def test_dump_log_cli_over_fixtures(kafka_fixtures):
    run = subprocess.run([sys.executable, "-m", "daemon.cli", "dump-log", "--verify-index",
                          "--deep", "--json", str(kafka_fixtures)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["valid"]
    by_file = {f["file"].split("kafka/")[1]: f for f in doc["files"]}
    assert {k: (v["batchCount"], v["recordCount"]) for k, v in by_file.items()} == EXPECTED
    first = by_file["kafka-3.0.0/my-first-topic-0/00000000000000000000.log"]
    assert len(first["batches"][0]["records"]) == first["batches"][0]["count"]
