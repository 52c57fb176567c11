"""A partition's leader-epoch cache: which leader epoch wrote which offsets.

Kafka keeps, per partition, the start offset of every leader epoch whose leader wrote
records (`leader-epoch-checkpoint`, docs/formats.md: version 0, a count, then `epoch
startOffset` lines). Followers use it to find where their log diverged from the
leader's (OffsetForLeaderEpoch, or Fetch v12's diverging epoch), and truncate there.
The rules are Kafka's LeaderEpochFileCache (3.9):

- `assign(epoch, start_offset)`: a negative epoch is ignored; an entry for the latest
  epoch at a start offset that is not lower is a no-op; otherwise every entry whose
  epoch or start offset is >= the new one's is dropped (they can only come from an
  uncommitted tail the log no longer holds) and the new entry is appended.
- `end_offset_for(epoch, log_end_offset)`: the end of `epoch`, i.e. the start offset of
  the first higher epoch (the log end for the latest epoch), paired with the largest
  epoch <= the one asked for; (-1, -1) when the asked epoch is -1 or above every known
  epoch.
- `truncate_from_end(end_offset)` after the log is cut: entries starting at or past the
  new end go. `truncate_from_start(start_offset)` after the log start moves up:
  entries wholly below it go and the one covering it starts there.

Not thread-safe: the owning Log serialises every call; only `latest_epoch` may be read
from another thread meanwhile (the entry list is replaced, never changed in place).
`write()` raises OSError on a disk error; the Log runs it inside its log dir's IoGuard.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from . import checkpoint

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, path: str | os.PathLike[str], entries: list[EpochEntry] | None = None):
        self._path_str = os.fspath(path)  # a str, not a Path: see LogSegment
        self._entries: list[EpochEntry] = list(entries or [])
        self._dirty = False

    @classmethod
    def load(cls, path: str | os.PathLike[str], log_end_offset: int) -> LeaderEpochCache:
        """Read the checkpoint (none or a 0-byte file: no entries), dropping entries that
        start at or past the log end (a tail lost in a crash or cut by recovery)."""
        cache = cls(path, [EpochEntry(e, o) for e, o in checkpoint.read_leader_epoch_checkpoint(path)])
        cache.truncate_from_end(log_end_offset)
        return cache

    @property
    def path(self) -> Path:
        return Path(self._path_str)

    # ---- reading ----

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        entries = self._entries  # read once: the list a concurrent change replaces
        return entries[-1].epoch if entries else UNDEFINED_EPOCH

    @property
    def earliest(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose leader wrote `offset` (the last entry starting at or below it)."""
        found = UNDEFINED_EPOCH
        for e in self._entries:
            if e.start_offset > offset:
                break
            found = e.epoch
        return found

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= `epoch`, the offset where `epoch` ended); see module doc."""
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > epoch), None)
        if higher is None:  # above every epoch we know
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for e in self._entries:
            if e.epoch > epoch:
                break
            floor = e
        if floor is None:
            # Older than anything left here (retention took it): the follower replicates
            # from the first epoch we still have.
            return epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    # ---- changing ----

    def holds(self, epoch: int, start_offset: int) -> bool:
        """Whether the cache already says `epoch` covers `start_offset` (its latest entry
        is that epoch, starting at or below it), so `assign` would change nothing: the
        append path asks this first, on every leader's append."""
        entries = self._entries
        if not entries:
            return False
        last = entries[-1]
        return last.epoch == epoch and start_offset >= last.start_offset

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True when the cache changed."""
        if epoch < 0 or self.holds(epoch, start_offset):
            return False
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        kept.append(EpochEntry(epoch, start_offset))
        self._entries = kept
        self._dirty = True
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        self._entries = [e for e in self._entries if e.start_offset < end_offset]
        self._dirty = True

    def truncate_from_start(self, start_offset: int) -> None:
        below = [e for e in self._entries if e.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return
        rest = self._entries[len(below):]
        self._entries = [EpochEntry(below[-1].epoch, start_offset), *rest]
        self._dirty = True

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._dirty = True

    # ---- the checkpoint ----

    def write(self, *, force: bool = False) -> None:
        """Write `leader-epoch-checkpoint` atomically when anything changed since the last
        write (or `force`). An empty cache writes an empty list, as Kafka does."""
        if not (self._dirty or force):
            return
        checkpoint.write_leader_epoch_checkpoint(self._path_str, self._entries)
        self._dirty = False
