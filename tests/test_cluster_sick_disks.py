"""Sick disks across the cluster, end to end, part two (docs/cluster.md, "A log dir
fails"): a second dir failing on the same broker, the last good dir failing (the broker
exits and the controller treats it as gone), ZooKeeper down while a dir fails (the
log_dir_event waits, and leadership moves once ZooKeeper is back), a dir failing while
its broker is cut off from ZooKeeper past its session (a proxy the test cuts: the broker
is dropped, comes back with a new session, and its dead dir stays offline), and the other ways a
disk fails taken through the controller: `chmod 000` under a non-root broker (KIP-112's
own system test), a hung disk (FUSE; OFFLINE after log.dir.probe.timeout.ms) and a slow
one with log.dir.slow.action = "offline". A real ZooKeeper, three broker processes,
real kernel faults (FS_IOC_SHUTDOWN on loop-mounted ext4), idempotent acks=all
producers of both clients; each test checks that every acknowledged record is read
back once, what every live broker's Metadata says, and that no log_dir_event znode is
left behind.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import faults
from tests.daemon_helpers import REPO, write_config
from tests.fusefs import faulty_fuse
from tests.test_sick_disks_fuse import PROBE_CANARY, _as_user

from .cluster_helpers import Cluster, no_log_dir_event_left, wait_for
from .daemon_helpers import RawClient
from .sick_helpers import KAFKA_STORAGE_ERROR, produce_raw
from .test_cluster_disks import create_on, holding_dir
from .test_replication import Load, assert_every_ack_read_once, start_producers

Want = dict[tuple[str, int], tuple[set[int], list[int], list[int]]]


def state_everywhere(cl: Cluster, want: Want, brokers: list[int] | None = None) -> Any:
    """Every live broker's (or each of `brokers`') Metadata for the partitions of
    `want`, if each matches it: (allowed leaders, ISR, offline replicas), ISR and offline
    sorted; else None."""
    topics = sorted({t for t, _ in want})
    views = {b: cl.metadata(b, topics)["partitions"] for b in brokers or cl.alive()}
    for v in views.values():
        for tp, (leaders, isr, offline) in want.items():
            if tp not in v:  # a broker just started, before the controller's UpdateMetadata
                return None
            leader, _, _, got_isr, got_offline = v[tp]
            if leader not in leaders or sorted(got_isr) != isr or sorted(got_offline) != offline:
                return None
    return views


def describe(cl: Cluster, topics: list[str], brokers: list[int] | None = None) -> str:
    return "; ".join(f"broker {b}: {cl.metadata(b, topics)['partitions']}"
                     for b in brokers or cl.alive())


def wait_state(cl: Cluster, want: Want | Callable[[], Want], timeout: float, what: str,
               brokers: list[int] | None = None) -> Any:
    """Until every broker's view is `want` (a callable: asked again at each look)."""
    wanted = want if callable(want) else lambda: want
    topics = sorted({t for t, _ in wanted()})
    return wait_for(lambda: state_everywhere(cl, wanted(), brokers), timeout,
                    lambda: f"{what}; now {describe(cl, topics, brokers)}")


def wait_progress(loads: list[Load], more: int = 50, timeout: float = 60) -> None:
    """Each producer gets `more` acknowledgements beyond what it has now."""
    before = [len(x.acked) for x in loads]
    wait_for(lambda: all(len(x.acked) >= n + more for x, n in zip(loads, before, strict=True)),
             timeout, lambda: f"acks=all writes acknowledged: before {before}, now "
                              f"{[len(x.acked) for x in loads]}, failed "
                              f"{[x.failed[:2] for x in loads]}")


def finish(loads: dict[str, list[Load]]) -> dict[str, list[int]]:
    return {t: [x.finish() for x in ls] for t, ls in loads.items()}


def test_a_second_dir_then_the_last_dir_failing_on_one_broker(tmp_path: Path) -> None:
    """Broker 1 has three dirs, each holding one topic: a (a-0 led by 1, a-1 followed),
    b (b-0 led by 1, b-1 followed) and c (c-0 led by 1). Idempotent acks=all producers
    of both clients write to all three topics throughout.

    Dir A fails (EIO): a's partitions leave broker 1 (a-0 gets another leader, a-1 keeps
    its leader, broker 1 leaves both ISRs and is listed offline), b and c stay as they
    were. Then dir B, a second dir of the same broker, fails the same way: b follows a,
    and c, on the last good dir, is still led by broker 1 with a full ISR. Broker 1
    served through both. Then dir C, its last good dir, fails: broker 1 exits 1 naming
    each dir, and the controller treats it as gone: c-0 gets a leader on another broker
    and broker 1 is out of every ISR. Writes go on after each failure; every
    acknowledged record is read back once and no log_dir_event znode is left."""
    with faults.loop_ext4(64) as m0, faults.loop_ext4(64) as m1, faults.loop_ext4(64) as m2:
        dirs = [m0 / "d", m1 / "d", m2 / "d"]
        with Cluster(tmp_path, log_dirs={1: dirs}) as cl:
            b1 = cl.brokers[1]
            first, second, last = dirs
            create_on(cl, first, "a", [[1, 2, 3], [2, 1, 3]])
            create_on(cl, second, "b", [[1, 2, 3], [3, 1, 2]])
            create_on(cl, last, "c", [[1, 2, 3]])
            parts = {"a": 2, "b": 2, "c": 1}
            healthy: Want = {
                ("a", 0): ({1}, [1, 2, 3], []), ("a", 1): ({2}, [1, 2, 3], []),
                ("b", 0): ({1}, [1, 2, 3], []), ("b", 1): ({3}, [1, 2, 3], []),
                ("c", 0): ({1}, [1, 2, 3], [])}
            loads = {t: start_producers(cl, t, n) for t, n in parts.items()}
            everyone = [x for ls in loads.values() for x in ls]
            try:
                wait_progress(everyone, 100)
                # The first dir fails.
                faults.shutdown_fs(m0)
                a_gone: Want = {**healthy,
                                ("a", 0): ({2, 3}, [2, 3], [1]), ("a", 1): ({2}, [2, 3], [1])}
                wait_state(cl, a_gone, 30, "a off broker 1's first dir, b and c untouched")
                assert b1.log_dir_states() == {str(first): "offline", str(second): "online",
                                               str(last): "online"}
                wait_progress(everyone)
                # A second dir of the same broker fails.
                faults.shutdown_fs(m1)
                b_gone: Want = {**a_gone,
                                ("b", 0): ({2, 3}, [2, 3], [1]), ("b", 1): ({3}, [2, 3], [1])}
                wait_state(cl, b_gone, 30, "b off broker 1's second dir, c untouched")
                assert b1.proc is not None and b1.proc.poll() is None, "broker 1 died"
                assert b1.log_dir_states()[str(last)] == "online"
                assert holding_dir(b1, "c", 0) == last
                wait_progress(everyone)
                # The last good dir fails: broker 1 stops, naming each dir.
                faults.shutdown_fs(m2)
                assert b1.proc.wait(60) == 1
                err = b1.stderr()
                assert "every log dir is offline" in err
                for d in dirs:
                    assert str(d) in err.split("every log dir is offline", 1)[1]
                wait_for(lambda: all(cl.metadata(b)["brokers"] == [2, 3] for b in (2, 3)),
                         30, "broker 1 gone from every live broker's Metadata")
                # Gone, not just a dir: broker 1 is out of every ISR, and listed offline
                # wherever it holds a replica (Kafka lists the replicas of dead brokers).
                gone: Want = {**b_gone, ("c", 0): ({2, 3}, [2, 3], [1])}
                wait_state(cl, gone, 30, "leadership and ISRs off the dead broker")
                wait_progress(everyone)
            finally:
                unanswered = finish(loads)
            assert [cl.brokers[b].proc.poll() for b in (2, 3)] == [None, None]
            for t, n in parts.items():
                assert_every_ack_read_once(cl, t, n, loads[t], unanswered[t])
            no_log_dir_event_left(cl)


def test_zookeeper_down_while_a_dir_fails_moves_leadership_once_it_is_back(
        tmp_path: Path) -> None:
    """ZooKeeper stops; then broker 1's dir A (a-0 led by 1, a-1 followed) gets EIO
    while idempotent acks=all producers write to a and to b (b-0 led by 1 on its good
    dir B). While ZooKeeper is away the dir is OFFLINE on broker 1 and its partitions
    answer 56, but no controller can hear of it: every broker still names broker 1 a-0's
    leader, and b keeps taking acks=all writes (its ISR is whole; nothing needs
    ZooKeeper). ZooKeeper comes back: the log_dir_event that waited in broker 1's queue
    is written and consumed, a-0 gets another leader, broker 1 leaves a's ISRs and is
    listed offline, b is untouched, no broker died, every acknowledged record is read
    back once."""
    # Kafka's own session timeout (18 s), not the kill tests' 4 s: ZooKeeper restarted
    # gives every session a fresh timeout from its start, and a broker whose reconnect
    # (backing off up to 2 s, on a loaded machine) came after 4 s lost its session and
    # re-registered, which is another test (a broker bounce). The probe timeout is the
    # default 5 s, not 1 s: EIO is found by the next probe whatever its timeout, and a
    # full run with heavy disk IO beside it once took over 1 s for the good dir's probe
    # (a canary fdatasync on a loop device), so broker 1 found that dir hung too, had no
    # good dir left and exited, which is another test.
    extra = {"log.dir.probe.interval.ms": 100, "log.dir.probe.timeout.ms": 5000,
             "zookeeper.session.timeout.ms": 18000}
    with faults.loop_ext4(64) as m0, faults.loop_ext4(64) as m1:
        dirs = [m0 / "d", m1 / "d"]
        with Cluster(tmp_path, log_dirs={1: dirs}, extra=extra) as cl:
            b1 = cl.brokers[1]
            sick, good = dirs
            create_on(cl, sick, "a", [[1, 2, 3], [2, 1, 3]])
            create_on(cl, good, "b", [[1, 2, 3]])
            parts = {"a": 2, "b": 1}
            before: Want = {("a", 0): ({1}, [1, 2, 3], []), ("a", 1): ({2}, [1, 2, 3], []),
                            ("b", 0): ({1}, [1, 2, 3], [])}
            loads = {t: start_producers(cl, t, n) for t, n in parts.items()}
            everyone = [x for ls in loads.values() for x in ls]
            try:
                wait_progress(everyone, 100)
                cl.zk.stop()
                try:
                    faults.shutdown_fs(m0)
                    wait_for(lambda: b1.log_dir_states()[str(sick)] == "offline", 10,
                             "dir A OFFLINE on broker 1")
                    # The event waits: for as long as ZooKeeper is away, nothing moves.
                    for _ in range(10):
                        assert state_everywhere(cl, before), describe(cl, ["a", "b"])
                        time.sleep(0.3)
                    # ... while the partition on the good dir goes on taking writes.
                    wait_progress(loads["b"], 50, 30)
                finally:
                    cl.zk.start()
                # b stays led by broker 1 and a-1 by broker 2, unless that broker's
                # session expired meanwhile: a reconnect that reaches ZooKeeper while it
                # starts gets no answer for a whole session timeout (kazoo's connect
                # timeout, as ZooKeeper's own client's), and by then the session is gone.
                # The broker then registers again, a bounce (the cut-off test below): what
                # it led moves to another broker of the ISR, and it rejoins the ISRs. Seen
                # in full runs for broker 1 once and for broker 2 once. A bounced broker
                # may also keep what it led: when it was the controller, its successor
                # can first read /brokers/ids after the new registration, sees no bounce
                # (Kafka's new controller sees none either) and leaves its leadership be;
                # seen once in a full run, broker 1 keeping b-0.
                def after() -> Want:
                    bounced = {b for b, d in cl.brokers.items()
                               if d.stderr().count(f"registered /brokers/ids/{b} ") > 1}
                    return {("a", 0): ({2, 3}, [2, 3], [1]),
                            ("a", 1): ({2, 3} if 2 in bounced else {2}, [2, 3], [1]),
                            ("b", 0): ({1, 2, 3} if 1 in bounced else {1}, [1, 2, 3], [])}

                try:
                    wait_state(cl, after, 60, "leadership off the dead dir once ZooKeeper is back")
                except AssertionError as err:  # failed once in a full run: say what happened
                    said = [f"broker {b}: {line}" for b, d in cl.brokers.items()
                            for line in d.stderr().splitlines()
                            if any(w in line for w in ("log dir", "log_dir_event", "controller",
                                                       "session", "ZooKeeper", "zk"))]
                    raise AssertionError(f"{err}\n" + "\n".join(said[-60:])) from None
                wait_progress(everyone)
            finally:
                unanswered = finish(loads)
            assert cl.alive() == [1, 2, 3], "a broker died"
            assert "notified the controller" in b1.stderr()
            for t, n in parts.items():
                assert_every_ack_read_once(cl, t, n, loads[t], unanswered[t])
            no_log_dir_event_left(cl)


def test_a_dir_failing_while_its_broker_is_cut_off_from_zookeeper_past_its_session(
        tmp_path: Path) -> None:
    """Broker 1 reaches ZooKeeper through a proxy that the test cuts (a network
    partition: ZooKeeper runs on, the other brokers still reach it). Cut off, broker 1's
    dir A gets EIO (a-0 led by 1, a-1 followed) while idempotent acks=all producers write
    to a and to b (b-0 led by 1 on its good dir B): the event cannot be written. Broker 1's
    session (4 s) expires: the other brokers drop it, the controller (broker 1 itself, or
    its successor) moves every leadership it held to 2 or 3, and writes go on there.
    Reconnected, broker 1 finds its session gone, registers again with a new one, and
    the controller's LeaderAndIsr is answered 56 for a (its dir still dead) while b
    becomes a follower again: a stays led by 2 or 3 with broker 1 offline, broker 1
    rejoins b's ISR, the log_dir_event that waited is written and consumed, no broker
    died, every acknowledged record is read back once."""
    from .tcp_proxy import TcpProxy

    # EIO is seen at once; the probe timeout stays the default 5 s, since a 1 s one took
    # broker 1's good dir offline as "hung" under two busy loops (a probe's fdatasync on
    # the loop device ran over), and with it the broker.
    extra = {"log.dir.probe.interval.ms": 100}
    with faults.loop_ext4(64) as m0, faults.loop_ext4(64) as m1, \
            contextlib.ExitStack() as stack:
        dirs = [m0 / "d", m1 / "d"]
        cl = Cluster(tmp_path, log_dirs={1: dirs}, extra=extra)
        proxy = TcpProxy("127.0.0.1", cl.zk.port)
        stack.callback(proxy.close)
        stack.callback(cl.close)  # the brokers stop before the proxy goes
        b1 = cl.brokers[1]
        b1.values["zookeeper.connect"] = proxy.address
        write_config(b1.config, b1.values)
        cl.start()
        sick, good = dirs
        create_on(cl, sick, "a", [[1, 2, 3], [2, 1, 3]])
        create_on(cl, good, "b", [[1, 2, 3]])
        parts = {"a": 2, "b": 1}
        loads = {t: start_producers(cl, t, n) for t, n in parts.items()}
        everyone = [x for ls in loads.values() for x in ls]
        try:
            wait_progress(everyone, 100)
            proxy.hold()
            try:
                faults.shutdown_fs(m0)
                wait_for(lambda: b1.log_dir_states()[str(sick)] == "offline", 10,
                         "dir A OFFLINE on broker 1")
                others = [2, 3]
                wait_for(lambda: all(cl.metadata(b)["brokers"] == others for b in others), 30,
                         "broker 1's session expired: brokers 2 and 3 see only each other")
                cut: Want = {("a", 0): ({2, 3}, [2, 3], [1]), ("a", 1): ({2}, [2, 3], [1]),
                             ("b", 0): ({2, 3}, [2, 3], [1])}
                wait_state(cl, cut, 30, "leadership off broker 1 while it is cut off", others)
                wait_progress(everyone)
            finally:
                proxy.release()
            after: Want = {("a", 0): ({2, 3}, [2, 3], [1]), ("a", 1): ({2}, [2, 3], [1]),
                           ("b", 0): ({2, 3}, [1, 2, 3], [])}
            wait_state(cl, after, 60, "broker 1 back: a offline on it, b's ISR whole")
            wait_progress(everyone)
        finally:
            unanswered = finish(loads)
        assert cl.alive() == [1, 2, 3], "a broker died"
        assert b1.stderr().count("registered /brokers/ids/1") >= 2  # a new session
        assert "notified the controller" in b1.stderr()
        for t, n in parts.items():
            assert_every_ack_read_once(cl, t, n, loads[t], unanswered[t])
        no_log_dir_event_left(cl)


# ---- the other ways a disk fails, through the controller ----

FAULTS = ("chmod-000-non-root", "hung-fuse", "slow-fuse-offline")


@contextlib.contextmanager
def broker1_with_a_faulty_dir(
        tmp_path: Path, kind: str) -> Iterator[tuple[Cluster, Path, Path, Callable[[], None]]]:
    """A started 3-broker cluster whose broker 1 has a dir that can be broken as `kind`
    says, and a good one: (cluster, sick dir, good dir, break it). Undone on exit even
    after a failure: a hang is released before the brokers stop (the kernel cannot reap
    a process waiting on a FUSE request), mounts go, modes are restored."""
    probe = {"log.dir.probe.interval.ms": 100, "log.dir.probe.timeout.ms": 1000}
    with contextlib.ExitStack() as stack:
        if kind == "chmod-000-non-root":
            faults.require_root()
            user = pwd.getpwnam("nobody")
            # tmp_path sits under a 0700 dir the broker's user could not traverse.
            root = Path(tempfile.mkdtemp(prefix="lk-nonroot-"))
            stack.callback(shutil.rmtree, root, True)
            root.chmod(0o755)
            sick, good = root / "b1-d0", root / "b1-d1"
            for x in (sick, good):
                x.mkdir()
                os.chown(x, user.pw_uid, user.pw_gid)
            stack.callback(lambda: sick.chmod(0o755))
            cl = Cluster(root, log_dirs={1: [sick, good]}, extra=probe)
            b1 = cl.brokers[1]
            ns = root / "ns"
            ns.mkdir()
            need = [os.path.realpath(sys.executable), sys.executable, sys.prefix,
                    sys.base_prefix, str(REPO), *(p for p in sys.path if p and os.path.exists(p))]
            b1.prefix = _as_user(user.pw_uid, user.pw_gid, need, ns)
            b1.env = {"HOME": str(b1.root)}
            fault: Callable[[], None] = lambda: sick.chmod(0o000)  # noqa: E731
        else:
            fs = stack.enter_context(faulty_fuse())
            sick, good = fs.path / "d", tmp_path / "b1-d1"
            slow = kind == "slow-fuse-offline"
            cl = Cluster(tmp_path, log_dirs={1: [sick, good]}, extra=probe)
            b1 = cl.brokers[1]
            if slow:
                # A slow probe has to come back to count as slow: a longer timeout.
                b1.values.update({"log.dir.slow.action": "offline",
                                  "log.dir.probe.timeout.ms": 5000})
                write_config(b1.config, b1.values)
                fault = lambda: fs.delay(0.1, ("write", "fsync", "read"), PROBE_CANARY)  # noqa: E731
            else:
                fault = fs.hang
        stack.callback(cl.close)
        if kind != "chmod-000-non-root":
            def release() -> None:
                try:
                    fs.delay(0)
                    fs.release()
                except Exception:  # noqa: BLE001 - the server is gone or stuck: abort it
                    fs.kill()
            stack.callback(release)
        cl.start()
        if kind == "chmod-000-non-root":
            with open(f"/proc/{cl.brokers[1].proc.pid}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
            assert uids == [str(pwd.getpwnam("nobody").pw_uid)] * 4
        yield cl, sick, good, fault


@pytest.mark.parametrize("kind", FAULTS)
def test_a_dir_failing_without_eio_moves_leadership_through_the_controller(
        tmp_path: Path, kind: str) -> None:
    """KIP-112's flow for the faults that are not EIO: broker 1's dir A holds t-0 (led
    by 1) and t-1 (followed), dir B holds h-0 (led by 1). Under idempotent acks=all
    load on t, dir A is broken: `chmod 000` with broker 1 running as nobody (KIP-112's
    own system test; inotify sees it), a FUSE disk that hangs (OFFLINE once a probe
    outlasts log.dir.probe.timeout.ms), or one that turns slow with
    log.dir.slow.action = "offline". Then, through the log_dir_event: t-0 gets another
    leader, t-1 keeps its leader, broker 1 leaves both ISRs and is listed offline on
    every broker, t-0 on broker 1 answers 56, h-0 stays led by broker 1 with a full ISR
    and takes acks=all writes, no broker died, no log_dir_event znode is left, and every
    acknowledged record is read back once."""
    with broker1_with_a_faulty_dir(tmp_path, kind) as (cl, sick, good, fault):
        b1 = cl.brokers[1]
        create_on(cl, sick, "t", [[1, 2, 3], [2, 1, 3]])
        create_on(cl, good, "h", [[1, 2, 3]])
        loads = start_producers(cl, "t", 2)
        try:
            wait_progress(loads, 100)
            fault()
            wait_for(lambda: b1.log_dir_states()[str(sick)] == "offline", 30,
                     f"dir A OFFLINE ({kind})")
            moved: Want = {("t", 0): ({2, 3}, [2, 3], [1]), ("t", 1): ({2}, [2, 3], [1]),
                           ("h", 0): ({1}, [1, 2, 3], [])}
            wait_state(cl, moved, 30, f"leadership off broker 1's dir A ({kind})")
            c = RawClient(b1.port)
            try:
                assert produce_raw(c, "t", 0, [b"refused"])[0] == KAFKA_STORAGE_ERROR
                assert produce_raw(c, "h", 0, [b"h-after"])[0] == 0
            finally:
                c.close()
            wait_progress(loads)
        finally:
            unanswered = [x.finish() for x in loads]
        assert cl.alive() == [1, 2, 3], "a broker died"
        assert b1.log_dir_states()[str(good)] == "online"
        assert_every_ack_read_once(cl, "t", 2, loads, unanswered)
        no_log_dir_event_left(cl)


@pytest.mark.parametrize("fails", ["roll", "checkpoint"])
def test_a_failed_roll_or_checkpoint_moves_leadership_and_a_bounce_keeps_it_offline(
        tmp_path: Path, fails: str) -> None:
    """LogDirFailureTest's case 5 with real kernel errors, and KIP-112's case 4 (a
    clean bounce after the failure). Broker 1 leads t-0 from its dir A (an ext4 loop
    mount) and h-0 from dir B, under idempotent acks=all load on t. "roll": t-0's
    directory is made immutable (`chattr +i`), so appending goes on until the next
    segment roll (64 KiB segments) cannot create its files (EPERM). "checkpoint": as
    LogDirFailureTest does, dir A's replication-offset-checkpoint is replaced by a
    non-empty directory, so the next high-watermark checkpoint (every 200 ms) cannot
    rename its new file into place. Either way dir A goes OFFLINE: t-0 gets another leader,
    broker 1 is listed offline on every broker and leaves the ISR, no log_dir_event
    znode is left, h-0 keeps its leader. Then (checkpoint, where the dir stays unreadable)
    broker 1 is stopped and started: it comes back with dir A OFFLINE, t-0 stays led
    elsewhere with broker 1 offline, and nothing of t is created on dir B. Every
    acknowledged record is read back once."""
    import subprocess

    extra = {"log.segment.bytes": 64 << 10,
             "replica.high.watermark.checkpoint.interval.ms": 200,
             "log.dir.probe.interval.ms": 100, "log.dir.probe.timeout.ms": 1000}
    with faults.loop_ext4(64) as mnt:
        sick, good = mnt / "d", tmp_path / "b1-good"
        immutable = sick / "t-0"
        checkpoint = sick / "replication-offset-checkpoint"

        def break_it() -> None:
            if fails == "roll":
                subprocess.run(["chattr", "+i", str(immutable)], check=True)
            else:
                checkpoint.unlink()
                checkpoint.mkdir()
                (checkpoint / "in-the-way").write_bytes(b"")
        try:
            with Cluster(tmp_path, log_dirs={1: [sick, good]}, extra=extra) as cl:
                b1 = cl.brokers[1]
                create_on(cl, sick, "t", [[1, 2, 3]])
                create_on(cl, good, "h", [[1, 2, 3]])
                loads = start_producers(cl, "t", 1)
                try:
                    wait_progress(loads, 100)
                    break_it()
                    wait_for(lambda: b1.log_dir_states()[str(sick)] == "offline", 60,
                             f"dir A OFFLINE after a failed {fails}")
                    moved: Want = {("t", 0): ({2, 3}, [2, 3], [1]),
                                   ("h", 0): ({1}, [1, 2, 3], [])}
                    wait_state(cl, moved, 30, f"leadership off dir A ({fails})")
                    op = "roll on" if fails == "roll" else "write high watermarks on"
                    assert f"online -> offline ({op} {sick}" in b1.stderr()
                    wait_progress(loads)
                    no_log_dir_event_left(cl)
                    if fails == "checkpoint":
                        b1.stop()
                        b1.start()
                        wait_for(lambda: b1.log_dir_states()[str(sick)] == "offline", 30,
                                 "dir A OFFLINE at start-up")
                        # h-0's leadership moved while broker 1 was down, and stays.
                        bounced: Want = {**moved, ("h", 0): ({1, 2, 3}, [1, 2, 3], [])}
                        wait_state(cl, bounced, 30, "t-0 still led elsewhere after the bounce")
                        wait_progress(loads)
                        assert holding_dir(b1, "t", 0) in (None, sick)
                        assert not (good / "t-0").exists()
                finally:
                    unanswered = [x.finish() for x in loads]
                assert cl.alive() == [1, 2, 3], "a broker died"
                assert_every_ack_read_once(cl, "t", 1, loads, unanswered)
        finally:
            subprocess.run(["chattr", "-i", str(immutable)], capture_output=True)
