"""The log-dir state machine: one transition per real change, OFFLINE wins, saturation
clears by itself; fed with evidence from real faults where it matters."""

from __future__ import annotations

import errno
import threading

import pytest

from checks import probe_availability, probe_space
from daemon.storage.dirstate import DirState, LogDirStates
from logstore import FailureChannel, LogConfig, LogDir, LogDirSaturatedError

from . import faults
from .logutil import batch


def failure(d, verdict):
    from logstore import LogDirFailure, Verdict

    return LogDirFailure(d, Verdict[verdict], "append", d + "/x", errno.EIO, "boom", 0)


def test_a_burst_of_errors_is_one_transition():
    states = LogDirStates(["/a", "/b"])
    seen = []
    states.subscribe(seen.append)
    threads = [threading.Thread(target=states.on_failure, args=(failure("/a", "OFFLINE"),))
               for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [(t.log_dir, t.new) for t in seen] == [("/a", DirState.OFFLINE)]
    assert states.state("/b") is DirState.ONLINE and not states.all_offline()


def test_offline_wins_and_only_readmit_leaves_it():
    states = LogDirStates(["/a"])
    assert states.on_failure(failure("/a", "SATURATED")).new is DirState.SATURATED
    assert states.on_failure(failure("/a", "SATURATED")) is None
    assert states.on_failure(failure("/a", "OFFLINE")).new is DirState.OFFLINE
    assert states.on_failure(failure("/a", "SATURATED")) is None  # no way back down
    assert states.all_offline()
    assert states.readmit("/a").new is DirState.ONLINE


def test_unknown_dir_is_refused():
    with pytest.raises(KeyError):
        LogDirStates(["/a"]).on_failure(failure("/zz", "OFFLINE"))


@pytest.mark.fault
def test_saturation_from_a_real_full_tmpfs_clears_by_itself():
    with faults.tmpfs("3m") as mnt:
        d = str(mnt / "d")
        channel = FailureChannel()
        states = LogDirStates([d])
        channel.subscribe(states.on_failure)
        ld = LogDir.open(d, LogConfig(segment_bytes=64 << 20), failure_channel=channel)
        log = ld.create_log("t", 0)
        with pytest.raises(LogDirSaturatedError):
            for _ in range(100):
                log.append(batch(1, size=100_000))
        assert states.state(d) is DirState.SATURATED
        floor, resume = 256 << 10, 1 << 20
        assert states.on_space(probe_space(d, floor_bytes=floor, resume_bytes=resume)) is None
        log.update_config(log.config.replace(retention_bytes=0, retention_ms=-1))
        assert log.apply_retention() >= 1  # retention still runs on a saturated dir
        back = states.on_space(probe_space(d, floor_bytes=floor, resume_bytes=resume))
        assert back is not None and back.new is DirState.ONLINE
        ld.close()


@pytest.mark.fault
def test_failed_probe_on_a_shut_down_disk_takes_it_offline():
    with faults.loop_ext4(16) as mnt:
        states = LogDirStates([str(mnt)])
        assert states.on_availability(probe_availability(mnt)) is None
        faults.shutdown_fs(mnt)
        t = states.on_availability(probe_availability(mnt))
        assert t.new is DirState.OFFLINE and "Input/output error" in t.reason
