"""Health checks report sick disks as results: probes, inotify, slow-disk detection."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from checks import (
    LogDirWatcher,
    SlowDiskDetector,
    device_for_path,
    probe_availability,
    probe_space,
)

from . import faults

REPO = Path(__file__).resolve().parents[1]


def test_availability_probe_on_a_healthy_dir(tmp_path):
    res = probe_availability(tmp_path)
    assert res.ok and res.latency_ns > 0 and res.errno is None


def test_availability_probe_reports_a_missing_dir(tmp_path):
    res = probe_availability(tmp_path / "gone")
    assert not res.ok and res.errno == errno.ENOENT and "gone" in res.error


def test_space_probe_floor_and_resume(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    assert probe_space(tmp_path, floor_bytes=0, resume_bytes=0).above_resume
    low = probe_space(tmp_path, floor_bytes=free * 4, resume_bytes=free * 8)
    assert low.ok and low.below_floor and not low.above_resume


@pytest.mark.fault
def test_probes_on_a_shut_down_filesystem():
    with faults.loop_ext4(16) as mnt:
        assert probe_availability(mnt).ok
        faults.shutdown_fs(mnt)
        res = probe_availability(mnt)
        assert not res.ok and res.errno == errno.EIO


@pytest.mark.fault
def test_space_probe_sees_a_full_tmpfs():
    with faults.tmpfs("1m") as mnt:
        with open(mnt / "fill", "wb") as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        res = probe_space(mnt, floor_bytes=64 * 1024, resume_bytes=512 * 1024)
        assert res.below_floor and not res.above_resume
        (mnt / "fill").unlink()
        assert probe_space(mnt, floor_bytes=64 * 1024, resume_bytes=512 * 1024).above_resume


def _watch(dirs, *, reasons=None):
    """A started watcher and the events it reported. Mount-table events come from any
    mount on the host (other tests' too), so they are kept only when asked for."""
    events, seen = [], threading.Event()

    def on_event(ev):
        if ev.reason == "mounts-changed" and "mounts-changed" not in (reasons or ()):
            return
        if reasons is None or ev.reason in reasons:
            events.append(ev)
            seen.set()

    w = LogDirWatcher([str(d) for d in dirs], on_event)
    w.start()
    return w, events, seen


@pytest.mark.parametrize("action, reason", [
    (lambda d: shutil.rmtree(d), {"deleted", "watch-lost"}),
    (lambda d: os.rename(d, str(d) + ".moved"), {"moved"}),
    (lambda d: os.chmod(d, 0), {"attributes"}),
])
def test_watcher_reports_deleted_moved_and_chmod(tmp_path, action, reason):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir()
    d2.mkdir()
    w, events, seen = _watch([d1, d2])
    try:
        action(d1)
        assert seen.wait(5), "no inotify event within 5 s"
        assert events[0].log_dir == str(d1) and events[0].reason in reason
        assert all(ev.log_dir == str(d1) for ev in events)
    finally:
        w.stop()
        if d1.exists():
            os.chmod(d1, 0o755)


@pytest.mark.fault
def test_watcher_reports_a_lazy_unmount():
    with faults.tmpfs("1m") as mnt:
        w, events, seen = _watch([mnt], reasons={"unmounted", "watch-lost"})
        try:
            subprocess.run(["umount", "-l", str(mnt)], check=True)
            assert seen.wait(5)
            assert events[0].log_dir == str(mnt)
        finally:
            w.stop()


@pytest.mark.fault
def test_watcher_sees_a_lazy_unmount_that_inotify_misses():
    # A file held open keeps the filesystem alive after `umount -l`: no IN_UNMOUNT
    # comes, but the mount table changes, and that is reported for every dir.
    with faults.tmpfs("1m") as mnt:
        held = open(mnt / "segment.log", "wb")  # noqa: SIM115 - held across the unmount
        w, events, seen = _watch([mnt], reasons={"mounts-changed"})
        try:
            subprocess.run(["umount", "-l", str(mnt)], check=True)
            assert seen.wait(5), "no mount-table event within 5 s"
            assert events[0].log_dir == str(mnt)
        finally:
            w.stop()
            held.close()


def test_slow_disk_detector_needs_a_persistent_outlier():
    det = SlowDiskDetector(window=5, factor=5, min_ms=20, persistence=3)
    for _ in range(5):
        for d in ("a", "b", "c"):
            det.record(d, 1.0)
    assert not any(r.degraded for r in det.evaluate().values())
    for _ in range(5):
        det.record("c", 200.0)
    assert det.evaluate()["c"].outlier and not det.evaluate()["c"].degraded
    third = det.evaluate()["c"]
    assert third.degraded and not det.evaluate()["a"].degraded
    for _ in range(5):
        det.record("c", 1.0)
    assert not det.evaluate()["c"].degraded


def test_device_for_path_names_a_block_device(tmp_path):
    dev = device_for_path("/")
    assert dev is None or os.path.exists(f"/sys/class/block/{dev}")
    assert device_for_path(tmp_path / "missing") is None


def test_a_moved_dir_is_one_event_and_no_pyinotify_error_block(tmp_path):
    """pyinotify printed its 'cannot be trusted anymore' ERROR block twice for a moved
    log dir (its own stderr handler, then the daemon's logging); the move is ours to
    report, once, as an event."""
    d1 = tmp_path / "d1"
    d1.mkdir()
    script = (
        "import logging, os, sys, threading\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from checks.watch import LogDirWatcher\n"
        "seen = threading.Event()\n"
        "def on_event(ev):\n"
        "    if ev.reason != 'mounts-changed':\n"
        "        print('EVENT', ev.reason, flush=True); seen.set()\n"
        f"w = LogDirWatcher([{str(d1)!r}], on_event)\n"
        "w.start()\n"
        f"os.rename({str(d1)!r}, {str(d1) + '.moved'!r})\n"
        "assert seen.wait(5)\n"
        "import time; time.sleep(0.5)\n"
        "w.stop()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr
    assert "EVENT moved" in out.stdout
    assert "cannot be trusted" not in out.stderr and "ERROR" not in out.stderr, out.stderr
