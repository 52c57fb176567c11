"""Loading a partition directory at start-up (Kafka's LogLoader).

`LogLoader.load` is the start-up work of `Log.open` (docs/formats.md "Recovery"): it
finishes the operations a crash interrupted (`.deleted`/`.cleaned` files removed, a
cleaned `.log.swap` completed: the segments it replaces deleted, it and its indexes
renamed), removes indexes with no
`.log`, opens the segments in offset order, and then either recovers from the recovery
point on (a dir without the clean-shutdown marker: indexes rebuilt, a torn tail cut,
every segment after a corrupt batch deleted) or, after a clean shutdown, only rebuilds
the indexes that fail the sanity check. From what is left it settles the log start
offset and the recovery point and loads the leader-epoch cache, and hands all of it
back as a `LoadedLog`, with what recovery did in its `RecoveryResult`.

The loader never refuses to open a log for what it finds in the files: it cuts and
reports. OSErrors propagate to `Log.open`, which runs the load inside the log dir's
IoGuard. The high watermark is the Log's business, not the loader's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from native import ScanResult, ScanStatus

from . import names
from .config import LogConfig
from .epochs import LeaderEpochCache
from .scan import scan_file
from .segment import LogSegment
from .segments import LogSegments, open_segment


@dataclass
class RecoveryResult:
    """What opening a log did to it; `bytes_truncated` counts cut and deleted bytes."""

    topic_partition: names.TopicPartition | None
    recovered: bool = False
    segments_recovered: int = 0
    bytes_truncated: int = 0
    segments_deleted: list[int] = field(default_factory=list)
    indexes_rebuilt: list[int] = field(default_factory=list)
    swaps_completed: list[int] = field(default_factory=list)  # cleaned segments swapped in
    # Segments rescanned that hold a transaction marker or a `.txnindex`: their index of
    # aborted transactions may lack the last entries (or list a marker cut), so whoever
    # replays the producer state rebuilds it (daemon.replica.producer.from_log).
    txn_indexes_to_rebuild: list[int] = field(default_factory=list)
    problem: str = ""


@dataclass
class LoadedLog:
    """A loaded partition's state, for `Log.open` to take over."""

    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    epochs: LeaderEpochCache
    recovery: RecoveryResult
    txn_index_bases: frozenset[int] = frozenset()  # segments with a Kafka `.txnindex`
    snapshot_offsets: tuple[int, ...] = ()  # its producer snapshots' offsets, oldest first


def clean_marker_present(partition_dir: Path) -> bool:
    """Whether the partition's log dir holds Kafka's clean-shutdown marker."""
    return (partition_dir.parent / names.CLEAN_SHUTDOWN_FILE).exists()


class LogLoader:
    """Loads one partition directory; `load` once, then hand the result to the Log.

    `recover=None` recovers unless the parent log dir holds the clean-shutdown marker.
    `recovery_point` and `log_start_offset` come from the log dir's checkpoints when the
    caller has them (`log_start_offset=None`: the first segment's base offset).
    """

    def __init__(self, partition_dir: Path, config: LogConfig, *, recover: bool | None,
                 recovery_point: int, log_start_offset: int | None):
        self.dir = partition_dir if isinstance(partition_dir, Path) else Path(partition_dir)
        self.config = config
        self.recover = recover
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.segments = LogSegments()
        self.recovery = RecoveryResult(names.parse_partition_dir(self.dir.name))
        self._markers_in: set[int] = set()  # rescanned segments holding a marker

    def load(self) -> LoadedLog:
        recover = self.recover if self.recover is not None else not clean_marker_present(self.dir)
        self._finish_interrupted_operations()
        listed = [parsed for f in os.listdir(self.dir) if (parsed := names.parse_segment_file(f))]
        bases = sorted(base for base, suffix in listed if suffix == names.LOG_SUFFIX)
        txn_index_bases = frozenset(base for base, suffix in listed
                                    if suffix == names.TXN_INDEX_SUFFIX)
        self._remove_orphan_indexes(set(bases))
        segments = self.segments
        for i, base in enumerate(bases):
            segments.append(open_segment(self.dir, base, self.config,
                                         active=i == len(bases) - 1))
        if not segments:
            segments.append(open_segment(self.dir, self.log_start_offset or 0, self.config,
                                         active=True))
        self.recovery.recovered = recover
        # The checkpoint may lag the batches (a kill -9 after a follower appended a new
        # epoch's first batch): recovery re-derives every epoch from the recovery point on.
        epochs = LeaderEpochCache.load(self.dir / names.LEADER_EPOCH_CHECKPOINT, -1)
        if recover:
            epochs.truncate_from_end(self.recovery_point)
            self._recover_from(self.recovery_point, epochs)
        else:
            for seg in segments:
                if not seg.index_sane():
                    self._recover_insane(seg, epochs)
        log_end_offset = segments.active.next_offset
        first_base = segments.first.base_offset
        start = first_base if self.log_start_offset is None else self.log_start_offset
        log_start_offset = min(max(start, first_base), log_end_offset)
        recovery_point = min(max(self.recovery_point, log_start_offset),
                             log_end_offset) if not recover else log_end_offset
        epochs.truncate_from_end(log_end_offset)
        epochs.truncate_from_start(log_start_offset)
        self.recovery.txn_indexes_to_rebuild = [
            seg.base_offset for seg in segments
            if seg.base_offset in self.recovery.indexes_rebuilt
            and (seg.base_offset in self._markers_in or seg.base_offset in txn_index_bases)]
        return LoadedLog(segments=segments, log_start_offset=log_start_offset,
                         recovery_point=recovery_point, epochs=epochs, recovery=self.recovery,
                         txn_index_bases=txn_index_bases,
                         snapshot_offsets=tuple(sorted(
                             base for base, suffix in listed
                             if suffix == names.SNAPSHOT_SUFFIX)))

    def _finish_interrupted_operations(self) -> None:
        """Remove `.deleted` and `.cleaned` files and complete every swap a crash
        interrupted (Kafka's LogLoader): a `.log.swap` is a whole cleaned segment, so the
        segments it replaces go and it takes its final name; an index `.swap` whose
        `.log` never reached `.swap` belonged to a clean that did not finish."""
        swaps = []
        for name in os.listdir(self.dir):
            if name.endswith(names.DELETED_SUFFIX) or name.endswith(names.CLEANED_SUFFIX):
                (self.dir / name).unlink()
            elif (parsed := names.parse_segment_file(name)) \
                    and parsed[1] == names.LOG_SUFFIX + names.SWAP_SUFFIX:
                swaps.append(parsed[0])
        for base in sorted(swaps):
            self._complete_swap(base)
        for name in os.listdir(self.dir):
            if name.endswith(names.SWAP_SUFFIX):
                (self.dir / name).unlink()

    def _complete_swap(self, base: int) -> None:
        """Delete the segments the cleaned `<base>.log.swap` replaces (the one at its base
        and every one that starts inside its offsets), then rename it and its indexes."""
        stem = names.offset_file_stem(base)
        swap = self.dir / (stem + names.LOG_SUFFIX + names.SWAP_SUFFIX)
        end = base
        fd = os.open(swap, os.O_RDONLY)
        try:
            def last(res: ScanResult) -> None:
                nonlocal end
                end = res[len(res) - 1].next_offset

            scan_file(fd, verify_crc=False, on_batches=last, path=str(swap), legacy=True)
        finally:
            os.close(fd)
        replaced = (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX,
                    names.TXN_INDEX_SUFFIX)
        for name in os.listdir(self.dir):
            parsed = names.parse_segment_file(name)
            if parsed and parsed[1] in replaced and base <= parsed[0] < max(end, base + 1):
                (self.dir / name).unlink()
        for suffix in (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX,
                       names.LOG_SUFFIX):
            path = self.dir / (stem + suffix + names.SWAP_SUFFIX)
            if path.exists():
                os.replace(path, self.dir / (stem + suffix))
        self.recovery.swaps_completed.append(base)

    def _remove_orphan_indexes(self, bases: set[int]) -> None:
        for name in os.listdir(self.dir):
            parsed = names.parse_segment_file(name)
            if parsed and parsed[1] in (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX) \
                    and parsed[0] not in bases:
                (self.dir / name).unlink()

    def _recover_from(self, recovery_point: int, epochs: LeaderEpochCache) -> None:
        """Walk every segment from the one holding `recovery_point` on; at the first one
        with a torn tail or a corrupt batch, cut it, delete every later segment and make
        it the active one."""
        segments = self.segments
        start = segments.floor_index(recovery_point)
        for seg in segments[:start]:
            if not seg.index_sane():
                self._recover_insane(seg, epochs)
        i = start
        while i < len(segments):
            seg = segments[i]
            scan, cut, markers = seg.recover(epochs)
            if markers:
                self._markers_in.add(seg.base_offset)
            self.recovery.segments_recovered += 1
            self.recovery.indexes_rebuilt.append(seg.base_offset)
            if cut or scan.status not in (ScanStatus.OK,):
                self.recovery.bytes_truncated += cut
                self.recovery.problem = f"{seg.log_path}: {scan.detail}"
                if i + 1 < len(segments):
                    for later in segments[i + 1:]:
                        self.recovery.bytes_truncated += later.size
                        self.recovery.segments_deleted.append(later.base_offset)
                        later.delete()
                    segments.remove_after(i)
                    if not seg.active:
                        seg.become_active()
                break
            i += 1
        # A segment left empty in the middle has no offsets to serve; keep it only last.

    def _recover_insane(self, seg: LogSegment, epochs: LeaderEpochCache) -> None:
        """Rebuild the indexes of a segment that failed the load-time sanity check (as
        Kafka does, without deleting later segments), reporting any tail it cut."""
        scan, cut, markers = seg.recover(epochs)
        if markers:
            self._markers_in.add(seg.base_offset)
        self.recovery.indexes_rebuilt.append(seg.base_offset)
        if cut or not scan.clean:
            self.recovery.bytes_truncated += cut
            self.recovery.problem = f"{seg.log_path}: {scan.detail}"
