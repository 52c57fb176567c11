"""The controller's parts that need no ZooKeeper: leader election and ISR
arithmetic (docs/controller.md "Topic creation", "Brokers"), Kafka's replica
assignment, the state machines' transition tables, the request batch (what goes to
whom, in which order and version), the event thread's FIFO, and a sender's retries
against a stand-in broker."""

from __future__ import annotations

import threading
import uuid

import pytest

from daemon.cluster import znodes
from daemon.controller import leader_election as le
from daemon.controller import state_machines as sm
from daemon.controller.channel import ChannelManager, RequestBatch
from daemon.controller.context import BrokerInfo, ControllerContext, ReplicaAssignment
from daemon.controller.events import Call, ControllerEventManager
from daemon.controller.leader_election import LeaderAndIsr
from daemon.wire import CONTROL_APIS, views
from logstore import TopicPartition

from .controller_helpers import StandInBroker, wait_for
from .zkserver import free_port

T0 = TopicPartition("t", 0)


def online(*ids):
    return lambda r: r in ids


# -- election ---------------------------------------------------------------------------

def test_a_new_partition_is_led_by_its_first_online_replica():
    lai = le.initial_leader_and_isr([3, 1, 2], online(1, 2), controller_epoch=5)
    assert lai == LeaderAndIsr(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=5, zk_version=0)
    assert le.initial_leader_and_isr([3], online(1, 2), 5) is None  # stays New


def test_offline_election_picks_the_first_live_isr_member_at_the_next_epoch():
    # Broker 1's dir failed; t-0 was led by 1 with ISR [1,2,3].
    current = LeaderAndIsr(1, 0, (1, 2, 3), controller_epoch=4, zk_version=0)
    new = le.elect_offline_leader([1, 2, 3], current, online(2, 3), unclean=False, controller_epoch=5)
    assert new == LeaderAndIsr(2, 1, (2, 3), 5, 0)  # zk_version: the version to write at
    assert znodes.encode_partition_state(new.to_znode()) == \
        b'{"version":1,"leader":2,"leader_epoch":1,"controller_epoch":5,"isr":[2,3]}'
    # Assignment order decides, not ISR order.
    assert le.elect_offline_leader([3, 2, 1], current, online(2, 3), False, 5).leader == 3


def test_without_a_live_isr_member_only_unclean_election_finds_a_leader():
    current = LeaderAndIsr(1, 3, (1,), 4, 7)
    assert le.elect_offline_leader([1, 2, 3], current, online(2, 3), False, controller_epoch=5) is None
    new = le.elect_offline_leader([1, 3, 2], current, online(2, 3), unclean=True, controller_epoch=5)
    assert (new.leader, new.isr, new.leader_epoch) == (3, (3,), 4)
    assert new.leader_recovery_state == znodes.LEADER_RECOVERING
    assert b'"leader_recovery_state":1' in znodes.encode_partition_state(new.to_znode())
    assert le.elect_offline_leader([1], current, online(), unclean=True, controller_epoch=5) is None


def test_isr_removal_always_bumps_the_epoch_and_never_empties_the_isr():
    # A follower's dir failed: follower 3 goes; leader 2 stays at leader epoch 2.
    current = LeaderAndIsr(2, 1, (2, 3), 5, 1)
    assert le.remove_replica_from_isr(current, 3, 5) == LeaderAndIsr(2, 2, (2,), 5, 1)
    # An ISR of one is kept; the leader becomes -1 when that member goes.
    solo = LeaderAndIsr(2, 2, (2,), 5, 2)
    assert le.remove_replica_from_isr(solo, 2, 6) == LeaderAndIsr(-1, 3, (2,), 6, 2)
    assert le.remove_replica_from_isr(current, 1, 5) is None  # not in the ISR: no write


def test_preferred_election_moves_leadership_back_only_to_a_live_isr_member():
    # Broker 1 (preferred) came back and caught up: it leads again, the ISR stays.
    current = LeaderAndIsr(2, 4, (2, 3, 1), controller_epoch=4, zk_version=9)
    assert le.elect_preferred_leader([1, 2, 3], current, online(1, 2, 3), 6) == \
        LeaderAndIsr(1, 5, (2, 3, 1), 6, 9)
    # Not yet in the ISR, not online, or already leading: no election.
    behind = LeaderAndIsr(2, 4, (2, 3), 4, 9)
    assert le.elect_preferred_leader([1, 2, 3], behind, online(1, 2, 3), 6) is None
    assert le.elect_preferred_leader([1, 2, 3], current, online(2, 3), 6) is None
    assert le.elect_preferred_leader([2, 1, 3], current, online(1, 2, 3), 6) is None


def test_a_reassignment_adds_the_targets_replicas_and_removes_the_rest_as_kafkas():
    # [1, 2] -> [2, 3]: RS lists the target first, then what only the origin has.
    moving = ReplicaAssignment((1, 2)).reassign_to((2, 3))
    assert moving == ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert (moving.origin, moving.target, moving.is_being_reassigned) == ((2, 1), (2, 3), True)
    # Another target while it runs: the origin stays [1, 2] (3 was only being added).
    again = moving.reassign_to((4, 1))
    assert again == ReplicaAssignment((4, 1, 2), adding=(4,), removing=(2,))
    # A cancel goes back to the origin; a shrink only removes; the same set is a no-op.
    assert moving.reassign_to(moving.origin) == ReplicaAssignment((2, 1))
    assert ReplicaAssignment((1, 2, 3)).reassign_to((3, 1)) == ReplicaAssignment((3, 1, 2), removing=(2,))
    assert not ReplicaAssignment((1, 2)).reassign_to((1, 2)).is_being_reassigned


def test_a_reassignments_leader_is_the_first_target_replica_online_and_in_the_isr():
    current = LeaderAndIsr(1, 7, (1, 2, 3), controller_epoch=4, zk_version=3)
    assert le.elect_reassigned_leader((3, 2), current, online(2, 3), 6) == LeaderAndIsr(3, 8, (1, 2, 3), 6, 3)
    assert le.elect_reassigned_leader((3, 2), current, online(2), 6).leader == 2
    assert le.elect_reassigned_leader((4, 3), current, online(4), 6) is None  # 4 not in the ISR
    # The epoch alone moves on: same leader, ISR and recovery state.
    recovering = LeaderAndIsr(2, 1, (2,), 4, 5, znodes.LEADER_RECOVERING)
    assert recovering.with_next_epoch(6) == LeaderAndIsr(2, 2, (2,), 6, 5, znodes.LEADER_RECOVERING)


def test_auto_rebalance_picks_brokers_whose_preferred_partitions_are_led_elsewhere():
    # Broker 1 is preferred for a, b, c, d; 2 for e, f. After broker 1's restart it leads
    # only a: 75% of its partitions are elsewhere. Broker 2 leads both of its own.
    assignments = {"a": (1, 2), "b": (1, 2), "c": (1, 2), "d": (1, 3), "e": (2, 1), "f": (2, 1)}
    leaders = {"a": 1, "b": 2, "c": 2, "d": 3, "e": 2, "f": 2}
    in_isr = {"b", "d"}  # c's preferred replica has not caught up yet

    def can_lead(tp, broker):
        return tp in in_isr

    assert le.preferred_elections_due(assignments, leaders, can_lead, 10) == ["b", "d"]
    # 75% is not above a 75% allowance; one partition of four is above 10%.
    assert le.preferred_elections_due(assignments, leaders, can_lead, 75) == []
    assert le.preferred_elections_due(
        assignments, {**leaders, "b": 1, "d": 1}, lambda tp, b: True, 10) == ["c"]
    # A partition without leadership yet is not counted as led elsewhere.
    assert le.preferred_elections_due({"x": (1, 2)}, {}, lambda tp, b: True, 0) == []


def test_round_robin_assignment_matches_kafkas_layout():
    # AdminUtils' documented example: 5 brokers, 10 partitions, RF 3, start 0, shift 0.
    got = le.round_robin_assignment([0, 1, 2, 3, 4], 10, 3, start=0, shift=0)
    assert got[0] == (0, 1, 2) and got[4] == (4, 0, 1)
    assert got[5] == (0, 2, 3) and got[9] == (4, 1, 2)
    assert all(len(set(replicas)) == 3 for replicas in got.values())
    assert sorted(r[0] for r in got.values()) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert le.round_robin_assignment([7], 2, 1, 0, 0) == {0: (7,), 1: (7,)}
    with pytest.raises(ValueError):
        le.round_robin_assignment([1, 2], 1, 3, 0, 0)


def test_rack_aware_assignment_matches_kafkas_layout():
    # AdminUtils' documented example: the rack-alternated list, then the round robin.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert le.rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    got = le.rack_aware_assignment(racks, 6, 3, start=0, shift=0)
    assert got == {0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0),
                   5: (2, 0, 3)}
    # Whatever the random start and shift: every partition on three racks, leaders and
    # replicas spread evenly.
    for start in range(6):
        for shift in range(6):
            got = le.rack_aware_assignment(racks, 12, 3, start, shift)
            assert all(len({racks[b] for b in r}) == 3 for r in got.values())
            assert sorted(r[0] for r in got.values()) == sorted(list(racks) * 2)
            assert sorted(b for r in got.values() for b in r) == sorted(list(racks) * 6)
    # Two racks of unequal size: each partition still on both.
    uneven = {1: "a", 2: "a", 3: "b"}
    assert all({uneven[b] for b in r} == {"a", "b"}
               for r in le.rack_aware_assignment(uneven, 6, 2, 1, 2).values())
    # Kafka's RackAwareMode.Safe: a broker without a rack means no rack awareness.
    assert le.replica_assignment({1: "a", 2: None, 3: "b"}, 3, 2, 0, 0) == \
        le.round_robin_assignment([1, 2, 3], 3, 2, 0, 0)


# -- state machines ---------------------------------------------------------------------

def test_transition_tables_are_kafkas():
    P, R = sm.PartitionState, sm.ReplicaState
    assert sm.valid_partition_transition(P.NON_EXISTENT, P.NEW)
    assert sm.valid_partition_transition(P.OFFLINE, P.ONLINE)
    assert not sm.valid_partition_transition(P.ONLINE, P.NON_EXISTENT)
    assert not sm.valid_partition_transition(P.NON_EXISTENT, P.ONLINE)
    assert sm.valid_replica_transition(R.OFFLINE, R.DELETION_STARTED)
    assert not sm.valid_replica_transition(R.ONLINE, R.DELETION_STARTED)
    assert sm.valid_replica_transition(R.DELETION_INELIGIBLE, R.OFFLINE)
    assert sm.valid_replica_transition(R.DELETION_STARTED, R.DELETION_SUCCESSFUL)
    assert not sm.valid_replica_transition(R.DELETION_INELIGIBLE, R.DELETION_SUCCESSFUL)
    assert sm.valid_replica_transition(R.DELETION_SUCCESSFUL, R.NON_EXISTENT)


def test_unclean_election_comes_from_the_topic_config_or_the_default():
    assert sm.unclean_enabled({"unclean.leader.election.enable": "true"}, default=False)
    assert not sm.unclean_enabled({"unclean.leader.election.enable": "false"}, default=True)
    assert sm.unclean_enabled({}, default=True) and not sm.unclean_enabled({}, default=False)


# -- the request batch ----------------------------------------------------------------------

T_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")  # topic t's id


def _context() -> ControllerContext:
    ctx = ControllerContext()
    ctx.epoch = 5
    for b in (1, 2, 3):
        reg = znodes.BrokerRegistration(b, (znodes.BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9090 + b),), 0)
        ctx.live_brokers[b] = BrokerInfo(b, 100 + b, reg)
    ctx.set_assignment("t", {0: (1, 2, 3)}, T_ID)
    ctx.set_assignment("gone", {0: (1, 2)}, None)
    ctx.leadership[T0] = LeaderAndIsr(2, 1, (2, 3), 5, 1)
    ctx.leadership[TopicPartition("gone", 0)] = LeaderAndIsr(1, 0, (1, 2), 4, 0)
    ctx.replicas_on_offline_dirs[1] = {T0}
    ctx.topics_to_be_deleted.add("gone")
    return ctx


def _roundtrip(request):
    """Encode and decode with the wire classes, as a broker would read it."""
    cls = CONTROL_APIS[request.API_KEY][0]
    request.API_VERSION = request.version
    request.with_header(correlation_id=1, client_id="5")
    return cls.decode(bytes(request.encode(header=True)), version=request.version, header=True)


def test_a_batch_sends_leader_and_isr_then_update_metadata_then_stop_replica():
    ctx = _context()
    batch = RequestBatch()
    batch.add_leader_and_isr(ctx, [2, 3], T0, ctx.leadership[T0], is_new=False)
    batch.add_leader_and_isr(ctx, [3], T0, ctx.leadership[T0], is_new=True)  # is_new sticks
    batch.add_stop_replica([1], T0, delete=False, leader_epoch=1)
    # A replica a reassignment removes: stopped, then deleted at the partition's epoch.
    batch.add_stop_replica([1], T0, delete=True, leader_epoch=1)
    batch.add_stop_replica([2], TopicPartition("gone", 0), delete=False, leader_epoch=0)
    batch.add_stop_replica([2], TopicPartition("gone", 0), delete=True, leader_epoch=-2)
    batch.add_stop_replica([2], TopicPartition("gone", 0), delete=False, leader_epoch=0)  # kept
    batch.add_update_metadata([1, 2, 3, 9], [TopicPartition("gone", 0)])
    out = batch.requests(ctx, controller_id=5)
    assert [type(r).__name__ for r in out[2]] == ["LeaderAndIsrRequest", "UpdateMetadataRequest",
                                                  "StopReplicaRequest"]
    assert [type(r).__name__ for r in out[1]] == ["UpdateMetadataRequest", "StopReplicaRequest"]
    assert 9 not in out  # not a live broker
    lai = _roundtrip(out[3][0])
    assert (lai.version, lai.controller_id, lai.controller_epoch, lai.broker_epoch) == (4, 5, 5, 103)
    (p,) = views.leader_and_isr_partitions(lai)
    assert (p.leader, p.leader_epoch, p.isr, p.partition_epoch, p.replicas, p.is_new) == \
        (2, 1, (2, 3), 1, (1, 2, 3), True)
    assert views.leader_and_isr_leaders(lai) == [views.LiveLeader(2, "127.0.0.1", 9092)]
    um = _roundtrip(out[1][0])
    assert um.version == 7 and um.broker_epoch == 101
    parts = {(m.topic, m.partition): m for m in views.update_metadata_partitions(um)}
    # v7 carries the topic's id (KIP-516), which the brokers' Metadata v10+ answers.
    assert (parts[("t", 0)].topic_id, parts[("gone", 0)].topic_id) == (T_ID, None)
    assert parts[("t", 0)].offline_replicas == (1,)  # broker 1 reported it on an offline dir
    assert parts[("gone", 0)].leader == -2  # being deleted: brokers drop it
    assert [b.broker_id for b in views.update_metadata_brokers(um)] == [1, 2, 3]
    assert views.update_metadata_brokers(um)[0].endpoints == (
        views.Endpoint("PLAINTEXT", "127.0.0.1", 9091, 0),)
    sr = _roundtrip(out[2][2])
    assert sr.version == 3
    assert views.stop_replica_partitions(sr) == [views.StopReplicaPartition("gone", 0, True, -2)]
    assert views.stop_replica_partitions(_roundtrip(out[1][1])) == [
        views.StopReplicaPartition("t", 0, True, 1)]


def test_an_update_metadata_without_partitions_still_lists_the_live_brokers():
    ctx = _context()
    batch = RequestBatch()
    assert batch.is_empty()
    batch.add_update_metadata([1], [])
    (um,) = batch.requests(ctx, 5)[1]
    assert views.update_metadata_partitions(um) == [] and len(views.update_metadata_brokers(um)) == 3


# -- the event thread -------------------------------------------------------------------------

def test_events_run_in_order_on_one_thread_and_an_error_does_not_stop_it():
    seen, errors = [], []
    done = threading.Event()

    def process(event):
        event.fn()

    mgr = ControllerEventManager(process, lambda e, err: errors.append(err), name="test-events")
    mgr.start()
    try:
        threads = set()
        for i in range(5):
            mgr.put(Call(lambda i=i: (seen.append(i), threads.add(threading.current_thread().name))))
        mgr.put(Call(lambda: 1 / 0))
        mgr.put(Call(done.set))
        assert done.wait(5)
        assert seen == [0, 1, 2, 3, 4] and threads == {"test-events"}
        assert len(errors) == 1 and isinstance(errors[0], ZeroDivisionError)
    finally:
        mgr.close()
    pending = mgr.put(Call(lambda: None))
    mgr.close()
    assert pending.future.cancelled()


def test_the_event_thread_outlives_a_failing_error_handler():
    """An event fails, and so does the handling of that failure: the thread goes on with
    the next event (a dead event thread is a controller that silently does nothing)."""
    done = threading.Event()

    def on_error(event, err):
        raise RuntimeError("the handler itself failed")

    mgr = ControllerEventManager(lambda event: event.fn(), on_error, name="test-events")
    mgr.start()
    try:
        mgr.put(Call(lambda: 1 / 0))
        mgr.put(Call(done.set))
        assert done.wait(5)
    finally:
        mgr.close()


# -- the sender -------------------------------------------------------------------------------

def test_a_sender_retries_until_the_broker_listens_and_keeps_fifo_order():
    ctx = _context()
    port = free_port()
    reg = znodes.BrokerRegistration(2, (znodes.BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),), 0)
    ctx.live_brokers[2] = BrokerInfo(2, 102, reg)
    answers = []
    channel = ChannelManager(5, lambda b, req, resp: answers.append((b, type(req).__name__, resp)))
    broker = None
    try:
        channel.add_broker(ctx.live_brokers[2])
        batch = RequestBatch()
        batch.add_leader_and_isr(ctx, [2], T0, ctx.leadership[T0], is_new=False)
        batch.add_stop_replica([2], T0, delete=False, leader_epoch=1)
        channel.send_batch(batch, ctx)
        assert not wait_for(lambda: answers, timeout=0.5)  # nobody listens yet: retried every 100 ms
        broker = StandInBroker("unused", 2, port=port)
        assert wait_for(lambda: len(answers) == 3, timeout=5)
        assert [a[1] for a in answers] == [
            "LeaderAndIsrRequest", "UpdateMetadataRequest", "StopReplicaRequest"]
        assert views.leader_and_isr_errors(answers[0][2]) == {("t", 0): 0}
        assert broker.api_keys() == [4, 6, 5]
    finally:
        channel.shutdown()
        if broker is not None:
            broker.close()
    assert channel.brokers() == []
