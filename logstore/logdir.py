"""One log directory (one disk): its lock, identity, checkpoints and partitions.

`LogDir.open` creates the directory if it is missing, takes `.lock` with an exclusive
flock, checks or writes `meta.properties`, writes the space reserve (when asked) before
any recovery, loads every partition (recovering them unless Kafka's clean-shutdown
marker is there) and the `cleaner-offset-checkpoint` (`cleaner_offsets`, kept by
logstore.cleaner), finishes interrupted partition deletions, and removes the marker.
`close(clean=True)` flushes, writes the checkpoints and the marker.

Every filesystem call runs inside the dir's IoGuard (`self.guard`), the one place
where an OSError becomes a verdict on this disk. Not thread-safe: the daemon calls a
LogDir and its logs from that dir's worker thread only.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from pathlib import Path

import native

from . import checkpoint, names
from .config import LogConfig
from .errors import CheckpointError, LogDirLockedError, LogDirSaturatedError, LogStoreError, Verdict
from .failure import FailureChannel, IoGuard, classify
from .log import Log, RecoveryResult
from .names import TopicPartition

RESERVE_FILE = ".logkeeper-reserve"
_RESERVE_CHUNK = 1 << 20


class LogDir:
    def __init__(self, path: Path, config: LogConfig, guard: IoGuard):
        self.path = path
        self.config = config
        self.guard = guard
        self.logs: dict[TopicPartition, Log] = {}
        self.recovery: list[RecoveryResult] = []
        self.clean_shutdown = False
        self.meta: dict[str, str] = {}
        self._lock_fd: int | None = None
        self.created = False  # no meta.properties was there: a new dir, not a crashed one
        self.topic_configs: dict[str, LogConfig] = {}
        # cleaner-offset-checkpoint: each compacted log's first dirty offset.
        self.cleaner_offsets: dict[TopicPartition, int] = {}
        # KRaft's `__cluster_metadata-N` dirs found here (left alone; the daemon says so).
        self.cluster_metadata_logs: list[Path] = []
        # `<topic>-<p>.<id>-future` dirs found here: copies of replica moves to this dir
        # that a stop interrupted (daemon.replica.moves decides what becomes of them).
        self.future_logs: dict[Path, TopicPartition] = {}
        # `-delete` dirs whose removal did not finish (the process ran out of descriptors
        # midway, say): retried by `purge_deleted` at each retention round.
        self.pending_deletes: set[Path] = set()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        broker_id: int | None = None,
        cluster_id: str | None = None,
        failure_channel: FailureChannel | None = None,
        topic_configs: dict[str, LogConfig] | None = None,
        reserve_bytes: int = 0,
    ) -> LogDir:
        root = Path(os.path.abspath(os.fspath(path)))
        guard = IoGuard(root, failure_channel)
        ld = cls(root, config or LogConfig(), guard)
        ld.topic_configs = dict(topic_configs or {})
        with guard.io("open log dir", root):
            root.mkdir(parents=True, exist_ok=True)
            ld._lock()
            try:
                ld._load_meta(broker_id, cluster_id)
                if reserve_bytes > 0:
                    try:
                        ld.create_reserve(reserve_bytes)
                    except LogDirSaturatedError:
                        # A full disk still opens: reads and retention work, and the
                        # failure channel has the SATURATED verdict already.
                        pass
                ld._load_logs()
            except BaseException:
                ld.release()
                raise
        return ld

    # ---- opening ----

    def _lock(self) -> None:
        fd = os.open(self.path / names.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(fd)
            raise LogDirLockedError(
                f"log dir {self.path} is locked by another process ({names.LOCK_FILE})"
            ) from err
        except OSError:
            os.close(fd)
            raise
        self._lock_fd = fd

    def _load_meta(self, broker_id: int | None, cluster_id: str | None) -> None:
        meta_path = self.path / names.META_PROPERTIES
        if meta_path.exists():
            self.meta = checkpoint.read_meta_properties(meta_path)
            # Version 0 (ZooKeeper mode) names the broker by broker.id, version 1 (a
            # KRaft-mode broker's dir) by node.id: one id either way, checked as Kafka does.
            key = "broker.id" if "broker.id" in self.meta else "node.id"
            stored = self.meta.get(key)
            if broker_id is not None and stored is not None and int(stored) != broker_id:
                raise CheckpointError(
                    f"{meta_path}: {key}={stored} but this broker is {broker_id}; "
                    "refusing to serve another broker's log dir")
            stored_cluster = self.meta.get("cluster.id")
            if cluster_id and stored_cluster and stored_cluster != cluster_id:
                raise CheckpointError(
                    f"{meta_path}: cluster.id={stored_cluster} differs from {cluster_id}")
            return
        self.created = True
        self.meta = {"version": "0"}
        if broker_id is not None:
            self.meta["broker.id"] = str(broker_id)
        if cluster_id:
            self.meta["cluster.id"] = cluster_id
        checkpoint.write_meta_properties(meta_path, self.meta)

    def _load_logs(self) -> None:
        marker = self.path / names.CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
        recovery_points = checkpoint.read_offset_checkpoint(
            self.path / names.RECOVERY_POINT_CHECKPOINT)
        start_offsets = checkpoint.read_offset_checkpoint(
            self.path / names.LOG_START_OFFSET_CHECKPOINT)
        watermarks = checkpoint.read_offset_checkpoint(
            self.path / names.REPLICATION_OFFSET_CHECKPOINT)
        self.cleaner_offsets = checkpoint.read_offset_checkpoint(
            self.path / names.CLEANER_OFFSET_CHECKPOINT)
        for entry in sorted(os.listdir(self.path)):
            full = self.path / entry
            if entry.endswith(names.DELETE_DIR_SUFFIX) and full.is_dir():
                self._remove_doomed(full)
                continue
            tp = names.parse_partition_dir(entry)
            if tp is None or not full.is_dir():
                future = names.parse_future_dir(entry)
                if future is not None and full.is_dir():
                    self.future_logs[full] = future
                continue
            if tp.topic == names.CLUSTER_METADATA_TOPIC:
                # A KRaft broker's metadata log: not a topic, and no concern of a broker
                # whose metadata is in ZooKeeper. Left as it is: not served, not recovered,
                # no retention.
                self.cluster_metadata_logs.append(full)
                continue
            log = Log.open(
                full, self.config_for(tp.topic), guard=self.guard,
                recover=not self.clean_shutdown,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp),
                high_watermark=watermarks.get(tp),
            )
            self.logs[tp] = log
            self.recovery.append(log.recovery)
        if self.clean_shutdown:
            marker.unlink()

    def config_for(self, topic: str) -> LogConfig:
        return self.topic_configs.get(topic, self.config)

    # ---- the space reserve ----

    @property
    def reserve_path(self) -> Path:
        return self.path / RESERVE_FILE

    def _write_reserve(self, size: int) -> None:
        # Real blocks, written and synced: a sparse or merely fallocated file could be
        # given back by the filesystem without freeing what deletion would need.
        fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            have = os.fstat(fd).st_size
            chunk = b"\0" * _RESERVE_CHUNK
            pos = have
            while pos < size:
                n = min(_RESERVE_CHUNK, size - pos)
                native.pwrite_all(fd, chunk[:n], pos, path=str(self.reserve_path))
                pos += n
            if have > size:
                os.ftruncate(fd, size)
            native.fdatasync(fd, path=str(self.reserve_path))
        finally:
            os.close(fd)

    def create_reserve(self, size: int) -> None:
        """(Re)write the reserve file; on a full disk the typed error says SATURATED."""
        with self.guard.io("write reserve", self.reserve_path):
            try:
                self._write_reserve(size)
            except OSError as err:
                if classify(err) is Verdict.SATURATED:
                    self.reserve_path.unlink(missing_ok=True)
                raise

    def delete_reserve(self) -> int:
        """Remove the reserve to give retention room; returns the bytes freed."""
        with self.guard.io("delete reserve", self.reserve_path):
            try:
                size = self.reserve_path.stat().st_size
            except FileNotFoundError:
                return 0
            self.reserve_path.unlink()
            return size

    # ---- partitions ----

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get(TopicPartition(topic, partition))

    def create_log(self, topic: str, partition: int, config: LogConfig | None = None, *,
                   topic_id: str | None = None) -> Log:
        """Create (or return the existing) partition; the name is validated first."""
        tp = TopicPartition(topic, partition)
        dir_name = names.partition_dir_name(topic, partition)  # raises before any mkdir
        if tp in self.logs:
            return self.logs[tp]
        full = self.path / dir_name
        with self.guard.io("create partition", full, writing=True):
            if config is not None:
                self.topic_configs[topic] = config
            full.mkdir(exist_ok=True)
            log = Log.open(full, self.config_for(topic), guard=self.guard, recover=False)
            if topic_id:
                checkpoint.write_partition_metadata(full / names.PARTITION_METADATA, topic_id)
                log.topic_id = topic_id
        self.logs[tp] = log
        return log

    def remove_dir(self, full: Path) -> None:
        """Remove a partition-like dir of this log dir that no log is open on (a
        leftover copy of a replica move): renamed to `-delete` first, like a partition."""
        tp = names.parse_partition_dir(full.name) or names.parse_future_dir(full.name)
        unique = uuid.uuid4().hex
        doomed = self.path / (names.delete_dir_name(tp.topic, tp.partition, unique) if tp else
                              f"{full.name[:200]}.{unique}{names.DELETE_DIR_SUFFIX}")
        with self.guard.io("delete dir", full):
            if not full.exists():
                self.future_logs.pop(full, None)
                return
            os.replace(full, doomed)
            self.future_logs.pop(full, None)
            self._remove_doomed(doomed)

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the partition dir to `<topic>-<partition>.<uuid>-delete` (its topic cut
        short to fit: `names.delete_dir_name`), then remove it."""
        tp = TopicPartition(topic, partition)
        log = self.logs.pop(tp, None)
        if log is None:
            return
        log.close_quietly()
        if self.cleaner_offsets.pop(tp, None) is not None:
            self.write_cleaner_checkpoint()
        src = self.path / names.partition_dir_name(topic, partition)
        doomed = self.path / names.delete_dir_name(topic, partition, uuid.uuid4().hex)
        with self.guard.io("delete partition", src):
            os.replace(src, doomed)
            self._remove_doomed(doomed)

    def _remove_doomed(self, doomed: Path) -> None:
        """Remove a dir already renamed to `-delete`. Until it is gone it stays in
        `pending_deletes`, so a removal cut short is finished by `purge_deleted`."""
        self.pending_deletes.add(doomed)
        shutil.rmtree(doomed)
        self.pending_deletes.discard(doomed)

    def purge_deleted(self) -> int:
        """Finish removing the `-delete` dirs an earlier removal left; how many went."""
        done = 0
        for doomed in sorted(self.pending_deletes):
            with self.guard.io("delete dir", doomed):
                if doomed.exists():
                    shutil.rmtree(doomed)
                self.pending_deletes.discard(doomed)
                done += 1
        return done

    # ---- checkpoints and space ----

    def write_checkpoints(self) -> None:
        """Recovery points, high watermarks and log start offsets, atomically each."""
        with self.guard.io("write checkpoints", self.path):
            logs = sorted(self.logs.items())
            checkpoint.write_offset_checkpoint(
                self.path / names.RECOVERY_POINT_CHECKPOINT,
                {tp: log.recovery_point for tp, log in logs})
            checkpoint.write_offset_checkpoint(
                self.path / names.REPLICATION_OFFSET_CHECKPOINT,
                {tp: log.high_watermark for tp, log in logs})
            checkpoint.write_offset_checkpoint(
                self.path / names.LOG_START_OFFSET_CHECKPOINT,
                {tp: log.log_start_offset for tp, log in logs})

    def write_cleaner_checkpoint(self) -> None:
        """cleaner-offset-checkpoint: where each compacted log's dirty section starts."""
        with self.guard.io("write cleaner checkpoint", self.path):
            checkpoint.write_offset_checkpoint(
                self.path / names.CLEANER_OFFSET_CHECKPOINT,
                {tp: off for tp, off in sorted(self.cleaner_offsets.items()) if tp in self.logs})

    def write_high_watermarks(self) -> None:
        """The high watermarks alone (Kafka checkpoints them more often than it flushes)."""
        with self.guard.io("write high watermarks", self.path):
            checkpoint.write_offset_checkpoint(
                self.path / names.REPLICATION_OFFSET_CHECKPOINT,
                {tp: log.high_watermark for tp, log in sorted(self.logs.items())})

    def flush(self) -> None:
        for log in self.logs.values():
            log.flush()

    def space(self) -> native.Space:
        with self.guard.io("space probe", self.path):
            return native.space_probe(str(self.path))

    def size_bytes(self) -> int:
        return sum(log.size_bytes for log in self.logs.values())

    # ---- small files of the dir's own (markers, records) ----

    def read_root_file(self, name: str) -> bytes | None:
        """The bytes of file `name` at the dir's root, or None when there is none."""
        path = self.path / name
        with self.guard.io(f"read {name}", path, writing=False):
            try:
                return path.read_bytes()
            except FileNotFoundError:
                return None

    def write_root_file(self, name: str, data: bytes) -> None:
        """Replace file `name` at the dir's root atomically (temp file, fsync, rename)."""
        path = self.path / name
        with self.guard.io(f"write {name}", path, writing=True):
            checkpoint.write_atomically(path, data)

    def remove_root_file(self, name: str) -> None:
        path = self.path / name
        with self.guard.io(f"remove {name}", path, writing=False):
            path.unlink(missing_ok=True)

    # ---- closing ----

    def close(self, *, clean: bool = True) -> None:
        """Flush, checkpoint, close every log; with `clean` write the shutdown marker."""
        try:
            if clean:
                self.flush()
                self.write_checkpoints()
            with self.guard.io("close log dir", self.path):
                for log in self.logs.values():
                    log.close()
                if clean:
                    checkpoint.write_atomically(self.path / names.CLEAN_SHUTDOWN_FILE, b"")
        finally:
            self.logs.clear()
            self._unlock()

    def release(self) -> None:
        """Drop every fd and the lock without writing anything (an OFFLINE dir)."""
        for log in self.logs.values():
            log.close_quietly()
        self.logs.clear()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            try:
                os.close(self._lock_fd)  # closing the fd drops the flock
            except OSError:
                pass
            self._lock_fd = None


__all__ = ["LogDir", "RESERVE_FILE", "LogStoreError"]
