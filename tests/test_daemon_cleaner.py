"""The running daemon compacts a compacted topic (log.cleanup.policy=compact), and real
Kafka clients read the latest value of every key across the gaps it leaves; a dir that
fills pauses its cleaner (SATURATED, never OFFLINE) until it is ONLINE again; a daemon
killed mid-clean (kill -9) serves every key's latest value after its restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

import confluent_kafka as ck
import kafka.errors as KafkaErrors
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from logstore import checkpoint, names

from .daemon_helpers import Daemon, running
from .faults import tmpfs
from .sick_helpers import wait_for

KEYS = 50
LAG_MS = 15000  # long enough for a loaded machine to fill the disk inside it
ROUNDS = 20
COMPACTED = {"log.cleanup.policy": "compact", "log.segment.bytes": 16384,
             "log.cleaner.backoff.ms": 200, "num.partitions": 1}


def produce(bootstrap: str, topic: str, rounds: int = ROUNDS) -> dict[bytes, bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    expected = {}
    for r in range(rounds):
        for k in range(KEYS):
            key, value = f"key-{k}".encode(), f"value-{k}-{r};".encode() * 20
            producer.send(topic, key=key, value=value, partition=0)
            expected[key] = value
    producer.flush()
    producer.close()
    return expected


def consume(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    out = []
    for msg in consumer:
        out.append((msg.offset, msg.key, msg.value))
        if msg.offset >= end - 1:
            break
    consumer.close()
    return out


def consume_confluent(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """The same with librdkafka (confluent-kafka), from offset 0 to the log end."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                            "enable.auto.commit": False})
    _, end = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 30
    while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
        for m in consumer.consume(1000, 1.0):
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value()))
    consumer.close()
    return out


def cleaned_to(log_dir: Path, topic: str) -> int | None:
    path = log_dir / names.CLEANER_OFFSET_CHECKPOINT
    if not path.exists():
        return None
    return checkpoint.read_offset_checkpoint(path).get(names.TopicPartition(topic, 0))


def test_a_compacted_topic_is_cleaned_and_consumers_read_the_latest_values(tmp_path: Path) -> None:
    with running(tmp_path, COMPACTED, dirs=1) as d:
        expected = produce(d.bootstrap, "state")
        # Settled, not just checkpointed once: a second clean between the two reads
        # below would rightly leave the second one fewer records than the first.
        wait_for(lambda: settled(d.log_dirs[0], "state"), 60, "the cleaner settled")
        records = consume(d.bootstrap, "state")
        latest = {k: v for _, k, v in records}
        assert latest == expected
        assert consume_confluent(d.bootstrap, "state") == records
        assert len(records) < KEYS * ROUNDS / 3, "compaction removed the older values"
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(offsets) and offsets[-1] == KEYS * ROUNDS - 1
        assert "cleaned state-0" in d.stderr()
        # /cleaner says what each dir's cleaner does, as JSON.
        _, body = d.http("/cleaner")
        assert json.loads(body) == {str(d.log_dirs[0]): {
            "cleaning": None, "uncleanable": [], "paused": None}}
        # A record without a key is refused, as Kafka refuses it on a compacted topic.
        producer = KafkaProducer(bootstrap_servers=d.bootstrap, retries=0)
        with pytest.raises(KafkaErrors.InvalidRecordError):
            producer.send("state", value=b"no key", partition=0).get(timeout=10)
        producer.close()
        assert d.stop() == 0
    assert not list((tmp_path / "disk0" / "state-0").glob("*.cleaned"))


def test_max_compaction_lag_rolls_the_active_segment_for_the_cleaner(tmp_path: Path) -> None:
    """max.compaction.lag.ms bounds how long a compacted topic keeps an overwritten value,
    also when its segments take days to fill: as in Kafka (LogConfig.maxSegmentMs) a
    compacted log's segment rolls at min(segment.ms, max.compaction.lag.ms), so the
    next write after the lag rolls the active segment and the cleaner compacts it."""
    with running(tmp_path, {**COMPACTED, "log.segment.bytes": 1 << 20}, dirs=1) as d:
        admin = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck.admin.NewTopic("state", 1, 1, config={
            "max.compaction.lag.ms": "1000"})])["state"].result(30)
        producer = KafkaProducer(bootstrap_servers=d.bootstrap)
        for r in range(5):
            producer.send("state", key=b"k", value=b"old-%d" % r, partition=0).get(10)
        time.sleep(1.5)  # the active segment's first batch is past the lag
        producer.send("state", key=b"k", value=b"new", partition=0).get(10)
        producer.close()
        assert len(list((d.log_dirs[0] / "state-0").glob("*.log"))) == 2, "rolled"
        wait_for(lambda: [v for _, _, v in consume(d.bootstrap, "state")] == [b"old-4", b"new"],
                 20, "the rolled segment compacted")


def fill(path: Path) -> None:
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"x" * 65536)
        except OSError as err:
            assert err.errno == 28, err


def settled(log_dir: Path, topic: str) -> bool:
    """The cleaner has checkpointed `topic` and, a few backoffs later, no further."""
    before = cleaned_to(log_dir, topic)
    time.sleep(1)
    return before is not None and cleaned_to(log_dir, topic) == before


def test_a_saturated_dir_pauses_the_cleaner_until_it_is_online(tmp_path: Path) -> None:
    """Updates that become due (min.compaction.lag.ms) while the dir is SATURATED are
    not cleaned then; once space is back and the dir ONLINE they are. The dir is never
    OFFLINE on the way."""
    with tmpfs("8m") as mnt:
        disk = mnt / "disk0"
        extra = {**COMPACTED, "log.dirs": [str(disk)], "log.dir.reserve.bytes": 1 << 20,
                 "log.dir.probe.interval.ms": 100, "log.cleaner.min.compaction.lag.ms": LAG_MS}
        with running(tmp_path, extra, dirs=1) as d:
            expected = produce(d.bootstrap, "state")
            time.sleep(LAG_MS / 1000 + 0.5)  # the lag passes for all of it
            wait_for(lambda: settled(disk, "state"), 30, "the first cleans")
            expected.update(produce(d.bootstrap, "state"))
            started = time.monotonic()
            # What was due of the first updates (a segment that was active) is cleaned.
            wait_for(lambda: settled(disk, "state"), 30, "the cleans of what is due")
            first = cleaned_to(disk, "state")
            fill(disk.parent / "filler")
            wait_for(lambda: d.log_dir_states()[str(disk)] == "saturated", 20, "SATURATED")
            assert time.monotonic() - started < LAG_MS / 1000, "the new updates are not due yet"
            time.sleep(LAG_MS / 1000 + 1)  # they are due now; the cleaner waits for room
            assert cleaned_to(disk, "state") == first
            assert d.log_dir_states()[str(disk)] == "saturated"
            assert "cleaning paused: the dir is saturated" in d.stderr()
            assert not list((disk / "state-0").glob("*.cleaned"))
            (disk.parent / "filler").unlink()
            wait_for(lambda: d.log_dir_states()[str(disk)] == "online", 20, "ONLINE again")
            wait_for(lambda: (cleaned_to(disk, "state") or 0) > first, 30, "a clean once ONLINE")
            assert {k: v for _, k, v in consume(d.bootstrap, "state")} == expected
            assert d.log_dir_states()[str(disk)] == "online"
            assert "-> offline" not in d.stderr()


def _updates(d: Daemon, expected: dict[bytes, bytes], first: int) -> None:
    """40,000 updates of 2,000 keys, ~16 MiB: 16 segments of 1 MiB for a clean."""
    producer = KafkaProducer(bootstrap_servers=d.bootstrap, linger_ms=20, batch_size=64 << 10)
    for i in range(first, first + 40_000):
        key, value = f"key-{i % 2000}".encode(), f"{i};".encode() * 100
        producer.send("state", key=key, value=value, partition=0)
        expected[key] = value
    producer.flush()
    producer.close()


def _set_cleaner(d: Daemon, enabled: bool) -> None:
    old, new = ("false", "true") if enabled else ("true", "false")
    d.config.write_text(d.config.read_text().replace(f"log.cleaner.enable = {old}",
                                                     f"log.cleaner.enable = {new}"))


def test_a_daemon_killed_mid_clean_serves_the_latest_values_after_restart(tmp_path: Path) -> None:
    """kill -9 of the daemon while a `.cleaned` file is being written: the restart
    removes it (or completes a swap), cleans again, and consumers read every key's
    latest value."""
    big = {**COMPACTED, "log.segment.bytes": 1 << 20, "log.cleaner.enable": False}
    d = Daemon(tmp_path, big, dirs=1)
    pdir = d.log_dirs[0] / "state-0"
    expected: dict[bytes, bytes] = {}
    # A clean's `.cleaned` files live some tens of milliseconds: on a loaded machine
    # this test's polls can miss them all. Then that clean has completed, and another
    # 16 MiB of updates (the cleaner off) gives the next try a new one to catch.
    for attempt in range(5):
        d.start()  # not `with d:`: it enters a killed daemon without starting it
        try:
            _updates(d, expected, attempt * 40_000)
        finally:
            assert d.stop() == 0
        _set_cleaner(d, True)
        before = cleaned_to(d.log_dirs[0], "state")
        d.start()
        try:
            deadline = time.monotonic() + 30
            while not list(pdir.glob("*.cleaned")):
                if cleaned_to(d.log_dirs[0], "state") != before:
                    break  # missed: the clean is done
                assert time.monotonic() < deadline, "no clean started"
                time.sleep(0.002)
        finally:
            d.kill()
        if list(pdir.glob("*.cleaned")) or list(pdir.glob("*.swap")):
            break
        _set_cleaner(d, False)
    assert list(pdir.glob("*.cleaned")) or list(pdir.glob("*.swap")), "no kill mid-clean"
    d.start()
    try:
        wait_for(lambda: cleaned_to(d.log_dirs[0], "state") != before, 60,
                 "a clean after the crash")
        assert not list(pdir.glob("*.cleaned")) and not list(pdir.glob("*.swap"))
        records = consume(d.bootstrap, "state")
        assert {k: v for _, k, v in records} == expected
        assert len(records) < 40_000 / 4
    finally:
        d.stop()
        d.kill()


TRANSACTIONAL = {**COMPACTED, "offsets.topic.num.partitions": 1,
                 "offsets.topic.segment.bytes": 4096, "transaction.state.log.num.partitions": 1,
                 "group.initial.rebalance.delay.ms": 0}


def test_aborted_transactions_are_cleaned_away_with_the_offsets_they_committed(
        tmp_path: Path) -> None:
    """An exactly-once writer commits two transactions in three and aborts the third,
    each writing every key of a compacted topic and the group's offset: the cleaner
    removes the aborted values (a read_uncommitted consumer no longer sees them) and
    never lets them shadow a committed one, and `__consumer_offsets`, aborted offset
    commits in it, is compacted too; the group's offset is the last committed one,
    also after a restart loads the cleaned offsets partition."""
    d = Daemon(tmp_path, TRANSACTIONAL, dirs=1)
    with d:
        admin = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck.admin.NewTopic("state", 1, 1)])["state"].result(30)
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "transactional.id": "writer",
                         "linger.ms": 5})
        p.init_transactions(30)
        group = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "eos",
                             "enable.auto.commit": False})
        meta = group.consumer_group_metadata()
        expected: dict[bytes, bytes] = {}
        last_committed = -1
        for r in range(30):
            commit = r % 3 != 1
            written = {f"key-{k}".encode(): f"{'kept' if commit else 'aborted'}-{k}-{r};"
                       .encode() * 20 for k in range(KEYS)}
            p.begin_transaction()
            for key, value in written.items():
                p.produce("state", key=key, value=value, partition=0)
            p.send_offsets_to_transaction([ck.TopicPartition("state", 0, 1000 + r)], meta, 30)
            if commit:
                p.commit_transaction(30)
                expected.update(written)
                last_committed = 1000 + r
            else:
                p.abort_transaction(30)
        assert r % 3 != 1, "the last transaction commits"
        wait_for(lambda: settled(d.log_dirs[0], "state"), 60, "the cleaner settled")
        wait_for(lambda: cleaned_to(d.log_dirs[0], "__consumer_offsets"), 60,
                 "__consumer_offsets cleaned")
        records = consume(d.bootstrap, "state")  # read_uncommitted (kafka-python)
        assert not [v for _, _, v in records if v.startswith(b"aborted")]
        assert {k: v for _, k, v in records} == expected
        assert len(records) < KEYS * 30 / 3, "compaction removed the older values"
        committed = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "check",
                                 "isolation.level": "read_committed",
                                 "auto.offset.reset": "earliest", "enable.auto.commit": False})
        committed.assign([ck.TopicPartition("state", 0, 0)])
        got: dict[bytes, bytes] = {}
        deadline = time.monotonic() + 30
        while len(got) < KEYS or got != expected:
            assert time.monotonic() < deadline, "read_committed consumer stalled"
            for m in committed.consume(500, 0.5):
                assert m.error() is None, m.error()
                got[m.key()] = m.value()
        committed.close()
        _, body = d.http("/cleaner")
        assert json.loads(body)[str(d.log_dirs[0])]["uncleanable"] == []
        assert group.committed([ck.TopicPartition("state", 0)], 30)[0].offset == last_committed
        group.close()
        p.flush(10)
        del p
        assert d.stop() == 0
        d.start()
        reader = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "eos",
                              "enable.auto.commit": False})
        try:
            assert reader.committed([ck.TopicPartition("state", 0)], 30)[0].offset \
                == last_committed
        finally:
            reader.close()
