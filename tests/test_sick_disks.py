"""Sick disks through the running daemon: real kernel faults, real clients, real ZooKeeper.

Each test runs `logkeeper serve` as a subprocess on real filesystems (loop-mounted ext4,
small tmpfs), breaks one of them the way disks break (FS_IOC_SHUTDOWN gives EIO on
every later call; a full tmpfs gives ENOSPC; rm -rf and lazy unmounts; a low open-file
limit), and checks what clients, /metrics, /log-dirs and ZooKeeper see. Mounts are
undone even when a test fails (tests.faults). They run in CI as root, never skipped.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin
import pytest
from kazoo.client import KazooClient

from tests import faults
from tests.daemon_helpers import REPO, Daemon, RawClient, write_config
from tests.sick_helpers import (
    FAST,
    KAFKA_STORAGE_ERROR,
    consume,
    create_topic,
    log_dir_events,
    metadata,
    metric,
    open_files_under,
    placement,
    produce_raw,
    remove_dir,
    wait_for,
    zookeeper,
)

# ---- a. EIO at runtime ----


def test_eio_takes_one_dir_offline_and_the_others_keep_serving(tmp_path: Path) -> None:
    with faults.loop_ext4(64) as m0, faults.loop_ext4(64) as m1, faults.loop_ext4(64) as m2, \
            zookeeper() as zk:
        dirs = [m0 / "d", m1 / "d", m2 / "d"]
        d = Daemon(tmp_path, {"log.dirs": [str(x) for x in dirs], **FAST,
                              "zookeeper.connect": zk.hosts})
        d.log_dirs = dirs
        with d.start():
            create_topic(d, "t", 6)
            where = placement(d, "t")
            assert sorted(set(where.values())) == sorted(dirs)  # spread on all three
            c = RawClient(d.port)
            acked: dict[int, list[bytes]] = {p: [] for p in range(6)}
            for i in range(50):
                for p in range(6):
                    recs = [b"%d-%d" % (p, i)]
                    assert produce_raw(c, "t", p, recs)[0] == 0
                    acked[p] += recs
            sick = dirs[1]
            faults.shutdown_fs(sick.parent)
            wait_for(lambda: d.log_dir_states()[str(sick)] == "offline", 10, "OFFLINE")
            states = d.log_dir_states()
            assert [states[str(x)] for x in dirs] == ["online", "offline", "online"]
            on_sick = [p for p, ld in where.items() if ld == sick]
            healthy = [p for p in range(6) if p not in on_sick]
            # Its partitions answer KAFKA_STORAGE_ERROR; the others keep accepting.
            for p in on_sick:
                assert produce_raw(c, "t", p, [b"late"])[0] == KAFKA_STORAGE_ERROR
            for i in range(20):
                for p in healthy:
                    recs = [b"after-%d-%d" % (p, i)]
                    assert produce_raw(c, "t", p, recs)[0] == 0
                    acked[p] += recs
            # Metadata is the controller's view: it lists the dir's replicas offline once
            # the controller has read the log_dir_event and sent UpdateMetadata (as in
            # Kafka), a moment after the dir itself answers 56; under load, longer.
            def listed_offline() -> Any:
                m = metadata(c, "t")
                return all(m[p].offline_replicas == [1] and m[p].leader_id == -1
                           for p in on_sick) and m
            meta = wait_for(listed_offline, 20, "the dir's replicas listed offline")
            for p in healthy:
                assert meta[p].offline_replicas == [] and meta[p].leader_id == 1
            # Nothing acknowledged on a healthy dir is lost, in order.
            got = consume(d, "t", healthy, sum(len(acked[p]) for p in healthy))
            for p in healthy:
                assert [v for (q, _), v in sorted(got.items()) if q == p] == acked[p]
            assert metric(d, "kafka_log_logmanager_offlinelogdirectorycount") == 1
            assert metric(d, "kafka_server_replicamanager_offlinereplicacount") == len(on_sick)
            assert metric(d, "logkeeper_log_dir_state", log_dir=str(sick), state="offline") == 1
            # The controller is told, in Kafka's znode.
            zc = KazooClient(hosts=zk.hosts)
            zc.start(15)
            try:
                # (Our controller, in the same daemon, reads and deletes it at once.)
                kids = wait_for(lambda: log_dir_events(zc, d), 20, "event")
                assert len(kids) == 1
                assert kids[0] in ({"version": 1, "broker": 1, "event": 1},) or \
                    kids[0]["path"].startswith("/log_dir_event_notification/log_dir_event_")
                published = wait_for(lambda: json.loads(
                    zc.get("/logkeeper/brokers/1/log_dirs")[0]), 20, "published states")
                by_path = {e["path"]: e for e in published["log_dirs"]}
                wait_for(lambda: json.loads(zc.get("/logkeeper/brokers/1/log_dirs")[0])
                         ["log_dirs"][1]["state"] == "offline", 20, "published offline")
                assert set(by_path) == {str(x) for x in dirs}
                assert zc.exists("/brokers/ids/1")
            finally:
                zc.stop()
                zc.close()
            # kafka-log-dirs.sh's view, with our state on top.
            proc = run_cli("log-dirs", "describe", "--bootstrap-server", d.bootstrap,
                           "--http", f"127.0.0.1:{d.http_port}")
            assert proc.returncode == 1, proc.stderr  # a dir reports an error
            described = {e["logDir"]: e for e in json.loads(proc.stdout)["brokers"][0]["logDirs"]}
            assert described[str(sick)]["error"] == "KafkaStorageException"
            assert described[str(sick)]["state"] == "offline" and described[str(sick)]["reason"]
            assert described[str(dirs[0])]["error"] is None
            assert described[str(dirs[0])]["state"] == "online"
            # Nothing touches the dir any more: every file, the .lock too, is closed.
            assert d.proc is not None
            wait_for(lambda: not open_files_under(d.proc.pid, sick), 10, "files released")
            c.close()
            assert d.stop() == 0
        assert "log dir " + str(sick) in d.stderr() and "offline" in d.stderr()


def on_mounts(root: Path, mounts: list[Path], extra: dict[str, Any]) -> Daemon:
    """A daemon whose log dirs are `<mount>/d`: one filesystem each, equal in size, so
    placement spreads partitions over all of them."""
    d = Daemon(root, {**extra, "log.dirs": [str(m / "d") for m in mounts]})
    d.log_dirs = [m / "d" for m in mounts]
    return d


def fetch_all(d: Daemon, topic: str, partition: int, expected: int) -> list[bytes]:
    got = consume(d, topic, [partition], expected)
    return [v for _, v in sorted(got.items())]


def cordoned(d: Daemon, *dirs: Path, on: bool = True) -> None:
    for x in dirs:
        assert d.admin("log-dirs/cordon" if on else "log-dirs/uncordon", x)[0] == 200


# ---- b. ENOSPC ----


def test_full_disk_saturates_then_comes_back_online_by_itself(tmp_path: Path) -> None:
    reserve = 2 << 20
    with faults.tmpfs("24m") as small:
        full = small / "d"
        d = Daemon(tmp_path, {**FAST, "log.dir.reserve.bytes": reserve,
                              "log.segment.bytes": 1 << 20})
        d.log_dirs[2] = full
        d.values["log.dirs"] = [str(x) for x in d.log_dirs]
        write_config(d.config, d.values)
        with d.start():
            assert (full / ".logkeeper-reserve").stat().st_size == reserve
            # Only the small dir takes new partitions for now.
            cordoned(d, d.log_dirs[0], d.log_dirs[1])
            create_topic(d, "big", 1)
            create_topic(d, "keep", 1)
            cordoned(d, d.log_dirs[0], d.log_dirs[1], on=False)
            create_topic(d, "elsewhere", 1)
            assert placement(d, "big")[0] == full and placement(d, "keep")[0] == full
            assert placement(d, "elsewhere")[0] != full
            c = RawClient(d.port)
            assert produce_raw(c, "keep", 0, [b"kept"]) == (0, 0)
            acked, code = 0, 0
            chunk = [os.urandom(100 << 10)]
            while acked < 400:
                code, _ = produce_raw(c, "big", 0, chunk)
                if code:
                    break
                acked += 1
            assert code == KAFKA_STORAGE_ERROR, "the 24 MiB tmpfs never filled"
            wait_for(lambda: d.log_dir_states()[str(full)] == "saturated", 10, "SATURATED")
            # The state shows at once; the reserve goes on the dir's worker just after.
            wait_for(lambda: not (full / ".logkeeper-reserve").exists(), 10, "reserve deleted")
            assert produce_raw(c, "keep", 0, [b"refused"])[0] == KAFKA_STORAGE_ERROR
            assert metric(d, "logkeeper_saturated_log_dir_count") == 1
            # Reads keep working, and the other dirs take appends.
            assert len(fetch_all(d, "big", 0, acked)) == acked
            assert fetch_all(d, "keep", 0, 1) == [b"kept"]
            assert produce_raw(c, "elsewhere", 0, [b"fine"])[0] == 0
            # Deleting a topic frees space: ONLINE again by itself, reserve back.
            a = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
            for fut in a.delete_topics(["big"]).values():
                fut.result(30)
            wait_for(lambda: d.log_dir_states()[str(full)] == "online", 10, "ONLINE again")
            wait_for(lambda: (full / ".logkeeper-reserve").exists()
                     and (full / ".logkeeper-reserve").stat().st_size == reserve, 10, "reserve")
            assert produce_raw(c, "keep", 0, [b"again"]) == (0, 1)
            assert fetch_all(d, "keep", 0, 2) == [b"kept", b"again"]
            assert metric(d, "logkeeper_saturated_log_dir_count") == 0
            c.close()
        log = d.stderr()
        assert "online -> saturated" in log and "saturated -> online" in log


def test_free_space_under_the_floor_saturates_before_writes_fail(tmp_path: Path) -> None:
    with faults.tmpfs("16m") as small:
        d = Daemon(tmp_path, {**FAST, "log.dir.min.free.bytes": 6 << 20,
                              "log.dir.resume.free.bytes": 9 << 20})
        d.log_dirs[1] = small / "d"
        d.values["log.dirs"] = [str(x) for x in d.log_dirs]
        write_config(d.config, d.values)
        with d:
            assert d.log_dir_states()[str(small / "d")] == "online"
            ballast = small / "ballast"
            ballast.write_bytes(b"\0" * (10 << 20))  # ~5 MiB left: under the floor
            wait_for(lambda: d.log_dir_states()[str(small / "d")] == "saturated", 5, "floor")
            ballast.unlink()
            wait_for(lambda: d.log_dir_states()[str(small / "d")] == "online", 5, "resume")


# ---- c. removed or lazily unmounted: inotify, not the probe interval ----


SLOW_PROBES = {"log.dir.probe.interval.ms": 600000, "log.dir.probe.timeout.ms": 5000}


def test_removed_dir_goes_offline_within_a_second(tmp_path: Path) -> None:
    with Daemon(tmp_path, SLOW_PROBES) as d:
        create_topic(d, "t", 3)
        gone = d.log_dirs[2]
        started = time.monotonic()
        remove_dir(gone)
        wait_for(lambda: d.log_dir_states()[str(gone)] == "offline", 1.0, "OFFLINE via inotify")
        assert time.monotonic() - started < 1.0
        assert sorted(d.log_dir_states().values()) == ["offline", "online", "online"]


def test_lazily_unmounted_dir_goes_offline_within_a_second(tmp_path: Path) -> None:
    with faults.tmpfs("16m") as mnt:
        d = Daemon(tmp_path, SLOW_PROBES)
        d.log_dirs[0] = mnt / "d"
        d.values["log.dirs"] = [str(x) for x in d.log_dirs]
        write_config(d.config, d.values)
        with d:
            create_topic(d, "t", 3)
            started = time.monotonic()
            subprocess.run(["umount", "-l", str(mnt)], check=True)
            # The path now names the empty directory underneath: not the dir we opened.
            wait_for(lambda: d.log_dir_states()[str(mnt / "d")] == "offline", 1.0,
                     "OFFLINE after umount -l")
            assert time.monotonic() - started < 1.0
            _, dirs = d.http("/log-dirs")
            assert "no longer the directory" in dirs[0]["error"] or "No such" in dirs[0]["error"]


# ---- e. start-up with bad dirs ----


def test_startup_serves_the_good_dirs_and_keeps_the_bad_dirs_partitions_offline(
        tmp_path: Path) -> None:
    with faults.loop_ext4(32) as m0, faults.loop_ext4(32) as mnt, faults.loop_ext4(32) as m2, \
            zookeeper() as zk:
        d = on_mounts(tmp_path, [m0, mnt, m2], {**FAST, "zookeeper.connect": zk.hosts})
        with d:
            create_topic(d, "t", 3)
            where = placement(d, "t")
            assert sorted(set(where.values())) == sorted(d.log_dirs)
            c = RawClient(d.port)
            for p in range(3):
                assert produce_raw(c, "t", p, [b"v%d" % p])[0] == 0
            c.close()
        faults.shutdown_fs(mnt)  # the disk dies while the broker is down
        with d.start():
            states = d.log_dir_states()
            assert states[str(mnt / "d")] == "offline"
            assert [states[str(x)] for x in (d.log_dirs[0], d.log_dirs[2])] == ["online"] * 2
            bad = next(p for p, ld in where.items() if ld == mnt / "d")
            c = RawClient(d.port)
            # The controller probes the restarted broker; its 56 lists the replica offline.
            meta = wait_for(lambda: (m := metadata(c, "t")) and bad in m
                            and m[bad].offline_replicas == [1] and m, 20, "offline replica")
            assert sorted(meta) == [0, 1, 2]  # all three still known ...
            assert meta[bad].offline_replicas == [1] and meta[bad].leader_id == -1
            # ... and the offline one is not re-created on another dir (isNewReplica).
            assert produce_raw(c, "t", bad, [b"x"])[0] == KAFKA_STORAGE_ERROR
            assert sorted(p for p, ld in placement(d, "t").items() if ld != mnt / "d") == \
                sorted(p for p in range(3) if p != bad)
            for p in range(3):
                if p != bad:
                    assert fetch_all(d, "t", p, 1) == [b"v%d" % p]
            c.close()
            # The controller hears of a dir that was offline from the start, too.
            zc = KazooClient(hosts=zk.hosts)
            zc.start(15)
            try:
                wait_for(lambda: log_dir_events(zc, d), 20, "event")
            finally:
                zc.stop()
                zc.close()
        assert "online -> offline" in d.stderr() and "Input/output error" in d.stderr()


def test_a_dir_offline_from_the_start_is_not_reported_stuck_at_the_stop(
        tmp_path: Path) -> None:
    """A dir that could not be opened at start-up has an idle worker: the stop lets it
    go. Every stop of such a daemon said "a log dir's worker is stuck on its disk;
    exiting without it" (an ERROR meant for a hung disk) and left through os._exit."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    good = tmp_path / "good"
    d = Daemon(tmp_path / "run", {"log.dirs": [str(good), str(blocker / "disk1")]})
    d.start()
    try:
        assert "online -> offline" in d.stderr()
        assert d.stop() == 0
    finally:
        d.kill()
    assert "stuck" not in d.stderr()
    assert "stopped cleanly" in d.stderr()
    assert (good / ".kafka_cleanshutdown").exists()


def test_startup_with_every_dir_bad_exits_non_zero_naming_each(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    bad = [blocker / f"disk{i}" for i in range(3)]
    d = Daemon(tmp_path / "run", {"log.dirs": [str(x) for x in bad]})
    with pytest.raises(RuntimeError, match="exited 1"):
        d.start()
    err = d.stderr()
    assert "every log dir is offline" in err
    for x in bad:
        assert str(x) in err
    assert blocker.read_text() == "not a directory"


def test_every_dir_failing_at_runtime_stops_the_daemon(tmp_path: Path) -> None:
    with Daemon(tmp_path, {**FAST, "log.dirs": [str(tmp_path / "only")]}) as d:
        d.log_dirs = [tmp_path / "only"]
        remove_dir(tmp_path / "only")
        assert d.proc is not None
        assert d.proc.wait(20) == 1
    assert "every log dir is offline" in d.stderr() and str(tmp_path / "only") in d.stderr()


# ---- g. ZooKeeper away while a dir fails; session expiry ----


def test_notification_waits_for_zookeeper_and_the_broker_reregisters(tmp_path: Path) -> None:
    with zookeeper() as zk:
        d = Daemon(tmp_path, {**FAST, "zookeeper.connect": zk.hosts,
                              "zookeeper.session.timeout.ms": 2000})
        with d:
            zc = KazooClient(hosts=zk.hosts)
            zc.start(15)
            wait_for(lambda: zc.exists("/brokers/ids/1"), 20, "registration")
            zc.stop()
            zc.close()
            create_topic(d, "t", 3)
            healthy = [p for p, ld in placement(d, "t").items() if ld != d.log_dirs[0]]
            zk.stop()
            remove_dir(d.log_dirs[0])
            wait_for(lambda: d.log_dir_states()[str(d.log_dirs[0])] == "offline", 5, "OFFLINE")
            # Clients are served while ZooKeeper is away.
            c = RawClient(d.port)
            assert healthy and all(produce_raw(c, "t", p, [b"x"])[0] == 0 for p in healthy)
            c.close()
            zk.start()
            zc = KazooClient(hosts=zk.hosts)
            zc.start(15)
            try:
                kids = wait_for(lambda: log_dir_events(zc, d), 30, "event")
                assert len(kids) == 1
                assert kids[0] in ({"version": 1, "broker": 1, "event": 1},) or \
                    kids[0]["path"].startswith("/log_dir_event_notification/log_dir_event_")
            finally:
                zc.stop()
                zc.close()
            # Session expiry: the broker stalls (SIGSTOP) past its session timeout, so
            # ZooKeeper expires the session and drops /brokers/ids/1; once it runs
            # again it learns of the expiry and registers again.
            assert d.proc is not None
            zc = KazooClient(hosts=zk.hosts)
            zc.start(15)
            first = zc.exists("/brokers/ids/1").ephemeralOwner
            # ZooKeeper's absence above may have outlasted the 2 s session too (its
            # client's reconnection back-off on a busy machine): counted from here.
            expired = metric(d, "kafka_server_sessionexpirelistener_zookeeperexpires_total")
            os.kill(d.proc.pid, signal.SIGSTOP)
            try:
                wait_for(lambda: not zc.exists("/brokers/ids/1"), 20, "session expiry")
            finally:
                os.kill(d.proc.pid, signal.SIGCONT)
            zc.stop()
            zc.close()
            zc = KazooClient(hosts=zk.hosts)
            zc.start(15)
            try:
                wait_for(lambda: zc.exists("/brokers/ids/1"), 40, "re-registration")
                assert zc.exists("/brokers/ids/1").ephemeralOwner != first
                doc = json.loads(zc.get("/brokers/ids/1")[0])
                assert doc["port"] == d.port and doc["endpoints"] == [f"PLAINTEXT://127.0.0.1:{d.port}"]
            finally:
                zc.stop()
                zc.close()
            # Kafka's SessionExpireListener meters saw both: ZooKeeper away, then the expiry.
            assert metric(d, "kafka_server_sessionexpirelistener_zookeeperexpires_total") \
                == expired + 1
            assert metric(d, "kafka_server_sessionexpirelistener_zookeeperdisconnects_total") >= 2
            assert metric(d, "kafka_server_sessionexpirelistener_zookeepersyncconnects_total") >= 3


# ---- h. EMFILE is the process's fault, not a disk's ----


def test_running_out_of_file_descriptors_takes_no_dir_offline(tmp_path: Path) -> None:
    """A topic too big for the process's descriptor limit fails to create (EMFILE is the
    process's fault: every dir stays online) and leaves nothing behind: its partitions made
    before the failure are closed and removed, so the daemon has its descriptors back,
    answers on every port and can create a topic that fits."""
    d = Daemon(tmp_path, {**FAST, "log.retention.check.interval.ms": 200})
    limit = 120

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(d.stderr_path, "ab") as err:
        d.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "serve", "--config", str(d.config)],
            cwd=d.root, env=env, stdout=err, stderr=err, preexec_fn=low_limit)
    with d:
        wait_for(d.healthy, 30, "serving")
        a = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
        # Three fds a partition: 60 partitions cannot all open under 120 descriptors.
        futs = a.create_topics([ck.admin.NewTopic("many", 60, 1)])
        with pytest.raises(ck.KafkaException):
            for fut in futs.values():
                fut.result(30)
        assert "process resource exhausted" in d.stderr() or "Too many open files" in d.stderr()
        time.sleep(0.5)  # several probe rounds, themselves short of descriptors
        assert set(d.log_dir_states().values()) == {"online"}
        assert metric(d, "kafka_log_logmanager_offlinelogdirectorycount") == 0
        assert "many" not in a.list_topics(timeout=10).topics
        # A removal that itself ran short of descriptors is finished by a retention round.
        wait_for(lambda: not list(tmp_path.glob("disk*/many-*")), 10, "many-* removed")
        futs = a.create_topics([ck.admin.NewTopic("many", 6, 1)])
        futs["many"].result(30)
        assert len(a.list_topics(timeout=10).topics["many"].partitions) == 6


# ---- operators: readmit, cordon ----


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_readmit_brings_a_repaired_dir_back_without_a_restart(tmp_path: Path) -> None:
    with faults.loop_ext4(32) as m0, faults.loop_ext4(32) as mnt, faults.loop_ext4(32) as m2:
        # EIO fails the probe at once; the timeout only guards against a hang, and a
        # machine busy writing back can stall all three loop devices for over a second.
        d = on_mounts(tmp_path, [m0, mnt, m2], {**FAST, "log.dir.probe.timeout.ms": 5000})
        http = f"127.0.0.1:{d.http_port}"
        with d:
            create_topic(d, "t", 3)
            sick = next(p for p, ld in placement(d, "t").items() if ld == mnt / "d")
            c = RawClient(d.port)
            assert produce_raw(c, "t", sick, [b"before"])[0] == 0
            proc = run_cli("log-dirs", "readmit", str(mnt / "d"), "--http", http)
            assert proc.returncode == 1 and "not offline" in proc.stderr
            # Flush what was written so the repaired disk has it, then kill the disk.
            faults.sync_fs(mnt)
            faults.shutdown_fs(mnt)
            wait_for(lambda: d.log_dir_states()[str(mnt / "d")] == "offline", 10, "OFFLINE")
            proc = run_cli("log-dirs", "readmit", str(mnt / "d"), "--http", http)
            assert proc.returncode == 1 and "still fails its probe" in proc.stderr
            # "Repair": unmount the dead filesystem and mount the disk again.
            subprocess.run(["umount", "-l", str(mnt)], check=True)
            subprocess.run(["mount", "-o", "loop", str(mnt.parent / "disk.img"), str(mnt)],
                           check=True)
            proc = run_cli("log-dirs", "readmit", str(mnt / "d"), "--http", http)
            assert proc.returncode == 0, proc.stderr
            assert json.loads(proc.stdout)["state"] == "online"
            assert d.log_dir_states()[str(mnt / "d")] == "online"
            assert fetch_all(d, "t", sick, 1) == [b"before"]
            assert produce_raw(c, "t", sick, [b"after"]) == (0, 1)
            assert metadata(c, "t")[sick].offline_replicas == []
            c.close()
            proc = run_cli("log-dirs", "readmit", str(tmp_path / "nope"), "--http", http)
            assert proc.returncode == 1 and "not a log dir" in proc.stderr


def test_readmit_refuses_a_mount_point_whose_disk_is_not_mounted(tmp_path: Path) -> None:
    """A log dir that is its disk's mount point, readmitted after the dead filesystem was
    unmounted but before the new one is mounted, is an empty dir on the root filesystem:
    the readmit is refused, says to mount the disk first, and writes nothing there. Once
    the disk is mounted again the same command brings the dir back."""
    with faults.loop_ext4(32) as mnt:
        d = Daemon(tmp_path, {**FAST, "log.dir.probe.timeout.ms": 5000,
                              "log.dirs": [str(tmp_path / "disk0"), str(mnt)]})
        d.log_dirs = [tmp_path / "disk0", mnt]
        http = f"127.0.0.1:{d.http_port}"
        with d:
            cordoned(d, d.log_dirs[0])
            create_topic(d, "t", 1)
            assert placement(d, "t") == {0: mnt}
            c = RawClient(d.port)
            assert produce_raw(c, "t", 0, [b"before"])[0] == 0
            faults.sync_fs(mnt)
            faults.shutdown_fs(mnt)
            wait_for(lambda: d.log_dir_states()[str(mnt)] == "offline", 10, "OFFLINE")
            subprocess.run(["umount", "-l", str(mnt)], check=True)
            assert list(mnt.iterdir()) == []  # the bare mount point, on the root's filesystem
            proc = run_cli("log-dirs", "readmit", str(mnt), "--http", http)
            assert proc.returncode == 1
            assert "no longer mounted" in proc.stderr
            assert f"mount the repaired or new disk at {mnt}" in proc.stderr
            assert list(mnt.iterdir()) == []
            assert d.log_dir_states()[str(mnt)] == "offline"
            subprocess.run(["mount", "-o", "loop", str(mnt.parent / "disk.img"), str(mnt)],
                           check=True)
            proc = run_cli("log-dirs", "readmit", str(mnt), "--http", http)
            assert proc.returncode == 0, proc.stderr
            assert fetch_all(d, "t", 0, 1) == [b"before"]
            c.close()


def test_a_readmitted_dir_serves_its_logs_under_their_topics_configs(tmp_path: Path) -> None:
    """The logs a readmit opens get their topic's config as start-up gives it: a topic's
    override over the dynamic broker config over the config file. After the repair and
    `log-dirs readmit`, the compacted topic still refuses a record without a key
    (INVALID_RECORD, 87), a topic's max.message.bytes=10000 still refuses 20,000 bytes,
    even in the partition the disk came back without (re-created empty), and the
    dynamic message.max.bytes=50000 still refuses 60,000 bytes in a topic of its own."""
    with faults.loop_ext4(32) as mnt:
        sick = mnt / "d"
        d = Daemon(tmp_path, {**FAST, "log.dir.probe.timeout.ms": 5000,
                              "auto.create.topics.enable": False,
                              "log.dirs": [str(tmp_path / "disk0"), str(sick)]})
        d.log_dirs = [tmp_path / "disk0", sick]
        with d:
            cordoned(d, d.log_dirs[0])  # every partition in the dir that will fail
            a = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
            for f in a.create_topics([
                    ck.admin.NewTopic("ra_cmp", 1, 1, config={"cleanup.policy": "compact"}),
                    ck.admin.NewTopic("ra_small", 1, 1, config={"max.message.bytes": "10000"}),
                    ck.admin.NewTopic("ra_plain", 1, 1)]).values():
                f.result(30)
            [f] = a.incremental_alter_configs([ck.admin.ConfigResource(
                "broker", "1", incremental_configs=[ck.admin.ConfigEntry(
                    "message.max.bytes", "50000",
                    incremental_operation=ck.admin.AlterConfigOpType.SET)])]).values()
            f.result(30)
            assert {t: ld for t in ("ra_cmp", "ra_small", "ra_plain")
                    for ld in placement(d, t).values()} == dict.fromkeys(
                        ("ra_cmp", "ra_small", "ra_plain"), sick)
            c = RawClient(d.port)

            def refusals() -> list[int]:
                return [produce_raw(c, "ra_cmp", 0, [b"no key"])[0],
                        produce_raw(c, "ra_small", 0, [b"s" * 20_000])[0],
                        produce_raw(c, "ra_plain", 0, [b"p" * 60_000])[0]]

            try:
                assert refusals() == [87, 10, 10]
                assert produce_raw(c, "ra_cmp", 0, [b"before"], key=b"k")[0] == 0
                faults.sync_fs(mnt)
                faults.shutdown_fs(mnt)
                wait_for(lambda: d.log_dir_states()[str(sick)] == "offline", 10, "OFFLINE")
                # The repair: the disk mounted again, without ra_small's partition.
                subprocess.run(["umount", "-l", str(mnt)], check=True)
                subprocess.run(["mount", "-o", "loop", str(mnt.parent / "disk.img"),
                                str(mnt)], check=True)
                remove_dir(sick / "ra_small-0")
                proc = run_cli("log-dirs", "readmit", str(sick),
                               "--http", f"127.0.0.1:{d.http_port}")
                assert proc.returncode == 0, proc.stderr
                assert json.loads(proc.stdout)["recreated_empty"] == ["ra_small-0"]
                assert refusals() == [87, 10, 10]
                assert produce_raw(c, "ra_cmp", 0, [b"after"], key=b"k")[0] == 0
                assert produce_raw(c, "ra_small", 0, [b"s" * 9_000])[0] == 0
                assert produce_raw(c, "ra_plain", 0, [b"p" * 20_000])[0] == 0
            finally:
                c.close()
            [f] = a.describe_configs([ck.admin.ConfigResource("topic", "ra_cmp")]).values()
            assert f.result(30)["cleanup.policy"].value == "compact"


def test_cordoned_dir_takes_no_new_partitions_across_restarts(tmp_path: Path) -> None:
    d = Daemon(tmp_path, {"num.partitions": 1})
    http = f"127.0.0.1:{d.http_port}"
    with d:
        for x in d.log_dirs[:2]:
            proc = run_cli("log-dirs", "cordon", str(x), "--config", str(d.config))
            assert proc.returncode == 0, proc.stderr
        for i in range(4):
            create_topic(d, f"t{i}", 1)
        assert {placement(d, f"t{i}")[0] for i in range(4)} == {d.log_dirs[2]}
    with d.start():
        proc = run_cli("log-dirs", "status", "--http", http)
        assert [e["cordoned"] for e in json.loads(proc.stdout)] == [True, True, False]
        # What a web page can make a browser send without asking first (a form, text/plain)
        # is refused with 415 and changes nothing; the command sends application/json.
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
            req = urllib.request.Request(
                f"http://{http}/admin/log-dirs/uncordon", method="POST",
                data=json.dumps({"dir": str(d.log_dirs[0])}).encode(),
                headers={} if ctype is None else {"Content-Type": ctype})
            if ctype is None:
                req.remove_header("Content-type")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(req, timeout=30)
            assert refused.value.code == 415, ctype
        proc = run_cli("log-dirs", "status", "--http", http)
        assert [e["cordoned"] for e in json.loads(proc.stdout)] == [True, True, False]
        create_topic(d, "after-restart", 1)
        assert placement(d, "after-restart")[0] == d.log_dirs[2]
        assert run_cli("log-dirs", "uncordon", str(d.log_dirs[0]), "--http", http).returncode == 0
        create_topic(d, "uncordoned", 1)
        assert placement(d, "uncordoned")[0] == d.log_dirs[0]
        # Every dir cordoned: a new topic is refused, and nothing is created.
        for x in d.log_dirs:
            run_cli("log-dirs", "cordon", str(x), "--http", http)
        a = ck.admin.AdminClient({"bootstrap.servers": d.bootstrap})
        with pytest.raises(ck.KafkaException, match="uncordoned"):
            for fut in a.create_topics([ck.admin.NewTopic("nowhere", 1, 1)]).values():
                fut.result(30)
        assert all(not (x / "nowhere-0").exists() for x in d.log_dirs)
