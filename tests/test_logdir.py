"""Log directories: lock, identity, checkpoints, deletion, and real disk errors."""

from __future__ import annotations

import errno
import os
import resource
import subprocess

import pytest

from logstore import (
    FailureChannel,
    InvalidTopicError,
    Log,
    LogConfig,
    LogDir,
    LogDirOfflineError,
    LogDirSaturatedError,
    TopicPartition,
    Verdict,
    checkpoint,
    names,
)
from logstore.errors import (
    CheckpointError,
    LogDirLockedError,
    OperationRefusedError,
    ResourceError,
)
from logstore.failure import IoGuard, classify
from logstore.records import Record, build_batch, iter_batches

from . import faults
from .logutil import batch, snapshot


def test_lock_meta_and_clean_shutdown(tmp_path):
    root = tmp_path / "d1"
    ld = LogDir.open(root, broker_id=7, cluster_id="abc")
    assert checkpoint.read_meta_properties(root / "meta.properties") == {
        "version": "0", "broker.id": "7", "cluster.id": "abc"}
    with pytest.raises(LogDirLockedError):
        LogDir.open(root, broker_id=7)
    log = ld.create_log("orders", 3)
    log.append(batch(4))
    log.high_watermark = 4  # what the daemon does once the ISR has the records
    ld.close()
    assert (root / ".kafka_cleanshutdown").exists()
    assert (root / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 3 4\n"
    assert (root / "replication-offset-checkpoint").read_text() == "0\n1\norders 3 4\n"
    assert (root / "log-start-offset-checkpoint").read_text() == "0\n1\norders 3 0\n"
    again = LogDir.open(root, broker_id=7)
    assert again.clean_shutdown and not (root / ".kafka_cleanshutdown").exists()
    assert again.get_log("orders", 3).log_end_offset == 4
    again.close()
    with pytest.raises(CheckpointError, match="broker.id=7"):
        LogDir.open(root, broker_id=8)
    LogDir.open(root, broker_id=7).close()  # the refused open left the lock free


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../x", "x" * 250, "sp ace", "ü"])
def test_bad_topic_names_create_nothing(tmp_path, bad):
    ld = LogDir.open(tmp_path / "d")
    before = snapshot(tmp_path) | {"dirs": str(sorted(os.listdir(tmp_path / "d")))}
    with pytest.raises(InvalidTopicError):
        ld.create_log(bad, 0)
    assert snapshot(tmp_path) | {"dirs": str(sorted(os.listdir(tmp_path / "d")))} == before
    ld.close()


def test_delete_partition_renames_then_removes(tmp_path):
    ld = LogDir.open(tmp_path / "d")
    ld.create_log("t", 0).append(batch(2))
    ld.delete_log("t", 0)
    assert ld.get_log("t", 0) is None
    assert not [p for p in os.listdir(tmp_path / "d") if p.startswith("t-0")]
    # A rename left behind by a crash is finished at the next open.
    (tmp_path / "d" / "t-1.0123abcd-delete").mkdir()
    ld.close()
    ld2 = LogDir.open(tmp_path / "d")
    assert not (tmp_path / "d" / "t-1.0123abcd-delete").exists()
    ld2.close()


@pytest.mark.parametrize("length", [213, 214, names.MAX_TOPIC_LENGTH])
def test_a_topic_of_any_legal_length_is_deleted(tmp_path, length):
    """`<topic>-<p>.<32 hex>-delete` is past 255 characters from a 214-character topic on
    (Kafka allows 249): the rename failed with ENAMETOOLONG, which took the whole log
    dir offline. As Kafka, the topic is cut short in the delete name, whose partition
    and suffix stay where Kafka's loader parses them."""
    topic = "M" * length
    ld = LogDir.open(tmp_path / "d")
    for partition in (0, 12345):
        ld.create_log(topic, partition).append(batch(2))
        ld.delete_log(topic, partition)
        name = names.delete_dir_name(topic, partition, "0" * 32)
        assert len(name) <= names.MAX_DIR_NAME
        assert name.endswith(f"-{partition}.{'0' * 32}-delete") and name.startswith("MMM")
    assert os.listdir(tmp_path / "d") == [p for p in os.listdir(tmp_path / "d")
                                          if not p.startswith("MMM")]
    ld.create_log("after", 0).append(batch(1))  # the dir still takes writes
    ld.close()


def test_unclean_log_dir_recovers_and_reports(tmp_path):
    root = tmp_path / "d"
    ld = LogDir.open(root)
    log = ld.create_log("t", 0)
    for _ in range(5):
        log.append(batch(1, size=200))
    seg = log.active_segment.log_path
    ld.release()  # like a crash: no checkpoints, no marker
    with open(seg, "ab") as f:
        f.write(b"\x00" * 30)
    ld2 = LogDir.open(root)
    (result,) = ld2.recovery
    assert result.recovered and result.bytes_truncated == 30
    assert ld2.get_log("t", 0).log_end_offset == 5
    ld2.close()


def test_classify_by_errno():
    assert classify(OSError(errno.ENOSPC, "x")) is Verdict.SATURATED
    assert classify(OSError(errno.EDQUOT, "x")) is Verdict.SATURATED
    for e in (errno.EIO, errno.EROFS, errno.ENXIO, errno.ENODEV, errno.ESTALE, errno.EACCES,
              errno.EPERM):
        assert classify(OSError(e, "x")) is Verdict.OFFLINE
    for e in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINVAL, errno.ENAMETOOLONG):
        assert classify(OSError(e, "x")) is Verdict.NONE


def test_a_name_the_kernel_refuses_is_not_the_disks_fault(tmp_path):
    """ENAMETOOLONG from a real filesystem: the call fails with a clear error, nothing is
    reported against the dir, and it keeps serving."""
    channel = FailureChannel()
    ld = LogDir.open(tmp_path / "d", failure_channel=channel)
    with pytest.raises(OperationRefusedError, match="not a disk fault") as refused:
        with ld.guard.io("create", tmp_path / "d"):
            os.mkdir(tmp_path / "d" / ("x" * 300))
    assert refused.value.error_code == -1  # UNKNOWN_SERVER_ERROR, as Kafka's for a bug
    assert channel.get(timeout=0.1) is None
    ld.create_log("t", 0).append(batch(1))
    ld.close()


@pytest.mark.fault
def test_enospc_on_a_real_tmpfs_saturates_and_leaves_no_partial_batch():
    with faults.tmpfs("2m") as mnt:
        channel = FailureChannel()
        ld = LogDir.open(mnt / "d", LogConfig(segment_bytes=64 << 20), failure_channel=channel)
        log = ld.create_log("t", 0)
        appended = 0
        with pytest.raises(LogDirSaturatedError) as info:
            for _ in range(1000):
                log.append(batch(1, size=100_000))
                appended += 1
        assert info.value.errno == errno.ENOSPC and info.value.error_code == 56
        event = channel.get(timeout=1)
        assert event.verdict is Verdict.SATURATED and event.log_dir == str(mnt / "d")
        assert event.op == "append"
        # The failed batch left nothing behind: the log is exactly the acknowledged batches.
        assert log.log_end_offset == appended
        assert log.active_segment.size == os.path.getsize(log.active_segment.log_path)
        data = log.read(0, 1 << 30)
        assert len(data) == log.size_bytes
        # Reads and retention still work on a saturated dir, and free space.
        log.update_config(log.config.replace(retention_bytes=0, retention_ms=-1))
        assert log.apply_retention() >= 1
        assert ld.space().avail_bytes > 1_000_000
        ld.close()


@pytest.mark.fault
def test_eio_after_fs_shutdown_takes_the_dir_offline():
    with faults.loop_ext4(32) as mnt:
        channel = FailureChannel()
        ld = LogDir.open(mnt / "d", failure_channel=channel)
        log = ld.create_log("t", 0)
        log.append(batch(3))
        log.flush()
        faults.shutdown_fs(mnt)
        with pytest.raises(LogDirOfflineError) as info:
            log.append(batch(1))
            log.flush()
        assert info.value.errno == errno.EIO
        event = channel.get(timeout=1)
        assert event.verdict is Verdict.OFFLINE and event.errno == errno.EIO
        ld.release()


def test_vanished_dir_root_is_offline(tmp_path):
    channel = FailureChannel()
    guard = IoGuard(tmp_path / "gone", channel)
    with pytest.raises(LogDirOfflineError):
        with guard.io("append", tmp_path / "gone" / "x"):
            open(tmp_path / "gone" / "x", "rb")
    assert channel.get(timeout=1).verdict is Verdict.OFFLINE


def test_emfile_is_not_the_disks_fault(tmp_path):
    channel = FailureChannel()
    ld = LogDir.open(tmp_path / "d", failure_channel=channel)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        with pytest.raises(OSError) as exhausted:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        assert exhausted.value.errno == errno.EMFILE
        os.close(held.pop())  # one fd free: a partition needs more than one
        with pytest.raises(ResourceError):
            ld.create_log("t", 0)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert channel.get(timeout=0.1) is None  # no verdict on the disk
    assert ld.create_log("t", 1).log_end_offset == 0  # the dir still works
    ld.close()


def test_removal_cut_short_by_emfile_is_finished_later(tmp_path):
    """A dir renamed to `-delete` whose removal runs out of descriptors stays on the
    pending list; the next purge (each retention round) removes it, and the disk gets
    no verdict."""
    channel = FailureChannel()
    ld = LogDir.open(tmp_path / "d", failure_channel=channel)
    leftover = ld.path / names.future_dir_name("t", 0, "a" * 32)
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x" * 100)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        with pytest.raises(OSError):
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        with pytest.raises(ResourceError):
            ld.remove_dir(leftover)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not leftover.exists()
    doomed = [p for p in ld.path.iterdir() if p.name.endswith(names.DELETE_DIR_SUFFIX)]
    assert len(doomed) == 1 and ld.pending_deletes == set(doomed)
    assert ld.purge_deleted() == 1
    assert not doomed[0].exists() and ld.pending_deletes == set()
    assert ld.purge_deleted() == 0
    assert channel.get(timeout=0.1) is None
    ld.close()


def test_standalone_log_uses_a_guard_too(tmp_path):
    log = Log.open(tmp_path / names.partition_dir_name("t", 0))
    assert isinstance(log.guard, IoGuard)
    log.close()


@pytest.mark.fault
def test_flush_messages_keeps_what_a_dying_disk_had_not_written_back():
    """flush.messages=1 fsyncs every append (Kafka's UnifiedLog.append flush), so a
    disk that dies at once (FS_IOC_SHUTDOWN without flushing its journal: what the
    kernel had not written back is gone) still holds every record appended. A log with
    Kafka's default (no flush) is the control: whatever it kept is a clean prefix."""
    with faults.loop_ext4(32) as mnt:
        ld = LogDir.open(mnt / "d", LogConfig())
        durable = ld.create_log("durable", 0, LogConfig(flush_messages=1))
        lazy = ld.create_log("lazy", 0)
        faults.sync_fs(mnt)  # the partition dirs and empty segments are on the disk
        for i in range(40):
            durable.append(build_batch([Record(b"k", b"d%d" % i)]))
            lazy.append(build_batch([Record(b"k", b"l%d" % i)]))
        assert (durable.recovery_point, lazy.recovery_point) == (40, 0)
        faults.shutdown_fs(mnt)
        ld.release()
        subprocess.run(["umount", "-l", str(mnt)], check=True)
        subprocess.run(["mount", "-o", "loop", str(mnt.parent / "disk.img"), str(mnt)],
                       check=True)
        ld = LogDir.open(mnt / "d", LogConfig())
        try:
            got = ld.logs[TopicPartition("durable", 0)]
            assert got.log_end_offset == 40
            values = [r.value for b in iter_batches(got.read(0, 1 << 20)) for r in b.records()]
            assert values == [b"d%d" % i for i in range(40)]
            kept = ld.logs[TopicPartition("lazy", 0)]
            values = [r.value for b in iter_batches(kept.read(0, 1 << 20)) for r in b.records()]
            assert values == [b"l%d" % i for i in range(kept.log_end_offset)]
            print(f"without flush.messages, {kept.log_end_offset} of 40 records survived")
        finally:
            ld.close()
