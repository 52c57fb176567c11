"""The controller against a real ZooKeeper (a fresh chroot per test) and stand-in
brokers on loopback (tests/controller_helpers.py: they stand in for logkeeper brokers
until the broker side lands; end-to-end tests with real daemons come with the wiring).

Covers docs/controller.md: election and fencing, topic creation, a lost broker, a
log-dir event answered 56 and the way back, ISR changes, failover, and deletion with a
broker away and with a replica on an offline dir.
"""

from __future__ import annotations

import itertools
import json
import random
import threading

import pytest
from kazoo.client import KazooClient

from daemon.cluster import znodes
from daemon.controller import Controller, ControllerMovedError, ControllerZk, TopicSpec
from daemon.controller.election import ControllerElection
from daemon.controller.state_machines import ReplicaState
from daemon.wire import views
from logstore import TopicPartition

from .controller_helpers import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, StandInBroker, wait_for

pytestmark = [pytest.mark.zookeeper, pytest.mark.timeout(60)]
_chroots = itertools.count()


@pytest.fixture
def hosts(zk):
    """A fresh chroot: every test starts from an empty ZooKeeper."""
    chroot = f"/controller-test-{next(_chroots)}"
    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=15)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    return zk.hosts + chroot


@pytest.fixture
def admin(hosts):
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def cluster(hosts):
    """Start stand-in brokers and controllers; everything is stopped at the end."""
    made: list = []

    class Cluster:
        def broker(self, broker_id: int, register: bool = True) -> StandInBroker:
            b = StandInBroker(hosts, broker_id)
            made.append(b)
            if register:
                b.register()
            return b

        def controller(self, broker_id: int, **kw) -> Controller:
            kw.setdefault("session_timeout", 4.0)
            kw.setdefault("rng", random.Random(broker_id))
            c = Controller(broker_id, hosts=hosts, **kw)
            made.append(c)
            c.start()
            return c

    yield Cluster()
    for thing in reversed(made):
        thing.stop() if isinstance(thing, Controller) else thing.close()


def expire(hosts: str, client: KazooClient) -> None:
    """End `client`'s session on the server, as an expiry does: a second client joins
    the session and closes it."""
    session_id, password = client.client_id
    thief = KazooClient(hosts=hosts, client_id=(session_id, password))
    thief.start(timeout=15)
    thief.stop()
    thief.close()


def state_json(admin, topic: str, partition: int) -> bytes:
    return admin.get(znodes.partition_state_path(topic, partition))[0]


def create(controller: Controller, *specs: TopicSpec) -> dict:
    return controller.create_topics(specs).result(timeout=15)


# -- election and fencing ---------------------------------------------------------------------

def test_one_controller_wins_and_the_other_takes_over_with_the_next_epoch(cluster, hosts, admin):
    c1 = cluster.controller(1)
    assert wait_for(lambda: c1.active_controller_count == 1)
    c2 = cluster.controller(2)
    assert wait_for(lambda: c2.active_id == 1)
    assert not c2.is_active and c1.active_controller_count == 1 and c2.active_controller_count == 0
    data, stat = admin.get("/controller")
    doc = json.loads(data)
    assert list(doc) == ["version", "brokerid", "timestamp", "kraftControllerEpoch"]
    assert (doc["version"], doc["brokerid"], doc["kraftControllerEpoch"]) == (2, 1, -1)
    assert stat.ephemeralOwner == c1.client.client_id[0]
    assert admin.get("/controller_epoch")[0] == b"1"
    old_version = c1.zk.epoch_zk_version
    assert old_version == admin.exists("/controller_epoch").version

    expire(hosts, c1.client)
    assert wait_for(lambda: c2.active_controller_count == 1, timeout=20)
    assert admin.get("/controller_epoch")[0] == b"2" and c2.ctx.epoch == 2
    assert json.loads(admin.get("/controller")[0])["brokerid"] == 2
    # The old controller comes back with a new session and follows.
    assert wait_for(lambda: c1.active_id == 2 and not c1.is_active, timeout=20)
    assert c1.resignations == 1

    # A zombie still holding the old epoch's zkVersion: its fenced writes fail whole.
    zombie = ControllerZk(c1.client, old_version)
    with pytest.raises(ControllerMovedError):
        zombie.create("/brokers/topics/zombie", b"{}")
    with pytest.raises(ControllerMovedError):
        zombie.set_data("/controller_epoch", b"99")
    assert admin.exists("/brokers/topics/zombie") is None
    assert admin.get("/controller_epoch")[0] == b"2"


def test_a_fenced_write_makes_the_controller_resign_and_changes_nothing(cluster, admin):
    cluster.broker(1)
    c = cluster.controller(1)
    assert wait_for(lambda: c.active_controller_count == 1)
    # Another controller's election bumps /controller_epoch behind this one's back.
    admin.set("/controller_epoch", b"7")
    result = create(c, TopicSpec("t", 1, 1))
    assert result["t"].error_code == 41
    assert admin.exists("/config/topics/t") is None and admin.exists("/brokers/topics/t") is None
    # It freed /controller; the election that follows gives epoch 8.
    assert wait_for(lambda: c.active_controller_count == 1 and c.ctx.epoch == 8, timeout=20)
    assert admin.get("/controller_epoch")[0] == b"8" and c.resignations == 1


# -- topic creation -----------------------------------------------------------------------------

def test_create_topic_writes_kafkas_znodes_and_tells_the_brokers(cluster, admin):
    brokers = [cluster.broker(i) for i in (1, 2, 3)]
    c = cluster.controller(1)
    assert wait_for(lambda: c.active_controller_count == 1 and len(c.ctx.live_brokers) == 3)
    result = create(c, TopicSpec("t", assignments={0: [2, 3, 1], 1: [3, 1, 2]},
                                 configs={"min.insync.replicas": "2"}))
    assert result["t"].error_code == 0
    assert (result["t"].num_partitions, result["t"].replication_factor) == (2, 3)

    config, config_stat = admin.get("/config/topics/t")
    assert config == b'{"version":1,"config":{"min.insync.replicas":"2"}}'
    topic, topic_stat = admin.get("/brokers/topics/t")
    assert config_stat.czxid < topic_stat.czxid  # the config is written first
    topic_id = json.loads(topic)["topic_id"]
    assert len(topic_id) == 22
    assert topic == (b'{"version":3,"partitions":{"0":[2,3,1],"1":[3,1,2]},"adding_replicas":{},'
                     b'"removing_replicas":{},"topic_id":"' + topic_id.encode() + b'"}')
    assert admin.get("/brokers/topics/t/partitions")[0] == b""
    assert admin.get("/brokers/topics/t/partitions/0")[0] == b""
    assert state_json(admin, "t", 0) == \
        b'{"version":1,"leader":2,"leader_epoch":0,"controller_epoch":1,"isr":[2,3,1]}'
    assert state_json(admin, "t", 1) == \
        b'{"version":1,"leader":3,"leader_epoch":0,"controller_epoch":1,"isr":[3,1,2]}'

    for b in brokers:
        assert wait_for(lambda b=b: {(p.topic, p.partition) for p in b.metadata_states()}
                        >= {("t", 0), ("t", 1)})
        lai = {(p.topic, p.partition): p for p in b.leader_and_isr_states()}
        assert set(lai) == {("t", 0), ("t", 1)}
        assert all(p.is_new and p.leader_epoch == 0 and p.partition_epoch == 0 for p in lai.values())
        assert lai[("t", 0)].leader == 2 and lai[("t", 0)].replicas == (2, 3, 1)
        keys = b.api_keys()
        assert keys.index(LEADER_AND_ISR) < max(i for i, k in enumerate(keys) if k == UPDATE_METADATA)
        assert [r.version for r in b.received(LEADER_AND_ISR)] == [4]
        assert {r.version for r in b.received(UPDATE_METADATA)} == {7}
        # v7 names the topic's id, the znode's: what Metadata v10+ answers clients.
        assert {znodes.topic_id_to_str(p.topic_id) for p in b.metadata_states()} == {topic_id}
        assert {r.controller_epoch for r in b.received()} == {1}
        assert b.received(LEADER_AND_ISR)[0].broker_epoch == c.ctx.live_brokers[b.broker_id].epoch

    again = create(c, TopicSpec("t", 1, 1), TopicSpec("big", 1, 4), TopicSpec("bad/name", 1, 1))
    assert again["t"].error_code == 36
    assert again["big"].error_code == 38 and "larger than available brokers: 3" in again["big"].error_message
    assert again["bad/name"].error_code == 17
    assert admin.exists("/brokers/topics/big") is None


def test_create_topic_assigns_round_robin_over_live_brokers(cluster, admin):
    for i in (1, 2, 3):
        cluster.broker(i)
    c = cluster.controller(1)
    assert wait_for(lambda: c.active_controller_count == 1 and len(c.ctx.live_brokers) == 3)
    assert create(c, TopicSpec("rr", 6, 2))["rr"].error_code == 0
    partitions = json.loads(admin.get("/brokers/topics/rr")[0])["partitions"]
    assert sorted(partitions) == [str(p) for p in range(6)]
    leaders = [r[0] for r in partitions.values()]
    assert all(len(set(r)) == 2 and set(r) <= {1, 2, 3} for r in partitions.values())
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    assert admin.get("/config/topics/rr")[0] == b'{"version":1,"config":{}}'


def test_a_topic_whose_name_collides_with_an_existing_one_is_refused_17(cluster, admin):
    """Kafka's AdminZkClient.validateTopicCreate: 'a_b' and 'a.b' would have the same
    metric names, so the second is refused (InvalidTopicException) and nothing written."""
    for i in (1, 2, 3):
        cluster.broker(i)
    c = cluster.controller(1)
    assert wait_for(lambda: c.active_controller_count == 1 and len(c.ctx.live_brokers) == 3)
    assert create(c, TopicSpec("orders.eu", 1, 1))["orders.eu"].error_code == 0
    got = create(c, TopicSpec("orders_eu", 1, 1), TopicSpec("orders-eu", 1, 1))
    assert (got["orders_eu"].error_code, got["orders_eu"].error_message) == (
        17, "Topic 'orders_eu' collides with existing topics: orders.eu")
    assert admin.exists("/brokers/topics/orders_eu") is None
    assert admin.exists("/config/topics/orders_eu") is None
    assert got["orders-eu"].error_code == 0  # '-' is no '.' or '_'


def test_not_the_controller_answers_41(cluster):
    c1 = cluster.controller(1)
    assert wait_for(lambda: c1.active_controller_count == 1)
    c2 = cluster.controller(2)
    assert wait_for(lambda: c2.active_id == 1)
    assert c2.create_topics([TopicSpec("t", 1, 1)]).result(5)["t"].error_code == 41
    assert c2.delete_topics(["t"]).result(5) == {"t": 41}


# -- broker loss, log-dir events ---------------------------------------------------------------

def _cluster_with_topic(cluster, assignments: dict, brokers=(1, 2, 3), **spec):
    stand_ins = {i: cluster.broker(i) for i in brokers}
    c = cluster.controller(1)
    assert wait_for(lambda: c.active_controller_count == 1 and len(c.ctx.live_brokers) == len(brokers))
    for topic, assignment in assignments.items():
        assert create(c, TopicSpec(topic, assignments=assignment, **spec))[topic].error_code == 0
    created = {(t, p) for t, a in assignments.items() for p in a}
    for x in stand_ins.values():  # the creation's requests have all arrived
        assert wait_for(lambda x=x: {(m.topic, m.partition) for m in x.metadata_states()} >= created)
    return c, stand_ins


def _metadata(broker: StandInBroker, topic: str, partition: int):
    states = [p for p in broker.metadata_states() if (p.topic, p.partition) == (topic, partition)]
    return states[-1] if states else None


def test_a_lost_broker_moves_leadership_with_the_next_leader_epoch(cluster, admin):
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2, 3]}, "solo": {0: [1]}})
    for x in b.values():
        x.clear()
    b[1].deregister()  # its session ends: /brokers/ids/1 goes
    assert wait_for(lambda: state_json(admin, "t", 0) ==
                    b'{"version":1,"leader":2,"leader_epoch":1,"controller_epoch":1,"isr":[2,3]}')
    assert admin.exists(znodes.partition_state_path("t", 0)).version == 1
    # A partition whose only replica went: its ISR of one is kept, the leader is -1.
    assert wait_for(lambda: state_json(admin, "solo", 0) ==
                    b'{"version":1,"leader":-1,"leader_epoch":1,"controller_epoch":1,"isr":[1]}')
    for x in (b[2], b[3]):
        assert wait_for(lambda x=x: any(p.leader == 2 and p.leader_epoch == 1 and p.isr == (2, 3)
                                        and p.partition_epoch == 1 for p in x.leader_and_isr_states()))
        assert wait_for(lambda x=x: (m := _metadata(x, "t", 0)) is not None and m.leader == 2
                        and m.offline_replicas == (1,))
        assert wait_for(lambda x=x: (m := _metadata(x, "solo", 0)) is not None and m.leader == -1)
    assert wait_for(lambda: c.offline_partitions_count == 1)  # solo-0

    # Broker 1 comes back (a new epoch): solo-0 gets its leader again, at the next epoch.
    b[1].clear()
    b[1].register()
    assert wait_for(lambda: json.loads(state_json(admin, "solo", 0))["leader"] == 1)
    assert json.loads(state_json(admin, "solo", 0))["leader_epoch"] == 2
    assert wait_for(lambda: any(p.topic == "t" and not p.is_new for p in b[1].leader_and_isr_states()))
    assert wait_for(lambda: c.offline_partitions_count == 0)
    # The returning broker first learns every partition with a leader.
    assert b[1].api_keys()[0] == UPDATE_METADATA
    assert {(p.topic, p.partition) for p in views_of_first_metadata(b[1])} == {("t", 0), ("solo", 0)}


def test_unclean_election_enabled_dynamically_elects_the_leaderless_at_once(cluster, admin):
    """Kafka: unclean.leader.election.enable set true as a topic's config, or as the
    brokers' dynamic default, lets the controller elect an out-of-sync replica for a
    leaderless partition, at once (TopicUncleanLeaderElectionEnable,
    UncleanLeaderElectionEnable) and at every later election."""
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2]}, "u": {0: [1, 2]}}, brokers=(1, 2, 3))
    b[2].deregister()  # out of the ISRs: [1]
    assert wait_for(lambda: json.loads(state_json(admin, "t", 0))["isr"] == [1])
    assert wait_for(lambda: json.loads(state_json(admin, "u", 0))["isr"] == [1])
    b[1].deregister()  # the last in-sync replica: no leader
    assert wait_for(lambda: json.loads(state_json(admin, "t", 0))["leader"] == -1)
    b[2].register()
    assert wait_for(lambda: 2 in c.ctx.live_brokers)
    c.call(lambda: None).result(5)  # the broker change has been handled
    assert json.loads(state_json(admin, "t", 0))["leader"] == -1  # clean: it waits

    admin.set(znodes.topic_config_path("t"),
              b'{"version":1,"config":{"unclean.leader.election.enable":"true"}}')
    c.unclean_leader_election_enabled("t").result(5)
    assert json.loads(state_json(admin, "t", 0))["leader"] == 2
    assert json.loads(state_json(admin, "u", 0))["leader"] == -1  # not its topic

    admin.create(znodes.broker_config_path(znodes.DEFAULT_BROKER_ENTITY),
                 b'{"version":1,"config":{"unclean.leader.election.enable":"true"}}',
                 makepath=True)
    c.unclean_leader_election_enabled().result(5)
    assert json.loads(state_json(admin, "u", 0))["leader"] == 2


def views_of_first_metadata(broker: StandInBroker):
    return views.update_metadata_partitions(broker.received(UPDATE_METADATA)[0])


def test_a_log_dir_event_answered_56_moves_leadership_and_comes_back(cluster, admin):
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2, 3]}, "solo": {0: [1]}})
    for x in b.values():
        x.clear()
    b[1].offline |= {("t", 0), ("solo", 0)}  # its dir failed (or filled)
    b[1].announce_log_dir_event()
    # The probe: a LeaderAndIsr at the current epochs, is_new=false, to broker 1 alone.
    def probe():
        for r in b[1].received(LEADER_AND_ISR):
            states = views.leader_and_isr_partitions(r)
            if not any(p.is_new for p in states):
                return {(p.topic, p.partition): p for p in states}
        return None

    assert wait_for(lambda: probe() is not None)
    assert set(probe()) == {("t", 0), ("solo", 0)}
    assert all(p.leader_epoch == 0 and p.partition_epoch == 0 for p in probe().values())
    assert not b[2].leader_and_isr_states() or all(p.leader_epoch > 0 for p in b[2].leader_and_isr_states())
    assert wait_for(lambda: state_json(admin, "t", 0) ==
                    b'{"version":1,"leader":2,"leader_epoch":1,"controller_epoch":1,"isr":[2,3]}')
    assert wait_for(lambda: state_json(admin, "solo", 0) ==
                    b'{"version":1,"leader":-1,"leader_epoch":1,"controller_epoch":1,"isr":[1]}')
    for x in b.values():
        assert wait_for(lambda x=x: (m := _metadata(x, "t", 0)) is not None and m.leader == 2
                        and m.offline_replicas == (1,))
    # The broker is told to stop the offline replicas (it answers 56; ignored).
    assert wait_for(lambda: {(p.topic, p.partition, p.delete) for p in b[1].stop_replicas()}
                    >= {("t", 0, False), ("solo", 0, False)})
    assert wait_for(lambda: admin.get_children("/log_dir_event_notification") == [])
    assert c.ctx.replicas_on_offline_dirs[1] == {("t", 0), ("solo", 0)}

    # The dir comes back (logkeeper's extension), another event, the probe is answered 0: the
    # replicas leave the offline set and the leaderless partition gets its leader.
    b[1].offline.clear()
    b[1].announce_log_dir_event()
    assert wait_for(lambda: json.loads(state_json(admin, "solo", 0))["leader"] == 1)
    assert json.loads(state_json(admin, "solo", 0))["leader_epoch"] == 2
    assert wait_for(lambda: (m := _metadata(b[3], "t", 0)) is not None and m.offline_replicas == ())
    assert json.loads(state_json(admin, "t", 0))["leader"] == 2  # no preferred election here
    assert c.ctx.replicas_on_offline_dirs[1] == set()


def test_a_follower_dir_failing_shrinks_the_isr_without_an_election(cluster, admin):
    c, b = _cluster_with_topic(cluster, {"t": {0: [2, 1, 3]}})
    b[3].offline.add(("t", 0))
    b[3].announce_log_dir_event()
    # Leader 2 stays, ISR [2,1] at leader epoch 1 (the removal always adds one).
    assert wait_for(lambda: state_json(admin, "t", 0) ==
                    b'{"version":1,"leader":2,"leader_epoch":1,"controller_epoch":1,"isr":[2,1]}')
    assert wait_for(lambda: (m := _metadata(b[1], "t", 0)) is not None and m.offline_replicas == (3,))
    assert wait_for(lambda: any(p.leader_epoch == 1 for p in b[1].leader_and_isr_states()))
    assert not any(p.leader_epoch == 1 for p in b[3].leader_and_isr_states())


# -- topic deletion -----------------------------------------------------------------------------

def test_deletion_waits_for_a_broker_that_is_away_and_completes_when_it_registers(cluster, admin):
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2], 1: [2, 3]}}, configs={"retention.ms": "1000"})
    b[2].deregister()
    assert wait_for(lambda: 2 not in c.ctx.live_brokers)
    for x in b.values():
        x.clear()
    # Answered once marked (Kafka's AdminZkClient.deleteTopic), not when the topic is gone.
    assert c.delete_topics(["t", "nope"]).result(timeout=5) == {"t": 0, "nope": 3}
    assert admin.exists("/admin/delete_topics/t") is not None
    # Live replicas get StopReplica(delete=true, leader epoch -2) and answer 0.
    assert wait_for(lambda: ("t", 0, True, -2) in {(p.topic, p.partition, p.delete, p.leader_epoch)
                                                   for p in b[1].stop_replicas()})
    assert wait_for(lambda: ("t", 1, True, -2) in {(p.topic, p.partition, p.delete, p.leader_epoch)
                                                   for p in b[3].stop_replicas()})
    # Brokers drop the topic from their metadata: leader -2.
    assert wait_for(lambda: (m := _metadata(b[1], "t", 0)) is not None and m.leader == -2)
    assert wait_for(lambda: c.call(lambda: "t" in c.ctx.topics_ineligible_for_deletion).result(5))
    assert admin.exists("/brokers/topics/t") is not None and admin.exists("/config/topics/t") is not None
    # Marked again while queued: answered 0 (the API layer answers 3 once its metadata
    # cache has dropped the topic), and creating it is refused as marked.
    assert c.delete_topics(["t"]).result(timeout=5) == {"t": 0}
    created = c.create_topics([TopicSpec("t", 1, 1)]).result(timeout=5)["t"]
    assert (created.error_code, created.error_message) == (36, "Topic 't' is marked for deletion.")

    b[2].register()
    assert wait_for(lambda: admin.exists("/admin/delete_topics/t") is None, 15)
    assert {(p.topic, p.partition, p.delete) for p in b[2].stop_replicas()} >= {
        ("t", 0, True), ("t", 1, True)}
    for path in ("/brokers/topics/t", "/config/topics/t", "/admin/delete_topics/t"):
        assert admin.exists(path) is None, path
    assert "t" not in c.ctx.all_topics


def test_a_deletion_whose_caller_stopped_waiting_completes_and_the_controller_stays(cluster, admin):
    """DeleteTopics answers 7 once its timeout_ms runs out and cancels what it waited
    on, here before the busy event thread got to it; the deletion goes on and completes
    later. That must not take the controller down: it stays active, on the same epoch,
    and serves the next request."""
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2]}, "u": {0: [1, 2]}}, brokers=(1, 2))
    epoch = c.ctx.epoch
    b[2].offline.add(("t", 0))  # its dir is OFFLINE: StopReplica answers 56
    busy = threading.Event()
    c.call(lambda: busy.wait(10))
    gave_up = c.delete_topics(["t"])
    assert gave_up.cancel()  # the request's timeout_ms ran out
    busy.set()
    assert wait_for(lambda: c.call(lambda: "t" in c.ctx.topics_ineligible_for_deletion).result(5))
    b[2].offline.clear()
    b[2].announce_log_dir_event()
    assert wait_for(lambda: admin.exists("/brokers/topics/t") is None)
    assert c.delete_topics(["u"]).result(timeout=15) == {"u": 0}
    assert c.is_active and c.ctx.epoch == epoch


def test_deletion_of_a_replica_on_an_offline_dir_completes_after_its_log_dir_event(cluster, admin):
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2]}}, brokers=(1, 2))
    b[2].offline.add(("t", 0))  # its dir is OFFLINE: StopReplica answers 56
    assert c.delete_topics(["t"]).result(timeout=5) == {"t": 0}
    assert wait_for(lambda: any(p.delete for p in b[2].stop_replicas()))
    assert wait_for(lambda: c.call(lambda: "t" in c.ctx.topics_ineligible_for_deletion).result(5))
    assert admin.exists("/brokers/topics/t") is not None
    # `log-dirs readmit`: the dir is back and the broker writes a log-dir event.
    b[2].offline.clear()
    b[2].announce_log_dir_event()
    assert wait_for(lambda: admin.exists("/admin/delete_topics/t") is None, 15)
    assert admin.exists("/brokers/topics/t") is None
    assert admin.get_children("/log_dir_event_notification") == []


def test_a_log_dir_probes_late_56_does_not_undo_a_deletion_on_a_saturated_dir(cluster, admin):
    """A dir fills and its log-dir probe is still unanswered when the topic is deleted:
    the StopReplica(delete) waits behind the probe, whose 56 then arrives while the
    deletion is in flight. The StopReplica's own answer decides: the full dir deletes
    and the deletion completes."""
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2]}}, brokers=(1, 2))
    b[1].answer_leader_and_isr.clear()
    b[1].saturated.add(("t", 0))
    b[1].clear()
    b[1].announce_log_dir_event()
    assert wait_for(lambda: b[1].received(LEADER_AND_ISR))  # the probe, unanswered
    assert c.delete_topics(["t"]).result(timeout=5) == {"t": 0}
    assert wait_for(lambda: c.call(lambda: c.replica_sm.state(TopicPartition("t", 0), 1)).result(5)
                    is ReplicaState.DELETION_STARTED)
    b[1].answer_leader_and_isr.set()  # 56 for t-0, then the StopReplica(delete) answered 0
    assert wait_for(lambda: admin.exists("/admin/delete_topics/t") is None, 15)
    assert ("t", 0, True) in {(p.topic, p.partition, p.delete) for p in b[1].stop_replicas()}
    for path in ("/brokers/topics/t", "/config/topics/t", "/admin/delete_topics/t"):
        assert admin.exists(path) is None, path


# -- failover -----------------------------------------------------------------------------------

def test_failover_loads_the_cluster_and_tells_every_broker(cluster, admin):
    c1, b = _cluster_with_topic(cluster, {"t": {0: [1, 2, 3]}})
    c1.stop()  # frees /controller; nobody holds it for a moment
    assert wait_for(lambda: admin.exists("/controller") is None)
    # Notifications written while there was no controller are deleted by the next one.
    b[3].announce_log_dir_event()
    admin.create("/isr_change_notification/isr_change_", znodes.encode_isr_change([("t", 0)]),
                 sequence=True)
    for x in b.values():
        x.clear()
    c2 = cluster.controller(2)
    assert wait_for(lambda: c2.active_controller_count == 1 and c2.ctx.epoch == 2)
    for x in b.values():
        assert wait_for(lambda x=x: LEADER_AND_ISR in x.api_keys())
        keys = x.api_keys()
        assert keys[0] == UPDATE_METADATA and not views_of_first_metadata(x)  # live brokers only
        lai = x.leader_and_isr_states()
        assert [(p.topic, p.partition, p.leader, p.leader_epoch, p.is_new) for p in lai] == [
            ("t", 0, 1, 0, False)]
        assert {r.controller_epoch for r in x.received()} == {2}
    assert admin.get_children("/log_dir_event_notification") == []
    assert admin.get_children("/isr_change_notification") == []
    assert c2.ctx.live_broker_ids == [1, 2, 3] and c2.ctx.replicas(TopicPartition("t", 0)) == (1, 2, 3)
    # The new controller works: a lost broker is handled at epoch 2.
    b[1].deregister()
    assert wait_for(lambda: state_json(admin, "t", 0) ==
                    b'{"version":1,"leader":2,"leader_epoch":1,"controller_epoch":2,"isr":[2,3]}')
    assert not any(p.topic == "t" for p in b[1].stop_replicas() if p.delete)
    assert STOP_REPLICA not in b[2].api_keys()


def test_isr_change_notifications_are_read_sent_and_deleted(cluster, admin):
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2, 3]}})
    # The leader shrank its ISR itself (a conditional setData keeping leader and epochs).
    admin.set(znodes.partition_state_path("t", 0),
              b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[1,2]}', version=0)
    for x in b.values():
        x.clear()
    admin.create("/isr_change_notification/isr_change_", znodes.encode_isr_change([("t", 0)]),
                 sequence=True)
    for x in b.values():
        assert wait_for(lambda x=x: (m := _metadata(x, "t", 0)) is not None and m.isr == (1, 2)
                        and m.zk_version == 1)
    assert wait_for(lambda: admin.get_children("/isr_change_notification") == [])
    assert not any(LEADER_AND_ISR == k for x in b.values() for k in x.api_keys())


# -- partition reassignment ---------------------------------------------------------------------

def test_a_reassignment_runs_kafkas_steps_and_completes_on_the_leaders_own_isr_write(cluster, admin):
    """[1, 2] -> [2, 3] against stand-in brokers. ZooKeeper holds RS [2, 3, 1] with its
    adding and removing replicas before any broker hears; the leader epoch goes up and
    every replica gets RS (the added one with is_new). The leader then writes the ISR
    with 3 in it and announces nothing (a leader dying within its notification delay):
    the controller's watch on the state znode completes the reassignment all the same.
    Leader 1 is not in the target, so 2 leads; 1 leaves the ISR and is deleted at the
    partition's leader epoch; the topic znode holds [2, 3] alone."""
    from daemon.controller.context import ReplicaAssignment

    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2]}})
    tp = TopicPartition("t", 0)
    for x in b.values():
        x.clear()
    assert c.alter_partition_reassignments({tp: [2, 3]}).result(15) == {tp: (0, None)}
    topic = json.loads(admin.get(znodes.topic_path("t"))[0])
    assert (topic["partitions"], topic["adding_replicas"], topic["removing_replicas"]) == \
        ({"0": [2, 3, 1]}, {"0": [3]}, {"0": [1]})
    assert state_json(admin, "t", 0) == \
        b'{"version":1,"leader":1,"leader_epoch":1,"controller_epoch":1,"isr":[1,2]}'
    for i in (1, 2, 3):
        assert wait_for(lambda i=i: any(p.leader_epoch == 1 for p in b[i].leader_and_isr_states()))
        (p,) = [p for p in b[i].leader_and_isr_states() if p.leader_epoch == 1]
        assert (p.replicas, p.adding_replicas, p.removing_replicas, p.is_new) == \
            ((2, 3, 1), (3,), (1,), i == 3)
    assert c.list_partition_reassignments().result(15) == {tp: ReplicaAssignment((2, 3, 1), (3,), (1,))}
    assert c.list_partition_reassignments([TopicPartition("t", 1)]).result(15) == {}

    admin.set(znodes.partition_state_path("t", 0),
              b'{"version":1,"leader":1,"leader_epoch":1,"controller_epoch":1,"isr":[1,2,3]}', version=1)
    assert wait_for(lambda: json.loads(admin.get(znodes.topic_path("t"))[0])["partitions"] == {"0": [2, 3]})
    topic = json.loads(admin.get(znodes.topic_path("t"))[0])
    assert topic["adding_replicas"] == {} and topic["removing_replicas"] == {}
    # Elected (epoch 2, the ISR kept), then 1 out of the ISR (epoch 3).
    assert state_json(admin, "t", 0) == \
        b'{"version":1,"leader":2,"leader_epoch":3,"controller_epoch":1,"isr":[2,3]}'
    assert wait_for(lambda: views.StopReplicaPartition("t", 0, True, 3) in b[1].stop_replicas())
    assert not b[2].stop_replicas() and not b[3].stop_replicas()
    assert c.list_partition_reassignments().result(15) == {}
    assert wait_for(lambda: (m := _metadata(b[3], "t", 0)) is not None and m.replicas == (2, 3)
                    and m.leader == 2)


def test_reassign_partitions_znode_of_the_older_tools_is_taken_and_emptied(cluster, admin):
    """Tools from before Kafka 3 (and older Cruise Control and CMAK) write
    `/admin/reassign_partitions`: the controller starts what it asks, drops from it the
    partitions it refuses, and deletes it once the rest has completed. A znode that is
    not Kafka's JSON is deleted, changing nothing."""
    c, b = _cluster_with_topic(cluster, {"t": {0: [1, 2], 1: [2, 3]}})
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    admin.create(znodes.REASSIGN_PARTITIONS, json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [2, 3]},
        {"topic": "t", "partition": 7, "replicas": [1, 2]}]}).encode())
    assert wait_for(lambda: t0 in c.list_partition_reassignments().result(15))
    assert wait_for(lambda: json.loads(admin.get(znodes.REASSIGN_PARTITIONS)[0])["partitions"] ==
                    [{"topic": "t", "partition": 0, "replicas": [2, 3]}])  # t-7 refused: gone
    state = json.loads(state_json(admin, "t", 0))
    admin.set(znodes.partition_state_path("t", 0), json.dumps({**state, "isr": [1, 2, 3]}).encode(),
              version=admin.exists(znodes.partition_state_path("t", 0)).version)
    assert wait_for(lambda: admin.exists(znodes.REASSIGN_PARTITIONS) is None)
    assert json.loads(admin.get(znodes.topic_path("t"))[0])["partitions"] == {"0": [2, 3], "1": [2, 3]}
    assert c.list_partition_reassignments().result(15) == {}
    # Watched again after its deletion: a second request is taken too; not JSON: deleted.
    admin.create(znodes.REASSIGN_PARTITIONS, b"{not json")
    assert wait_for(lambda: admin.exists(znodes.REASSIGN_PARTITIONS) is None)
    admin.create(znodes.REASSIGN_PARTITIONS, znodes.encode_reassign_partitions({("t", 1): [3, 2]}))
    # The same replicas in another order: nothing to copy, done at once (the leader stays).
    assert wait_for(lambda: admin.exists(znodes.REASSIGN_PARTITIONS) is None)
    assert json.loads(admin.get(znodes.topic_path("t"))[0])["partitions"]["1"] == [3, 2]
    assert c.list_partition_reassignments([t1]).result(15) == {}


def test_a_znode_created_between_the_read_and_the_watch_is_read(admin):
    """Kafka's registerZNodeChangeHandlerAndCheckExistence: a read that finds no node
    arms a watch for its creation; a node created between the two (a tool writing
    `/admin/reassign_partitions` just as the controller deleted the last one) gets no
    creation event, so the read is made again. Before, the controller took the node as
    absent and never saw it. The creation is made to land in that gap."""
    events: list[object] = []
    zk = ControllerZk(admin, 0)
    real_exists = admin.exists_async
    admin.ensure_path("/admin")
    admin.ensure_path("/brokers")

    late = {znodes.CONTROLLER: znodes.encode_controller(7, 0)}

    def exists_after_a_creation(path, watch=None):
        if real_exists(path).get(timeout=15) is None:
            admin.create(path, late.get(path, b"late"))
        return real_exists(path, watch=watch)

    admin.exists_async = exists_after_a_creation
    try:
        got = zk.get("/admin/reassign_partitions", watch=events.append)
        assert got is not None and got[0] == b"late"
        assert zk.children("/brokers/topics", watch=events.append) == []
        assert admin.exists("/brokers/topics") is not None
        # The election's read of /controller: broker 7 took it in the gap.
        assert ControllerElection(admin, 0).active_controller_id(watch=events.append) == 7
    finally:
        del admin.exists_async
    assert zk.get("/admin/never", watch=None) is None
    admin.set("/admin/reassign_partitions", b"changed")
    assert wait_for(lambda: events)  # the watch is on the node as it is
