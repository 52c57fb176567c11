"""`flush.messages` and `flush.ms` (broker `log.flush.interval.messages`,
`log.flush.interval.ms`, `log.flush.scheduler.interval.ms`): Kafka's fsync policies. A
record a producer had acknowledged on a topic with flush.messages=1, or older than
flush.ms, survives its disk dying at once (FS_IOC_SHUTDOWN without flushing: what the
kernel had not written back is gone) and the broker being killed; a topic with Kafka's
default (no fsync, replication keeps records) is the control. A real daemon on a
loop-mounted ext4, confluent-kafka producers and consumers.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests import faults
from tests.cluster_helpers import wait_for
from tests.daemon_helpers import Daemon

pytestmark = pytest.mark.fault


def _produce(d: Daemon, topic: str, n: int) -> None:
    p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": 1, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"%s-%d" % (topic.encode(), i), partition=0)
        p.flush(30)  # one batch a record: one append each


def _values(d: Daemon, topic: str) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": f"read-{topic}",
                     "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        got.extend(m.value() for m in c.consume(100, 0.3) if not m.error())
    c.close()
    return got


def test_flushed_records_survive_a_dying_disk(tmp_path: Path) -> None:
    with faults.loop_ext4(64) as mnt:
        d = Daemon(tmp_path, {"log.dirs": [str(mnt / "d")], "auto.create.topics.enable": False,
                              "log.flush.scheduler.interval.ms": 200})
        d.log_dirs = [mnt / "d"]
        d.start()
        try:
            admin = AdminClient({"bootstrap.servers": d.bootstrap})
            for fut in admin.create_topics([
                    NewTopic("every", 1, 1, config={"flush.messages": "1"}),
                    NewTopic("timed", 1, 1, config={"flush.ms": "300"}),
                    NewTopic("lazy", 1, 1)]).values():
                fut.result(30)
            faults.sync_fs(mnt)  # the partition dirs and empty segments are on the disk
            for topic in ("every", "timed", "lazy"):
                _produce(d, topic, 30)
            time.sleep(1.5)  # flush.ms 300 has passed, checked every 200 ms
            faults.shutdown_fs(mnt)
            d.kill()
        finally:
            d.kill()
        subprocess.run(["umount", "-l", str(mnt)], check=True)
        subprocess.run(["mount", "-o", "loop", str(mnt.parent / "disk.img"), str(mnt)],
                       check=True)
        d.start()
        try:
            wait_for(lambda: d.log_dir_states().get(str(mnt / "d")) == "online", 30, "online")
            assert _values(d, "every") == [b"every-%d" % i for i in range(30)]
            assert _values(d, "timed") == [b"timed-%d" % i for i in range(30)]
            kept = _values(d, "lazy")
            assert kept == [b"lazy-%d" % i for i in range(len(kept))]  # a clean prefix
            print(f"without a flush policy, {len(kept)} of 30 records survived")
        finally:
            d.stop()
