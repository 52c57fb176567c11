"""Log compaction of a log with transactions (logstore.cleaner, Kafka's rules): an
aborted transaction's records are removed whatever their keys and never shadow a
committed value; markers stay while their transaction's batches do, then for
delete.retention.ms; the cleaned segment's `.txnindex` keeps what read_committed
readers still need; a clean never passes the last stable offset; an active producer's
last batch stays. The log is written as a partition's leader writes it, its producer
state and `.txnindex` kept by daemon.replica.producer."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.replica import producer as producer_state
from logstore import LogConfig, LogDir, names
from logstore.cleaner import LogDirCleaner
from logstore.records import (
    ATTR_DELETE_HORIZON,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Batch,
    Record,
    build_batch,
    control_batch,
    control_record,
    iter_batches,
)
from logstore.segment import LogSegment
from logstore.txnindex import AbortedTxn

NOW = 1_700_000_000_000
DAY = 24 * 3600 * 1000
CONFIG = LogConfig(compacted=True, segment_bytes=4096, index_interval_bytes=256,
                   min_cleanable_dirty_ratio=0.01)


class Partition:
    """A compacted log and its producers, appended to as the leader does (producer
    checks, transactions opened by their first batch, markers closing them)."""

    def __init__(self, ld: LogDir, name: str = "state"):
        self.ld = ld
        self.log = ld.create_log(name, 0, CONFIG)
        self.producers = producer_state.PartitionProducers()
        self.sequences: dict[int, int] = {}

    def write(self, pid: int, records: list[tuple[bytes, bytes | None]], *,
              transactional: bool = True) -> int:
        seq = self.sequences.get(pid, 0)
        batch = build_batch([Record(k, v, [], NOW) for k, v in records], producer_id=pid,
                            producer_epoch=0, base_sequence=seq, transactional=transactional)
        checked = producer_state.check(self.producers, batch)
        assert not checked.error, checked
        info = self.log.append(batch)
        producer_state.record(self.producers, checked.token, info.base_offset)
        if transactional:
            producer_state.begin_txn(self.producers, pid, info.base_offset)
        self.sequences[pid] = seq + len(records)
        return info.base_offset

    def plain(self, records: list[tuple[bytes, bytes | None]]) -> None:
        self.log.append(build_batch([Record(k, v, [], NOW) for k, v in records]))

    def end(self, pid: int, *, commit: bool) -> int:
        info = self.log.append(control_batch(pid, 0, commit=commit, coordinator_epoch=0,
                                             timestamp=NOW), checked=True)
        producer_state.end_txn(self.producers, pid, 0, 0,
                               CONTROL_COMMIT if commit else CONTROL_ABORT, info.base_offset,
                               self.log)
        return info.base_offset

    def clean(self, now: int = NOW) -> int:
        """Roll (the active segment is never cleaned), then clean until nothing is due."""
        self.log.roll()
        self.log.high_watermark = self.log.log_end_offset
        return LogDirCleaner(self.ld, producers_of=self.producers_of).run(now)

    def producers_of(self, tp: names.TopicPartition, log: object) -> producer_state.ActiveProducers:
        return producer_state.for_cleaner(self.producers, self.log)

    def batches(self) -> list[Batch]:
        return [b for seg in self.log.segments for b in iter_batches(seg.read_exact(0, seg.size))]

    def values(self) -> dict[bytes, bytes | None]:
        """Every key's latest value as a read_uncommitted consumer reads the log."""
        out = {}
        for b in self.batches():
            if not b.is_control:
                out.update((r.key, r.value) for r in b.records())
        return out

    def markers(self) -> list[tuple[int, int, int, bool]]:
        """(offset, producer id, type, delete horizon stamped) of each marker left."""
        return [(b.base_offset, b.producer_id, control_record(b.data)[0],
                 bool(b.attributes & ATTR_DELETE_HORIZON))
                for b in self.batches() if b.is_control and b.records_count]


def keys(n: int, value: str) -> list[tuple[bytes, bytes]]:
    return [(b"key-%d" % k, f"{value}-{k}".encode() * 10) for k in range(n)]


def test_aborted_records_go_whatever_their_keys_and_markers_go_after_their_data(
        tmp_path: Path) -> None:
    ld = LogDir.open(tmp_path / "d", CONFIG)
    p = Partition(ld)
    p.plain(keys(10, "plain"))
    # Producer 1 commits keys 0-4; producer 2's transaction, interleaved with it,
    # writes every key and aborts: its values are the newest and must not win.
    p.write(1, keys(5, "committed")[:3])
    first_aborted = p.write(2, keys(10, "aborted")[:5])
    p.write(1, keys(5, "committed")[3:])
    p.write(2, keys(10, "aborted")[5:])
    commit = p.end(1, commit=True)
    abort = p.end(2, commit=False)
    p.plain([(b"other", b"x")])  # the active producers' last entries are not the run's end
    assert p.log.aborted_txns(0, p.log.log_end_offset) == [
        AbortedTxn(2, first_aborted, abort, abort + 1)]

    assert p.clean() == 1
    expected = {**dict(keys(10, "plain")), **dict(keys(5, "committed")), b"other": b"x"}
    assert p.values() == expected, "aborted values are gone, read uncommitted too"
    # Both markers stay in this clean: its data went in it (abort), or is still there.
    assert [(o, pid, kind) for o, pid, kind, _ in p.markers()] == [
        (commit, 1, CONTROL_COMMIT), (abort, 2, CONTROL_ABORT)]
    # The abort's entry is in the cleaned segment's `.txnindex`, and a reopen finds it.
    cleaned = p.log.segments[0]
    assert (p.log.dir / (names.offset_file_stem(cleaned.base_offset)
                         + names.TXN_INDEX_SUFFIX)).exists()
    assert p.log.aborted_txns(0, p.log.log_end_offset) == [
        AbortedTxn(2, first_aborted, abort, abort + 1)]
    ld.close()
    ld = LogDir.open(tmp_path / "d", CONFIG)
    p.ld, p.log = ld, ld.get_log("state", 0)
    assert p.log.aborted_txns(0, p.log.log_end_offset) == [
        AbortedTxn(2, first_aborted, abort, abort + 1)]
    assert p.values() == expected

    # Later values of keys 0-4, and a later transaction of each producer (their last
    # entries move on: an active producer's last batch stays, emptied, below).
    p.plain(keys(5, "final"))
    p.write(1, [(b"p1", b"later")])
    later1 = p.end(1, commit=True)
    p.write(2, [(b"p2", b"later")])
    later2 = p.end(2, commit=True)

    def stamped() -> dict[int, bool]:
        return {offset: stamp for offset, _, _, stamp in p.markers()}

    # This clean removes what was left of both old transactions (producer 1's
    # superseded records, producer 2's emptied last batch): their markers stay in it.
    assert p.clean(NOW + 1000) == 1
    assert stamped() == {commit: False, abort: False, later1: False, later2: False}
    assert p.log.aborted_txns(0, p.log.log_end_offset) == [
        AbortedTxn(2, first_aborted, abort, abort + 1)]
    # The next clean meets nothing of them before their markers: stamped with a
    # delete horizon, and the abort's index entry goes.
    p.plain([(b"other", b"y")])
    p.clean(NOW + 2000)
    assert stamped() == {commit: True, abort: True, later1: False, later2: False}
    assert p.log.aborted_txns(0, p.log.log_end_offset) == []
    assert not list(p.log.dir.glob("*" + names.TXN_INDEX_SUFFIX))
    # Within delete.retention.ms they stay; after it they go. The later commits'
    # markers stay with their data.
    p.plain([(b"other", b"z")])
    p.clean(NOW + DAY - 1)
    assert stamped() == {commit: True, abort: True, later1: False, later2: False}
    p.plain([(b"other", b"w")])
    p.clean(NOW + 2000 + DAY)
    assert stamped() == {later1: False, later2: False}
    assert p.values() == {**dict(keys(10, "plain")), **dict(keys(5, "final")),
                          b"other": b"w", b"p1": b"later", b"p2": b"later"}
    ld.close()


def test_a_clean_stays_below_an_open_transaction_until_it_ends(tmp_path: Path) -> None:
    ld = LogDir.open(tmp_path / "d", CONFIG)
    p = Partition(ld)
    p.plain(keys(10, "round-0"))
    p.log.roll()
    opened = p.write(7, [(b"key-0", b"in the transaction")])
    p.log.roll()
    for r in range(1, 6):
        p.plain(keys(10, f"round-{r}"))
        p.log.roll()
    assert p.producers.last_stable_offset(p.log.log_end_offset, 0) == opened
    p.clean()
    # Only what lies below the open transaction's segment was cleaned: every later
    # round is still there, and so is the open transaction's record.
    cp = ld.cleaner_offsets[names.TopicPartition("state", 0)]
    assert cp <= opened
    rounds = {r.value for b in p.batches() if not b.is_control for r in b.records()}
    assert all(f"round-{r}-3".encode() * 10 in rounds for r in range(1, 6))
    assert b"in the transaction" in rounds
    # Aborted: it goes, and everything else is cleaned to the latest round.
    p.end(7, commit=False)
    p.clean()
    assert p.values() == dict(keys(10, "round-5"))
    kept = [r for b in p.batches() if not b.is_control for r in b.records()]
    assert len(kept) == 10
    ld.close()


def test_an_active_producers_last_batch_stays_as_an_empty_header(tmp_path: Path) -> None:
    """An idempotent producer's last batch, all of whose records later writes
    superseded, keeps its header: its sequence still catches a retry after a restart."""
    ld = LogDir.open(tmp_path / "d", CONFIG)
    p = Partition(ld)
    last = p.write(3, keys(4, "idempotent"), transactional=False)
    p.plain(keys(4, "newer"))
    p.clean()
    kept = [b for b in p.batches() if b.producer_id == 3]
    assert [(b.base_offset, b.records_count, b.base_sequence) for b in kept] == [(last, 0, 0)]
    assert p.values() == dict(keys(4, "newer"))
    # Rebuilt from the cleaned log, the producer's state still knows that batch.
    rebuilt = producer_state.from_log(p.log)
    assert rebuilt[3].batches[-1].first_offset == last
    ld.close()


class Crash(BaseException):
    """Stands for a kill -9 at that point (the process ends; nothing else runs)."""


def test_a_crash_mid_swap_leaves_the_cleaned_transaction_index_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap renames `.txnindex.cleaned` to `.swap` with the segment's other files
    (before the `.log`), and the loader completing the swap gives it its final name:
    read_committed readers still skip the aborted transaction's last batch."""
    ld = LogDir.open(tmp_path / "d", CONFIG)
    p = Partition(ld)
    p.plain(keys(10, "plain"))
    first = p.write(2, keys(10, "aborted"))
    abort = p.end(2, commit=False)
    p.plain([(b"other", b"x")])

    def crash(self: LogSegment, **kw: object) -> None:
        raise Crash()

    monkeypatch.setattr(LogSegment, "delete", crash)
    with pytest.raises(Crash):
        p.clean()
    monkeypatch.undo()
    pdir = p.log.dir
    assert sorted(f.name for f in pdir.glob("*.swap")) == [
        names.offset_file_stem(0) + s + names.SWAP_SUFFIX
        for s in (names.INDEX_SUFFIX, names.LOG_SUFFIX, names.TIME_INDEX_SUFFIX,
                  names.TXN_INDEX_SUFFIX)]
    ld.release()
    ld = LogDir.open(tmp_path / "d", CONFIG)
    log = ld.get_log("state", 0)
    assert not list(pdir.glob("*.swap"))
    assert log.aborted_txns(0, log.log_end_offset) == [AbortedTxn(2, first, abort, abort + 1)]
    values = {r.key: r.value for seg in log.segments
              for b in iter_batches(seg.read_exact(0, seg.size)) if not b.is_control
              for r in b.records()}
    assert values == {**dict(keys(10, "plain")), b"other": b"x"}
    ld.close()
