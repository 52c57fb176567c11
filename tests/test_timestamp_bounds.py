"""`message.timestamp.before.max.ms` / `message.timestamp.after.max.ms` (KIP-937) and the
deprecated `message.timestamp.difference.max.ms`, a topic's or the broker's
`log.message.timestamp.*.max.ms`: a leader refuses a batch holding a CreateTime
timestamp further than that from its clock (INVALID_TIMESTAMP, 32, with Kafka's record
errors), writing none of it; LogAppendTime topics and followers take any. Real clients:
confluent-kafka and kafka-python.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaProducer
from kafka import errors as kafka_errors
from kafka.protocol.producer import ProduceRequest

from logstore import InvalidTimestampError, LogConfig
from logstore.logdir import LogDir
from logstore.records import Record, build_batch
from tests.cluster_helpers import wait_for
from tests.daemon_helpers import Daemon, RawClient, running

HOUR = 3600 * 1000


def _now() -> int:
    return int(time.time() * 1000)


# ---- the log ----


def _log(tmp_path: Path, **config: int | str):
    ld = LogDir.open(tmp_path / "d", LogConfig(**config))
    return ld, ld.create_log("bounded", 0)


def test_a_leader_refuses_a_batch_with_a_timestamp_out_of_bounds(tmp_path: Path) -> None:
    ld, log = _log(tmp_path, timestamp_before_max_ms=HOUR, timestamp_after_max_ms=60_000)
    now = _now()
    log.append(build_batch([Record(b"k", b"in", timestamp=now - HOUR // 2)]))
    end, size = log.log_end_offset, log.size_bytes
    with pytest.raises(InvalidTimestampError, match="rejected due to invalid timestamp") as refused:
        log.append(build_batch([Record(b"k", b"ok", timestamp=now),
                                Record(b"k", b"old", timestamp=now - 2 * HOUR),
                                Record(b"k", b"ahead", timestamp=now + 120_000)]))
    assert refused.value.error_code == 32
    (i1, why1), (i2, why2) = refused.value.record_errors
    assert (i1, i2) == (1, 2)
    assert why1.startswith(f"Timestamp {now - 2 * HOUR} of message with offset 1 is out of range. "
                           "The timestamp should be within [")
    assert f"Timestamp {now + 120_000} of message with offset 2" in why2
    # Nothing of the batch was written, not even its good record.
    assert (log.log_end_offset, log.size_bytes) == (end, size)
    # A timestamp of -1 (none) is not checked, as Kafka's.
    log.append(build_batch([Record(b"k", b"none", timestamp=-1)], base_timestamp=-1))
    # A follower copies its leader's batches whatever their timestamps.
    copy = build_batch([Record(b"k", b"old", timestamp=now - 5 * HOUR)], base_offset=end + 1)
    log.append(copy, assign_offsets=False)
    assert log.log_end_offset == end + 2
    ld.close()


def test_the_difference_key_bounds_what_before_and_after_leave_unbounded(tmp_path: Path) -> None:
    ld, log = _log(tmp_path, timestamp_difference_max_ms=HOUR, timestamp_after_max_ms=10 * HOUR)
    now = _now()
    with pytest.raises(InvalidTimestampError):  # before falls back to the difference
        log.append(build_batch([Record(b"k", b"v", timestamp=now - 2 * HOUR)]))
    log.append(build_batch([Record(b"k", b"v", timestamp=now + 5 * HOUR)]))  # after is its own
    # LogAppendTime: the leader's own clock stamps the batch, nothing to refuse.
    log.update_config(log.config.replace(timestamp_type="LogAppendTime"))
    log.append(build_batch([Record(b"k", b"v", timestamp=now - 100 * HOUR)]))
    assert log.log_end_offset == 2
    ld.close()


# ---- the daemon, with real clients ----


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("ts-bounds"), {
            "auto.create.topics.enable": False,
            "log.message.timestamp.after.max.ms": HOUR}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        for fut in admin.create_topics([
                NewTopic("recent", 1, 1, config={"message.timestamp.before.max.ms": str(HOUR)}),
                NewTopic("anytime", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
                ]).values():
            fut.result(30)
        yield d


def _produce(d: Daemon, topic: str, stamps: list[int]) -> list[str | None]:
    """Each record's delivery error name (None: written), one confluent batch each."""
    errs: list[str | None] = []
    p = ck.Producer({"bootstrap.servers": d.bootstrap, "retries": 0, "linger.ms": 0})
    for ts in stamps:
        p.produce(topic, value=b"%d" % ts, timestamp=ts,
                  on_delivery=lambda err, m: errs.append(err.name() if err else None))
        p.flush(30)
    return errs


def _values(d: Daemon, topic: str, count: int) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": f"{topic}-read"})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        wait_for(lambda: got.extend(m.value() for m in c.consume(100, 0.5) if not m.error())
                 or len(got) >= count, 30, "records")
        got.extend(m.value() for m in c.consume(100, 1.0) if not m.error())
    finally:
        c.close()
    return got


def test_clients_see_invalid_timestamp_and_only_good_records_land(daemon: Daemon) -> None:
    now = _now()
    # The topic bounds the past, the broker's config file the future.
    stamps = [now, now - 2 * HOUR, now - HOUR // 2, now + 2 * HOUR, now + HOUR // 2]
    assert _produce(daemon, "recent", stamps) == [
        None, "INVALID_TIMESTAMP", None, "INVALID_TIMESTAMP", None]
    kp = KafkaProducer(bootstrap_servers=daemon.bootstrap, retries=0, compression_type="gzip")
    with pytest.raises(kafka_errors.InvalidTimestampError):
        kp.send("recent", value=b"kp-old", timestamp_ms=now - 3 * HOUR).get(30)
    kp.send("recent", value=b"kp-now", timestamp_ms=_now()).get(30)
    kp.close()
    assert _values(daemon, "recent", 4) == [b"%d" % stamps[0], b"%d" % stamps[2],
                                            b"%d" % stamps[4], b"kp-now"]
    # A LogAppendTime topic takes any timestamp the producer claims.
    assert _produce(daemon, "anytime", [now - 50 * HOUR, now + 50 * HOUR]) == [None, None]


def test_produce_v8_answers_kafkas_record_errors(daemon: Daemon) -> None:
    now = _now()
    batch = build_batch([Record(b"k", b"a", timestamp=now), Record(b"k", b"b", timestamp=now),
                         Record(b"k", b"c", timestamp=now - 5 * HOUR)])
    raw = RawClient(daemon.port)
    T = ProduceRequest.TopicProduceData
    resp = raw.request(ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000,
                                      topic_data=[T(name="recent", partition_data=[
                                          T.PartitionProduceData(index=0, records=batch)])]), 8)
    raw.close()
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 32 and part.base_offset == -1
    [(index, message)] = part.record_errors
    assert index == 2 and message.startswith(f"Timestamp {now - 5 * HOUR} of message with offset 2")
    assert "One or more records have been rejected due to invalid timestamp" in part.error_message


def test_the_bounds_change_at_runtime_and_are_described(daemon: Daemon) -> None:
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    res = ConfigResource("topic", "recent")
    described = admin.describe_configs([res])[res].result(30)
    before = described["message.timestamp.before.max.ms"]
    after = described["message.timestamp.after.max.ms"]
    assert (before.value, before.source) == (str(HOUR), ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (after.value, after.source) == (str(HOUR), ck.admin.ConfigSource.STATIC_BROKER_CONFIG.value)
    assert described["message.timestamp.difference.max.ms"].value == str(2**63 - 1)

    # Widened: a record two hours old is taken now.
    alter = ConfigResource("topic", "recent", incremental_configs=[ConfigEntry(
        "message.timestamp.before.max.ms", str(3 * HOUR),
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([alter])[alter].result(30)
    assert _produce(daemon, "recent", [_now() - 2 * HOUR]) == [None]

    # A bad value is refused and changes nothing.
    bad = ConfigResource("topic", "recent", incremental_configs=[ConfigEntry(
        "message.timestamp.after.max.ms", "-5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as refused:
        admin.incremental_alter_configs([bad])[bad].result(30)
    assert refused.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    assert _produce(daemon, "recent", [_now() + 2 * HOUR]) == ["INVALID_TIMESTAMP"]
