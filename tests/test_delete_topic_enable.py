"""`delete.topic.enable=false`, Kafka's guard against deleting topics: every DeleteTopics
is refused (TOPIC_DELETION_DISABLED, 73; INVALID_REQUEST below v3), by whichever broker
is asked, and `logkeeper topics delete` says so; in a cluster the controller also drops a
deletion written straight into `/admin/delete_topics` (old kafka-topics.sh --zookeeper)
and keeps the topic, as Kafka's does.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DeleteTopicsRequest
from kazoo.client import KazooClient

from tests.cluster_helpers import Cluster, wait_for
from tests.daemon_helpers import REPO, RawClient, running
from tests.test_replication import create


def test_a_standalone_broker_refuses_every_deletion(tmp_path: Path) -> None:
    with running(tmp_path, {"delete.topic.enable": False}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([NewTopic("keep", 2, 1)])["keep"].result(30)
        with pytest.raises(ck.KafkaException) as info:
            admin.delete_topics(["keep"])["keep"].result(30)
        assert info.value.args[0].code() == ck.KafkaError.TOPIC_DELETION_DISABLED
        c = RawClient(d.port)
        try:
            for version, code in ((1, 42), (3, 73)):
                resp = c.request(DeleteTopicsRequest[version](topic_names=["keep"],
                                                              timeout_ms=10000), version)
                assert [(r.name, r.error_code) for r in resp.responses] == [("keep", code)]
        finally:
            c.close()
        proc = subprocess.run([sys.executable, "-m", "daemon.cli", "topics", "delete",
                               "--bootstrap-server", d.bootstrap, "--topic", "keep"],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and "error 73 (TopicDeletionDisabledError): Topic deletion " \
            "is disabled; nothing changed" in proc.stderr, proc.stderr
        assert "keep" in admin.list_topics(timeout=10).topics
        held = [p for ld in d.log_dirs for p in ld.glob("keep-*")]
        assert len(held) == 2, held


def test_the_controller_keeps_a_topic_whose_deletion_znode_is_written(tmp_path: Path) -> None:
    with Cluster(tmp_path, dirs=1, extra={"delete.topic.enable": False}) as cl:
        create(cl, "keep", 2)
        admin = AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
        with pytest.raises(ck.KafkaException) as info:
            admin.delete_topics(["keep"])["keep"].result(30)
        assert info.value.args[0].code() == ck.KafkaError.TOPIC_DELETION_DISABLED
        zc = KazooClient(hosts=cl.zk.hosts)
        zc.start(15)
        try:
            zc.create("/admin/delete_topics/keep", makepath=True)
            wait_for(lambda: not zc.exists("/admin/delete_topics/keep"), 30,
                     "the controller dropping the deletion")
            time.sleep(1)
            assert zc.exists("/brokers/topics/keep")
        finally:
            zc.stop()
            zc.close()
        assert cl.agreed("keep", 2) is not None
