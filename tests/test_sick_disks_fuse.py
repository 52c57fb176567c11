"""Sick disks through the running daemon, part two: a slow or hung FUSE disk, and chmod 000.

d. One of three log dirs is on a FUSE passthrough (tests.fusefs) whose operations can be
   slowed down or made to hang; the other two are small tmpfs mounts. A slow disk is
   DEGRADED (and OFFLINE with `log.dir.slow.action = "offline"`); a hung one is OFFLINE
   after the probe timeout; produce to partitions on the other dirs keeps succeeding
   throughout, never stalling beyond the probe timeout.
f. The daemon runs as a non-root user (nobody), owning its log dirs; `chmod 000` on one
   takes it OFFLINE at once (inotify IN_ATTRIB), and the others keep serving.

They need root (mounts, FUSE, setpriv) and run in CI, never skipped there. Mounts are
undone and hangs released even when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests import faults
from tests.daemon_helpers import REPO, Daemon, RawClient, write_config
from tests.fusefs import FaultyFuse, faulty_fuse
from tests.sick_helpers import (
    KAFKA_STORAGE_ERROR,
    create_topic,
    metric,
    placement,
    produce_raw,
    steer,
    wait_for,
)

PROBE_CANARY = ".logkeeper-probe"
INTERVAL_MS, TIMEOUT_MS = 100, 1000
FAST = {"log.dir.probe.interval.ms": INTERVAL_MS, "log.dir.probe.timeout.ms": TIMEOUT_MS}


class Producer:
    """Produces to `partitions` in a loop on its own connection until stopped, timing
    every request: what a client on the healthy dirs sees while another dir fails."""

    def __init__(self, port: int, topic: str, partitions: list[int]):
        self.client = RawClient(port)
        self.topic, self.partitions = topic, partitions
        self.latencies: list[float] = []
        self.errors: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self.failure: BaseException | None = None

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        i = 0
        try:
            while not self._stop.is_set():
                p = self.partitions[i % len(self.partitions)]
                started = time.monotonic()
                code, _ = produce_raw(self.client, self.topic, p, [b"r%d" % i])
                self.latencies.append(time.monotonic() - started)
                if code:
                    self.errors.append((p, code))
                i += 1
                time.sleep(0.005)
        except BaseException as err:  # noqa: BLE001 - reported by stop()
            self.failure = err

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.client.close()

    def check(self, stall_s: float) -> float:
        """No error, no produce slower than `stall_s`; returns the slowest (s)."""
        assert self.failure is None, f"producer failed: {self.failure!r}"
        assert not self._thread.is_alive(), "producer stuck"
        assert len(self.latencies) > 20, "the producer hardly produced"
        assert not self.errors, f"produce to healthy dirs failed: {self.errors[:5]}"
        worst = max(self.latencies)
        assert worst < stall_s, f"a produce to a healthy dir took {worst:.3f} s"
        return worst


def log_dir_entry(d: Daemon, path: Path) -> dict[str, Any]:
    return next(e for e in d.http("/log-dirs")[1] if e["path"] == str(path))


@contextlib.contextmanager
def fuse_setup(tmp_path: Path, extra: dict[str, Any]) -> Iterator[tuple[Daemon, FaultyFuse, Path]]:
    """A daemon on two tmpfs dirs and one FUSE dir (started, with topics "fast" on the
    tmpfs dirs and "slow" on the FUSE one). Teardown: release any hang, stop the daemon
    (SIGKILL if it will not stop), unmount everything."""
    with faults.tmpfs("64m") as t0, faults.tmpfs("64m") as t1, faulty_fuse() as fs:
        sick = fs.path / "d"
        d = Daemon(tmp_path, {**FAST, **extra})
        d.log_dirs = [t0 / "d", t1 / "d", sick]
        d.values["log.dirs"] = [str(x) for x in d.log_dirs]
        write_config(d.config, d.values)
        try:
            d.start()
            steer(d, "fast", 4, d.log_dirs[:2])
            steer(d, "slow", 1, [sick])
            yield d, fs, sick
        finally:
            # A worker blocked on the mount must get its answer before the daemon is
            # stopped: the kernel cannot reap a process while a FUSE request is pending.
            try:
                fs.release()
            except Exception:  # noqa: BLE001 - the server is gone or stuck: abort it
                fs.kill()
            try:
                if d.proc is not None:
                    d.stop(timeout=20)
            finally:
                d.kill()


# ---- d. a slow disk: DEGRADED, and OFFLINE when the operator says so ----


def test_slow_fuse_dir_is_degraded_and_stays_online(tmp_path: Path) -> None:
    # The probe timeout is long here: a slow probe must come back to count as slow.
    with fuse_setup(tmp_path, {"log.dir.probe.timeout.ms": 5000}) as (d, fs, sick):
        # A full window (20 probes) of normal latencies first: the slow ones must outvote it.
        time.sleep(20 * INTERVAL_MS / 1000 + 0.5)
        assert all(e["probe_latency_ms_median"] is not None for e in d.http("/log-dirs")[1])
        assert not any(e["degraded"] for e in d.http("/log-dirs")[1])
        assert metric(d, "logkeeper_log_dir_degraded", log_dir=str(sick)) == 0
        c = RawClient(d.port)
        with Producer(d.port, "fast", [0, 1, 2, 3]) as prod:
            # ~300 ms a probe (write, fsync and read-back each +100 ms) vs ~1 ms on tmpfs.
            fs.delay(0.1, ("write", "fsync", "read"), PROBE_CANARY)
            started = time.monotonic()
            wait_for(lambda: log_dir_entry(d, sick)["degraded"], 20, "DEGRADED")
            took = time.monotonic() - started
            entry = log_dir_entry(d, sick)
            peers = max(log_dir_entry(d, x)["probe_latency_ms_median"] for x in d.log_dirs[:2])
            assert entry["state"] == "online"
            assert entry["probe_latency_ms_median"] >= max(50, 5 * peers), (entry, peers)
            assert metric(d, "logkeeper_log_dir_degraded", log_dir=str(sick)) == 1
            for x in d.log_dirs[:2]:
                assert metric(d, "logkeeper_log_dir_degraded", log_dir=str(x)) == 0
                assert not log_dir_entry(d, x)["degraded"]
            assert set(d.log_dir_states().values()) == {"online"}
            assert metric(d, "logkeeper_log_dir_state", log_dir=str(sick), state="online") == 1
            # DEGRADED is a warning, not a verdict: the slow dir still takes appends.
            assert produce_raw(c, "slow", 0, [b"still here"])[0] == 0
            time.sleep(0.5)
        worst = prod.check(stall_s=TIMEOUT_MS / 1000)
        # Fast again: no longer DEGRADED once the recent median is normal.
        fs.delay(0)
        wait_for(lambda: not log_dir_entry(d, sick)["degraded"], 20, "no longer DEGRADED")
        assert metric(d, "logkeeper_log_dir_degraded", log_dir=str(sick)) == 0
        assert produce_raw(c, "slow", 0, [b"fast again"])[0] == 0
        c.close()
        assert f"log dir {sick} is DEGRADED (slow disk)" in d.stderr()
        print(f"slow FUSE dir DEGRADED {took:.2f} s after the latency began; "
              f"{len(prod.latencies)} produces to the healthy dirs, slowest {worst * 1000:.0f} ms")


def test_slow_fuse_dir_goes_offline_with_slow_action_offline(tmp_path: Path) -> None:
    extra = {"log.dir.probe.timeout.ms": 5000, "log.dir.slow.action": "offline"}
    with fuse_setup(tmp_path, extra) as (d, fs, sick):
        wait_for(lambda: log_dir_entry(d, sick)["probe_latency_ms_median"] is not None, 10,
                 "probe latencies")
        c = RawClient(d.port)
        assert produce_raw(c, "slow", 0, [b"before"])[0] == 0
        with Producer(d.port, "fast", [0, 1, 2, 3]) as prod:
            fs.delay(0.1, ("write", "fsync", "read"), PROBE_CANARY)
            started = time.monotonic()
            wait_for(lambda: d.log_dir_states()[str(sick)] == "offline", 20, "OFFLINE (slow)")
            took = time.monotonic() - started
            assert "slow disk" in log_dir_entry(d, sick)["error"]
            assert [d.log_dir_states()[str(x)] for x in d.log_dirs[:2]] == ["online"] * 2
            assert produce_raw(c, "slow", 0, [b"refused"])[0] == KAFKA_STORAGE_ERROR
            assert metric(d, "kafka_log_logmanager_offlinelogdirectorycount") == 1
            assert metric(d, "logkeeper_log_dir_state", log_dir=str(sick), state="offline") == 1
            time.sleep(0.5)
        worst = prod.check(stall_s=TIMEOUT_MS / 1000)
        c.close()
        print(f"slow FUSE dir OFFLINE {took:.2f} s after the latency began; "
              f"{len(prod.latencies)} produces to the healthy dirs, slowest {worst * 1000:.0f} ms")


# ---- d. a hung disk: OFFLINE after the probe timeout, the others unaffected ----


def test_hung_fuse_dir_goes_offline_after_the_probe_timeout(tmp_path: Path) -> None:
    with fuse_setup(tmp_path, {}) as (d, fs, sick):
        c = RawClient(d.port)
        assert produce_raw(c, "slow", 0, [b"before"])[0] == 0
        with Producer(d.port, "fast", [0, 1, 2, 3]) as prod:
            time.sleep(0.3)
            fs.hang()
            started = time.monotonic()
            wait_for(lambda: d.log_dir_states()[str(sick)] == "offline", 10, "OFFLINE (hung)")
            took = time.monotonic() - started
            # One probe timeout, plus up to one interval before the next probe starts.
            timeout = TIMEOUT_MS / 1000
            assert timeout - INTERVAL_MS / 1000 - 0.05 <= took <= timeout + 1.0, took
            entry = log_dir_entry(d, sick)
            assert "did not answer within 1 s" in entry["error"]
            assert [d.log_dir_states()[str(x)] for x in d.log_dirs[:2]] == ["online"] * 2
            # Its partitions answer at once, without touching the hung disk.
            t = time.monotonic()
            assert produce_raw(c, "slow", 0, [b"refused"])[0] == KAFKA_STORAGE_ERROR
            assert time.monotonic() - t < 0.5
            assert metric(d, "kafka_log_logmanager_offlinelogdirectorycount") == 1
            time.sleep(1.0)  # the healthy dirs keep taking appends after the verdict too
        worst = prod.check(stall_s=TIMEOUT_MS / 1000)
        c.close()
        # Still hung: the daemon shuts down anyway, closing the healthy dirs cleanly, and
        # leaves without joining the worker stuck on the disk ...
        assert d.proc is not None
        d.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "a log dir's worker is stuck on its disk; exiting without it"
                 in d.stderr(), 15, "shutdown past the stuck worker")
        for x in d.log_dirs[:2]:
            assert (x / ".kafka_cleanshutdown").exists()
        # ... but the kernel reaps the process only once the pending FUSE request is
        # answered (that thread waits uninterruptibly): the hung disk has to let go.
        fs.release()
        assert d.proc.wait(10) == 0
        print(f"hung FUSE dir OFFLINE {took:.2f} s after the hang began; "
              f"{len(prod.latencies)} produces to the healthy dirs, slowest {worst * 1000:.0f} ms")


# ---- f. a non-root daemon, chmod 000 on one of its dirs ----


def _as_user(uid: int, gid: int, need: list[str], work: Path) -> list[str]:
    """A command prefix running the rest as uid:gid with no supplementary groups.

    The Python install may sit under a directory that user cannot traverse (pyenv under
    /root, mode 0700). Nothing on the host is loosened for that: the command runs in a
    private mount namespace (gone when it exits) where each such directory is covered by
    a tmpfs holding bind mounts of just the entries on the paths in `need`."""
    blocked: list[str] = []
    for path in need:
        parts = Path(path).parts
        for i in range(1, len(parts)):
            a = os.path.join(*parts[:i])
            st = os.stat(a)
            if not st.st_mode & 0o001 and a not in blocked and st.st_uid != uid:
                blocked.append(a)
    setpriv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    if not blocked:
        return setpriv
    script = ["set -e"]
    for n, b in enumerate(sorted(blocked, key=lambda x: x.count("/"))):
        hidden = work / f"orig{n}"
        hidden.mkdir()
        children = sorted({Path(p).relative_to(b).parts[0] for p in need
                           if p.startswith(b + "/")})
        q, h = shlex.quote(b), shlex.quote(str(hidden))
        script += [f"mount --bind {q} {h}", f"mount -t tmpfs -o mode=0755,size=1m lk-ns {q}"]
        for child in children:
            c = shlex.quote(child)
            make = "mkdir" if os.path.isdir(os.path.join(b, child)) else "touch"
            script += [f"{make} {q}/{c}", f"mount --bind {h}/{c} {q}/{c}"]
    script.append(f"exec {shlex.join(setpriv)} \"$@\"")
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            "\n".join(script), "sh"]


def test_chmod_000_as_non_root_takes_that_dir_offline(tmp_path: Path) -> None:
    faults.require_root()
    user = pwd.getpwnam("nobody")
    # pytest's tmp_path is under a 0700 dir: the daemon's root must be reachable by it.
    root = Path(tempfile.mkdtemp(prefix="lk-nonroot-"))
    try:
        root.chmod(0o755)
        need = [os.path.realpath(sys.executable), sys.executable, sys.prefix, sys.base_prefix,
                str(REPO), *(p for p in sys.path if p and os.path.exists(p))]
        ns = root / "ns"
        ns.mkdir()
        d = Daemon(root / "run", {"log.dir.probe.interval.ms": 600000,
                                  "log.dir.probe.timeout.ms": 5000},
                   env={"HOME": str(root / "run")},
                   prefix=_as_user(user.pw_uid, user.pw_gid, need, ns))
        for x in d.log_dirs:
            x.mkdir()
            os.chown(x, user.pw_uid, user.pw_gid)
        with d.start():
            assert d.proc is not None
            with open(f"/proc/{d.proc.pid}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
            assert uids == [str(user.pw_uid)] * 4  # real, effective, saved, fs
            create_topic(d, "t", 3)
            where = placement(d, "t")
            assert sorted(set(where.values())) == sorted(d.log_dirs)
            for p, x in where.items():
                assert (x / f"t-{p}").stat().st_uid == user.pw_uid
            c = RawClient(d.port)
            for p in range(3):
                assert produce_raw(c, "t", p, [b"before"]) == (0, 0)
            sick = d.log_dirs[1]
            started = time.monotonic()
            sick.chmod(0o000)
            # Probes are 10 minutes apart here: only inotify (IN_ATTRIB) can be this quick.
            wait_for(lambda: d.log_dir_states()[str(sick)] == "offline", 1.0, "OFFLINE")
            took = time.monotonic() - started
            assert took < 1.0
            assert "Permission denied" in log_dir_entry(d, sick)["error"]
            assert [d.log_dir_states()[str(x)] for x in (d.log_dirs[0], d.log_dirs[2])] == \
                ["online"] * 2
            bad = next(p for p, ld in where.items() if ld == sick)
            assert produce_raw(c, "t", bad, [b"refused"])[0] == KAFKA_STORAGE_ERROR
            for p in range(3):
                if p != bad:
                    assert produce_raw(c, "t", p, [b"after"]) == (0, 1)
            assert metric(d, "kafka_log_logmanager_offlinelogdirectorycount") == 1
            c.close()
            print(f"chmod 000 -> OFFLINE in {took * 1000:.0f} ms (non-root daemon)")
        assert "attributes (inotify)" in d.stderr()
    finally:
        for x in root.glob("run/disk*"):
            with contextlib.suppress(OSError):
                x.chmod(0o755)
        shutil.rmtree(root, ignore_errors=True)


# ---- a paused daemon is not a hung disk ----


def test_a_paused_daemon_does_not_take_its_dirs_offline(tmp_path: Path) -> None:
    """The whole daemon stopped (SIGSTOP) past the probe timeout while probes were in
    flight: its own pause is not a hung disk. Every dir took itself OFFLINE here before
    (under load it ended a session-expiry test with "every log dir is offline")."""
    with fuse_setup(tmp_path, {}) as (d, fs, sick):
        # ~300 ms a probe on the FUSE dir: one is nearly always in flight.
        fs.delay(0.1, ("write", "fsync", "read"), PROBE_CANARY)
        assert d.proc is not None
        for _ in range(4):
            os.kill(d.proc.pid, signal.SIGSTOP)
            time.sleep(2.5 * TIMEOUT_MS / 1000)
            os.kill(d.proc.pid, signal.SIGCONT)
            time.sleep(0.7)
        time.sleep(2 * TIMEOUT_MS / 1000)
        assert set(d.log_dir_states().values()) == {"online"}, d.stderr()[-3000:]
        assert "did not run for" in d.stderr()  # the pause was seen, and forgiven
        # A real hang is still a hang.
        fs.hang()
        wait_for(lambda: d.log_dir_states()[str(sick)] == "offline", 10, "OFFLINE")
