"""The leader-epoch cache: Kafka's LeaderEpochFileCache rules and its checkpoint file."""

from __future__ import annotations

import native
from logstore import Log, LogConfig, names
from logstore.epochs import EpochEntry, LeaderEpochCache

from .logutil import batch


def cache(tmp_path, *entries):
    c = LeaderEpochCache(tmp_path / names.LEADER_EPOCH_CHECKPOINT)
    for e, o in entries:
        c.assign(e, o)
    return c


def test_assign_keeps_epochs_and_start_offsets_increasing(tmp_path):
    c = cache(tmp_path, (1, 0), (1, 5), (2, 10), (-1, 12))
    assert c.entries == [(1, 0), (2, 10)]  # same epoch further on, or no epoch: no entry
    assert c.assign(2, 8)  # the latest epoch from a lower offset moves its start
    assert c.entries == [(1, 0), (2, 8)]
    assert c.assign(4, 20) and c.assign(3, 15)  # an older epoch later on: 4's tail is gone
    assert c.entries == [(1, 0), (2, 8), (3, 15)]
    assert c.assign(5, 6)  # below earlier starts: those entries are dropped
    assert c.entries == [(1, 0), (5, 6)]
    assert c.latest_epoch == 5 and c.epoch_for_offset(3) == 1 and c.epoch_for_offset(9) == 5


def test_end_offset_for_an_epoch(tmp_path):
    c = cache(tmp_path, (2, 10), (4, 20), (7, 35))
    leo = 50
    assert c.end_offset_for(7, leo) == (7, 50)  # the latest epoch ends at the log end
    assert c.end_offset_for(4, leo) == (4, 35)
    assert c.end_offset_for(5, leo) == (4, 35)  # unknown: the floor epoch, the next start
    assert c.end_offset_for(1, leo) == (1, 10)  # below the earliest (retention took it)
    assert c.end_offset_for(8, leo) == (-1, -1)  # above every known epoch
    assert c.end_offset_for(-1, leo) == (-1, -1)
    assert LeaderEpochCache(tmp_path / "x").end_offset_for(0, leo) == (-1, -1)


def test_truncation_from_either_end(tmp_path):
    c = cache(tmp_path, (2, 10), (4, 20), (7, 35))
    c.truncate_from_end(36)
    assert c.entries == [(2, 10), (4, 20), (7, 35)]
    c.truncate_from_end(35)
    assert c.entries == [(2, 10), (4, 20)]
    c.truncate_from_start(25)
    assert c.entries == [(4, 25)]
    c.truncate_from_start(5)
    assert c.entries == [(4, 25)]


def test_checkpoint_is_kafkas_format_and_reloads_within_the_log(tmp_path):
    c = cache(tmp_path, (0, 0), (3, 7))
    c.write()
    assert c.path.read_text() == "0\n2\n0 0\n3 7\n"
    assert LeaderEpochCache.load(c.path, 20).entries == [EpochEntry(0, 0), EpochEntry(3, 7)]
    assert LeaderEpochCache.load(c.path, 7).entries == [(0, 0)]  # a tail cut in recovery


def test_holds_is_what_assign_would_leave_unchanged(tmp_path):
    cases = {(4, 20): True, (4, 31): True,
             (4, 19): False,  # the latest epoch from lower down: assign moves its start
             (5, 31): False, (2, 31): False}  # another epoch
    for (epoch, start), held in cases.items():
        c = cache(tmp_path, (2, 10), (4, 20))
        assert c.holds(epoch, start) is held
        assert c.assign(epoch, start) is not held
    assert not cache(tmp_path).holds(0, 0)  # nothing cached yet


def test_a_leaders_appends_record_its_epoch_once_and_each_new_one(tmp_path):
    """A leader's appends carry its epoch: the cache and its checkpoint get an entry when
    the epoch is new to them (its first append, a new leadership, an epoch the cache lost
    to a truncation), and the appends after it leave both alone."""
    lg = Log.open(tmp_path / "t-0", LogConfig())
    checkpoint = tmp_path / "t-0" / names.LEADER_EPOCH_CHECKPOINT
    lg.append(batch(2), leader_epoch=3)
    assert lg.epochs.entries == [(3, 0)] and checkpoint.read_text() == "0\n1\n3 0\n"
    checkpoint.write_text("0\n1\n3 0\n")  # rewritten: its mtime would say little
    stamp = checkpoint.stat().st_mtime_ns
    for _ in range(5):
        lg.append(batch(2), leader_epoch=3)
    assert lg.epochs.entries == [(3, 0)] and checkpoint.stat().st_mtime_ns == stamp
    lg.append(batch(2), leader_epoch=5)  # a new leadership here
    assert lg.epochs.entries == [(3, 0), (5, 12)]
    assert checkpoint.read_text() == "0\n2\n3 0\n5 12\n"
    lg.truncate_to(12)  # epoch 5's records cut: the cache forgets it
    assert lg.epochs.entries == [(3, 0)]
    lg.append(batch(2), leader_epoch=5)
    assert lg.epochs.entries == [(3, 0), (5, 12)]
    lg.close()
    assert Log.open(tmp_path / "t-0", LogConfig()).epochs.entries == [(3, 0), (5, 12)]


def _with_epochs(*epochs: int, start: int = 0) -> bytes:
    """Batches as a follower fetches them: offsets and leader epochs already set."""
    out, offset = b"", start
    for e in epochs:
        data = bytearray(batch(2))
        offset = native.assign_offsets(data, offset, e)
        out += bytes(data)
    return out


def test_a_follower_append_records_every_new_epoch_in_it(tmp_path):
    """One follower append holding batches of epochs 1, 1, 2, 4: three entries (only the
    first batch's epoch was recorded before)."""
    lg = Log.open(tmp_path / "t-0", LogConfig())
    lg.append(_with_epochs(1, 1, 2, 4), assign_offsets=False)
    assert lg.epochs.entries == [(1, 0), (2, 4), (4, 6)]
    lg.close()
    assert (tmp_path / "t-0" / names.LEADER_EPOCH_CHECKPOINT).read_text() == "0\n3\n1 0\n2 4\n4 6\n"
    lg = Log.open(tmp_path / "t-0", LogConfig())
    assert lg.epochs.entries == [(1, 0), (2, 4), (4, 6)]
    assert lg.epochs.end_offset_for(2, lg.log_end_offset) == (2, 6)
    lg.truncate_to(6)  # a follower cutting a diverged tail (the epoch-4 batch)
    assert lg.epochs.entries == [(1, 0), (2, 4)]
    lg.append(batch(1), leader_epoch=6)  # a new leader here
    assert lg.epochs.entries == [(1, 0), (2, 4), (6, 6)]
    lg.delete_records(5)  # the log start moves into epoch 2
    assert lg.epochs.entries == [(2, 5), (6, 6)]
    lg.truncate_to(0)
    assert lg.epochs.entries == []
    lg.close()


def test_a_follower_kill_9_keeps_every_epoch_it_appended(tmp_path):
    """A follower killed with -9 right after appending batches of new epochs: the
    checkpoint already holds them (written with the append, as Kafka's assign does); and
    when a checkpoint lags the log anyway (an older file), recovery re-derives the epochs
    from the batches past the recovery point. Before, a restarted follower's cache lost
    epochs 0 and 1 and began at the next epoch it fetched, so as a leader it would have
    answered OffsetForLeaderEpoch wrongly."""
    part = tmp_path / "t-0"
    checkpoint = part / names.LEADER_EPOCH_CHECKPOINT
    lg = Log.open(part, LogConfig())
    lg.append(_with_epochs(0, 0, 1, 1, 2), assign_offsets=False)
    assert checkpoint.read_text() == "0\n3\n0 0\n1 4\n2 8\n"  # no flush, no close
    lg.flush()  # recovery point 10
    lg.append(_with_epochs(2, 3, 5, start=10), assign_offsets=False)
    assert lg.epochs.entries == [(0, 0), (1, 4), (2, 8), (3, 12), (5, 14)]
    # Kill -9 (no close) with a checkpoint from before the last append.
    checkpoint.write_text("0\n3\n0 0\n1 4\n2 8\n")
    lg = Log.open(part, LogConfig(), recovery_point=10)
    assert lg.recovery.recovered
    assert lg.epochs.entries == [(0, 0), (1, 4), (2, 8), (3, 12), (5, 14)]
    assert lg.epochs.end_offset_for(3, lg.log_end_offset) == (3, 14)
    lg.close()
