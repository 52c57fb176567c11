"""The PauseClock: time this process did not run is not counted against a disk.

A probe that times out while the whole daemon stood still (SIGSTOP, a paused VM, a long
swap or scheduler stall) says nothing about the disk: its worker was frozen too.
daemon.health.monitor asks the clock before it calls a probe timeout a hung disk.
"""

from __future__ import annotations

import asyncio
from collections import deque


class PauseClock:
    """Notices when this process's event loop did not run for a while (the process was
    stopped or starved), so that time is not counted against a disk.

    A task ticks every `period` seconds; a gap between ticks longer than `min_stall`
    (beyond the period) is a stall. Loop-only: not thread-safe."""

    def __init__(self, *, min_stall: float, period: float = 0.05):
        self.min_stall = min_stall
        self.period = period
        self._last: float | None = None
        self._stalls: deque[tuple[float, float]] = deque(maxlen=32)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        while True:
            await asyncio.sleep(self.period)
            now = loop.time()
            if now - self._last > self.period + self.min_stall:
                self._stalls.append((self._last, now))
            self._last = now

    def stalled_between(self, start: float, end: float) -> float | None:
        """How long the loop stood still within [start, end], counting a stall still
        going on (no tick for a while: this very call may be the first thing to run
        after one); None when it never stood still for `min_stall`."""
        now = asyncio.get_running_loop().time()
        spans = list(self._stalls)
        if self._last is not None and now - self._last > self.period + self.min_stall:
            spans.append((self._last, now))
        longest = 0.0
        for a, b in spans:
            overlap = min(b, max(end, now)) - max(a, start)
            longest = max(longest, overlap)
        return longest if longest > self.min_stall else None
