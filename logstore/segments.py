"""The segments of one partition's log, in base-offset order (Kafka's LogSegments).

`LogSegments` owns the one ordered structure a `Log` keeps its segments in: the last
segment is the active one, and a parallel list of base offsets answers "which segment
holds offset N" with a bisect (`floor_index`). It only keeps the order and opens,
deletes or closes no file: its callers (`Log`, `LogLoader`) do. They mostly delete a
segment's files before removing it here, so a delete that fails leaves it listed
(retention's "delete everything" removes the active segment first, then deletes it).

`open_segment` is the one place a segment is opened with a log's index settings.

Not thread-safe, like the Log that owns it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from pathlib import Path
from typing import overload

from .config import LogConfig
from .segment import LogSegment


def open_segment(directory: Path, base_offset: int, config: LogConfig, *,
                 active: bool) -> LogSegment:
    """Open (creating if missing) the segment at `base_offset` with `config`'s index sizes."""
    return LogSegment(directory, base_offset,
                      index_interval_bytes=config.index_interval_bytes,
                      max_index_bytes=config.max_index_bytes, active=active)


class LogSegments:
    """A log's segments keyed by base offset, oldest first; the last one is active.

    Segments are only ever added at the end (a roll, or the load in offset order) and
    removed from either end (retention and DeleteRecords from the front, truncation and
    recovery from the back), or a run of them replaced by one cleaned segment at the
    first one's base, so a list with its bases beside it is all it takes.
    """

    def __init__(self) -> None:
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []  # _segments[i].base_offset, for bisect
        # The newest segment, the one appends go to (None when there is none): a plain
        # attribute, kept by every change below, since each append reads it.
        self.active: LogSegment = None  # type: ignore[assignment]

    def _changed(self) -> None:
        self.active = self._segments[-1] if self._segments else None  # type: ignore[assignment]

    # ---- adding ----

    def append(self, seg: LogSegment) -> None:
        """Add `seg` as the newest segment (its base offset is above every other's)."""
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._changed()

    # ---- access ----

    @property
    def first(self) -> LogSegment:
        """The oldest segment."""
        return self._segments[0]

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    @overload
    def __getitem__(self, index: int) -> LogSegment: ...

    @overload
    def __getitem__(self, index: slice) -> list[LogSegment]: ...

    def __getitem__(self, index: int | slice) -> LogSegment | list[LogSegment]:
        """One segment by position, or a slice of them as a new list."""
        return self._segments[index]

    def to_list(self) -> list[LogSegment]:
        """A copy of the segments, oldest first (what `Log.segments` hands out)."""
        return list(self._segments)

    def floor_index(self, offset: int) -> int:
        """Index of the segment that would hold `offset`: the last one whose base offset
        is at or below it, or 0 when `offset` is below every base offset (or there are
        no segments)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # ---- removing (the caller has already dealt with the segments' files) ----

    def remove_first(self, count: int) -> None:
        """Drop the `count` oldest segments."""
        del self._segments[:count]
        del self._bases[:count]
        self._changed()

    def remove_after(self, index: int) -> None:
        """Drop every segment after the one at `index`."""
        del self._segments[index + 1:]
        del self._bases[index + 1:]
        self._changed()

    def remove_last(self) -> LogSegment:
        """Drop the newest segment and return it."""
        seg = self._segments.pop()
        self._bases.pop()
        self._changed()
        return seg

    def replace(self, index: int, count: int, seg: LogSegment) -> None:
        """Put `seg` in place of the `count` segments from `index` (a cleaner's swap;
        `seg` has the first one's base offset)."""
        self._segments[index:index + count] = [seg]
        self._bases[index:index + count] = [seg.base_offset]

    def clear(self) -> None:
        """Drop every segment."""
        self._segments.clear()
        self._bases.clear()
        self._changed()
