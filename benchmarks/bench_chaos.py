"""A long randomized fault run (issue "The cluster", section 4), kept out of CI: a real
ZooKeeper and three brokers, the idempotent acks=all producers of
tests.test_replication.PRODUCERS writing throughout, and for CHAOS_SECONDS a random fault every few
seconds: SIGKILL of a random broker or of the controller (restarted once the cluster
noticed), or SIGSTOP of one for 1-8 s (past the 4 s ZooKeeper session or not). At most
one broker is faulty at a time, so min.insync.replicas 2 keeps accepting writes. The
controller's auto leader rebalance runs every 3 s, so leadership also moves back to
restarted brokers under load. A fault may also be a replica move (AlterReplicaLogDirs):
a random broker's replica of a random partition to its other log dir, left to run into
the next faults (a kill in the middle leaves a copy that the restart must clean up). Or
a disk dies: every log dir is a loop-mounted ext4, and a random one gets FS_IOC_SHUTDOWN
(EIO from then on, and whatever the kernel had not written back is lost, as when a disk
dies), stays dead for 1-6 s while its broker serves its other dir, then is "repaired"
(unmounted and mounted again: the journal replayed, the files as the disk last had
them) and readmitted (`log-dirs readmit`), without a restart. Or a disk fills: a
ballast file takes every free block of a random log dir's filesystem (ENOSPC on the next
write there, a leader's or a follower's, or the space probe's floor), the dir turns
SATURATED while its broker serves the other one, and 1-6 s later the ballast goes and
the dir comes back ONLINE by itself (the disk-full proposal's flow, no operator). Or a
partition is reassigned (AlterPartitionReassignments): one of its replicas is dropped,
its files deleted, and the replica is added back, copying the whole log from the leader
again, half the time with the controller killed as soon as the re-adding has started
(the next controller carries the reassignment on from ZooKeeper), otherwise half the
time throttled (`reassign-partitions --throttle`, 512 KiB/s: the copy is held back
while the faults go on, and the `--verify` that sees it done removes the throttle), the
file naming the broker's second log dir for the re-added replica. The partition is one
of the topic's or, one time in three, the consumer group's `__consumer_offsets`
partition, so the group's commits move with its coordinator's replicas.

A consumer group reads the topic throughout (confluent-kafka, auto-commit), so the
group's coordinator meets the same faults: its broker killed, its disk dead or full,
its offsets partition's leadership moved.

Afterwards every broker runs again and the same checks as the CI test hold: every
acknowledged record is read back exactly once, each producer's records in order per
partition, nothing duplicated, replicas byte-identical. And the group's consumer has
read every acknowledged record at least once, and its committed offsets reach the log
end: commits survived every move of the coordinator. The faults survived and the
records acknowledged are reported (and the seed, to replay a run).

`LK_CHAOS_SECONDS` (default 120) and `LK_CHAOS_SEED` (default: random) tune it;
`LK_CHAOS_FAULTS` (a comma list, default all but `netsplit`) picks the kinds of fault
drawn from. `netsplit`, opt-in, is a network partition for real (tests.netsplit: each
broker in a network namespace of its own, ZooKeeper and the clients in a hub, every
packet between two ends dropped) for 1-8 s, then healed: a partition's leader cut from
ZooKeeper (a zombie leader once its session expires), a partition's leader cut from the
other brokers but not from ZooKeeper (the ISR shrinks to it, acks=all refused), the
controller cut from ZooKeeper (a new controller takes over), or a broker cut from
everything but the clients; it needs root, `nsenter` and `nft` (Debian's nftables), and
cannot be combined with `LK_CHAOS_SECURITY`.
`LK_CHAOS_BROKER_CONFIG` (`key=value,key=value`) adds broker settings, e.g.
`compression.type=zstd,log.message.timestamp.type=LogAppendTime` to have every leader
rewrite the batches it takes while the faults come. `LK_CHAOS_RACKS=1` puts the brokers
in racks a, b and c with Kafka's rack-aware replica selector, and the group's consumer in
rack c: it reads from broker 3 wherever broker 3 follows (KIP-392), and goes back to the
leaders whenever broker 3 is killed, paused or loses a disk. `LK_CHAOS_SECURITY` (SSL,
SASL_PLAINTEXT or SASL_SSL) makes the brokers replicate, elect and shut down over a
listener of that protocol (tests.cluster_helpers.secure_inter_broker), the clients staying
on PLAINTEXT.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.config import RACK_AWARE_REPLICA_SELECTOR  # noqa: E402
from daemon.coordinator.group import partition_for  # noqa: E402
from tests import faults  # noqa: E402
from tests.cluster_helpers import Cluster, secure_inter_broker, wait_for  # noqa: E402
from tests.netsplit import ZK, NetLab  # noqa: E402
from tests.test_replication import (  # noqa: E402
    assert_every_ack_read_once,
    create,
    full_isr,
    replicas_identical,
    start_producers,
)

CHAOS_SECONDS = float(os.environ.get("LK_CHAOS_SECONDS", "120"))
GROUP = "chaos-readers"
OFFSETS_TOPIC, OFFSETS_PARTITIONS = "__consumer_offsets", 50  # the broker default
SESSION_S = 4.0
DISK_MB = 512  # each log dir's loop-mounted ext4 (a sparse image)
THROTTLE = 512 * 1024  # bytes per second of a throttled re-add
ALL_FAULTS = ("kill", "kill-controller", "pause", "move", "disk", "full", "reassign")
OPT_IN_FAULTS = ("netsplit",)
FAULTS = [f for f in os.environ.get("LK_CHAOS_FAULTS", ",".join(ALL_FAULTS)).split(",") if f]
assert set(FAULTS) <= set(ALL_FAULTS + OPT_IN_FAULTS), \
    f"LK_CHAOS_FAULTS: unknown {set(FAULTS) - set(ALL_FAULTS + OPT_IN_FAULTS)}"
assert FAULTS, f"LK_CHAOS_FAULTS names no fault; choose from {', '.join(ALL_FAULTS + OPT_IN_FAULTS)}"
NETSPLITS = ("zombie-leader", "leader-alone", "controller-from-zk", "isolated")
BROKER_CONFIG: dict[str, Any] = {
    k: int(v) if v.lstrip("-").isdigit() else v for k, v in (
        kv.split("=", 1) for kv in os.environ.get("LK_CHAOS_BROKER_CONFIG", "").split(",") if kv)}
RACKS = {1: "a", 2: "b", 3: "c"} if os.environ.get("LK_CHAOS_RACKS") == "1" else {}
SECURITY = os.environ.get("LK_CHAOS_SECURITY", "").upper()
assert SECURITY in ("", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), f"LK_CHAOS_SECURITY={SECURITY}"
if RACKS:
    BROKER_CONFIG["replica.selector.class"] = RACK_AWARE_REPLICA_SELECTOR


def test_random_kills_and_pauses_under_acks_all_load(note: Any, benchmark: Any) -> None:
    if benchmark.disabled:
        pytest.skip("a long run, not a test: run with --benchmark-enable")
    seed = int(os.environ.get("LK_CHAOS_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    topic, parts = "chaos", 3
    done: dict[str, int] = {"kill": 0, "kill-controller": 0, "pause": 0, "move": 0,
                            "disk": 0, "full": 0, "reassign": 0, "netsplit": 0, "throttled": 0}
    splits: dict[str, int] = dict.fromkeys(NETSPLITS, 0)
    net = None
    if "netsplit" in FAULTS:
        if SECURITY:
            pytest.skip("netsplit runs its brokers on plaintext listeners of their own")
        if (why := NetLab.usable()) is not None:
            pytest.skip(f"netsplit: {why}")
    with tempfile.TemporaryDirectory(prefix="lk-chaos-") as tmp, ExitStack() as disks:
        if "netsplit" in FAULTS:  # closed last: the brokers and ZooKeeper stop first
            net = disks.enter_context(NetLab([1, 2, 3]))
        mounts = {b: [disks.enter_context(faults.loop_ext4(DISK_MB)) for _ in range(2)]
                  for b in (1, 2, 3)}
        cl = Cluster(Path(tmp), dirs=2, log_dirs={
            b: [m / "d" for m in ms] for b, ms in mounts.items()},
            per_broker={b: {"broker.rack": r} for b, r in RACKS.items()}, extra={
            # Preferred elections every few seconds too: each restarted broker gets
            # its partitions back while producers write and the next fault comes.
            "leader.imbalance.check.interval.seconds": 3,
            # A dead disk noticed within a second; EIO fails the probe at once, the
            # timeout only guards against a hang.
            "log.dir.probe.interval.ms": 500, "log.dir.probe.timeout.ms": 5000,
            # A full disk is SATURATED within a probe even when nothing writes there.
            "log.dir.min.free.bytes": 1 << 20, **BROKER_CONFIG}, net=net)
        if SECURITY:
            secure_inter_broker(cl, SECURITY, Path(tmp))
        disks.enter_context(cl)
        create(cl, topic, parts)
        loads = start_producers(cl, topic, parts)
        reader = GroupReader(",".join(d.bootstrap for d in cl.brokers.values()), topic)
        reader.start()
        unanswered: list[int] = []
        try:
            end = time.monotonic() + CHAOS_SECONDS
            while time.monotonic() < end:
                time.sleep(rng.uniform(1, 4))
                kind = rng.choice(FAULTS)
                if kind == "kill-controller":
                    victim = cl.controller()
                elif kind == "netsplit":
                    assert net is not None
                    shape = rng.choice(NETSPLITS)
                    victim = _netsplit(cl, net, shape, topic, rng.randrange(parts))
                    splits[shape] += 1
                    time.sleep(rng.uniform(1, 8))
                    net.heal()
                else:
                    victim = rng.choice(sorted(cl.brokers))
                d = cl.brokers[victim]
                if kind == "netsplit":
                    pass  # done above
                elif kind == "move":
                    _move(d, victim, topic, rng.randrange(parts))
                elif kind == "reassign":
                    moved_tp = ((OFFSETS_TOPIC, partition_for(GROUP, OFFSETS_PARTITIONS))
                                if rng.random() < 1 / 3 else (topic, rng.randrange(parts)))
                    kill_controller = rng.random() < 0.5
                    throttle = not kill_controller and rng.random() < 0.5
                    done["throttled"] += throttle
                    if _drop_and_readd(cl, victim, *moved_tp, kill_controller, throttle):
                        # The controller was killed mid-way: restart it as after a kill.
                        wait_for(lambda: len(cl.alive()) < len(cl.brokers)
                                 and cl.controller() in cl.alive(), SESSION_S + 20, "a new controller")
                        for b, broker in cl.brokers.items():
                            if b not in cl.alive():
                                wait_for(lambda b=b: b not in cl.metadata(cl.alive()[0])["brokers"],
                                         SESSION_S + 20, "death noticed")
                                broker.start()
                elif kind == "disk":
                    _disk_dies_and_comes_back(d, rng.choice(mounts[victim]),
                                              rng.uniform(1, 6))
                elif kind == "full":
                    _disk_fills_and_drains(d, rng.choice(mounts[victim]), rng.uniform(1, 6))
                elif kind == "pause":
                    d.proc.send_signal(signal.SIGSTOP)
                    time.sleep(rng.uniform(1, 8))
                    d.proc.send_signal(signal.SIGCONT)
                else:
                    d.kill()
                    # Restart only once ZooKeeper has let go of its registration.
                    wait_for(lambda victim=victim: victim not in cl.metadata(
                        next(b for b in cl.alive()))["brokers"], SESSION_S + 20, "death noticed")
                    d.start()
                done[kind] += 1
                wait_for(lambda: len(cl.alive()) == len(cl.brokers)
                         and full_isr(cl, topic, parts), 90,
                         lambda kind=kind, victim=victim: _stuck(cl, topic, kind, victim, seed))
            for load in loads:
                unanswered.append(load.finish())
            assert_every_ack_read_once(cl, topic, parts, loads, unanswered)
            wait_for(lambda: replicas_identical(cl, topic, parts), 60, "replicas byte-identical")
            acked = {ack for load in loads for ack in load.acked}
            wait_for(lambda: reader.error or acked <= reader.seen_now(), 120,
                     lambda: f"the group to read every ack: {len(acked - reader.seen_now())} "
                     "not read yet")
            assert reader.error is None, reader.error
            bootstrap = ",".join(d.bootstrap for d in cl.brokers.values())
            wait_for(lambda: group_lags(bootstrap, GROUP) == [0] * parts, 60,
                     lambda: f"the group's commits at the log ends: lags "
                     f"{group_lags(bootstrap, GROUP)}")
        except BaseException:
            _keep_evidence(cl, loads, seed)
            for load in loads[len(unanswered):]:  # stop the producers not yet finished
                try:
                    load.finish()
                except Exception:  # noqa: BLE001 - the run failed already; stop the rest
                    pass
            raise
        finally:
            reader.stop()
        rebalances = sum(d.stderr().count("back to their preferred replicas")
                         for d in cl.brokers.values())
        moved = sum(d.stderr().count(f"moved {topic}-") for d in cl.brokers.values())
    total = sum(n for kind, n in done.items() if kind != "throttled")
    acked = sum(len(load.acked) for load in loads)
    note(f"chaos (seed {seed}, {CHAOS_SECONDS:.0f} s): survived {total} faults "
         f"({done['kill']} kills, {done['kill-controller']} controller kills, "
         f"{done['pause']} pauses, {done['disk']} dead disks, {done['full']} full disks, "
         f"{done['netsplit']} network partitions {splits}, "
         f"{done['move']} replica moves "
         f"asked, {moved} done, {done['reassign']} replicas dropped and added back, "
         f"{done['throttled']} of them throttled) and "
         f"{rebalances} leader rebalances; {acked} acks=all "
         "records acknowledged, all read back exactly once, replicas byte-identical; the "
         "consumer group read every one and committed up to the log ends")
    benchmark.extra_info.update(seed=seed, faults=done, netsplits=splits, acked=acked)


class GroupReader(threading.Thread):
    """A confluent-kafka consumer in group GROUP, subscribed to the topic,
    auto-committing as it reads; `seen` is every (partition, value) it read."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.consumer = ck.Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP,
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": 500, "session.timeout.ms": 10000,
            **({"client.rack": RACKS[3]} if RACKS else {})})
        self.seen: set[tuple[int, bytes]] = set()
        self.error: str | None = None
        self.lock = threading.Lock()
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            self.consumer.subscribe([self.topic])
            while not self._halt.is_set():
                msgs = self.consumer.consume(1000, 0.5)
                with self.lock:
                    self.seen.update((m.partition(), m.value()) for m in msgs
                                     if m.error() is None)
        except Exception as err:  # noqa: BLE001 - reported by the run's checks
            self.error = f"{type(err).__name__}: {err}"
        finally:
            self.consumer.close()

    def seen_now(self) -> set[tuple[int, bytes]]:
        with self.lock:
            return set(self.seen)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def group_lags(bootstrap: str, group: str) -> list[int | None] | None:
    """Each partition's lag behind its log end, as `logkeeper groups describe` reports
    it (the coordinator's commits, each leader's log end); None while a coordinator or
    leader is moving."""
    from daemon.tools import groups
    from daemon.tools.client import ClientError, Refused

    try:
        return [r["lag"] for r in groups.describe(bootstrap, group)["partitions"]]
    except (ClientError, Refused):
        return None


def _disk_dies_and_comes_back(d: Any, mnt: Path, dead_s: float) -> None:
    """EIO on the log dir at `mnt` (its unwritten data lost), OFFLINE on its broker;
    after `dead_s` the disk is mounted again and the dir readmitted."""
    faults.shutdown_fs(mnt)
    log_dir = str(mnt / "d")
    wait_for(lambda: d.log_dir_states()[log_dir] == "offline", 30, f"{log_dir} OFFLINE")
    time.sleep(dead_s)
    subprocess.run(["umount", "-l", str(mnt)], check=True)
    subprocess.run(["mount", "-o", "loop", str(mnt.parent / "disk.img"), str(mnt)], check=True)
    code, body = d.admin("log-dirs/readmit", log_dir)
    assert code == 200, f"readmit of {log_dir}: {code} {body}"


def _disk_fills_and_drains(d: Any, mnt: Path, full_s: float) -> None:
    """Every free block of the disk at `mnt` taken by a ballast file, as by another
    tenant of the disk, until its log dir is SATURATED on its broker (which then deletes
    its reserve file); after `full_s` the ballast goes and the dir must come back ONLINE
    by itself."""
    log_dir = str(mnt / "d")
    ballast = mnt / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 0
        for chunk in (64 << 20, 1 << 20, 4096):
            while True:
                try:
                    os.posix_fallocate(fd, size, chunk)
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
                size += chunk
    finally:
        os.close(fd)
    try:
        wait_for(lambda: d.log_dir_states()[log_dir] == "saturated", 30, f"{log_dir} SATURATED")
        time.sleep(full_s)
    finally:
        ballast.unlink()
    wait_for(lambda: d.log_dir_states()[log_dir] == "online", 30, f"{log_dir} ONLINE again")


def _move(d: Any, broker: int, topic: str, partition: int) -> None:
    """Ask `broker` to move its replica of the partition to its other log dir."""
    from kafka.admin import KafkaAdminClient

    here = next((ld for ld in d.log_dirs if (ld / f"{topic}-{partition}").is_dir()), None)
    if here is None:
        return
    dest = next(ld for ld in d.log_dirs if ld != here)
    admin = KafkaAdminClient(bootstrap_servers=d.bootstrap, request_timeout_ms=10000)
    try:
        admin.alter_replica_log_dirs({(topic, partition, broker): str(dest)})
    finally:
        admin.close()


def _drop_and_readd(cl: Cluster, broker: int, topic: str, partition: int,
                    kill_controller: bool, throttle: bool) -> bool:
    """Reassign the partition without `broker`'s replica, wait until that is done (the
    replica's files deleted), then with it again at the end of the list; with
    `kill_controller`, kill -9 the controller as soon as the second reassignment has
    started; with `throttle`, add it back through `reassign-partitions --execute
    --throttle` and `--verify` it until done (which removes the throttle). True when a
    broker was killed."""
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    from tests.test_cli import cli

    replicas = cl.metadata(broker, [topic])["partitions"][(topic, partition)][2]
    if broker not in replicas:
        return False
    tp = KTP(topic, partition)
    admin = KafkaAdminClient(bootstrap_servers=cl.brokers[broker].bootstrap, request_timeout_ms=30000)
    try:
        kept = [r for r in replicas if r != broker]
        assert admin.alter_partition_reassignments({tp: kept}) == {tp: None}
        wait_for(lambda: not admin.list_partition_reassignments([tp])
                 and not any((ld / f"{topic}-{partition}").is_dir()
                             for ld in cl.brokers[broker].log_dirs), 60,
                 f"broker {broker}'s replica of {topic}-{partition} deleted")
        if not throttle:
            assert admin.alter_partition_reassignments({tp: kept + [broker]}) == {tp: None}
    finally:
        admin.close()
    if throttle:
        # The re-added replica goes to a log dir the file names (its broker's second),
        # as a JBOD operator's plan would put it on a given disk.
        where = str(cl.brokers[broker].log_dirs[-1])
        with tempfile.NamedTemporaryFile("w", suffix=".json") as plan:
            plan.write(json.dumps({"version": 1, "partitions": [
                {"topic": topic, "partition": partition, "replicas": kept + [broker],
                 "log_dirs": ["any"] * len(kept) + [where]}]}))
            plan.flush()
            args = ("reassign-partitions", "--bootstrap-server", cl.brokers[broker].bootstrap,
                    "--reassignment-json-file", plan.name)
            run = cli(*args, "--execute", "--additional", "--throttle", str(THROTTLE))
            # That dir may be dead or full right now (the other faults go on): the
            # broker refuses the dir (56) and the reassignment is not started.
            refused = run.returncode == 1 and "Failed to alter dir" in run.stderr
            assert run.returncode == 0 or refused, run.stdout + run.stderr
            if refused:
                with KafkaAdminClient(bootstrap_servers=cl.brokers[broker].bootstrap) as again:
                    assert again.alter_partition_reassignments({tp: kept + [broker]}) == {tp: None}
            done = f"Reassignment of partition {topic}-{partition} is completed."

            def verified() -> bool:  # the partition's replicas, and no copy under way
                out = cli(*args, "--verify").stdout
                return done in out and "is still in progress" not in out
            wait_for(verified, 120, f"the throttled re-add of {topic}-{partition} to broker {broker}")
    if kill_controller:
        cl.brokers[cl.controller()].kill()
    return kill_controller


def _netsplit(cl: Cluster, net: NetLab, shape: str, topic: str, partition: int) -> int:
    """Cut the links of one `NETSPLITS` shape (healed by the caller); the broker cut off."""
    if shape == "controller-from-zk":
        victim = cl.controller()
    else:
        leader = cl.metadata(cl.alive()[0], [topic])["partitions"][(topic, partition)][0]
        victim = leader if leader in cl.brokers else cl.alive()[0]
    if shape in ("zombie-leader", "controller-from-zk"):
        net.cut(victim, ZK)
    elif shape == "leader-alone":
        for b in cl.brokers:
            if b != victim:
                net.cut(victim, b)
    else:
        net.isolate(victim)
    return victim


def _stuck(cl: Cluster, topic: str, kind: str, victim: int, seed: int) -> str:
    """What a wait for the whole cluster reports: each broker's view of the topic and
    the end of its log."""
    views = []
    for b in cl.alive():
        try:
            views.append(f"{b}: {cl.metadata(b, [topic])['partitions']}")
        except OSError as err:
            views.append(f"{b}: {err}")
    return (f"the cluster whole again after {kind} of broker {victim} (seed {seed}); each "
            "broker's view:\n" + "\n".join(views) + "\n" + cl.views())


def _keep_evidence(cl: Cluster, loads: list[Any], seed: int) -> None:
    """A failed run's brokers' logs, the topic's replicas and the producers' idempotence
    events, kept in
    /tmp/lk-chaos-failed-<seed> (the cluster's own dir goes with the run)."""
    keep = Path(tempfile.gettempdir(), f"lk-chaos-failed-{seed}")
    keep.mkdir(exist_ok=True)
    for b, d in cl.brokers.items():
        if d.stderr_path.exists():
            shutil.copy(d.stderr_path, keep / f"broker{b}.stderr")
        for log_dir in d.log_dirs:  # the topic's replicas, to compare byte by byte
            for pdir in log_dir.glob("chaos-*"):
                try:
                    shutil.copytree(pdir, keep / f"broker{b}" / pdir.name, dirs_exist_ok=True)
                except OSError as err:  # a dead disk's: what could be read is kept
                    print(f"{pdir}: {err}", file=sys.stderr)
    for i, load in enumerate(loads):
        (keep / f"producer{i}-{load.client}.log").write_text("\n".join(load.eos_log))
    print(f"chaos run failed (seed {seed}): logs kept in {keep}", file=sys.stderr)
