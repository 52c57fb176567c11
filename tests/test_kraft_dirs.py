"""A log dir taken over from a KRaft-mode Kafka broker (Kafka 3.3+'s default, the only
mode of Kafka 4): its `meta.properties` is version 1 and names the broker by `node.id`,
and the dir that held the metadata log has `__cluster_metadata-0`, KRaft's own log of
the cluster's metadata with its `quorum-state` and snapshot `.checkpoint` files.

That partition is not a topic: Kafka never shows it to clients and refuses to create it,
and logkeeper (whose cluster metadata is in ZooKeeper) must not serve it, recover it,
apply retention to it or let anyone create it. The dir's topics are served as usual.
The files are laid out as a KRaft broker writes them.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from logstore import CheckpointError, LogDir, names
from logstore.records import Record, build_batch
from tests.daemon_helpers import Daemon

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
OLD_MS = 1_600_000_000_000  # 2020: far past any retention.ms


def kraft_dir(root: Path, node_id: int) -> Path:
    """A KRaft broker's log dir: meta.properties v1, the metadata log (old records and
    a torn tail a recovery would cut), its quorum state and a snapshot, and a topic."""
    root.mkdir(parents=True)
    (root / "meta.properties").write_text(
        "#\n#Thu Nov 26 10:00:00 UTC 2026\n"
        f"node.id={node_id}\ndirectory.id=J8aAPcfLQt2bqs1JT_rkAA\nversion=1\n"
        f"cluster.id={CLUSTER_ID}\n")
    (root / "bootstrap.checkpoint").write_bytes(b"\0\0\0\x01snapshot header")
    meta = root / "__cluster_metadata-0"
    meta.mkdir()
    batches = b"".join(
        build_batch([Record(None, b"metadata-record-%d" % i, [], OLD_MS)], base_offset=i)
        for i in range(3))
    (meta / "00000000000000000000.log").write_bytes(batches + b"\0\0\0\0\0\0\0\x03\0\0")
    (meta / "00000000000000000000-0000000000.checkpoint").write_bytes(b"KRaft snapshot")
    (meta / "quorum-state").write_text(
        '{"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1}],"data_version":0}')
    (meta / "leader-epoch-checkpoint").write_text("0\n1\n3 0\n")
    topic = root / "orders-0"
    topic.mkdir()
    (topic / "00000000000000000000.log").write_bytes(
        build_batch([Record(b"k", b"order-%d" % i, [], int(time.time() * 1000))
                     for i in range(3)]))
    return root


def _digests(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_the_metadata_log_is_left_as_it_is_and_the_topics_are_loaded(tmp_path: Path) -> None:
    root = kraft_dir(tmp_path / "d", node_id=1)
    meta = root / "__cluster_metadata-0"
    before = _digests(meta)
    ld = LogDir.open(root, broker_id=1)
    try:
        assert set(ld.logs) == {names.TopicPartition("orders", 0)}
        assert ld.cluster_metadata_logs == [meta]
        assert ld.logs[names.TopicPartition("orders", 0)].log_end_offset == 3
        ld.logs[names.TopicPartition("orders", 0)].apply_retention()
    finally:
        ld.close()
    # Not recovered (the torn tail is still there), not indexed, not rolled, not deleted.
    assert _digests(meta) == before
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        assert "__cluster_metadata" not in (root / name).read_text()
    assert "node.id=1" in (root / "meta.properties").read_text()


def test_a_kraft_node_id_of_another_broker_is_refused(tmp_path: Path) -> None:
    root = kraft_dir(tmp_path / "d", node_id=1)
    before = _digests(root)
    with pytest.raises(CheckpointError, match=r"node\.id=1 but this broker is 2"):
        LogDir.open(root, broker_id=2)
    after = _digests(root)
    after.pop(".lock")  # Kafka takes the lock first too
    assert after == before  # nothing recovered or written


def test_clients_see_the_topics_of_a_kraft_dir_but_never_the_metadata_log(
        tmp_path: Path) -> None:
    d = Daemon(tmp_path / "broker", dirs=1)
    kraft_dir(d.log_dirs[0], node_id=1)
    meta = d.log_dirs[0] / "__cluster_metadata-0"
    before = _digests(meta)
    with d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        assert set(admin.list_topics(timeout=10).topics) == {"orders"}
        fut = admin.create_topics([NewTopic(names.CLUSTER_METADATA_TOPIC, 1, 1)])
        with pytest.raises(ck.KafkaException) as err:
            fut[names.CLUSTER_METADATA_TOPIC].result(timeout=10)
        assert err.value.args[0].code() == ck.KafkaError.INVALID_REQUEST
        assert "Creation of internal topic __cluster_metadata is prohibited" in str(err.value)
        kp = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        assert names.CLUSTER_METADATA_TOPIC not in kp.list_topics()
        kp.close()

        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "kraft",
                         "auto.offset.reset": "earliest"})
        c.assign([ck.TopicPartition("orders", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            m = c.poll(0.3)
            if m is not None and not m.error():
                got.append(m.value())
        c.close()
        assert got == [b"order-0", b"order-1", b"order-2"]
    assert "__cluster_metadata-0 is a KRaft controller's metadata log" in d.stderr()
    assert _digests(meta) == before
