"""The ZooKeeper link against a real ZooKeeper: registration, log-dir events, expiry."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from daemon.cluster.link import ClusterLink

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def admin(zk):
    # Reconnects at most 1 s apart: kazoo's default back-off doubles up to an hour, so
    # after ZooKeeper has been away a few seconds this checking client could sleep
    # through the whole wait of a test that restarts it.
    client = KazooClient(hosts=zk.hosts, connection_retry={"max_tries": -1, "max_delay": 1})
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def wait_for(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return True
        except KazooException:  # the checking client itself is reconnecting
            pass
        time.sleep(0.1)
    return False


def events(admin):
    if not admin.exists("/log_dir_event_notification"):
        return []
    return sorted(admin.get_children("/log_dir_event_notification"))


def test_registers_like_a_kafka_broker_and_announces_events(zk, admin):
    link = ClusterLink(zk.hosts, 11, "127.0.0.1", 19092)
    link.start()
    try:
        assert wait_for(lambda: admin.exists("/brokers/ids/11"))
        data, stat = admin.get("/brokers/ids/11")
        doc = json.loads(data)
        assert stat.ephemeralOwner != 0
        assert doc["version"] == 5 and doc["endpoints"] == ["PLAINTEXT://127.0.0.1:19092"]
        assert doc["host"] == "127.0.0.1" and doc["port"] == 19092 and doc["jmx_port"] == -1
        before = events(admin)
        link.announce_log_dir_event("/data/d2")
        assert wait_for(lambda: len(events(admin)) == len(before) + 1)
        (new,) = set(events(admin)) - set(before)
        assert new.startswith("log_dir_event_") and len(new) == len("log_dir_event_") + 10
        payload, _ = admin.get(f"/log_dir_event_notification/{new}")
        assert payload == b'{"version":1,"broker":11,"event":1}'
        link.publish_log_dirs([{"path": "/data/d2", "state": "offline", "free_bytes": 0,
                                "partitions": ["t-0"], "error": "EIO", "degraded": False}])
        assert wait_for(lambda: admin.exists("/logkeeper/brokers/11/log_dirs"))
        state = json.loads(admin.get("/logkeeper/brokers/11/log_dirs")[0])
        assert state["log_dirs"][0]["state"] == "offline"
    finally:
        link.stop()
    assert wait_for(lambda: not admin.exists("/brokers/ids/11"))


def test_events_wait_while_zookeeper_is_down(zk, admin):
    link = ClusterLink(zk.hosts, 12, "127.0.0.1", 19093, session_timeout=30)
    link.start()
    try:
        assert wait_for(lambda: admin.exists("/brokers/ids/12"))
        before = len(events(admin))
        zk.stop()
        link.announce_log_dir_event("/data/d1")
        link.announce_log_dir_event("/data/d3")
        time.sleep(1.0)
        assert link.pending_events == 2  # queued, not dropped
        zk.start()  # same port and data: both clients reconnect by themselves
        assert wait_for(lambda: len(events(admin)) == before + 2, timeout=60)
        # The link forgets an event only once its create has answered, which can come a
        # moment after the checking client already sees the znode.
        assert wait_for(lambda: link.pending_events == 0, timeout=10)
        # Kafka's SessionExpireListener meters: connected again, the session not expired.
        assert link.sync_connects >= 2 and link.disconnects >= 1 and link.expires == 0
    finally:
        link.stop()


def test_reregisters_after_session_expiry(zk, admin):
    link = ClusterLink(zk.hosts, 13, "127.0.0.1", 19094, session_timeout=4)
    link.start()
    try:
        assert wait_for(lambda: admin.exists("/brokers/ids/13"))
        first_owner = admin.exists("/brokers/ids/13").ephemeralOwner
        # Expire the link's session from outside: a client joining the same session and
        # closing it ends it on the server, as an expiry would.
        session_id, password = link.client.client_id
        thief = KazooClient(hosts=zk.hosts, client_id=(session_id, password))
        thief.start(timeout=15)
        thief.stop()
        thief.close()
        assert wait_for(lambda: link.registrations >= 2, timeout=30)
        assert link.expires == 1 and link.disconnects >= 1 and link.sync_connects >= 2
        stat = admin.exists("/brokers/ids/13")
        assert stat is not None and stat.ephemeralOwner != first_owner
    finally:
        link.stop()


def test_a_broker_id_held_by_another_live_broker_ends_the_link(zk, admin):
    """Kafka refuses to start under a live broker's id; the link gives up at once (it
    used to log a traceback every second and serve on under the duplicate id)."""
    first = ClusterLink(zk.hosts, 14, "127.0.0.1", 19095)
    first.start()
    reasons: list[str] = []
    second = ClusterLink(zk.hosts, 14, "127.0.0.1", 19096, on_fatal=reasons.append)
    try:
        assert wait_for(lambda: admin.exists("/brokers/ids/14"))
        owner = admin.exists("/brokers/ids/14").ephemeralOwner
        second.start()
        assert wait_for(lambda: reasons, timeout=20)
        assert reasons == [second.fatal] and "broker.id 14 is already registered" in reasons[0]
        assert second.registrations == 0
        time.sleep(1.5)  # no retry loop: still one report, the first broker untouched
        assert len(reasons) == 1
        assert admin.exists("/brokers/ids/14").ephemeralOwner == owner
        assert json.loads(admin.get("/brokers/ids/14")[0])["port"] == 19095
    finally:
        second.stop()
        first.stop()


def test_a_daemon_started_with_a_taken_broker_id_exits_non_zero(zk, tmp_path):
    from .daemon_helpers import Daemon

    with Daemon(tmp_path / "a", {"zookeeper.connect": zk.hosts, "broker.id": 7}) as a:
        assert wait_for(lambda: _registered(zk, 7))
        b = Daemon(tmp_path / "b", {"zookeeper.connect": zk.hosts, "broker.id": 7})
        try:
            b.start()
        except RuntimeError:
            pass  # it may already have exited during start-up
        assert b.proc is not None
        code = b.proc.wait(timeout=30)
        assert code != 0
        assert "broker.id 7 is already registered" in b.stderr()
        assert a.healthy() and a.proc.poll() is None


def _registered(zk, broker_id: int) -> bool:
    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=15)
    try:
        return client.exists(f"/brokers/ids/{broker_id}") is not None
    finally:
        client.stop()
        client.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_link_revives_a_client_whose_connection_thread_died(zk, admin):
    """kazoo's connection thread ends for good on an unhandled error (it reports the
    session CLOSED and never reconnects); the link starts the client again and
    registers anew instead of waiting forever."""
    link = ClusterLink(zk.hosts, 15, "127.0.0.1", 19097, session_timeout=4)
    link.start()
    try:
        assert wait_for(lambda: admin.exists("/brokers/ids/15"))
        conn = link.client._connection
        real = conn._read_socket
        broken = []

        def fail_once(*args, **kwargs):
            if not broken:
                broken.append(True)
                raise RuntimeError("injected: an unhandled error in kazoo's connection loop")
            return real(*args, **kwargs)

        conn._read_socket = fail_once
        link.publish_log_dirs([])  # a request: the next socket read raises
        assert wait_for(lambda: broken, timeout=10)
        assert wait_for(lambda: link.registrations >= 2, timeout=30)
        assert wait_for(lambda: admin.exists("/brokers/ids/15"))
        assert link.fatal is None
    finally:
        link.stop()

